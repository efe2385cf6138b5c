"""The terminal tables of the CI commands: check's gates, diff's comparison and ablation, history's trends."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..gate.check import FIGURES, CheckConfig, GateResult, fmt
from ..gate.history import Run
from ..words import plural
from .terminal import human_bytes, make_console


def gate_table(results: list[GateResult], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col, justify in [
        ("gate", "left"),
        ("figure", "left"),
        ("value", "right"),
        ("limit", "right"),
        ("baseline", "right"),
        ("worst device", "left"),
        ("step", "right"),
        ("result", "left"),
    ]:
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in results:
        table.add_row(
            r.name,
            FIGURES[r.figure][1],
            fmt(r.value, r.unit),
            fmt(r.limit, r.unit),
            fmt(r.baseline, r.unit),
            r.device or "-",
            "-" if r.step is None else str(r.step),
            "[green]pass[/]" if r.passed else "[bold red]FAIL[/]",
        )
    return table


def render_check(results: list[GateResult], path: Path, cfg: CheckConfig) -> None:
    console = make_console()
    scope = "worst device" if cfg.per_device else "total"
    console.print(
        gate_table(results, escape(f"moeprof check {path} ({scope}{', ' + cfg.origin if cfg.origin else ''})"))
    )
    failed = sum(not r.passed for r in results)
    console.print(
        ("[green]the gate holds[/]" if len(results) == 1 else f"[green]all {len(results)} gates hold[/]")
        if not failed
        else f"[bold red]{failed} of {plural(len(results), 'gate')} failed[/]"
    )


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ratio":
        return f"{100 * v:.1f}%"
    if unit == "bytes":
        return human_bytes(v)
    return f"{v:,.3f}"


def _spread(h: float | None, unit: str) -> str:
    """`` ±x``: half the step-to-step range of a run (nothing when unknown)."""
    if h is None or unit == "bytes":
        return ""
    return f" ±{100 * h:.1f}" if unit == "ratio" else f" ±{h:,.3f}"


def _delta(d: float | None, change: float | None, unit: str, noise: bool | None = None) -> str:
    if d is None:
        return "-"
    if unit == "ratio":
        text = f"{100 * d:+.1f} pts"
    elif unit == "bytes":
        text = ("+" if d >= 0 else "-") + human_bytes(abs(d))
    else:
        text = f"{d:+,.3f}"
    if change is not None:
        text += f" ({100 * change:+.0f}%)"
    if abs(d) < 1e-12:
        return text
    if noise:  # the runs' step bands overlap: no colour, the words say it
        return f"[dim]{text} within noise[/]"
    # more time, comm or bytes is worse; the colour is a hint, the sign is the fact
    return f"[{'red' if d > 0 else 'green'}]{text}[/]"


def diff_table(doc: dict) -> Table:
    runs = doc["runs"]
    n = len(runs)
    table = Table(
        title="moeprof diff (ms per device and step; Δ vs the first run, and vs the previous one)",
        title_justify="left",
        caption="± half the range of the run's per-step values; within noise: the difference is no larger than"
        " the two ± together (the runs' step bands overlap), see docs/ci.md",
        caption_justify="left",
    )
    table.add_column("figure", justify="left")
    for r in runs:
        table.add_column(r["label"], justify="right")
    for i in range(1, n):
        table.add_column(f"Δ {runs[i]['label']}−{runs[0]['label']}", justify="right")
    for i in range(2, n):
        table.add_column(f"Δ {runs[i]['label']}−{runs[i - 1]['label']}", justify="right")
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
        cells = [_value(v, unit) + _spread(h, unit) for v, h in zip(row["values"], spreads)]
        cells += [_delta(row["delta_first"][i], row["change_first"][i], unit, noise_first[i]) for i in range(1, n)]
        cells += [
            _delta(row["delta_previous"][i], row["change_previous"][i], unit, noise_previous[i]) for i in range(2, n)
        ]
        table.add_row(row["name"], *cells)
    return table


def ablation_table(doc: dict) -> Table:
    ab = doc["ablation"]
    metric = "tokens/s" if ab["metric"] == "tokens_per_second" else "1/step time"
    table = Table(
        title=f"Ablation (gain = ratio of {metric}; within noise when the step times are)", title_justify="left"
    )
    for col in (
        "run",
        "tokens/s",
        "TFLOPS/device",
        "step ms",
        "comm share",
        "exposed comm ms",
        "gain vs prev",
        "gain vs first",
    ):
        table.add_column(col, justify="left" if col == "run" else "right")

    def num(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    def gain(g: float | None, noise: bool | None) -> str:
        if g is None:
            return "-"
        return f"[dim]{g:.3f}x within noise[/]" if noise else f"{g:.3f}x"

    for r in ab["runs"]:
        table.add_row(
            escape(f"{r['label']} {Path(r['path']).name}"),
            num(r["tokens_per_second"], ",.0f"),
            num(r["tflops_per_device"], ".4g"),
            num(r["step_ms"], ",.3f"),
            num(100 * r["comm_share"], ".1f") + "%",
            num(r["exposed_comm_ms"], ",.3f"),
            gain(r["gain_vs_previous"], r.get("gain_vs_previous_within_noise")),
            gain(r["gain_vs_first"], r.get("gain_vs_first_within_noise")),
        )
    return table


def render_diff(doc: dict) -> None:
    console = make_console()
    for r in doc["runs"]:
        hosts = "? hosts" if r["hosts"] is None else plural(r["hosts"], "host")
        console.print(
            f"{r['label']} = {r['path']}  ({plural(r['devices'], 'device')}, {hosts}, {plural(r['steps'], 'step')})",
            markup=False,
            highlight=False,
        )
    console.print(diff_table(doc))
    if doc["ablation"]:
        console.print(ablation_table(doc))


# what ``history`` shows for each stored figure (the stored names stay: they are the database's and the JSON's)
HISTORY_LABELS = {
    "comm_share": "comm share",
    "exposed_comm_fraction": "exposed comm / span",
    "idle_fraction": "idle / span",
    "exposed_comm_ms": "exposed comm per step (mean device, worst step)",
    "step_ms": "step time",
    "tokens_per_second": "tokens/s",
    "tflops_per_device": "model TFLOPS per device",
    "devices": "devices",
}


def history_label(name: str) -> str:
    """The figure as a reader says it; ns sums are shown in ms and are sums over the devices."""
    if name in HISTORY_LABELS:
        return HISTORY_LABELS[name]
    if name.endswith("_ns"):
        return name[: -len("_ns")].replace("_", " ") + " (sum over devices)"
    if name.endswith("_ms"):
        return name[: -len("_ms")].replace("_", " ")
    return name.replace("_", " ")


def _fmt(name: str, v: float | None) -> str:
    if v is None:
        return "-"
    if name in ("comm_share", "exposed_comm_fraction", "idle_fraction"):
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
