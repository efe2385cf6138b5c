"""``moeprof analyze``: the communication picture of one or more traces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

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


def parse_devices(value: str) -> int | str | None:
    """--devices: "all", a positive number, or "auto" (None)."""
    text = value.strip().lower()
    if text == "auto":
        return None
    if text == "all":
        return "all"
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise fail(f"--devices must be 'all' or a number of devices (>= 1), not {value!r}")


def analyze_command(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Trace files or folders (local, or gs://, s3://, file:// URLs): XPlane .xplane.pb[.gz] or a "
            "TensorBoard log dir, xprof .trace.json[.gz], Kineto .pt.trace.json[.gz], Nsight Systems .sqlite, "
            ".nsys-rep or parquet folder, rocprofv3 CSV or JSON (a folder of one run) or rocpd results.db, "
            "NCCL Inspector logs (a folder of them)"
        ),
    ],
    json: Annotated[
        bool, typer.Option("--json", help="Print the moeprof.analysis/1 JSON object and nothing else.")
    ] = False,
    steps: StepsOption = None,
    skip_first: SkipFirstOption = 0,
    step_marker: StepMarkerOption = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Rows of collectives and opportunities to show.")] = 8,
    devices: Annotated[
        str,
        typer.Option(
            "--devices",
            metavar="all|N",
            help="Per-device rows: 'all', or N: min/median/max over every device and the N with the most exposed"
            " comm. Default: every device up to 16, else 5.",
        ),
    ] = "auto",
    jobs: JobsOption = None,
    scheduler: SchedulerOption = None,
    skip_bad: SkipBadOption = False,
    rules: RulesOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    nvlink_domain_size: DomainOption = None,
    slice_size: SliceOption = None,
    run: RunOption = None,
    gpu: GpuOption = None,
    model: Annotated[
        str | None, typer.Option("--model", help="deepseek-v3 or a config.json: adds tokens/s, TFLOPS and MFU.")
    ] = None,
    tokens_per_step: Annotated[
        int | None, typer.Option("--tokens-per-step", min=1, help="Global tokens per step (batch x sequence).")
    ] = None,
    seq_len: Annotated[int, typer.Option("--seq-len", min=1, help="Sequence length for attention FLOPs.")] = 4096,
    job_devices: Annotated[
        int | None, typer.Option("--job-devices", min=1, help="Devices in the whole job (default: those in the trace).")
    ] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Precision of the MFU peak: bf16 or fp8.")] = "bf16",
    link_peak: Annotated[
        str | None,
        typer.Option("--link-peak", help="Peak GB/s per GPU and direction, e.g. nvlink=450,ib=50 (ib=ndr|xdr)."),
    ] = None,
    history: Annotated[
        Path | None, typer.Option("--history", help="Append this run's figures to a SQLite history (e.g. runs.db).")
    ] = None,
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
            metavar="TERM",
            help="Project a change, answered first. Repeatable: the terms combine. TERM is one of:",
        ),
    ] = None,
    no_projection: Annotated[
        bool,
        typer.Option(
            "--no-projection",
            help="Skip the projections (what would it buy, the opportunities' projected savings): the measured"
            " figures alone, faster on a large job.",
        ),
    ] = False,
    critical_path: Annotated[
        Path | None,
        typer.Option(
            "--critical-path",
            metavar="FILE.parquet",
            help="Write every projection's whole critical path, one row per segment, to this parquet file"
            " (the JSON carries each path's figures and its longest segments).",
        ),
    ] = None,
    expert_load: ExpertLoadOption = None,
) -> None:
    """Bucket every kernel and report comm share, exposed communication and what to do about it."""

    def body() -> None:
        domain = scale_up_domain(nvlink_domain_size, slice_size)  # --slice-size: the same setting, TPU
        warm_fork_server(paths, jobs, scheduler)  # the workers' imports overlap ours
        # imported here: `moeprof --help` and the other commands do not pay for the pipeline
        from ..insight.bandwidth import link_peaks
        from ..insight.projection import parse_terms
        from ..pipeline import Request, with_throughput
        from ..pipeline import run as run_job
        from ..readers.discovery import plan_job

        terms = list(what_if or [])
        parse_terms(terms)  # a bad term fails before any trace is read
        if no_projection and (terms or critical_path):
            raise fail("--no-projection leaves out the projections: it excludes --what-if and --critical-path")

        device_rows = parse_devices(devices)
        routed = read_load(expert_load)  # a bad file fails before any trace is read
        options, step_options = analyze_options(
            steps, skip_first, domain, gpus_per_node, step_marker=step_marker, rules=rules, run=run
        )
        peaks = link_peaks(gpu, link_peak)
        plan = plan_job(list(paths), options)  # the files, decided once
        if plan.inspector and critical_path is not None:  # refused before the logs are read, as --what-if is
            from ..pipeline.inspector import NO_TIMELINE

            raise fail(f"--critical-path {critical_path}: {NO_TIMELINE}")
        with file_progress(len(plan.files), enabled=not json) as advance:
            # compute what the output shows: every figure for the JSON (and the paths asked for), the terminal's
            # rows without the projected timelines' figures and critical paths, or no projection at all
            detail: Literal["full", "screen", "none"] = (
                "none" if no_projection else "full" if json or critical_path else "screen"
            )
            request = Request(
                plan, options, step_options, exec_options(jobs, scheduler, skip_bad), peaks, terms,
                progress=advance, projections=detail, expert_load=routed,
            )  # fmt: skip
            result = run_job(request).analysis
        if model or tokens_per_step:
            if not (model and tokens_per_step):
                raise fail("--model and --tokens-per-step go together")
            result = with_throughput(result, model, tokens_per_step, seq_len, gpu, dtype, job_devices)
        if history:  # before any output: a history that cannot be written fails the command
            from ..gate.history import record_run

            record_run(history, "analyze", result)
        if critical_path is not None:  # before any output: a file that cannot be written fails the command
            from ..reports.critical_path import write_critical_paths

            write_critical_paths(result, critical_path)
        if json:
            from ..reports.json_report import write_json

            write_json(result)
        else:
            from ..reports import terminal

            terminal.render(result, top=top, devices=device_rows)

    guarded(body)
