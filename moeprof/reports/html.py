"""``moeprof report``: one self-contained HTML file (no network needed to view it).

Zero dependencies: the timeline is a ``<canvas>`` drawn by a small hand-written
script (``assets/report.js``), the bars are inline SVG written here, tables are
plain HTML. Everything, data included, is inline.

Timeline data, per input and lane: typed arrays as base64 (little-endian):
``s`` starts and ``d`` durations as uint32 ticks from the window start (a tick
is 1 ns unless the window is longer than 2^32 ns), ``c`` a category code (uint8,
index in ``CATEGORIES``; 6 = exposed comm), ``l`` an index into the input's
label table (kernel name and kind). The browser turns them into per-pixel
coverage each frame, so a draw costs O(events in view + pixels), never one DOM
node per kernel.

Past ``max_events`` raw events an input switches to binned coverage: per lane,
track and category, the fraction of each time bin covered (uint8), for the whole
window, plus raw events for a detail window (the first steps that fit the cap),
so a 1M-event trace stays a few MB and still shows kernels when zoomed in there.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pandas as pd

from .._version import __version__
from ..core import intervals as iv
from ..core.analysis import Analysis, Figures, Opportunity, sum_figures
from ..core.events import concat
from ..core.timeline import CATEGORIES, EXPOSED, EXPOSED_CODE, category_codes
from ..core.trace import Trace
from .annotate import natural_key
from .terminal import human_bytes
from .text import evidence_text

RAW_EVENTS_CAP = 250_000  # ~12 bytes each once base64'd: ~3 MB of raw events at most
BIN_BUDGET_BYTES = 3_000_000  # binned coverage, all lanes and categories of all inputs together
MAX_BINS = 16_384
MIN_BINS = 256
MAX_LANES = 64  # beyond, the timeline keeps the devices with the most exposed comm (a canvas has a height limit)
COLORS = {
    "compute": "#43a047",
    "comm NVLink": "#00acc1",
    "comm IB": "#8e24aa",
    "comm ?link": "#f9a825",
    "memcpy": "#3949ab",
    "other": "#9e9e9e",
    EXPOSED: "#e53935",
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


@dataclass
class ReportInput:
    """One analyzed input: its label, the analysis (with its timeline view) and the traces it read."""

    label: str
    analysis: Analysis
    traces: list[Trace]
    window: tuple[int, int] | None = None  # the measured window (step selection); None: the whole trace

    @property
    def result(self) -> SimpleNamespace:
        # the sections below read the analysis in its JSON form
        doc = {"throughput": None, "manifest": None, **self.analysis.to_json()}
        return SimpleNamespace(**doc)

    @property
    def events(self) -> pd.DataFrame:
        return concat([t.events for t in self.traces])


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


def _bins(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Fraction of each bin ``[edges[i], edges[i+1])`` covered by the union of the intervals, 0-255."""
    seg_s, seg_e = iv.union(start, end)
    covered = np.diff(iv.coverage(seg_s, seg_e, edges))
    width = np.maximum(np.diff(edges), 1)
    return np.clip(np.rint(255 * covered / width), 0, 255).astype(np.uint8)


def _raw_window(starts: np.ndarray, steps: pd.DataFrame, t0: int, t1: int, cap: int) -> tuple[int, int]:
    """A detail window of at most ~``cap`` events: from the first step, as many whole steps as fit."""
    ordered = np.sort(starts)
    w0 = max(int(steps["start_ns"].min()), t0) if not steps.empty else t0
    i0 = int(np.searchsorted(ordered, w0))
    last = min(i0 + cap, ordered.size) - 1
    w1 = int(ordered[last]) if last >= i0 else w0 + 1
    if not steps.empty:
        fits = steps[steps["end_ns"] <= w1]["end_ns"]
        if len(fits):
            w1 = int(fits.max())
    return w0, min(max(w1, w0 + 1), t1)


def _labels(activity: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Per row an index into a table of distinct "name<TAB>kind" strings, built from the categorical codes."""
    name_codes, names = pd.factorize(activity["name"].to_numpy(dtype=object))
    kind_codes, kinds = pd.factorize(activity["kind"].to_numpy(dtype=object))
    idx, pairs = pd.factorize(name_codes.astype(np.int64) * (len(kinds) + 1) + kind_codes)
    table = [f"{names[p // (len(kinds) + 1)]}\t{kinds[p % (len(kinds) + 1)]}" for p in pairs]
    return idx, table


def _shown_devices(item: ReportInput, devices: list[str], lanes_per_device: dict[str, int]) -> list[str]:
    """All devices, or where their lanes would not fit, those with the most exposed communication."""
    if sum(lanes_per_device.values()) <= MAX_LANES:
        return devices
    exposed = {d["device"]: d["exposed_comm_ns"] for d in item.result.devices}
    ranked = sorted(devices, key=lambda d: (-exposed.get(d, 0), natural_key(d)))
    keep, used = [], 0
    for device in ranked:
        if used + lanes_per_device[device] > MAX_LANES and keep:
            break
        keep.append(device)
        used += lanes_per_device[device]
    return sorted(keep, key=natural_key)


def timeline_data(item: ReportInput, lanes: str, cap: int, bin_budget: int) -> dict:
    """The compact timeline of one input: lanes of tracks of encoded events (see the module doc)."""
    activity = item.events
    start_all = activity["start_ns"].to_numpy(dtype=np.int64)
    end_all = np.maximum(activity["end_ns"].to_numpy(dtype=np.int64), start_all)
    if item.window:
        keep = (end_all > item.window[0]) & (start_all < item.window[1])
        activity = activity[keep]
        start_all = np.maximum(start_all[keep], item.window[0])
        end_all = np.minimum(end_all[keep], item.window[1])
    if not len(activity):
        return {"lanes": [], "span": 0, "unit": 1, "t0": 0, "labels": [], "mode": lanes, "events": 0, "devices": 0}
    t0, t1 = item.window if item.window else (int(start_all.min()), int(end_all.max()))
    unit = max(1, math.ceil((t1 - t0) / 4_000_000_000))  # ticks fit uint32
    bucket = activity["bucket"].to_numpy(dtype=object)
    codes = category_codes(bucket, activity["ib_fraction"].to_numpy())
    label_idx, label_values = _labels(activity)
    label_dtype = "<u2" if len(label_values) < 65_536 else "<u4"
    views = {v.device: v for v in item.analysis.timeline}
    step_frames = [v.steps.assign(device=v.device) for v in views.values() if len(v.steps)]
    steps = (
        pd.concat(step_frames, ignore_index=True)
        if step_frames
        else pd.DataFrame({"device": [], "step": [], "start_ns": [], "end_ns": []})
    )
    steps = steps[(steps["end_ns"] > t0) & (steps["start_ns"] < t1)]
    # row positions per device and per (device, stream): one pass, not one mask per device
    by_device = {str(k): v for k, v in activity.groupby("device", observed=True).indices.items()}
    by_stream: dict[str, dict[str, np.ndarray]] = {}
    if lanes == "stream":
        for (dev, stream), rows in activity.groupby(["device", "stream"], observed=True).indices.items():
            by_stream.setdefault(str(dev), {})[str(stream)] = rows
    all_devices = sorted(by_device, key=natural_key)
    per_device = {d: (len(by_stream.get(d, {})) + 1 if lanes == "stream" else 1) for d in all_devices}
    devices = _shown_devices(item, all_devices, per_device)
    if len(devices) < len(all_devices):
        shown = np.concatenate([by_device[d] for d in devices])
        n_events = int(shown.size)
    else:
        n_events = int(start_all.size)

    none = np.zeros(0, dtype=np.int64)
    exposed_by_device = {d: views[d].exposed if d in views else (none, none) for d in devices}
    n_exposed = sum(seg[0].size for seg in exposed_by_device.values())
    binned = n_events + n_exposed > cap
    # a third of the cap is left for the exposed intervals and the pieces clipped at the window's edges
    shown_starts = start_all if n_events == start_all.size else start_all[shown]
    w0, w1 = _raw_window(shown_starts, steps, t0, t1, cap * 2 // 3) if binned else (t0, t1)
    has_other = bool(np.isin(codes, (4, 5)).any())

    # (label, device index, stream or None, [(track name, row positions)], exposed segments or None)
    layout: list[tuple[str, int, str | None, list[tuple[str, np.ndarray]], tuple | None]] = []
    for gi, device in enumerate(devices):
        rows = by_device[device]
        if lanes == "stream":
            streams = by_stream.get(device, {})
            for stream in sorted(streams, key=natural_key):
                layout.append((f"{device} {stream}".strip(), gi, stream, [("all", np.sort(streams[stream]))], None))
            layout.append((f"{device} exposed comm", gi, "", [], exposed_by_device[device]))
        else:
            tracks = [
                (name, rows[np.isin(codes[rows], group)])
                for name, group in DEVICE_TRACKS
                if has_other or 4 not in group
            ]
            layout.append((device, gi, None, tracks, exposed_by_device[device]))

    channels = sum(len(np.unique(codes[rows])) for *_, tracks, _ in layout for _, rows in tracks)
    channels += sum(1 for *_, exp in layout if exp is not None)
    n_bins = int(np.clip(bin_budget // max(channels, 1), MIN_BINS, MAX_BINS)) if binned else 0
    edges = np.linspace(t0, t1, n_bins + 1).round().astype(np.int64) if binned else None

    out_lanes = []
    for label, gi, stream, tracks, exposed in layout:
        lane: dict = {"label": label, "group": gi, "tracks": []}
        if stream is not None:
            lane.update(device=devices[gi], stream=stream)
        for name, rows in tracks:
            s_r, e_r = start_all[rows], end_all[rows]
            inside = (e_r > w0) & (s_r < w1)
            sel = rows[inside]
            track = _track(
                name,
                np.maximum(s_r[inside], w0),
                np.minimum(e_r[inside], w1),
                codes[sel],
                label_idx[sel],
                t0,
                unit,
                label_dtype,
            )
            if binned:
                c_r = codes[rows]
                track["b"] = {
                    str(int(c)): _b64(_bins(s_r[c_r == c], e_r[c_r == c], edges), "u1") for c in np.unique(c_r)
                }
            lane["tracks"].append(track)
        if exposed is not None:
            e_s, e_e = exposed
            clip_s, clip_e, _ = iv.clip(e_s, e_e, np.array([w0]), np.array([w1]))
            track = _track(EXPOSED, clip_s, clip_e, np.full(clip_s.size, EXPOSED_CODE, np.uint8), None, t0, unit, "")
            if binned:
                track["b"] = {str(EXPOSED_CODE): _b64(_bins(e_s, e_e, edges), "u1")}
            lane["exposed"] = track
        device = devices[gi]
        dev_steps = steps[steps["device"] == device]
        lane["steps"] = [
            [int((max(s, t0) - t0) // unit), int((min(e, t1) - t0) // unit), int(n)]
            for n, s, e in dev_steps[["step", "start_ns", "end_ns"]].itertuples(index=False)
        ]
        out_lanes.append(lane)
    data = {
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
    if binned:
        data["bins"] = {"n": n_bins, "w0": int((w0 - t0) // unit), "w1": int((w1 - t0) // unit)}
    return data


# ---------------------------------------------------------------- HTML pieces

esc = html.escape


def fmt_ms(ns: float | None) -> str:
    if ns is None:
        return "-"
    ms = ns / 1e6
    return f"{ms:,.3f}" if abs(ms) < 100 else f"{ms:,.1f}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def split_bar(fig: dict, label: str, y: int, width: int = 560, x0: int = 190) -> str:
    """One SVG row: the bucket split of accumulated time, and under it the span with its exposed part."""
    total = fig["accumulated_ns"] or 1
    short = label if len(label) <= 26 else label[:25] + "…"  # the label column is 190 px wide
    parts = [f'<text x="0" y="{y + 12}" class="lbl">{esc(short)}<title>{esc(label)}</title></text>']
    x = float(x0)
    for name, key in SPLIT:
        value = fig.get(key, 0) or 0
        w = width * value / total
        if w <= 0:
            continue
        tip = f"{label}: {name} {fmt_ms(value)} ms ({fmt_pct(value / total)} of accumulated)"
        parts.append(
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="14" fill="{COLORS[name]}">'
            f"<title>{esc(tip)}</title></rect>"
        )
        x += w
    span = fig.get("span_ns") or 0
    exposed = fig.get("exposed_comm_ns", 0) or 0
    ew = width * exposed / span if span else 0
    parts.append(f'<rect x="{x0}" y="{y + 16}" width="{width}" height="4" fill="#e0e0e0"/>')
    if ew > 0:
        tip = f"{label}: exposed comm {fmt_ms(exposed)} ms = {fmt_pct(exposed / span)} of the {fmt_ms(span)} ms span"
        parts.append(
            f'<rect x="{x0}" y="{y + 16}" width="{ew:.2f}" height="4" fill="{COLORS[EXPOSED]}">'
            f"<title>{esc(tip)}</title></rect>"
        )
    text = (
        f"comm {fmt_pct(fig.get('comm_share'))} · exposed {fmt_pct(fig.get('exposed_comm_fraction'))} of span"
        f" · {fmt_ms(fig['accumulated_ns'])} ms"
    )
    parts.append(f'<text x="{x0 + width + 10}" y="{y + 12}" class="val">{esc(text)}</text>')
    return "".join(parts)


def bars_svg(rows: list[tuple[str, dict]], caption: str) -> str:
    height = 26 * len(rows) + 4
    body = "".join(split_bar(fig, label, 2 + 26 * i) for i, (label, fig) in enumerate(rows))
    return (
        f'<figure class="bars"><figcaption>{esc(caption)}</figcaption>'
        f'<svg viewBox="0 0 1160 {height}" width="1160" height="{height}" role="img" '
        f'aria-label="{esc(caption)}">{body}</svg></figure>'
    )


def legend(cpu: bool = False) -> str:
    items = "".join(
        f'<span class="key"><i style="background:{color}"></i>{esc(name)}</span>' for name, color in COLORS.items()
    )
    if cpu:  # the XLA:CPU demo has no NVLink: "NVLink" there means the traffic stays inside the host
        items += '<span class="note">(CPU devices: "NVLink" = stays inside the host)</span>'
    return f'<div class="legend">{items}</div>'


def _table(headers: list[str], rows: list[list[str]], numeric_from: int = 1, cls: str = "") -> str:
    head = "".join(f"<th{' class=num' if i >= numeric_from else ''}>{esc(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{' class=num' if i >= numeric_from else ''}>{c}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def collectives_html(result: SimpleNamespace, top: int = 40) -> str:
    if not result.collectives:
        return "<p>No communication found.</p>"
    rows = []
    for c in result.collectives[:top]:
        busbw = c.get("bus_bandwidth_gbps")
        util = c.get("link_utilization")
        rows.append(
            [
                f'<span class="name" title="{esc(c["name"])}">{esc(c["name"])}</span>',
                esc(c["kind"]),
                esc(c["link"]),
                f"{c['count']:,}",
                fmt_ms(c["total_ns"]),
                fmt_ms(c["exposed_ns"]),
                esc(human_bytes(c.get("bytes_per_call"))),
                "-" if busbw is None else f"{busbw:,.3g}",
                "-" if util is None else esc(f"{fmt_pct(util)} {c.get('bandwidth_verdict') or ''}"),
            ]
        )
    more = f"<p class=note>{len(result.collectives) - top} more not shown.</p>" if len(result.collectives) > top else ""
    headers = ["op", "kind", "link", "count", "total ms", "exposed ms", "bytes/call", "bus GB/s", "of link peak"]
    return _table(headers, rows, numeric_from=3, cls="coll") + more


def opportunities_html(result: SimpleNamespace, top: int = 12) -> str:
    if not result.opportunities:
        return "<p>No exposed communication or launch overhead found: nothing to hide.</p>"
    items = []
    for o in result.opportunities[:top]:
        bound = "bounded by independent compute in the HLO" if o.get("bound_from") == "hlo" else "its exposed time"
        items.append(
            f"<li><b>{esc(o['title'])}</b> <span class=save>save up to {fmt_ms(o['saving_bound_ns'])} ms on the "
            f"worst device</span> <span class=note>({esc(bound)}; {fmt_ms(o['exposed_ns'])} ms exposed over all "
            f"devices)</span><div class=ev>Evidence: {esc(evidence_text(Opportunity.from_json(o)))}</div>"
            f"<div class=remedy>→ {esc(o['remedy'])}</div></li>"
        )
    return f'<ol class="opps">{"".join(items)}</ol>'


def _kv(pairs: list[tuple[str, str]]) -> str:
    return "<dl class=kv>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs if v) + "</dl>"


def throughput_line(result: SimpleNamespace) -> str:
    tp = result.throughput
    if not tp:
        return ""
    parts = []
    if tp.get("tokens_per_second") is not None:
        parts.append(f"{tp['tokens_per_second']:,.0f} tokens/s")
    if tp.get("tflops_per_device") is not None:
        parts.append(f"{tp['tflops_per_device']:.4g} model TFLOPS per device")
    if tp.get("mfu") is not None:
        parts.append(f"MFU {fmt_pct(tp['mfu'])} of {tp.get('peak_tflops', 0):,.0f} TFLOPS {tp.get('dtype', '')}")
    return ", ".join(parts)


def manifest_html(result: SimpleNamespace) -> str:
    m = result.manifest
    if not m:
        return ""
    dev = m.get("devices") or {}
    topo = m.get("topology") or {}

    def join(d: object) -> str:
        if isinstance(d, dict):
            return esc(", ".join(f"{k}={v}" for k, v in d.items()))
        if isinstance(d, list):
            return esc(" ".join(str(x) for x in d))
        return esc("" if d is None else str(d))

    pairs = [
        ("capture", join(f"{m.get('kind', '')} at {m.get('created', '')}")),
        ("command", f"<code>{join(m.get('command'))}</code>"),
        ("devices", join(f"{dev.get('count', '?')} x {dev.get('kind', '?')} ({dev.get('platform', '')})")),
        ("topology", join(topo)),
        ("host", join(f"{m.get('host', '')} {m.get('platform', '')}")),
        ("versions", join(m.get("versions"))),
        ("XLA flags", f"<code>{join(m.get('xla_flags'))}</code>" if m.get("xla_flags") else ""),
        ("environment", f"<code>{join(m.get('env'))}</code>" if m.get("env") else ""),
        ("precision", join(m.get("precision"))),
        ("tokens per step", join(m.get("tokens_per_step"))),
        ("throughput", esc(throughput_line(result))),
    ]
    full = orjson.dumps(m, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()  # NaN -> null
    return (
        "<h3>Run manifest</h3>"
        + _kv(pairs)
        + f"<details><summary>full manifest.json</summary><pre>{esc(full)}</pre></details>"
    )


def step_rows(result: SimpleNamespace, limit: int = 40) -> list[tuple[str, dict]]:
    """Per step, the figures of all devices summed (ratios recomputed from the sums)."""
    by_step: dict[int, list[dict]] = {}
    for s in result.steps:
        by_step.setdefault(int(s["step"]), []).append(s)
    rows = []
    for step in sorted(by_step)[:limit]:
        total = sum_figures(Figures.from_json(s) for s in by_step[step])
        rows.append((f"step {step}", total.to_json()))
    return rows


def headline(result: SimpleNamespace) -> str:
    t = result.total
    return (
        f"{len(result.devices)} device(s) · comm share {fmt_pct(t.get('comm_share'))} · "
        f"exposed comm {fmt_ms(t.get('exposed_comm_ns'))} ms ({fmt_pct(t.get('exposed_comm_fraction'))} of span)"
    )


def input_section(index: int, item: ReportInput, timeline: dict, single: bool) -> str:
    r = item.result
    parts = [f'<section class="input" id="input-{index}">']
    if not single:  # a single input's headline is the page title
        parts.append(f"<h2>{esc(item.label)}</h2><p class=headline>{esc(headline(r))}</p>")
    tp = throughput_line(r)
    if tp:
        parts.append(f"<p class=headline>Throughput: {esc(tp)}</p>")
    n_lanes = len(timeline["lanes"])
    mode = "one lane per device and stream" if timeline["mode"] == "stream" else "one lane per device"
    binned = timeline.get("bins")
    note = (
        f"{timeline['events']:,} activities: more than the report keeps one by one, so the view shows each "
        "category's coverage per time bin, and single kernels inside the highlighted detail window."
        if binned
        else f"{timeline['events']:,} activities."
    )
    if timeline.get("devices", 0) < timeline.get("devices_total", 0):
        note += (
            f" The timeline shows the {timeline['devices']} devices with the most exposed communication "
            f"(of {timeline['devices_total']}); the bars and tables below count every device."
        )
    parts.append(
        f'<h3>Timeline</h3><div class="timeline" data-input="{index}" data-lanes="{n_lanes}">'
        f"{legend(cpu=all('/CPU:' in d['device'] for d in r.devices) and bool(r.devices))}"
        '<div class="toolbar"><button type="button" data-act="reset">Reset zoom</button>'
        + ('<button type="button" data-act="detail">Zoom to detail window</button>' if binned else "")
        + f"<span class=hint>{esc(mode)} · wheel: zoom · drag: pan · double-click: reset · hover: kernel</span></div>"
        '<canvas></canvas><div class="tip" hidden></div></div>'
        f"<p class=note>{esc(note)} Bar height = share of the pixel's time the category covers. "
        "Red band under each lane: exposed communication (comm with no compute running). "
        "Dashed lines: step boundaries.</p>"
    )
    if r.devices:
        rows = [(d["device"], d) for d in r.devices]
        if len(r.devices) > 1:
            rows.append(("total", r.total))
        parts.append("<h3>Where the accumulated kernel time goes</h3>")
        parts.append(
            bars_svg(
                rows,
                "Thick bar: bucket split of accumulated kernel time (100% = sum of all kernel durations). "
                "Thin bar: the device's wall-clock span, red = exposed communication.",
            )
        )
    steps = step_rows(r)
    if steps:
        n_steps = len({s["step"] for s in r.steps})
        caption = "Per step, all devices summed" + (
            f" (first {len(steps)} of {n_steps})" if n_steps > len(steps) else ""
        )
        parts.append(f"<h3>Per step</h3>{bars_svg(steps, caption)}")
    parts.append(f"<h3>Collectives ({len(r.collectives)})</h3>{collectives_html(r)}")
    parts.append(f"<h3>Opportunities, ranked by saving bound</h3>{opportunities_html(r)}")
    parts.append(manifest_html(r))
    if r.warnings:
        parts.append("<h3>Warnings</h3><ul class=warn>" + "".join(f"<li>{esc(w)}</li>" for w in r.warnings) + "</ul>")
    parts.append(f"<p class=note>Inputs: {esc(', '.join(r.inputs))}</p></section>")
    return "".join(parts)


def _median_step_ns(result: SimpleNamespace) -> float | None:
    spans = [s["span_ns"] for s in result.spread.get("steps", [])]
    return float(np.median(spans)) if spans else None


def comparison_section(items: list[ReportInput]) -> str:
    """Side by side: per bucket, comm share and exposed comm of each input, with the change against the first."""
    metrics: list[tuple[str, str, bool]] = [  # label, total key, is a ratio
        ("devices", "", False),
        ("accumulated ms", "accumulated_ns", False),
        *[(f"{name} ms", key, False) for name, key in SPLIT],
        ("comm share", "comm_share", True),
        ("exposed comm ms", "exposed_comm_ns", False),
        ("exposed comm / span", "exposed_comm_fraction", True),
        ("median step span ms", "", False),
    ]
    headers = ["figure (all devices)"] + [it.label for it in items]
    if len(items) > 1:
        headers += [f"{it.label} vs {items[0].label}" for it in items[1:]]

    def value(item: ReportInput, label: str, key: str) -> float | None:
        if label == "devices":
            return float(len(item.result.devices))
        if label.startswith("median step"):
            return _median_step_ns(item.result)
        return item.result.total.get(key)

    rows = []
    for label, key, ratio in metrics:
        vals = [value(it, label, key) for it in items]
        cells = []
        for v in vals:
            if v is None:
                cells.append("-")
            elif label == "devices":
                cells.append(f"{int(v)}")
            else:
                cells.append(fmt_pct(v) if ratio else fmt_ms(v))
        for v in vals[1:]:
            base = vals[0]
            if v is None or base is None:
                cells.append("-")
            elif ratio:
                cells.append(f"{100 * (v - base):+.1f} pt")
            elif label == "devices":
                cells.append(f"{int(v - base):+d}")
            else:
                cells.append(f"{(v - base) / 1e6:+,.3f}" + (f" ({(v - base) / base:+.0%})" if base else ""))
        rows.append([esc(label), *[esc(c) for c in cells]])
    bars = bars_svg(
        [(it.label, it.result.total) for it in items],
        "Bucket split of accumulated kernel time per input (all devices); thin bar: exposed share of span.",
    )
    return (
        '<section id="compare"><h2>Comparison</h2>'
        + _table(headers, rows, numeric_from=1, cls="cmp")
        + bars
        + "</section>"
    )


def _asset(name: str) -> str:
    return resources.files("moeprof.reports").joinpath("assets", name).read_text(encoding="utf-8")


def _script_json(obj: object) -> str:
    # inside <script>, "</" would end the element: escape it (still valid JSON)
    return orjson.dumps(obj).decode().replace("</", "<\\/")


# reports errors from the page's own script into the DOM, before that script runs
_ERROR_HOOK = """
(function () {
  var errs = [];
  function note(msg) {
    errs.push(String(msg));
    document.documentElement.setAttribute('data-errors', String(errs.length));
    var box = document.getElementById('moeprof-errors');
    if (!box) return;
    var li = document.createElement('li');
    li.textContent = String(msg);
    box.appendChild(li);
    box.hidden = false;
  }
  window.moeprofError = note;
  window.addEventListener('error', function (e) { note(e.message || 'script error'); });
  var orig = console.error;
  console.error = function () { note(Array.prototype.join.call(arguments, ' ')); orig.apply(console, arguments); };
})();
"""


def render(
    items: list[ReportInput],
    lanes: str = "device",
    max_events: int = RAW_EVENTS_CAP,
    bin_budget: int = BIN_BUDGET_BYTES,
    title: str | None = None,
) -> str:
    """The whole report as one HTML string."""
    if lanes not in ("device", "stream"):
        raise ValueError("lanes must be 'device' or 'stream'")
    per_cap = max(1_000, max_events // max(len(items), 1))
    timelines = [timeline_data(it, lanes, per_cap, bin_budget // max(len(items), 1)) for it in items]
    if title is None:
        title = (
            f"moeprof report · {items[0].label} · {headline(items[0].result)}"
            if len(items) == 1
            else f"moeprof: {len(items)} inputs compared"
        )
    body = []
    if len(items) > 1:
        body.append(comparison_section(items))
    body.extend(input_section(i, it, tl, len(items) == 1) for i, (it, tl) in enumerate(zip(items, timelines)))
    data = {"version": __version__, "categories": [*CATEGORIES, EXPOSED], "colors": COLORS, "inputs": timelines}
    nav = ""
    if len(items) > 1:
        nav = "<nav>" + " · ".join(f'<a href="#input-{i}">{esc(it.label)}</a>' for i, it in enumerate(items)) + "</nav>"
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_asset('report.css')}</style>"
        f"<script>{_ERROR_HOOK}</script></head><body>"
        f"<header><h1>{esc(title)}</h1>{nav}"
        f"<p class=note>moeprof {esc(__version__)} · comm share = communication / accumulated kernel time; "
        "exposed comm = time a device only communicates. "
        '<span id="moeprof-status" data-ok="0">drawing…</span></p>'
        '<ul id="moeprof-errors" hidden></ul></header><main>' + "".join(body) + "</main>"
        f'<script type="application/json" id="moeprof-data">{_script_json(data)}</script>'
        f"<script>{_asset('report.js')}</script></body></html>\n"
    )


def write_report(items: list[ReportInput], out: Path, **kwargs: object) -> int:
    """Write the report; returns its size in bytes."""
    text = render(items, **kwargs)  # type: ignore[arg-type]
    data = text.encode("utf-8")
    out.write_bytes(data)
    return len(data)
