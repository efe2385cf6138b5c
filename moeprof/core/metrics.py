"""The figures of spec §4-§6, as pure functions over the event table.

Per device: sums per bucket, unions of activity, exposed and overlapped
communication, and the NVLink/IB split, over a window of disjoint segments
(the whole trace, or the selected steps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

import numpy as np
import pandas as pd

from . import intervals as iv
from .analysis import Collective, Figures
from .events import BUCKETS, bucket_codes, column_codes, narrow_codes

_NONE = np.zeros(0, dtype=np.int64)
T = TypeVar("T")


@dataclass(frozen=True)
class WindowMeasure:
    """The §4 figures of one device over a window, and what later stages need per activity."""

    figures: Figures
    clipped: np.ndarray  # per activity row: ns inside the window
    exposed: np.ndarray  # per activity row (comm only): ns not overlapped by compute
    exposed_segments: tuple[np.ndarray, np.ndarray]  # U(comm) - U(compute), disjoint sorted [start, end)
    # the pieces of activity inside the window (one per row and window segment, in row order) and the
    # rows they come from; the union of the compute pieces: what the device signals reuse
    pieces: tuple[np.ndarray, np.ndarray, np.ndarray] = (_NONE, _NONE, _NONE)
    compute_union: tuple[np.ndarray, np.ndarray] = (_NONE, _NONE)
    busy_union: tuple[np.ndarray, np.ndarray] = (_NONE, _NONE)
    comm_union: tuple[np.ndarray, np.ndarray] = (_NONE, _NONE)
    window: tuple[np.ndarray, np.ndarray] = (_NONE, _NONE)  # the window measured (disjoint sorted segments)


def _empty_measure(n: int) -> WindowMeasure:
    zeros = np.zeros(n, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    return WindowMeasure(Figures(), zeros, zeros.copy(), (none, none.copy()))


COMPUTE, COMM, MEMCPY, OTHER = (BUCKETS.index(b) for b in ("compute", "comm", "memcpy", "other"))


class EventColumns:
    """An event table's columns as numpy arrays, each built once and shared by its devices' timelines."""

    def __init__(self, table: pd.DataFrame) -> None:
        self.table = table
        self._strings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._codes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._numbers: dict[str, np.ndarray] = {}
        self._cached: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.table)

    def strings(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(int64 codes, -1 missing; distinct values) of a string column (a copy of the table's codes kept:
        8 bytes a row, where :meth:`codes` keeps none)."""
        if column not in self._strings:
            self._strings[column] = column_codes(self.table[column])
        return self._strings[column]

    def codes(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(codes, -1 missing; distinct values) of a string column as narrow as the table holds them
        (``events.narrow_codes``: a categorical's own int8/16 codes, no copy): what a gather or lookup by code
        needs. Arithmetic on them widens first."""
        if column not in self._codes:
            self._codes[column] = self._strings.get(column) or narrow_codes(self.table[column])
        return self._codes[column]

    def nonempty(self, column: str) -> np.ndarray:
        """Per distinct value of a string column, whether it is not "" (a missing value counts as not "")."""
        return self.derived(
            f"nonempty:{column}",
            lambda: np.array([v != "" for v in self.codes(column)[1].tolist()], dtype=bool),
        )

    def numbers(self, column: str, dtype: type = np.int64) -> np.ndarray:
        if column not in self._numbers:
            self._numbers[column] = self.table[column].to_numpy(dtype=dtype)
        return self._numbers[column]

    def derived(self, key: str, build: Callable[[], T]) -> T:
        """A value computed once per table (``build()``) and kept under ``key``."""
        if key not in self._cached:
            self._cached[key] = build()
        return cast(T, self._cached[key])


class DeviceTimeline:
    """One device's activity as arrays, sorted by start, for repeated windowed queries.

    ``positions``: the device's rows of ``activity`` (default: all of them); ``columns``: the
    table's column arrays when several devices share them. Columns are read through them as codes
    and numbers: no per-device frame of the rows is built.
    """

    def __init__(
        self, activity: pd.DataFrame, positions: np.ndarray | None = None, columns: EventColumns | None = None
    ) -> None:
        self.columns = columns if columns is not None else EventColumns(activity)
        starts = self.columns.numbers("start_ns")
        if positions is None:
            positions = np.arange(len(activity), dtype=np.int64)
        start = starts[positions]
        order = np.argsort(start, kind="stable")
        self.activity = activity
        self.positions = positions[order]  # the rows of ``activity``, sorted by start
        self.start = start[order]
        self.end = np.maximum(self.columns.numbers("end_ns")[self.positions], self.start)
        # int8 index into BUCKETS, -1 none
        self.code = self.columns.derived("bucket", lambda: bucket_codes(activity["bucket"]))[self.positions]
        self.is_comm = self.code == COMM
        self.is_compute = self.code == COMPUTE
        self.ib = self.columns.numbers("ib_fraction", np.float64)[self.positions]
        self.max_duration = int((self.end - self.start).max()) if len(self.start) else 0

    def strings(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(int64 codes of this device's rows, distinct values of the whole column) of a string column: a
        gather of the table's narrow codes, widened (no int64 copy of the whole column kept)."""
        codes, values = self.columns.codes(column)
        return codes[self.positions].astype(np.int64, copy=False), values

    def codes(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`strings` with the codes as narrow as the table holds them (``EventColumns.codes``)."""
        codes, values = self.columns.codes(column)
        return codes[self.positions], values

    def numbers(self, column: str, dtype: type = np.int64) -> np.ndarray:
        return self.columns.numbers(column, dtype)[self.positions]

    @property
    def bounds(self) -> tuple[int, int]:
        if not self.start.size:
            return 0, 0
        return int(self.start.min()), int(self.end.max())

    def measure(
        self,
        win_s: np.ndarray | None = None,
        win_e: np.ndarray | None = None,
        per_row: bool = True,
        segments_only: bool = False,
    ) -> WindowMeasure:
        """Spec §4 figures over a window (disjoint sorted segments; default: first start to last end).

        ``per_row=False`` computes the figures only (a step's): no per-row arrays, pieces or segments;
        ``segments_only``: the figures and the exposed comm segments, without the per-row arrays (a projected
        timeline's figures per device).
        """
        n = self.start.size
        if n == 0:
            return _empty_measure(n)
        if win_s is None or win_e is None:
            lo, hi = self.bounds
            win_s, win_e = np.array([lo], np.int64), np.array([hi], np.int64)
        if win_s.size == 0:  # a window of no length (activities of zero duration alone span none): nothing in it
            return _empty_measure(n)
        # only rows that can touch the window: starts are sorted, durations bounded
        first = int(np.searchsorted(self.start, win_s[0] - self.max_duration, side="left"))
        last = int(np.searchsorted(self.start, win_e[-1], side="left"))
        s, e, idx = iv.clip(self.start[first:last], self.end[first:last], win_s, win_e)
        rows = idx + first
        dur = e - s
        code = self.code[rows]
        comm = code == COMM
        compute = code == COMPUTE
        fig: dict = {"accumulated_ns": int(dur.sum())}
        if fig["accumulated_ns"] < 1 << 53:  # float64 sums of these non-negative ints are exact: one count
            by_bucket = np.bincount(code.astype(np.int64) + 1, weights=dur, minlength=len(BUCKETS) + 1)[1:]
        else:
            by_bucket = np.array([dur[code == i].sum() for i in range(len(BUCKETS))])
        for i, name in enumerate(BUCKETS):
            fig[f"{name}_ns"] = int(by_bucket[i])
        fig["span_ns"] = iv.length(win_s, win_e)
        # pieces are in row order: sorted by start when the window is one segment
        b_s, b_e = iv.union(s, e, presorted=win_s.size == 1)
        fig["busy_ns"] = iv.length(b_s, b_e)
        fig["idle_ns"] = fig["span_ns"] - fig["busy_ns"]
        k_s, k_e = iv.union(s[compute], e[compute], presorted=win_s.size == 1)
        comm_s, comm_e = s[comm], e[comm]
        c_s, c_e = iv.union(comm_s, comm_e, presorted=win_s.size == 1)
        c_len = iv.length(c_s, c_e)
        # U(comm) - U(compute): its length is |C ∪ K| - |K| (no third union of the comm and compute pieces)
        segments = iv.subtract(c_s, c_e, k_s, k_e)
        exposed_len = iv.length(*segments)
        fig["exposed_comm_ns"] = exposed_len
        fig["overlapped_comm_ns"] = c_len - exposed_len
        # exposed part of each comm activity: its length minus its overlap with compute
        comm_dur = dur[comm]
        piece_exposed = comm_dur - iv.overlap_each(comm_s, comm_e, k_s, k_e)
        ib = self.ib[rows[comm]]
        known = ~np.isnan(ib)
        fig["comm_unknown_link_ns"] = int(comm_dur[~known].sum())
        fig["comm_ib_ns"] = int(round(float(np.sum(comm_dur[known] * ib[known]))))
        fig["comm_nvlink_ns"] = fig["comm_ns"] - fig["comm_ib_ns"] - fig["comm_unknown_link_ns"]
        fig.update(exposed_link_split(fig["exposed_comm_ns"], piece_exposed, ib))
        figures = Figures(**fig)
        if not per_row:
            return WindowMeasure(figures, _NONE, _NONE, (_NONE, _NONE))
        if segments_only:
            return WindowMeasure(figures, _NONE, _NONE, segments)
        clipped = np.zeros(n, dtype=np.int64)
        exposed = np.zeros(n, dtype=np.int64)
        if win_s.size == 1:  # one piece per row at most
            clipped[rows] = dur
            exposed[rows[comm]] = piece_exposed
        else:
            np.add.at(clipped, rows, dur)
            np.add.at(exposed, rows[comm], piece_exposed)
        return WindowMeasure(
            figures, clipped, exposed, segments, (s, e, rows), (k_s, k_e), (b_s, b_e), (c_s, c_e), (win_s, win_e)
        )

    def measure_each(self, win_s: np.ndarray, win_e: np.ndarray, inside: WindowMeasure | None = None) -> list[Figures]:
        """The figures of each window ``[win_s[i], win_e[i])`` on its own (a device's steps), as
        :meth:`measure` gives them one window at a time, in one pass over all windows.

        Windows may overlap: each window's pieces are moved to a band of their own
        (window ``w`` is shifted by ``w * band``), so that unions and overlaps computed
        over all bands at once never mix two windows. ``inside``: the measure of a window
        that holds every one of these (the device's); clipping commutes with union, so each
        window's busy, compute, comm and comm-or-compute time is then read off that
        measure's unions (the measure of a union inside the window) instead of recomputed.
        """
        win_s = np.asarray(win_s, dtype=np.int64)
        win_e = np.asarray(win_e, dtype=np.int64)
        k = win_s.size
        if k == 0:
            return []
        if self.start.size == 0:
            return [Figures() for _ in range(k)]
        if inside is not None and inside.window[0].size == 1:
            # windows that each hold all the device's activity, as does the window ``inside`` measured (one step
            # launched the whole trace): their pieces are the activities themselves, so their figures are that
            # measure's own, but for the span and its idle time (no pass over the rows)
            first, last = self.bounds
            (seg_s,), (seg_e,) = inside.window[0].tolist(), inside.window[1].tolist()
            if seg_s <= first and seg_e >= last and bool(np.all(win_s <= first)) and bool(np.all(win_e >= last)):
                held = inside.figures
                return [replace(held, span_ns=span, idle_ns=span - held.busy_ns) for span in (win_e - win_s).tolist()]
        origin = int(win_s.min())
        band = max(int(win_e.max()) - origin, 0) + 1
        if k * band >= 1 << 62:  # the bands would not fit int64: one window at a time
            return [self.measure(win_s[i : i + 1], win_e[i : i + 1], per_row=False).figures for i in range(k)]
        # the rows that can touch each window (starts are sorted, durations bounded), window by window
        lo = np.searchsorted(self.start, win_s - self.max_duration, side="left")
        hi = np.maximum(np.searchsorted(self.start, win_e, side="left"), lo)
        counts = hi - lo
        window = np.repeat(np.arange(k), counts)
        rows = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts - lo, counts)
        w_lo, w_hi = win_s[window], win_e[window]
        s = np.minimum(np.maximum(self.start[rows], w_lo), w_hi)
        e = np.minimum(np.maximum(self.end[rows], w_lo), w_hi)
        keep = e > s
        s, e, rows, window = s[keep], e[keep], rows[keep], window[keep]
        dur = e - s
        code = self.code[rows]
        comm = code == COMM
        compute = code == COMPUTE
        # each window in its own band: sorted by (window, start), and no union reaches the next band
        shift = window * band - origin
        s_b, e_b = s + shift, e + shift
        edges = np.searchsorted(window, np.arange(k + 1))

        # sums of non-negative int ns: as float64 they are exact while the grand total is below 2**53
        exact = int(dur.sum()) < 1 << 53

        def per_window(values: np.ndarray, at: np.ndarray, label: np.ndarray) -> np.ndarray:
            """Sums of int values in runs sorted by window (``at``: where each window's run begins)."""
            if exact:
                return np.bincount(label, weights=values, minlength=k).astype(np.int64)
            total = np.r_[np.int64(0), np.cumsum(values, dtype=np.int64)]
            return total[at[1:]] - total[at[:-1]]

        def union_per_window(mask: np.ndarray | None) -> np.ndarray:
            u_s, u_e = iv.union(s_b, e_b, presorted=True) if mask is None else iv.union(s_b[mask], e_b[mask], True)
            return per_window(u_e - u_s, np.searchsorted(u_s, np.arange(k + 1) * band), u_s // band)

        accumulated = per_window(dur, edges, window)
        if exact:
            valid = code >= 0
            by_bucket = np.bincount(window[valid] * len(BUCKETS) + code[valid], dur[valid], k * len(BUCKETS))
            per_bucket = list(by_bucket.astype(np.int64).reshape(k, len(BUCKETS)).T)
        else:
            per_bucket = [per_window(np.where(code == i, dur, 0), edges, window) for i in range(len(BUCKETS))]
        if inside is not None and self._holds(inside.window, win_s, win_e):
            # |U ∩ W| = coverage of U below W's end minus below its start
            def within(seg_s: np.ndarray, seg_e: np.ndarray) -> np.ndarray:
                return iv.coverage(seg_s, seg_e, win_e) - iv.coverage(seg_s, seg_e, win_s)

            (k_s, k_e), (c_s, c_e) = inside.compute_union, inside.comm_union
            busy, compute_len, comm_len = within(*inside.busy_union), within(k_s, k_e), within(c_s, c_e)
            both = within(*iv.union(np.r_[k_s, c_s], np.r_[k_e, c_e]))  # |C ∪ K|
        else:
            busy = union_per_window(None)
            compute_len = union_per_window(compute)
            comm_len = union_per_window(comm)
            both = union_per_window(comm | compute)  # |C ∪ K|
        comm_dur = dur[comm]
        ib_all = self.ib[rows[comm]]
        known_all = ~np.isnan(ib_all)
        piece_exposed = None
        if known_all.any() and not (known_all.all() and (ib_all == 0).all()):
            # the exposed split by fabric weighs each comm piece by its own exposed time
            k_s, k_e = iv.union(s_b[compute], e_b[compute], presorted=True)
            piece_exposed = comm_dur - iv.overlap_each(s_b[comm], e_b[comm], k_s, k_e)
        comm_edges = np.searchsorted(window[comm], np.arange(k + 1))
        out = []
        for w in range(k):
            a, b = int(comm_edges[w]), int(comm_edges[w + 1])
            ib = ib_all[a:b]
            w_dur = comm_dur[a:b]
            known = known_all[a:b]
            fig: dict = {"accumulated_ns": int(accumulated[w])}
            for i, name in enumerate(BUCKETS):
                fig[f"{name}_ns"] = int(per_bucket[i][w])
            fig["span_ns"] = int(win_e[w] - win_s[w])
            fig["busy_ns"] = int(busy[w])
            fig["idle_ns"] = fig["span_ns"] - fig["busy_ns"]
            fig["exposed_comm_ns"] = int(both[w] - compute_len[w])
            fig["overlapped_comm_ns"] = int(comm_len[w] + compute_len[w] - both[w])
            fig["comm_unknown_link_ns"] = int(w_dur[~known].sum())
            fig["comm_ib_ns"] = int(round(float(np.sum(w_dur[known] * ib[known]))))
            fig["comm_nvlink_ns"] = fig["comm_ns"] - fig["comm_ib_ns"] - fig["comm_unknown_link_ns"]
            if piece_exposed is not None:
                fig.update(exposed_link_split(fig["exposed_comm_ns"], piece_exposed[a:b], ib))
            else:
                fig.update(_uniform_link_split(fig["exposed_comm_ns"], known_all.any()))
            out.append(Figures(**fig))
        return out

    def _holds(self, window: tuple[np.ndarray, np.ndarray], win_s: np.ndarray, win_e: np.ndarray) -> bool:
        """Whether a union measured over ``window`` (disjoint sorted segments) is, inside each
        ``[win_s[i], win_e[i])``, the union of all the device's activity: the window holds every activity,
        or every one of these windows."""
        seg_s, seg_e = window
        if not seg_s.size:
            return False
        lo, hi = self.bounds
        if seg_s.size == 1 and seg_s[0] <= lo and seg_e[0] >= hi:
            return True
        covered = iv.coverage(seg_s, seg_e, win_e) - iv.coverage(seg_s, seg_e, win_s)
        return bool(np.all(covered == np.maximum(win_e - win_s, 0)))


def _uniform_link_split(exposed_total: int, known: bool) -> dict:
    """:func:`exposed_link_split` where every comm piece is NVLink (``known``: all ib fractions 0) or every
    one's link is unknown: all the exposed time goes to that one fabric."""
    if exposed_total <= 0:
        return {"exposed_comm_nvlink_ns": 0, "exposed_comm_ib_ns": 0, "exposed_comm_unknown_link_ns": 0}
    return {
        "exposed_comm_nvlink_ns": exposed_total if known else 0,
        "exposed_comm_ib_ns": 0,
        "exposed_comm_unknown_link_ns": 0 if known else exposed_total,
    }


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


# The communication sums a file contributes per (op, kind, device) and the merge adds up over devices and files
# (pipeline.per_file.COMM_AGG_COLUMNS): one definition for both group-bys. Counts of activities, of those with
# bytes or an IB fraction known, and of those all on NVLink (ib 0) or all over IB (ib 1); time in ns split by link.
COMM_SUMS: tuple[str, ...] = (
    "count",
    "total_ns",
    "exposed_ns",
    "bytes_sum",
    "bytes_known",
    "ib_ns",
    "unknown_ns",
    "exposed_ib_ns",
    "exposed_unknown_ns",
    "ib_sum",
    "ib_known",
    "ib_zero",
    "ib_one",
)


def collectives_table(comm: pd.DataFrame) -> list[Collective]:
    """Spec §7 ``collectives``: one row per (op, kind) over all devices.

    ``comm`` holds per (op ``key``, kind, device) sums of the comm activities' clipped
    time (``pipeline.per_file.COMM_AGG_COLUMNS``); sums from several files add up.
    """
    if comm.empty:
        return []
    agg = comm.groupby(["key", "kind"], sort=False, observed=True).agg(
        devices=("device", "nunique"), **{c: (c, "sum") for c in COMM_SUMS}
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
