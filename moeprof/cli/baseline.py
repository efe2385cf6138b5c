"""``moeprof baseline save``: store the figures ``moeprof check --baseline`` compares against."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from ..outputs import cannot_write, write_text
from ..words import plural
from .check import options_given
from .common import (
    DomainOption,
    FittingHelp,
    GpusPerNodeOption,
    JobsOption,
    MoeprofGroup,
    SchedulerOption,
    SkipBadOption,
    SkipFirstOption,
    SliceOption,
    StepsOption,
    analyze_options,
    exec_options,
    fail,
    guarded,
    scale_up_domain,
)

app = typer.Typer(
    help="Save and manage the baseline that moeprof check compares against.", no_args_is_help=True, cls=MoeprofGroup
)


@app.callback()
def _baseline() -> None:
    """Save and manage the baseline that moeprof check compares against."""


@app.command("save", cls=FittingHelp)
def save_command(
    path: Annotated[Path, typer.Argument(help="Trace(s) folder or file, run folder, or a saved analysis JSON.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Baseline file to write (e.g. baseline.json).")],
    skip_first: SkipFirstOption = 0,
    steps: StepsOption = None,
    nvlink_domain_size: DomainOption = None,
    slice_size: SliceOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    jobs: JobsOption = None,
    scheduler: SchedulerOption = None,
    skip_bad: SkipBadOption = False,
) -> None:
    """Write a moeprof.analysis/1 object (total, devices, steps, collectives) to use as --baseline."""

    def body() -> None:
        domain = scale_up_domain(nvlink_domain_size, slice_size)  # --slice-size: the same setting, TPU
        from ..gate.check import load_source
        from ..gate.history import git_commit

        load_opts, step_opts = analyze_options(steps, skip_first, domain, gpus_per_node)
        execution = exec_options(jobs, scheduler, skip_bad)
        source = load_source(path, load_opts, step_opts, execution)
        if source.kind == "analysis" and options_given(steps, skip_first, domain, gpus_per_node):
            raise fail(f"{path}: a saved analysis cannot be re-measured; analyze options apply to traces")
        doc = source.analysis.to_json()
        # where the baseline came from, so a stale one can be traced back (extra keys are allowed by the spec)
        doc["baseline"] = {
            "saved_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "source": str(path),
            "git_commit": git_commit(),
            "skip_first": skip_first,
            "steps": steps,
        }
        try:
            write_text(out, json.dumps(doc, indent=1) + "\n")
        except OSError as exc:
            raise cannot_write(out, exc) from None
        measured = len({s.step for s in source.analysis.steps})
        spread = (
            f"{plural(measured, 'step')}: the spread check --baseline tests a change against"
            if measured > 1
            else "fewer than two steps: no spread, check --baseline will use the tolerance alone"
        )
        typer.echo(f"baseline written to {out} ({plural(len(doc.get('devices') or []), 'device')}, {spread})", err=True)

    guarded(body)
