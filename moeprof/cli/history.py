"""``moeprof history``: the trend of each figure over the runs a --history database holds."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer

from .common import guarded


def history_command(
    db: Annotated[Path, typer.Argument(help="The SQLite database that --history appended to.")],
    last: Annotated[int, typer.Option("--last", "-n", min=1, help="Show the last N runs.")] = 20,
    json: Annotated[bool, typer.Option("--json", help="Print runs, trends and the last gate flip as JSON.")] = False,
) -> None:
    """Trend per figure (sparkline over the last N runs) and the last run where a gate went from pass to fail."""

    def body() -> None:
        from ..gate.history import history_doc, last_flip, read_runs, trends
        from ..gate.render import render_history

        runs = read_runs(db, last)
        flip = last_flip(db)
        rows = trends(runs)
        if json:
            # strict JSON: read_runs left no inf or nan (a bare Infinity is no JSON a tool reads)
            typer.echo(jsonlib.dumps(history_doc(runs, rows, flip), indent=2, allow_nan=False))
            return
        render_history(db, runs, flip, rows)

    guarded(body)
