"""The ``experts`` term (moeprof's own; docs/metrics.md, "Projection"): ``experts=F``, the step with ``F`` times
the routed experts at the same top-k.

What changes is read from the program's HLO shapes (:mod:`.program`) and timed by :mod:`.resize`: every array
with the experts as a leading or trailing dimension takes ``F`` times its size: the experts' weights, their
optimizer moments, updates and casts, their gradients, the router's width (its weights ``[H, E]``, its
logits ``[T, E]``), the per-expert masks and counts; the experts' grouped GEMMs run ``E·F − E`` more tiles (one
per group boundary) over the same rows. The routed rows do not change (the same top-k); in a program padded to
capacity ``E·C`` does not either (``C`` shrinks as ``E`` grows).
"""

from __future__ import annotations

from collections.abc import Sequence

from ....core.analysis import Opportunity
from ..job import ReplayJob
from ..selection import parse_filters, select
from .base import Changing, WhatIf, bad, factor_of
from .program import Program
from .resize import Resize, resize_job, said, tiles

NAME = "experts"


class Experts:
    name: str = NAME
    forms: tuple[str, ...] = ("experts=F", "experts(FILTERS)=F")
    help: str = (
        "F times the routed experts at the same top-k: their weights, optimizer work and casts, the router's "
        "width and the grouped GEMMs' per-group tiles resized from the HLO shapes"
    )

    def parse(self, text: str, body: str | None, factor: str | None) -> WhatIf:
        value = factor_of(text, factor, "experts needs a factor: experts=F (F times the experts, e.g. experts=2)")
        if value <= 0:
            raise bad(text, f"factor {factor!r} must be above 0")
        return WhatIf(text.strip(), NAME, parse_filters(text, body or ""), value)

    def apply(self, job: ReplayJob, term: WhatIf, state: Changing, opportunities: Sequence[Opportunity]) -> int:
        chosen = select(job, term, opportunities)
        seen: list[Program] = []

        def resize(program: Program) -> Resize | None:
            after = program.experts * term.factor
            if not program.ok() or after < 1 or abs(after - round(after)) > 1e-6:
                seen.append(program)
                return None
            return Resize(experts=round(after) / program.experts)

        resized = resize_job(job, state, chosen, resize)
        state.duration, state.transfer = resized.duration, resized.transfer
        if not resized.programs:
            note = _why_not(seen, term.factor)
        else:
            program = resized.programs[0]
            after = round(program.experts * term.factor)
            grouped = ""
            if program.tile_rows:
                before, later = (tiles(program.rows, e, program.tile_rows) for e in (program.experts, after))
                grouped = f", the grouped GEMM's tiles {before:,.0f} → {later:,.0f}"
            head = (
                f"experts {program.experts} → {after} at top-{program.top_k:g} (rows {program.rows:,} "
                f"unchanged{grouped})"
            )
            note = said(head, resized)
            state.found.append({"term": NAME, "from": program.experts, "to": after, **resized.to_json()})
        state.note = "; ".join(n for n in (state.note, note) if n)
        return resized.rows


def _why_not(programs: Sequence[Program], factor: float) -> str:
    if not programs or not any(p.ok() for p in programs):
        return (
            f"experts={factor:g}: no routed experts' grouped GEMM (a ragged dot) in an XLA program whose HLO the "
            "capture holds: nothing changed"
        )
    counts = ", ".join(sorted({f"{p.experts} x {factor:g}" for p in programs if p.ok()}))
    return f"experts={factor:g}: {counts} is not a whole number of experts: nothing changed"


TERM = Experts()
