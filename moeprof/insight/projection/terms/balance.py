"""The ``balance`` term (spec §9): ``balance`` or ``balance(FILTERS)`` gives each selected compute activity
the median duration of its counterparts, the activities of every device with the same name and the same
occurrence index among its device's activities of that name in the same step: every rank as fast as the
median rank (the straggler fix)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....core.analysis import Opportunity
from ....core.events import BUCKETS, combine_codes
from ..job import NO_STEP, ReplayJob
from ..selection import parse_filters, select
from .base import Changing, WhatIf, bad

NAME = "balance"


class Balance:
    name: str = NAME
    forms: tuple[str, ...] = ("balance", "balance(FILTERS)")
    help: str = "every rank as fast as the median rank (the straggler fix); FILTERS as scale's"

    def parse(self, text: str, body: str | None, factor: str | None) -> WhatIf:
        if factor is not None:
            raise bad(text, f"{NAME} takes no factor")
        return WhatIf(text.strip(), NAME, parse_filters(text, body or ""))

    def apply(self, job: ReplayJob, term: WhatIf, state: Changing, opportunities: Sequence[Opportunity]) -> int:
        mask = select(job, term, opportunities)
        balanced = counterpart_durations(job, mask)
        change = mask & ~job.graph.is_member & (job.bucket == BUCKETS.index("compute"))
        state.duration = np.where(change, balanced, state.duration)
        return int(change.sum())


TERM = Balance()


def counterpart_durations(job: ReplayJob, selected: np.ndarray) -> np.ndarray:
    """§9 balance: each selected compute row's median counterpart duration (same name, same occurrence
    index among its device's rows of that name in the same step); even counts: the mean of the two
    middle values, half to even. Other rows keep their duration."""
    balanced, has_counterparts = job.kept("counterpart medians", lambda: _counterpart_medians(job))
    return np.where(selected & has_counterparts, balanced, job.graph.duration)


def _counterpart_medians(job: ReplayJob) -> tuple[np.ndarray, np.ndarray]:
    """Every row's duration with each in-step compute row's median counterpart duration in its place, and
    which rows those are (one computation per job: the balance projection and each straggler's share it)."""
    g = job.graph
    duration = g.duration.copy()
    compute = job.bucket == BUCKETS.index("compute")
    has_counterparts = compute & (job.step != NO_STEP)
    rows = np.flatnonzero(has_counterparts)
    if not rows.size:
        return duration, has_counterparts
    name_c = job.codes("name")[0][rows]
    dev = g.device[rows]
    stp = job.step[rows]
    start = g.start[rows]
    n_dev = int(dev.max()) + 1
    # (step, name) as one code: packed where the range is small (no hash), else numbered densely
    names = int(name_c.max()) + 2
    kernels = (int(stp.max()) - int(stp.min()) + 1) * names
    if kernels * n_dev <= 4 * rows.size + 1024:
        kernel = (stp - stp.min()) * names + (name_c + 1)
    else:
        kernel = combine_codes(stp, name_c)
        kernels = int(kernel.max()) + 1
    cell = kernel * n_dev + dev  # (step, name, device)
    if rows.size < 2 or bool(np.all((dev[1:] > dev[:-1]) | ((dev[1:] == dev[:-1]) & (start[1:] >= start[:-1])))):
        # the rows come by (device, start, row) already (a merged job's do): a stable sort by kernel keeps that,
        # each (kernel, device) together
        order = _stable_order(kernel)
    else:
        order = np.lexsort((rows, start, name_c, stp, dev))
    key = cell[order]
    first = np.r_[True, key[1:] != key[:-1]]
    run_start = np.maximum.accumulate(np.where(first, np.arange(key.size), 0))
    occurrence = np.empty(rows.size, dtype=np.int64)
    occurrence[order] = np.arange(key.size) - run_start
    # (step, name, occurrence) numbered densely: each kernel's occurrences follow the kernels before it, as
    # many as its device with the most of them has
    width = np.bincount(cell, minlength=kernels * n_dev).reshape(kernels, n_dev).max(axis=1)
    del cell, key, first, run_start, order, start, stp, name_c  # the peak of the projection: keep it low
    group = (np.cumsum(width) - width)[kernel] + occurrence
    del kernel, occurrence
    duration[rows] = _group_medians(group, dev, duration[rows])
    return duration, has_counterparts


def _stable_order(codes: np.ndarray) -> np.ndarray:
    """``np.argsort(codes, kind="stable")`` for codes >= 0, by 16-bit radix passes where they fit."""
    top = int(codes.max()) if codes.size else 0
    if top < 1 << 16:
        return np.argsort(codes.astype(np.uint16), kind="stable")
    if top < 1 << 32:
        low = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
        return low[np.argsort((codes[low] >> 16).astype(np.uint16), kind="stable")]
    return np.argsort(codes, kind="stable")


def _group_medians(group: np.ndarray, device: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per row, the median ``d`` of its group (codes 0..G-1, at most one row per (group, device)): the mean of
    the two middle values for even counts, half to even."""
    n_groups = int(group.max()) + 1
    n_dev = int(device.max()) + 1
    count = np.bincount(group, minlength=n_groups)
    if n_groups * n_dev <= 4 * group.size + 1024:
        # a row of the devices' values per group, sorted: no sort of the rows themselves
        table = np.full((n_groups, n_dev), np.iinfo(np.int64).max, dtype=np.int64)
        table.reshape(-1)[group * n_dev + device] = d
        table.sort(axis=1)
        at = np.arange(n_groups)
        held = count > 0  # a code no row has (numbers may skip): 0, never read
        mid_lo = np.where(held, table[at, np.maximum((count - 1) // 2, 0)], 0)
        mid_hi = np.where(held, table[at, np.minimum(count // 2, n_dev - 1)], 0)
    else:
        by = np.lexsort((d, group))
        lo = np.r_[0, np.cumsum(count)[:-1]]
        ds = d[by]
        last = max(ds.size - 1, 0)
        mid_lo = ds[np.clip(lo + (count - 1) // 2, 0, last)]
        mid_hi = ds[np.clip(lo + count // 2, 0, last)]
    total = mid_lo + mid_hi  # exact in int64; the mean rounded half to even
    med = total // 2 + ((total % 2 == 1) & ((total // 2) % 2 == 1))
    return med[group]
