"""The one event table every reader returns (inside a :class:`~moeprof.core.trace.Trace`).

One row per device activity (kernel, memcpy, memset), columnar in pandas. The
readers fill the *raw* columns; classification fills ``bucket``/``kind``/``rule``
and the link step fills ``ib_fraction``. Step and module markers are not rows
here: they travel in ``Trace.markers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from .time_window import MAX_DURATION_NS, TIME_LIMIT_NS, UNPLACEABLE_NS

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
    "activity": "str",  # kernel | memcpy | memset
    "copy_kind": "str",  # HtoD | DtoH | DtoD | PtoP | HtoH | "" (memcpy only)
    "hlo_module": "str",
    "hlo_op": "str",
    "program_id": "int64",  # XLA program id, -1 unknown
    "opcode": "str",  # HLO opcode of hlo_op (async wrappers resolved), "" unknown
    # JAX name scope path (tf_op stat without its trailing ":<type>", or the HLO op_name of hlo_op; core.scopes),
    # e.g. "jit(step)/jvp(layer0)/experts/ragged_dot_general/ragged-dot-none"; "" unknown
    "scope": "str",
    # the scope key of the model component the activity serves, and whether in the backward pass: its own scope's,
    # else what the trace's HLO places its op under (its backward's, its parameters' scope; core.components), else
    # what the reader read (a Kineto backward kernel: its forward op's); "" unknown
    "component": "str",
    "backward": "bool",
    "collective": "str",  # collective named by kernel args / NCCL NVTX ("allreduce", "all_to_all", ...)
    "annotation": "str",  # enclosing CPU-side op or NVTX range ("nccl:all_to_all", ...)
    "bytes": "float64",  # bytes moved by one execution (NaN unknown)
    "group": "str",  # communicating group, comma-separated global ids ("" unknown)
    # the group is the reader's assumption, not read from the trace (a Kineto rank file of a job that fits one
    # NVLink domain: the whole world): the links use it, the ledger's match key does not (spec §8)
    "group_assumed": "bool",
    "pg": "str",  # process group / communicator the call ran on ("" unknown): part of the ledger's match key
    "seq": "int64",  # the call's sequence number in its group (-1 unknown)
    "p2p": "bool",  # a point-to-point call (send/recv): counted apart from collectives, members are the two peers
    "source": "str",  # parser that produced the row (xplane, chrome, kineto, nsys)
    # §9 replay: when the launching runtime call returned (host clock, -1 unknown) and on which host thread
    "launch_ns": "int64",
    "launch_thread": "str",
    # what XLA states about the op itself (TPU XPlanes and their xprof/JAX JSON, from the op's event metadata;
    # empty elsewhere): per-scope tables, MFU against the chip's peak and scope filters are built on these
    "category": "str",  # XLA's hlo_category ("convolution fusion", "all-reduce", "copy-start", ...), "" unknown
    "flops": "float64",  # FLOPs of one execution as XLA's cost model counts them (stat `flops`), NaN unknown
    # FLOPs of one execution the model asked for (stat `model_flops`: a ragged_dot counts its real groups where
    # `flops` counts it dense over every expert), NaN unknown
    "model_flops": "float64",
    "bytes_accessed": "float64",  # memory bytes one execution reads and writes (stat `bytes_accessed`), NaN unknown
    # FLOPs of one execution as moeprof counts them from the program's HLO shapes, where XLA's count is wrong:
    # a ragged dot's 2·M·K·N, a fusion holding its weight gradient (XLA: dense over every group) with that
    # gradient recounted (core.hlo.recount_flops); NaN where moeprof does not recount the op
    "recounted_flops": "float64",
    # HBM bytes one execution reads and writes: XLA's memory_access_breakdown, its HBM entries (memory space 1,
    # reads and writes: what xprof's op_profile counts), else ``bytes_accessed`` (every memory space); from a
    # Kineto kernel's launching op's shapes (every input and output once); NaN unknown (core.roofline)
    "hbm_bytes": "float64",
}
DERIVED_COLUMNS: dict[str, str] = {
    "bucket": "str",  # compute | comm | memcpy | other
    "kind": "str",  # collective kind for comm rows, "" otherwise
    "rule": "str",  # id of the taxonomy rule that set the bucket (and kind)
    # nvlink | ib | internode | "": a path named by the kernel itself (DeepEP intranode, internode_ll; internode:
    # both, split by the RDMA ranks the kernels name)
    "link_hint": "str",
    "ib_fraction": "float64",  # share of the activity carried over InfiniBand, NaN unknown
    # the part of the MoE step the activity serves (core.roles.ROLES: router, permute, dispatch, experts, ...):
    # derived, not read, because it is moeprof's taxonomy (core/roles.toml) over the scope, component, opcode
    # and name the readers give, decided after classification (an exchange is a comm or one-chip copy row)
    "role": "str",
}
COLUMNS: dict[str, str] = {**RAW_COLUMNS, **DERIVED_COLUMNS}
_OP_COLUMNS = (
    "category",
    "scope",
    "component",
    "backward",
    "flops",
    "model_flops",
    "bytes_accessed",
    "recounted_flops",
    "hbm_bytes",
)
# derived columns added after the first event table
_LATER_DERIVED = ("role",)
# the columns of the first event table (schema moeprof.events/1): a CSV header that holds them all is
# moeprof's own table (readers.marks), also one written before the op columns above were added
EVENTS_V1_COLUMNS = (
    *(c for c in RAW_COLUMNS if c not in _OP_COLUMNS),
    *(c for c in DERIVED_COLUMNS if c not in _LATER_DERIVED),
)

DEVICE_ACTIVITIES = ("kernel", "memcpy", "memset")

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

_DEFAULTS: dict[str, object] = {"str": "", "int64": -1, "float64": np.nan, "bool": False}


def categorical(values: Any, n: int) -> pd.Categorical[Any]:
    """A string column as a pandas Categorical: traces repeat a few thousand names millions of times."""
    if isinstance(values, pd.Categorical):
        return values
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        return pd.Categorical(values)
    if values is None or np.isscalar(values):
        fill = pd.Index(["" if values is None else values], dtype=object)
        return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=fill)
    codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=False)
    return pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype=object))


def column_codes(column: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes (int64, -1 for a missing value) and the distinct values (object) of a string column.

    Free for the categorical columns of an event table; anything else is factorized once.
    """
    if isinstance(column, pd.Series) and isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(dtype=np.int64), np.asarray(column.cat.categories, dtype=object)
    if isinstance(column, pd.Categorical):
        return np.asarray(column.codes, dtype=np.int64), np.asarray(column.categories, dtype=object)
    if isinstance(column, pd.Series) and isinstance(column.dtype, pd.StringDtype):
        string_codes, string_uniques = pd.factorize(column)  # Arrow's own hash: no Python string per row
        return string_codes.astype(np.int64), np.asarray(string_uniques, dtype=object)
    values = column.to_numpy(dtype=object) if isinstance(column, pd.Series) else np.asarray(column, dtype=object)
    codes, uniques = pd.factorize(values)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def narrow_codes(column: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`column_codes` without widening: a categorical column's own codes (int8/16/32, -1 missing; no copy,
    read-only), anything else int64 codes factorized once. A code is below its dtype's largest value (pandas
    picks the dtype that way), so ``code + 1`` fits it; other arithmetic on codes must widen them first (an
    int16 code plus a count of values wraps)."""
    if isinstance(column, pd.Series) and isinstance(column.dtype, pd.CategoricalDtype):
        cat = cast(pd.Categorical, column.array)  # its codes, not ``.cat.codes`` (a copy)
        return np.asarray(cat.codes), np.asarray(cat.categories, dtype=object)
    if isinstance(column, pd.Categorical):
        return np.asarray(column.codes), np.asarray(column.categories, dtype=object)
    return column_codes(column)


def narrowest_int(size: int) -> type[np.signedinteger[Any]]:
    """The narrowest signed integer type for the codes ``[-1, size)`` of a per-row column a table keeps, at
    pandas' own thresholds for a categorical of ``size`` values: codes made in it become a categorical's codes
    without a copy."""
    for kind in (np.int8, np.int16, np.int32):
        if size < np.iinfo(kind).max:
            return kind
    return np.int64


def gathered(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``values[rows]``; where every value is one value, bit for bit (a launch time a reader never saw, counts a
    trace does not state, one host's clock offset), that value broadcast over the rows: read-only and in no
    memory, where a gather would spend 8 bytes a row of a 10^6-row table on a constant."""
    if values.size and rows.size:
        bits = values.view(np.int64) if values.dtype == np.float64 else values
        if bool((bits == bits[0]).all()):
            return np.broadcast_to(values[:1].copy(), rows.shape)
    return values[rows]


def present_values(column: pd.Series | np.ndarray) -> list[Any]:
    """The distinct values a string column holds (a categorical's unused categories left out; a missing
    value as NaN), in the order of their codes: ``pd.unique`` as a set, without a string per row."""
    codes, values = column_codes(column)
    counts = np.bincount(codes + 1, minlength=len(values) + 1)
    used = np.flatnonzero(counts[1:])
    return [*values[used].tolist(), *([np.nan] if counts[0] else [])]


def lookup(codes: np.ndarray, table: np.ndarray, missing: Any) -> np.ndarray:
    """``table[codes]`` with ``missing`` where a code is -1 (one value per distinct string, mapped over rows)."""
    return np.append(np.asarray(table), np.asarray([missing], dtype=np.asarray(table).dtype))[codes]


def categorical_of(codes: np.ndarray, values: np.ndarray, numbered: bool = False) -> pd.Categorical[Any]:
    """``categorical(values[codes])`` (categories in order of first appearance) without a string per row.

    ``values``: distinct or not, one per code; ``codes`` of -1 read a missing value. ``numbered``: the codes
    already number their values in order of first appearance, from 0, none missing (``pd.factorize``'s), so
    that they need no hashing again.
    """
    if numbered:
        small, used = np.asarray(codes), np.arange(len(values), dtype=np.int64)
    else:
        # the codes lie in [-1, len(values)): numbered through a table by code where that is small
        codes = np.asarray(codes, dtype=np.int64)
        if codes.size and int(codes.min()) >= -1 and int(codes.max()) < len(values):
            small, used = _number_keys(codes + 1, len(values) + 1)
            used = used - 1
        else:
            small, used = pd.factorize(codes)
    strings = lookup(used, np.asarray(values, dtype=object), np.nan)
    # distinct codes may spell the same string: one category each
    merged, uniques = pd.factorize(strings, use_na_sentinel=False)
    return pd.Categorical.from_codes(merged[small], categories=pd.Index(uniques, dtype=object))


def first_rows(codes: np.ndarray) -> np.ndarray:
    """The row where each code first appears, for codes numbered in order of first appearance
    (``pd.factorize``'s): linear, no sort."""
    codes = np.asarray(codes, dtype=np.int64)
    if not codes.size:
        return np.zeros(0, dtype=np.int64)
    seen = np.maximum.accumulate(codes)
    new = np.empty(codes.size, dtype=bool)
    new[0] = True
    new[1:] = codes[1:] > seen[:-1]
    return np.flatnonzero(new)


def distinct_rows(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``frame[columns].drop_duplicates()`` (each distinct tuple's first row, in row order, with its index
    label) from the columns' codes: no hash of every row's tuple (17 ms for the device of 1M kernels)."""
    if not len(frame):
        return frame[columns].drop_duplicates()
    n = len(frame)
    packed = np.zeros(n, dtype=np.int64)
    span = 1
    for c in columns:
        codes, values = narrow_codes(frame[c])  # a categorical's own codes: no int64 copy of them
        size = len(values) + 1  # code -1 (missing) is a value of its own
        packed *= size
        packed += codes
        packed += 1
        span *= size
        if span > max(4 * n, 1 << 16):  # too wide for a table of first rows: one hash of the tuples
            return frame[columns].take(first_rows(combine_codes(*(column_codes(frame[k])[0] for k in columns))))
    # a tuple first appears where a run of equal tuples begins: where rows come grouped (a device's activities
    # together), among the few run starts, not every row
    starts = np.flatnonzero(packed[1:] != packed[:-1]) + 1
    if 4 * starts.size < n:
        runs = np.r_[np.int64(0), starts]
        _, at = np.unique(packed[runs], return_index=True)  # each tuple's first run
        return frame[columns].take(np.sort(runs[at]))
    first = np.full(span, n, dtype=np.int64)
    np.minimum.at(first, packed, np.arange(n, dtype=np.int64))  # each tuple's first row
    return frame[columns].take(np.sort(first[first < n]))


_PACKED_LIMIT = 1 << 62  # mixed-radix keys stay below this: int64 without overflow
# integer keys in a range up to this are numbered through a table by key (it stays in cache), not hashed: a 1M-row
# factorize costs 5-15 ms where the table costs 2-4 ms; past ~2**17 keys the table's scattered reads cost more
NUMBERED_BY_TABLE = 1 << 16


def numbered(keys: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of integer keys in ``[0, span)``: (int64 codes numbering the keys in order of first
    appearance, the keys in that order), through a table by key where ``span`` is small."""
    keys = np.asarray(keys)
    n = keys.size
    if span > NUMBERED_BY_TABLE or not n:
        codes, uniques = pd.factorize(keys)
        return codes.astype(np.int64, copy=False), np.asarray(uniques, dtype=np.int64)
    first = np.full(span, n, dtype=np.int64)
    np.minimum.at(first, keys, np.arange(n, dtype=np.int64))  # each key's first row
    used = np.flatnonzero(first < n)
    used = used[np.argsort(first[used], kind="stable")]
    rank = np.zeros(span, dtype=np.int64)
    rank[used] = np.arange(used.size, dtype=np.int64)
    return rank[keys], used


_number_keys = numbered  # for categorical_of, whose flag shadows the name


def _dense_codes(column: np.ndarray) -> tuple[np.ndarray, int]:
    """(codes in [0, size), size) of a column: an integer column of a narrow range as its offset from
    its minimum (no hashing), anything else factorized (NaN is a value of its own); a float column as its
    bits (one NaN and one zero first, as factorize tells them), hashed as integers (a float hash costs ~4x)."""
    if column.dtype.kind == "f" and column.dtype.itemsize in (4, 8):
        canonical = np.where(np.isnan(column), np.nan, column) + column.dtype.type(0)  # -0.0 + 0.0 is 0.0
        column = canonical.view(np.int32 if column.dtype.itemsize == 4 else np.int64)
    if column.dtype.kind in "iub" and column.size:
        low, high = int(column.min()), int(column.max())
        if high - low < max(column.size, 1 << 16):
            if high == low:  # one value: every row's code is 0 (combine_codes leaves the column out)
                return np.zeros(0, dtype=np.int64), 1
            codes = column.astype(np.int64)  # a copy: the codes are the caller's to change
            if low:
                codes -= low
            return codes, high - low + 1
    codes, uniques = pd.factorize(column, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), max(len(uniques), 1)


def combine_codes(*columns: np.ndarray) -> np.ndarray:
    """One code per distinct tuple of columns (integer codes, or values that hash), numbered in order of
    first appearance.

    The tuples are packed as mixed-radix integers, column by column, and numbered once at the end
    (a hash pass per column only where a column is not already narrow integer codes, and where the
    packed key would outgrow int64): annotate's eight evidence columns over 1M rows took 16 hash
    passes before, 2-3 now.
    """
    n = len(columns[0]) if columns else 0
    packed: np.ndarray | None = None
    span = 1  # packed keys lie in [0, span)
    for column in columns:
        codes, size = _dense_codes(np.asarray(column))
        if size == 1 and not codes.size:  # one value in every row: it tells no two tuples apart
            continue
        if packed is None:
            packed, span = codes, size
            continue
        if span * size >= _PACKED_LIMIT:
            renumbered, uniques = pd.factorize(packed)
            packed, span = renumbered.astype(np.int64, copy=False), max(len(uniques), 1)
        packed = packed * size + codes
        span *= size
    if packed is None:  # no column tells two rows apart: one tuple, code 0 on every row
        return np.zeros(n, dtype=np.int64)
    return numbered(packed, span)[0]


def bucket_codes(column: pd.Series | np.ndarray) -> np.ndarray:
    """Each row's bucket as its int8 index in :data:`BUCKETS` (-1: none of them)."""
    codes, values = narrow_codes(column)  # a lookup by code: no int64 copy of a categorical's codes
    index = np.array([BUCKETS.index(v) if v in BUCKETS else -1 for v in values.tolist()], dtype=np.int8)
    return lookup(codes, index, -1)


def make_table(columns: Mapping[str, Any], n: int | None = None, *, owned: bool = False) -> pd.DataFrame:
    """Build an event table from column arrays; absent columns get their default.

    ``n`` is the row count when every given column is a scalar. ``owned``: the arrays are the caller's to
    give away (made for this table, not kept): the frame takes them as they are, where pandas would copy
    every numeric column into one block per dtype (a fifth of a rocpd read of 1.4M dispatches).
    """
    if n is None:
        lengths = {len(v) for v in columns.values() if v is not None and not np.isscalar(v)}
        n = lengths.pop() if lengths else 0
        if lengths:
            raise ValueError("event columns differ in length")
    data: dict[str, object] = {}
    for col, dtype in COLUMNS.items():
        value = columns.get(col)
        if dtype == "str":
            data[col] = categorical(value, n)
        elif value is None or np.isscalar(value):
            data[col] = np.full(n, _DEFAULTS[dtype] if value is None else value, dtype=dtype)
        else:
            data[col] = np.asarray(value, dtype=dtype)
    frame = pd.DataFrame(data, copy=not owned)
    for col in sorted(set(columns) - set(COLUMNS)):  # parsers may carry extra columns (e.g. correlation ids)
        frame[col] = columns[col]
    return frame


def empty_table() -> pd.DataFrame:
    return make_table({}, n=0)


def concat(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Stack event tables, keeping string columns categorical (a plain concat would not)."""
    tables = [t for t in tables if len(t)]
    if not tables:
        return empty_table()
    if len(tables) == 1:
        return tables[0].reset_index(drop=True)
    out: dict[str, Any] = {}
    for col in tables[0].columns:
        parts = [t[col] for t in tables if col in t.columns]
        if all(isinstance(p.dtype, pd.CategoricalDtype) for p in parts):
            # categories may be str- or object-typed depending on how they were built
            cats = [pd.Categorical.from_codes(p.cat.codes, pd.Index(p.cat.categories, dtype=object)) for p in parts]
            out[col] = union_categoricals(cats, ignore_order=True)
        else:
            out[col] = pd.concat(parts, ignore_index=True).to_numpy()
    return pd.DataFrame(out)


def set_strings(table: pd.DataFrame, col: str, values: np.ndarray) -> None:
    """Assign a whole string column, categorical like the rest."""
    table[col] = categorical(values, len(table))


def floats_to_ns(values: np.ndarray) -> np.ndarray:
    """Float nanoseconds to int64, rounding to the nearest ns; NaN, inf and times past the window are
    :data:`UNPLACEABLE_NS` (no cast of an out-of-range float, so no RuntimeWarning)."""
    v = np.asarray(values, dtype=np.float64)
    ok = np.abs(v) < TIME_LIMIT_NS  # False for NaN and inf
    if ok.all():
        return np.rint(v).astype(np.int64)
    out = np.full(v.shape, UNPLACEABLE_NS, dtype=np.int64)
    out[ok] = np.rint(v[ok]).astype(np.int64)
    return out


def outside_window(start_ns: np.ndarray, end_ns: np.ndarray) -> dict[str, np.ndarray]:
    """Masks of the rows a reader's times cannot place: ``beyond`` (an end point at or past +-2^62 ns, which is
    where the converters put NaN, inf and overflowing times), ``negative`` (an end point before the clock's
    zero), ``reversed`` (ends before it starts), ``long`` (more than a day)."""
    s = np.asarray(start_ns, dtype=np.int64)
    e = np.asarray(end_ns, dtype=np.int64)
    beyond = (s <= -TIME_LIMIT_NS) | (s >= TIME_LIMIT_NS) | (e <= -TIME_LIMIT_NS) | (e >= TIME_LIMIT_NS)
    negative = ~beyond & ((s < 0) | (e < 0))
    dur = np.where(beyond, 0, e) - np.where(beyond, 0, s)  # both within +-2^62: the difference fits
    return {"beyond": beyond, "negative": negative, "reversed": dur < 0, "long": dur > MAX_DURATION_NS}


def isolated_activity(device: Any, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Mask of the activities that lie apart from the bulk of their device's activity (docs/metrics.md,
    "Times moeprof accepts").

    Per device, activities sorted by start are cut into parts wherever the next start comes more than
    ``MAX_DURATION_NS`` (1 day) after the latest end so far; the part with the most activities is the
    device's activity (ties: the earliest part) and every activity of another part is isolated. Times
    must be placeable (``outside_window`` all false): every difference then fits int64.
    """
    s = np.asarray(start_ns, dtype=np.int64)
    e = np.asarray(end_ns, dtype=np.int64)
    out = np.zeros(s.size, dtype=bool)
    if s.size < 2 or int(e.max()) - int(s.min()) <= MAX_DURATION_NS:
        return out  # the usual case: everything within a day, nothing can be a day from the rest
    dev = pd.factorize(device)[0].astype(np.int64)  # a categorical column factorizes by its codes
    order = np.lexsort((s, dev))
    d, ss, ee = dev[order], s[order], e[order]
    latest_end = pd.Series(ee).groupby(d).cummax().to_numpy(dtype=np.int64)
    new_part = np.ones(s.size, dtype=bool)
    new_part[1:] = (d[1:] != d[:-1]) | (ss[1:] - latest_end[:-1] > MAX_DURATION_NS)
    part = np.cumsum(new_part) - 1
    size = np.bincount(part)
    part_device = d[new_part]
    # per device, its largest part (ties: the earliest, the lowest part number)
    best = np.lexsort((np.arange(size.size), -size, part_device))
    first_of_device = np.ones(best.size, dtype=bool)
    first_of_device[1:] = part_device[best][1:] != part_device[best][:-1]
    kept = np.zeros(size.size, dtype=bool)
    kept[best[first_of_device]] = True
    out[order] = ~kept[part]
    return out


def us_interval_to_ns(ts_us: np.ndarray, dur_us: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Chrome/Kineto float µs ``ts`` (and ``dur``) to integer ns, rounding to the nearest ns (spec §1).

    ``start = rint(ts*1e3)`` and ``end = rint(ts*1e3 + dur*1e3)``: each end point is
    rounded on its own, never inward, so touching intervals stay touching.
    Epoch-based µs timestamps (~1.7e15) times 1e3 exceed float64's exact
    integers, so the whole µs are scaled in int64 and only the fraction goes
    through floats; the result equals rint of the exact products. An end point
    past +-2^62 ns (or NaN, inf) is :data:`UNPLACEABLE_NS`.
    """
    ts = np.asarray(ts_us, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf are masked below, never cast
        ok = np.abs(ts) < TIME_LIMIT_NS / 1e3
        whole = np.floor(np.where(ok, ts, 0.0))
        frac = np.where(ok, ts, 0.0) - whole  # exact for doubles
        base = whole.astype(np.int64) * 1000
        start = np.where(ok, base + np.rint(frac * 1e3).astype(np.int64), UNPLACEABLE_NS)
        if dur_us is None:
            return start, start.copy()
        tail = frac * 1e3 + np.asarray(dur_us, dtype=np.float64) * 1e3
        ok_end = ok & (np.abs(tail) < TIME_LIMIT_NS)
        end = np.where(ok_end, base + np.rint(np.where(ok_end, tail, 0.0)).astype(np.int64), UNPLACEABLE_NS)
    return start, end
