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
    if not line or not line.lstrip().startswith(b"{"):
        return False
    try:
        return is_inspector_record(json.loads(line))
    except (ValueError, UnicodeDecodeError):
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


def _struct(table: Any, name: str) -> dict[str, Any] | None:
    """The fields of a struct column as {field: numpy/object array}, or None where the column is absent."""
    import pyarrow as pa

    if name not in table.column_names:
        return None
    col = table.column(name).combine_chunks()
    if not pa.types.is_struct(col.type):
        raise ValueError(f"'{name}' is not a JSON object")
    return {col.type.field(i).name: col.field(i) for i in range(col.type.num_fields)}


def _struct_present(table: Any, name: str, n: int) -> np.ndarray:
    """Which lines carry the object ``name`` (not null)."""
    if name not in table.column_names:
        return np.zeros(n, dtype=bool)
    return table.column(name).is_valid().to_numpy(zero_copy_only=False)


def _get(fields: dict[str, Any] | None, key: str, n: int) -> Any:
    """A field as a pandas Series (all null where absent)."""
    import pyarrow as pa

    if fields is None or key not in fields:
        return pd.Series([None] * n, dtype=object)
    arr = fields[key]
    if pa.types.is_null(arr.type):
        return pd.Series([None] * n, dtype=object)
    return arr.to_pandas()


def _rows(path: Path, table: Any) -> InspectorLog:
    n = table.num_rows
    if n == 0:
        raise InputError(path, "empty file")
    header = _struct(table, "header")
    meta = _struct(table, "metadata")
    if header is None or meta is None or "id" not in header:
        raise InputError(path, "not an NCCL Inspector log (no JSON lines with 'header' and 'metadata')")
    ctx = pd.DataFrame(
        {
            "comm": _get(header, "id", n),
            "comm_name": _get(header, "comm_name", n),
            "rank": _get(header, "rank", n),
            "n_ranks": _get(header, "n_ranks", n),
            "nnodes": _get(header, "nnodes", n),
            "host": _get(meta, "hostname", n),
            "pid": _get(meta, "pid", n),
            "version": _get(meta, "inspector_output_format_version", n),
            "dump_timestamp_us": _get(meta, "dump_timestamp_us", n),
        }
    )
    # v4.3: an operation line carries no header/metadata; it belongs to the dump_stats line before it
    has_ctx = ctx["comm"].notna().to_numpy()
    if not has_ctx[0]:
        raise InputError(path, "record 1: no 'header' (not the start of an Inspector dump)")
    if not has_ctx.all():
        # only a v4.3 dump_stats line gives its header to the lines after it; a v4.0 line stands alone
        stats = _struct_present(table, "dump_stats", n)
        last = np.maximum.accumulate(np.where(has_ctx, np.arange(n), 0))
        orphan = ~has_ctx & ~stats[last]
        if orphan.any():
            line = int(np.flatnonzero(orphan)[0]) + 1
            raise InputError(path, f"record {line}: no 'header', and it follows no dump_stats record")
        ctx = ctx.iloc[last].reset_index(drop=True)  # the whole context of its dump_stats line, nothing mixed
    warnings: list[str] = []
    parts = []
    for part, (op_key, prefix) in _PARTS.items():
        fields = _struct(table, part)
        if fields is None or op_key not in fields:
            continue
        ops = _get(fields, op_key, n)
        present = ops.notna().to_numpy()
        nameless = _struct_present(table, part, n) & ~present
        if nameless.any():
            line = int(np.flatnonzero(nameless)[0]) + 1
            raise InputError(path, f"record {line}: a {part} without '{op_key}' (which operation?)")
        if not present.any():
            continue
        rows = ctx.loc[present].copy()
        rows["op"] = ops[present].to_numpy()
        rows["seq"] = _get(fields, f"{prefix}_sn", n)[present].to_numpy()
        rows["peer"] = _get(fields, "p2p_peer", n)[present].to_numpy() if part == "p2p_perf" else None
        rows["bytes"] = _get(fields, f"{prefix}_msg_size_bytes", n)[present].to_numpy()
        rows["exec_us"] = _get(fields, f"{prefix}_exec_time_us", n)[present].to_numpy()
        rows["timing_source"] = _get(fields, f"{prefix}_timing_source", n)[present].to_numpy()
        rows["algbw_gbs"] = _get(fields, f"{prefix}_algobw_gbs", n)[present].to_numpy()
        rows["busbw_gbs"] = _get(fields, f"{prefix}_busbw_gbs", n)[present].to_numpy()
        rows["algo"] = _get(fields, f"{prefix}_algo", n)[present].to_numpy()
        rows["proto"] = _get(fields, f"{prefix}_proto", n)[present].to_numpy()
        rows["line"] = np.flatnonzero(present) + 1
        parts.append(rows)
    if not parts:
        if "coll_perf" in table.column_names or "p2p_perf" in table.column_names:
            raise InputError(path, "no operation record names its 'coll' or 'p2p' (a key is missing)")
        raise InputError(path, "no collective or P2P records (only dump markers): nothing to measure")
    rows = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
    _require(path, rows)
    version = str(ctx["version"].iloc[0]) if ctx["version"].notna().iloc[0] else ""
    out = pd.DataFrame(
        {
            "file": pd.Categorical([str(path)] * len(rows)),
            "host": rows["host"].astype("string").astype("category"),
            "pid": rows["pid"].to_numpy(np.int64),
            "comm": rows["comm"].astype(str).astype("category"),
            "comm_name": rows["comm_name"].astype("string").astype("category"),
            "rank": rows["rank"].to_numpy(np.int64),
            "n_ranks": rows["n_ranks"].to_numpy(np.int64),
            "nnodes": rows["nnodes"].to_numpy(np.int64),
            "op": rows["op"].astype(str).astype("category"),
            "kind": _kinds(rows["op"]),
            "seq": rows["seq"].to_numpy(np.int64),
            "peer": pd.array(rows["peer"], dtype="Int64"),
            "bytes": rows["bytes"].to_numpy(np.int64),
            "exec_us": rows["exec_us"].to_numpy(np.float64),
            "timing_source": rows["timing_source"].astype("string").astype("category"),
            "algbw_gbs": rows["algbw_gbs"].to_numpy(np.float64),
            "busbw_gbs": rows["busbw_gbs"].to_numpy(np.float64),
            "algo": rows["algo"].astype("string").astype("category"),
            "proto": rows["proto"].astype("string").astype("category"),
            "dump_timestamp_us": pd.array(rows["dump_timestamp_us"], dtype="Int64"),
        }
    )
    out = out.sort_values(["comm", "seq", "op"], kind="stable", ignore_index=True)
    bad = (out["exec_us"] < 0) | (out["bytes"] < 0)
    if bad.any():
        warnings.append(f"{path}: dropped {int(bad.sum()):,} records with a negative time or size")
        out = out.loc[~bad].reset_index(drop=True)
    return InspectorLog(str(path), out, version, tuple(warnings))


def _require(path: Path, rows: pd.DataFrame) -> None:
    """Every operation row has what the measures need, with numbers where numbers belong."""
    for col, what in (
        ("comm", "header.id"),
        ("rank", "header.rank"),
        ("n_ranks", "header.n_ranks"),
        ("seq", "the sequence number (coll_sn / p2p_sn)"),
        ("bytes", "the message size"),
        ("exec_us", "the execution time"),
    ):
        values = rows[col]
        missing = values.isna().to_numpy()
        if missing.any():
            line = int(rows["line"].to_numpy()[np.flatnonzero(missing)[0]])
            raise InputError(path, f"record {line}: {what} is missing")
        if col != "comm" and values.dtype == object:
            wrong = ~values.map(lambda v: isinstance(v, int | float) and not isinstance(v, bool)).to_numpy()
            if wrong.any():
                line = int(rows["line"].to_numpy()[np.flatnonzero(wrong)[0]])
                raise InputError(path, f"record {line}: {what} is not a number")
    for col in ("rank", "n_ranks", "seq", "bytes", "exec_us", "nnodes"):
        if rows[col].dtype == bool:
            raise InputError(path, f"{col}: not a number (true/false)")
        values = pd.to_numeric(rows[col], errors="coerce").to_numpy(np.float64)
        wild = ~np.isfinite(values) | (np.abs(values) >= _LIMIT)
        if col != "nnodes" and wild.any():  # no int64 holds it (NaN: a missing nnodes, filled below)
            line = int(rows["line"].to_numpy()[np.flatnonzero(wild)[0]])
            raise InputError(path, f"record {line}: {col} = {rows[col].to_numpy()[np.flatnonzero(wild)[0]]!r} is out of range")
    for col in ("pid", "nnodes"):
        if rows[col].isna().any():
            rows[col] = rows[col].fillna(-1 if col == "pid" else 0)


def _kinds(ops: pd.Series) -> pd.Categorical:
    names = pd.Categorical(ops.astype(str))
    mapped = [KINDS.get(str(c).lower().replace("_", ""), "other") for c in names.categories]
    return pd.Categorical.from_codes(names.codes, categories=mapped) if len(set(mapped)) == len(mapped) else (
        pd.Categorical(np.asarray(mapped, dtype=object)[names.codes])
    )


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
