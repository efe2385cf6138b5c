"""The pipeline: read -> classify -> attribute links -> measure (per file) -> merge (per job).

``load`` reads, classifies and attributes links; ``analyze`` measures loaded
traces; ``analyze_paths`` does both for what the user typed, parsing and
measuring each file on its own (in worker processes when there are several) and
merging the small per-file results, so a 1,000-GPU job never needs all its events
in one process. The library and the CLI take the same route.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.analysis import Analysis
from ..core.classify import classify, rules_with
from ..core.identity import fingerprint
from ..core.scopes import attach_scopes
from ..core.timeline import TimelineOptions, TimelineView
from ..core.topology import attribute_links
from ..core.trace import Trace
from ..errors import InputError
from ..insight.throughput import manifest_throughput, with_throughput
from ..options import ExecOptions, LoadOptions, StepOptions
from ..readers import Placement, ReadContext, TraceSource, plan_placements, read_file
from ..readers.discovery import discover_job
from ..readers.runfolder import read_manifest
from ..workers import default_decode_threads
from .executors import concurrent_files, map_files, resolve_scheduler
from .inspector import analyze_logs, inspector_files
from .merge import Candidate, JobResults, decide_files, finish_job, instance_table, merge
from .per_file import FileResult, job_identity, measure_file

__all__ = [
    "Analysis",
    "ExecOptions",
    "FileResult",
    "LoadOptions",
    "StepOptions",
    "TraceSet",
    "analyze",
    "analyze_job",
    "analyze_paths",
    "load",
    "load_trace",
    "measure",
    "merge",
    "with_throughput",
]


def load_trace(
    path: TraceSource,
    placement: Placement | None = None,
    options: LoadOptions | None = None,
    single_host: bool = True,
) -> Trace:
    """Read one trace file (a local path or a URL), classify every activity and attribute comm to its fabric."""
    options = options or LoadOptions()
    trace = read_file(path, ReadContext(options, placement or Placement(0)))
    if not len(trace.events):
        # nothing to measure is an input error, never a pass: a CI gate must not hold on an empty trace
        raise InputError(
            path,
            f"no device activity ({trace.format}: no GPU kernels, copies or memsets; a host-only trace, "
            "or a capture window that missed the step?)",
        )
    trace = attach_scopes(classify(trace, rules_with(options.rules)))
    return attribute_links(trace, options.nvlink_domain_size, single_host)


def _layout(
    inputs: Sequence[str | Path], options: LoadOptions
) -> tuple[list[TraceSource], list[Placement], bool, list[str]]:
    files, notes = discover_job(list(inputs), options)
    places = plan_placements(files)
    return files, places, len({p.host_index for p in places}) == 1, notes


class TraceSet(list[Trace]):
    """The traces of one job as ``moeprof.load`` returns them: a list, plus the run folder's manifest
    and what discovery left out (warnings)."""

    manifest: dict | None = None
    notes: tuple[str, ...] = ()


def load(paths: str | Path | Sequence[str | Path], options: LoadOptions | None = None) -> TraceSet:
    """The classified traces of one job (``moeprof.load``): one :class:`Trace` per trace file."""
    options = options or LoadOptions()
    inputs = [paths] if isinstance(paths, str | Path) else list(paths)
    files, places, single, notes = _layout(inputs, options)
    traces, decided = _load_job(files, places, single, options)
    out = TraceSet(traces)
    out.manifest = _manifest(inputs)
    out.notes = (*notes, *decided)
    return out


def _relayout(
    files: Sequence[TraceSource], places: Sequence[Placement], single: bool, kept: Sequence[int]
) -> tuple[list[Placement], bool] | None:
    """The layout of the kept files alone, where it differs from theirs among every file named (else None)."""
    new = plan_placements([files[i] for i in kept])
    new_single = len({p.host_index for p in new}) == 1
    return None if new_single == single and new == [places[i] for i in kept] else (new, new_single)


def _load_job(
    files: Sequence[TraceSource], places: Sequence[Placement], single: bool, options: LoadOptions
) -> tuple[list[Trace], list[str]]:
    """Every file loaded, one capture's second format set aside (reloaded in the kept files' own layout
    where setting it aside changed the layout), refusing files that cannot be one job."""
    traces = [load_trace(f, p, options, single) for f, p in zip(files, places)]
    kept, notes = one_job(traces)
    relaid = _relayout(files, places, single, kept) if len(kept) < len(traces) else None
    if relaid is not None:
        return [load_trace(files[i], p, options, relaid[1]) for i, p in zip(kept, relaid[0])], notes
    return [traces[i] for i in kept], notes


def one_job(traces: Sequence[Trace]) -> tuple[list[int], list[str]]:
    """The positions of the traces that make one job (one capture in two formats read once) and the notes
    that say what was set aside; refuses traces that cannot be one job, as the merge does
    (``merge.decide_files``)."""
    candidates = {
        i: Candidate(
            source=t.path,
            part_format=t.format,
            identity=job_identity(t),
            fingerprint=fingerprint(t.events),
            claimed=t.device_names,
        )
        for i, t in enumerate(traces)
    }
    dropped, notes = decide_files(candidates)
    return [i for i in range(len(traces)) if i not in dropped], notes


def analyze(
    traces: Trace | Sequence[Trace],
    step_options: StepOptions | None = None,
    link_peaks: dict[str, float] | None = None,
    timeline: TimelineOptions | None = None,
    what_if: Sequence[str] = (),
) -> Analysis:
    """``moeprof.analyze``: the analysis of loaded traces (what ``moeprof analyze`` prints); ``what_if``:
    §9 terms projected together (``Analysis.projections``, after the balance projection)."""
    manifest = getattr(traces, "manifest", None)
    notes = getattr(traces, "notes", [])
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    job = _job_of([measure_file(t, step_options, timeline) for t in traces])
    return _with_manifest(finish(finish_job(job, link_peaks, notes, what_if), timeline, job.timeline), manifest)


def _job_of(parts: Sequence[FileResult]) -> JobResults:
    job = JobResults()
    for i, part in enumerate(parts):
        job.add(i, part)
    return job


def measure(trace: Trace, step_options: StepOptions | None = None) -> Analysis:
    """The analysis of one trace on its own."""
    return analyze([trace], step_options)


def finish(
    merged: tuple[Analysis, pd.DataFrame | None],
    timeline: TimelineOptions | None,
    views: Sequence[TimelineView] = (),
) -> Analysis:
    """The merged analysis, with the devices' timeline views (and their ledger wait parts) when asked."""
    analysis, matched = merged
    if timeline is None or not views:
        return analysis
    views = sorted(views, key=lambda v: v.device)
    if matched is None:
        return analysis.with_(timeline=tuple(views))
    complete = matched[matched["instance"] >= 0]
    waits = {
        str(d): (g["start_ns"].to_numpy(np.int64), (g["start_ns"] + g["wait_ns"]).to_numpy(np.int64))
        for d, g in complete[complete["wait_ns"] > 0].groupby("device", observed=True)
    }
    views = [v.with_wait(*waits[v.device]) if v.device in waits else v for v in views]
    return analysis.with_(timeline=tuple(views), instances=instance_table(matched))


def _share_cores(options: LoadOptions, at_once: int | None, jobs: int | None) -> LoadOptions:
    """The options each file is read with: files read at once share this machine's cores; ``jobs=1``
    (one worker asked for) and a Dask worker (which runs other tasks beside it) get one decoding thread."""
    if options.decode_threads is not None:
        return options  # the user's choice
    if jobs == 1 or at_once is None:
        return replace(options, decode_threads=1)
    if at_once == 1:
        return options  # one file read alone: the reader takes what it may use
    return replace(options, decode_threads=default_decode_threads(at_once))


def _map_one(
    task: tuple[TraceSource, Placement, LoadOptions, StepOptions | None, bool, TimelineOptions | None],
) -> FileResult:
    path, placement, options, step_options, single_host, timeline = task
    return measure_file(load_trace(path, placement, options, single_host), step_options, timeline)


def _manifest(inputs: Sequence[str | Path]) -> dict | None:
    """The manifest of the first input that is a moeprof run folder."""
    for raw in inputs:
        manifest = read_manifest(Path(raw)) if Path(raw).is_dir() else None
        if manifest:
            return manifest
    return None


def _with_manifest(analysis: Analysis, manifest: dict | None) -> Analysis:
    if not manifest:
        return analysis
    return analysis.with_(manifest=manifest, throughput=manifest_throughput(manifest))


def _with_run_folder(analysis: Analysis, inputs: Sequence[str | Path]) -> Analysis:
    return _with_manifest(analysis, _manifest(inputs))


def analyze_paths(
    inputs: Sequence[str | Path],
    options: LoadOptions | None = None,
    step_options: StepOptions | None = None,
    jobs: int | None = None,
    progress: Callable[[TraceSource], None] | None = None,
    link_peaks: dict[str, float] | None = None,
    timeline: TimelineOptions | None = None,
    scheduler: str | None = None,
    skip_bad: bool = False,
    execution: ExecOptions | None = None,
    what_if: Sequence[str] = (),
) -> Analysis:
    """Discover, read and measure every trace file, then merge (``moeprof analyze``).

    The per-file map runs in this process (one file, or ``jobs=1``), in a local process pool
    (the default), or on a Dask cluster (``scheduler``); each result is merged as it arrives and
    then dropped, so the coordinator holds compact per-file tables, never events. A bad file
    stops the run with one line naming it, or with ``skip_bad`` is listed in the warnings and
    left out.
    """
    options = options or LoadOptions()
    if execution is not None:
        jobs, scheduler, skip_bad = execution.jobs, execution.scheduler, execution.skip_bad
    scheduler = resolve_scheduler(scheduler)
    files, places, single, notes = _layout(inputs, options)
    if inspector_files(files):
        analysis = analyze_logs(
            [Path(f) for f in files], link_peaks, notes, jobs, scheduler, skip_bad, progress
        )  # fmt: skip
        return _with_run_folder(analysis, inputs)
    options = _share_cores(options, concurrent_files(len(files), jobs, scheduler), jobs)
    tasks = [(f, p, options, step_options, single, timeline) for f, p in zip(files, places)]
    job = JobResults()

    def take(index: int, part: FileResult) -> None:
        job.add(index, part)
        if progress:
            progress(files[index])

    skipped = map_files(
        _map_one,
        tasks,
        on_result=take,
        scheduler=scheduler,
        jobs=jobs,
        skip_bad=skip_bad,
        on_skip=(lambda s: progress(files[s.index])) if progress else None,
    )
    if skipped and not job.added:
        first = skipped[0]
        raise InputError(first.file, f"{first.problem} (and every other input was bad too: nothing to analyze)")
    notes = [*notes, *(f"skipped {s.file}: {s.problem}" for s in skipped)]
    decided = job.decide()
    kept = [i for i in sorted(job.files) if i not in job.dropped]
    relaid = _relayout(files, places, single, kept) if job.dropped else None
    if relaid is not None:
        # the files set aside changed the job's layout (one host, not two): measure the rest as if only
        # they had been named, so the figures are those of the kept file read alone
        again = JobResults()
        map_files(
            _map_one,
            [(files[i], p, options, step_options, relaid[1], timeline) for i, p in zip(kept, relaid[0])],
            on_result=lambda k, part: again.add(kept[k], part),
            scheduler=scheduler,
            jobs=jobs,
        )
        job, notes = again, [*notes, *decided]
    analysis = finish(finish_job(job, link_peaks, notes, what_if), timeline, job.timeline)
    if skipped:
        analysis = analysis.with_(skipped=tuple({"file": s.file, "problem": s.problem} for s in skipped))
    return _with_run_folder(analysis, inputs)


def analyze_job(
    inputs: Sequence[str | Path],
    options: LoadOptions | None = None,
    step_options: StepOptions | None = None,
    link_peaks: dict[str, float] | None = None,
    timeline: TimelineOptions | None = None,
    what_if: Sequence[str] = (),
) -> tuple[Analysis, list[Trace]]:
    """The analysis and the classified traces it measured, each file read once (``report``, ``annotate``)."""
    options = options or LoadOptions()
    files, places, single, notes = _layout(inputs, options)
    if inspector_files(files):
        return _with_run_folder(analyze_logs([Path(f) for f in files], link_peaks, notes), inputs), []
    traces, decided = _load_job(files, places, single, options)
    notes = [*notes, *decided]
    timeline = timeline or TimelineOptions()
    job = _job_of([measure_file(t, step_options, timeline) for t in traces])
    analysis = finish(finish_job(job, link_peaks, notes, what_if), timeline, job.timeline)
    return _with_run_folder(analysis, inputs), traces
