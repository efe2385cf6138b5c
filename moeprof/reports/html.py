"""``moeprof report``: one self-contained HTML file (no network needed to view it).

The renderer lays out what the analysis already holds: the figures of a typed
:class:`Analysis`, and the timeline of each device as its :class:`TimelineView`
(computed once while measuring). It never reads an event table and never
recomputes steps, exposed segments or coverage: it encodes the views, combines
the devices' coverage grids by coarsening them to one grid, and picks one detail
window all shown devices hold. The markup is the Jinja2 template
``templates/report.html.j2`` (autoescaped); ``assets/report.css`` and
``assets/report.js`` (a ``<canvas>`` timeline, no dependencies) are inlined with
the data, so the page works offline.

Timeline data, per input and lane: typed arrays as base64 (little-endian):
``s`` starts and ``d`` durations as uint32 ticks from the window start (a tick
is 1 ns unless the window is longer than 2^32 ns), ``c`` a category code (uint8,
index in ``CATEGORIES``; 6 = exposed comm), ``l`` an index into the input's
label table (kernel name and kind). The browser turns them into per-pixel
coverage each frame, so a draw costs O(events in view + pixels), never one DOM
node per kernel.

Where the cross-rank ledger ran (spec §8), each device's lane also carries
``wait``: the wait parts of its comm (the view's disjoint wait segments, code 7),
drawn as a paler shade over the comm it belongs to; and the input carries
``skew``: for the costliest collectives, each complete instance's first and last
aligned arrival (``s`` start as uint32 ticks from ``o``, itself ticks from the
window start, at most 0; ``d`` the spread in ticks) and ``w`` its straggler (an
index into ``skew.devices``).

Past ``max_events`` activities an input switches to binned coverage: per lane,
track and category, the fraction of each time bin covered (uint8) on one grid
for the whole window (``bins``: ``o`` its origin and ``w`` its bin width in
ticks), plus single activities inside a detail window (the first steps that fit
the cap), so a 1M-event trace stays a few MB and still shows kernels when zoomed
in there.

Projection (spec §9): for a job of several devices the page draws, beside the
measured timeline, the timeline the ``balance`` projection replays (or the one
``--what-if`` asks for) as an input of its own, measured by the same code; its
lanes carry ``crit``: the critical path's activities (code 8), drawn as a dark
band under the lane.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import jinja2
import numpy as np
import orjson
import pandas as pd
from markupsafe import Markup

from .._version import __version__
from ..core import intervals as iv
from ..core.analysis import CAUSES, Analysis, Collective, Figures, Projection
from ..core.summary import (
    ArrivalSkew,
    LedgerSummary,
    arrival_skew,
    figures_per_step,
    ledger_summary,
    mean_figures,
    step_divisor,
    verdict,
)
from ..core.timeline import (
    CATEGORIES,
    EXPOSED,
    EXPOSED_CODE,
    WAIT_CODE,
    WAITING,
    Grid,
    TimelineOptions,
    TimelineView,
    detail_window,
)
from ..core.trace import CPU
from ..options import RAW_EVENTS_CAP
from ..outputs import cannot_write, write_bytes
from .annotate import natural_key
from .routing import heatmaps, routing_notes
from .terminal import human_bytes
from .text import (
    TextTable,
    asked_line,
    bound_text,
    duration,
    evidence_text,
    fabric_words,
    hardware_line,
    ledger_line,
    on_fabric,
    opportunity_ranking,
    opportunity_savings_text,
    payoff_rows,
    remedy_texts,
    roles_table,
    roofline_table,
    scale_up_word,
    scope_figures,
    scopes_attributed,
    scopes_shown,
    token_movement_line,
    utilization_line,
    verdict_lines,
)
from .text import headline as text_headline

BIN_BUDGET_BYTES = 3_000_000  # binned coverage, all lanes and categories of all inputs together
MAX_BINS = 16_384  # per device window, asked of the view; the common grid coarsens to fit the budget
MIN_BINS = 256
MAX_TABLE_ROWS = 64  # rows of a per-device table on the page; the JSON has every device
MAX_LANES = 64  # beyond, the timeline keeps the devices with the most exposed comm (a canvas has a height limit)
SKEW_ROWS = 6  # arrival-skew rows under the timeline: the collectives with the most time
CRITICAL = "critical path"  # §9: the projected step's critical path, a band under each lane it crosses
CRITICAL_CODE = WAIT_CODE + 1
DEFAULT_PROJECTION_ACTIVITIES = 100_000  # up to this, balance is drawn unasked (projected_by_default)
COLORS = {
    "compute": "#43a047",
    "comm NVLink": "#00acc1",
    "comm IB": "#8e24aa",
    "comm ?link": "#f9a825",
    "memcpy": "#3949ab",
    "other": "#9e9e9e",
    EXPOSED: "#e53935",
    CRITICAL: "#212121",
}
# the bucket split of accumulated time, keyed by the figure that holds each part
SPLIT = (
    ("compute", "compute_ns"),
    ("comm NVLink", "comm_nvlink_ns"),
    ("comm IB", "comm_ib_ns"),
    ("comm ?link", "comm_unknown_link_ns"),
    ("memcpy", "memcpy_ns"),
    ("other", "other_ns"),
)
DEVICE_TRACKS = (("compute", (0,)), ("comm", (1, 2, 3)), ("copy / other", (4, 5)))


@dataclass(frozen=True)
class ReportInput:
    """One input of the page: its label and its analysis, measured with a timeline view per device."""

    label: str
    analysis: Analysis
    timeline: tuple[TimelineView, ...] = ()  # the devices' timeline views (measured with timeline_options)
    instances: pd.DataFrame | None = None  # the §8 instances (the arrival skew drawn)
    # §9: set on a projected input: the projection and its critical path's activities (device, start_ns, end_ns)
    projection: Projection | None = None
    critical: pd.DataFrame | None = None


def per_input_cap(max_events: int, inputs: int) -> int:
    """Activities one input keeps one by one: the page's cap shared by its inputs."""
    return max(1_000, max_events // max(inputs, 1))


def timeline_options(lanes: str, max_events: int, inputs: int, files: int = 1) -> TimelineOptions:
    """What each device's view must hold for a page of ``inputs`` inputs, this one read from ``files`` files.

    The page keeps ~cap single activities per input, over all its shown devices, in one
    detail window each of them holds. So a device's view needs no more than cap / files
    of them (a job of many files has at least as many devices), and never fewer than a
    ``MAX_LANES``-th of the cap (the most devices the page shows): a 1,000-file job does
    not carry every activity of every device back to the process that renders.
    """
    cap = per_input_cap(max_events, inputs)
    raw_cap = max(cap // MAX_LANES, cap // max(files, 1))
    return TimelineOptions(bins=MAX_BINS, raw_cap=raw_cap, streams=lanes == "stream")


# ---------------------------------------------------------------- timeline data


def _b64(array: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")


def _track(
    name: str,
    start: np.ndarray,
    end: np.ndarray,
    codes: np.ndarray,
    labels: np.ndarray | None,
    t0: int,
    unit: int,
    label_dtype: str,
) -> dict:
    order = np.argsort(start, kind="stable")
    s = (start[order] - t0) // unit
    d = np.maximum((end[order] - t0) // unit - s, 0)
    out = {
        "name": name,
        "n": int(s.size),
        "s": _b64(s, "<u4"),
        "d": _b64(d, "<u4"),
        "c": _b64(codes[order], "u1"),
        "md": int(d.max()) if d.size else 0,
    }
    if labels is not None:
        out["l"] = _b64(labels[order], label_dtype)
    return out


def grid_at(lo: int, hi: int, width: int) -> Grid:
    """The grid of bins ``width`` wide (a power of two) covering ``[lo, hi)``, its origin a multiple of ``width``."""
    origin = (lo // width) * width
    return Grid(origin, width, max(1, -(-(hi - origin) // width)))


def common_grid(grids: Sequence[Grid]) -> Grid:
    """The finest grid every device's grid coarsens to: the widest of their widths, spanning them all."""
    width = max(g.width for g in grids)
    return grid_at(min(g.origin for g in grids), max(g.origin + g.n * g.width for g in grids), width)


def coarsen(values: np.ndarray, grid: Grid, target: Grid) -> np.ndarray:
    """Coverage on a device's grid, averaged onto a coarser grid of the same family (no bin straddles two)."""
    factor = target.width // grid.width
    first = (grid.origin - target.origin) // grid.width  # fine bins between the two origins
    index = (first + np.arange(values.size)) // factor
    sums = np.bincount(index, weights=values.astype(np.float64), minlength=target.n)[: target.n]
    return np.clip(np.rint(sums / factor), 0, 255).astype(np.uint8)


def common_detail(views: Sequence[TimelineView], cap: int) -> tuple[int, int]:
    """One detail window every shown device holds whole (inside each view's), cut to ~``cap`` activities."""
    w0 = max(v.detail[0] for v in views)
    w1 = min(v.detail[1] for v in views)
    if w1 <= w0:  # the views' detail windows do not meet (clocks far apart): bins only
        return w0, w0
    starts = np.concatenate([v.start[(v.end > w0) & (v.start < w1)] for v in views])
    steps = pd.concat([v.steps for v in views if len(v.steps)] or [views[0].steps], ignore_index=True)
    return detail_window(starts, steps, w0, w1, cap)


def _labels(names: np.ndarray, kinds: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per activity an index into a table of distinct "name<TAB>kind" strings."""
    name_codes, name_values = pd.factorize(names)
    kind_codes, kind_values = pd.factorize(kinds)
    width = len(kind_values) + 1
    idx, pairs = pd.factorize(name_codes.astype(np.int64) * width + kind_codes)
    return idx, [f"{name_values[p // width]}\t{kind_values[p % width]}" for p in pairs]


def _shown_devices(analysis: Analysis, devices: list[str], lanes_per_device: dict[str, int]) -> list[str]:
    """All devices, or where their lanes would not fit, those with the most exposed communication."""
    if sum(lanes_per_device.values()) <= MAX_LANES:
        return devices
    exposed = {d.device: d.exposed_comm_ns for d in analysis.devices}
    ranked = sorted(devices, key=lambda d: (-exposed.get(d, 0), natural_key(d)))
    keep: list[str] = []
    used = 0
    for device in ranked:
        if used + lanes_per_device[device] > MAX_LANES and keep:
            break
        keep.append(device)
        used += lanes_per_device[device]
    return sorted(keep, key=natural_key)


@dataclass
class _Lane:
    """One lane before encoding: per track the rows of its device's detail activities and its coverage bins."""

    label: str
    group: int
    view: TimelineView
    tracks: list[tuple[str, np.ndarray, dict[int, np.ndarray]]] = field(default_factory=list)
    stream: str | None = None
    exposed: bool = False


def _layout(views: list[TimelineView], picks: list[np.ndarray], lanes: str, binned: bool) -> list[_Lane]:
    """Lanes of tracks: per device its compute / comm / copy tracks, or per stream one track and an exposed lane."""
    has_other = any(c in (4, 5) for v in views for c in v.coverage)
    out: list[_Lane] = []
    for gi, (view, pick) in enumerate(zip(views, picks)):
        codes = view.code[pick]
        if lanes == "stream":
            if binned and view.streams and not view.stream_coverage:
                raise ValueError("stream lanes past the cap need views measured with TimelineOptions(streams=True)")
            stream_of = np.array([str(s) for s in view.stream[pick]], dtype=object)
            for stream in sorted(view.streams, key=natural_key):
                bins = {c: b for (s, c), b in view.stream_coverage.items() if s == stream}
                lane = _Lane(f"{view.device} {stream}".strip(), gi, view, stream=stream)
                lane.tracks.append(("all", np.flatnonzero(stream_of == stream), bins))
                out.append(lane)
            out.append(_Lane(f"{view.device} exposed comm", gi, view, stream="", exposed=True))
        else:
            lane = _Lane(view.device, gi, view, exposed=True)
            for name, group in DEVICE_TRACKS:
                if has_other or 4 not in group:
                    bins = {c: view.coverage[c] for c in group if c in view.coverage}
                    lane.tracks.append((name, np.flatnonzero(np.isin(codes, group)), bins))
            out.append(lane)
    return out


def _wait_track(view: TimelineView, w0: int, w1: int, t0: int, unit: int, grid: Grid | None) -> dict:
    """A device's wait segments (§8) inside the detail window, and on the page's grid their coverage per bin."""
    clip_s, clip_e, _ = iv.clip(*view.wait, np.array([w0]), np.array([w1]))
    track = _track(WAITING, clip_s, clip_e, np.full(clip_s.size, WAIT_CODE, np.uint8), None, t0, unit, "")
    if grid is not None:
        # a device the ledger gave no wait has no WAIT_CODE coverage: zero bins
        bins = view.coverage.get(WAIT_CODE, np.zeros(view.grid.n, np.uint8))
        track["b"] = {str(WAIT_CODE): _b64(coarsen(bins, view.grid, grid), "u1")}
    return track


def _critical_track(critical: pd.DataFrame, device: str, t0: int, t1: int, unit: int) -> dict:
    """The critical path's activities on one device, drawn whole (a path is one step: few activities)."""
    mine = critical[critical["device"].astype(str).to_numpy() == device]
    clip_s, clip_e, _ = iv.clip(
        *iv.union(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)),
        np.array([t0]),
        np.array([t1]),
    )
    return _track(CRITICAL, clip_s, clip_e, np.full(clip_s.size, CRITICAL_CODE, np.uint8), None, t0, unit, "")


def skew_data(rows: Sequence[ArrivalSkew], t0: int, t1: int, unit: int) -> dict:
    """The arrival-skew rows of the timeline: per collective its instances that meet the drawn window."""
    inside = [(row.last_ns >= t0) & (row.first_ns <= t1) for row in rows]
    who, names = pd.factorize(np.concatenate([row.straggler[m] for row, m in zip(rows, inside)] or [np.zeros(0)]))
    offsets = np.cumsum([0, *(int(m.sum()) for m in inside)])
    out = []
    for i, (row, m) in enumerate(zip(rows, inside)):
        s = (row.first_ns[m] - t0) // unit
        d = (row.last_ns[m] - t0) // unit - s
        # aligned clocks: an instance may start a little before the window, so starts count from ``o`` <= 0
        base = min(0, int(s.min())) if s.size else 0
        out.append(
            {
                "name": row.name,
                "kind": row.kind,
                "n": int(s.size),
                "count": row.count,
                "o": base,
                "s": _b64(s - base, "<u4"),
                "d": _b64(d, "<u4"),
                "w": _b64(who[offsets[i] : offsets[i + 1]], "<u4"),
                "md": int(d.max()) if d.size else 0,
            }
        )
    return {"devices": [str(x) for x in names], "rows": out}


def _empty_timeline(lanes: str) -> dict:
    return {
        "lanes": [],
        "span": 0,
        "unit": 1,
        "t0": 0,
        "labels": [],
        "label_bytes": 2,
        "mode": lanes,
        "events": 0,
        "devices": 0,
        "devices_total": 0,
    }


def timeline_data(item: ReportInput, lanes: str, cap: int, bin_budget: int) -> dict:
    """The compact timeline of one input, encoded from its devices' views (see the module doc)."""
    views = {v.device: v for v in item.timeline if v.window[0].size}
    if not views:
        return _empty_timeline(lanes)
    all_devices = sorted(views, key=natural_key)
    t0 = min(v.span[0] for v in views.values())
    t1 = max(v.span[1] for v in views.values())
    unit = max(1, math.ceil((t1 - t0) / 4_000_000_000))  # ticks fit uint32
    per_device = {d: (len(views[d].streams) + 1 if lanes == "stream" else 1) for d in all_devices}
    devices = _shown_devices(item.analysis, all_devices, per_device)
    shown = [views[d] for d in devices]
    n_events = sum(v.activities for v in shown)
    n_exposed = sum(v.exposed[0].size for v in shown)
    binned = n_events + n_exposed > cap or not all(v.complete for v in shown)
    # a third of the cap is left for the exposed intervals and the pieces clipped at the window's edges
    w0, w1 = common_detail(shown, cap * 2 // 3) if binned else (t0, t1)
    picks = [np.flatnonzero((v.end > w0) & (v.start < w1)) for v in shown]

    # one label table for the input: distinct (name, kind) pairs of the activities drawn one by one
    label_idx, label_values = _labels(
        np.concatenate([v.name[p] for v, p in zip(shown, picks)]),
        np.concatenate([v.kind[p] for v, p in zip(shown, picks)]),
    )
    label_dtype = "<u2" if len(label_values) < 65_536 else "<u4"
    offsets = np.cumsum([0, *(p.size for p in picks)])
    by_view = {id(v): (p, label_idx[offsets[i] : offsets[i + 1]]) for i, (v, p) in enumerate(zip(shown, picks))}

    layout = _layout(shown, picks, lanes, binned)
    ledger = item.analysis.ledger is not None and bool(item.analysis.ledger.get("instances"))
    grid = None
    if binned:
        exposed_lanes = sum(lane.exposed for lane in layout)
        channels = sum(len(bins) for lane in layout for *_, bins in lane.tracks) + exposed_lanes * (1 + ledger)
        grid = common_grid([v.grid for v in shown])
        while grid.n * max(channels, 1) > bin_budget and grid.n > MIN_BINS:
            grid = grid_at(grid.origin, grid.origin + grid.n * grid.width, grid.width * 2)

    out_lanes = []
    for lane in layout:
        view = lane.view
        pick, labels = by_view[id(view)]
        start = np.maximum(view.start[pick], w0)
        end = np.minimum(view.end[pick], w1)
        codes = view.code[pick]
        data: dict = {"label": lane.label, "group": lane.group, "tracks": []}
        if lane.stream is not None:
            data.update(device=view.device, stream=lane.stream)
        for name, rows, bins in lane.tracks:
            track = _track(name, start[rows], end[rows], codes[rows], labels[rows], t0, unit, label_dtype)
            if grid is not None:
                track["b"] = {str(c): _b64(coarsen(b, view.grid, grid), "u1") for c, b in sorted(bins.items())}
            data["tracks"].append(track)
        if lane.exposed:
            clip_s, clip_e, _ = iv.clip(*view.exposed, np.array([w0]), np.array([w1]))
            codes_e = np.full(clip_s.size, EXPOSED_CODE, np.uint8)
            track = _track(EXPOSED, clip_s, clip_e, codes_e, None, t0, unit, "")
            if grid is not None:
                track["b"] = {str(EXPOSED_CODE): _b64(coarsen(view.coverage[EXPOSED_CODE], view.grid, grid), "u1")}
            data["exposed"] = track
            if ledger:
                data["wait"] = _wait_track(view, w0, w1, t0, unit, grid)
            if item.critical is not None:
                data["crit"] = _critical_track(item.critical, view.device, t0, t1, unit)
        data["steps"] = [
            [int((max(s, t0) - t0) // unit), int((min(e, t1) - t0) // unit), int(n)]
            for n, s, e in view.steps[["step", "start_ns", "end_ns"]].itertuples(index=False)
            if e > t0 and s < t1
        ]
        out_lanes.append(data)
    out = {
        "mode": lanes,
        "t0": t0,
        "span": int((t1 - t0) // unit),
        "unit": unit,
        "labels": [str(v) for v in label_values],
        "label_bytes": 2 if label_dtype == "<u2" else 4,
        "lanes": out_lanes,
        "events": n_events,
        "devices": len(devices),
        "devices_total": len(all_devices),
    }
    if ledger:
        out["skew"] = skew_data(arrival_skew(item.analysis, item.instances, SKEW_ROWS), t0, t1, unit)
    if grid is not None:
        out["bins"] = {
            "n": grid.n,
            "o": (grid.origin - t0) / unit,
            "w": grid.width / unit,
            "w0": int((w0 - t0) // unit),
            "w1": int((w1 - t0) // unit),
        }
    return out


# ---------------------------------------------------------------- what the template lays out


def fmt_ms(ns: float | None) -> str:
    if ns is None:
        return "-"
    ms = ns / 1e6
    return f"{ms:,.3f}" if abs(ms) < 100 else f"{ms:,.1f}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


@dataclass(frozen=True)
class Segment:
    x: float
    width: float
    color: str
    tip: str


@dataclass(frozen=True)
class BarRow:
    """One SVG row: the bucket split of accumulated time, and under it the span with its exposed part."""

    label: str
    short: str
    y: int
    segments: list[Segment]
    exposed: Segment | None
    text: str


@dataclass(frozen=True)
class Bars:
    caption: str
    height: int
    rows: list[BarRow]
    x0: int = 190  # the label column
    width: int = 560


def bar_row(label: str, fig: Figures, y: int, x0: int = 190, width: int = 560) -> BarRow:
    total = fig.accumulated_ns or 1
    segments = []
    x = float(x0)
    for name, key in SPLIT:
        value = getattr(fig, key)
        w = width * value / total
        if w <= 0:
            continue
        tip = f"{label}: {on_fabric(name)} {fmt_ms(value)} ms ({fmt_pct(value / total)} of accumulated)"
        segments.append(Segment(x, w, COLORS[name], tip))
        x += w
    span, exposed = fig.span_ns, fig.exposed_comm_ns
    exposed_bar = None
    if span and exposed > 0:
        tip = f"{label}: exposed comm {fmt_ms(exposed)} ms = {fmt_pct(exposed / span)} of the {fmt_ms(span)} ms span"
        exposed_bar = Segment(float(x0), width * exposed / span, COLORS[EXPOSED], tip)
    text = (
        f"comm {fmt_pct(fig.comm_share)} · exposed {fmt_pct(fig.exposed_comm_fraction)} of span"
        f" · {fmt_ms(fig.accumulated_ns)} ms"
    )
    short = label if len(label) <= 26 else label[:25] + "…"  # the label column is 190 px wide
    return BarRow(label, short, y, segments, exposed_bar, text)


def bars(rows: Sequence[tuple[str, Figures]], caption: str) -> Bars:
    return Bars(caption, 26 * len(rows) + 4, [bar_row(label, fig, 2 + 26 * i) for i, (label, fig) in enumerate(rows)])


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    numeric_from: int = 1
    cls: str = ""


def per_device_unit(steps: int) -> str:
    """A column's time unit: per device, and per step where the trace has several (``steps``)."""
    return "ms/device/step" if steps > 1 else "ms/device"


def collectives_table(collectives: Sequence[Collective], top: int = 40, ledger: bool = False, steps: int = 1) -> Table:
    """The collectives, times per device and step (``steps``: the steps measured); where the ledger ran, their time
    split into wait and transfer (§8)."""
    rows = []
    unit = per_device_unit(steps)
    for c in collectives[:top]:
        util = c.link_utilization
        n = max(c.devices, 1) * max(steps, 1)  # times per device and step: the mean over the devices it ran on
        row = [
            c.name,
            c.kind,
            on_fabric(c.link),
            f"{c.count:,}",
            fmt_ms(c.total_ns / n),
            fmt_ms(c.exposed_ns / n),
        ]
        if ledger:
            tbw = c.transfer_bus_bandwidth_gbps
            wait = None if c.wait_ns is None else c.wait_ns / n
            transfer = None if c.transfer_ns is None else c.transfer_ns / n
            row += [fmt_ms(wait), fmt_ms(transfer), "-" if tbw is None else f"{tbw:,.3g}"]
        row += [
            human_bytes(c.bytes_per_call),
            "-" if c.bus_bandwidth_gbps is None else f"{c.bus_bandwidth_gbps:,.3g}",
            "-" if util is None else f"{fmt_pct(util)} {c.bandwidth_verdict or ''}",
        ]
        rows.append(row)
    headers = ["op", "kind", "link", "count", unit, f"exposed {unit}"]
    if ledger:
        headers += [f"wait {unit}", f"transfer {unit}", "transfer GB/s"]
    headers += ["bytes/call", "bus GB/s", "of link peak"]
    return Table(headers, rows, numeric_from=3, cls="coll")


def scopes_table(r: Analysis) -> Table | None:
    """Time per JAX scope (layers folded), the time of the activities that serve it beside its own where some
    run outside it, and, where the ops state them, FLOPs against the peak."""
    rows = scopes_shown(r)
    if not rows:
        return None
    flops = any(s.tflops_per_s is not None for s in rows)
    xla = any(s.peak_fraction_xla is not None for s in rows)
    attributed = scopes_attributed(rows)
    steps = step_divisor(r)
    unit = per_device_unit(steps)
    out = []
    for s in rows:
        n = max(s.devices, 1) * steps
        _, share, backward = scope_figures(s, attributed)
        served = [fmt_ms((s.attributed_ns or 0) / n)] if attributed else []
        row = [s.scope, f"{s.count / n:,.4g}", fmt_ms(s.total_ns / n), *served, fmt_pct(share or 0),
               fmt_pct(backward or 0), fmt_ms(s.comm_ns / n)]  # fmt: skip
        if flops:
            rate, of_peak = s.tflops_per_s, s.peak_fraction
            row += ["-" if rate is None else f"{rate:,.1f}", "-" if of_peak is None else fmt_pct(of_peak)]
        if xla:  # XLA's own count where the ragged dots were recounted
            row.append("" if s.peak_fraction_xla is None else fmt_pct(s.peak_fraction_xla))
        out.append(row)
    times = [f"own {unit}", f"attributed {unit}"] if attributed else [unit]
    headers = ["scope", "calls", *times, "share", "backward", f"comm {unit}"]
    headers += ["TFLOP/s", "of peak"] if flops else []
    return Table(headers + (["of peak by XLA's count"] if xla else []), out, numeric_from=1, cls="scopes")


@dataclass(frozen=True)
class LedgerSection:
    """What the page says about the cross-rank ledger (§8) of one input."""

    line: str  # matching and clocks in a sentence
    split: str  # the exposed comm by cause, over all devices
    devices: Table  # per device: exposed comm by cause, how often last, the waiting it caused
    stragglers: Table | None
    clocks: Table | None  # with several hosts
    skew: Table | None
    matched: bool = True  # some instance matched: the timeline shades waiting (else no split to draw)


def ledger_section(analysis: Analysis, led: LedgerSummary, skew: Sequence[ArrivalSkew]) -> LedgerSection:
    wait, transfer, unmatched = led.exposed_shares
    split = (
        f"Of the exposed communication of all devices, {fmt_pct(wait)} is waiting for the last member of its"
        f" collective, {fmt_pct(transfer)} is moving bytes and {fmt_pct(unmatched)} is in no matched instance."
        if led.instances
        else "No collective matched across ranks, so waiting and moving bytes cannot be told apart: analyze the"
        " traces of every member of the groups together."
    )
    keys = ("exposed_wait_ns", "exposed_transfer_ns", "exposed_unmatched_ns", "comm_wait_ns")
    steps = step_divisor(analysis)  # times per device and step, as the headline's
    per = " ms/step" if steps > 1 else " ms"
    listed = list(analysis.devices)
    if len(listed) > MAX_TABLE_ROWS:  # the devices that wait longest exposed, in device order
        top = {d.device for d in sorted(listed, key=lambda d: -d.value("exposed_wait_ns"))[:MAX_TABLE_ROWS]}
        listed = [d for d in listed if d.device in top]
        n = len(analysis.devices)
        split += f" The per-device table lists the {len(listed)} with the most exposed waiting (of {n})."
    devices = Table(
        [
            "device",
            f"exposed comm{per}",
            f"waiting{per}",
            f"moving bytes{per}",
            f"unmatched{per}",
            f"all comm waiting{per}",
            "last to arrive",
            f"others waited{per}",
        ],
        [
            [
                d.device,
                fmt_ms(d.exposed_comm_ns / steps),
                *(fmt_ms(d.value(k) / steps) for k in keys),
                f"{int(d.value('straggler_count')):,}",
                fmt_ms(d.value("caused_wait_ns") / steps),
            ]
            for d in listed
        ],
        cls="ledger-devices",
    )
    stragglers = None
    if led.stragglers:
        stragglers = Table(
            ["device", "last to arrive", "collectives it took part in", "share", f"others waited for it{per}"],
            [
                [
                    r.device,
                    f"{r.straggler_count:,}",
                    f"{r.instances:,}",
                    fmt_pct(r.last_share),
                    fmt_ms(r.caused_wait_ns / steps),
                ]
                for r in led.stragglers[:MAX_TABLE_ROWS]
            ],
            cls="stragglers",
        )
    clocks = None
    if len(led.clock_offsets_ns) > 1:
        unaligned = set(led.unaligned_hosts)
        clocks = Table(
            ["host", "clock offset", "aligned on"],
            [
                [
                    host,
                    f"{'+' if delta >= 0 else '−'}{duration(abs(delta))}",
                    "reference"
                    if i == 0
                    else ("nothing: taken as read" if host in unaligned else "shared collectives"),
                ]
                for i, (host, delta) in enumerate(led.clock_offsets_ns)
            ],
            cls="clocks",
        )
    skew_table = None
    if skew:
        rows = []
        for row in skew:
            last, times = row.most_often_last()
            rows.append(
                [
                    row.name,
                    row.kind,
                    f"{row.count:,}",
                    duration(row.median_spread_ns),
                    duration(row.max_spread_ns),
                    f"{last} ({times:,} of {row.count:,})",
                ]
            )
        skew_table = Table(
            ["collective", "kind", "instances", "median spread", "largest spread", "most often last"],
            rows,
            numeric_from=2,
            cls="skew",
        )
    return LedgerSection(ledger_line(led, lead=""), split, devices, stragglers, clocks, skew_table, led.instances > 0)


@dataclass(frozen=True)
class OpportunityItem:
    title: str
    hidden: str  # spec §6: hidden under compute, at most what on the worst device
    projected: str  # §9: taken away, what the step gains ("" where not projected)
    exposed: str  # its exposed time over all devices, per step where there are steps, with its unit
    evidence: str
    remedy: str


def opportunity_items(analysis: Analysis, top: int = 12) -> list[OpportunityItem]:
    """The opportunities as listed, each with its two answers: hidden under compute (the bound) and taken
    away (the §9 projection), in the terminal's words."""
    shown = analysis.opportunities[:top]
    steps = len({s.step for s in analysis.steps})
    out = []
    for o, remedy in zip(shown, remedy_texts(shown), strict=True):
        hidden, removed = opportunity_savings_text(o, steps, analysis.step_ns)
        exposed = f"{fmt_ms(o.exposed_ns / steps)} ms per step" if steps > 1 else f"{fmt_ms(o.exposed_ns)} ms"
        out.append(OpportunityItem(on_fabric(o.title), hidden, removed, exposed, evidence_text(o, steps), remedy))
    return out


def page_verdict(analysis: Analysis) -> list[str]:
    """The verdict, as the terminal says it first: the answer to ``--what-if``, where to look, the first try."""
    asked = analysis.projection("asked")
    lines = [asked_line(asked)] if asked is not None else []
    if analysis.devices:
        lines += verdict_lines(verdict(analysis))
    return lines


@dataclass(frozen=True)
class PayoffView:
    title: str
    table: Table
    notes: list[str]


def payoff_view(analysis: Analysis) -> PayoffView | None:
    """What would it buy (§9): the projections the analysis carries, as the terminal's table."""
    rows = payoff_rows(analysis)
    if not rows:
        return None
    table = Table(
        ["change", "what-if", "projected ms", "saving ms", "saving"],
        [[r.label, r.terms, r.projected_ms, r.saving_ms, r.saving] for r in rows],
        numeric_from=2,
    )
    title = f"What would it buy (projected; the step is {fmt_ms(analysis.step_ns)} ms, the job's mean)"
    return PayoffView(title, table, [f"{r.terms}: {r.note}" for r in rows if r.note])


def throughput_line(throughput: Mapping | None, ops_rate: bool = False) -> str:
    """tokens/s, model TFLOPS and MFU of a model config or a run's manifest; the model TFLOPS left out where the
    ops' own FLOP rate is on the page (``ops_rate``: one FLOP rate per screen)."""
    tp = throughput
    if not tp:
        return ""
    parts = []
    if tp.get("tokens_per_second") is not None:
        parts.append(f"{tp['tokens_per_second']:,.0f} tokens/s")
    if tp.get("tflops_per_device") is not None and not ops_rate:
        parts.append(f"{tp['tflops_per_device']:.4g} model TFLOPS per device")
    if tp.get("mfu") is not None:
        parts.append(f"MFU {fmt_pct(tp['mfu'])} of {tp.get('peak_tflops', 0):,.0f} TFLOPS {tp.get('dtype', '')}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Manifest:
    pairs: list[tuple[str, str, bool]]  # key, value, shown as code
    full: str


def _joined(d: object) -> str:
    if isinstance(d, dict):
        return ", ".join(f"{k}={v}" for k, v in d.items())
    if isinstance(d, list):
        return " ".join(str(x) for x in d)
    return "" if d is None else str(d)


def manifest_view(analysis: Analysis) -> Manifest | None:
    m = analysis.manifest
    if not m:
        return None
    dev = m.get("devices") or {}
    pairs = [
        ("capture", f"{m.get('kind', '')} at {m.get('created', '')}", False),
        ("command", _joined(m.get("command")), True),
        ("devices", f"{dev.get('count', '?')} x {dev.get('kind', '?')} ({dev.get('platform', '')})", False),
        ("topology", _joined(m.get("topology") or {}), False),
        ("host", f"{m.get('host', '')} {m.get('platform', '')}", False),
        ("versions", _joined(m.get("versions")), False),
        ("XLA flags", _joined(m.get("xla_flags")), True),
        ("environment", _joined(m.get("env")), True),
        ("precision", _joined(m.get("precision")), False),
        ("tokens per step", _joined(m.get("tokens_per_step")), False),
        ("throughput", throughput_line(analysis.throughput), False),
    ]
    full = orjson.dumps(dict(m), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()  # NaN -> null
    return Manifest([p for p in pairs if p[1]], full)


def step_rows(analysis: Analysis, limit: int = 40) -> list[tuple[str, Figures]]:
    """Per step, labelled with its time (the job's §5 window, as the headline's step), the mean device's figures
    (ratios are those of the step's sums)."""
    by_step: dict[int, list[Figures]] = {}
    for s in analysis.steps:
        by_step.setdefault(s.step, []).append(s)
    span = {s.step: s.span_ns for s in analysis.spread.steps}
    return [
        (f"step {step} · {fmt_ms(span[step])} ms" if step in span else f"step {step}", mean_figures(by_step[step]))
        for step in sorted(by_step)[:limit]
    ]


def headline(analysis: Analysis) -> str:
    if analysis.timeline_free and analysis.inspector is not None:
        from .inspector import headline as inspector_headline

        return inspector_headline(analysis.inspector)[0]
    """The terminal's key figures, per device (mean and worst): a sum over devices reads as longer than the run."""
    v = verdict(analysis)
    if v is None:
        return "no device activity"
    return " · ".join(text_headline(v))


@dataclass(frozen=True)
class InputPage:
    """What the template shows of one input."""

    index: int
    label: str
    analysis: Analysis
    headline: str
    throughput: str
    timeline_lanes: int
    hardware: str | None
    timeline_mode: str
    detail: bool  # a detail window of single kernels inside binned coverage
    timeline_note: str
    cpu: bool
    device_bars: Bars | None
    step_bars: Bars | None
    collectives: Table
    more_collectives: int
    opportunities: list[OpportunityItem]
    manifest: Manifest | None
    ledger: LedgerSection | None  # where the cross-rank ledger ran
    skew_rows: int  # arrival-skew rows drawn under the timeline
    projection: ProjectionView | None = None  # a projected input (§9)
    inspector: Markup | None = None  # NCCL Inspector logs: their view instead of a timeline
    scopes: Table | None = None  # time per JAX scope, where the trace names scopes
    utilization: str | None = None  # the FLOPs the ops state against the chip's peak
    token_movement: str | None = None  # spec §10: the token movement's share, FLOP rate and HBM use
    roles: Table | None = None  # the MoE roles per step
    roles_title: str = ""
    roles_note: str = ""
    roofline: Table | None = None  # the longest ops against the roof
    roofline_title: str = ""
    roofline_note: str = ""
    ranking: str = ""  # how the opportunities are ordered, in words
    verdict: list[str] = field(default_factory=list)  # the terminal's first lines: the answer asked for, the verdict
    payoffs: PayoffView | None = None  # "what would it buy" (§9), as the terminal shows it
    # spec §11: the heatmaps the script draws (expert load, per-pair traffic) and the words over them
    heatmaps: list[dict] = field(default_factory=list)
    routing_notes: list[str] = field(default_factory=list)


def input_page(index: int, item: ReportInput, timeline: dict) -> InputPage:
    """One input's page, its scale-up fabric named as its GPUs call it (NVLink, xGMI)."""
    with fabric_words(scale_up_word(item.analysis)):
        return _input_page(index, item, timeline)


def _input_page(index: int, item: ReportInput, timeline: dict) -> InputPage:
    r = item.analysis
    led = ledger_summary(r)
    bins: dict | None = timeline.get("bins")
    detail = bins is not None and bins["w1"] > bins["w0"]
    if not bins:
        note = f"{timeline['events']:,} activities."
    else:
        note = (
            f"{timeline['events']:,} activities: more than the report keeps one by one, so the view shows each "
            "category's coverage per time bin, and single kernels inside the highlighted detail window."
            if detail
            else f"{timeline['events']:,} activities: more than the report keeps one by one, so the view shows "
            "each category's coverage per time bin (the devices' detail windows do not overlap: no single kernels)."
        )
    if timeline["devices"] < timeline["devices_total"]:
        note += (
            f" The timeline shows the {timeline['devices']} devices with the most exposed communication "
            f"(of {timeline['devices_total']}); the bars and tables below count every device."
        )
    device_bars = None
    if r.devices:
        n = step_divisor(r)  # times per device and step, as the headline's (the window over its steps)
        rows: list[tuple[str, Figures]] = [(d.device, figures_per_step(d, n)) for d in r.devices]
        if len(r.devices) > 1:
            rows.append(("mean device", figures_per_step(mean_figures(r.devices), n)))
        per = f"per device and step (the capture's window over its {n} steps)" if n > 1 else "per device"
        device_bars = bars(
            rows,
            "Thick bar: bucket split of accumulated kernel time (100% = sum of all kernel durations). "
            f"Thin bar: the device's wall-clock span, red = exposed communication. Times are {per}.",
        )
    steps = step_rows(r)
    step_bars = None
    if steps:
        n_steps = len({s.step for s in r.steps})
        more = f" (first {len(steps)} of {n_steps})" if n_steps > len(steps) else ""
        step_bars = bars(
            steps,
            f"Per step: its time (the job's, from the first start to the last end of its work), the mean device{more}",
        )
    return InputPage(
        index=index,
        label=item.label,
        analysis=r,
        headline=headline(r),
        throughput=throughput_line(
            r.throughput, (r.utilization or {}).get("tflops_per_s_per_device") is not None and not tp_mfu(r)
        ),
        hardware=hardware_line(r),
        timeline_lanes=len(timeline["lanes"]),
        timeline_mode="one lane per device and stream" if timeline["mode"] == "stream" else "one lane per device",
        detail=detail,
        timeline_note=note,
        cpu=r.device_kind == CPU,
        device_bars=device_bars,
        step_bars=step_bars,
        collectives=collectives_table(
            r.collectives, ledger=led is not None and led.instances > 0, steps=step_divisor(r)
        ),
        more_collectives=max(0, len(r.collectives) - 40),
        # the projected page shows the changed timeline; its remedies are the measured page's, said once there
        opportunities=[] if item.projection is not None else opportunity_items(r),
        ranking=opportunity_ranking(r),
        verdict=[] if item.projection is not None else page_verdict(r),
        payoffs=None if item.projection is not None else payoff_view(r),
        manifest=manifest_view(r),
        ledger=None if led is None else ledger_section(r, led, arrival_skew(r, item.instances, SKEW_ROWS)),
        skew_rows=len((timeline.get("skew") or {}).get("rows", ())),
        projection=None if item.projection is None else projection_view(item.projection),
        inspector=inspector_view(r),
        scopes=scopes_table(r),
        utilization=utilization_line(r),
        token_movement=token_movement_line(r),
        roles=_table(roles_table(r), "roles"),
        roles_title=(roles_table(r) or _NO_TABLE).title,
        roles_note=(roles_table(r) or _NO_TABLE).caption,
        roofline=_table(roofline_table(r, 40), "roofline"),
        roofline_title=(roofline_table(r, 40) or _NO_TABLE).title,
        roofline_note=(roofline_table(r, 40) or _NO_TABLE).caption,
        heatmaps=timeline.get("heatmaps") or [],
        routing_notes=routing_notes(r),
    )


_NO_TABLE = TextTable("", [], [])


def _table(t: TextTable | None, cls: str) -> Table | None:
    """A shared text table (reports.text) as the page's table: names first, numbers from the column after the last
    name column."""
    if t is None:
        return None
    first_number = next((i for i, h in enumerate(t.headers) if h in ("calls", "ms")), 1)
    return Table(t.headers, t.rows, numeric_from=first_number, cls=cls)


def tp_mfu(r: Analysis) -> bool:
    """Whether the throughput carries its own MFU (a --model config): its model TFLOPS stay beside it."""
    return (r.throughput or {}).get("mfu") is not None


@dataclass(frozen=True)
class ProjectionView:
    """What the page says of a projection: the change, the step measured and projected, the critical path."""

    what_if: str
    measured_ms: str
    projected_ms: str
    saving: str
    critical_step: int | None
    path: Table  # the critical path's time by cause
    devices: str  # the devices the path crosses


def projection_view(p: Projection) -> ProjectionView:
    total = sum(p.path_by_cause.values())
    rows = [
        [cause, fmt_ms(p.path_by_cause.get(cause, 0)), fmt_pct(p.path_by_cause.get(cause, 0) / total if total else 0)]
        for cause in CAUSES
        if p.path_by_cause.get(cause, 0)
    ]
    crossed = list(p.critical_path.crossed or ())
    return ProjectionView(
        what_if=" ".join(p.what_if) or "(no change)",
        measured_ms=fmt_ms(p.measured_step_ns),
        projected_ms=fmt_ms(p.projected_step_ns),
        saving=f"saving {fmt_ms(p.saving_ns)} ms ({fmt_pct(p.saving_fraction)} of the step)"
        if p.shortens
        else "it would not shorten the step" + (f": {bound_text(p.bound)}" if p.bound is not None else ""),
        critical_step=p.critical_step,
        path=Table(["cause", "ms", "of the path"], rows, numeric_from=1, cls="path"),
        devices=", ".join(crossed[:8]) + (f" and {len(crossed) - 8} more" if len(crossed) > 8 else ""),
    )


def inspector_view(r: Analysis) -> Markup | None:
    """The NCCL Inspector view of an analysis of Inspector logs (escaped HTML), else None."""
    if not r.timeline_free or r.inspector is None:
        return None
    from .inspector import html

    return Markup(html(r.inspector))


def step_of(item: ReportInput) -> float | None:
    """§9's step time of an input (the one every screen shows): the measured job's, or, for a projected
    input, the projection's."""
    if item.projection is not None:
        return float(item.projection.projected_step_ns)
    return None if item.analysis.step_ns is None else float(item.analysis.step_ns)


@dataclass(frozen=True)
class Comparison:
    table: Table
    bars: Bars


def is_ratio_key(key: str) -> bool:
    return key in ("comm_share", "exposed_comm_fraction")


def comparison(items: Sequence[ReportInput]) -> Comparison:
    """Side by side: per bucket, comm share and exposed comm of each input, with the change against the first."""
    metrics: list[tuple[str, str, bool]] = [  # label, total key, is a ratio
        ("devices", "", False),  # the rest: the mean device
        ("accumulated ms", "accumulated_ns", False),
        *[(f"{on_fabric(name)} ms", key, False) for name, key in SPLIT],
        ("comm share", "comm_share", True),
        ("exposed comm ms", "exposed_comm_ns", False),
        ("exposed comm / span", "exposed_comm_fraction", True),
        ("step ms (the job's)", "", False),
    ]
    per_step = any(step_divisor(it.analysis) > 1 for it in items)
    headers = ["figure (mean device" + (", ms per step)" if per_step else ")")] + [it.label for it in items]
    headers += [f"{it.label} vs {items[0].label}" for it in items[1:]]

    def value(item: ReportInput, label: str, key: str) -> float | None:
        if label == "devices":
            return float(len(item.analysis.devices))
        if label.startswith("step ms"):
            return step_of(item)
        if is_ratio_key(key):
            return item.analysis.total.value(key)
        if not item.analysis.devices:
            return None
        return mean_figures(item.analysis.devices).value(key) / step_divisor(item.analysis)

    rows = []
    for label, key, is_ratio in metrics:
        vals = [value(it, label, key) for it in items]
        cells = []
        for v in vals:
            if v is None:
                cells.append("-")
            elif label == "devices":
                cells.append(f"{int(v)}")
            else:
                cells.append(fmt_pct(v) if is_ratio else fmt_ms(v))
        base = vals[0]
        for v in vals[1:]:
            if v is None or base is None:
                cells.append("-")
            elif is_ratio:
                cells.append(f"{100 * (v - base):+.1f} pt")
            elif label == "devices":
                cells.append(f"{int(v - base):+d}")
            else:
                cells.append(f"{(v - base) / 1e6:+,.3f}" + (f" ({(v - base) / base:+.0%})" if base else ""))
        rows.append([label, *cells])
    return Comparison(
        Table(headers, rows, numeric_from=1, cls="cmp"),
        bars(
            [
                (it.label, figures_per_step(mean_figures(it.analysis.devices), step_divisor(it.analysis)))
                for it in items
            ],
            "Bucket split of accumulated kernel time per input (the mean device); thin bar: exposed share of span.",
        ),
    )


# ---------------------------------------------------------------- the page


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("moeprof.reports", "templates"),
        autoescape=True,  # every value from a trace (kernel names, labels, paths) is text, never markup
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = fmt_ms
    env.filters["pct"] = fmt_pct
    return env


def _asset(name: str) -> Markup:
    # our own stylesheet and script, inlined verbatim (neither holds "</style>" or "</script>")
    return Markup(resources.files("moeprof.reports").joinpath("assets", name).read_text(encoding="utf-8"))


def _script_json(obj: object) -> Markup:
    # inside <script>, "</" would end the element: escape it (still valid JSON)
    return Markup(orjson.dumps(obj).decode().replace("</", "<\\/"))


def render(
    items: Sequence[ReportInput],
    lanes: str = "device",
    max_events: int = RAW_EVENTS_CAP,
    bin_budget: int = BIN_BUDGET_BYTES,
    title: str | None = None,
) -> str:
    """The whole report as one HTML string."""
    if lanes not in ("device", "stream"):
        raise ValueError("lanes must be 'device' or 'stream'")
    if not items:
        raise ValueError("a report needs at least one input")
    for it in items:
        if it.analysis.devices and not it.timeline:
            raise ValueError(f"{it.label}: the analysis holds no timeline views (measure it with a TimelineOptions)")
    words = {scale_up_word(it.analysis) for it in items}
    # one legend for every input: their fabric's name where they share one
    with fabric_words(words.pop() if len(words) == 1 else ("NVLink", "InfiniBand", "domain")):
        return _render(items, lanes, max_events, bin_budget, title)


def _render(items: Sequence[ReportInput], lanes: str, max_events: int, bin_budget: int, title: str | None) -> str:
    cap = per_input_cap(max_events, len(items))
    timelines = [timeline_data(it, lanes, cap, bin_budget // len(items)) for it in items]
    for it, tl in zip(items, timelines, strict=True):  # spec §11: drawn by the script beside the timeline
        tl["heatmaps"] = heatmaps(it.analysis)
    single = len(items) == 1
    measured = [it for it in items if it.projection is None] or list(items)
    if title is None:
        if len(measured) == 1:
            title = f"moeprof report · {measured[0].label} · {headline(measured[0].analysis)}"
        else:
            title = f"moeprof: {len(measured)} inputs compared"
    colors = {on_fabric(name): color for name, color in COLORS.items()}
    data = {
        "version": __version__,
        "categories": [on_fabric(c) for c in (*CATEGORIES, EXPOSED, WAITING, CRITICAL)],
        "codes": {"exposed": EXPOSED_CODE, "wait": WAIT_CODE, "critical": CRITICAL_CODE},
        "colors": colors,
        "inputs": timelines,
    }
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=title,
            version=__version__,
            single=single,
            inputs=[input_page(i, it, tl) for i, (it, tl) in enumerate(zip(items, timelines))],
            comparison=None if single else comparison(items),
            colors=colors,
            css=_asset("report.css"),
            script=_asset("report.js"),
            data=_script_json(data),
        )
    )


def write_report(items: Sequence[ReportInput], out: Path, **kwargs: object) -> int:
    """Write the report, whole or not at all (:func:`moeprof.outputs.write_bytes`); returns its size in bytes."""
    data = render(items, **kwargs).encode("utf-8")  # type: ignore[arg-type]
    try:
        write_bytes(out, data)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    return len(data)


def input_label(paths: Sequence[Path]) -> str:
    if len(paths) == 1:
        # a TensorBoard run's files sit deep inside the run folder: name the folder the user typed
        return paths[0].name or paths[0].resolve().name
    return " + ".join(p.name for p in paths)


def distinct_labels(labels: Iterable[str]) -> list[str]:
    """Two inputs with the same file name still need distinct labels."""
    labels = list(labels)
    return [f"{i + 1}: {lab}" if labels.count(lab) > 1 else lab for i, lab in enumerate(labels)]
