"""``moeprof diff``: two or more runs side by side, with deltas and an ablation table."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..gate.check import load_source
from ..gate.diff import compare
from ..reports.terminal import human_bytes, make_console
from .check import options_given
from .common import (
    DomainOption,
    GpusPerNodeOption,
    SkipFirstOption,
    StepsOption,
    analyze_options,
    fail,
    guarded,
    stderr,
)


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ratio":
        return f"{100 * v:.1f}%"
    if unit == "bytes":
        return human_bytes(v)  # type: ignore[arg-type]
    return f"{v:,.3f}"


def _delta(d: float | None, change: float | None, unit: str) -> str:
    if d is None:
        return "-"
    if unit == "ratio":
        text = f"{100 * d:+.1f} pts"
    elif unit == "bytes":
        text = ("+" if d >= 0 else "-") + human_bytes(abs(d))  # type: ignore[arg-type]
    else:
        text = f"{d:+,.3f}"
    if change is not None:
        text += f" ({100 * change:+.0f}%)"
    style = "" if abs(d) < 1e-12 else ("red" if d > 0 else "green")
    # more time, comm or bytes is worse; the colour is a hint, the sign is the fact
    return f"[{style}]{text}[/]" if style else text


def diff_table(doc: dict) -> Table:
    runs = doc["runs"]
    n = len(runs)
    table = Table(
        title="moeprof diff (ms per device and step; Δ vs the first run, and vs the previous one)",
        title_justify="left",
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
        cells = [_value(v, unit) for v in row["values"]]
        cells += [_delta(row["delta_first"][i], row["change_first"][i], unit) for i in range(1, n)]
        cells += [_delta(row["delta_previous"][i], row["change_previous"][i], unit) for i in range(2, n)]
        table.add_row(row["name"], *cells)
    return table


def ablation_table(doc: dict) -> Table:
    ab = doc["ablation"]
    metric = "tokens/s" if ab["metric"] == "tokens_per_second" else "1/step time"
    table = Table(title=f"Ablation (gain = ratio of {metric})", title_justify="left")
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

    for r in ab["runs"]:
        table.add_row(
            escape(f"{r['label']} {Path(r['path']).name}"),
            num(r["tokens_per_second"], ",.0f"),
            num(r["tflops_per_device"], ".4g"),
            num(r["step_ms"], ",.3f"),
            num(100 * r["comm_share"], ".1f") + "%",
            num(r["exposed_comm_ms"], ",.3f"),
            "-" if r["gain_vs_previous"] is None else f"{r['gain_vs_previous']:.3f}x",
            "-" if r["gain_vs_first"] is None else f"{r['gain_vs_first']:.3f}x",
        )
    return table


def diff_command(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Two or more traces, run folders or analysis JSONs; the first is the reference."),
    ],
    json: Annotated[bool, typer.Option("--json", help="Print the moeprof.diff/1 comparison object.")] = False,
    skip_first: SkipFirstOption = 0,
    steps: StepsOption = None,
    nvlink_domain_size: DomainOption = None,
    gpus_per_node: GpusPerNodeOption = None,
) -> None:
    """Compare runs: buckets, comm share, exposed comm, collectives and opportunities, with deltas."""

    def body() -> None:
        if len(paths) < 2:
            raise fail("diff needs two or more inputs")
        load_opts, step_opts = analyze_options(steps, skip_first, nvlink_domain_size, gpus_per_node)
        sources = [load_source(p, load_opts, step_opts) for p in paths]
        if options_given(steps, skip_first, nvlink_domain_size, gpus_per_node):
            for s in sources:
                if s.kind == "analysis":
                    stderr.print(
                        f"moeprof: warning: {s.path} is a saved analysis; analyze options do not apply to it",
                        markup=False,
                        highlight=False,
                        soft_wrap=True,
                    )
        doc = compare(sources)
        for w in doc["warnings"]:
            stderr.print(f"moeprof: warning: {w}", markup=False, highlight=False, soft_wrap=True)
        if json:
            typer.echo(jsonlib.dumps(doc, indent=2))
            return
        console = make_console()
        for r in doc["runs"]:
            console.print(
                f"{r['label']} = {r['path']}  ({r['devices']} devices, {r['hosts']} host(s), {r['steps']} step(s))",
                markup=False,
                highlight=False,
            )
        console.print(diff_table(doc))
        if doc["ablation"]:
            console.print(ablation_table(doc))

    guarded(body)
