"""NCCL Inspector logs through the pipeline: read each file (in workers, or on a Dask cluster, like trace
files), concatenate the operation rows, measure them once (``moeprof.core.inspector``).

There is no timeline: the analysis has no ``devices``, its ``total`` §4 figures are null, and the
``inspector`` section carries what the logs do tell (docs/metrics.md, "NCCL Inspector logs").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.analysis import Analysis, Figures
from ..core.inspector import measure
from ..errors import InputError
from ..insight.bandwidth import job_hardware
from ..readers.registry import read_inspector
from ..readers.sources import TraceSource
from .executors import map_files

# why what needs a timeline (a projection, a critical path) is refused for these logs, in one place
NO_TIMELINE = (
    "NCCL Inspector logs have no timeline to replay (a projection and its critical path replay the device "
    "activity of a trace: Nsight, Kineto, XPlane, rocprof)"
)


def read_rows(path: Path) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """One log's row columns, version and warnings (a module-level function: it runs in workers)."""
    log = read_inspector(path)
    return log.columns, log.version, log.warnings


CATEGORY_COLUMNS = ("file", "host", "comm", "comm_name", "op", "kind", "timing_source", "algo", "proto")


def concat_columns(files: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The files' row columns joined: each text column's categories joined (sorted) by code, not by re-hashing
    every row's string as concatenating to objects and back would."""
    from pandas.api.types import union_categoricals

    columns: dict[str, Any] = {}
    for col in files[0]:
        values = [f[col] for f in files]
        if col in CATEGORY_COLUMNS:
            cats = [pd.Categorical(v) for v in values]
            said = [c for c in cats if len(c.categories)]
            if said:  # a file without any value of the column: no categories, of the others' dtype
                none = said[0].categories[:0]
                cats = [c if len(c.categories) else pd.Categorical.from_codes(c.codes, none) for c in cats]
            try:
                columns[col] = union_categoricals(cats, sort_categories=True)
            except TypeError:  # categories of different dtypes: through objects
                joined = pd.concat([pd.Series(v, dtype=object) for v in values], ignore_index=True)
                columns[col] = joined.astype("category").array
        elif isinstance(values[0], np.ndarray):
            columns[col] = np.concatenate(values)
        else:
            columns[col] = pd.concat([pd.Series(v) for v in values], ignore_index=True).array
    return columns


def read_logs(
    files: Sequence[Path],
    jobs: int | None = None,
    scheduler: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[TraceSource], None] | None = None,
) -> tuple[pd.DataFrame, list[str], list[dict[str, str]]]:
    """Every log's rows (file order) as one table, warnings, and the files skipped with ``skip_bad``."""
    columns, versions, warnings, skipped = read_log_columns(files, jobs, scheduler, skip_bad, progress)
    rows = pd.DataFrame(columns)
    rows.attrs["versions"] = versions
    return rows, warnings, skipped


def read_log_columns(
    files: Sequence[Path],
    jobs: int | None = None,
    scheduler: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[TraceSource], None] | None = None,
) -> tuple[dict[str, Any], list[str], list[str], list[dict[str, str]]]:
    """Every log's row columns joined (file order; no table made: measure reads columns), the format
    versions, warnings, and the files skipped with ``skip_bad``."""
    parts: dict[int, tuple[dict[str, Any], str, tuple[str, ...]]] = {}

    def take(index: int, value: tuple[dict[str, Any], str, tuple[str, ...]]) -> None:
        parts[index] = value
        if progress:
            progress(files[index])

    skipped = map_files(read_rows, list(files), on_result=take, scheduler=scheduler, jobs=jobs, skip_bad=skip_bad)
    if skipped and not parts:
        first = skipped[0]
        raise InputError(first.file, f"{first.problem} (and every other input was bad too: nothing to analyze)")
    ordered = [parts[i] for i in sorted(parts)]
    columns = concat_columns([p[0] for p in ordered])
    versions = sorted({p[1] for p in ordered if p[1]})
    warnings = [w for p in ordered for w in p[2]] + [f"skipped {s.file}: {s.problem}" for s in skipped]
    return columns, versions, warnings, [{"file": s.file, "problem": s.problem} for s in skipped]


def analyze_logs(
    files: Sequence[Path],
    link_peaks: Mapping[str, float] | None = None,
    notes: Sequence[str] = (),
    jobs: int | None = None,
    scheduler: str | None = None,
    skip_bad: bool = False,
    progress: Callable[[TraceSource], None] | None = None,
) -> Analysis:
    """The analysis of a job's NCCL Inspector logs (no devices, null §4 total, an ``inspector`` section)."""
    columns, versions, warnings, skipped = read_log_columns(files, jobs, scheduler, skip_bad, progress)
    hardware = job_hardware({}, link_peaks)
    section = measure(columns, hardware.peaks, versions)
    said = list(notes) + warnings + list(hardware.warnings)
    if not hardware.peaks:
        said.append("NCCL Inspector logs name no GPU: pass --gpu (or --link-peak) to compare bus bandwidth with peaks")
    if section["incomplete_instances"]:
        said.append(
            f"{section['incomplete_instances']:,} collective instances lack some member's record (not every"
            " rank's log given, or records the plugin dropped): left out of the last-to-arrive table"
        )
    if section["p2p"]["unmatched_records"]:
        said.append(
            f"{section['p2p']['unmatched_records']:,} P2P records unmatched (their peer's log not given, or the two"
            " sides of a sender and receiver hold different counts or sizes): left out of the P2P last-to-arrive"
            " table"
        )
    return Analysis(
        inputs=tuple(str(f) for f in files),
        devices=(),
        total=Figures(),
        warnings=tuple(said),
        hardware=hardware.summary,
        inspector=section,
        skipped=tuple(skipped),
    )
