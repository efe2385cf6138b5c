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
from ..selection import parse_filters
from .base import Changing, WhatIf, bad, factor_of
from .program import Program
from .resize import Resize, Resized, resize_term, said

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
        def resize(program: Program) -> Resize | None:
            if not program.capacity or not program.top_k:
                return None
            return Resize(capacity=capacity_rows(program, term.factor) / program.capacity)

        def told(program: Program, resized: Resized) -> tuple[str, dict[str, object]]:
            after = capacity_rows(program, term.factor)
            head = (
                f"capacity factor {program.capacity_factor:.3g} → {term.factor:g} (C = {program.capacity:,} → "
                f"{after:,} rows per expert, {program.experts} experts, top-{program.top_k:g}, T = "
                f"{program.tokens:,}; padded: the time does not depend on the drops)"
            )
            return said(head, resized), {
                "from": program.capacity_factor,
                "to": term.factor,
                "rows": [program.capacity, after],
            }

        def why_not(held: Sequence[Program]) -> str:
            return (
                f"capacity={term.factor:g}: the program is dropless (its experts' groups follow the routing, no "
                "capacity pads them): nothing changed"
            )

        return resize_term(job, term, state, opportunities, resize, told, why_not)


TERM = Capacity()
