"""The ``roof`` term (spec §10's levers, projected as §9 does): ``roof(FILTERS)`` gives each selected activity
its time at the chip's roof, ``max(f/P, b/B)`` (the job's ``roof_ns``), never longer than the duration it has:
what the step would take were those ops as fast as the chip's FLOP/s or HBM bandwidth allows, a bound ("up
to"). An activity without counts keeps its duration (it has no roof: said in the term's note), and so does a
collective's transfer between chips (a link, not HBM, bounds it). ``roof(opportunity=N)`` of an on-chip
lever applies the lever's own terms (insight.levers)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....core.analysis import Opportunity
from ....core.roofline import ON_CHIP
from ..job import ReplayJob
from ..selection import lever_terms, parse_filters, select
from .base import Changing, WhatIf, bad

NAME = "roof"


def _lever(term: WhatIf, opportunities: Sequence[Opportunity]) -> Opportunity | None:
    """The on-chip lever ``term`` names by ``opportunity=N`` (None: it names none)."""
    for f in term.filters:
        if f.key == "opportunity" and 0 < int(f.value) <= len(opportunities):
            o = opportunities[int(f.value) - 1]
            if o.kind == ON_CHIP:
                return o
    return None


class Roof:
    name: str = NAME
    forms: tuple[str, ...] = ("roof(FILTERS)",)
    help: str = (
        "the selected activities at the chip's roof, max(FLOPs/peak, HBM bytes/bandwidth), never longer: a bound;"
        " roof() every activity, roof(opportunity=N) an on-chip lever's own terms"
    )

    def parse(self, text: str, body: str | None, factor: str | None) -> WhatIf:
        if body is None:
            raise bad(text, "roof needs its filters in parentheses: roof(FILTERS), or roof() for every activity")
        if factor is not None:
            raise bad(text, "roof takes no factor: each activity goes to its own roof")
        return WhatIf(text.strip(), NAME, parse_filters(text, body))

    def apply(self, job: ReplayJob, term: WhatIf, state: Changing, opportunities: Sequence[Opportunity]) -> int:
        lever = _lever(term, opportunities)
        if lever is not None:
            if len(term.filters) > 1:
                raise bad(term.text, "an on-chip lever's opportunity is its own selection: roof(opportunity=N) alone")
            from . import BY_NAME, parse_terms  # the lever's terms, each applied by its own term

            return sum(BY_NAME[t.action].apply(job, t, state, opportunities) for t in parse_terms(lever_terms(lever)))
        mask = select(job, term, opportunities)
        roof = job.roof_ns
        member = job.graph.is_member
        counted = mask & ~np.isnan(roof) & ~member
        uncounted = int((mask & np.isnan(roof) & ~member).sum())
        rows = np.flatnonzero(counted)
        duration = state.duration.copy()
        duration[rows] = np.minimum(duration[rows], np.rint(roof[rows]).astype(np.int64))
        changed = int((duration[rows] != state.duration[rows]).sum())
        state.duration = duration
        notes = []
        if uncounted:
            notes.append(f"{uncounted:,} of the activities {term.text} selects have no FLOP or byte counts: kept")
        if int((mask & member).sum()):
            notes.append(f"{term.text}: transfers between devices keep their time (a link, not HBM, bounds them)")
        if job.peak_flops_per_s is None and job.peak_hbm_bytes_per_s is None and mask.any():
            notes.append(f"{term.text}: the chip's peaks are not known (give --chip): no activity has a roof")
        state.note = "; ".join(n for n in (state.note, *notes) if n)
        return changed


TERM = Roof()
