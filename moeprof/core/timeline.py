"""The timeline view of each device, computed once while measuring; renderers only draw it.

Per device: its measured window, its steps, its exposed-communication segments,
the coverage of each category per time bin, and the activities of a detail window
(capped) for drawing kernels one by one. Bins lie on an absolute grid whose width
is a power of two ns, so views of devices (and files) with different spans
combine by coarsening: a renderer averages pairs of bins, never re-reads events.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from . import intervals as iv
from .events import BUCKETS, lookup
from .metrics import DeviceTimeline, WindowMeasure

# the categories every view of moeprof colours by (bucket, comm split by fabric), then derived bands
CATEGORIES = ("compute", "comm NVLink", "comm IB", "comm ?link", "memcpy", "other")
EXPOSED = "exposed comm"
EXPOSED_CODE = len(CATEGORIES)
WAITING = "comm waiting"  # §8: the part of comm spent waiting for the last member (drawn over comm)
WAIT_CODE = EXPOSED_CODE + 1


def category_codes_of(bucket: np.ndarray, ib_fraction: np.ndarray) -> np.ndarray:
    """One code per activity (index in CATEGORIES), from buckets as their index in ``BUCKETS`` (int8, -1 none).

    A comm activity with any share over InfiniBand is drawn as IB: the cross-domain part bounds its
    duration. The per-device bars split time by ``ib_fraction`` instead.
    """
    ib = np.asarray(ib_fraction, dtype=np.float64)
    codes = np.full(bucket.size, 5, dtype=np.uint8)
    codes[bucket == BUCKETS.index("compute")] = 0
    codes[bucket == BUCKETS.index("memcpy")] = 4
    comm = bucket == BUCKETS.index("comm")
    codes[comm & (ib == 0)] = 1
    codes[comm & (ib > 0)] = 2
    codes[comm & np.isnan(ib)] = 3
    return codes


@dataclass(frozen=True)
class TimelineOptions:
    bins: int = 4096  # at most this many bins over a device's window
    raw_cap: int = 250_000  # activities of the detail window kept one by one, per device
    streams: bool = False  # also coverage per stream (the report's stream lanes)


@dataclass(frozen=True)
class Grid:
    origin: int  # a multiple of width
    width: int  # a power of two, ns
    n: int

    @property
    def edges(self) -> np.ndarray:
        return self.origin + self.width * np.arange(self.n + 1, dtype=np.int64)

    @staticmethod
    def covering(lo: int, hi: int, bins: int) -> Grid:
        width = 1
        while (hi - lo) > width * bins:
            width *= 2
        origin = (lo // width) * width
        n = max(1, -(-(hi - origin) // width))
        return Grid(origin, width, int(n))


@dataclass
class TimelineView:
    """One device's timeline (see the module doc). Times are absolute ns on the device's clock."""

    device: str
    window: tuple[np.ndarray, np.ndarray]
    steps: pd.DataFrame  # step, start_ns, end_ns
    exposed: tuple[np.ndarray, np.ndarray]
    grid: Grid
    coverage: dict[int, np.ndarray]  # category code (EXPOSED_CODE too) -> uint8 fraction per bin
    stream_coverage: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)
    # the detail window's activities, clipped to it
    detail: tuple[int, int] = (0, 0)
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    code: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    name: np.ndarray = field(default_factory=lambda: np.zeros(0, object))  # kernel name per activity
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    stream: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    activities: int = 0  # in the whole window (the detail window may hold fewer)
    streams: tuple[str, ...] = ()  # every stream with activity in the window (the detail window may miss some)
    # §8, filled when the job's ledger ran: the wait parts of this device's comm, clipped to the window
    wait: tuple[np.ndarray, np.ndarray] = field(default_factory=lambda: (np.zeros(0, np.int64), np.zeros(0, np.int64)))

    def with_wait(self, starts: np.ndarray, ends: np.ndarray) -> TimelineView:
        """This view with its wait intervals and their coverage (code WAIT_CODE) added."""
        s, e, _ = iv.clip(starts, ends, *self.window)
        seg = iv.union(s, e)
        return replace(self, wait=seg, coverage={**self.coverage, WAIT_CODE: coverage_bins(*seg, self.grid)})

    @property
    def span(self) -> tuple[int, int]:
        """First and last ns of the measured window."""
        return int(self.window[0][0]), int(self.window[1][-1])

    @property
    def complete(self) -> bool:
        """The detail window holds every activity of the window."""
        return self.detail == self.span


def coverage_bins(starts: np.ndarray, ends: np.ndarray, grid: Grid) -> np.ndarray:
    """Fraction of each grid bin covered by the union of the intervals, 0-255."""
    seg_s, seg_e = iv.union(starts, ends)
    covered = np.diff(iv.coverage(seg_s, seg_e, grid.edges))
    return np.clip(np.rint(255 * covered / grid.width), 0, 255).astype(np.uint8)


def detail_window(starts: np.ndarray, steps: pd.DataFrame | None, lo: int, hi: int, cap: int) -> tuple[int, int]:
    """A window of at most ~``cap`` activities: all of ``[lo, hi)`` when they fit, else from the
    first step as many whole steps as fit (activities that began before it are clipped to it)."""
    if starts.size <= cap:
        return lo, hi
    ordered = np.sort(starts)
    w0 = max(int(steps["start_ns"].min()), lo) if steps is not None and len(steps) else lo
    i0 = int(np.searchsorted(ordered, w0))
    if ordered.size - i0 <= cap:
        return w0, hi
    w1 = int(ordered[i0 + cap - 1])
    if steps is not None and len(steps):
        fits = steps[steps["end_ns"] <= w1]["end_ns"]
        if len(fits):
            w1 = int(fits.max())
    return w0, min(max(w1, w0 + 1), hi)


def device_view(
    device: str,
    rows: DeviceTimeline,
    measured: WindowMeasure,
    win_s: np.ndarray,
    win_e: np.ndarray,
    steps: pd.DataFrame | None,
    options: TimelineOptions,
) -> TimelineView:
    """The timeline view of one device over its measured window."""
    lo, hi = int(win_s[0]), int(win_e[-1])
    s, e, idx = iv.clip(rows.start, rows.end, win_s, win_e)
    codes_all = category_codes_of(rows.code, rows.ib)
    codes = codes_all[idx]
    grid = Grid.covering(lo, hi, options.bins)
    coverage = {int(c): coverage_bins(s[codes == c], e[codes == c], grid) for c in np.unique(codes)}
    exp_s, exp_e = measured.exposed_segments
    coverage[EXPOSED_CODE] = coverage_bins(exp_s, exp_e, grid)
    # streams, names and kinds as codes: strings only for the distinct streams and the detail window
    stream_codes, stream_values = rows.strings("stream")
    streams = stream_codes[idx]
    present = pd.unique(streams)  # in order of first appearance
    stream_names = tuple(str(x) for x in lookup(present, stream_values, np.nan).tolist())
    stream_cov: dict[tuple[str, int], np.ndarray] = {}
    if options.streams:
        for stream, label in zip(present.tolist(), stream_names, strict=True):
            on = streams == stream
            for c in np.unique(codes[on]):
                sel = on & (codes == c)
                stream_cov[(label, int(c))] = coverage_bins(s[sel], e[sel], grid)
    w0, w1 = detail_window(s, steps, lo, hi, options.raw_cap)
    inside = (e > w0) & (s < w1)
    rows_inside = idx[inside]

    def text(column: str) -> np.ndarray:
        column_codes, values = rows.strings(column)
        return lookup(column_codes[rows_inside], values, np.nan)

    step_table = (
        steps[["step", "start_ns", "end_ns"]].reset_index(drop=True)
        if steps is not None
        else pd.DataFrame({"step": [], "start_ns": [], "end_ns": []})
    )
    return TimelineView(
        device=device,
        window=(win_s, win_e),
        steps=step_table,
        exposed=(exp_s, exp_e),
        grid=grid,
        coverage=coverage,
        stream_coverage=stream_cov,
        detail=(w0, w1),
        start=np.maximum(s[inside], w0),
        end=np.minimum(e[inside], w1),
        code=codes[inside],
        name=text("name"),
        kind=text("kind"),
        stream=lookup(streams[inside], stream_values, np.nan),
        activities=int(s.size),
        streams=stream_names,
    )
