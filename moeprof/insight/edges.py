"""Exposure at the edges of a capture (issue 39): a capture cuts a run of steps, so the first collective of a
device's window has no compute of the step before it to hide under, and the last none of the step after it.
Their exposed time may be the capture's, not the step's: the verdict names it as such, and a change whose
saving is mostly that time is not the first thing to try.

Per device, over its window: the first comm activity (the earliest start) and the last (the latest end), and
the part of each that is exposed (inside the device's exposed-comm segments, §4) and not waiting for the last
member of its group (§8: that wait is the other ranks' lateness, which a longer capture keeps). ``by_op`` and
``by_kind`` sum that time over the devices, so an opportunity's or a kind's share of edge exposure is one
look-up.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..core import intervals as iv


def capture_edges(records: pd.DataFrame | None, windows: pd.DataFrame, exposed: pd.DataFrame) -> dict[str, Any] | None:
    """The exposed time of each device's first and last collective (see the module docstring); None where no
    device communicates. ``records``: the comm activities (device, start_ns, end_ns, op, kind; ``wait_ns``
    where the §8 ledger matched them); ``windows`` and ``exposed``: per device, its window's and its exposed
    comm's segments."""
    if records is None or records.empty:
        return None
    out_ops: dict[str, int] = {}
    out_kinds: dict[str, int] = {}
    first_ops: dict[str, int] = {}
    last_ops: dict[str, int] = {}
    total = first_total = last_total = 0
    by_device = {str(d): g for d, g in exposed.groupby("device", observed=True)} if len(exposed) else {}
    in_window = {str(d): g for d, g in windows.groupby("device", observed=True)} if len(windows) else {}
    for device, rows in records.groupby("device", observed=True, sort=True):
        w = in_window.get(str(device))
        start = rows["start_ns"].to_numpy(np.int64)
        end = rows["end_ns"].to_numpy(np.int64)
        waited = rows["wait_ns"].fillna(0).to_numpy(np.int64) if "wait_ns" in rows else np.zeros(start.size, np.int64)
        if w is not None:
            w_s, w_e = iv.union(w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64))
            keep = iv.overlap_each(start, end, w_s, w_e) > 0
            rows, start, end, waited = rows[keep], start[keep], end[keep], waited[keep]
        segments = by_device.get(str(device))
        if not len(rows) or segments is None:
            continue
        e_s, e_e = iv.union(segments["start_ns"].to_numpy(np.int64), segments["end_ns"].to_numpy(np.int64))
        first = int(np.lexsort((end, start))[0])
        last = int(np.lexsort((-start, end))[-1])
        for which, at, tally in (("first", first, first_ops), ("last", last, last_ops)):
            if which == "last" and at == first:
                continue  # one collective is both edges: its exposure counts once
            # its waiting for the last member aside (the wait is [start, start + W), §8)
            ns = int(iv.overlap_each(start[at : at + 1] + waited[at : at + 1], end[at : at + 1], e_s, e_e)[0])
            if ns <= 0:
                continue
            op, kind = str(rows["op"].iloc[at]), str(rows["kind"].iloc[at])
            tally[op] = tally.get(op, 0) + ns
            out_ops[op] = out_ops.get(op, 0) + ns
            out_kinds[kind] = out_kinds.get(kind, 0) + ns
            total += ns
            if which == "first":
                first_total += ns
            else:
                last_total += ns
    if total <= 0:
        return None
    return {
        "exposed_ns": total,
        "first": {"exposed_ns": first_total, "op": max(first_ops, key=lambda k: first_ops[k]) if first_ops else ""},
        "last": {"exposed_ns": last_total, "op": max(last_ops, key=lambda k: last_ops[k]) if last_ops else ""},
        "by_op": dict(sorted(out_ops.items())),
        "by_kind": dict(sorted(out_kinds.items())),
    }
