"""``moeprof report``: one self-contained HTML report (timeline, bucket bars, collectives, opportunities)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..options import RAW_EVENTS_CAP
from .common import (
    DomainOption,
    GpuOption,
    GpusPerNodeOption,
    RulesOption,
    RunOption,
    SkipFirstOption,
    StepMarkerOption,
    StepsOption,
    analyze_options,
    fail,
    guarded,
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
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Worker processes for several files.")] = None,
) -> None:
    """Write one self-contained HTML report: timeline per device, bucket bars, collectives, opportunities."""

    def body() -> None:
        from ..insight.bandwidth import link_peaks
        from ..reports.html import report_paths

        if lanes not in ("device", "stream"):
            raise fail(f"--lanes must be 'device' or 'stream', not {lanes!r}")
        if output.suffix.lower() not in (".html", ".htm"):
            raise fail(f"{output}: the report is HTML: name it *.html")
        options, step_options = analyze_options(
            steps, skip_first, nvlink_domain_size, gpus_per_node, step_marker=step_marker, rules=rules, run=run
        )
        peaks = link_peaks(gpu, link_peak)
        # one rule with analyze: the PATHs are one job unless --compare says they are runs to compare
        groups = [[p] for p in paths] if compare and len(paths) > 1 else [list(paths)]
        size = report_paths(groups, output, options, step_options, peaks, lanes, max_events, jobs)
        typer.echo(f"wrote {output} ({size / 1e6:.2f} MB)", err=True)

    guarded(body)
