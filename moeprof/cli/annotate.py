"""``moeprof annotate``: the trace as Chrome/Perfetto JSON, with moeprof's buckets, exposed comm and steps added."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from ..analysis import StepOptions, analyze_paths, load
from ..reports.annotate import write_annotated
from ..steps import parse_selection
from .common import (
    DomainOption,
    GpusPerNodeOption,
    RulesOption,
    RunOption,
    SkipFirstOption,
    StepMarkerOption,
    StepsOption,
    fail,
    guarded,
    load_options,
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
    run: RunOption = None,
) -> None:
    """Write a Chrome/Perfetto trace: device activity per stream plus moeprof's buckets, exposed comm and steps."""

    def body() -> None:
        if not output.name.lower().endswith((".json", ".json.gz")):
            raise fail(f"{output}: the annotated trace is trace-event JSON: name it *.trace.json.gz or *.json")
        try:
            selection = parse_selection(steps)
        except ValueError as exc:
            raise fail(str(exc)) from None
        options = load_options(rules, gpus_per_node, nvlink_domain_size, run)
        options = replace(options, step_marker=step_marker)
        result = analyze_paths(list(paths), options, StepOptions(selection, skip_first, step_marker))
        events = load(list(paths), options)
        try:
            counts = write_annotated(events, result, output, step_marker)
        except OSError as exc:
            raise fail(f"{output}: cannot write: {exc.strerror or exc}") from None
        typer.echo(
            f"wrote {output}: {counts['devices']} device(s), {counts['activities']:,} activities, "
            f"{counts['exposed']:,} exposed-comm intervals, {counts['steps']:,} steps "
            "(open it in ui.perfetto.dev or xprof)",
            err=True,
        )

    guarded(body)
