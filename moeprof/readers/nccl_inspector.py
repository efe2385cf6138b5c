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

Read by Arrow's JSON reader (C++, multi-threaded) into columns; a file Arrow refuses is read again
line by line only to name the first bad line. Errors found after Arrow's read name the record (the
N-th JSON object; blank lines are not counted).
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    rows: pd.DataFrame
    version: str  # inspector_output_format_version of the first record ("" if none said)
    warnings: tuple[str, ...] = ()
    format: str = FORMAT


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
    """Read one Inspector log into operation rows; an InputError naming the file (and line) if it is not one."""
    import pyarrow as pa
    import pyarrow.json as pj

    gz = _is_gzip(path)
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
        values = pc.fill_null(arr.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
    else:
        first = np.flatnonzero(valid)
        raise InputError(path, f"record {int(lines[first[0]]) if len(first) else 1}: {what} is not a number")
    wild = valid & (~np.isfinite(values) | (np.abs(values) >= _LIMIT))
    if wild.any():
        at = np.flatnonzero(wild)[0]
        raise InputError(path, f"record {int(lines[at])}: {what} = {values[at]!r} is out of range")
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
        frame = pd.DataFrame(cols)
        said = cols["version"].dropna()
        version = version or (str(said.iloc[0]) if len(said) else "")
        parts.append(frame)
    if not parts:
        raise InputError(path, "no collective or P2P records (only dump markers): nothing to measure")
    rows = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    rows["pid"] = rows["pid"].fillna(-1).astype(np.int64)
    if rows["host"].isna().any():  # a process is host:pid; a record that names no host still belongs to one
        rows["host"] = rows["host"].cat.add_categories(["unknown-host"]).fillna("unknown-host")
    rows["nnodes"] = rows["nnodes"].fillna(0).astype(np.int64)
    rows.insert(0, "file", pd.Series(pd.Categorical([str(path)]).take(np.zeros(len(rows), np.intp))))
    rows["kind"] = _kinds(rows["op"])
    rows = rows[list(COLUMNS)]
    warnings: list[str] = []
    bad = (rows["exec_us"].to_numpy() < 0) | (rows["bytes"].to_numpy() < 0)
    if bad.any():
        warnings.append(f"{path}: dropped {int(bad.sum()):,} records with a negative time or size")
        rows = rows.loc[~bad].reset_index(drop=True)
    return InspectorLog(str(path), rows, version, tuple(warnings))


def _kinds(ops: pd.Series) -> pd.Categorical:
    """The §3 kind of each operation, each distinct name mapped once."""
    names = ops.astype("category").cat
    kinds = np.asarray([KINDS.get(str(c).lower().replace("_", ""), "other") for c in names.categories], dtype=object)
    return pd.Categorical(kinds[names.codes]) if len(kinds) else pd.Categorical([None] * len(ops))


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
