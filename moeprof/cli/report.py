"""``moeprof report``: one self-contained HTML report (timeline, bucket bars, collectives, opportunities)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..options import RAW_EVENTS_CAP
from ..workers import warm_fork_server
from .common import (
    DomainOption,
    ExpertLoadOption,
    GpuOption,
    GpusPerNodeOption,
    JobsOption,
    RulesOption,
    RunOption,
    SchedulerOption,
    SkipBadOption,
    SkipFirstOption,
    SliceOption,
    StepMarkerOption,
    StepsOption,
    analyze_options,
    exec_options,
    fail,
    file_progress,
    guarded,
    read_load,
    scale_up_domain,
)


def report_command(
    paths: Annotated[list[Path], typer.Argument(help="Trace files or folders; several: a side-by-side comparison.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")],
    lanes: Annotated[
        str, typer.Option("--lanes", help="Timeline lanes: 'device' (one per device) or 'stream' (device + stream).")
    ] = "device",
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Each PATH is a separate run, shown side by side. Default: the PATHs are the files of one job "
            "(as analyze reads them).",
        ),
    ] = False,
    steps: StepsOption = None,
    skip_first: SkipFirstOption = 0,
    step_marker: StepMarkerOption = None,
    rules: RulesOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    nvlink_domain_size: DomainOption = None,
    slice_size: SliceOption = None,
    run: RunOption = None,
    gpu: GpuOption = None,
    link_peak: Annotated[
        str | None,
        typer.Option("--link-peak", help="Peak GB/s per GPU and direction, e.g. nvlink=450,ib=50 (ib=ndr|xdr)."),
    ] = None,
    max_events: Annotated[
        int,
        typer.Option(
            "--max-events", min=1000, help="Activities kept one by one in the timeline; past it, coverage per time bin."
        ),
    ] = RAW_EVENTS_CAP,
    jobs: JobsOption = None,
    scheduler: SchedulerOption = None,
    skip_bad: SkipBadOption = False,
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
            metavar="TERM",
            help="Draw the job replayed with this change beside the measured timeline (repeatable, the terms combine)."
            " Default, for a job of several devices and up to 100,000 activities: the first try where it is"
            " 'balance-router' or 'balance', else 'balance'. TERM is one of:",
        ),
    ] = None,
    no_projection: Annotated[
        bool, typer.Option("--no-projection", help="Draw the measured timeline alone (no projected one).")
    ] = False,
    expert_load: ExpertLoadOption = None,
) -> None:
    """Write one self-contained HTML report: timeline per device, bucket bars, collectives, opportunities."""

    def body() -> None:
        domain = scale_up_domain(nvlink_domain_size, slice_size)  # --slice-size: the same setting, TPU
        warm_fork_server(paths, jobs, scheduler)  # the workers' imports overlap ours
        from ..insight.bandwidth import link_peaks
        from ..pipeline.pages import report_inputs
        from ..readers.discovery import plan_job
        from ..reports.html import write_report

        if lanes not in ("device", "stream"):
            raise fail(f"--lanes must be 'device' or 'stream', not {lanes!r}")
        if output.suffix.lower() not in (".html", ".htm"):
            raise fail(f"{output}: the report is HTML: name it *.html")
        if what_if and (no_projection or (compare and len(paths) > 1)):
            raise fail("--what-if draws one job's projection: it excludes --no-projection and --compare")
        if what_if:
            from ..insight.projection import parse_terms

            parse_terms(what_if)  # a bad term fails before any trace is read
        if expert_load is not None and compare and len(paths) > 1:
            raise fail("--expert-load is one job's load: it excludes --compare of several runs")
        routed = read_load(expert_load)  # a bad file fails before any trace is read
        options, step_options = analyze_options(
            steps, skip_first, domain, gpus_per_node, step_marker=step_marker, rules=rules, run=run
        )
        peaks = link_peaks(gpu, link_peak)
        # one rule with analyze: the PATHs are one job unless --compare says they are runs to compare
        groups = [[p] for p in paths] if compare and len(paths) > 1 else [list(paths)]
        plans = [plan_job(g, options) for g in groups]  # each input's files, decided once
        with file_progress(sum(len(p.files) for p in plans)) as advance:
            items = report_inputs(
                groups, options, step_options, peaks, lanes, max_events,
                execution=exec_options(jobs, scheduler, skip_bad), progress=advance,
                what_if=[] if no_projection else what_if, plans=plans, expert_load=routed,
            )  # fmt: skip
        size = write_report(items, output, lanes=lanes, max_events=max_events)
        typer.echo(f"wrote {output} ({size / 1e6:.2f} MB)", err=True)

    guarded(body)
