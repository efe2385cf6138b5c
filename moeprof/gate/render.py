"""The terminal tables of the CI commands: check's gates, diff's comparison and ablation, history's trends."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..core.names import cut
from ..insight.explain import ranked
from ..options import EXPLAIN_TOP_PARTS
from ..reports.fitting import NAME_MIN_WIDTH, cut_path, widths
from ..reports.terminal import human_bytes, make_console, natural_width, wrap
from ..reports.text import fabric_words, on_fabric
from ..words import plural
from .check import FIGURES, CheckConfig, GateResult, figure_words, fmt
from .history import Run


def gate_table(results: list[GateResult], title: str, width: int | None = None) -> Table:
    """The gates, one row each, in ``width`` columns: every gate's name whole (it is the option to change), numbers
    never cut. Narrower than the full table: the columns with nothing to say ("-" on every row) go, then each
    figure's words move under its gate's name, then the borders thin out; a device name is cut in its middle."""
    rows = [
        {
            "gate": r.name,
            "figure": figure_words(r.figure),
            "value": fmt(r.value, r.unit),
            "limit": fmt(r.limit, r.unit),
            "baseline": fmt(r.baseline, r.unit),
            "worst device": r.device or "-",
            "step": "-" if r.step is None else str(r.step),
            "result": _result(r),
        }
        for r in results
    ]
    columns = list(GATE_COLUMNS)
    said = [c for c in columns if c in ("gate", "figure", "result") or any(row[c] != "-" for row in rows)]
    layouts = [(columns, False, box.HEAVY_HEAD), (said, False, box.HEAVY_HEAD), (said, True, box.HEAVY_HEAD)]
    layouts.append((said, True, box.SIMPLE_HEAD))
    table = Table()
    for shown, stacked, frame in layouts:
        table = _gate_table(rows, title, shown, stacked, frame)
        if width is None or natural_width(table) <= width:
            return table
    assert width is not None
    # still too wide: the device names cut in their middle to what is left, then the gate names may fold
    longest = max([len("device"), *(len(row["worst device"]) for row in rows)])
    room = longest - (natural_width(table) - width)
    if "worst device" in said and room < longest:
        rows = [{**row, "worst device": cut(row["worst device"], max(room, NAME_MIN_WIDTH))} for row in rows]
        table = _gate_table(rows, title, said, True, box.SIMPLE_HEAD)
    if natural_width(table) > width:
        table = _gate_table(rows, title, said, True, box.SIMPLE_HEAD, whole_names=False)
    return table


GATE_COLUMNS = ("gate", "figure", "value", "limit", "baseline", "worst device", "step", "result")


def _gate_table(
    rows: list[dict[str, str]], title: str, shown: list[str], stacked: bool, frame: box.Box, whole_names: bool = True
) -> Table:
    """One layout of :func:`gate_table`: ``stacked`` puts each figure's words (dim) under its gate's name, and the
    header of the device column on two lines."""
    table = Table(title=title, title_justify="left", box=frame)
    names = [c for c in shown if not (stacked and c == "figure")]
    longest_gate = max([len("gate"), *(len(row["gate"]) for row in rows)])
    for col in names:
        if col == "gate":
            table.add_column("gate" + (" (figure)" if stacked else ""), min_width=longest_gate if whole_names else None)
        elif col == "worst device" and stacked:
            table.add_column("worst\ndevice", justify="left", no_wrap=True)
        elif col == "figure":
            table.add_column(col, justify="left")
        else:
            table.add_column(col, justify="left" if col in ("worst device", "result") else "right", no_wrap=True)
    for row in rows:
        cells: list[str | Text] = []
        for col in names:
            if col == "gate" and stacked:
                cells.append(Text(row["gate"], overflow="fold").append(f"\n{row['figure']}", style="dim"))
            elif col == "gate":
                cells.append(Text(row["gate"], no_wrap=True))
            else:
                cells.append(row[col])
        table.add_row(*cells)
    return table


def _result(r: GateResult) -> str:
    if not r.gated:
        return "[dim]not gated[/]"
    if not r.passed:
        return "[bold red]FAIL[/]"
    # past the tolerance but not beyond the noise of the steps: it holds, and says why
    return "[green]pass[/] [dim](noise)[/]" if r.past_limit else "[green]pass[/]"


def render_check(results: list[GateResult], path: Path, cfg: CheckConfig) -> None:
    console = make_console()
    scope = "worst device" if cfg.per_device else "total"
    console.print(
        gate_table(
            results, escape(f"moeprof check {path} ({scope}{', ' + cfg.origin if cfg.origin else ''})"), console.width
        )
    )
    failed = sum(not r.passed for r in results)
    for r in results:  # why a figure past its limit holds, or is not gated
        if (r.passed and r.past_limit) or not r.gated:
            console.print(f"[dim]{escape(r.message)}[/]", soft_wrap=True)
    gated = [r for r in results if r.gated]
    shown = f" ({len(results) - len(gated)} more shown, not gated)" if len(gated) < len(results) else ""
    console.print(
        (
            ("[green]the gate holds[/]" if len(gated) == 1 else f"[green]all {len(gated)} gates hold[/]")
            if not failed
            else f"[bold red]{failed} of {plural(len(gated), 'gate')} failed[/]"
        )
        + shown
    )


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ratio":
        return f"{100 * v:.1f}%"
    if unit == "bytes":
        return human_bytes(v)
    return f"{v:,.3f}"


def _spread(h: float | None, unit: str, sep: str = " ") -> str:
    """`` ±x``: half the step-to-step range of a run (nothing when unknown or when the figure never moves)."""
    if h is None or unit == "bytes" or h == 0:
        return ""
    return f"{sep}±{100 * h:.1f}" if unit == "ratio" else f"{sep}±{h:,.3f}"


def _delta(d: float | None, change: float | None, unit: str, noise: bool | None = None, layout: int = 0) -> str:
    """A difference, its relative change and whether it is within noise; ``layout`` 0 on one line,
    1 the noise verdict on a second line, 3 each part on its own line (narrow consoles)."""
    if d is None:
        return "-"
    if unit == "ratio":
        text = f"{100 * d:+.1f} pts"
    elif unit == "bytes":
        text = ("+" if d >= 0 else "-") + human_bytes(abs(d))
    else:
        text = f"{d:+,.3f}"
    if change is not None:
        text += ("\n" if layout >= 3 else " ") + f"({100 * change:+.0f}%)"
    if abs(d) < 1e-12:
        return text
    if noise:  # the runs' steps cannot be told apart: no colour, the words say it
        words = "within\nnoise" if layout >= 3 else "within noise"
        return f"[dim]{text}{' ' if layout == 0 else chr(10)}{words}[/]"
    # more time, comm or bytes is worse; the colour is a hint, the sign is the fact
    return f"[{'red' if d > 0 else 'green'}]{text}[/]"


def diff_table(doc: dict, width: int | None = None) -> Table:
    """The comparison in the richest layout that fits ``width``: every cell on one line; each value's
    spread and each delta's noise verdict on a second line; without the Δ-vs-previous columns (they
    follow from the Δ-vs-first ones); each part of a delta on its own line. Numbers are never cut."""
    table = _diff_table(doc, 0)
    for layout in (1, 2, 3):
        if width is None or natural_width(table) <= width:
            break
        table = _diff_table(doc, layout)
    return table


def _diff_table(doc: dict, layout: int) -> Table:
    runs = doc["runs"]
    n = len(runs)
    sep = " " if layout == 0 else "\n"
    previous = layout < 2 or n < 3  # the Δ-vs-previous columns
    caption = (
        "± half the range of the run's per-step values; within noise: the runs' per-step values cannot be"
        " told apart (Welch's test, 5%), see docs/ci.md"
    )
    if not previous:
        caption += "; Δ vs the previous run left out at this width (--json has it)"
    table = Table(
        title="moeprof diff (ms per device and step; Δ vs the first run, and vs the previous one)",
        title_justify="left",
        caption=caption,
        caption_justify="left",
    )
    table.add_column("figure", justify="left", min_width=12)
    for r in runs:
        table.add_column(r["label"], justify="right", no_wrap=True)  # numbers whole; the figure names wrap
    for i in range(1, n):
        table.add_column(f"Δ {runs[i]['label']}−{runs[0]['label']}", justify="right", no_wrap=True)
    for i in range(2, n if previous else 2):
        table.add_column(f"Δ {runs[i]['label']}−{runs[i - 1]['label']}", justify="right", no_wrap=True)
    section = None
    for row in doc["rows"]:
        if row["section"] != section:
            if section is not None:
                table.add_section()
            section = row["section"]
        unit = row["unit"]
        spreads = row.get("spread") or [None] * n
        noise_first = row.get("within_noise_first") or [None] * n
        noise_previous = row.get("within_noise_previous") or [None] * n
        cells = [_value(v, unit) + _spread(h, unit, sep) for v, h in zip(row["values"], spreads)]
        cells += [
            _delta(row["delta_first"][i], row["change_first"][i], unit, noise_first[i], layout) for i in range(1, n)
        ]
        cells += [
            _delta(row["delta_previous"][i], row["change_previous"][i], unit, noise_previous[i], layout)
            for i in range(2, n if previous else 2)
        ]
        table.add_row(on_fabric(row["name"]), *cells)
    return table


# the whole rule, as the diff table's caption states its own (gate/diff.py: step_time_row)
ABLATION_NOISE = (
    "a gain is within noise when the two runs' step times are: their per-step values cannot be told apart"
    " (Welch's test, 5%)"
)
ABLATION_COLUMNS = (
    "run",
    "tokens/s",
    "TFLOPS /device",
    "step ms",
    "comm share",
    "exposed comm ms",
    "gain vs prev",
    "gain vs first",
)


def ablation_table(doc: dict, width: int | None = None) -> Table:
    """Throughput and gain per run; narrower than ``width`` allows: headers and noise verdicts on two lines,
    then without TFLOPS per device, then without exposed comm (the diff table above has it). Numbers are
    never cut."""
    table = _ablation_table(doc, stacked=False, drop=())
    for drop in ((), ("TFLOPS /device",), ("TFLOPS /device", "exposed comm ms")):
        if width is None or natural_width(table) <= width:
            break
        table = _ablation_table(doc, True, drop)
    return table


def _ablation_table(doc: dict, stacked: bool, drop: tuple[str, ...]) -> Table:
    ab = doc["ablation"]
    metric = "tokens/s" if ab["metric"] == "tokens_per_second" else "1/step time"
    table = Table(
        title=f"Ablation (gain = ratio of {metric})",
        title_justify="left",
        caption=ABLATION_NOISE,
        caption_justify="left",
    )
    for col in ABLATION_COLUMNS:
        if col in drop:
            continue
        header = col.replace(" ", "\n", 1) if stacked else col.replace(" /", "/")
        if col == "run":
            table.add_column(header, justify="left", overflow="fold", min_width=6)
        else:
            table.add_column(header, justify="right", no_wrap=True)

    def num(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    def gain(g: float | None, noise: bool | None) -> str:
        if g is None:
            return "-"
        return f"[dim]{g:.3f}x{chr(10) if stacked else ' '}within noise[/]" if noise else f"{g:.3f}x"

    for r in ab["runs"]:
        cells = {
            "run": escape(f"{r['label']} {Path(r['path']).name}"),
            "tokens/s": num(r["tokens_per_second"], ",.0f"),
            "TFLOPS /device": num(r["tflops_per_device"], ".4g"),
            "step ms": num(r["step_ms"], ",.3f"),
            "comm share": num(100 * r["comm_share"], ".1f") + "%",
            "exposed comm ms": num(r["exposed_comm_ms"], ",.3f"),
            "gain vs prev": gain(r["gain_vs_previous"], r.get("gain_vs_previous_within_noise")),
            "gain vs first": gain(r["gain_vs_first"], r.get("gain_vs_first_within_noise")),
        }
        table.add_row(*(cells[c] for c in ABLATION_COLUMNS if c not in drop))
    return table


def render_diff(doc: dict, top: int = EXPLAIN_TOP_PARTS) -> None:
    console = make_console()
    for r in doc["runs"]:
        hosts = "? hosts" if r["hosts"] is None else plural(r["hosts"], "host")
        console.print(
            f"{r['label']} = {r['path']}  ({plural(r['devices'], 'device')}, {hosts}, {plural(r['steps'], 'step')})",
            markup=False,
            highlight=False,
        )
    with fabric_words(tuple(doc["fabrics"]) if doc.get("fabrics") else ("NVLink", "InfiniBand", "domain")):
        console.print(diff_table(doc, console.width))
    if doc["ablation"]:
        console.print(ablation_table(doc, console.width))
    if doc.get("ladder") and (len(doc["runs"]) > 2 or any(r["changed"] for r in doc["ladder"]["rungs"])):
        console.print(ladder_table(doc["ladder"], console.width))
    for e in doc.get("explanations") or ():
        console.print(explanation_table(e, top, console.width))
        for line in explanation_lines(e):
            for part in wrap(line, console.width):
                console.print(part, markup=False, highlight=False, soft_wrap=True)


def ladder_table(ladder: dict, width: int | None = None) -> Table:
    """An ablation ladder, one row per rung (a run against the one before it): what changed (the run folders'
    settings), the step before and after, the rung's change and its share of the whole ladder's, and the scopes
    whose activity time changed most (ms per device and step; the residual no part carries beside them)."""
    first, last = ladder["step_ms"]
    d = ladder["delta_ms"]
    table = Table(
        title=f"Ablation ladder: the step {first:,.3f} → {last:,.3f} ms ({d:+,.3f} ms), rung by rung"
        " (ms per device and step)",
        title_justify="left",
        caption="each rung against the run before it; where it went: the scopes (and passes) whose activity time"
        " changed most, and the residual (idle − overlap) no part carries; the explanations below list every part",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    table.add_column("rung", no_wrap=True)
    table.add_column("what changed", overflow="fold", ratio=2)
    table.add_column("step ms", justify="right", no_wrap=True)
    table.add_column("Δ ms", justify="right", no_wrap=True)
    table.add_column("of the\nladder", justify="right", no_wrap=True)
    table.add_column("where it went", overflow="fold", ratio=3)
    for r in ladder["rungs"]:
        changed = "; ".join(r["changed"]) or ("nothing the manifests record" if r["settings_known"] else "not recorded")
        where = [f"{s['scope']}{' (bwd)' if s['backward'] else ''} {s['delta_ms']:+,.3f}" for s in r["by_scope"]]
        if r["residual_ms"] is not None:
            where.append(f"residual {r['residual_ms']:+,.3f}")
        share = "-" if r["share_of_ladder"] is None else f"{100 * r['share_of_ladder']:.0f}%"
        a, b = r["step_ms"]
        table.add_row(
            f"{r['from']} → {r['to']}",
            escape(changed),
            f"{a:,.3f} → {b:,.3f}",
            _signed(r["delta_ms"]),
            share,
            escape("; ".join(where) or "-"),
        )
    return table


def part_scope(part: dict) -> str:
    """A part's scope as the table shows it: ``layer*/experts (bwd)`` for the backward pass."""
    return part["scope"] + (" (bwd)" if part.get("backward") else "")


def part_op(part: dict, most: int = 2) -> str:
    """A part's op and the JAX primitives in it, largest first: ``custom fusion: scatter-add, gather``."""
    primitives = part.get("primitives") or []
    if not primitives:
        return part["op"]
    more = f" +{len(primitives) - most}" if len(primitives) > most else ""
    return f"{part['op']}: {', '.join(primitives[:most])}{more}"


def fitted_part_op(part: dict, width: int) -> str:
    """:func:`part_op` in ``width`` characters: fewer primitives, then the op alone, then the op cut in its
    middle (``convolution fusion: dot_general`` -> ``convolution fusion``)."""
    primitives = part.get("primitives") or []
    candidates = [part_op(part, 2), part_op(part, 1)]
    if primitives:
        candidates.append(f"{part['op']} +{len(primitives)}")
    for text in candidates:
        if len(text) <= width:
            return text
    return cut(part["op"], width)


def _signed(ms: float) -> str:
    text = f"{ms:+,.3f}"
    if abs(ms) < 5e-4:
        return text
    return f"[{'red' if ms > 0 else 'green'}]{text}[/]"  # more time is worse; the sign is the fact


def explanation_table(e: dict, top: int = EXPLAIN_TOP_PARTS, width: int | None = None) -> Table:
    """Where the step went, per device and step: the ``top`` parts by |Δ|, the rest in one row, then the
    sum of the parts, the residual (idle − overlap) and the step, so the rows add up to the step.

    In ``width`` columns the names never fold into fragments: where scope and op do not fit side by side, each
    part's op goes under its scope (dim) in one column; a name still too long is cut in its middle
    (:mod:`.fitting`), an op first by the primitives it lists (:func:`fitted_part_op`)."""
    ref, run = e["reference"], e["run"]
    scoped = e["scoped"]
    shown, rest = ranked(e["parts"], top)
    acc, step, idle, overlap = e["accumulated"], e["step"], e["idle"], e["overlap"]
    # (change, scope, op, reference ms, run ms, Δ, style); a row that names no part has its words in the scope
    # column where there is one
    parts = [(p["change"], part_scope(p), part_op(p), p["reference_ms"], p["run_ms"], p["delta_ms"], "") for p in shown]

    def total(label: str, a: float, b: float, d: float, style: str = "") -> tuple:
        return ("", label if scoped else "", "" if scoped else label, a, b, d, style)

    totals = [total(rest["scope"], rest["reference_ms"], rest["run_ms"], rest["delta_ms"], "dim")] if rest else []
    residual = (idle["reference_ms"] - overlap["reference_ms"], idle["run_ms"] - overlap["run_ms"])
    sums = [
        total("all parts: activity time", acc["reference_ms"], acc["run_ms"], acc["delta_ms"]),
        total("residual: idle − overlap", *residual, e["residual_ms"]),
        total("step", step["reference_ms"], step["run_ms"], step["delta_ms"]),
    ]
    title = f"Where {run}'s step went against {ref}'s (ms per device and step; " + (
        "by the scope each op serves, pass and op)"
        if scoped
        else "by kernel and collective kind: the traces have no JAX scopes)"
    )

    def build(rows: list[tuple], names: tuple[int | None, ...] = (None, None), stacked: bool = False) -> Table:
        """``names``: the name columns' widths (the totals' words wrap within them); ``stacked``: scope over op."""
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
        table.add_column("change", justify="left", no_wrap=True)
        if stacked:
            table.add_column("scope\nop", justify="left", max_width=names[0])
        else:
            if scoped:
                table.add_column("scope", justify="left", max_width=names[0])
            table.add_column("op" if scoped else "kernel / collective kind", justify="left", max_width=names[-1])
        for header in (f"{ref} ms", f"{run} ms", f"Δ {run}−{ref}"):
            table.add_column(header, justify="right", no_wrap=True)
        for change, scope, op, a, b, d, style in rows:
            if change is None:
                table.add_section()
                continue
            if stacked:
                cells: list[str | Text] = [escape(change), Text(scope).append(f"\n{op}" if op else "", style="dim")]
            else:
                cells = [escape(change), *([escape(scope)] if scoped else []), escape(op)]
            table.add_row(*cells, f"{a:,.3f}", f"{b:,.3f}", _signed(d), style=style)
        return table

    section = (None, "", "", 0.0, 0.0, 0.0, "")
    if width is None:
        return build([*parts, *totals, section, *sums])
    # the room the numbers leave to the names
    blank = [(c, "", "", a, b, d, st) for c, _, _, a, b, d, st in [*parts, *totals, *sums]]
    heads = (len("scope"), len("op")) if scoped else (len("kernel / collective kind"),)
    room = width - (natural_width(build(blank)) - sum(heads))
    longest = [max([heads[0], *(len(p[1]) for p in parts)])] if scoped else []
    longest.append(max([heads[-1], *(len(p[2]) for p in parts)]))
    # the totals' words sit in the first name column: widen it to hold them on one line where the room allows
    # (else "all parts: activity time" folds into two rows)
    label = max(len(t[1] if scoped else t[2]) for t in [*totals, *sums])
    if label > longest[0] and sum(longest) - longest[0] + label <= room:
        longest[0] = label
    stacked = scoped and sum(longest) > room
    if stacked:
        one = max(min(max(longest), room + len("scope") - 2), NAME_MIN_WIDTH)  # "scope\nop": one header less
        fitted: list[int] = [one, one]
    else:
        fitted = widths(longest, room)
    rows = [
        (c, cut_path(sc, fitted[0]) if scoped else sc, fitted_part_op(part, fitted[-1]), a, b, d, st)
        for (c, sc, _, a, b, d, st), part in zip(parts, shown, strict=True)
    ]
    return build([*rows, *totals, section, *sums], tuple(fitted), stacked)


def explanation_lines(e: dict) -> list[str]:
    """The identity in words, and the uniform-ratio projection beside B's measured step."""
    ref, run = e["reference"], e["run"]
    step = e["step"]
    d = step["delta_ms"]
    how = f"{abs(d):,.3f} ms {'longer' if d > 0 else 'shorter'} than" if round(d, 3) else "as long as"
    idle, overlap = e["idle"]["delta_ms"], e["overlap"]["delta_ms"]
    lines = [
        f"{run}'s step is {how} {ref}'s ({step['reference_ms']:,.3f} → {step['run_ms']:,.3f} ms):"
        f" the parts change by {e['parts_delta_ms']:+,.3f} ms of activity time per device and step; the residual"
        f" {e['residual_ms']:+,.3f} ms is idle {idle:+,.3f} ms less overlap {overlap:+,.3f} ms"
        " (time no activity ran; time activities ran on top of one another)."
    ]
    p = e.get("projection")
    if p:
        terms = " ".join(p["what_if"]) or "no term"
        lines.append(
            f"{ref} replayed with {run}'s uniform ratios ({terms}) projects {p['projected_step_ms']:,.3f} ms;"
            f" {run} measured {step['run_ms']:,.3f} ms: the ratios miss {p['missed_ms']:+,.3f} ms."
        )
    return lines


# what ``history`` shows for each stored figure (the stored names stay: they are the database's and the JSON's)
HISTORY_LABELS = {
    "comm_share": "comm share",
    "exposed_comm_fraction": "exposed comm / span",
    "idle_fraction": "idle / span",
    "exposed_comm_ms": "exposed comm per step (worst step)",
    "comm_ib_ns": "comm IB (sum over devices)",
    "step_ms": "step time",
    "tokens_per_second": "tokens/s",
    "tflops_per_device": "model TFLOPS per device",
    "devices": "devices",
}


def history_label(name: str) -> str:
    """The figure as a reader says it; ns sums are shown in ms and are sums over the devices."""
    if name in HISTORY_LABELS:
        return HISTORY_LABELS[name]
    if name in FIGURES:
        return FIGURES[name][1]
    if name.endswith("_ns"):
        return name[: -len("_ns")].replace("_", " ") + " (sum over devices)"
    if name.endswith("_ms"):
        return name[: -len("_ms")].replace("_", " ")
    return name.replace("_", " ")


def _fmt(name: str, v: float | None) -> str:
    if v is None:
        return "-"
    if name in FIGURES and FIGURES[name][0] == "ratio":
        return f"{100 * v:.2f}%"
    if name.endswith("_ns"):
        return f"{v / 1e6:,.3f} ms"
    if name.endswith("_ms"):
        return f"{v:,.3f} ms"
    return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"


def render_history(db: Path, runs: list[Run], flip: dict | None, rows: list[dict]) -> None:
    console = make_console()
    if not runs:
        console.print(f"{db}: no runs recorded yet", markup=False)
        return
    first, latest = runs[0], runs[-1]
    console.print(
        f"{db}: runs #{first.id}..#{latest.id} ({len(runs)} shown), {first.time_utc} .. {latest.time_utc}",
        markup=False,
        highlight=False,
    )
    title = "The one run recorded" if len(runs) == 1 else f"Trend over the last {len(runs)} runs, oldest to newest"
    table = Table(title=title, title_justify="left")
    for col, justify in [
        ("figure", "left"),
        ("trend", "left"),
        ("first", "right"),
        ("last", "right"),
        ("min", "right"),
        ("max", "right"),
    ]:
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for t in rows:
        name = t["figure"]
        table.add_row(
            escape(history_label(name)),
            t["sparkline"],
            _fmt(name, t["first"]),
            _fmt(name, t["last"]),
            _fmt(name, t["min"]),
            _fmt(name, t["max"]),
        )
    console.print(table)
    checks = [r for r in runs if r.passed is not None]
    gate_names = list(dict.fromkeys(name for r in checks for name in r.gates))
    if gate_names:
        gates = Table(title="Gates over the check runs shown (✓ pass, ✗ fail)", title_justify="left")
        for col, justify in [("gate", "left"), ("results", "left"), ("last value", "right"), ("limit", "right")]:
            gates.add_column(col, justify=justify)  # type: ignore[arg-type]
        for name in gate_names:
            marks = "".join(" " if name not in r.gates else ("✓" if r.gates[name]["passed"] else "✗") for r in checks)
            last_gate = next(r.gates[name] for r in reversed(checks) if name in r.gates)
            gates.add_row(
                name,
                marks,
                _fmt(last_gate["figure"], last_gate["value"]),
                _fmt(last_gate["figure"], last_gate["limit"]),
            )
        console.print(gates)
    if checks:
        c = checks[-1]
        console.print(f"last check run #{c.id}: {'[green]passed[/]' if c.passed else '[bold red]failed[/]'}")
    if flip:
        commit = (flip["git_commit"] or "")[:12] or "no commit"
        console.print(f"[bold]last gate flip[/] pass → fail: run #{flip['run']} ({flip['time_utc']}, {commit})")
        for g in flip["gates"]:
            console.print(f"  {g['message']} (it passed in run #{g['previous_run']})", markup=False, highlight=False)
    elif checks:
        console.print("no gate has flipped from pass to fail")
