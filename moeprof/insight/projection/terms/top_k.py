"""The ``top_k`` term (moeprof's own; docs/metrics.md, "Projection"): ``top_k=K``, the step with each token
routed to ``K`` experts instead of the program's ``k``, the experts unchanged.

What changes is read from the program's HLO shapes (:mod:`.program`) and timed by :mod:`.resize`: the arrays
of the routed rows (``k·T``: the token movement around the experts, the exchanges, the experts' rows) and of
the ``[T, k, ..]`` copies take ``K/k`` times their size; the experts' grouped GEMMs run the tiles of ``K·T``
rows. At ``K = 1`` (from ``k > 1``) the program has one copy per token: the ops that only relayout the
copies between ``[k·T, ..]`` and ``[T, k, ..]``, sum over them, or transpose a ``[T, ..]`` array's layout for
such ops are gone (:func:`.program._single_copy`). From ``k = 1`` the routed rows are the tokens (``T`` both):
they are the ``T`` rows of the ops the MoE layer's scope names (not its router, not a shared expert), and the
projection is a lower bound: the ops a top-K program adds to relayout and sum the K copies have no op in the
top-1 program to time them from (the note says so).
"""

from __future__ import annotations

from collections.abc import Sequence

from ....core.analysis import Opportunity
from ..job import ReplayJob
from ..selection import parse_filters
from .base import Changing, WhatIf, bad, factor_of
from .program import Program
from .resize import Resize, Resized, resize_term, said

NAME = "top_k"


class TopK:
    name: str = NAME
    forms: tuple[str, ...] = ("top_k=K", "top_k(FILTERS)=K")
    help: str = (
        "each token routed to K experts instead of k, the experts unchanged: the routed rows, the grouped "
        "GEMMs' tiles and the sums over the k copies resized from the HLO shapes"
    )

    def parse(self, text: str, body: str | None, factor: str | None) -> WhatIf:
        value = factor_of(text, factor, "top_k needs the new top-k: top_k=K (K experts per token)", "top-k")
        if value < 1 or value != int(value):
            raise bad(text, f"top-k {factor!r} must be a whole number of experts, 1 or more")
        return WhatIf(text.strip(), NAME, parse_filters(text, body or ""), value)

    def apply(self, job: ReplayJob, term: WhatIf, state: Changing, opportunities: Sequence[Opportunity]) -> int:
        to = int(term.factor)

        def resize(program: Program) -> Resize | None:
            if not program.top_k or program.capacity or (program.experts and to > program.experts):
                return None
            return Resize(routed=to / program.top_k, single_copy=to == 1 and program.top_k > 1)

        def told(program: Program, resized: Resized) -> tuple[str, dict[str, object]]:
            k = program.top_k
            head = (
                f"top-k {k:g} → {to} (T = {program.tokens:,}; the experts' rows {program.rows:,} → "
                f"{round(program.rows * to / k):,})"
            )
            note = said(head, resized, "the relayouts and sums of the k copies: one copy per token")
            if k == 1 and to > 1:
                note += (
                    f"; a lower bound: the top-{to} program also relayouts the {to} copies of each token and sums "
                    "them, work the top-1 program has no op for (not counted)"
                )
            return note, {"from": round(k) if k == round(k) else k, "to": to}

        def why_not(held: Sequence[Program]) -> str:
            fewer = [p for p in held if p.ok() and p.experts and to > p.experts]
            if fewer:
                return (
                    f"top_k={to}: the program has {fewer[0].experts} routed experts, so a token goes to at most "
                    f"{fewer[0].experts} (experts=F adds experts): nothing changed"
                )
            if any(p.capacity for p in held):
                return (
                    f"top_k={to}: a program padded to capacity (its buffers follow the capacity, not k): use "
                    "capacity=F with tokens(routed)=F; nothing changed"
                )
            return (
                f"top_k={to}: the program's top-k is not known (its experts' rows are no multiple of T): nothing "
                "changed"
            )

        return resize_term(job, term, state, opportunities, resize, told, why_not)


TERM = TopK()
