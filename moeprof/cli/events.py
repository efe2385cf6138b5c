"""``moeprof events``: write the classified event table (parquet or csv)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from ..outputs import cannot_write
from .common import (
    DomainOption,
    GpusPerNodeOption,
    RulesOption,
    RunOption,
    SliceOption,
    fail,
    guarded,
    load_options,
    scale_up_domain,
)


def events_command(
    paths: Annotated[list[Path], typer.Argument(help="Trace files or folders.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write: .parquet or .csv")],
    rules: RulesOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    nvlink_domain_size: DomainOption = None,
    slice_size: SliceOption = None,
    run: RunOption = None,
    all_kernel_stats: Annotated[
        bool, typer.Option("--all-kernel-stats", help="XPlane: read hlo_op/hlo_module of every compute kernel too.")
    ] = False,
) -> None:
    """Write the one event table (every device activity with its bucket, kind and link).

    NCCL Inspector logs have no timeline: their table is one row per collective per rank (rank,
    communicator, kind, seq, bytes, execution time, algo/proto, bus bandwidth)."""

    def body() -> None:
        domain = scale_up_domain(nvlink_domain_size, slice_size)  # --slice-size: the same setting, TPU
        from ..core.events import concat
        from ..pipeline import load
        from ..reports.event_table import output_format, write_events

        try:
            output_format(output)  # before anything is read: a wrong name fails at once
        except ValueError as exc:
            raise fail(str(exc)) from None
        options = replace(load_options(rules, gpus_per_node, domain, run), all_kernel_stats=all_kernel_stats)
        from ..pipeline.inspector import read_logs
        from ..readers.discovery import plan_job

        plan = plan_job(list(paths), options)
        if plan.inspector:  # no timeline: the table is one row per collective per rank
            events, notes, _ = read_logs([Path(f) for f in plan.files])
            for note in notes:
                typer.echo(f"moeprof: warning: {note}", err=True)
        else:
            events = concat([trace.events for trace in load(plan, options)])
        try:
            write_events(events, output)
        except OSError as exc:
            raise cannot_write(output, exc) from None
        typer.echo(f"wrote {len(events):,} rows to {output}", err=True)

    guarded(body)
