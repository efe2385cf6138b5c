"""The ``scale`` term (spec §9): ``scale(FILTERS)=F`` scales the selected activities' durations (an instance
member's transfer ``τ``) by ``F``, rounded half to even; ``F = 0`` makes them free, ``scale()=F`` selects every
activity. An opportunity made of gaps (launch gaps, small GEMMs, a TPU's host gaps:
:data:`.selection.GAP_OPPORTUNITIES`) scales the trigger gaps ``g_x`` it is made of instead; of a host gap, only
the idle between the chip's program executions (the rest of ``g_x`` is the program's own start-up)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....core.analysis import Opportunity
from ..job import ReplayJob
from ..selection import is_gap_term, parse_filters, select
from .base import Changing, WhatIf, bad, factor_of, scaled_ns

NAME = "scale"


class Scale:
    name: str = NAME
    forms: tuple[str, ...] = ("scale(FILTERS)=F", "scale()=F")
    help: str = (
        "the selected activities' durations (a collective's transfer) times F, 0 makes them free; FILTERS, all of"
        " which hold: bucket=, kind=, link=, device=, host=, name~RE, scope~RE (the JAX name scope), opportunity=N"
    )

    def parse(self, text: str, body: str | None, factor: str | None) -> WhatIf:
        if body is None:
            raise bad(text, "scale needs its filters in parentheses: scale(FILTERS)=F, or scale()=F for all")
        value = factor_of(text, factor, "scale needs a factor: scale(FILTERS)=F")
        if {part.strip() for part in body.split(",")} & {"tokens", "routed"}:
            raise bad(text, "the batch is a term of its own: tokens=F, tokens(FILTERS)=F, tokens(routed)=F")
        return WhatIf(text.strip(), NAME, parse_filters(text, body), value)

    def apply(self, job: ReplayJob, term: WhatIf, state: Changing, opportunities: Sequence[Opportunity]) -> int:
        mask = select(job, term, opportunities)
        if is_gap_term(term, opportunities):
            gap = (job.graph.gap if state.gap is None else state.gap).copy()
            if _host_gaps(term, opportunities):
                idle = np.minimum(job.table["host_gap_ns"].to_numpy(np.int64)[mask], gap[mask])
                change = scaled_ns(term.text, idle, term.factor - 1)
                gap[mask] = np.maximum(gap[mask] + change, 0)
            else:
                gap[mask] = scaled_ns(term.text, gap[mask], term.factor)
            state.gap = gap
        else:
            scale_rows(job, state, mask, term)
        return int(mask.sum())


TERM = Scale()


def _host_gaps(term: WhatIf, opportunities: Sequence[Opportunity]) -> bool:
    """Whether ``term`` scales a TPU's host gaps (``opportunity=N`` of kind ``host-gaps``)."""
    return any(
        f.key == "opportunity"
        and 0 < int(f.value) <= len(opportunities)
        and opportunities[int(f.value) - 1].kind == "host-gaps"
        for f in term.filters
    )


def scale_rows(job: ReplayJob, state: Changing, mask: np.ndarray, term: WhatIf) -> None:
    """The rows of ``mask`` take ``term``'s factor times their duration (an instance member its transfer
    ``τ``), rounded half to even (:func:`.base.scaled_ns`)."""
    rows = np.flatnonzero(mask)
    member = job.graph.is_member[rows]
    for name, chosen in (("duration", rows[~member]), ("transfer", rows[member])):
        values = getattr(state, name).copy()  # the rows chosen, scaled: not every row converted and rounded
        values[chosen] = scaled_ns(term.text, values[chosen], term.factor)
        setattr(state, name, values)
