"""The pipeline: read -> classify -> attribute links -> measure (per file) -> merge (per job).

One entry point, :func:`run`, takes one :class:`Request` and returns one :class:`Result` (:mod:`.runner`);
``load``, ``analyze`` (loaded traces), ``analyze_paths`` (what the user typed) and ``measure`` are the
library's conveniences over it. Files are parsed and measured each on its own (in worker processes when
there are several) and the small per-file results merged, so a 1,000-GPU job never needs all its events in
one process. The library and the CLI take the same route.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from ..core.analysis import Analysis
from ..core.timeline import TimelineOptions
from ..core.trace import Trace
from ..insight.throughput import with_throughput
from ..options import ExecOptions, LoadOptions, StepOptions
from ..readers import TraceSource
from ..readers.discovery import JobPlan
from .merge import merge
from .per_file import FileResult, measure_file
from .runner import ProjectedJob, Request, Result, TraceSet, load, load_trace, run

__all__ = [
    "Analysis",
    "ExecOptions",
    "FileResult",
    "LoadOptions",
    "ProjectedJob",
    "Request",
    "Result",
    "StepOptions",
    "TraceSet",
    "analyze",
    "analyze_paths",
    "load",
    "load_trace",
    "measure",
    "measure_file",
    "merge",
    "run",
    "with_throughput",
]


def analyze(
    traces: Trace | Sequence[Trace] | str | Path | Sequence[str | Path],
    step_options: StepOptions | None = None,
    link_peaks: dict[str, float] | None = None,
    timeline: TimelineOptions | None = None,
    what_if: Sequence[str] = (),
) -> Analysis:
    """``moeprof.analyze``: the analysis of loaded traces (what ``moeprof analyze`` prints); ``what_if``:
    §9 terms projected together (``Analysis.projections``, after the balance projection). Paths (what
    ``moeprof analyze`` takes: files, folders, run folders) are read as :func:`analyze_paths` reads them."""
    if isinstance(traces, Trace | str | Path):
        items: Sequence[Trace | str | Path] = [traces]
    else:  # what moeprof.load returned is kept as it is: a run folder's manifest and notes travel on it
        items = traces if isinstance(traces, Sequence) else [*traces]
    paths = [i for i in items if isinstance(i, str | Path)]
    if paths:
        if len(paths) < len(items):
            raise TypeError("moeprof.analyze takes loaded traces or paths, not both in one list")
        return analyze_paths(
            paths, step_options=step_options, link_peaks=link_peaks, timeline=timeline, what_if=what_if
        )
    loaded = cast("Sequence[Trace]", items)
    request = Request(loaded, steps=step_options, link_peaks=link_peaks, timeline=timeline, what_if=what_if)
    return run(request).analysis


def measure(trace: Trace, step_options: StepOptions | None = None) -> Analysis:
    """The analysis of one trace on its own."""
    return analyze([trace], step_options)


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
    """``moeprof.analyze_paths``: discover, read and measure every trace file of what the user typed (or its
    :class:`~moeprof.readers.discovery.JobPlan`), then merge (``moeprof analyze``).

    The per-file map runs in this process (one file, or ``jobs=1``), in a local process pool (the default),
    or on a Dask cluster (``scheduler``); each result is merged as it arrives and then dropped, so the
    coordinator holds compact per-file tables, never events. A bad file stops the run with one line naming
    it, or with ``skip_bad`` is listed in the warnings and left out."""
    execution = execution or ExecOptions(jobs, scheduler, skip_bad)
    request = Request(
        inputs, options or LoadOptions(), step_options, execution, link_peaks, what_if, timeline, progress=progress
    )
    return run(request).analysis
