"""The one event table every parser returns and everything downstream reads.

One row per device activity (kernel, memcpy, memset), columnar in pandas. The
parsers fill the *raw* columns; classification fills ``bucket``/``kind``/``rule``
and the link step fills ``ib_fraction``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

# name -> dtype. Strings are pandas' ``str`` columns (empty string = absent)
# so that factorizing and writing parquet/csv needs no special cases.
RAW_COLUMNS: dict[str, str] = {
    "host": "str",  # host part of the device id ("node0", "rank3")
    "device": "str",  # "<host>/<device>", e.g. "node0/GPU:3"
    "global_id": "int64",  # global device id / rank (-1 unknown), for replica groups
    "gpus_per_domain": "int64",  # devices per NVLink domain: domain of global id g is g // this (-1 unknown)
    "stream": "str",  # stream / line name
    "name": "str",  # kernel or copy name as the trace spells it
    "start_ns": "int64",
    "end_ns": "int64",
    "activity": "str",  # kernel | memcpy | memset; marker rows: step | module (never device activity)
    "copy_kind": "str",  # HtoD | DtoH | DtoD | PtoP | HtoH | "" (memcpy only)
    "hlo_module": "str",
    "hlo_op": "str",
    "program_id": "int64",  # -1 unknown; on step marker rows, the step number
    "opcode": "str",  # HLO opcode of hlo_op (async wrappers resolved), "" unknown
    "collective": "str",  # collective named by kernel args / NCCL NVTX ("allreduce", "all_to_all", ...)
    "annotation": "str",  # enclosing CPU-side op or NVTX range ("nccl:all_to_all", ...)
    "bytes": "float64",  # bytes moved by one execution (NaN unknown)
    "group": "str",  # communicating group, comma-separated global ids ("" unknown)
    "source": "str",  # parser that produced the row (xplane, chrome, kineto, nsys)
}
DERIVED_COLUMNS: dict[str, str] = {
    "bucket": "str",  # compute | comm | memcpy | other
    "kind": "str",  # collective kind for comm rows, "" otherwise
    "rule": "str",  # id of the taxonomy rule that set the bucket (and kind)
    "link_hint": "str",  # nvlink | ib | "" : a path named by the kernel itself (DeepEP intranode/internode)
    "ib_fraction": "float64",  # share of the activity carried over InfiniBand, NaN unknown
}
COLUMNS: dict[str, str] = {**RAW_COLUMNS, **DERIVED_COLUMNS}

DEVICE_ACTIVITIES = ("kernel", "memcpy", "memset")
MARKERS = ("step", "module")

BUCKETS = ("compute", "comm", "memcpy", "other")
KINDS = (
    "all-to-all",
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "send-recv",
    "broadcast",
    "ep-dispatch",
    "ep-combine",
    "other",
)

_DEFAULTS: dict[str, object] = {"str": "", "int64": -1, "float64": np.nan}


def make_table(columns: Mapping[str, object], n: int | None = None) -> pd.DataFrame:
    """Build an event table from column arrays; absent columns get their default.

    ``n`` is the row count when every given column is a scalar.
    """
    if n is None:
        lengths = {len(v) for v in columns.values() if not np.isscalar(v) and v is not None}
        n = lengths.pop() if lengths else 0
        if lengths:
            raise ValueError("event columns differ in length")
    data: dict[str, object] = {}
    for col, dtype in COLUMNS.items():
        value = columns.get(col)
        if value is None:
            value = _DEFAULTS[dtype]
        if np.isscalar(value):
            if dtype == "str":
                arr = np.empty(n, dtype=object)
                arr[:] = value
                data[col] = arr
            else:
                data[col] = np.full(n, value, dtype=dtype)
        else:
            data[col] = np.asarray(value, dtype=object if dtype == "str" else dtype)
    unknown = set(columns) - set(COLUMNS)
    frame = pd.DataFrame(data)
    for col in sorted(unknown):  # parsers may carry extra columns (e.g. correlation ids)
        frame[col] = columns[col]
    return frame


def empty_table() -> pd.DataFrame:
    return make_table({}, n=0)


def concat(tables: list[pd.DataFrame]) -> pd.DataFrame:
    tables = [t for t in tables if len(t)]
    if not tables:
        return empty_table()
    return pd.concat(tables, ignore_index=True)


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Chrome/Kineto float microseconds to integer ns, rounding to the nearest ns (spec §1)."""
    return np.rint(np.asarray(us, dtype=np.float64) * 1e3).astype(np.int64)


def us_interval_to_ns(ts_us: np.ndarray, dur_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end in ns of intervals given as float µs ``ts``/``dur``: each end point
    is rounded to the nearest ns on its own, so touching intervals stay touching."""
    start = np.asarray(ts_us, dtype=np.float64) * 1e3
    end = start + np.asarray(dur_us, dtype=np.float64) * 1e3
    return np.rint(start).astype(np.int64), np.rint(end).astype(np.int64)
