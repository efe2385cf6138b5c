"""Spec §9: every opportunity's ``projected_saving_ns``, the mean step saving were its activities to take no
time, end to end over the steps, for hundreds of opportunities at the cost of a few replays
(:func:`opportunity_savings`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...core.analysis import Opportunity
from .job import ReplayJob
from .replay import LANES
from .selection import opportunity_rows

SPARE_REPLAYS = LANES  # opportunities replayed in all, at least, where fewer could be significant: one C pass


@dataclass(frozen=True)
class Saving:
    """One opportunity's projected saving: ``ns`` (None: not replayed, or no activities) and ``max_ns``,
    the most it can be (from the measured critical chain; None without activities)."""

    ns: int | None
    max_ns: int | None


def opportunity_savings(
    job: ReplayJob, opportunities: Sequence[Opportunity], significant_ns: float = 0.0, spare: int = SPARE_REPLAYS
) -> list[Saving]:
    """Per opportunity: the mean step saving if its activities took no time, end to end over the steps
    (:meth:`ReplayJob.steps_end_saving`).

    The measured chain behind the steps' end bounds every saving (:meth:`ReplayJob.steps_end_chain`):
    an opportunity with no work on it saves nothing, without a replay. The others are replayed (several
    per pass of the graph on the C route): every one that could reach ``significant_ns``, then more by
    decreasing bound up to ``spare`` in all (or until the C sweep's last pass is full). Past them an
    opportunity keeps its bound only (``ns`` None): a 1M-event job has hundreds of opportunities, most
    under 1% of the step (too little to rank by), and their exact savings would cost a replay each."""
    steps = int(job.step_numbers.size)
    chain, weight = job.steps_end_chain()
    rows = opportunity_rows(job, opportunities)
    on_chain = np.zeros(job.size, dtype=np.int64)
    on_chain[chain] = weight
    out: list[Saving] = [Saving(None, None)] * len(opportunities)
    todo: list[tuple[int, int]] = []
    for i, mine in enumerate(rows):
        if mine is None:
            continue
        bound = int(on_chain[mine].sum())
        most = round(bound / steps) if steps else 0
        if most == 0:
            out[i] = Saving(0, 0)  # no work on the chain: the end cannot move
        else:
            todo.append((i, most))
    todo.sort(key=lambda t: -t[1])
    most_of = dict(todo)
    chosen: list[int] = []
    significant = sum(most >= significant_ns for _, most in todo)
    # the significant ones, rounded up to whole passes of the C sweep, at least ``spare``: a pass has room
    spare = max(spare - significant, -significant % LANES)
    for i, most in todo:
        if most >= significant_ns or spare > 0:
            spare -= most < significant_ns
            chosen.append(i)
        else:
            out[i] = Saving(None, most)
    if chosen:
        latest = job.latest_end_without([rows[i] for i in chosen])  # type: ignore[misc]
        for i, end in zip(chosen, latest.tolist()):
            out[i] = Saving(job.steps_end_saving_of(end), most_of[i])
    return out
