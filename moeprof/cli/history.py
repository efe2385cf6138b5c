"""``moeprof history``: the trend of each figure over the runs a --history database holds."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..gate.history import last_flip, read_runs, trends
from ..reports.terminal import make_console
from .common import guarded


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


def history_command(
    db: Annotated[Path, typer.Argument(help="The SQLite database that --history appended to.")],
    last: Annotated[int, typer.Option("--last", "-n", min=1, help="Show the last N runs.")] = 20,
    json: Annotated[bool, typer.Option("--json", help="Print runs, trends and the last gate flip as JSON.")] = False,
) -> None:
    """Trend per figure (sparkline over the last N runs) and the last run where a gate went from pass to fail."""

    def body() -> None:
        runs = read_runs(db, last)
        flip = last_flip(db)
        rows = trends(runs)
        if json:
            typer.echo(
                jsonlib.dumps(
                    {
                        "schema": "moeprof.history/1",
                        "runs": [
                            {
                                "id": r.id,
                                "time_utc": r.time_utc,
                                "command": r.command,
                                "git_commit": r.git_commit,
                                "inputs": r.inputs,
                                "passed": r.passed,
                                "figures": r.figures,
                                "gates": r.gates,
                            }
                            for r in runs
                        ],
                        "trends": rows,
                        "last_flip": flip,
                    },
                    indent=2,
                )
            )
            return
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
        table = Table(title=f"Trend over the last {len(runs)} run(s), oldest to newest", title_justify="left")
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
                name,
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
                marks = "".join(
                    " " if name not in r.gates else ("✓" if r.gates[name]["passed"] else "✗") for r in checks
                )
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
                console.print(
                    f"  {g['message']} (it passed in run #{g['previous_run']})", markup=False, highlight=False
                )
        elif checks:
            console.print("no gate has flipped from pass to fail")

    guarded(body)
