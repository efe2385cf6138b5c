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
from ..selection import parse_filters
from .base import Changing, WhatIf, bad, factor_of
from .program import Program
from .resize import Resize, Resized, resize_term, said, tiles

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
        def resize(program: Program) -> Resize | None:
            after = program.experts * term.factor
            if not program.ok() or after < 1 or abs(after - round(after)) > 1e-6:
                return None
            return Resize(experts=round(after) / program.experts)

        def told(program: Program, resized: Resized) -> tuple[str, dict[str, object]]:
            after = round(program.experts * term.factor)
            grouped = ""
            if program.tile_rows:
                before, later = (tiles(program.rows, e, program.tile_rows) for e in (program.experts, after))
                grouped = f", the grouped GEMM's tiles {before:,.0f} → {later:,.0f}"
            head = (
                f"experts {program.experts} → {after} at top-{program.top_k:g} (rows {program.rows:,} "
                f"unchanged{grouped})"
            )
            return said(head, resized), {"from": program.experts, "to": after}

        def why_not(held: Sequence[Program]) -> str:
            counts = ", ".join(sorted({f"{p.experts} x {term.factor:g}" for p in held if p.ok()}))
            return f"experts={term.factor:g}: {counts} is not a whole number of experts: nothing changed"

        return resize_term(job, term, state, opportunities, resize, told, why_not)


TERM = Experts()
