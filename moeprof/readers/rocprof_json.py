"""rocprofv3 JSON output (``rocprofv3 --output-format json``): ``{"rocprofiler-sdk-tool": [ ... ]}``.

One document per process (``<pid>_results.json``), written by rocprofiler-sdk
``source/lib/output/generateJSON.cpp`` through the cereal serializers of
``source/include/rocprofiler-sdk/cxx/serialization/save.hpp``. Read here (docs/metrics.md, "rocprofv3"):

- ``agents[]``: ``id.handle`` (the opaque id records carry), ``type`` (2 GPU), ``logical_node_id``,
  ``logical_node_type_id`` (index among GPUs), ``product_name``.
- ``kernel_symbols[]``: ``kernel_id`` -> ``formatted_kernel_name`` (else ``kernel_name``).
- ``strings.buffer_records[]``: kind enum -> ``{kind, operations[]}``: the enum values move between
  versions, so kinds and operations are resolved by name.
- ``buffer_records.kernel_dispatch[]``: ``start_timestamp``, ``end_timestamp`` (ns, CLOCK_BOOTTIME),
  ``dispatch_info{agent_id.handle, kernel_id, queue_id.handle}``, ``stream_id.handle``,
  ``correlation_id.internal``.
- ``buffer_records.memory_copy[]``: ``operation`` (direction), ``src_agent_id``, ``dst_agent_id``,
  ``bytes``, start/end, ``stream_id``.
- ``buffer_records.rccl_api[]`` and ``hip_api[]``: ``operation`` (the API function), ``thread_id``,
  ``correlation_id{internal, ancestor}``, start/end. A kernel's ``internal`` id is its launching call's
  (the RCCL call's itself when HIP is not traced); a HIP launch inside an RCCL call has that call as
  ``ancestor`` (``fwd.h``, ``rocprofiler_correlation_id_t``). A launch inside ``ncclGroupEnd`` takes
  the last collective call of its thread's group.
- ``buffer_records.marker_api[]`` (``--marker-trace``): one record per ROCTx range (a push/pop or start/stop
  pair: ``start_timestamp`` at the push, ``end_timestamp`` at the pop) or mark, its text in
  ``strings.marker_api[] = {key: correlation_id.internal, value: message}`` (rocprofiler-sdk
  ``source/lib/rocprofiler-sdk-tool/tool.cpp``, ``callback_tracing_callback``; ``generateJSON.cpp``). Ranges
  named like steps are step markers, as in the CSV and rocpd outputs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.events import categorical
from ..core.trace import Trace
from ..errors import InputError
from .base import ReadContext
from .rocprof import Agents, build_trace, copy_kinds, with_roctx_steps
from .rocprof_names import host_name

_GROUP = re.compile(r"^(nccl|rccl)Group(Start|End)$")


def _records(doc: dict, key: str, path: Path) -> list[dict]:
    records = doc.get("buffer_records", {})
    if not isinstance(records, dict):
        raise InputError(path, "rocprofv3 JSON: buffer_records is not an object")
    value = records.get(key, [])
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        raise InputError(path, f"rocprofv3 JSON: buffer_records.{key} is not a list of records")
    return value


def _int(record: dict, *keys: str, path: Path, what: str) -> int:
    value: Any = record
    for k in keys:
        value = value.get(k) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(path, f"rocprofv3 JSON: {what} {'.'.join(keys)} is {str(value)[:40]!r}, not an integer")
    return value


def _operations(doc: dict, path: Path) -> dict[int, tuple[str, list[str]]]:
    """Kind enum -> (kind name, operation names), from ``strings.buffer_records``."""
    strings = doc.get("strings", {})
    table = strings.get("buffer_records", []) if isinstance(strings, dict) else []
    out: dict[int, tuple[str, list[str]]] = {}
    if not isinstance(table, list):
        raise InputError(path, "rocprofv3 JSON: strings.buffer_records is not a list")
    for i, entry in enumerate(table):
        if isinstance(entry, dict):
            ops = entry.get("operations", [])
            out[i] = (str(entry.get("kind", "")), [str(o) for o in ops] if isinstance(ops, list) else [])
    return out


def _op_name(ops: dict[int, tuple[str, list[str]]], record: dict) -> str:
    kind, op = record.get("kind"), record.get("operation")
    if not isinstance(kind, int) or not isinstance(op, int) or kind not in ops:
        return ""
    names = ops[kind][1]
    return names[op] if 0 <= op < len(names) else ""


def _agents(doc: dict, path: Path) -> tuple[Agents, dict[int, int]]:
    """The GPU agents (as the CSV route numbers them) and agent handle -> GPU index (-1: not a GPU)."""
    agents = doc.get("agents")
    if not isinstance(agents, list) or not agents:
        raise InputError(path, "rocprofv3 JSON without its agents list")
    rows = []
    for a in agents:
        if not isinstance(a, dict):
            raise InputError(path, "rocprofv3 JSON: an agent is not an object")
        handle = _int(a, "id", "handle", path=path, what="agent")
        logical = _int(a, "logical_node_id", path=path, what="agent")
        is_gpu = a.get("type") == 2 or str(a.get("type", "")).upper() == "GPU"
        rows.append((logical, handle, is_gpu, str(a.get("product_name") or a.get("name") or "")))
    rows.sort()
    by_logical: dict[int, int | None] = {}
    names: dict[int, str] = {}
    by_handle: dict[int, int] = {}
    k = 0
    for logical, handle, is_gpu, product in rows:
        if is_gpu:
            by_logical[logical], by_handle[handle] = k, k
            if product:
                names[k] = product
            k += 1
        else:
            by_logical[logical], by_handle[handle] = None, -1
    return Agents(by_logical, names, k, path.name), by_handle


def _gpu(handles: list[int], by_handle: dict[int, int], path: Path, what: str) -> np.ndarray:
    out = np.empty(len(handles), dtype=np.int64)
    for i, h in enumerate(handles):
        if h not in by_handle:
            raise InputError(path, f"rocprofv3 JSON: {what} agent handle {h} is not in the agents list")
        out[i] = by_handle[h]
    return out


def _collectives(doc: dict, ops: dict[int, tuple[str, list[str]]], path: Path) -> dict[int, str]:
    """Internal correlation id of a launch -> the RCCL collective it ran for (``ncclAllReduce``, ...)."""
    rccl = _records(doc, "rccl_api", path)
    if not rccl:
        return {}
    calls = sorted(
        (
            _int(r, "start_timestamp", path=path, what="rccl_api record"),
            r.get("thread_id"),
            _int(r, "correlation_id", "internal", path=path, what="rccl_api record"),
            _op_name(ops, r),
        )
        for r in rccl
    )
    by_id: dict[int, str] = {}
    last: dict[Any, str] = {}  # thread -> its last collective call (a group's launches come at ncclGroupEnd)
    for _, thread, internal, name in calls:
        if _GROUP.match(name):
            if name.endswith("End") and thread in last:
                by_id[internal] = last[thread]
            continue
        by_id[internal] = name
        last[thread] = name
    out = dict(by_id)  # a kernel launched by the RCCL call itself (HIP not traced) has the call's id
    for r in _records(doc, "hip_api", path):
        corr = r.get("correlation_id")
        if isinstance(corr, dict) and corr.get("ancestor") in by_id and isinstance(corr.get("internal"), int):
            out[corr["internal"]] = by_id[corr["ancestor"]]
    return out


def read(path: Path, context: ReadContext | None = None) -> Trace:
    from .chrome import loads, read_bytes

    context = context or ReadContext()
    path = Path(path)
    doc = loads(read_bytes(path), path)
    tool = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if not isinstance(tool, list) or not tool or not all(isinstance(t, dict) for t in tool):
        raise InputError(path, "rocprofv3 JSON without a rocprofiler-sdk-tool list of process records")
    if len(tool) > 1:
        raise InputError(path, f"rocprofv3 JSON with {len(tool)} process records; moeprof reads one per file")
    proc = tool[0]
    agents, by_handle = _agents(proc, path)
    ops = _operations(proc, path)
    symbols: dict[int, str] = {}
    for i, s in enumerate(proc.get("kernel_symbols") or []):
        if isinstance(s, dict):
            kid = s.get("kernel_id", i)
            symbols[kid if isinstance(kid, int) else i] = str(
                s.get("formatted_kernel_name") or s.get("kernel_name") or s.get("demangled_kernel_name") or ""
            )
    launches = _collectives(proc, ops, path)
    parts = []
    kernels = _records(proc, "kernel_dispatch", path)
    if kernels:
        what = "kernel_dispatch record"
        kid = [_int(r, "dispatch_info", "kernel_id", path=path, what=what) for r in kernels]
        missing = [k for k in kid if k not in symbols]
        if missing:
            raise InputError(path, f"rocprofv3 JSON: kernel_id {missing[0]} is not in kernel_symbols")
        corr = [r.get("correlation_id", {}).get("internal") if isinstance(r.get("correlation_id"), dict) else None
                for r in kernels]  # fmt: skip
        collective = [launches.get(c, "") if isinstance(c, int) else "" for c in corr]
        parts.append(
            {
                "gpu": _gpu(
                    [_int(r, "dispatch_info", "agent_id", "handle", path=path, what=what) for r in kernels],
                    by_handle,
                    path,
                    "kernel_dispatch",
                ),
                "name": categorical(np.array([symbols[k] for k in kid], dtype=object), len(kernels)),
                "start_ns": np.array([_int(r, "start_timestamp", path=path, what=what) for r in kernels], np.int64),
                "end_ns": np.array([_int(r, "end_timestamp", path=path, what=what) for r in kernels], np.int64),
                "stream": categorical(np.array([_stream(r) for r in kernels], dtype=object), len(kernels)),
                "activity": categorical("kernel", len(kernels)),
                "copy_kind": categorical("", len(kernels)),
                "collective": categorical(np.array(collective, dtype=object), len(kernels)),
                "bytes": np.full(len(kernels), np.nan),
            }
        )
    copies = _records(proc, "memory_copy", path)
    if copies:
        what = "memory_copy record"
        src = _gpu([_int(r, "src_agent_id", "handle", path=path, what=what) for r in copies], by_handle, path, "src")
        dst = _gpu([_int(r, "dst_agent_id", "handle", path=path, what=what) for r in copies], by_handle, path, "dst")
        direction = np.array([_op_name(ops, r) for r in copies], dtype=object)
        kind = copy_kinds(direction, src, dst)
        if (kind == "").any():
            said = direction[np.flatnonzero(kind == "")[0]]
            raise InputError(path, f"rocprofv3 JSON: memory copy operation {str(said)[:40]!r} is no direction")
        nbytes = np.array([r.get("bytes") if isinstance(r.get("bytes"), int) else np.nan for r in copies], np.float64)
        parts.append(
            {
                "gpu": np.where(kind == "HtoD", dst, np.where(src >= 0, src, dst)),
                "name": categorical(np.char.add("Memcpy ", kind.astype(str)).astype(object), len(copies)),
                "start_ns": np.array([_int(r, "start_timestamp", path=path, what=what) for r in copies], np.int64),
                "end_ns": np.array([_int(r, "end_timestamp", path=path, what=what) for r in copies], np.int64),
                "stream": categorical(np.array([_stream(r) for r in copies], dtype=object), len(copies)),
                "activity": categorical("memcpy", len(copies)),
                "copy_kind": categorical(kind, len(copies)),
                "collective": categorical("", len(copies)),
                "bytes": nbytes,
            }
        )
    meta = proc.get("metadata")
    node = meta.get("node") if isinstance(meta, dict) else None
    hostname = node.get("hostname") if isinstance(node, dict) else None
    host = str(hostname or host_name(path))
    trace = build_trace(parts, agents, host, path, context, "rocprof-json", [])
    marks = _marker_ranges(proc, ops, path)
    return with_roctx_steps(trace, marks, context) if len(marks) else trace


def _marker_ranges(doc: dict, ops: dict[int, tuple[str, list[str]]], path: Path) -> pd.DataFrame:
    """The ROCTx records: category (their kind's name), text (the message of their correlation id, else the
    operation's name, as generateCSV.cpp writes ``Function``), start, end."""
    records = _records(doc, "marker_api", path)
    strings = doc.get("strings", {})
    table = strings.get("marker_api", []) if isinstance(strings, dict) else []
    if not isinstance(table, list):
        raise InputError(path, "rocprofv3 JSON: strings.marker_api is not a list")
    messages: dict[int, str] = {}
    for entry in table:
        if isinstance(entry, dict) and isinstance(entry.get("key"), int) and entry.get("value") is not None:
            messages.setdefault(entry["key"], str(entry["value"]))
    what = "marker_api record"
    kinds, texts, starts, ends = [], [], [], []
    for r in records:
        kind = r.get("kind")
        kinds.append(ops[kind][0] if isinstance(kind, int) and kind in ops else "")
        corr = r.get("correlation_id")
        internal = corr.get("internal") if isinstance(corr, dict) else None
        text = messages.get(internal, "") if isinstance(internal, int) else ""
        texts.append(text or _op_name(ops, r))
        starts.append(_int(r, "start_timestamp", path=path, what=what))
        ends.append(_int(r, "end_timestamp", path=path, what=what))
    return pd.DataFrame(
        {
            "category": np.array(kinds, dtype=object),
            "text": np.array(texts, dtype=object),
            "start": np.array(starts, dtype=np.int64),
            "end": np.array(ends, dtype=np.int64),
        }
    )


def _stream(record: dict) -> str:
    sid = record.get("stream_id")
    handle = sid.get("handle") if isinstance(sid, dict) else None
    if isinstance(handle, int):
        return f"stream {handle}"
    q = record.get("dispatch_info", {}).get("queue_id") if isinstance(record.get("dispatch_info"), dict) else None
    return f"queue {q.get('handle')}" if isinstance(q, dict) else ""
