"""``moeprof annotate``: the trace as Chrome/Perfetto JSON, with moeprof's buckets, exposed comm and steps added."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..outputs import cannot_write
from ..words import plural
from .common import (
    DomainOption,
    GpusPerNodeOption,
    RulesOption,
    RunOption,
    SkipFirstOption,
    SliceOption,
    StepMarkerOption,
    StepsOption,
    analyze_options,
    fail,
    guarded,
    scale_up_domain,
)


def annotate_command(
    paths: Annotated[list[Path], typer.Argument(help="Trace files or folders of one job.")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write: *.trace.json.gz (or *.json, uncompressed).")
    ],
    steps: StepsOption = None,
    skip_first: SkipFirstOption = 0,
    step_marker: StepMarkerOption = None,
    rules: RulesOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    nvlink_domain_size: DomainOption = None,
    slice_size: SliceOption = None,
    run: RunOption = None,
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
            metavar="TERM",
            help="Write the job replayed with this change instead (repeatable, the terms combine), with its"
            " critical path as a track. TERM is one of:",
        ),
    ] = None,
) -> None:
    """Write a Chrome/Perfetto trace: device activity per stream plus moeprof's buckets, exposed comm and steps."""

    def body() -> None:
        domain = scale_up_domain(nvlink_domain_size, slice_size)  # --slice-size: the same setting, TPU
        from ..core.timeline import TimelineOptions
        from ..pipeline import Request
        from ..pipeline import run as run_job
        from ..reports.annotate import write_annotated

        if not output.name.lower().endswith((".json", ".json.gz")):
            raise fail(f"{output}: the annotated trace is trace-event JSON: name it *.trace.json.gz or *.json")
        options, step_options = analyze_options(
            steps, skip_first, domain, gpus_per_node, step_marker=step_marker, rules=rules, run=run
        )
        if what_if:
            from ..insight.projection import parse_terms

            parse_terms(what_if)  # a bad term fails before any trace is read
        request = Request(
            list(paths), options, step_options, timeline=TimelineOptions(), traces=True, projected=what_if or None
        )
        done = run_job(request)
        result, projected = done.analysis, done.projected
        if result.timeline_free:
            what = result.HOST_ONLY if result.host_only else "NCCL Inspector logs"
            raise fail(f"{paths[0]}: {what} have no timeline to annotate (analyze or report them)")
        try:
            if projected is None:
                counts = write_annotated(list(done.traces), result, done.timeline, output)
            else:
                change = " ".join(projected.projection.what_if)
                counts = write_annotated(
                    [projected.trace], projected.analysis, projected.timeline, output, projected.critical, change
                )
        except OSError as exc:
            raise cannot_write(output, exc) from None
        if projected is not None:
            p = projected.projection
            typer.echo(
                f"projected with {' '.join(p.what_if)}: step {p.measured_step_ns / 1e6:,.3f} ms measured, "
                f"{p.projected_step_ns / 1e6:,.3f} ms projected (saving {p.saving_fraction:.1%}); "
                f"critical path of step {p.critical_step}: {plural(counts['critical'], 'segment')}",
                err=True,
            )
        typer.echo(
            f"wrote {output}: {plural(counts['devices'], 'device')}, "
            f"{plural(counts['activities'], 'activity', 'activities')}, "
            f"{plural(counts['exposed'], 'exposed-comm interval')}, {plural(counts['steps'], 'step')} "
            "(open it in ui.perfetto.dev or xprof)",
            err=True,
        )

    guarded(body)
