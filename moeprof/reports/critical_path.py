"""The projections' whole critical paths as one parquet file (``analyze --critical-path FILE``): the JSON
carries each path's figures and its longest segments only (docs/metrics.md, "Projection"); here every segment
of every projection that has a path, one row each, in path order."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.analysis import PATH_COLUMNS, Analysis
from ..outputs import cannot_write, replacing

COLUMNS = ("projection", "role", "what_if", "step", "segment", *PATH_COLUMNS, "ns")


def critical_paths(analysis: Analysis) -> pd.DataFrame:
    """Every projection's critical path (the segments held: a fresh analysis holds them all): ``projection``
    its index in the JSON's ``projections``, ``role``, ``what_if`` (the terms, space-joined), ``step`` (the
    critical step), ``segment`` the place on the path, then the segment's columns and ``ns``."""
    parts = []
    for i, p in enumerate(analysis.projections):
        frame = p.critical_path.frame()
        if not len(frame):
            continue
        frame.insert(0, "segment", range(len(frame)))
        frame.insert(0, "step", p.critical_step if p.critical_step is not None else -1)
        frame.insert(0, "what_if", " ".join(p.what_if))
        frame.insert(0, "role", p.role)
        frame.insert(0, "projection", i)
        parts.append(frame)
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("role", "what_if", *PATH_COLUMNS[:5]) else "int64")
                             for c in COLUMNS})  # fmt: skip
    out = pd.concat(parts, ignore_index=True)
    for c in ("role", "what_if", *PATH_COLUMNS[:5]):
        out[c] = out[c].astype("category")
    return out[list(COLUMNS)]


def write_critical_paths(analysis: Analysis, out: Path) -> int:
    """Write :func:`critical_paths` to ``out`` (parquet); returns the segments written."""
    frame = critical_paths(analysis)
    try:
        with replacing(out) as into:
            pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), into)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    return len(frame)
