"""Spec §11 on screen: the expert load (tokens per layer and expert, drops) and the all-to-all traffic per
(sender, receiver) pair, in words every renderer shares and as the terminal's tables.

Renderers print what the analysis carries (``Analysis.expert_load``, ``Analysis.traffic``); nothing here
measures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich import box
from rich.table import Table

from ..core.analysis import Analysis
from ..core.expert_load import DROPS_MATTER, count_word, load_matters
from ..words import plural
from .text import human_bytes

LEVELS = " ▁▂▃▄▅▆▇█"  # a cell's tokens over the table's largest, in ninths: the per-layer picture
STRIP_EXPERTS = 64  # layers of at most this many experts get their picture in the terminal
MATRIX_RANKS = 12  # instances of at most this many ranks print their matrix; larger: the row and column sums
MATRICES_SHOWN = 4  # instances whose matrix the terminal prints (the JSON has every one)


def _n(x: float) -> str:
    """A token count: whole numbers and means of 100 or more as integers, smaller means to one decimal."""
    return f"{x:,.0f}" if abs(x - round(x)) < 0.05 or abs(x) >= 100 else f"{x:,.1f}"


def _source(section: Mapping[str, Any]) -> str:
    if section.get("source") == "manifest":
        return "the run's manifest"
    return f"--expert-load {section.get('origin', '')}".strip()


def _listed(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------- expert load


def load_line(section: Mapping[str, Any] | None) -> str | None:
    """The first lines' sentence on the expert load, where it matters (:func:`load_matters`): the drops of a
    capacity run where they reach 1% of the assignments, else the worst layer's hot and dead experts."""
    if not load_matters(section):
        return None
    assert section is not None
    layers = list(section.get("layers") or ())
    steps = int(section.get("steps") or 0)
    share = section.get("dropped_share")
    if isinstance(share, int | float) and share >= DROPS_MATTER:
        return _drops_line(section, layers)
    worst = max(layers, key=lambda entry: entry.get("max_over_mean") or 0)
    per_expert = worst.get("tokens_per_expert") or []
    hottest = int(worst.get("hottest") or 0)
    dead = worst.get("dead") or []
    text = (
        f"Expert load ({_source(section)}, {plural(steps, 'step')}): layer {worst['layer']} routes "
        f"{_n(per_expert[hottest])} of its {_n(worst.get('tokens') or 0)} {count_word(section.get('source'))} per "
        f"step to expert {hottest} ({worst['max_over_mean']:.1f}x the mean expert)"
    )
    text += f" and none to {len(dead)} of its {len(per_expert)} experts" if dead else ""
    others = [entry for entry in layers if entry is not worst and (entry.get("hot") or entry.get("dead"))]
    if others:
        names = _listed([f"{entry['layer']}" for entry in others])
        ratios = _listed([f"{entry['max_over_mean']:.1f}" for entry in others])
        text += f"; layer{'s' if len(others) > 1 else ''} {names} too (max/mean {ratios})"
    devices = section.get("devices")
    if devices == 1:
        text += "; every expert runs on one device, so the skew moves no work between devices"
    return text + "."


def _drops_line(section: Mapping[str, Any], layers: Sequence[Mapping[str, Any]]) -> str:
    dropped = float(section.get("dropped") or 0)
    tokens = float(section.get("tokens") or 0)
    cf = section.get("capacity_factor")
    capacity = section.get("capacity")
    head = f"capacity factor {cf:g}" if isinstance(cf, int | float) else "capacity"
    if capacity:
        head += f", {capacity:,} rows per expert and source device"
    by_layer = sorted(
        (entry for entry in layers if entry.get("dropped_share") is not None),
        key=lambda entry: -(entry.get("dropped_share") or 0),
    )
    parts = [
        f"layer {entry['layer']} {entry['dropped_share']:.1%}"
        if entry.get("dropped")
        else f"layer {entry['layer']} none"
        for entry in by_layer
    ]
    text = (
        f"Capacity drops ({_source(section)}; {head}): {_n(dropped)} of the {_n(tokens)} "
        f"{count_word(section.get('source'))} per "
        f"step are dropped ({dropped / tokens:.1%})"
        if tokens
        else "Capacity drops"
    )
    if parts:
        text += " — " + ", ".join(parts)
    per_step = section.get("dropped_per_step") or []
    if len(per_step) > 1 and max(per_step) > 2 * max(min(per_step), 1):
        worst = by_layer[0] if by_layer else None
        text += f"; per step from {_n(min(per_step))} to {_n(max(per_step))}"
        ratios = (worst or {}).get("max_over_mean_per_step") or []
        if worst is not None and ratios:
            text += (
                f", as layer {worst['layer']}'s routing concentrates (max/mean {min(ratios):.1f} to "
                f"{max(ratios):.1f} over the steps)"
            )
    return text + "."


LOAD_DROPPED_FIRST = ("p50", "p90", "hot", "dead", "p99", "hottest")  # the columns a narrow screen leaves out


def load_table(section: Mapping[str, Any], fits: Callable[[Table], bool] = lambda _t: True) -> Table:
    """Per layer: tokens per step, max/mean, the hottest expert, hot and dead experts, p50/p90/p99 of tokens per
    expert, the drops, and (up to :data:`STRIP_EXPERTS` experts) a picture of the layer, one cell per expert.
    Columns leave in the order of :data:`LOAD_DROPPED_FIRST`, then the picture, until the table ``fits``."""
    layers = list(section.get("layers") or ())
    capacity = section.get("capacity")
    title = f"Expert load ({_source(section)}): {section.get('unit', '')}"
    if capacity:
        factor = section.get("capacity_factor")
        title += f"; capacity {capacity:,} rows per expert and source device (factor {factor:g})"
    dropped = any(entry.get("dropped") is not None for entry in layers)
    experts = int(section.get("experts") or 0)
    strip = f"experts 0..{experts - 1}" if 0 < experts <= STRIP_EXPERTS else ""
    top = max((max(entry.get("tokens_per_expert") or [0]) for entry in layers), default=0)
    rows = [_load_cells(entry, strip, top) for entry in layers]
    names = ["layer", "tokens", "max/mean", "hottest", "hot", "dead", "p50", "p90", "p99"]
    names += ["dropped"] if dropped else []
    names += [strip] if strip else []

    def build(shown: list[str]) -> Table:
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
        for c in shown:
            left = c in ("hottest", "hot", "dead") or c == strip
            table.add_column(c, justify="left" if left else "right", no_wrap=True)
        for cells in rows:
            table.add_row(*(cells[c] for c in shown))
        return table

    table = build(names)
    for leave in (*LOAD_DROPPED_FIRST, strip):
        if fits(table) or not leave:
            break
        names.remove(leave)
        table = build(names)
    return table


def _load_cells(entry: Mapping[str, Any], strip: str, top: float) -> dict[str, str]:
    per_expert = entry.get("tokens_per_expert") or []
    hottest = int(entry.get("hottest") or 0)
    share = (entry.get("share") or [0] * len(per_expert))[hottest] if per_expert else 0
    cells = {
        "layer": str(entry["layer"]),
        "tokens": _n(entry.get("tokens") or 0),
        "max/mean": f"{entry.get('max_over_mean') or 0:.2f}",
        "hottest": f"{hottest}: {_n(per_expert[hottest])} ({share:.0%})" if per_expert else "-",
        "hot": _ids(entry.get("hot") or []),
        "dead": _ids(entry.get("dead") or []),
        **{f"p{q}": _n(entry.get(f"p{q}") or 0) for q in (50, 90, 99)},
    }
    d = entry.get("dropped")
    cells["dropped"] = "-" if d is None else (f"{_n(d)} ({entry.get('dropped_share') or 0:.1%})" if d else "0")
    if strip:
        cells[strip] = heat_strip(per_expert, top)
    return cells


def heat_strip(values: Sequence[float], top: float) -> str:
    """One character per value, its height its share of ``top`` in ninths (a blank: none)."""
    if top <= 0:
        return " " * len(values)
    return "".join(LEVELS[0 if v <= 0 else max(1, min(8, round(8 * v / top)))] for v in values)


def _ids(ids: Sequence[int]) -> str:
    if not ids:
        return "-"
    if len(ids) > 6:
        return f"{len(ids)}: " + ",".join(map(str, ids[:4])) + ",…"
    return ",".join(map(str, ids))


# ---------------------------------------------------------------- per-pair traffic


def _bytes(n: float | None) -> str:
    """A matrix cell or sum: "?" where unknown (never guessed)."""
    return "?" if n is None else human_bytes(n)


def _flag_text(flag: Mapping[str, Any]) -> str:
    over = f"{flag['over_mean']:.1f}x the mean"
    if flag["kind"] == "pair":
        return f"rank {flag['src']} -> rank {flag['dst']} carries {human_bytes(flag['bytes'])} ({over} pair)"
    role = "receiver" if flag["kind"] == "receiver" else "sender"
    verb = "gets" if role == "receiver" else "sends"
    return f"{role} rank {flag['rank']} {verb} {human_bytes(flag['bytes'])} ({over} {role}'s)"


def _where(entry: Mapping[str, Any]) -> str:
    step = entry.get("step")
    return f"{entry.get('collective', '')} call {entry.get('call', 0)}" + (f", step {step}" if step is not None else "")


def traffic_line(traffic: Sequence[Mapping[str, Any]]) -> str | None:
    """The first lines' sentence on the traffic, where an instance has a flagged row, column or pair: the most
    skewed, and how many instances are flagged."""
    flagged = [(f, t) for t in traffic for f in t.get("flagged") or ()]
    if not flagged:
        return None
    flag, entry = max(flagged, key=lambda ft: ft[0]["over_mean"])
    instances = sum(1 for t in traffic if t.get("flagged"))
    text = f"All-to-all traffic (PyTorch's split sizes): {_flag_text(flag)} in {_where(entry)}"
    if instances > 1:
        text += f"; {instances} of {plural(len(traffic), 'instance')} have a hot row, column or pair"
    return text + "."


def timeline_free_lines(analysis: Analysis) -> list[str]:
    """The first lines of a job whose traces hold no device activity but do hold all-to-all split sizes."""
    ranks = sorted({r for t in analysis.traffic for r in t.get("ranks") or ()})
    return [
        f"No device timeline in these traces ({plural(len(analysis.inputs), 'file')}, host-side PyTorch ops only: a "
        "CPU job, e.g. gloo): comm share, exposed communication and the ledger's wait and transfer need device "
        "activity.",
        f"What they do hold: {plural(len(analysis.traffic), 'all-to-all instance')} over "
        f"{plural(len(ranks), 'rank')} with the per-peer split sizes PyTorch recorded, below.",
    ]


def traffic_summary(traffic: Sequence[Mapping[str, Any]]) -> str:
    ranks = sorted({r for t in traffic for r in t.get("ranks") or ()})
    partial = sum(1 for t in traffic if t.get("partial"))
    steps = sorted({t["step"] for t in traffic if t.get("step") is not None})
    text = (
        f"All-to-all traffic from PyTorch's split sizes: {plural(len(traffic), 'instance')} over "
        f"{plural(len(ranks), 'rank')}"
    )
    if steps:
        text += f" in {plural(len(steps), 'step')}"
    if partial:
        text += (
            f"; {partial} partial (lists cut, dropped or not recorded: cells unknown, shown ?, never guessed; row and "
            "column sums from the tensors' dims)"
        )
    return text + ". Bytes per instance, row = sender, column = receiver."


def matrix_table(entry: Mapping[str, Any]) -> Table:
    """One instance's matrix with its row and column sums; a flagged cell, row or column marked ``*``."""
    ranks = list(entry.get("ranks") or ())
    matrix = entry.get("matrix_bytes") or []
    flags = entry.get("flagged") or []
    hot_rows = {f["rank"] for f in flags if f["kind"] == "sender"}
    hot_cols = {f["rank"] for f in flags if f["kind"] == "receiver"}
    hot_cells = {(f["src"], f["dst"]) for f in flags if f["kind"] == "pair"}
    title = f"{_where(entry)} ({entry.get('dtype') or 'dtype ?'}){', partial' if entry.get('partial') else ''}"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("from \\ to", justify="right", no_wrap=True)
    for r in ranks:
        table.add_column(f"{r}{'*' if r in hot_cols else ''}", justify="right", no_wrap=True)
    table.add_column("sent", justify="right", no_wrap=True)
    for i, (r, row) in enumerate(zip(ranks, matrix, strict=False)):
        cells = [_bytes(v) + ("*" if (r, ranks[j]) in hot_cells else "") for j, v in enumerate(row)]
        table.add_row(f"{r}{'*' if r in hot_rows else ''}", *cells, _bytes((entry.get("row_bytes") or [])[i]))
    table.add_row("received", *(_bytes(v) for v in entry.get("col_bytes") or []), "", end_section=True)
    return table


def sums_lines(entry: Mapping[str, Any]) -> list[str]:
    """An instance too large for its matrix: its row and column sums' spread and flags."""
    rows, cols = entry.get("row_bytes") or [], entry.get("col_bytes") or []
    known_rows = [v for v in rows if v is not None]
    known_cols = [v for v in cols if v is not None]
    lines = [
        f"{_where(entry)} ({entry.get('dtype') or 'dtype ?'}, {plural(len(entry.get('ranks') or ()), 'rank')}"
        f"{', partial: cells unknown' if entry.get('partial') else ''}): sent per rank "
        f"{human_bytes(min(known_rows, default=None))} to {human_bytes(max(known_rows, default=None))} "
        f"(max/mean {entry.get('row_max_over_mean') or 0:.2f}), received {human_bytes(min(known_cols, default=None))} "
        f"to {human_bytes(max(known_cols, default=None))} (max/mean {entry.get('col_max_over_mean') or 0:.2f})"
    ]
    lines += [f"  flagged: {_flag_text(f)}" for f in (entry.get("flagged") or ())[:4]]
    return lines


def receivers_table(entry: Mapping[str, Any]) -> Table | None:
    """Per receiver of an instance joined to the §8 ledger: bytes received, its wait for the last sender and its
    transfer, and bytes over the transfer: a hot receiver (many bytes, its usual rate) and a slow link (few
    bytes, a low rate) read apart."""
    receivers = entry.get("receivers")
    if not receivers:
        return None
    table = Table(title=f"{_where(entry)}: per receiver (§8 ledger)", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False)  # fmt: skip
    for c in ("rank", "received", "wait µs", "transfer µs", "GB/s over the transfer"):
        table.add_column(c, justify="right", no_wrap=True)
    for r in receivers:
        gbps = r.get("gbps")
        table.add_row(
            str(r["rank"]),
            human_bytes(r.get("bytes")),
            f"{r['wait_ns'] / 1e3:,.1f}",
            f"{r['transfer_ns'] / 1e3:,.1f}",
            "-" if gbps is None else f"{gbps:,.3g}",
        )
    return table


def reading(entry: Mapping[str, Any]) -> str | None:
    """What the join says of the slowest receiver: many bytes at the usual rate (a hot receiver: balance the
    router) or few bytes at a low rate (a slow link or receiver: the fabric)."""
    receivers = [r for r in entry.get("receivers") or () if r.get("gbps") and r.get("bytes")]
    if len(receivers) < 2:
        return None
    slowest = max(receivers, key=lambda r: r["transfer_ns"])
    rates = sorted(r["gbps"] for r in receivers)
    median_rate = rates[len(rates) // 2]
    mean_bytes = sum(r["bytes"] for r in receivers) / len(receivers)
    over = slowest["bytes"] / mean_bytes if mean_bytes else 0
    if over >= 1.5 and slowest["gbps"] >= 0.67 * median_rate:
        return (
            f"rank {slowest['rank']} transfers longest because it receives {over:.1f}x the mean receiver's bytes at "
            "the others' rate: a hot receiver (the router sends it too many tokens)"
        )
    if slowest["gbps"] < 0.5 * median_rate and over < 1.5:
        return (
            f"rank {slowest['rank']} transfers longest at {slowest['gbps']:.3g} GB/s, under half the median "
            f"receiver's {median_rate:.3g}, for {over:.1f}x the mean bytes: a slow link or receiver, not the routing"
        )
    return None


def traffic_renderables(
    traffic: Sequence[Mapping[str, Any]], fits: Callable[[Table], bool] = lambda _t: True
) -> list[Any]:
    """The terminal's traffic section: the summary, then per instance its matrix (up to :data:`MATRICES_SHOWN`
    instances of at most :data:`MATRIX_RANKS` ranks whose matrix ``fits`` the screen; else their sums), its
    per-receiver join and reading."""
    out: list[Any] = [traffic_summary(traffic)]
    shown = sorted(traffic, key=lambda t: (not t.get("flagged"),))[:MATRICES_SHOWN]
    for entry in shown:
        matrix = matrix_table(entry) if len(entry.get("ranks") or ()) <= MATRIX_RANKS else None
        if matrix is not None and fits(matrix):
            out.append(matrix)
            out += [f"  flagged: {_flag_text(f)}" for f in entry.get("flagged") or ()]
        else:
            out += sums_lines(entry)
        receivers = receivers_table(entry)
        if receivers is not None:
            out.append(receivers)
            if (said := reading(entry)) is not None:
                out.append(f"  {said}")
        elif entry.get("timeline") and not str(entry["timeline"]).startswith("needs device activity"):
            out.append(f"  wait and transfer: {entry['timeline']}")  # (no timeline at all: the first lines say so)
    if len(traffic) > len(shown):
        out.append(f"{len(traffic) - len(shown)} more instance(s) in the JSON (--json: traffic)")
    return out


# ---------------------------------------------------------------- the HTML report's heatmaps

HEATMAP_INSTANCES = 6  # traffic instances the page draws (the flagged first); the JSON has every one
HEATMAP_RANKS = 128  # instances over more ranks are drawn by their sums alone


def heatmaps(analysis: Analysis) -> list[dict[str, Any]]:
    """What the page's script draws (report.js ``drawHeatmap``): one map of tokens per layer (row) and expert
    (column) and, for a capacity run of one source device, the drops per layer and expert; one map of bytes per
    sender (row) and receiver (column) per all-to-all instance, its unknown cells null, with its row and column
    sums and flags. Values are exactly the analysis' figures."""
    out: list[dict[str, Any]] = []
    section = analysis.expert_load
    if section:
        layers = list(section.get("layers") or ())
        experts = int(section.get("experts") or 0)
        out.append(
            {
                "kind": "load",
                "title": f"Tokens per layer and expert: {section.get('unit', '')} ({_source(section)})",
                "rows": [f"layer {entry['layer']}" for entry in layers],
                "cols": [str(e) for e in range(experts)],
                "row_name": "layer",
                "col_name": "expert",
                "unit": "tokens",
                "values": [list(entry.get("tokens_per_expert") or []) for entry in layers],
                "means": [entry.get("mean") for entry in layers],
                "hot": [[int(e) for e in entry.get("hot") or ()] for entry in layers],
                "dead": [[int(e) for e in entry.get("dead") or ()] for entry in layers],
            }
        )
        if any(entry.get("dropped_per_expert") for entry in layers):
            out.append(
                {
                    "kind": "drops",
                    "title": f"Tokens dropped per layer and expert (capacity {section.get('capacity'):,} rows per "
                    "expert; per step)",
                    "rows": [f"layer {entry['layer']}" for entry in layers],
                    "cols": [str(e) for e in range(experts)],
                    "row_name": "layer",
                    "col_name": "expert",
                    "unit": "tokens",
                    "values": [list(entry.get("dropped_per_expert") or [0.0] * experts) for entry in layers],
                }
            )
    shown = sorted(analysis.traffic, key=lambda t: not t.get("flagged"))[:HEATMAP_INSTANCES]
    for entry in shown:
        ranks = [str(r) for r in entry.get("ranks") or ()]
        if len(ranks) > HEATMAP_RANKS:
            continue
        flags = entry.get("flagged") or []
        out.append(
            {
                "kind": "traffic",
                "title": f"Bytes per sender and receiver: {_where(entry)} ({entry.get('dtype') or 'dtype ?'})"
                + (" — partial: unknown cells hatched, sums from the tensors' dims" if entry.get("partial") else ""),
                "rows": ranks,
                "cols": ranks,
                "row_name": "sender",
                "col_name": "receiver",
                "unit": "bytes",
                "values": entry.get("matrix_bytes") or [],
                "row_sums": entry.get("row_bytes") or [],
                "col_sums": entry.get("col_bytes") or [],
                "flag_rows": [ranks.index(str(f["rank"])) for f in flags if f["kind"] == "sender"],
                "flag_cols": [ranks.index(str(f["rank"])) for f in flags if f["kind"] == "receiver"],
                "flag_cells": [
                    [ranks.index(str(f["src"])), ranks.index(str(f["dst"]))] for f in flags if f["kind"] == "pair"
                ],
            }
        )
    return out


def routing_notes(analysis: Analysis) -> list[str]:
    """The page's words over the heatmaps: the first lines' sentences and the traffic summary."""
    notes = [line for line in (load_line(analysis.expert_load), traffic_line(analysis.traffic)) if line]
    if analysis.traffic:
        notes.append(traffic_summary(analysis.traffic))
        for entry in analysis.traffic:
            if (said := reading(entry)) is not None:
                notes.append(f"{_where(entry)}: {said}.")
    return notes
