"""NCCL Inspector logs (NCCL's profiler plugin, ``libnccl-profiler-inspector.so``; RCCL's port writes the same).

One file per process, ``<hostname>-pid<pid>.log`` (also ``.log.gz``, ``.jsonl``, ``.jsonl.gz``):
newline-separated compact JSON objects, one per completed collective (``coll_perf``) or point-to-point
operation (``p2p_perf``) of each communicator. Fields and their sources: docs/metrics.md, "NCCL
Inspector logs" (NVIDIA/nccl ``plugins/profiler/inspector``: ``inspector_json.cc``, ``inspector.cc``).

A record has **no start time** (``dump_timestamp_us`` is when it was written) and no device, stream or
kernel: it cannot be placed on a timeline. So this reader does not return a :class:`Trace` of device
activities (that would fake the §4 figures); it returns :class:`InspectorLog`, one row per operation
per rank, which ``moeprof.insight.inspector`` measures (bus bandwidth per kind and size, the rank the
others wait for).

Read by msgspec into Structs typed as the plugin writes each field, a chunk of lines at a time, straight
to columns (the typed route, ``_read_typed``); a file with any line that does not fit is read by Arrow's
JSON reader instead (``_read_arrow``: the same rows for what it accepts), and a file Arrow refuses is read
again line by line only to name the first bad line. Errors found after Arrow's read name the record (the
N-th JSON object; blank lines are not counted).
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from operator import attrgetter, eq, is_not
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..errors import InputError

FORMAT = "nccl-inspector"
SUFFIXES = (".log", ".log.gz", ".jsonl", ".jsonl.gz")
_SNIFF_BYTES = 1 << 16  # a record is well under 1 KiB; a first line longer than this is something else

# Inspector's `coll` / `p2p` names -> spec §3 kinds (NCCL's ncclFunc names as inspector_json.cc prints them)
KINDS = {
    "allreduce": "all-reduce",
    "allgather": "all-gather",
    "allgatherv": "all-gather",
    "reducescatter": "reduce-scatter",
    "broadcast": "broadcast",
    "all2all": "all-to-all",
    "alltoall": "all-to-all",
    "alltoallv": "all-to-all",
    "send": "send-recv",
    "recv": "send-recv",
    "sendrecv": "send-recv",
}

# the columns of one operation row, in order
COLUMNS = (
    "file", "host", "pid", "comm", "comm_name", "rank", "n_ranks", "nnodes", "op", "kind", "seq", "peer",
    "bytes", "exec_us", "timing_source", "algbw_gbs", "busbw_gbs", "algo", "proto", "dump_timestamp_us",
)  # fmt: skip

# record part -> (its op name key, its key prefix); coll_perf holds coll_*, p2p_perf p2p_*
_PARTS = {"coll_perf": ("coll", "coll"), "p2p_perf": ("p2p", "p2p")}
_LIMIT = float(2**62)  # a count, size or time past this is no real one (and int64 sums would overflow)


@dataclass(frozen=True)
class InspectorLog:
    """The operations of one Inspector log: one row per collective or P2P call (:data:`COLUMNS`)."""

    path: str
    columns: dict[str, Any]  # COLUMNS -> numpy array / pandas Categorical / IntegerArray, in that order
    version: str  # inspector_output_format_version of the first record ("" if none said)
    warnings: tuple[str, ...] = ()
    format: str = FORMAT

    @cached_property
    def rows(self) -> pd.DataFrame:
        """The columns as a table (built on first use: the pipeline joins the files' columns without it)."""
        return pd.DataFrame(self.columns)


def _first_line(path: Path) -> bytes | None:
    try:
        with path.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        opener: Any = gzip.open if gz else open
        with opener(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return None
    line, newline, _ = head.partition(b"\n")
    if not newline and len(head) >= _SNIFF_BYTES:
        return None
    return line


def is_inspector_record(obj: object) -> bool:
    """Whether a parsed JSON value is an Inspector record: ``header`` + ``metadata`` and an operation or
    a dump marker (v4.3 ``dump_stats``)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("header"), dict):
        return False
    meta = obj.get("metadata")
    has_part = any(k in obj for k in ("coll_perf", "p2p_perf", "dump_stats", "proxy_trace"))
    return isinstance(meta, dict) and has_part and "id" in obj["header"]


def is_inspector_log(path: Path) -> bool:
    """Whether a file's first line is an Inspector record (cheap: at most 64 KiB read)."""
    line = _first_line(path)
    if not line or not line.lstrip().startswith(b"{") or b'"header"' not in line:
        return False
    try:
        return is_inspector_record(json.loads(line))
    except (ValueError, UnicodeDecodeError, RecursionError):  # a hostile first line is no Inspector record
        return False


def read(path: Path) -> InspectorLog:
    """Read one Inspector log into operation rows; an InputError naming the file (and line) if it is not one.

    Lines as the plugin writes them take the typed route (:func:`_read_typed`); anything it does not take
    (a wrong type, a missing field, a cut line, no Inspector record at all) is read again by Arrow's JSON
    reader (:func:`_read_arrow`), which gives the same rows for what it accepts and names what it refuses.
    """
    gz = _is_gzip(path)
    data = _read_bytes(path, gz)
    typed = _read_typed(path, data)
    if typed is not None:
        return typed
    del data
    return _read_arrow(path, gz)


def _read_bytes(path: Path, gz: bool) -> bytes:
    try:
        if gz:
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"cannot read: {exc}") from None


def _read_arrow(path: Path, gz: bool) -> InspectorLog:
    """Arrow's JSON reader into columns: the reference route, and the one that names a bad line."""
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        stream = pa.input_stream(str(path), compression="gzip" if gz else None)
        table = pj.read_json(
            stream,
            read_options=pj.ReadOptions(block_size=1 << 24),
            parse_options=pj.ParseOptions(newlines_in_values=False, unexpected_field_behavior="infer"),
        )
    except pa.ArrowInvalid:
        problem = _first_bad_line(path, gz)
        raise InputError(path, problem) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    return _rows(path, table)


# ---- the typed route: msgspec decodes only the fields read, into Structs, a chunk of lines at a time -----
#
# Why not Arrow's JSON reader first: on one core it parses slower than this route (benchmarks/
# bench_inspector.py, docs/performance.md). A record's header and metadata repeat on every line of a dump,
# so they are kept as raw text and decoded once per distinct text; only the operation is decoded per line.
# Every type is the one the plugin writes (inspector_json.cc); a line that does not fit sends the whole file
# to Arrow's route, which accepts what it can with the same rows and names what it refuses.

_TYPED_CHUNK = 1 << 22  # bytes of lines decoded at once: their Structs become columns before the next chunk
_DTYPES = {"int": np.int64, "float": np.float64}


class _Header(msgspec.Struct, frozen=True, gc=False):
    id: str | None = None
    comm_name: str | None = None
    rank: int | None = None
    n_ranks: int | None = None
    nnodes: int | None = None


class _Metadata(msgspec.Struct, frozen=True, gc=False):
    inspector_output_format_version: str | None = None
    git_rev: str | None = None
    rec_mechanism: str | None = None
    dump_timestamp_us: int | None = None
    hostname: str | None = None
    pid: int | None = None


class _CollPerf(msgspec.Struct, frozen=True, gc=False):
    coll: str
    coll_sn: int
    coll_msg_size_bytes: int
    coll_exec_time_us: float
    coll_timing_source: str | None = None
    coll_algobw_gbs: float | None = None
    coll_busbw_gbs: float | None = None
    coll_algo: str | None = None
    coll_proto: str | None = None
    p2p_peer: int | None = None


class _P2pPerf(msgspec.Struct, frozen=True, gc=False):
    p2p: str
    p2p_sn: int
    p2p_msg_size_bytes: int
    p2p_exec_time_us: float
    p2p_peer: int | None = None
    p2p_timing_source: str | None = None
    p2p_algobw_gbs: float | None = None
    p2p_busbw_gbs: float | None = None
    p2p_algo: str | None = None
    p2p_proto: str | None = None


_NO_RAW = msgspec.Raw()


class _Line(msgspec.Struct, frozen=True, gc=False):
    header: msgspec.Raw = _NO_RAW
    metadata: msgspec.Raw = _NO_RAW
    coll_perf: _CollPerf | None = None
    p2p_perf: _P2pPerf | None = None
    dump_stats: dict[str, Any] | None = None


_LINES = msgspec.json.Decoder(_Line)
_HEADER = msgspec.json.Decoder(_Header | None)
_METADATA = msgspec.json.Decoder(_Metadata | None)

# part -> (Struct attribute per output column, kind as in _operation_fields)
_TYPED_FIELDS = {
    "coll_perf": (
        ("op", "coll", "str"), ("seq", "coll_sn", "int"), ("peer", "p2p_peer", "opt-int"),
        ("bytes", "coll_msg_size_bytes", "int"), ("exec_us", "coll_exec_time_us", "float"),
        ("timing_source", "coll_timing_source", "str"), ("algbw_gbs", "coll_algobw_gbs", "opt-float"),
        ("busbw_gbs", "coll_busbw_gbs", "opt-float"), ("algo", "coll_algo", "str"), ("proto", "coll_proto", "str"),
    ),
    "p2p_perf": (
        ("op", "p2p", "str"), ("seq", "p2p_sn", "int"), ("peer", "p2p_peer", "opt-int"),
        ("bytes", "p2p_msg_size_bytes", "int"), ("exec_us", "p2p_exec_time_us", "float"),
        ("timing_source", "p2p_timing_source", "str"), ("algbw_gbs", "p2p_algobw_gbs", "opt-float"),
        ("busbw_gbs", "p2p_busbw_gbs", "opt-float"), ("algo", "p2p_algo", "str"), ("proto", "p2p_proto", "str"),
    ),
}  # fmt: skip


class _NotTyped(Exception):
    """The typed route does not take this file (Arrow's route reads it, or names what is wrong)."""


def _chunks(data: bytes) -> list[memoryview]:
    view = memoryview(data)
    out = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", min(start + _TYPED_CHUNK, len(data)))
        end = len(data) if end < 0 else end + 1
        out.append(view[start:end])
        start = end
    return out


def _numbers(values: list[Any] | np.ndarray, kind: str) -> Any:
    """A column of one Struct field: int64 / float64 (NaN for a missing optional one); raises _NotTyped for a
    number past what the rows hold (a missing required one raises TypeError: Arrow's route names it)."""
    if kind == "int":
        ints = np.asarray(values, dtype=np.int64)  # None: TypeError; past int64: OverflowError
        if len(ints) and (ints.max() >= _LIMIT or ints.min() <= -_LIMIT):
            raise _NotTyped
        return ints
    arr = np.asarray(values, dtype=np.float64)  # None -> NaN
    valid = ~np.isnan(arr)
    if (np.abs(arr[valid]) >= _LIMIT).any():
        raise _NotTyped
    if kind != "opt-int":
        return arr
    return pd.arrays.IntegerArray(np.where(valid, arr, 0).astype(np.int64), ~valid)


def _strings(values: Any) -> pd.Categorical:
    """Strings (None: missing) as a categorical in order of first appearance, as Arrow's dictionary gives."""
    if isinstance(values, list) and values.count(None) == len(values):
        return pd.Categorical([None] * len(values))  # a field this version does not write
    codes, uniques = pd.factorize(np.asarray(values, dtype=object))
    if not len(uniques):
        return pd.Categorical([None] * len(codes))  # as Arrow's route makes an all-null column
    return pd.Categorical.from_codes(codes, pd.Index(uniques))


def _first_appearance(codes: np.ndarray, uniques: np.ndarray) -> pd.Categorical:
    """Codes (-1: missing) into values as a categorical whose categories come in order of first appearance."""
    seen = pd.unique(codes[codes >= 0])
    if not len(seen):
        return pd.Categorical([None] * len(codes))
    remap = np.full(len(uniques), -1, np.int64)
    remap[seen] = np.arange(len(seen))
    return pd.Categorical.from_codes(np.where(codes >= 0, remap[codes], -1), pd.Index(uniques[seen]))


def _read_typed(path: Path, data: bytes) -> InspectorLog | None:
    """The rows of a log every line of which is as the plugin writes it; None where any is not."""
    try:
        return _typed_rows(path, data)
    except (_NotTyped, msgspec.DecodeError, OverflowError, ValueError, TypeError):
        return None


_GET_HEADER = attrgetter("header")
_GET_METADATA = attrgetter("metadata")
_GET_STATS = attrgetter("dump_stats")


def _distinct_texts(raws: list[msgspec.Raw], index: dict[bytes, int]) -> np.ndarray:
    """Each line's header (or metadata) as the index of its distinct text in ``index`` (-1: none). The lines of
    a dump repeat one text, so only where it changes from the line before is it copied and looked up."""
    m = len(raws)
    starts = np.flatnonzero(np.concatenate([[True], ~np.fromiter(map(eq, raws[1:], raws[:-1]), bool, m - 1)]))
    codes = np.array(
        [-1 if (t := bytes(raws[i])) in (b"", b"null") else index.setdefault(t, len(index)) for i in starts],
        dtype=np.int64,
    )
    return np.repeat(codes, np.diff(np.append(starts, m)))


def _typed_rows(path: Path, data: bytes) -> InspectorLog:
    raw_index: tuple[dict[bytes, int], dict[bytes, int]] = ({}, {})  # header / metadata text -> distinct index
    line_ctx: list[np.ndarray] = []  # per line: (header index, metadata index), -1 where none
    line_stats: list[np.ndarray] = []
    values: dict[str, dict[str, list[Any]]] = {part: {} for part in _TYPED_FIELDS}
    op_lines: dict[str, list[np.ndarray]] = {part: [] for part in _TYPED_FIELDS}
    n = 0
    for chunk in _chunks(data):
        recs = _LINES.decode_lines(chunk)
        m = len(recs)
        if not m:  # blank lines only
            continue
        head = _distinct_texts(list(map(_GET_HEADER, recs)), raw_index[0])
        line_ctx.append(np.stack([head, _distinct_texts(list(map(_GET_METADATA, recs)), raw_index[1])]))
        if (head < 0).any():  # a line without header: whether it is a dump_stats marker (v4.3) matters
            line_stats.append(np.fromiter(map(is_not, map(_GET_STATS, recs), repeat(None)), bool, m))
        else:
            line_stats.append(np.zeros(m, bool))
        for part, fields in _TYPED_FIELDS.items():
            perfs = list(map(attrgetter(part), recs))
            if perfs.count(None) == m:
                continue
            present = np.fromiter(map(is_not, perfs, repeat(None)), bool, m)
            perfs = list(filter(None, perfs))  # a Struct is truthy
            op_lines[part].append(np.flatnonzero(present) + n)
            part_values = values[part]
            for _out, attr, kind in fields:
                got = map(attrgetter(attr), perfs)
                if kind in ("int", "float"):  # required: a None is a TypeError (Arrow's route names it)
                    part_values.setdefault(attr, []).append(np.fromiter(got, _DTYPES[kind], len(perfs)))
                else:
                    part_values.setdefault(attr, []).extend(got)
        n += m
    if n == 0:
        raise _NotTyped
    ctx = np.concatenate(line_ctx, axis=1)
    stats = np.concatenate(line_stats)
    headers = [_HEADER.decode(t) for t in raw_index[0]]
    metas = [_METADATA.decode(t) for t in raw_index[1]]
    if not headers or not metas:
        raise _NotTyped
    head_of = ctx[0]
    has_id = np.array([h is not None and h.id is not None for h in headers] + [False])  # -1: the last, False
    has_ctx = has_id[head_of]
    if not has_ctx[0]:
        raise _NotTyped
    context_line = np.arange(n)
    if not has_ctx.all():
        last = np.maximum.accumulate(np.where(has_ctx, np.arange(n), 0))
        if (~has_ctx & ~stats[last]).any():
            raise _NotTyped
        context_line = last
    frames = []
    version = ""
    for part, fields in _TYPED_FIELDS.items():
        if not op_lines[part]:
            continue
        idx = np.concatenate(op_lines[part])
        at = context_line[idx]
        cols: dict[str, Any] = {}
        cols.update(_typed_context(headers, metas, ctx[0][at], ctx[1][at]))
        for out, attr, kind in fields:
            field = values[part][attr]
            if kind == "str":
                cols[out] = _strings(field)
            else:
                cols[out] = _numbers(np.concatenate(field) if kind in _DTYPES else field, kind)
        said = pd.Series(cols["version"]).dropna()
        version = version or (str(said.iloc[0]) if len(said) else "")
        frames.append(cols)
    if not frames:
        raise _NotTyped
    return _finish(path, frames, version)


def _typed_context(headers: list[Any], metas: list[Any], head_at: np.ndarray, meta_at: np.ndarray) -> dict[str, Any]:
    """The context columns of the operation rows from their line's distinct header and metadata."""
    out: dict[str, Any] = {}
    none_h = _Header()
    none_m = _Metadata()
    hs = [h or none_h for h in headers] + [none_h]  # index -1: no header
    ms = [m or none_m for m in metas] + [none_m]
    for col, attr, kind, table, at in (
        ("comm", "id", "str", hs, head_at), ("comm_name", "comm_name", "str", hs, head_at),
        ("rank", "rank", "int", hs, head_at), ("n_ranks", "n_ranks", "int", hs, head_at),
        ("nnodes", "nnodes", "opt-int", hs, head_at), ("host", "hostname", "str", ms, meta_at),
        ("pid", "pid", "opt-int", ms, meta_at), ("dump_timestamp_us", "dump_timestamp_us", "opt-int", ms, meta_at),
        ("version", "inspector_output_format_version", "str", ms, meta_at),
    ):  # fmt: skip
        distinct = [getattr(t, attr) for t in table]  # one per distinct header / metadata text
        if kind == "str":
            codes, uniques = pd.factorize(np.asarray(distinct, dtype=object))
            out[col] = _first_appearance(codes[at], np.asarray(uniques, dtype=object))
            continue
        if kind == "int" and any(distinct[i] is None for i in np.unique(at)):
            raise _NotTyped  # a required number missing: Arrow's route names the record
        if kind == "int":
            distinct = [0 if v is None else v for v in distinct]  # texts no operation line takes
        out[col] = _numbers(distinct, kind)[at]
    return out


def _is_gzip(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def _struct_present(table: Any, name: str, n: int) -> np.ndarray:
    """Which lines carry the object ``name`` (not null)."""
    if name not in table.column_names:
        return np.zeros(n, dtype=bool)
    return table.column(name).is_valid().to_numpy(zero_copy_only=False)


# output column -> (source field, what it is, kind): kind "str" (category), "int", "float", "opt-int"
_CONTEXT = {
    "comm": ("header.id", "header.id", "str"),
    "comm_name": ("header.comm_name", "header.comm_name", "str"),
    "rank": ("header.rank", "header.rank", "int"),
    "n_ranks": ("header.n_ranks", "header.n_ranks", "int"),
    "nnodes": ("header.nnodes", "header.nnodes", "opt-int"),
    "host": ("metadata.hostname", "metadata.hostname", "str"),
    "pid": ("metadata.pid", "metadata.pid", "opt-int"),
    "dump_timestamp_us": ("metadata.dump_timestamp_us", "metadata.dump_timestamp_us", "opt-int"),
    "version": ("metadata.inspector_output_format_version", "the format version", "str"),
}


def _operation_fields(part: str, op_key: str, prefix: str) -> dict[str, tuple[str, str, str]]:
    return {
        "op": (f"{part}.{op_key}", f"{part}.{op_key}", "str"),
        "seq": (f"{part}.{prefix}_sn", f"the sequence number ({prefix}_sn)", "int"),
        "peer": (f"{part}.p2p_peer", "p2p_peer", "opt-int"),
        "bytes": (f"{part}.{prefix}_msg_size_bytes", "the message size", "int"),
        "exec_us": (f"{part}.{prefix}_exec_time_us", "the execution time", "float"),
        "timing_source": (f"{part}.{prefix}_timing_source", "the timing source", "str"),
        "algbw_gbs": (f"{part}.{prefix}_algobw_gbs", "algbw", "opt-float"),
        "busbw_gbs": (f"{part}.{prefix}_busbw_gbs", "busbw", "opt-float"),
        "algo": (f"{part}.{prefix}_algo", "the algorithm", "str"),
        "proto": (f"{part}.{prefix}_proto", "the protocol", "str"),
    }


def _convert(path: Path, arr: Any, what: str, kind: str, lines: np.ndarray) -> Any:
    """One Arrow column of the operation rows as the row table holds it; an InputError naming the record
    where a number is missing, is no number, or is past what int64 holds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if kind == "str":
        if pa.types.is_null(arr.type):
            return pd.Categorical([None] * len(arr))
        if not pa.types.is_string(arr.type):
            bad = np.flatnonzero(arr.is_valid().to_numpy(zero_copy_only=False))
            raise InputError(path, f"record {int(lines[bad[0]]) if len(bad) else 1}: {what} is not a string")
        return arr.dictionary_encode().to_pandas()
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    optional = kind.startswith("opt-")
    if not optional and not valid.all():
        raise InputError(path, f"record {int(lines[np.flatnonzero(~valid)[0]])}: {what} is missing")
    if pa.types.is_null(arr.type):
        values = np.zeros(len(arr), np.float64)
    elif pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
        # unsafe: an integer past 2^53 becomes the nearest double (Arrow refuses it otherwise), which the range
        # check below names: a value that large is out of range for every field
        values = pc.fill_null(arr.cast(pa.float64(), safe=False), 0.0).to_numpy(zero_copy_only=False)
    else:
        first = np.flatnonzero(valid)
        raise InputError(path, f"record {int(lines[first[0]]) if len(first) else 1}: {what} is not a number")
    wild = valid & (~np.isfinite(values) | (np.abs(values) >= _LIMIT))
    if wild.any():
        at = np.flatnonzero(wild)[0]
        raise InputError(path, f"record {int(lines[at])}: {what} = {float(values[at]):g} is out of range")
    if kind == "float":
        return values
    if kind == "opt-float":
        return np.where(valid, values, np.nan)
    ints = values.astype(np.int64)
    if kind == "int":
        return ints
    return pd.arrays.IntegerArray(ints, ~valid)


def _rows(path: Path, table: Any) -> InspectorLog:
    import pyarrow as pa

    n = table.num_rows
    if n == 0:
        raise InputError(path, "empty file")
    for part in ("header", "metadata"):
        if part not in table.column_names or not pa.types.is_struct(table.schema.field(part).type):
            raise InputError(path, "not an NCCL Inspector log (no JSON lines with 'header' and 'metadata' objects)")
    flat = table.flatten()
    names = set(flat.column_names)

    def column(name: str) -> Any:
        return flat.column(name).combine_chunks() if name in names else pa.nulls(n)

    has_ctx = column("header.id").is_valid().to_numpy(zero_copy_only=False)
    if not has_ctx[0]:
        raise InputError(path, "record 1: no 'header' (not the start of an Inspector dump)")
    context_rows = None
    if not has_ctx.all():
        # only a v4.3 dump_stats line gives its header to the lines after it; a v4.0 line stands alone
        stats = _struct_present(table, "dump_stats", n)
        last = np.maximum.accumulate(np.where(has_ctx, np.arange(n), 0))
        orphan = ~has_ctx & ~stats[last]
        if orphan.any():
            line = int(np.flatnonzero(orphan)[0]) + 1
            raise InputError(path, f"record {line}: no 'header', and it follows no dump_stats record")
        context_rows = last  # the whole context of its dump_stats line, nothing mixed
    parts = []
    version = ""
    for part, (op_key, prefix) in _PARTS.items():
        if part in table.column_names and not pa.types.is_struct(table.schema.field(part).type):
            raise InputError(path, f"'{part}' is not a JSON object")
        ops = column(f"{part}.{op_key}")
        present = ops.is_valid().to_numpy(zero_copy_only=False)
        nameless = _struct_present(table, part, n) & ~present
        if nameless.any():
            line = int(np.flatnonzero(nameless)[0]) + 1
            raise InputError(path, f"record {line}: a {part} without '{op_key}' (which operation?)")
        if not present.any():
            continue
        idx = np.flatnonzero(present)
        lines = idx + 1
        ctx_idx = pa.array(idx if context_rows is None else context_rows[idx])
        own_idx = pa.array(idx)
        cols: dict[str, Any] = {}
        for out, (src, what, kind) in _CONTEXT.items():
            cols[out] = _convert(path, column(src).take(ctx_idx), what, kind, lines)
        for out, (src, what, kind) in _operation_fields(part, op_key, prefix).items():
            cols[out] = _convert(path, column(src).take(own_idx), what, kind, lines)
        said = pd.Series(cols["version"]).dropna()
        version = version or (str(said.iloc[0]) if len(said) else "")
        parts.append(cols)
    if not parts:
        raise InputError(path, "no collective or P2P records (only dump markers): nothing to measure")
    return _finish(path, parts, version)


def _finish(path: Path, parts: list[dict[str, Any]], version: str) -> InspectorLog:
    """The operation rows from each part's columns (either route): the process, the kind, the column order;
    the table built once from its final columns."""
    cols = {name: _joined([_array(p[name]) for p in parts]) for name in parts[0]}
    n = len(cols["exec_us"])
    pid = cols["pid"]
    cols["pid"] = np.where(pid.isna(), -1, pid.to_numpy(dtype=np.int64, na_value=0))
    nnodes = cols["nnodes"]
    cols["nnodes"] = np.where(nnodes.isna(), 0, nnodes.to_numpy(dtype=np.int64, na_value=0))
    host = cols["host"]
    if host.isna().any():  # a process is host:pid; a record that names no host still belongs to one
        cols["host"] = host.add_categories(["unknown-host"]).fillna("unknown-host")
    cols["file"] = pd.Categorical.from_codes(np.zeros(n, np.int8), pd.Index([str(path)]))
    cols["kind"] = _kinds(cols["op"])
    warnings: list[str] = []
    bad = (cols["exec_us"] < 0) | (cols["bytes"] < 0)
    if bad.any():
        warnings.append(f"{path}: dropped {int(bad.sum()):,} records with a negative time or size")
        cols = {name: value[~bad] for name, value in cols.items()}
    return InspectorLog(str(path), {name: cols[name] for name in COLUMNS}, version, tuple(warnings))


def _array(values: Any) -> Any:
    """A column as an array (Arrow's route gives a text column as a Series)."""
    return values.array if isinstance(values, pd.Series) else values


def _joined(values: list[Any]) -> Any:
    """One column from the parts' (collectives', P2P's): categoricals joined by code, in order of appearance."""
    if len(values) == 1:
        return values[0]
    if isinstance(values[0], pd.Categorical):
        from pandas.api.types import union_categoricals

        said = [v for v in values if len(v.categories)]
        if not said:
            return pd.Categorical([None] * sum(len(v) for v in values))
        none = said[0].categories[:0]
        values = [v if len(v.categories) else pd.Categorical.from_codes(v.codes, none) for v in values]
        return union_categoricals(values)
    if isinstance(values[0], pd.arrays.IntegerArray):
        return pd.array(np.concatenate([v.to_numpy(dtype=np.float64, na_value=np.nan) for v in values]), "Int64")
    return np.concatenate(values)


def _kinds(ops: pd.Categorical) -> pd.Categorical:
    """The §3 kind of each operation, each distinct name mapped once."""
    kinds = np.asarray([KINDS.get(str(c).lower().replace("_", ""), "other") for c in ops.categories], dtype=object)
    if not len(kinds):
        return pd.Categorical([None] * len(ops))
    names, codes = np.unique(kinds, return_inverse=True)  # sorted, as pd.Categorical of the kinds would be
    return pd.Categorical.from_codes(np.where(ops.codes >= 0, codes[ops.codes], -1), pd.Index(names))


def _first_bad_line(path: Path, gz: bool) -> str:
    """What Arrow refused, said by line: a line that is no JSON object, or a field whose type changes."""
    opener: Any = gzip.open if gz else open
    seen: dict[str, type] = {}
    try:
        with opener(path, "rb") as fh:
            for number, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except ValueError as exc:
                    cut = "" if raw.endswith(b"\n") else " (truncated: the file ends inside it)"
                    return f"line {number}: not a complete JSON object{cut}: {exc}"
                if not isinstance(obj, dict):
                    return f"line {number}: a JSON {type(obj).__name__}, not an object"
                for key, value in _leaves(obj):
                    kind = float if isinstance(value, int | float) and not isinstance(value, bool) else type(value)
                    if value is not None and seen.setdefault(key, kind) is not kind:
                        return f"line {number}: {key} is a {_word(kind)}, earlier lines have a {_word(seen[key])}"
    except (OSError, EOFError, zlib.error) as exc:
        return f"cannot read: {exc}"
    return "not JSON lines Arrow can read as one table"


def _leaves(obj: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.append((name, value))
            out.extend(_leaves(value, name + "."))
        else:
            out.append((name, value))
    return out


def _word(kind: type) -> str:
    return {float: "number", str: "string", dict: "object", list: "list", bool: "true/false"}.get(kind, kind.__name__)
