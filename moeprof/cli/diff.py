"""``moeprof diff``: two or more runs side by side, with deltas and an ablation table."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer

from ..options import EXPLAIN_TOP_PARTS
from .check import options_given
from .common import (
    DomainOption,
    GpusPerNodeOption,
    JobsOption,
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
    slice_size: SliceOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    jobs: JobsOption = None,
    scheduler: SchedulerOption = None,
    skip_bad: SkipBadOption = False,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain/--no-explain",
            help="Say where each run's step went against the run before it (an ablation ladder: A -> B -> C), with"
            " what changed between them (their run folders' settings): per JAX scope and op, what got cheaper,"
            " dearer, is new or gone, and the residual no part carries (idle, overlap). --no-explain reads the "
            "inputs in worker processes (--jobs, --scheduler) instead.",
        ),
    ] = True,
    top: Annotated[
        int,
        typer.Option("--top", min=1, help="Parts the explanation shows, largest change first; the rest in one row."),
    ] = EXPLAIN_TOP_PARTS,
) -> None:
    """Compare runs: buckets, comm share, exposed comm, collectives and opportunities, with deltas."""

    def body() -> None:
        domain = scale_up_domain(nvlink_domain_size, slice_size)  # --slice-size: the same setting, TPU
        from ..gate.diff import compare, load_with_traces, with_explanations
        from ..gate.render import render_diff

        if len(paths) < 2:
            raise fail("diff needs two or more inputs")
        load_opts, step_opts = analyze_options(steps, skip_first, domain, gpus_per_node)
        # each trace read once, its events kept: the explanation replays the first run (§9)
        execution = exec_options(jobs, scheduler, skip_bad)
        loaded = [load_with_traces(p, load_opts, step_opts, execution, keep_traces=explain) for p in paths]
        sources = [source for source, _ in loaded]
        if options_given(steps, skip_first, domain, gpus_per_node):
            for s in sources:
                if s.kind == "analysis":
                    stderr_console().print(
                        f"moeprof: warning: {s.path} is a saved analysis; analyze options do not apply to it",
                        markup=False,
                        highlight=False,
                        soft_wrap=True,
                    )
        doc = with_explanations(compare(sources), loaded, explain)
        for w in doc["warnings"]:
            stderr_console().print(f"moeprof: warning: {w}", markup=False, highlight=False, soft_wrap=True)
        if json:
            typer.echo(jsonlib.dumps(doc, indent=2))
            return
        render_diff(doc, top)

    guarded(body)
