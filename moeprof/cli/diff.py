"""``moeprof diff``: two or more runs side by side, with deltas and an ablation table."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer

from .check import options_given
from .common import (
    DomainOption,
    GpusPerNodeOption,
    JobsOption,
    SchedulerOption,
    SkipBadOption,
    SkipFirstOption,
    StepsOption,
    analyze_options,
    exec_options,
    fail,
    guarded,
    stderr_console,
)


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
    jobs: JobsOption = None,
    scheduler: SchedulerOption = None,
    skip_bad: SkipBadOption = False,
) -> None:
    """Compare runs: buckets, comm share, exposed comm, collectives and opportunities, with deltas."""

    def body() -> None:
        from ..gate.check import load_source
        from ..gate.diff import compare
        from ..reports.gate import render_diff

        if len(paths) < 2:
            raise fail("diff needs two or more inputs")
        load_opts, step_opts = analyze_options(steps, skip_first, nvlink_domain_size, gpus_per_node)
        execution = exec_options(jobs, scheduler, skip_bad)
        sources = [load_source(p, load_opts, step_opts, execution) for p in paths]
        if options_given(steps, skip_first, nvlink_domain_size, gpus_per_node):
            for s in sources:
                if s.kind == "analysis":
                    stderr_console().print(
                        f"moeprof: warning: {s.path} is a saved analysis; analyze options do not apply to it",
                        markup=False,
                        highlight=False,
                        soft_wrap=True,
                    )
        doc = compare(sources)
        for w in doc["warnings"]:
            stderr_console().print(f"moeprof: warning: {w}", markup=False, highlight=False, soft_wrap=True)
        if json:
            typer.echo(jsonlib.dumps(doc, indent=2))
            return
        render_diff(doc)

    guarded(body)
