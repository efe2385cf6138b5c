"""The pipeline: read -> classify -> attribute links -> measure (per file) -> merge (per job).

``load`` reads, classifies and attributes links; ``analyze`` measures loaded
traces; ``analyze_paths`` does both for what the user typed, parsing and
measuring each file on its own (in worker processes when there are several) and
merging the small per-file results, so a 1,000-GPU job never needs all its events
in one process. The library and the CLI take the same route.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.analysis import Analysis
from ..core.classify import classify, rules_with
from ..core.components import attach_components
from ..core.identity import decide_files, identify
from ..core.scopes import attach_scopes
from ..core.timeline import TimelineOptions, TimelineView
from ..core.topology import attribute_links
from ..core.trace import Trace
from ..errors import InputError
from ..insight.projection import Projector
from ..insight.throughput import manifest_throughput, with_throughput
from ..options import ExecOptions, LoadOptions, StepOptions
from ..readers import Placement, ReadContext, TraceSource, read_file
from ..readers.discovery import JobPlan, plan_job
from ..workers import default_decode_threads
from .executors import concurrent_files, map_files, resolve_scheduler
from .inspector import analyze_logs
from .merge import JobResults, Merged, finish_job, instance_table, merge
from .per_file import FileResult, measure_file

__all__ = [
    "Analysis",
    "ExecOptions",
    "FileResult",
    "JobState",
    "LoadOptions",
    "StepOptions",
    "TraceSet",
    "analyze",
    "analyze_job",
    "analyze_paths",
    "analyze_paths_state",
    "analyze_state",
    "load",
    "load_trace",
    "measure",
    "merge",
    "with_throughput",
]


@dataclass(frozen=True)
class JobState:
    """What measuring a job leaves beside its :class:`Analysis` (which stays plain data, as its JSON):
    each device's timeline view (when measured with a :class:`TimelineOptions`), the §8 instances (op, kind,
    first and last aligned arrival, straggler; with the timeline only) and the §9 :class:`Projector` (the
    replay columns and graph, for further projections: the HTML timeline, ``annotate``, ``diff``)."""

    timeline: tuple[TimelineView, ...] = ()
    instances: pd.DataFrame | None = None
    projector: Projector | None = None


def load_trace(
    path: TraceSource,
    placement: Placement | None = None,
    options: LoadOptions | None = None,
    single_host: bool = True,
    kind: str | None = None,
) -> Trace:
    """Read one trace file (a local path or a URL), classify every activity and attribute comm to its fabric;
    ``kind``: what the job's plan sniffed the file to be (``readers.discovery.file_kind``)."""
    options = options or LoadOptions()
    trace = read_file(path, ReadContext(options, placement or Placement(0)), kind)
    if not len(trace.events):
        # nothing to measure is an input error, never a pass: a CI gate must not hold on an empty trace
        captured = int(trace.launches.get("captured") or 0)
        if captured:  # a graph capture: its launches record a graph, nothing runs
            api = str(trace.launches.get("capture_api") or "a stream capture")
            raise InputError(
                path,
                f"no device activity ({trace.format}): it recorded a graph capture, {captured:,} kernel launches "
                f"inside {api} that record a graph and do not run; profile the graph's replays instead",
            )
        raise InputError(
            path,
            f"no device activity ({trace.format}: no GPU kernels, copies or memsets; a host-only trace, "
            "or a capture window that missed the step?)",
        )
    trace = attach_components(attach_scopes(classify(trace, rules_with(options.rules))))
    return attribute_links(trace, options.nvlink_domain_size, single_host)


def _plan(inputs: Sequence[str | Path] | JobPlan, options: LoadOptions) -> JobPlan:
    """The job's plan: the one the caller made (the CLI, to size its progress bar), else made here, once."""
    return inputs if isinstance(inputs, JobPlan) else plan_job(list(inputs), options)


class TraceSet(list[Trace]):
    """The traces of one job as ``moeprof.load`` returns them: a list, plus the run folder's manifest
    and what discovery left out (warnings)."""

    manifest: dict | None = None
    notes: tuple[str, ...] = ()


def load(paths: str | Path | Sequence[str | Path] | JobPlan, options: LoadOptions | None = None) -> TraceSet:
    """The classified traces of one job (``moeprof.load``): one :class:`Trace` per trace file."""
    options = options or LoadOptions()
    plan = _plan([paths] if isinstance(paths, str | Path) else paths, options)  # a str is one input, not letters
    traces, decided = _load_job(plan, options)
    out = TraceSet(traces)
    out.manifest = plan.manifest
    out.notes = (*plan.notes, *decided)
    return out


def _load_all(plan: JobPlan, options: LoadOptions) -> list[Trace]:
    return [load_trace(f, p, options, plan.single_host, k) for f, p, k in zip(plan.files, plan.placements, plan.kinds)]


def _load_job(plan: JobPlan, options: LoadOptions) -> tuple[list[Trace], list[str]]:
    """Every file loaded, one capture's second format set aside (reloaded in the kept files' own layout
    where setting it aside changed the layout), refusing files that cannot be one job."""
    traces = _load_all(plan, options)
    kept, notes = one_job(traces)
    relaid = plan.keeping(kept) if len(kept) < len(traces) else None
    if relaid is not None:
        return _load_all(relaid, options), notes
    return [traces[i] for i in kept], notes


def one_job(traces: Sequence[Trace]) -> tuple[list[int], list[str]]:
    """The positions of the traces that make one job (one capture in two formats read once) and the notes
    that say what was set aside; refuses traces that cannot be one job, as the merge does
    (``core.identity.decide_files``)."""
    dropped, notes = decide_files({i: identify(t) for i, t in enumerate(traces)})
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
    return analyze_state(traces, step_options, link_peaks, timeline, what_if)[0]


def analyze_state(
    traces: Trace | Sequence[Trace],
    step_options: StepOptions | None = None,
    link_peaks: dict[str, float] | None = None,
    timeline: TimelineOptions | None = None,
    what_if: Sequence[str] = (),
) -> tuple[Analysis, JobState]:
    """:func:`analyze`, and what it leaves beside the analysis (:class:`JobState`)."""
    manifest = getattr(traces, "manifest", None)
    notes = getattr(traces, "notes", [])
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    job = _job_of([measure_file(t, step_options, timeline) for t in traces])
    analysis, state = finish(finish_job(job, link_peaks, notes, what_if), timeline, job.timeline)
    return _with_manifest(analysis, manifest), state


def _job_of(parts: Sequence[FileResult]) -> JobResults:
    job = JobResults()
    for i, part in enumerate(parts):
        job.add(i, part)
    return job


def measure(trace: Trace, step_options: StepOptions | None = None) -> Analysis:
    """The analysis of one trace on its own."""
    return analyze([trace], step_options)


def finish(
    merged: Merged, timeline: TimelineOptions | None, views: Sequence[TimelineView] = ()
) -> tuple[Analysis, JobState]:
    """The merged analysis, and beside it the devices' timeline views (with their ledger wait parts) when
    asked, the §8 instances, the projector."""
    analysis, matched, projector = merged
    if timeline is None or not views:
        return analysis, JobState(projector=projector)
    views = sorted(views, key=lambda v: v.device)
    if matched is None:
        return analysis, JobState(tuple(views), projector=projector)
    complete = matched[matched["instance"] >= 0]
    waits = {
        str(d): (g["start_ns"].to_numpy(np.int64), (g["start_ns"] + g["wait_ns"]).to_numpy(np.int64))
        for d, g in complete[complete["wait_ns"] > 0].groupby("device", observed=True)
    }
    views = [v.with_wait(*waits[v.device]) if v.device in waits else v for v in views]
    return analysis, JobState(tuple(views), instance_table(matched), projector)


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


_Task = tuple[TraceSource, Placement, LoadOptions, StepOptions | None, bool, TimelineOptions | None, str]


def _map_one(task: _Task) -> FileResult:
    path, placement, options, step_options, single_host, timeline, kind = task
    return measure_file(load_trace(path, placement, options, single_host, kind), step_options, timeline)


def _tasks(
    plan: JobPlan, options: LoadOptions, step_options: StepOptions | None, timeline: TimelineOptions | None
) -> list[_Task]:
    return [
        (f, p, options, step_options, plan.single_host, timeline, k)
        for f, p, k in zip(plan.files, plan.placements, plan.kinds)
    ]


def _with_manifest(analysis: Analysis, manifest: dict | None) -> Analysis:
    if not manifest:
        return analysis
    return analysis.with_(manifest=manifest, throughput=manifest_throughput(manifest))


def analyze_paths(
    inputs: Sequence[str | Path] | JobPlan,
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
    """Discover, read and measure every trace file, then merge (``moeprof analyze``): :func:`analyze_paths_state`'s
    analysis."""
    return analyze_paths_state(
        inputs, options, step_options, jobs, progress, link_peaks, timeline, scheduler, skip_bad, execution, what_if
    )[0]


def analyze_paths_state(
    inputs: Sequence[str | Path] | JobPlan,
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
) -> tuple[Analysis, JobState]:
    """Discover, read and measure every trace file, then merge; the analysis and its :class:`JobState`.
    ``inputs``: what the user typed, or its :class:`~moeprof.readers.discovery.JobPlan` (``plan_job``) where
    the caller made one.

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
    plan = _plan(inputs, options)
    files, notes = plan.files, list(plan.notes)
    if plan.inspector:
        analysis = analyze_logs([Path(f) for f in files], link_peaks, notes, jobs, scheduler, skip_bad, progress)
        return _with_manifest(analysis, plan.manifest), JobState()
    options = _share_cores(options, concurrent_files(len(files), jobs, scheduler), jobs)
    tasks = _tasks(plan, options, step_options, timeline)
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
    relaid = plan.keeping(kept) if job.dropped else None
    if relaid is not None:
        # the files set aside changed the job's layout (one host, not two): measure the rest as if only
        # they had been named, so the figures are those of the kept file read alone
        again = JobResults()
        map_files(
            _map_one,
            _tasks(relaid, options, step_options, timeline),
            on_result=lambda k, part: again.add(kept[k], part),
            scheduler=scheduler,
            jobs=jobs,
        )
        job, notes = again, [*notes, *decided]
    analysis, state = finish(finish_job(job, link_peaks, notes, what_if), timeline, job.timeline)
    if skipped:
        analysis = analysis.with_(skipped=tuple({"file": s.file, "problem": s.problem} for s in skipped))
    return _with_manifest(analysis, plan.manifest), state


def analyze_job(
    inputs: Sequence[str | Path] | JobPlan,
    options: LoadOptions | None = None,
    step_options: StepOptions | None = None,
    link_peaks: dict[str, float] | None = None,
    timeline: TimelineOptions | None = None,
    what_if: Sequence[str] = (),
) -> tuple[Analysis, list[Trace], JobState]:
    """The analysis, the classified traces it measured (each file read once) and its :class:`JobState`
    (``report``, ``annotate``, ``diff``).

    As :func:`analyze_paths`: every file is measured, and its identity made beside its figures; the job is
    decided from those (a capture's second format set aside, files that cannot be one job refused)."""
    options = options or LoadOptions()
    plan = _plan(inputs, options)
    notes = list(plan.notes)
    if plan.inspector:
        analysis = analyze_logs([Path(f) for f in plan.files], link_peaks, notes)
        return _with_manifest(analysis, plan.manifest), [], JobState()
    timeline = timeline or TimelineOptions()
    traces = _load_all(plan, options)
    job = _job_of([measure_file(t, step_options, timeline) for t in traces])
    decided = job.decide()
    kept = [i for i in sorted(job.files) if i not in job.dropped]
    relaid = plan.keeping(kept) if job.dropped else None
    if relaid is not None:  # measured again as if only the kept files had been named (see analyze_paths)
        traces = _load_all(relaid, options)
        job, notes = _job_of([measure_file(t, step_options, timeline) for t in traces]), [*notes, *decided]
    else:
        traces = [traces[i] for i in kept]  # finish_job says what was set aside
    analysis, state = finish(finish_job(job, link_peaks, notes, what_if), timeline, job.timeline)
    return _with_manifest(analysis, plan.manifest), traces, state
