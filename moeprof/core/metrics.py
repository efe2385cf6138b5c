"""The figures of spec §4-§6, as pure functions over the event table.

Per device: sums per bucket, unions of activity, exposed and overlapped
communication, and the NVLink/IB split, over a window of disjoint segments
(the whole trace, or the selected steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import intervals as iv
from .analysis import Collective, Figures


@dataclass(frozen=True)
class WindowMeasure:
    """The §4 figures of one device over a window, and what later stages need per activity."""

    figures: Figures
    clipped: np.ndarray  # per activity row: ns inside the window
    exposed: np.ndarray  # per activity row (comm only): ns not overlapped by compute
    exposed_segments: tuple[np.ndarray, np.ndarray]  # U(comm) - U(compute), disjoint sorted [start, end)


def _empty_measure(n: int) -> WindowMeasure:
    zeros = np.zeros(n, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    return WindowMeasure(Figures(), zeros, zeros.copy(), (none, none.copy()))


class DeviceTimeline:
    """One device's activity as arrays, sorted by start, for repeated windowed queries."""

    def __init__(self, activity: pd.DataFrame) -> None:
        order = np.argsort(activity["start_ns"].to_numpy(), kind="stable")
        a = activity.iloc[order]
        self.frame = a
        self.start = a["start_ns"].to_numpy(dtype=np.int64)
        self.end = np.maximum(a["end_ns"].to_numpy(dtype=np.int64), self.start)
        self.bucket = a["bucket"].to_numpy(dtype=object)
        self.is_comm = self.bucket == "comm"
        self.is_compute = self.bucket == "compute"
        self.ib = a["ib_fraction"].to_numpy(dtype=np.float64)
        self.max_duration = int((self.end - self.start).max()) if len(a) else 0

    @property
    def bounds(self) -> tuple[int, int]:
        if not self.start.size:
            return 0, 0
        return int(self.start.min()), int(self.end.max())

    def measure(self, win_s: np.ndarray | None = None, win_e: np.ndarray | None = None) -> WindowMeasure:
        """Spec §4 figures over a window (disjoint sorted segments; default: first start to last end)."""
        n = self.start.size
        if n == 0:
            return _empty_measure(n)
        clipped = np.zeros(n, dtype=np.int64)
        exposed = np.zeros(n, dtype=np.int64)
        if win_s is None or win_e is None:
            lo, hi = self.bounds
            win_s, win_e = np.array([lo], np.int64), np.array([hi], np.int64)
        # only rows that can touch the window: starts are sorted, durations bounded
        first = np.searchsorted(self.start, win_s[0] - self.max_duration, side="left")
        last = np.searchsorted(self.start, win_e[-1], side="left")
        rows = np.arange(first, last)
        s, e, idx = iv.clip(self.start[rows], self.end[rows], win_s, win_e)
        rows = rows[idx]
        dur = e - s
        np.add.at(clipped, rows, dur)
        comm = self.is_comm[rows]
        compute = self.is_compute[rows]
        bucket = self.bucket[rows]
        fig: dict = {"accumulated_ns": int(dur.sum())}
        for name in ("compute", "comm", "memcpy", "other"):
            fig[f"{name}_ns"] = int(dur[bucket == name].sum())
        fig["span_ns"] = iv.length(win_s, win_e)
        fig["busy_ns"] = iv.union_length(s, e)
        fig["idle_ns"] = fig["span_ns"] - fig["busy_ns"]
        k_s, k_e = iv.union(s[compute], e[compute])
        c_len = iv.union_length(s[comm], e[comm])
        k_len = iv.length(k_s, k_e)
        both = iv.union_length(np.r_[s[comm], k_s], np.r_[e[comm], k_e])
        fig["exposed_comm_ns"] = both - k_len
        fig["overlapped_comm_ns"] = c_len + k_len - both
        c_s, c_e = iv.union(s[comm], e[comm])
        segments = iv.subtract(c_s, c_e, k_s, k_e)
        # exposed part of each comm activity: its length minus its overlap with compute
        piece_exposed = dur[comm] - iv.overlap_each(s[comm], e[comm], k_s, k_e)
        np.add.at(exposed, rows[comm], piece_exposed)
        ib = self.ib[rows][comm]
        known = ~np.isnan(ib)
        comm_dur = dur[comm]
        fig["comm_unknown_link_ns"] = int(comm_dur[~known].sum())
        fig["comm_ib_ns"] = int(round(float(np.sum(comm_dur[known] * ib[known]))))
        fig["comm_nvlink_ns"] = fig["comm_ns"] - fig["comm_ib_ns"] - fig["comm_unknown_link_ns"]
        fig.update(exposed_link_split(fig["exposed_comm_ns"], piece_exposed, ib))
        return WindowMeasure(Figures(**fig), clipped, exposed, segments)


def exposed_link_split(exposed_total: int, exposed_each: np.ndarray, ib: np.ndarray) -> dict:
    """Split the exposed comm time by fabric, in proportion to each comm activity's exposed time.

    Where comm overlaps comm, the per-activity exposed times add up to more than
    the union; the shares are scaled so the three figures add up to ``exposed_comm_ns``.
    """
    weight = float(exposed_each.sum())
    if exposed_total <= 0 or weight <= 0:
        return {"exposed_comm_nvlink_ns": 0, "exposed_comm_ib_ns": 0, "exposed_comm_unknown_link_ns": 0}
    known = ~np.isnan(ib)
    scale = exposed_total / weight
    ib_ns = round(float(np.sum(exposed_each[known] * ib[known])) * scale)
    unknown_ns = round(float(exposed_each[~known].sum()) * scale)
    unknown_ns = min(unknown_ns, exposed_total - ib_ns)
    return {
        "exposed_comm_nvlink_ns": exposed_total - ib_ns - unknown_ns,
        "exposed_comm_ib_ns": ib_ns,
        "exposed_comm_unknown_link_ns": unknown_ns,
    }


def link_label(ib: np.ndarray) -> str:
    """nvlink | ib | mixed | unknown for a set of ib fractions (NaN = unknown)."""
    if ib.size == 0 or np.isnan(ib).all():
        return "unknown"
    if np.isnan(ib).any():
        return "mixed"
    if (ib == 0).all():
        return "nvlink"
    if (ib == 1).all():
        return "ib"
    return "mixed"


def collective_key(comm: pd.DataFrame) -> np.ndarray:
    """The op a comm activity belongs to: its HLO op where known, else the kernel name."""
    op = comm["hlo_op"].to_numpy(dtype=object)
    name = comm["name"].to_numpy(dtype=object)
    return np.where(op != "", op, name)


def collectives_table(comm: pd.DataFrame) -> list[Collective]:
    """Spec §7 ``collectives``: one row per (op, kind) over all devices.

    ``comm`` holds per (op ``key``, kind, device) sums of the comm activities' clipped
    time (``pipeline.per_file.COMM_AGG_COLUMNS``); sums from several files add up.
    """
    if comm.empty:
        return []
    agg = comm.groupby(["key", "kind"], sort=False, observed=True).agg(
        count=("count", "sum"),
        devices=("device", "nunique"),
        total_ns=("total_ns", "sum"),
        exposed_ns=("exposed_ns", "sum"),
        bytes_sum=("bytes_sum", "sum"),
        bytes_known=("bytes_known", "sum"),
        ib_ns=("ib_ns", "sum"),
        unknown_ns=("unknown_ns", "sum"),
        exposed_ib_ns=("exposed_ib_ns", "sum"),
        exposed_unknown_ns=("exposed_unknown_ns", "sum"),
        ib_sum=("ib_sum", "sum"),
        ib_known=("ib_known", "sum"),
        ib_zero=("ib_zero", "sum"),
        ib_one=("ib_one", "sum"),
    )
    col = {c: agg[c].to_numpy() for c in agg.columns}
    out = []
    for i, (key, kind) in enumerate(agg.index):
        n = int(col["count"][i])
        ib_known = int(col["ib_known"][i])
        if ib_known == 0:
            link = "unknown"
        elif ib_known < n:
            link = "mixed"
        else:
            link = "nvlink" if col["ib_zero"][i] == n else ("ib" if col["ib_one"][i] == n else "mixed")
        total, ib_ns, unknown_ns = int(col["total_ns"][i]), round(float(col["ib_ns"][i])), int(col["unknown_ns"][i])
        exposed = int(col["exposed_ns"][i])
        exposed_ib, exposed_unknown = round(float(col["exposed_ib_ns"][i])), int(col["exposed_unknown_ns"][i])
        bytes_known, bytes_sum = int(col["bytes_known"][i]), float(col["bytes_sum"][i])
        out.append(
            Collective(
                name=str(key),
                kind=str(kind),
                link=link,
                count=n,
                devices=int(col["devices"][i]),
                total_ns=total,
                exposed_ns=exposed,
                bytes=int(bytes_sum) if bytes_known else None,
                bytes_per_call=round(bytes_sum / bytes_known) if bytes_known else None,
                comm_nvlink_ns=total - ib_ns - unknown_ns,
                comm_ib_ns=ib_ns,
                comm_unknown_link_ns=unknown_ns,
                exposed_nvlink_ns=exposed - exposed_ib - exposed_unknown,
                exposed_ib_ns=exposed_ib,
                exposed_unknown_link_ns=exposed_unknown,
                ib_fraction=float(col["ib_sum"][i]) / ib_known if ib_known else None,
            )
        )
    out.sort(key=lambda r: (-r.total_ns, r.name))
    return out
