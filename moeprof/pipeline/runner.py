"""The pipeline's one entry point: :func:`run` takes one :class:`Request` (what the user typed, or loaded
traces, and what the caller needs beside the analysis) and returns one :class:`Result`.

Read -> classify -> attribute links -> measure (per file) -> merge (per job). Files are parsed and measured
each on its own (in worker processes when there are several, or on a Dask cluster) and the small per-file
results merged, so a 1,000-GPU job never needs all its events in one process; a caller that needs the
classified traces themselves (``annotate``) has them read in this process. The library (``moeprof.load``,
``moeprof.analyze``, ``moeprof.analyze_paths``) and every command take this route.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, cast

import numpy as np
import pandas as pd

from ..core.analysis import Analysis, Projection
from ..core.classify import classify, rules_with
from ..core.components import attach_components
from ..core.expert_load import RoutedLoad, manifest_load
from ..core.identity import FileIdentity, decide_files, identify
from ..core.roles import attach_roles
from ..core.scopes import attach_scopes
from ..core.timeline import TimelineOptions, TimelineView
from ..core.topology import attribute_links
from ..core.trace import Trace
from ..errors import InputError
from ..insight.projection import Projector
from ..insight.throughput import manifest_throughput
from ..options import ExecOptions, LoadOptions, StepOptions
from ..readers import Placement, ReadContext, TraceSource, read_file
from ..readers.discovery import JobPlan, plan_job
from ..workers import default_decode_threads
from .executors import SkippedFile, concurrent_files, map_files, resolve_scheduler
from .inspector import NO_TIMELINE, analyze_logs
from .merge import JobResults, Merged, finish_job, instance_table
from .per_file import FileResult, measure_file

Inputs = Sequence[str | Path] | JobPlan | Sequence[Trace]


@dataclass(frozen=True)
class Request:
    """One job to analyze, and what the caller needs beside its analysis."""

    # what the user typed (paths, URLs), their plan where the caller made one (``plan_job``), or loaded traces
    inputs: Inputs
    options: LoadOptions = field(default_factory=LoadOptions)
    steps: StepOptions | None = None
    execution: ExecOptions = field(default_factory=ExecOptions)  # where the per-file map runs
    link_peaks: dict[str, float] | None = None
    what_if: Sequence[str] = ()  # §9 terms projected together (``Analysis.projections``)
    timeline: TimelineOptions | None = None  # each device's timeline view, for a renderer that draws one
    traces: bool = False  # keep the classified traces (``annotate`` writes them): the files read in this process
    # the projected timeline, measured: these terms, "default" (the change a page draws unasked, where the job
    # gets one: Projector.unasked), or None
    projected: Sequence[str] | Literal["default"] | None = None
    progress: Callable[[TraceSource], None] | None = None  # called once per file done
    # what of §9 to compute: "full" (every figure: JSON, report, gates), "screen" (what the terminal shows),
    # "none" (--no-projection: the measured step time alone)
    projections: Literal["full", "screen", "none"] = "full"
    # spec §11: the tokens routed per layer and expert, from ``--expert-load FILE`` (readers.expert_load); None:
    # the run folder's manifest's, where it records them
    expert_load: RoutedLoad | None = None


@dataclass(frozen=True)
class ProjectedJob:
    """One projection of a job: its figures, its timeline as a trace, that trace measured, its critical path."""

    projection: Projection
    trace: Trace
    analysis: Analysis  # the projected timeline measured (§4 figures, steps)
    timeline: tuple[TimelineView, ...]  # its devices' timeline views
    critical: pd.DataFrame  # device, start_ns, end_ns, name: the critical path's activities (own clock)

    @property
    def label(self) -> str:
        return "projected: " + " ".join(self.projection.what_if) if self.projection.what_if else "replayed"


@dataclass(frozen=True)
class Result:
    """What :func:`run` returns: the :class:`Analysis` (plain data, as its JSON) and what measuring the job
    leaves beside it: each device's timeline view (with :attr:`Request.timeline`), the §8 instances (op, kind,
    first and last aligned arrival, straggler; with the timeline only), the §9 :class:`Projector` (the replay
    columns and graph, for further projections), the classified traces (with :attr:`Request.traces`) and the
    projected timeline measured (with :attr:`Request.projected`)."""

    analysis: Analysis
    timeline: tuple[TimelineView, ...] = ()
    instances: pd.DataFrame | None = None
    projector: Projector | None = None
    traces: tuple[Trace, ...] = ()
    projected: ProjectedJob | None = None


def run(request: Request) -> Result:
    """The analysis a :class:`Request` asks for, and what it needs beside it (:class:`Result`)."""
    r = request
    traces = _traces(r.inputs)
    if traces is not None:
        result = _loaded(r, traces)
    else:
        result = _read(r, _plan(cast("Sequence[str | Path] | JobPlan", r.inputs), r.options))
    if r.projected is not None and result.projector is not None:
        result = replace(result, projected=_projected(result, r))
    elif r.projected is not None and r.projected != "default" and not result.analysis.timeline_free:
        terms = " ".join(r.projected)
        raise InputError(None, f"--what-if {terms}: the analysis has no device activity to project")
    return result


def _traces(inputs: Inputs) -> list[Trace] | None:
    """The loaded traces a request names (None: it names files)."""
    if isinstance(inputs, JobPlan) or not any(isinstance(i, Trace) for i in inputs):
        return None
    return [cast("Trace", t) for t in inputs]


def _loaded(r: Request, traces: list[Trace]) -> Result:
    """Loaded traces measured in this process (``moeprof.analyze``; a projected timeline)."""
    job = _job_of([measure_file(t, r.steps, r.timeline) for t in traces])
    notes = list(getattr(r.inputs, "notes", []))
    manifest = getattr(r.inputs, "manifest", None)
    merged = finish_job(job, r.link_peaks, notes, r.what_if, r.projections, _routed_load(r, manifest), manifest)
    result = replace(_finish(merged, r.timeline, job.timeline), traces=tuple(traces) if r.traces else ())
    return _with_manifest(result, manifest)


def _read(r: Request, plan: JobPlan) -> Result:
    """The files of ``plan`` read, measured and merged; NCCL Inspector logs measured as such."""
    execution = r.execution
    if plan.inspector:
        if r.what_if:  # refused before the logs are read: there is nothing to project, and silence would say so
            raise InputError(None, f"--what-if {' '.join(r.what_if)}: {NO_TIMELINE}")
        analysis = analyze_logs(
            [Path(f) for f in plan.files], r.link_peaks, list(plan.notes), execution.jobs,
            resolve_scheduler(execution.scheduler), execution.skip_bad, r.progress,
        )  # fmt: skip
        return _with_manifest(Result(analysis), plan.manifest)
    job, traces, skipped, notes = _measured(r, plan)
    load = _routed_load(r, plan.manifest)
    result = _finish(
        finish_job(job, r.link_peaks, [*plan.notes, *notes], r.what_if, r.projections, load, plan.manifest),
        r.timeline,
        job.timeline,
    )
    if skipped:
        skips = tuple({"file": s.file, "problem": s.problem} for s in skipped)
        result = replace(result, analysis=result.analysis.with_(skipped=skips))
    return _with_manifest(replace(result, traces=tuple(traces)), plan.manifest)


def _routed_load(r: Request, manifest: Mapping | None) -> RoutedLoad | None:
    """The job's routed load (spec §11): ``--expert-load``'s, else the run folder's manifest's (None: neither)."""
    return r.expert_load if r.expert_load is not None else manifest_load(manifest)


def _measured(r: Request, plan: JobPlan) -> tuple[JobResults, list[Trace], list[SkippedFile], list[str]]:
    """Every file measured, the files that make one job decided (:func:`_decided`), the rest read again
    where setting files aside changed the job's layout; the job's results, the classified traces (with
    ``r.traces``), the files skipped with ``skip_bad``, and the notes said before the merge."""
    job, traces, skipped = _measure(r, plan, None)
    if skipped and not job.added:
        first = skipped[0]
        raise InputError(first.file, f"{first.problem} (and every other input was bad too: nothing to analyze)")
    notes = [f"skipped {s.file}: {s.problem}" for s in skipped]
    kept, decided, again = _decided(plan, {i: f.who for i, f in job.files.items()})
    if again is None:
        return job, [traces[i] for i in kept if i in traces], skipped, notes  # finish_job says what was set aside
    job, traces, _ = _measure(r, again, kept)
    return job, [traces[i] for i in kept if i in traces], skipped, [*notes, *decided]


def _measure(
    r: Request, plan: JobPlan, indices: Sequence[int] | None
) -> tuple[JobResults, dict[int, Trace], list[SkippedFile]]:
    """The files of ``plan`` measured (``indices``: each file's place among the files first named), in this
    process with their traces kept where ``r.traces`` asks, else in the per-file map."""
    job = JobResults()
    index = list(indices) if indices is not None else list(range(len(plan.files)))
    if r.traces:
        traces: dict[int, Trace] = {}
        for k, (f, p, kind) in enumerate(zip(plan.files, plan.placements, plan.kinds)):
            trace = load_trace(f, p, r.options, plan.single_host, kind)
            traces[index[k]] = trace
            job.add(index[k], measure_file(trace, r.steps, r.timeline))
            if r.progress:
                r.progress(f)
        return job, traces, []
    execution = r.execution
    scheduler = resolve_scheduler(execution.scheduler)
    options = _share_cores(r.options, concurrent_files(len(plan.files), execution.jobs, scheduler), execution.jobs)
    tasks = [
        (f, p, options, r.steps, plan.single_host, r.timeline, k)
        for f, p, k in zip(plan.files, plan.placements, plan.kinds)
    ]
    first = indices is None

    def take(k: int, part: FileResult) -> None:
        job.add(index[k], part)
        if r.progress and first:
            r.progress(plan.files[k])

    on_skip = (lambda s: r.progress(plan.files[s.index])) if r.progress and first else None  # type: ignore[misc]
    skipped = map_files(
        _map_one, tasks, on_result=take, scheduler=scheduler, jobs=execution.jobs,
        skip_bad=execution.skip_bad and first, on_skip=on_skip,
    )  # fmt: skip
    return job, {}, skipped


def _decided(plan: JobPlan, identities: Mapping[int, FileIdentity]) -> tuple[list[int], list[str], JobPlan | None]:
    """Which files make one job (one capture in two formats read once; files that cannot be one job refused:
    ``core.identity.decide_files``), the notes that say what was set aside, and the plan to read again where
    setting files aside changed the job's layout (one host, not two): the kept files read as if only they had
    been named, so the figures are those of the kept files read alone."""
    dropped, notes = decide_files(identities)
    kept = [i for i in sorted(identities) if i not in dropped]
    return kept, notes, plan.keeping(kept) if dropped else None


def _job_of(parts: Sequence[FileResult]) -> JobResults:
    job = JobResults()
    for i, part in enumerate(parts):
        job.add(i, part)
    return job


def _finish(merged: Merged, timeline: TimelineOptions | None, views: Sequence[TimelineView] = ()) -> Result:
    """The merged analysis, and beside it the devices' timeline views (with their ledger wait parts) when
    asked, the §8 instances, the projector."""
    analysis, matched, projector = merged
    if timeline is None or not views:
        return Result(analysis, projector=projector)
    views = sorted(views, key=lambda v: v.device)
    if matched is None:
        return Result(analysis, tuple(views), projector=projector)
    complete = matched[matched["instance"] >= 0]
    waits = {
        str(d): (g["start_ns"].to_numpy(np.int64), (g["start_ns"] + g["wait_ns"]).to_numpy(np.int64))
        for d, g in complete[complete["wait_ns"] > 0].groupby("device", observed=True)
    }
    views = [v.with_wait(*waits[v.device]) if v.device in waits else v for v in views]
    return Result(analysis, tuple(views), instance_table(matched), projector)


def _projected(result: Result, r: Request) -> ProjectedJob | None:
    """The projected timeline of ``r.projected`` over the job, measured like any trace (None: the default
    asked, and the job gets none drawn unasked)."""
    projector = result.projector
    assert projector is not None
    terms = projector.unasked(result.analysis) if r.projected == "default" else list(r.projected or ())
    if terms is None:
        return None
    analysis = result.analysis
    projection, trace, critical = projector.timeline(terms, analysis.projections, analysis.inputs)
    measured = run(Request([trace], timeline=r.timeline or TimelineOptions()))
    # the projected job runs on the measured job's GPUs: its fabric and peaks are theirs (xGMI on AMD)
    return ProjectedJob(
        projection,
        trace,
        measured.analysis.with_(inputs=analysis.inputs, hardware=analysis.hardware),
        measured.timeline,
        critical,
    )


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


def _with_manifest(result: Result, manifest: Mapping | None) -> Result:
    if not manifest:
        return result
    analysis = result.analysis.with_(manifest=manifest, throughput=manifest_throughput(manifest))
    return replace(result, analysis=analysis)


def _plan(inputs: Sequence[str | Path] | JobPlan, options: LoadOptions) -> JobPlan:
    """The job's plan: the one the caller made (the CLI, to size its progress bar), else made here, once."""
    return inputs if isinstance(inputs, JobPlan) else plan_job(list(inputs), options)


# ---------------------------------------------------------------- loading (``moeprof.load``)


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
    if not len(trace.events) and not len(trace.alltoall_splits):
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
    trace = attach_roles(attach_components(attach_scopes(classify(trace, rules_with(options.rules)))))
    return attribute_links(trace, options.nvlink_domain_size, single_host)


class TraceSet(list[Trace]):
    """The traces of one job as ``moeprof.load`` returns them: a list, plus the run folder's manifest
    and what discovery left out (warnings)."""

    manifest: dict | None = None
    notes: tuple[str, ...] = ()


def load(paths: str | Path | Sequence[str | Path] | JobPlan, options: LoadOptions | None = None) -> TraceSet:
    """The classified traces of one job (``moeprof.load``): one :class:`Trace` per trace file, one capture's
    second format set aside and the rest read again where that changed the layout (:func:`_decided`),
    refusing files that cannot be one job."""
    options = options or LoadOptions()
    plan = _plan([paths] if isinstance(paths, str | Path) else paths, options)  # a str is one input, not letters
    traces = _load_all(plan, options)
    kept, decided, again = _decided(plan, {i: identify(t) for i, t in enumerate(traces)})
    out = TraceSet(_load_all(again, options) if again is not None else [traces[i] for i in kept])
    out.manifest = plan.manifest
    out.notes = (*plan.notes, *decided)
    return out


def _load_all(plan: JobPlan, options: LoadOptions) -> list[Trace]:
    return [load_trace(f, p, options, plan.single_host, k) for f, p, k in zip(plan.files, plan.placements, plan.kinds)]
