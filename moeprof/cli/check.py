"""``moeprof check``: CI gates on comm share, exposed comm and idle time (exit 1 on a regression)."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer

from ..words import plural
from ..workers import warm_fork_server
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

HistoryOption = Annotated[
    Path | None, typer.Option("--history", help="Append this run's figures to a SQLite history (e.g. runs.db).")
]


def options_given(
    steps: str | None, skip_first: int, nvlink_domain_size: int | None, gpus_per_node: int | None
) -> bool:
    return bool(steps or skip_first or nvlink_domain_size or gpus_per_node)


def check_command(
    path: Annotated[Path, typer.Argument(help="Trace(s) folder or file, run folder, or a saved analysis JSON.")],
    # short metavars and no --flag/--other pairs: at 80 columns typer's help gives the option names
    # only what the type and help columns leave, and the two --max-exposed-comm-* names cut short read the same
    # fractions are text: 0.5 or 50% (parsed in the body, so a bare 50 is refused in one line)
    max_comm_share: Annotated[
        str | None,
        typer.Option("--max-comm-share", metavar="X", help="Limit on comm / accumulated kernel time: 0.5 or 50%."),
    ] = None,
    max_exposed_comm_fraction: Annotated[
        str | None,
        typer.Option("--max-exposed-comm-fraction", metavar="X", help="Limit on exposed comm / span: 0.5 or 50%."),
    ] = None,
    max_idle_fraction: Annotated[
        str | None, typer.Option("--max-idle-fraction", metavar="X", help="Limit on idle / span: 0.5 or 50%.")
    ] = None,
    max_exposed_wait_fraction: Annotated[
        str | None,
        typer.Option(
            "--max-exposed-wait-fraction",
            metavar="X",
            help="Limit on exposed comm spent waiting for the last rank / span: 0.5 or 50%.",
        ),
    ] = None,
    max_exposed_transfer_fraction: Annotated[
        str | None,
        typer.Option(
            "--max-exposed-transfer-fraction", metavar="X", help="Limit on exposed comm moving bytes / span (0.5, 50%)."
        ),
    ] = None,
    # numbers are text too: parsed in the body, so nan and 1e400 (inf) are refused by name
    max_exposed_comm_ms: Annotated[
        str | None,
        typer.Option("--max-exposed-comm-ms", metavar="MS", help="Limit on exposed comm per step, ms (worst step)."),
    ] = None,
    max_balance_saving: Annotated[
        str | None,
        typer.Option(
            "--max-balance-saving",
            metavar="X",
            help="Limit on the step fraction balancing the ranks would save (the balance projection): 0.1 or 10%.",
        ),
    ] = None,
    max_beyond_shortest_fraction: Annotated[
        str | None,
        typer.Option(
            "--max-beyond-shortest-fraction",
            metavar="X",
            help="NCCL Inspector logs: limit on members' time beyond each collective's shortest / all: 0.5 or 50%.",
        ),
    ] = None,
    max_last_to_arrive_fraction: Annotated[
        str | None,
        typer.Option(
            "--max-last-to-arrive-fraction",
            metavar="X",
            help="NCCL Inspector logs: limit on the time others spend beyond the last to arrive: 0.5 or 50%.",
        ),
    ] = None,
    max_role_share: Annotated[
        list[str] | None,
        typer.Option(
            "--max-role-share",
            metavar="ROLE=X",
            help="Limit on a MoE role's share of the step (spec §10 roles: permute=0.3); repeatable.",
        ),
    ] = None,
    min_roof_fraction: Annotated[
        list[str] | None,
        typer.Option(
            "--min-roof-fraction",
            metavar="ROLE=X",
            help="Least fraction of its roof a MoE role runs at (roof time / its time: experts=0.5); repeatable.",
        ),
    ] = None,
    per_device: Annotated[bool, typer.Option("--per-device", help="Gate every device: the worst one decides.")] = False,
    total: Annotated[
        bool, typer.Option("--total", help="Gate the total (the default; overrides per-device in a config).")
    ] = False,
    baseline: Annotated[
        Path | None, typer.Option("--baseline", help="A saved analysis (moeprof baseline save): no figure may regress.")
    ] = None,
    tolerance: Annotated[
        str | None,
        typer.Option(
            "--tolerance",
            metavar="X",
            help="Allowed regression vs the baseline: absolute on ratios, relative on times (default 0.02, or 2%).",
        ),
    ] = None,
    noise_alpha: Annotated[
        str | None,
        typer.Option(
            "--noise-alpha",
            metavar="P",
            help="Level of the step-noise test of baseline gates (Welch, one-sided; default 0.001; 1: tolerance only).",
        ),
    ] = None,
    allow_dropped: Annotated[
        bool,
        typer.Option("--allow-dropped", help="Gate a trace whose reader dropped activities it could not place."),
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="TOML file with the gates (default: the tool.moeprof.check table of the nearest pyproject.toml).",
        ),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write a JUnit XML report (one testcase per gate).")
    ] = None,
    json: Annotated[bool, typer.Option("--json", help="Print the moeprof.check/1 verdict and nothing else.")] = False,
    history: HistoryOption = None,
    skip_first: SkipFirstOption = 0,
    steps: StepsOption = None,
    nvlink_domain_size: DomainOption = None,
    slice_size: SliceOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    jobs: JobsOption = None,
    scheduler: SchedulerOption = None,
    skip_bad: SkipBadOption = False,
) -> None:
    """Gate a run on its communication figures: exit 0 when every gate holds, 1 when one fails, 2 on bad input."""

    def body() -> None:
        domain = scale_up_domain(nvlink_domain_size, slice_size)  # --slice-size: the same setting, TPU
        if path.is_dir():  # a folder of traces (a saved analysis or one file needs no pool)
            warm_fork_server([path], jobs, scheduler)
        from ..gate.check import checkable, evaluate, load_source, resolve_config, verdict, write_junit
        from ..gate.render import render_check

        if per_device and total:
            raise fail("--per-device and --total exclude each other")
        cfg = resolve_config(
            {
                "max_comm_share": max_comm_share,
                "max_exposed_comm_fraction": max_exposed_comm_fraction,
                "max_idle_fraction": max_idle_fraction,
                "max_exposed_comm_ms": max_exposed_comm_ms,
                "max_exposed_wait_fraction": max_exposed_wait_fraction,
                "max_exposed_transfer_fraction": max_exposed_transfer_fraction,
                "max_balance_saving": max_balance_saving,
                "max_beyond_shortest_fraction": max_beyond_shortest_fraction,
                "max_last_to_arrive_fraction": max_last_to_arrive_fraction,
                "max_role_share": max_role_share,
                "min_roof_fraction": min_roof_fraction,
                "per_device": True if per_device else (False if total else None),
                "baseline": baseline,
                "tolerance": tolerance,
                "noise_alpha": noise_alpha,
                "allow_dropped": True if allow_dropped else None,
            },
            config,
        )
        if not cfg.has_gates:
            raise fail(
                "no gates: give --max-comm-share/--max-exposed-comm-fraction/--max-idle-fraction/--max-exposed-comm-ms/"
                "--max-exposed-wait-fraction/--max-exposed-transfer-fraction/--max-balance-saving/--max-role-share/"
                "--min-roof-fraction (Inspector logs: "
                "--max-beyond-shortest-fraction/--max-last-to-arrive-fraction) or --baseline, or set them in "
                "[tool.moeprof.check] of pyproject.toml"
            )
        load_opts, step_opts = analyze_options(steps, skip_first, domain, gpus_per_node)
        execution = exec_options(jobs, scheduler, skip_bad)
        source = load_source(path, load_opts, step_opts, execution)
        if source.kind == "analysis" and options_given(steps, skip_first, domain, gpus_per_node):
            raise fail(
                f"{path}: a saved analysis cannot be re-measured; --steps/--skip-first/--nvlink-domain-size/"
                "--gpus-per-node apply to traces and run folders"
            )
        base_source = load_source(cfg.baseline, load_opts, step_opts, execution) if cfg.baseline else None
        # every warning of the analyses, before any verdict: a gate on a trace read in part must say so
        for s in (source, base_source):
            for w in s.analysis.warnings if s is not None else ():
                prefix = "baseline: " if s is base_source else ""
                stderr_console().print(f"moeprof: warning: {prefix}{w}", markup=False, highlight=False, soft_wrap=True)
        if not cfg.allow_dropped:
            for s in (source, base_source):
                if s is not None and s.analysis.dropped_activities:
                    dropped = plural(s.analysis.dropped_activities, "device activity", "device activities")
                    raise fail(
                        f"{s.path}: the reader dropped {dropped}"
                        " whose times cannot be placed (see the warning above): its figures leave them out;"
                        " --allow-dropped gates it anyway"
                    )
        analysis = checkable(source, tuple(cfg.limits), tuple(cfg.role_limits))
        base = checkable(base_source) if base_source is not None else None
        results = evaluate(analysis, cfg, base)
        doc = verdict(results, source, cfg)
        if junit:
            write_junit(results, junit)
        if history:
            from ..gate.history import record_run

            record_run(history, "check", analysis, results, doc["passed"])
        if json:
            typer.echo(jsonlib.dumps(doc, indent=2))
        else:
            render_check(results, path, cfg)
        if not doc["passed"]:
            for r in results:
                if not r.passed:
                    stderr_console().print(f"moeprof: {r.message}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(1)

    guarded(body)
