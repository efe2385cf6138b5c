"""The ``capacity`` term (moeprof's own; docs/metrics.md, "Projection"): ``capacity=F``, the step of a program
padded to capacity with capacity factor ``F`` instead of its own.

A program padded to capacity gives every expert ``C = ceil(F·k·T/E)`` rows whatever the routing (tokens past
it are dropped; the groups of its grouped GEMM are a broadcast of one value, :func:`.program._constant_groups`).
Its own factor is read from the HLO: ``C·E / (k·T)``. The experts' buffers (``E·C`` rows: the dispatch's
scatter into them, the experts' rows, the combine's gather from them, their gradients) take ``C'/C`` times
their size (:mod:`.resize`); the assignments (``k·T``) do not change. The padded work does not depend on how
many tokens are dropped. A dropless program (its groups follow the routing) has no capacity to change: the
term says so and changes nothing (dropless ↔ capacity compiles another dispatch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ....core.analysis import Opportunity
from ..job import ReplayJob
from ..selection import parse_filters, select
from .base import Changing, WhatIf, bad, factor_of
from .program import Program
from .resize import Resize, resize_job, said

NAME = "capacity"


def capacity_rows(program: Program, factor: float) -> int:
    """``C`` at capacity factor ``factor``: ``ceil(F·k·T/E)`` rows per expert (MaxText's, the demo's)."""
    return max(1, math.ceil(factor * program.top_k * program.tokens / program.experts - 1e-9))


class Capacity:
    name: str = NAME
    forms: tuple[str, ...] = ("capacity=F", "capacity(FILTERS)=F")
    help: str = (
        "a program padded to capacity run at capacity factor F: the experts' buffers (E·C rows), their "
        "exchanges and grouped GEMMs resized from the HLO shapes"
    )

    def parse(self, text: str, body: str | None, factor: str | None) -> WhatIf:
        value = factor_of(text, factor, "capacity needs a capacity factor: capacity=F (e.g. capacity=1.25)")
        if value <= 0:
            raise bad(text, f"capacity factor {factor!r} must be above 0")
        return WhatIf(text.strip(), NAME, parse_filters(text, body or ""), value)

    def apply(self, job: ReplayJob, term: WhatIf, state: Changing, opportunities: Sequence[Opportunity]) -> int:
        chosen = select(job, term, opportunities)
        seen: list[Program] = []

        def resize(program: Program) -> Resize | None:
            if not program.capacity or not program.top_k:
                seen.append(program)
                return None
            return Resize(capacity=capacity_rows(program, term.factor) / program.capacity)

        resized = resize_job(job, state, chosen, resize)
        state.duration, state.transfer = resized.duration, resized.transfer
        if not resized.programs:
            note = _why_not(seen, term.factor)
        else:
            program = resized.programs[0]
            after = capacity_rows(program, term.factor)
            head = (
                f"capacity factor {program.capacity_factor:.3g} → {term.factor:g} (C = {program.capacity:,} → "
                f"{after:,} rows per expert, {program.experts} experts, top-{program.top_k:g}, T = "
                f"{program.tokens:,}; padded: the time does not depend on the drops)"
            )
            note = said(head, resized)
            state.found.append(
                {
                    "term": NAME,
                    "from": program.capacity_factor,
                    "to": term.factor,
                    "rows": [program.capacity, after],
                    **resized.to_json(),
                }
            )
        state.note = "; ".join(n for n in (state.note, note) if n)
        return resized.rows


def _why_not(programs: Sequence[Program], factor: float) -> str:
    if not programs or not any(p.ok() for p in programs):
        return (
            f"capacity={factor:g}: no routed experts' grouped GEMM (a ragged dot) in an XLA program whose HLO the "
            "capture holds: nothing changed"
        )
    return (
        f"capacity={factor:g}: the program is dropless (its experts' groups follow the routing, no capacity "
        "pads them): nothing changed"
    )


TERM = Capacity()
