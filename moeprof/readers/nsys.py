"""Nsight Systems: SQLite exports (``nsys export --type sqlite``), parquet folders
(``--type parquetdir``) and raw ``.nsys-rep`` reports (exported through ``nsys`` when on PATH).

Device activity comes from the CUPTI tables only: ``CUPTI_ACTIVITY_KIND_KERNEL``,
``..._MEMCPY`` and ``..._MEMSET``. Runtime calls and NVTX ranges are host-side:
they never become activity, they only describe it. Every table and column is
looked up before use, because exports differ between nsys versions (metadata in
``META_DATA_EXPORT`` or ``EXPORT_META_DATA``, ``greenContextId`` present or not,
lazily created tables missing altogether).

The CPU side of each activity is its launch: the ``CUPTI_ACTIVITY_KIND_RUNTIME``
call with the same ``correlationId`` *in the same process* (ids restart per
process). On the launching thread, the innermost NVTX range containing the launch
gives, per family of ranges:

- NCCL API ranges (``ncclAllReduce``, ``ncclGroupEnd``...): ``collective``; a kernel
  launched in ``ncclGroupEnd`` gets the collective of the calls grouped since the
  matching ``ncclGroupStart`` (sends and receives to many peers: ``all_to_all``);
  with exported NCCL payloads (``--include-blobs``/``--include-json``) also
  ``bytes`` and ``group``;
- framework ranges that name communication (``nccl:all_to_all``, ``c10d::...``): ``annotation``;
- XLA ``Thunk:#hlo_op=...#`` and ``XlaModule:#hlo_module=...,program_id=N#``: ``hlo_op``,
  ``hlo_module``, ``program_id``.

Host: ``Hostname`` of ``TARGET_INFO_SYSTEM_ENV``, else the file stem. Device
``<host>/GPU:<deviceId>``; global id ``host_index * G + i`` where ``G`` is the number
of GPUs with activity in the file and ``i`` the position of the GPU among them;
``gpus_per_domain = G`` (one file is one host, spec §3).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.events import floats_to_ns, make_table
from ..core.time_window import TIME_LIMIT_NS, UNPLACEABLE_NS
from ..core.trace import Job, Trace, empty_markers, make_markers, trailing_number
from ..core.vocabulary import vocabulary
from ..errors import InputError
from ..options import LoadOptions
from ..words import plural
from .base import ReadContext, sniff

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNCHRONIZATION = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
STRINGS = "StringIds"
ACTIVITY_TABLES = (KERNEL, MEMCPY, MEMSET)
# `nsys export` of a .nsys-rep: how long before a hung export is killed. Generous, sized by the report
# (exports of large reports run for minutes): a base plus a second per MiB; the variable overrides it.
EXPORT_TIMEOUT_ENV = "MOEPROF_NSYS_EXPORT_TIMEOUT"
EXPORT_TIMEOUT_BASE_S = 300.0
EXPORT_TIMEOUT_S_PER_MIB = 1.0
_NAME_COLUMNS = ("demangledName", "shortName", "mangledName")  # preferred first
_DOMAIN_CREATE = 75  # NvtxDomainCreate in ENUM_NSYS_EVENT_TYPE, the same in every schema seen
_PID_SHIFT = 24  # globalTid = globalPid | tid: the low 24 bits are the thread

# CUDA_MEMCPY_KIND_* of ENUM_CUDA_MEMCPY_OPER, for exports that lack the enum table
_MEMCPY_ENUM_FALLBACK = {
    0: "UNKNOWN",
    1: "HTOD",
    2: "DTOH",
    3: "HTOA",
    4: "ATOH",
    5: "ATOA",
    6: "ATOD",
    7: "DTOA",
    8: "DTOD",
    9: "HTOH",
    10: "PTOP",
    11: "UVM_HTOD",
    12: "UVM_DTOH",
    13: "UVM_DTOD",
}
_MEMCPY_SIDE = {"H": "H", "D": "D", "A": "D", "P": "P"}  # an array lives in device memory

# §9: runtime and driver calls that wait for the device (synchronizations, synchronous copies); nsys
# names them with their API version (cudaStreamSynchronize_v3020, cuMemcpyDtoH_v2) and per-thread
# default-stream variants (_ptds, _ptsz). Not cudaEventQuery (returns at once) nor cudaStreamWaitEvent
# (the device waits, not the host), which CUPTI_ACTIVITY_KIND_SYNCHRONIZATION records too.
SYNC_CALL = re.compile(
    r"^(?:cuda(?:DeviceSynchronize|ThreadSynchronize|StreamSynchronize|EventSynchronize"
    r"|Memcpy|Memcpy2D|Memcpy3D|MemcpyPeer|MemcpyToSymbol|MemcpyFromSymbol)"
    r"|cu(?:CtxSynchronize|StreamSynchronize|EventSynchronize"
    r"|Memcpy|MemcpyDtoH|MemcpyHtoD|MemcpyDtoD|Memcpy2D|Memcpy3D|MemcpyPeer))(?:_v\d+|_ptds|_ptsz)*$"
)
_SYNC_LIKE = ("cu%Synchronize%", "cu%Memcpy%")  # SQL pre-filter of StringIds (a superset of SYNC_CALL)

# ---- NVTX range families --------------------------------------------------------------------
# PyTorch's emit_nvtx appends ", seq = N, op_id = N, sizes = [...]" to every op name
_TORCH_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$", re.S)
NCCL_CALL = re.compile(r"^nccl[A-Z]\w*$")
_NCCL_DOMAINS = frozenset({"", "nccl", "rccl"})  # "" = a domain nobody named (default or never created)
# NCCL API call -> collective name the taxonomy's `collective` rules read; other calls
# (ncclCommInitRank, ncclGroupStart, ncclCommCount...) launch no communication kernel
_NCCL_COLLECTIVES = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "reduce": "reduce",
    "send": "send",
    "recv": "recv",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "gather": "gather",
    "scatter": "scatter",
}
_P2P_ANNOTATION = re.compile(r"(?i)send|recv|p2p")
_ALL_TO_ALL = re.compile(r"(?i)all_?(to|2)_?all")
# XLA's thunk and module annotations; nsys may show them as "TSL:Thunk:#...#" (domain prefix)
_THUNK = re.compile(r"(?:^|:)Thunk:#([^#]*)#")
_XLA_MODULE = re.compile(r"(?:^|:)XlaModule:#([^#]*)#")
_KV = re.compile(r"(\w+)=([^,#]*)")
# SQL pre-filter for NVTX rows (LIKE is ASCII case-insensitive): a superset of the families above,
# so that the aten:: ranges of emit_nvtx (often millions) stay in the file. No "_" (a LIKE wildcard).
_NVTX_LIKE = (
    "nccl%",
    "rccl%",
    "gloo%",
    "ucc%",
    "mpi%",
    "xccl%",
    "%c10d%",
    "symm%",
    "%all%all%",
    "%all%reduce%",
    "%all%gather%",
    "%reduce%scatter%",
    "%broadcast%",
    "%send%",
    "%recv%",
    "%dispatch%",
    "%combine%",
    "%Thunk:#%",
    "%XlaModule:#%",
    "%step%",
)


def _like_to_regex(pattern: str) -> str:
    core = ".*".join(re.escape(part) for part in pattern.strip("%").split("%"))
    return ("" if pattern.startswith("%") else "^") + core + ("" if pattern.endswith("%") else "$")


_LIKE_REGEX = "|".join(_like_to_regex(p) for p in _NVTX_LIKE)

# ---- NVTX extended payloads (NCCL) ----------------------------------------------------------
# nvToolsExtPayload.h entry types -> (bytes, signed), LP64
_NVTX_TYPES = {
    1: (1, True),
    2: (1, False),
    3: (2, True),
    4: (2, False),
    5: (4, True),
    6: (4, False),
    7: (8, True),
    8: (8, False),
    9: (8, True),
    10: (8, False),
    11: (1, True),
    12: (1, False),
    13: (2, True),
    14: (2, False),
    15: (4, True),
    16: (4, False),
    17: (8, True),
    18: (8, False),
    22: (8, False),
    23: (8, False),
}
# binaryData = [domainId u64][schemaId u64][payload size u64][payload offset u64] + payload
_BLOB_HEADER = 32
PAYLOAD_FIELDS = ("comm", "nranks", "rank", "cudadev", "nbytes", "peer", "root")


def _payload_field(key: str) -> str | None:
    """Which NCCL payload field an entry name ("Message size [bytes]", "Peer rank"...) is."""
    k = re.sub(r"[^a-z0-9]", "", key.lower())
    if "communicator" in k or k in ("comm", "commid", "commhash"):
        return "comm"
    if "peer" in k:
        return "peer"
    if k in ("noofranks", "nranks", "numranks", "commsize"):
        return "nranks"
    if k in ("rank", "myrank"):
        return "rank"
    if "cudadevice" in k or k == "cudadev":
        return "cudadev"
    if "messagesize" in k or k in ("bytes", "nbytes", "msgsize"):
        return "nbytes"
    if k in ("root", "rootrank"):
        return "root"
    return None


# ---- reading: tables into DataFrames ------------------------------------------------------------


@dataclass
class _Frames:
    """What the event builder needs, the same whatever the export format."""

    kernels: pd.DataFrame  # start end deviceId streamId pid name launch_tid launch_start
    memcpys: pd.DataFrame  # ... + copyKind bytes srcDeviceId dstDeviceId
    memsets: pd.DataFrame  # ... + bytes
    nvtx: pd.DataFrame  # start end tid domain text json blob (ranges only)
    domains: dict[int, str] = field(default_factory=dict)
    memcpy_enum: dict[int, str] = field(default_factory=dict)
    schemas: pd.DataFrame | None = None  # domainId schemaId idx type name offset payloadSize
    hostname: str = ""
    gpu_names: dict[int, str] = field(default_factory=dict)
    # §9 host synchronizations: runtime calls matching SYNC_CALL (start end tid corr) and the
    # SYNCHRONIZATION table's device of each correlation id (corr pid deviceId)
    sync_calls: pd.DataFrame = field(default_factory=pd.DataFrame)
    sync_devices: pd.DataFrame = field(default_factory=pd.DataFrame)


class _SqliteTables:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        self.names = {r[0] for r in rows}
        self._cols: dict[str, list[str]] = {}

    def columns(self, table: str) -> list[str]:
        if table not in self.names:
            return []
        if table not in self._cols:
            self._cols[table] = [r[1] for r in self.conn.execute(f'PRAGMA table_info("{table}")')]
        return self._cols[table]

    def rows(self, table: str) -> int:
        return int(self.conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]) if table in self.names else 0

    def frame(self, table: str, cols: list[str]) -> pd.DataFrame:
        have = [c for c in cols if c in self.columns(table)]
        if not have:
            return pd.DataFrame()
        sql = f'SELECT {", ".join(f"{chr(34)}{c}{chr(34)}" for c in have)} FROM "{table}"'
        return pd.read_sql_query(sql, self.conn, dtype_backend="numpy_nullable")


def _launch_join(t: _SqliteTables, alias: str, table: str) -> tuple[str, str]:
    """SELECT items and JOIN clause that attach each activity's runtime launch (thread, start)."""
    rcols = t.columns(RUNTIME)
    acols = t.columns(table)
    if not {"correlationId", "globalTid", "start"} <= set(rcols) or "correlationId" not in acols:
        return "NULL AS launch_tid, NULL AS launch_start, NULL AS launch_end", ""
    cond = f"r.correlationId = {alias}.correlationId"
    if "globalPid" in acols:
        # correlation ids restart in every process: match the process too
        cond += f" AND (r.globalTid >> {_PID_SHIFT}) = ({alias}.globalPid >> {_PID_SHIFT})"
    end = 'r."end"' if "end" in rcols else "NULL"
    return (
        f"r.globalTid AS launch_tid, r.start AS launch_start, {end} AS launch_end",
        f'LEFT JOIN "{RUNTIME}" r ON {cond}',
    )


def _activity_sql(t: _SqliteTables, table: str, extra: list[str]) -> str | None:
    cols = t.columns(table)
    if not {"start", "end", "deviceId"} <= set(cols):
        return None
    a = "a"
    items = [f"{a}.rowid AS rid", f"{a}.start AS start", f'{a}."end" AS "end"', f"{a}.deviceId AS deviceId"]
    items.append(f"{a}.streamId AS streamId" if "streamId" in cols else "-1 AS streamId")
    items.append(f"({a}.globalPid >> {_PID_SHIFT}) AS pid" if "globalPid" in cols else "NULL AS pid")
    joins = []
    if table == KERNEL:
        names = []
        for i, c in enumerate(c for c in _NAME_COLUMNS if c in cols):
            if STRINGS in t.names:
                joins.append(f'LEFT JOIN "{STRINGS}" s{i} ON s{i}.id = {a}."{c}"')
                # a name column normally holds a StringIds id; take text as it is
                col = f'{a}."{c}"'
                names.append(f"NULLIF(CASE WHEN typeof({col}) = 'integer' THEN s{i}.value ELSE {col} END, '')")
            else:
                names.append(f"NULLIF(CAST({a}.\"{c}\" AS TEXT), '')")
        items.append(f"COALESCE({', '.join(names)}, '') AS name" if names else "'' AS name")
    for c in extra:
        items.append(f'{a}."{c}" AS "{c}"' if c in cols else f'NULL AS "{c}"')
    launch_items, launch_join = _launch_join(t, a, table)
    items.append(launch_items)
    return f'SELECT {", ".join(items)} FROM "{table}" {a} {" ".join(joins)} {launch_join}'


class _Unplaceable(Exception):
    """An activity table with rows but without the columns that place them (refused, naming the file)."""


def _placing_columns(t: _SqliteTables | _ParquetTables, table: str) -> bool:
    """Whether ``table`` has start, end and deviceId; a table with rows that lacks one is refused (its
    activities would be left out without a word), an empty or absent one is skipped."""
    cols = t.columns(table)
    missing = sorted({"start", "end", "deviceId"} - set(cols))
    if missing and cols and t.rows(table):
        raise _Unplaceable(f"{table} has rows but no {' or '.join(missing)} column: its activities cannot be placed")
    return not missing


def _read_activity(t: _SqliteTables, table: str, extra: list[str]) -> pd.DataFrame:
    if not _placing_columns(t, table):
        return pd.DataFrame()
    sql = _activity_sql(t, table, extra)
    if sql is None:
        return pd.DataFrame()
    frame = pd.read_sql_query(sql, t.conn, dtype_backend="numpy_nullable")
    # a duplicated runtime correlation id would repeat an activity: keep its first launch
    return frame.drop_duplicates("rid", keep="first").drop(columns="rid")


def _string_expr(t: _SqliteTables, cols: set[str], text_col: str, id_col: str, alias: str) -> tuple[str, str]:
    """SQL for an NVTX string held inline (``text``) or as a StringIds id (``textId``), and its JOIN."""
    parts, join = [], ""
    if text_col in cols:
        parts.append(f"n.{text_col}")
    if id_col in cols and STRINGS in t.names:
        join = f'LEFT JOIN "{STRINGS}" {alias} ON {alias}.id = n.{id_col}'
        parts.append(f"{alias}.value")
    if not parts:
        return "NULL", ""
    return (f"COALESCE({', '.join(parts)})" if len(parts) > 1 else parts[0]), join


def _nvtx_sql(t: _SqliteTables, step_marker: re.Pattern[str] | None = None) -> tuple[str, list[str]] | None:
    cols = set(t.columns(NVTX))
    text, text_join = _string_expr(t, cols, "text", "textId", "st")
    if not {"start", "end"} <= cols or text == "NULL":
        return None
    js, js_join = _string_expr(t, cols, "jsonText", "jsonTextId", "sj")
    items = [
        "n.start AS start",
        'n."end" AS "end"',
        f"{text} AS text",
        "n.globalTid AS tid" if "globalTid" in cols else "0 AS tid",
        "n.domainId AS domain" if "domainId" in cols else "0 AS domain",
        f"{js} AS json",
        # as hex text: pandas' nullable reader would try to decode a blob as UTF-8
        "NULLIF(hex(n.binaryData), '') AS blob" if "binaryData" in cols else "NULL AS blob",
    ]
    base = f'SELECT {", ".join(items)} FROM "{NVTX}" n {text_join} {js_join} WHERE n."end" IS NOT NULL'
    if step_marker is not None:
        return base, []  # a user's step regex has no LIKE form: read every range, filter in Python
    like = " OR ".join(f"{text} LIKE ?" for _ in _NVTX_LIKE)
    return f"{base} AND ({like})", list(_NVTX_LIKE)


def _sqlite_frames(t: _SqliteTables, step_marker: re.Pattern[str] | None = None) -> _Frames:
    kernels = _read_activity(t, KERNEL, [])
    memcpys = _read_activity(t, MEMCPY, ["copyKind", "bytes", "srcDeviceId", "dstDeviceId"])
    memsets = _read_activity(t, MEMSET, ["bytes"])
    q = _nvtx_sql(t, step_marker)
    nvtx = pd.read_sql_query(q[0], t.conn, params=q[1], dtype_backend="numpy_nullable") if q else pd.DataFrame()
    domains: dict[int, str] = {}
    cols = set(t.columns(NVTX))
    text, join = _string_expr(t, cols, "text", "textId", "st")
    if {"eventType", "domainId"} <= cols and text != "NULL":
        sql = f'SELECT n.domainId, {text} FROM "{NVTX}" n {join} WHERE n.eventType = {_DOMAIN_CREATE}'
        rows = t.conn.execute(sql).fetchall()
        domains = {
            d: v if isinstance(v, str) else "" for d, v in ((_one_number(d), v) for d, v in rows) if type(d) is int
        }
    calls = _sqlite_sync_calls(t)
    return _Frames(
        kernels,
        memcpys,
        memsets,
        nvtx,
        domains,
        **_beside_activities(t.frame, calls),
    )


def _sqlite_sync_calls(t: _SqliteTables) -> pd.DataFrame:
    """The runtime calls that wait for the device (``SYNC_CALL``): start, end, tid, corr. Names are
    ``nameId`` into StringIds (every export seen; the few matching ids are found first, so the runtime
    table is scanned once without a join), else a ``name`` text column."""
    cols = set(t.columns(RUNTIME))
    if not {"start", "end", "globalTid"} <= cols:
        return pd.DataFrame()
    items = 'r.start AS start, r."end" AS "end", r.globalTid AS tid, ' + (
        "r.correlationId AS corr" if "correlationId" in cols else "NULL AS corr"
    )
    if "nameId" in cols and STRINGS in t.names:
        like = " OR ".join("value LIKE ?" for _ in _SYNC_LIKE)
        found = t.conn.execute(f'SELECT id, value FROM "{STRINGS}" WHERE {like}', _SYNC_LIKE).fetchall()
        ids = sorted({i for i, v in found if type(i) is int and isinstance(v, str) and SYNC_CALL.match(v)})
        if not ids:
            return pd.DataFrame()
        sql = f'SELECT {items} FROM "{RUNTIME}" r WHERE r.nameId IN ({", ".join(map(str, ids))})'
        return pd.read_sql_query(sql, t.conn, dtype_backend="numpy_nullable")
    if "name" in cols:
        like = " OR ".join("r.name LIKE ?" for _ in _SYNC_LIKE)
        sql = f'SELECT {items}, r.name AS name FROM "{RUNTIME}" r WHERE {like}'
        calls = pd.read_sql_query(sql, t.conn, params=_SYNC_LIKE, dtype_backend="numpy_nullable")
        return _matching_calls(calls, _texts(calls["name"]) if len(calls) else np.empty(0, dtype=object))
    return pd.DataFrame()


def _matching_calls(calls: pd.DataFrame, names: np.ndarray) -> pd.DataFrame:
    """The rows of ``calls`` whose name matches SYNC_CALL (each distinct name tried once)."""
    if not len(calls):
        return pd.DataFrame()
    codes, uniques = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=True)
    hit = np.array([isinstance(v, str) and bool(SYNC_CALL.match(v)) for v in uniques], dtype=bool)
    keep = np.zeros(len(calls), dtype=bool)
    keep[codes >= 0] = hit[codes[codes >= 0]]
    return calls.loc[keep, ["start", "end", "tid", "corr"]].reset_index(drop=True)


def _beside_activities(frame: Callable[[str, list[str]], pd.DataFrame], sync_calls: pd.DataFrame) -> dict[str, Any]:
    """The :class:`_Frames` fields both export formats read the same way: the small tables, and the host
    synchronizations with their devices (the SYNCHRONIZATION table read only where there are calls)."""
    devices = _sync_devices(frame) if len(sync_calls) else pd.DataFrame()
    return {**_small_tables(frame), "sync_calls": sync_calls, "sync_devices": devices}


def _sync_devices(frame: Callable[[str, list[str]], pd.DataFrame]) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: the device of each synchronization call (corr, pid, deviceId)."""
    sync = frame(SYNCHRONIZATION, ["correlationId", "globalPid", "deviceId"])
    if not {"correlationId", "deviceId"} <= set(sync):
        return pd.DataFrame()
    n = len(sync)
    return pd.DataFrame(
        {
            "corr": _ints(sync["correlationId"], n, -2),
            "pid": _ints(sync["globalPid"], n) >> _PID_SHIFT if "globalPid" in sync else np.full(n, -1),
            "deviceId": _ints(sync["deviceId"], n),
        }
    )


def _small_tables(frame: Callable[[str, list[str]], pd.DataFrame]) -> dict[str, Any]:
    """Enum, host, GPU and payload-schema tables: small, read the same way from any format."""
    enum = frame("ENUM_CUDA_MEMCPY_OPER", ["id", "name"])
    memcpy_enum = _id_names(enum)
    env = frame("TARGET_INFO_SYSTEM_ENV", ["name", "value"])
    hostname = ""
    if {"name", "value"} <= set(env):
        hosts = env.loc[env["name"].astype(str) == "Hostname", "value"].dropna().astype(str)
        hostname = hosts.iloc[0].strip() if len(hosts) else ""
    gpu_names = _id_names(frame("TARGET_INFO_GPU", ["id", "name"]))
    entries = frame("NVTX_PAYLOAD_SCHEMA_ENTRIES", ["domainId", "schemaId", "idx", "type", "name", "offset"])
    sizes = frame("NVTX_PAYLOAD_SCHEMAS", ["domainId", "schemaId", "payloadSize"])
    schemas = None
    if {"domainId", "schemaId", "idx", "type", "name"} <= set(entries):
        schemas = entries.drop_duplicates(["domainId", "schemaId", "idx"])
        if {"domainId", "schemaId", "payloadSize"} <= set(sizes):
            schemas = schemas.merge(sizes.drop_duplicates(["domainId", "schemaId"]), how="left")
    return {"memcpy_enum": memcpy_enum, "hostname": hostname, "gpu_names": gpu_names, "schemas": schemas}


def _id_names(table: pd.DataFrame) -> dict[int, str]:
    """id -> name of a small enum-like table; rows whose id is no number or whose name is no text are skipped."""
    if not {"id", "name"} <= set(table):
        return {}
    ids, null, bad = _numeric(table["id"])
    names = table["name"].to_numpy(dtype=object)
    return {int(i): str(v) for i, v, skip in zip(ids, names, null | bad) if not skip and isinstance(v, str)}


class _ParquetTables:
    """``nsys export --type parquetdir``: one ``<TABLE>.parquet`` file (or folder) per table."""

    def __init__(self, folder: Path) -> None:
        self.paths: dict[str, Path] = {}
        for p in folder.iterdir():
            name = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.name
            if p.name.endswith(".parquet") or (p.is_dir() and any(p.glob("*.parquet"))):
                self.paths[name] = p
        self.names = set(self.paths)
        self._cols: dict[str, list[str]] = {}

    def columns(self, table: str) -> list[str]:
        if table not in self.paths:
            return []
        if table not in self._cols:
            import pyarrow.dataset as ds

            self._cols[table] = list(ds.dataset(self.paths[table], format="parquet").schema.names)
        return self._cols[table]

    def rows(self, table: str) -> int:
        if table not in self.paths:
            return 0
        import pyarrow.dataset as ds

        return int(ds.dataset(self.paths[table], format="parquet").count_rows())

    def frame(self, table: str, cols: list[str]) -> pd.DataFrame:
        have = [c for c in cols if c in self.columns(table)]
        if not have:
            return pd.DataFrame()
        return pd.read_parquet(self.paths[table], columns=have, dtype_backend="numpy_nullable")


def _texts(col: pd.Series) -> np.ndarray:
    """A text column as objects: str kept, NULL as None, bytes decoded leniently (as the SQLite route does
    for text that is not UTF-8), anything else (a number, a list) as None."""
    values = col.to_numpy(dtype=object)
    if all(type(v) is str for v in values):  # the usual case, no copy per value
        return values
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        if isinstance(v, str):
            out[i] = v
        elif isinstance(v, bytes | bytearray):
            out[i] = bytes(v).decode("utf-8", "replace")
        else:
            out[i] = None
    return out


def _parquet_frames(t: _ParquetTables) -> _Frames:
    strings = t.frame(STRINGS, ["id", "value"])
    lookup = None
    if {"id", "value"} <= set(strings) and len(strings):
        ids, null, bad = _numeric(strings["id"])
        keep = ~(null | bad)
        lookup = pd.Series(_texts(strings["value"])[keep], index=ids[keep])
        lookup = lookup[~lookup.index.duplicated(keep="first")]

    def resolve(col: pd.Series) -> pd.Series:
        # ids into StringIds (NULL ids stay NULL); text columns pass through
        if lookup is None or col.dtype == object or pd.api.types.is_string_dtype(col):
            return pd.Series(_texts(col), index=col.index)
        out = np.full(len(col), None, dtype=object)
        ids = _ints(col, len(col))
        known = col.notna().to_numpy()
        out[known] = lookup.reindex(ids[known]).to_numpy(dtype=object)
        return pd.Series(out, index=col.index)

    runtime = t.frame(RUNTIME, ["correlationId", "globalTid", "start", "end", "nameId", "name"])
    sync_calls = pd.DataFrame()
    if {"globalTid", "start", "end"} <= set(runtime) and ("nameId" in runtime or "name" in runtime):
        name_col = runtime["nameId"] if "nameId" in runtime else runtime["name"]
        calls = pd.DataFrame(
            {
                "start": runtime["start"],
                "end": runtime["end"],
                "tid": runtime["globalTid"],
                "corr": runtime["correlationId"] if "correlationId" in runtime else np.nan,
            }
        )
        # names resolved once per distinct id
        codes, uniques = pd.factorize(name_col, use_na_sentinel=True)
        names = np.array([*resolve(pd.Series(uniques)).tolist(), None], dtype=object)  # code -1 (NULL): None
        sync_calls = _matching_calls(calls, names[codes])
    runtime = runtime.drop(columns=[c for c in ("nameId", "name") if c in runtime])
    if {"correlationId", "globalTid", "start"} <= set(runtime):
        runtime = runtime.rename(columns={"globalTid": "launch_tid", "start": "launch_start", "end": "launch_end"})
        if "launch_end" not in runtime:
            runtime["launch_end"] = np.nan
        runtime["pid"] = _ints(runtime["launch_tid"], len(runtime)) >> _PID_SHIFT
        # join keys as int64: a NULL id matches nothing (as in SQL: -2 here, -1 on the activity side)
        runtime["correlationId"] = _ints(runtime["correlationId"], len(runtime), -2)
    else:
        runtime = pd.DataFrame()

    def activity(table: str, extra: list[str]) -> pd.DataFrame:
        if not _placing_columns(t, table):
            return pd.DataFrame()
        frame = t.frame(
            table, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", *_NAME_COLUMNS, *extra]
        )
        if "streamId" not in frame:
            frame["streamId"] = -1
        frame["pid"] = _ints(frame["globalPid"], len(frame)) >> _PID_SHIFT if "globalPid" in frame else -1
        if table == KERNEL:
            name = pd.Series(np.full(len(frame), None, dtype=object), index=frame.index)
            for c in _NAME_COLUMNS:
                if c in frame:
                    text = resolve(frame[c]).replace("", None)
                    name = name.where(name.notna(), text)
            frame["name"] = name.fillna("")
        for c in extra:
            if c not in frame:
                frame[c] = np.nan
        if "correlationId" in frame:
            frame["correlationId"] = _ints(frame["correlationId"], len(frame))
        if len(runtime) and "correlationId" in frame:
            keys = ["correlationId", "pid"] if "globalPid" in frame else ["correlationId"]
            launches = runtime.drop_duplicates(keys, keep="first")[[*keys, "launch_tid", "launch_start", "launch_end"]]
            frame = frame.merge(launches, on=keys, how="left", sort=False)
        else:
            frame["launch_tid"] = np.nan
            frame["launch_start"] = np.nan
            frame["launch_end"] = np.nan
        keep = [
            "start",
            "end",
            "deviceId",
            "streamId",
            "pid",
            *(["name"] if table == KERNEL else []),
            *extra,
            "launch_tid",
            "launch_start",
            "launch_end",
        ]
        return frame[keep]

    kernels = activity(KERNEL, [])
    memcpys = activity(MEMCPY, ["copyKind", "bytes", "srcDeviceId", "dstDeviceId"])
    memsets = activity(MEMSET, ["bytes"])

    nv = t.frame(
        NVTX,
        [
            "start",
            "end",
            "eventType",
            "globalTid",
            "domainId",
            "text",
            "textId",
            "jsonText",
            "jsonTextId",
            "binaryData",
        ],
    )
    domains: dict[int, str] = {}
    nvtx = pd.DataFrame()
    if len(nv) and "start" in nv and "end" in nv:
        text = pd.Series(np.full(len(nv), None, dtype=object), index=nv.index)
        if "text" in nv:
            text = pd.Series(_texts(nv["text"]), index=nv.index)
        if "textId" in nv:
            text = text.where(text.notna(), resolve(nv["textId"]))
        if "eventType" in nv and "domainId" in nv:
            created = _ints(nv["eventType"], len(nv)) == _DOMAIN_CREATE
            ids = _ints(nv["domainId"], len(nv))[created]
            domains = {int(d): v if isinstance(v, str) else "" for d, v in zip(ids, text[created])}
        js = (
            pd.Series(_texts(nv["jsonText"]), index=nv.index)
            if "jsonText" in nv
            else pd.Series(None, index=nv.index, dtype=object)
        )
        if "jsonTextId" in nv:
            js = js.where(js.notna(), resolve(nv["jsonTextId"]))
        nvtx = pd.DataFrame(
            {
                "start": nv["start"],
                "end": nv["end"],
                "tid": nv["globalTid"] if "globalTid" in nv else 0,
                "domain": nv["domainId"] if "domainId" in nv else 0,
                "text": text,
                "json": js,
                "blob": nv["binaryData"] if "binaryData" in nv else None,
            }
        )
        nvtx = nvtx[nvtx["end"].notna()]
    return _Frames(
        kernels,
        memcpys,
        memsets,
        nvtx,
        domains,
        **_beside_activities(t.frame, sync_calls),
    )


# ---- entry points ---------------------------------------------------------------------------------


def read(path: Path, context: ReadContext | None = None) -> Trace:
    """Read one Nsight Systems export (``.sqlite``, parquet folder) or report (``.nsys-rep``)."""
    context = context or ReadContext()
    options = context.options
    host_index = context.placement.host_index
    marker = _step_marker(options)

    path = Path(path)
    if path.is_dir():
        return read_parquet_dir(path, context)
    fmt = sniff(path)
    if fmt == "sqlite":
        return _parse_sqlite(path, path, _stem(path), host_index, marker)
    if fmt == "nsys-rep":
        return _parse_report(path, host_index, marker)
    raise InputError(path, "not an Nsight Systems SQLite export or .nsys-rep report")


def read_parquet_dir(folder: Path, context: ReadContext | None = None) -> Trace:
    """Read a parquet folder written by ``nsys export --type parquetdir``."""
    context = context or ReadContext()
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(folder, "not a folder of parquet tables")
    tables = _ParquetTables(folder)
    if not tables.names & set(ACTIVITY_TABLES):
        raise InputError(folder, "no CUPTI activity tables")
    try:
        frames = _parquet_frames(tables)
    except _Unplaceable as exc:
        raise InputError(folder, str(exc)) from None
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(folder, f"cannot read the parquet tables: {_one_line(exc)}") from None
    trace = _build(
        frames, frames.hostname or _stem(folder), context.placement.host_index, folder, _step_marker(context.options)
    )
    return trace.replace(format="nsys-parquet")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".sqlite", ".nsys-rep", ".parquetdir", ".parquet"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or name
    return path.stem or name


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _step_marker(options: LoadOptions | None) -> re.Pattern[str] | None:
    """The user's ``--step-marker`` regex: NVTX ranges it matches are steps too."""
    if options is None or not options.step_marker:
        return None
    try:
        return re.compile(options.step_marker)
    except re.error as exc:
        raise InputError(None, f"--step-marker {options.step_marker!r}: bad regular expression: {exc}") from None


def _parse_report(path: Path, host_index: int, step_marker: re.Pattern[str] | None = None) -> Trace:
    nsys = shutil.which("nsys")
    stem = _stem(path)
    if nsys is None:
        raise InputError(
            path,
            "is a raw Nsight Systems report and nsys is not on PATH; export it first: "
            f"nsys export --type sqlite --output {stem}.sqlite {path}",
        )
    timeout_s = export_timeout(path)
    # export into a private folder: nothing is ever written beside the user's report
    with tempfile.TemporaryDirectory(prefix="moeprof-nsys-") as tmp:
        out = Path(tmp) / "x.sqlite"
        # output to a file, not a pipe: a killed export's own children could hold a pipe open
        with open(Path(tmp) / "export.log", "w+", encoding="utf-8", errors="replace") as log:
            # its own process group: on a timeout the export and everything it started are killed
            proc = subprocess.Popen(
                [nsys, "export", "--type", "sqlite", "--output", str(out), str(path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout=timeout_s)
            except KeyboardInterrupt:
                # the export runs in its own session, so Ctrl-C reached only us: say what it stopped
                raise KeyboardInterrupt(f"during nsys export of {path}; the export was stopped") from None
            except subprocess.TimeoutExpired:
                raise InputError(
                    path,
                    f"nsys export did not finish in {timeout_s:g} s and was stopped; "
                    f"set {EXPORT_TIMEOUT_ENV}=SECONDS to wait longer, or export it yourself: "
                    f"nsys export --type sqlite --output {stem}.sqlite {path}",
                ) from None
            finally:
                if proc.poll() is None:  # timed out, or interrupted (Ctrl-C)
                    _kill_group(proc)
            log.seek(0)
            lines = log.read().strip().splitlines()
        stopped_by = signal_of(code)
        if stopped_by is not None:
            raise InputError(
                path,
                f"nsys export was interrupted ({stopped_by}) before it finished; run it again, or export it "
                f"yourself: nsys export --type sqlite --output {stem}.sqlite {path}",
            )
        if code != 0 or not out.exists():
            raise InputError(path, f"nsys export failed: {lines[-1] if lines else f'exit code {code}'}")
        return _parse_sqlite(out, path, stem, host_index, step_marker)


# exit codes that say a process was stopped by a signal, not that it failed: killed by it (negative, from
# Popen) or a shell's 128 + signal for the interrupt, quit and termination signals
_STOPPING_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP)


def signal_of(code: int | None) -> str | None:
    """The signal's name when an exit code says the process was interrupted or terminated by one, else None."""
    if code is None:
        return None
    number = -code if code < 0 else code - 128 if code > 128 else 0
    if number <= 0:
        return None
    try:
        sig = signal.Signals(number)
    except ValueError:
        return f"signal {number}" if code < 0 else None
    return sig.name if code < 0 or sig in _STOPPING_SIGNALS else None


def export_timeout(report: Path, environ: dict[str, str] | None = None) -> float:
    """Seconds ``nsys export`` of ``report`` may take: ``MOEPROF_NSYS_EXPORT_TIMEOUT``, else sized by the report."""
    environ = dict(os.environ) if environ is None else environ
    override = environ.get(EXPORT_TIMEOUT_ENV, "").strip()
    if override:
        try:
            seconds = float(override)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds < float("inf"):
            raise InputError(None, f"{EXPORT_TIMEOUT_ENV} must be a positive number of seconds (got {override!r})")
        return seconds
    try:
        size = report.stat().st_size
    except OSError:
        size = 0
    return EXPORT_TIMEOUT_BASE_S + EXPORT_TIMEOUT_S_PER_MIB * size / 2**20


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _parse_sqlite(
    db: Path, shown: Path, stem: str, host_index: int, step_marker: re.Pattern[str] | None = None
) -> Trace:
    with open_read_only(db, shown, "moeprof-sqlite-") as conn:
        return _parse_connection(conn, shown, stem, host_index, step_marker)


@contextmanager
def open_read_only(db: Path, shown: Path, prefix: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to ``db`` (scratch space in a temporary folder, never beside it), its
    refusals one line naming ``shown``. The caller closes the connection (before the scratch goes)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        try:
            conn = _connect_read_only(db, Path(scratch))
        except sqlite3.Error as exc:
            raise InputError(shown, f"cannot open as SQLite: {_one_line(exc)}") from None
        except OSError as exc:
            raise InputError(shown, f"cannot read: {exc.strerror or exc}") from None
        yield conn


def _connect_read_only(db: Path, scratch: Path) -> sqlite3.Connection:
    """A connection to ``db`` that never writes a byte beside it.

    ``mode=ro`` is not enough: a WAL-mode database still gets ``-shm`` and ``-wal`` files next to it (and
    cannot be opened at all in a read-only folder). ``immutable=1`` makes SQLite take no locks and open
    no journal, WAL or shared-memory file, but it also ignores a ``-wal``/``-journal`` file that holds
    transactions not yet in the database; in that case the database and that file are copied into
    ``scratch``, where SQLite may apply them.
    """
    db = db.resolve()  # a link's -wal lies beside the file it points to
    pending = [
        companion
        for suffix in ("-wal", "-journal")
        if (companion := db.with_name(db.name + suffix)).is_file() and companion.stat().st_size > 0
    ]
    if not pending:
        # as_uri() percent-encodes '#', '?', '%' and spaces in the path
        return sqlite3.connect(db.as_uri() + "?mode=ro&immutable=1", uri=True)
    copy = scratch / "export.sqlite"
    shutil.copyfile(db, copy)
    for companion in pending:
        shutil.copyfile(companion, scratch / (copy.name + companion.name[len(db.name) :]))
    return sqlite3.connect(copy)


def _parse_connection(
    conn: sqlite3.Connection, shown: Path, stem: str, host_index: int, step_marker: re.Pattern[str] | None
) -> Trace:
    try:
        tables = _SqliteTables(conn)
        if not tables.names & set(ACTIVITY_TABLES):
            raise InputError(shown, "no CUPTI activity tables (not an Nsight Systems export?)")
        try:
            frames = _sqlite_frames(tables, step_marker)
        except sqlite3.OperationalError as exc:
            if "UTF-8" not in str(exc):
                raise
            # some exports hold strings that are not valid UTF-8 (raw symbol bytes): decode
            # leniently, which costs a Python call per string, so only when needed
            conn.text_factory = lambda b: b.decode("utf-8", "replace")
            frames = _sqlite_frames(tables, step_marker)
    except _Unplaceable as exc:
        raise InputError(shown, str(exc)) from None
    except sqlite3.Error as exc:
        raise InputError(shown, f"not a readable Nsight Systems SQLite export: {_one_line(exc)}") from None
    except (pd.errors.DatabaseError, ValueError) as exc:
        raise InputError(shown, f"not a readable Nsight Systems SQLite export: {_one_line(exc)}") from None
    finally:
        conn.close()
    return _build(frames, frames.hostname or stem, host_index, shown, step_marker)


# ---- building the event table -------------------------------------------------------------------


def _numeric(values: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A column as (int64 rounded to the nearest integer, NULL mask, not-a-number mask), without a warning.

    Integer columns convert exactly; floats round, with NaN as NULL; a number past +-2^62 (or inf) becomes
    ``UNPLACEABLE_NS``. Text holding a number is that number; other text, blobs, booleans and lists are
    not numbers. Typed columns (every real export) take the vectorized paths.
    """
    s = values if isinstance(values, pd.Series) else pd.Series(values)
    n = len(s)
    none = np.zeros(n, dtype=bool)
    dtype = s.dtype
    if pd.api.types.is_bool_dtype(dtype):
        null = s.isna().to_numpy(dtype=bool)
        return np.zeros(n, dtype=np.int64), null, ~null
    if pd.api.types.is_integer_dtype(dtype):
        null = s.isna().to_numpy(dtype=bool)
        if pd.api.types.is_unsigned_integer_dtype(dtype):
            raw = s.to_numpy(dtype=np.uint64, na_value=0)
            big = raw > np.uint64(2**63 - 1)
            return np.where(big, UNPLACEABLE_NS, raw.astype(np.int64)), null, none
        return s.to_numpy(dtype=np.int64, na_value=0), null, none
    if pd.api.types.is_float_dtype(dtype):
        f = s.to_numpy(dtype=np.float64, na_value=np.nan)
        null = np.isnan(f)
        return floats_to_ns(np.where(null, 0.0, f)), null, none
    out = np.zeros(n, dtype=np.int64)
    null = np.zeros(n, dtype=bool)
    bad = np.zeros(n, dtype=bool)
    for i, v in enumerate(s.to_numpy(dtype=object)):
        number = _one_number(v)
        if number is None:
            null[i] = True
        elif isinstance(number, int):
            out[i] = number
        else:
            bad[i] = True
    return out, null, bad


_NOT_A_NUMBER = object()


def _one_number(v: object) -> object:
    """One value of a mixed column: an int (rounded, UNPLACEABLE_NS past +-2^62), None (NULL) or _NOT_A_NUMBER."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, bool | np.bool_):
        return _NOT_A_NUMBER
    if isinstance(v, int | np.integer):
        return int(v) if -TIME_LIMIT_NS < int(v) < TIME_LIMIT_NS else UNPLACEABLE_NS
    if isinstance(v, float | np.floating):
        return None if np.isnan(v) else int(floats_to_ns(np.array([v], dtype=np.float64))[0])
    if isinstance(v, str) and len(v) <= 40:
        text = v.strip()
        try:
            return _one_number(int(text))
        except ValueError:
            pass
        try:
            return _one_number(float(text))
        except ValueError:
            return _NOT_A_NUMBER
    return _NOT_A_NUMBER


def _ints(values: object, n: int, default: int = -1) -> np.ndarray:
    """A column of nullable numbers as int64 (NULL, and anything that is no number, -> default)."""
    if values is None:
        return np.full(n, default, dtype=np.int64)
    out, null, bad = _numeric(values)
    return np.where(null | bad, default, out)


def _times(frame: pd.DataFrame, table: str, col: str, path: Path) -> np.ndarray:
    """An activity table's ``start``/``end`` in ns; NULL is a time no int64 holds (the reader's screen drops
    the row and counts it); a value that is no number (text, a blob, a list) refuses the file."""
    out, null, bad = _numeric(frame[col])
    if bad.any():
        value = frame[col].iloc[int(np.flatnonzero(bad)[0])]
        rows = plural(int(bad.sum()), "row")
        raise InputError(path, f"{table}.{col} holds {_shown(value)}, not a time in ns ({rows} like it)")
    return np.where(null, UNPLACEABLE_NS, out)


def _shown(value: object) -> str:
    """A cell that is no number, in a few words: text 'abc', bytes b'\\xff', a list, a boolean."""
    if isinstance(value, bool | np.bool_):
        return "a boolean"
    if isinstance(value, str | bytes):
        text = repr(value)
        return f"{'text' if isinstance(value, str) else 'bytes'} {text[:40]}{'...' if len(text) > 40 else ''}"
    if isinstance(value, list | tuple | np.ndarray):
        return "a list"
    return f"a {type(value).__name__}"


def _floats(values: object) -> np.ndarray:
    s = values if isinstance(values, pd.Series) else pd.Series(values)
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
        return s.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    out = np.full(len(s), np.nan)
    for i, v in enumerate(s.to_numpy(dtype=object)):
        if isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_):
            out[i] = float(v)
        elif isinstance(v, str) and len(v) <= 40:
            try:
                out[i] = float(v)
            except ValueError:
                pass
    return out


def _copy_kind(enum_name: str) -> str:
    """CUDA_MEMCPY_KIND_HTOA -> HtoD (arrays are device memory); unknown -> ""."""
    m = re.search(r"([HDAP])TO([HDAP])$", enum_name.upper())
    if not m:
        return ""
    return f"{_MEMCPY_SIDE[m.group(1)]}to{_MEMCPY_SIDE[m.group(2)]}"


def _activities(frames: _Frames, path: Path) -> pd.DataFrame:
    """The three activity tables as one frame, sorted by (start, end): times as int64 ns (see ``_times``),
    rows without a device dropped."""

    def times(frame: pd.DataFrame, table: str) -> dict[str, np.ndarray]:
        return {"start": _times(frame, table, "start", path), "end": _times(frame, table, "end", path)}

    parts = []
    k = frames.kernels
    if len(k):
        parts.append(
            pd.DataFrame(
                {
                    **times(k, KERNEL),
                    "deviceId": k["deviceId"],
                    "streamId": k["streamId"],
                    "pid": k["pid"],
                    "name": k["name"].fillna("").astype(object),
                    "activity": "kernel",
                    "copy_kind": "",
                    "bytes": np.nan,
                    "launch_tid": k["launch_tid"],
                    "launch_start": k["launch_start"],
                    "launch_end": k["launch_end"] if "launch_end" in k else np.nan,
                }
            )
        )
    m = frames.memcpys
    if len(m):
        enum = frames.memcpy_enum or _MEMCPY_ENUM_FALLBACK
        codes = _ints(m["copyKind"], len(m))
        uniq, inv = np.unique(codes, return_inverse=True)
        kinds = np.array([_copy_kind(enum.get(int(c), "")) for c in uniq], dtype=object)[inv]
        # a device-to-device copy between two different GPUs is a peer copy, whatever its kind says
        src, dst = _ints(m["srcDeviceId"], len(m)), _ints(m["dstDeviceId"], len(m))
        kinds[(kinds == "DtoD") & (src >= 0) & (dst >= 0) & (src != dst)] = "PtoP"
        names = np.where(kinds == "", "Memcpy", "Memcpy " + kinds.astype(str)).astype(object)
        parts.append(
            pd.DataFrame(
                {
                    **times(m, MEMCPY),
                    "deviceId": m["deviceId"],
                    "streamId": m["streamId"],
                    "pid": m["pid"],
                    "name": names,
                    "activity": "memcpy",
                    "copy_kind": kinds,
                    "bytes": _floats(m["bytes"]),
                    "launch_tid": m["launch_tid"],
                    "launch_start": m["launch_start"],
                    "launch_end": m["launch_end"] if "launch_end" in m else np.nan,
                }
            )
        )
    s = frames.memsets
    if len(s):
        parts.append(
            pd.DataFrame(
                {
                    **times(s, MEMSET),
                    "deviceId": s["deviceId"],
                    "streamId": s["streamId"],
                    "pid": s["pid"],
                    "name": "Memset",
                    "activity": "memset",
                    "copy_kind": "",
                    "bytes": _floats(s["bytes"]),
                    "launch_tid": s["launch_tid"],
                    "launch_start": s["launch_start"],
                    "launch_end": s["launch_end"] if "launch_end" in s else np.nan,
                }
            )
        )
    if not parts:
        return pd.DataFrame(
            columns=[
                "start",
                "end",
                "deviceId",
                "streamId",
                "pid",
                "name",
                "activity",
                "copy_kind",
                "bytes",
                "launch_tid",
                "launch_start",
                "launch_end",
            ]
        )
    act = pd.concat(parts, ignore_index=True)
    device, null, bad = _numeric(act["deviceId"])
    if bad.any():
        value = act["deviceId"].iloc[int(np.flatnonzero(bad)[0])]
        raise InputError(path, f"an activity table's deviceId holds {_shown(value)}, not a number")
    act["deviceId"] = device
    act = act[~null]
    return act.sort_values(["start", "end"], kind="stable", ignore_index=True)


def _build(
    frames: _Frames, host: str, host_index: int, path: Path, step_marker: re.Pattern[str] | None = None
) -> Trace:
    act = _activities(frames, path)
    n = len(act)
    dev_ids = _ints(act["deviceId"], n)
    gpus = np.unique(dev_ids)
    local = np.searchsorted(gpus, dev_ids)
    n_gpus = len(gpus)
    dev_names = np.array([f"{host}/GPU:{g}" for g in gpus], dtype=object)
    global_id = host_index * n_gpus + local

    nv = _nvtx_ranges(frames, step_marker)
    launch_tid = _ints(act["launch_tid"], n)
    launch_t = _ints(act["launch_start"], n)
    has_launch = np.flatnonzero(pd.notna(act["launch_tid"]).to_numpy() & pd.notna(act["launch_start"]).to_numpy())
    q_tid, q_t = launch_tid[has_launch], launch_t[has_launch]
    launch_end = _ints(act["launch_end"], n) if "launch_end" in act else np.full(n, -1, dtype=np.int64)
    launch_known = pd.notna(act["launch_tid"]).to_numpy() & (launch_end >= 0)

    collective = np.full(n, "", dtype=object)
    annotation = np.full(n, "", dtype=object)
    hlo_op = np.full(n, "", dtype=object)
    hlo_module = np.full(n, "", dtype=object)
    program_id = np.full(n, -1, dtype=np.int64)
    nbytes = _floats(act["bytes"]) if n else np.zeros(0)
    group = np.full(n, "", dtype=object)
    module_runs = empty_markers()

    def enclosing(ranges: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(activity rows, range rows) for activities launched inside one of ``ranges``."""
        hit = _innermost(ranges["tid"].to_numpy(), ranges["start"].to_numpy(), ranges["end"].to_numpy(), q_tid, q_t)
        ok = hit >= 0
        return has_launch[ok], hit[ok]

    if len(nv) and len(has_launch):
        ann = nv.loc[nv["is_annotation"]]
        rows, src = enclosing(ann)
        annotation[rows] = ann["clean"].to_numpy(dtype=object)[src]

        calls = nv.loc[nv["is_nccl"]].reset_index(drop=True)
        if len(calls):
            payload = _decode_payloads(calls, frames.schemas)
            info = _nccl_launch_info(calls, payload)
            rows, src = enclosing(calls)
            coll = info["coll"].to_numpy(dtype=object)[src]
            # a group of sends and receives guessed to be an all-to-all defers to a framework
            # annotation that names a point-to-point exchange
            codes, uniques = pd.factorize(annotation[rows])
            p2p = (
                np.array([bool(_P2P_ANNOTATION.search(a)) and not _ALL_TO_ALL.search(a) for a in uniques], dtype=bool)[
                    codes
                ]
                if len(rows)
                else np.zeros(0, dtype=bool)
            )
            coll = np.where(info["heuristic"].to_numpy(dtype=bool)[src] & p2p, "send_recv", coll).astype(object)
            collective[rows] = coll
            b = info["nbytes"].to_numpy(dtype=np.float64)[src]
            nbytes[rows] = np.where(np.isnan(b), nbytes[rows], b)
            members = _comm_members(calls, payload, act, dev_ids, gpus, host_index)
            if members:
                group[rows] = _groups(
                    coll,
                    info["comm"].to_numpy(dtype=np.float64)[src],
                    info["peers"].to_numpy(dtype=object)[src],
                    global_id[rows],
                    members,
                )

        _inherit(act, has_launch, collective, annotation)

        # XLA: the thunk names the op (and, in newer XLA, module and program); the module range fills the rest
        for family in ("thunk_kv", "module_kv"):
            sel = nv.loc[nv[family] != ""]
            if not len(sel):
                continue
            rows, src = enclosing(sel)
            fields = _kv_columns(sel[family].to_numpy(dtype=object)[src])
            if family == "module_kv" and "hlo_module" in fields:
                module_runs = _module_runs(host, dev_names[local[rows]], fields["hlo_module"], src, act, rows)
            if family == "thunk_kv" and "hlo_op" in fields:
                hlo_op[rows] = fields["hlo_op"]
            if "hlo_module" in fields:
                empty = hlo_module[rows] == ""
                hlo_module[rows[empty]] = fields["hlo_module"][empty]
            if "program_id" in fields:
                empty = program_id[rows] < 0
                program_id[rows[empty]] = _ints(pd.Series(fields["program_id"]).replace("", None), len(rows))[empty]

    end_ns = _ints(act["end"], n)
    events = make_table(
        {
            "host": host,
            "device": dev_names[local] if n else np.empty(0, dtype=object),
            "global_id": global_id.astype(np.int64),
            "gpus_per_domain": n_gpus,
            "stream": _stream_names(_ints(act["streamId"], n)),
            "name": act["name"].to_numpy(dtype=object),
            "start_ns": _ints(act["start"], n),
            "end_ns": end_ns,
            "activity": act["activity"].to_numpy(dtype=object),
            "copy_kind": act["copy_kind"].to_numpy(dtype=object),
            "hlo_module": hlo_module,
            "hlo_op": hlo_op,
            "program_id": program_id,
            "collective": collective,
            "annotation": annotation,
            "bytes": nbytes,
            "group": group,
            "source": "nsys",
            # §9: the launching runtime call's return and thread (the replay's launch bound); a call that
            # returned after its activity ended waited for it (a synchronous copy): the host issued it at the
            # call's start, and moves with the synchronization before that
            "launch_ns": np.where(launch_known, np.where(launch_end > end_ns, launch_t, launch_end), -1),
            "launch_thread": np.where(launch_known, launch_tid.astype(str).astype(object), ""),
        },
        n=n,
    )
    clean = nv["clean"].astype(str) if len(nv) else pd.Series([], dtype=object)
    if clean.str.contains(r"XlaModule:#|Thunk:#", regex=True).any():
        framework = "jax"
    elif clean.str.contains(r"^aten::|ProfilerStep#|^nccl:|c10d", regex=True).any():
        framework = "pytorch"
    else:
        framework = "unknown"
    return Trace(
        events=events,
        path=str(path),
        format="nsys",
        markers=pd.concat([_step_markers(nv, host), module_runs], ignore_index=True),
        framework=framework,
        annotations=tuple(str(c) for c in pd.unique(clean.to_numpy(dtype=object))),
        job=Job(hosts=(host,) if frames.hostname else ()),
        devices={str(dev_names[i]): int(host_index * n_gpus + i) for i in range(n_gpus)},
        device_models={f"{host}/GPU:{g}": frames.gpu_names[g] for g in gpus if g in frames.gpu_names},
        host_syncs=_host_syncs(frames, act, dev_ids, host),
    )


def _host_syncs(frames: _Frames, act: pd.DataFrame, dev_ids: np.ndarray, host: str) -> pd.DataFrame:
    """§9: the runtime calls that waited for the device (``SYNC_CALL``) as device, thread, start, end (the
    thread as ``launch_thread`` writes it). The call's device: its CUPTI_ACTIVITY_KIND_SYNCHRONIZATION row
    (same correlationId and process; ``deviceId``), else the activity it launched (a synchronous copy's
    memcpy: same launching thread and call start), else the only device its process has activity on;
    calls on no device of the file are left out (the replay could not place them)."""
    calls = frames.sync_calls
    out = pd.DataFrame(
        {
            "device": pd.Series(dtype=object),
            "thread": pd.Series(dtype=object),
            "start_ns": pd.Series(dtype=np.int64),
            "end_ns": pd.Series(dtype=np.int64),
        }
    )
    if not len(calls) or not len(act):
        return out
    m = len(calls)
    start, s_null, s_bad = _numeric(calls["start"])
    end, e_null, e_bad = _numeric(calls["end"])
    tid = _ints(calls["tid"], m)
    corr = _ints(calls["corr"], m, -2)
    pid = np.where(tid >= 0, tid >> _PID_SHIFT, -1)
    device = np.full(m, -1, dtype=np.int64)

    def fill(keys: pd.DataFrame, lookup: pd.DataFrame, on: list[str]) -> None:
        # left-join the calls still without a device onto lookup(on -> deviceId), first match wins
        todo = device < 0
        if not todo.any() or not len(lookup):
            return
        first = lookup.drop_duplicates(on, keep="first")
        got = keys.loc[todo, on].merge(first, on=on, how="left", sort=False)["deviceId"]
        device[todo] = got.fillna(-1).to_numpy(dtype=np.int64)

    keys = pd.DataFrame({"corr": corr, "pid": pid, "tid": tid, "start": start})
    if len(frames.sync_devices):
        fill(keys, frames.sync_devices, ["corr", "pid"])
    launched = pd.notna(act["launch_tid"]).to_numpy() & pd.notna(act["launch_start"]).to_numpy()
    if launched.any():
        n = len(act)
        fill(
            keys,
            pd.DataFrame(
                {
                    "tid": _ints(act["launch_tid"], n)[launched],
                    "start": _ints(act["launch_start"], n)[launched],
                    "deviceId": dev_ids[launched],
                }
            ),
            ["tid", "start"],
        )
    a_pid = _ints(act["pid"], len(act))
    per_pid = pd.DataFrame({"pid": a_pid, "deviceId": dev_ids}).drop_duplicates()
    counts = per_pid["pid"].map(per_pid["pid"].value_counts())
    fill(keys, per_pid.loc[(counts == 1).to_numpy() & (per_pid["pid"] >= 0).to_numpy()], ["pid"])

    ok = (device >= 0) & np.isin(device, dev_ids) & (tid >= 0) & ~(s_null | s_bad | e_null | e_bad) & (end >= start)
    # one call exported twice (old schemas: an outer and an inner row, same thread and correlation id): the
    # outer one, which returned last
    twice = pd.DataFrame({"tid": tid, "corr": corr, "end": end}).sort_values("end", ascending=False, kind="stable")
    twice = twice[twice["corr"].to_numpy() >= 0]
    ok[twice.index[twice.duplicated(["tid", "corr"], keep="first")].to_numpy()] = False
    return pd.DataFrame(
        {
            "device": np.array([f"{host}/GPU:{d}" for d in device[ok].tolist()], dtype=object),
            "thread": tid[ok].astype(str).astype(object),
            "start_ns": start[ok],
            "end_ns": end[ok],
        }
    )


def _stream_names(ids: np.ndarray) -> np.ndarray:
    """ "stream <id>" per activity, "" where the export has no stream id."""
    uniq, inv = np.unique(ids, return_inverse=True)
    names = np.array([f"stream {i}" if i >= 0 else "" for i in uniq], dtype=object)
    return names[inv.reshape(-1)] if len(ids) else np.empty(0, dtype=object)


def _inherit(act: pd.DataFrame, has_launch: np.ndarray, collective: np.ndarray, annotation: np.ndarray) -> None:
    """An activity whose launch is not in the capture (a window cut before it) takes the
    collective and annotation that *every* attributed launch of the same kernel, on the
    same process, GPU and stream, agrees on; nothing when they disagree."""
    n = len(act)
    orphan = np.ones(n, dtype=bool)
    orphan[has_launch] = False
    if not orphan.any() or not (collective != "").any():
        return
    key, _ = pd.factorize(
        pd.MultiIndex.from_arrays(
            [
                _ints(act["pid"], n),
                _ints(act["deviceId"], n),
                _ints(act["streamId"], n),
                act["name"].to_numpy(dtype=object),
            ]
        )
    )
    seen = pd.DataFrame({"key": key[has_launch], "coll": collective[has_launch], "ann": annotation[has_launch]})
    seen = seen[seen["coll"] != ""]
    if not len(seen):
        return
    pairs = seen.drop_duplicates()
    agreed = pairs[~pairs["key"].duplicated(keep=False)].set_index("key")
    # agreement must also cover launches of that kernel that no NCCL range enclosed
    plain = pd.Series(key[has_launch][collective[has_launch] == ""]).unique()
    agreed = agreed.drop(index=agreed.index.intersection(pd.Index(plain)))
    rows = np.flatnonzero(orphan & np.isin(key, agreed.index.to_numpy()))
    if len(rows):
        look = agreed.reindex(key[rows])
        collective[rows] = look["coll"].to_numpy(dtype=object)
        annotation[rows] = look["ann"].to_numpy(dtype=object)


def _kv_columns(kv: np.ndarray) -> dict[str, np.ndarray]:
    """ "hlo_op=fusion.3,hlo_module=jit_f,program_id=7" strings -> one column per key (per unique string)."""
    codes, uniques = pd.factorize(kv)
    parsed = [dict(_KV.findall(u)) for u in uniques]
    keys = {k for p in parsed for k in p}
    return {k: np.array([p.get(k, "") for p in parsed], dtype=object)[codes] for k in keys}


def _nvtx_ranges(frames: _Frames, step_marker: re.Pattern[str] | None = None) -> pd.DataFrame:
    """The NVTX ranges of interest, with their family flags; other rows dropped."""
    nv = frames.nvtx
    if not len(nv):
        return pd.DataFrame()
    nv = nv[nv["start"].notna() & nv["end"].notna() & nv["text"].notna()].copy()
    nv["start"] = _ints(nv["start"], len(nv))
    nv["end"] = _ints(nv["end"], len(nv))
    nv["tid"] = _ints(nv["tid"], len(nv), 0)
    nv["domain"] = _ints(nv["domain"], len(nv), 0)
    nv = nv[nv["end"] >= nv["start"]]
    # the SQL pre-filter, as one vectorized regex (parquet input has no SQL to do it)
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = pa.array(nv["text"].astype(str).to_numpy(dtype=object), type=pa.string())
    wanted = pc.match_substring_regex(texts, _LIKE_REGEX, ignore_case=True).to_numpy(zero_copy_only=False)
    if step_marker is not None:
        wanted = wanted | pc.match_substring_regex(texts, step_marker.pattern).to_numpy(zero_copy_only=False)
    nv = nv[wanted]
    # classify each distinct text once
    codes, uniques = pd.factorize(nv["text"].astype(str).to_numpy(dtype=object))
    clean = np.array([_TORCH_SUFFIX.sub("", u).strip() for u in uniques], dtype=object)
    nccl = np.array([bool(NCCL_CALL.match(c)) for c in clean], dtype=bool)
    vocab = vocabulary()
    annot = np.array([vocab.is_comm_range(c) for c in clean], dtype=bool)
    thunk = np.array([(m.group(1) if (m := _THUNK.search(c)) else "") for c in clean], dtype=object)
    module = np.array([(m.group(1) if (m := _XLA_MODULE.search(c)) else "") for c in clean], dtype=object)
    step = np.array(
        [bool(vocab.step_range.match(c)) or bool(step_marker and step_marker.search(c)) for c in clean], dtype=bool
    )
    nv["clean"] = clean[codes]
    domain_names = np.array(
        [frames.domains.get(int(d), "").strip().lower() for d in nv["domain"].unique()], dtype=object
    )
    nccl_domain = {d: name in _NCCL_DOMAINS for d, name in zip(nv["domain"].unique(), domain_names)}
    in_nccl_domain = nv["domain"].map(nccl_domain).to_numpy(dtype=bool)
    nv["is_nccl"] = nccl[codes] & in_nccl_domain
    nv["is_annotation"] = annot[codes] & ~nv["is_nccl"].to_numpy()
    nv["thunk_kv"] = thunk[codes]
    nv["module_kv"] = module[codes]
    nv["is_step"] = step[codes]
    keep = nv["is_nccl"] | nv["is_annotation"] | (nv["thunk_kv"] != "") | (nv["module_kv"] != "") | nv["is_step"]
    return nv[keep].reset_index(drop=True)


def _innermost(
    r_tid: np.ndarray, r_start: np.ndarray, r_end: np.ndarray, q_tid: np.ndarray, q_t: np.ndarray
) -> np.ndarray:
    """For each query (thread, t), the index of the range on that thread that contains t and
    started last (the innermost, when ranges nest), or -1.

    Ranges sorted by (thread, start); the candidate is the last one starting at or
    before t; if it has ended, a sparse table of running maxima of the ends finds,
    in log2(n) vectorized jumps, the last earlier range still open at t.
    """
    n, m = len(r_start), len(q_t)
    out = np.full(m, -1, dtype=np.int64)
    if n == 0 or m == 0:
        return out
    codes, _ = pd.factorize(np.concatenate([np.asarray(r_tid, dtype=np.int64), np.asarray(q_tid, dtype=np.int64)]))
    rc, qc = codes[:n], codes[n:]
    r_start = np.asarray(r_start, dtype=np.int64)
    r_end = np.asarray(r_end, dtype=np.int64)
    q_t = np.asarray(q_t, dtype=np.int64)
    order = np.lexsort((-r_end, r_start, rc))
    rc_s, rs_s, re_s = rc[order], r_start[order], r_end[order]
    # merge ranges and queries by (thread, time); a range starting at t counts as started
    kind = np.r_[np.zeros(n, dtype=np.int8), np.ones(m, dtype=np.int8)]
    merged = np.lexsort((kind, np.r_[rs_s, q_t], np.r_[rc_s, qc]))  # stable: ranges keep their order
    is_range = kind[merged] == 0
    last = np.cumsum(is_range) - 1
    cand = np.empty(m, dtype=np.int64)
    cand[merged[~is_range] - n] = last[~is_range]
    valid = cand >= 0
    valid[valid] = rc_s[cand[valid]] == qc[valid]
    p = np.where(valid, cand, -1)
    open_now = valid & (re_s[np.maximum(p, 0)] > q_t)
    pending = valid & ~open_now
    if pending.any():
        uniq_end = np.unique(re_s)
        ends = np.searchsorted(uniq_end, re_s).astype(np.int32)
        need = np.searchsorted(uniq_end, q_t, side="right")  # end > t  <=>  rank(end) >= need
        levels = [ends]
        while (1 << len(levels)) <= n:
            prev, half = levels[-1], 1 << (len(levels) - 1)
            nxt = prev.copy()
            nxt[half:] = np.maximum(prev[half:], prev[:-half])
            levels.append(nxt)
        idx = np.flatnonzero(pending)
        pos, thr = p[idx], need[idx]
        for k in range(len(levels) - 1, -1, -1):
            live = pos >= 0
            block = levels[k][np.maximum(pos, 0)]
            jump = live & (block < thr)
            pos = np.where(jump, pos - (1 << k), pos)
        found = pos >= 0
        found[found] = rc_s[pos[found]] == qc[idx[found]]
        p[idx] = np.where(found, pos, -1)
        open_now[idx] = found
    out[open_now] = order[p[open_now]]
    return out


# ---- NCCL ---------------------------------------------------------------------------------------


def _collective_of(text: np.ndarray) -> np.ndarray:
    """ncclAllReduce -> "allreduce"; non-collective NCCL calls -> ""."""
    codes, uniques = pd.factorize(text)
    names = np.array([_NCCL_COLLECTIVES.get(u[4:].lower(), "") for u in uniques], dtype=object)
    return names[codes]


def _joined_peers(group: np.ndarray, peer: np.ndarray) -> pd.Series:
    """Per group, its distinct peers in ascending order joined by commas ("1,3"), indexed by group: one sort
    and a join per group over plain lists (a pandas aggregation called Python once per group)."""
    order = np.lexsort((peer, group))
    g, p = group[order], peer[order]
    keep = np.ones(len(g), dtype=bool)
    keep[1:] = (g[1:] != g[:-1]) | (p[1:] != p[:-1])
    g, p = g[keep], p[keep]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], len(g)]
    text = [str(int(v)) for v in p.tolist()]
    return pd.Series(
        [",".join(text[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)],
        index=g[starts],
        dtype=object,
    )


def _nccl_launch_info(calls: pd.DataFrame, payload: pd.DataFrame) -> pd.DataFrame:
    """Per NCCL call range: the collective, bytes, communicator and peers of a kernel launched in it.

    A call inside ncclGroupStart/End launches nothing itself: the closing
    ncclGroupEnd launches for the whole group. Depth is counted per thread and
    clipped at zero, so a capture that starts inside a group does not shift every
    later group.
    """
    n = len(calls)
    text = calls["clean"].to_numpy(dtype=object)
    order = np.lexsort((calls["start"].to_numpy(), calls["tid"].to_numpy()))
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    t = text[order]
    tid, _ = pd.factorize(calls["tid"].to_numpy()[order])
    is_gs, is_ge = t == "ncclGroupStart", t == "ncclGroupEnd"
    delta = is_gs.astype(np.int64) - is_ge.astype(np.int64)
    g = pd.Series(delta).groupby(tid)
    s = g.cumsum().to_numpy()
    low = pd.Series(s).groupby(tid).cummin().to_numpy()
    depth_after = s - np.minimum(low, 0)
    depth_before = pd.Series(depth_after).groupby(tid).shift(1, fill_value=0).to_numpy()
    outer_start = is_gs & (depth_before == 0)
    group_no = pd.Series(outer_start.astype(np.int64)).groupby(tid).cumsum().to_numpy()
    in_group = depth_before > 0
    closes = is_ge & in_group & (depth_after == 0)
    gkey = np.where(in_group, tid.astype(np.int64) * (n + 1) + group_no, -1)

    coll = _collective_of(t)
    pay = payload.iloc[order].reset_index(drop=True)
    peer = pay["peer"].to_numpy(dtype=np.float64)
    nb = pay["nbytes"].to_numpy(dtype=np.float64)
    comm = pay["comm"].to_numpy(dtype=np.float64)

    out_coll = np.where(~in_group, coll, "").astype(object)  # a call outside a group launches for itself
    out_bytes = np.where(~in_group, nb, np.nan)
    out_comm = np.where(~in_group, comm, np.nan)
    out_peers = np.where(
        ~in_group & np.isin(coll, ("send", "recv")) & ~np.isnan(peer),
        pd.Series(peer).fillna(-1).astype(np.int64).astype(str).to_numpy(),
        "",
    ).astype(object)
    heuristic = np.zeros(n, dtype=bool)

    member = in_group & (coll != "")
    if member.any() and closes.any():
        f = pd.DataFrame(
            {
                "g": gkey[member],
                "coll": coll[member],
                "peer": peer[member],
                "nb": nb[member],
                "comm": comm[member],
            }
        )
        f["send"] = f["coll"] == "send"
        f["recv"] = f["coll"] == "recv"
        f["other"] = ~(f["send"] | f["recv"])
        f["send_nb"] = f["nb"].where(f["send"])
        f["recv_nb"] = f["nb"].where(f["recv"])
        f["send_peer"] = f["peer"].where(f["send"])
        f["recv_peer"] = f["peer"].where(f["recv"])
        f["other_coll"] = f["coll"].where(f["other"])
        grp = f.groupby("g", sort=False)
        agg = pd.DataFrame(
            {
                "n_send": grp["send"].sum(),
                "n_recv": grp["recv"].sum(),
                "n_other": grp["other"].sum(),
                "send_nb": grp["send_nb"].sum(min_count=1),
                "recv_nb": grp["recv_nb"].sum(min_count=1),
                "other_nb": grp["nb"].max(),
                "n_peer": grp["peer"].count(),
                "n": grp["coll"].size(),
                "send_peers": grp["send_peer"].nunique(),
                "recv_peers": grp["recv_peer"].nunique(),
                "all_peers": grp["peer"].nunique(),
                "comms": grp["comm"].nunique(),
                "comm": grp["comm"].first(),
            }
        )
        others = f[f["other"]]
        mode = (
            others.groupby("g", sort=False)["coll"].agg(lambda c: c.value_counts().index[0])
            if len(others)
            else pd.Series(dtype=object)
        )
        agg["other_coll"] = mode.reindex(agg.index)
        p2p = agg["n_other"] == 0
        peers_known = (agg["n_peer"] == agg["n"]) & p2p
        same_sets = (agg["send_peers"] == agg["recv_peers"]) & (agg["all_peers"] == agg["send_peers"])
        a2a_known = peers_known & same_sets & (agg["send_peers"] >= 2)
        a2a_guess = ~peers_known & (agg["n_send"] >= 2) & (agg["n_send"] == agg["n_recv"])
        kind = np.select(
            [~p2p, a2a_known | a2a_guess, (agg["n_send"] > 0) & (agg["n_recv"] > 0), agg["n_send"] > 0],
            [agg["other_coll"].fillna("").to_numpy(dtype=object), "all_to_all", "send_recv", "send"],
            default="recv",
        )
        agg["kind"] = kind
        agg["heuristic"] = (a2a_guess & p2p).to_numpy()
        agg["bytes"] = np.where(p2p, agg["send_nb"].fillna(agg["recv_nb"]), agg["other_nb"])
        agg["comm"] = agg["comm"].where(agg["comms"] == 1)
        agg["peers"] = ""
        if peers_known.any():
            known = f.loc[f["g"].isin(agg.index[peers_known]) & f["peer"].notna(), ["g", "peer"]]
            agg.loc[peers_known, "peers"] = _joined_peers(
                known["g"].to_numpy(dtype=np.int64), known["peer"].to_numpy(dtype=np.float64)
            )
        rows = np.flatnonzero(closes)
        look = agg.reindex(gkey[rows])
        out_coll[rows] = look["kind"].fillna("").to_numpy(dtype=object)
        out_bytes[rows] = look["bytes"].to_numpy(dtype=np.float64)
        out_comm[rows] = look["comm"].to_numpy(dtype=np.float64)
        out_peers[rows] = look["peers"].fillna("").to_numpy(dtype=object)
        heuristic[rows] = look["heuristic"].fillna(False).to_numpy(dtype=bool)
    return pd.DataFrame(
        {
            "coll": out_coll[inv],
            "nbytes": out_bytes[inv],
            "comm": out_comm[inv],
            "peers": out_peers[inv],
            "heuristic": heuristic[inv],
        }
    )


def _decode_payloads(calls: pd.DataFrame, schemas: pd.DataFrame | None) -> pd.DataFrame:
    """NCCL NVTX payload fields per call (NaN where not exported): from ``jsonText`` or
    from ``binaryData`` decoded with the file's own payload schemas."""
    n = len(calls)
    out = pd.DataFrame({f: np.full(n, np.nan) for f in PAYLOAD_FIELDS})
    if "blob" in calls and schemas is not None and len(schemas):
        _decode_blobs(calls["blob"], schemas, out)
    if "json" in calls:
        js = calls["json"]
        rows = np.flatnonzero(js.notna().to_numpy() & (js.astype(str).str.len().to_numpy() > 1))
        # one json.loads per NCCL call that carries a payload: the format has no columnar form
        for r in rows:
            for key, value in _json_leaves(js.iloc[r]):
                name = _payload_field(key)
                if name is not None and pd.isna(out.at[r, name]):  # type: ignore[arg-type]
                    out.at[r, name] = value
    return out


def _json_leaves(text: object) -> list[tuple[str, float]]:
    try:
        doc = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return []
    leaves: list[tuple[str, float]] = []
    stack = [("", doc)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            # {"name": "Peer rank", "value": 3} style entries name themselves
            if isinstance(value.get("name"), str) and "value" in value and not isinstance(value["value"], dict):
                stack.append((value["name"], value["value"]))
            stack.extend(value.items())
        elif isinstance(value, list):
            stack.extend((key, v) for v in value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            leaves.append((key, float(value)))
        elif isinstance(value, str) and re.fullmatch(r"-?\d+|0x[0-9a-fA-F]+", value.strip()):
            leaves.append((key, float(int(value.strip(), 0))))
    return leaves


def _schema_layouts(schemas: pd.DataFrame) -> dict[tuple[int, int], list[tuple[str, int, int, bool]]]:
    """(domain, schema) -> [(field, offset, size, signed)] for the NCCL fields it holds."""
    layouts: dict[tuple[int, int], list[tuple[str, int, int, bool]]] = {}
    s = schemas.sort_values(["domainId", "schemaId", "idx"])
    for (dom, sch), entries in s.groupby(["domainId", "schemaId"], sort=False):
        fields: list[tuple[str, int, int, bool]] = []
        pos: int | None = 0
        for typ, name, off in zip(
            entries["type"], entries["name"], entries["offset"] if "offset" in entries else [None] * len(entries)
        ):
            size, signed = _NVTX_TYPES.get(int(typ), (0, False)) if pd.notna(typ) else (0, False)
            explicit = pd.to_numeric(pd.Series([off]), errors="coerce").iloc[0]
            if pd.notna(explicit) and (int(explicit) > 0 or pos == 0):
                pos = int(explicit)
            elif pos is not None and size:
                pos = -(-pos // size) * size  # self-aligned, as NVTX lays out an implicit offset
            name_field = _payload_field(str(name or ""))
            if pos is not None and size and name_field:
                fields.append((name_field, pos, size, signed))
            pos = pos + size if (pos is not None and size) else None  # unknown size: next offset unknown
        if fields:
            layouts[(int(dom), int(sch))] = fields  # type: ignore[call-overload]
    return layouts


def _decode_blobs(blobs: pd.Series, schemas: pd.DataFrame, out: pd.DataFrame) -> None:
    import pyarrow as pa

    values = blobs.to_numpy(dtype=object)
    if any(isinstance(v, str) for v in values):
        # SQLite hands blobs over as hex text (one conversion per NCCL call that carries a payload)
        values = np.array([_unhex(v) if isinstance(v, str) else v for v in values], dtype=object)
    try:
        arr = pa.array(values, type=pa.binary(), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # mixed column (text where a blob was expected): keep the blobs only
        arr = pa.array([v if isinstance(v, (bytes, bytearray)) else None for v in values], type=pa.binary())
    if arr.null_count == len(arr):
        return
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    rows = np.flatnonzero(lengths >= _BLOB_HEADER)
    if not len(rows):
        return
    header = data[offsets[rows, None] + np.arange(_BLOB_HEADER)].copy().view("<u8")  # (rows, 4)
    dom, sch, size, poff = header[:, 0], header[:, 1], header[:, 2], header[:, 3]
    fits = (poff >= _BLOB_HEADER) & (poff + size <= lengths[rows].astype(np.uint64))
    layouts = _schema_layouts(schemas)
    for (d, sc), fields in layouts.items():
        sel = fits & (dom == np.uint64(d)) & (sch == np.uint64(sc))
        if not sel.any():
            continue
        r = rows[sel]
        base = offsets[r] + poff[sel].astype(np.int64)
        for name, off, width, signed in fields:
            inside = off + width <= size[sel].astype(np.int64)
            if not inside.any():
                continue
            raw_bytes = data[base[inside, None] + off + np.arange(width)].copy()
            values = raw_bytes.view(f"<{'i' if signed else 'u'}{width}").ravel().astype(np.float64)
            out.loc[r[inside], name] = values


def _unhex(text: str) -> bytes | None:
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


def _comm_members(
    calls: pd.DataFrame,
    payload: pd.DataFrame,
    act: pd.DataFrame,
    dev_ids: np.ndarray,
    gpus: np.ndarray,
    host_index: int,
) -> dict[int, dict[int, int]]:
    """Communicator -> {comm rank: global id}, from the payloads of the ncclCommInit* calls:
    the rank's process is found by thread, its GPU by the activity that process launched."""
    init = payload["comm"].notna() & payload["rank"].notna() & payload["nranks"].notna()
    if not init.any():
        return {}
    pids = _ints(act["pid"], len(act))
    launch_pid = np.where(
        pd.notna(act["launch_tid"]).to_numpy(), _ints(act["launch_tid"], len(act)) >> _PID_SHIFT, pids
    )
    by_pid = pd.DataFrame({"pid": launch_pid, "dev": dev_ids}).drop_duplicates()
    one = by_pid.groupby("pid")["dev"].agg(lambda d: int(d.iloc[0]) if len(d) == 1 else -1)
    p = payload[init]
    tids = calls.loc[init, "tid"].to_numpy(dtype=np.int64) >> _PID_SHIFT
    devs = one.reindex(tids).fillna(-1).to_numpy(dtype=np.int64)
    members: dict[int, dict[int, int]] = {}
    nranks: dict[int, int] = {}
    for comm, rank, size, dev in zip(p["comm"], p["rank"], p["nranks"], devs):
        if dev < 0 or dev not in gpus:
            continue
        gid = host_index * len(gpus) + int(np.searchsorted(gpus, dev))
        members.setdefault(int(comm), {})[int(rank)] = gid
        nranks[int(comm)] = int(size)
    # only communicators whose every rank is in this file name a usable group
    return {c: m for c, m in members.items() if len(m) == nranks[c]}


def _groups(
    coll: np.ndarray, comm: np.ndarray, peers: np.ndarray, gid: np.ndarray, members: dict[int, dict[int, int]]
) -> np.ndarray:
    """Comma-separated global ids of each launch's communicating group ("" unknown)."""
    out = np.full(len(coll), "", dtype=object)
    key = pd.MultiIndex.from_arrays(
        [coll.astype(str), np.nan_to_num(comm, nan=-1).astype(np.int64), peers.astype(str), gid]
    )
    codes, uniques = pd.factorize(key)
    values = np.full(len(uniques), "", dtype=object)
    for i, (name, c, peer_list, own) in enumerate(uniques):
        ranks = members.get(int(c))
        if not name or ranks is None:
            continue
        if name in ("send", "recv", "send_recv", "all_to_all") and peer_list:
            wanted = [int(x) for x in peer_list.split(",")]
            if any(r not in ranks for r in wanted):
                continue
            ids = {int(own), *(ranks[r] for r in wanted)}
        elif name in ("send", "recv", "send_recv"):
            continue  # a p2p exchange whose peers were not exported
        else:
            ids = set(ranks.values())
        values[i] = ",".join(str(x) for x in sorted(ids))
    out[:] = values[codes]
    return out


# ---- steps --------------------------------------------------------------------------------------


def _module_runs(
    host: str, devices: np.ndarray, modules: np.ndarray, ranges: np.ndarray, act: pd.DataFrame, rows: np.ndarray
) -> pd.DataFrame:
    """``module_launch`` markers: per device, one per ``XlaModule:#hlo_module=...#`` range instance (one
    execution of the module on the host) that launched activity, spanning what it launched."""
    frame = pd.DataFrame(
        {
            "device": devices,
            "module": modules,
            "range": ranges,
            "start": _ints(act["start"], len(act))[rows],
            "end": _ints(act["end"], len(act))[rows],
        }
    )
    frame = frame[frame["module"] != ""]
    if frame.empty:
        return empty_markers()
    runs = frame.groupby(["device", "range", "module"], sort=True).agg(start=("start", "min"), end=("end", "max"))
    return make_markers(
        host=host,
        device=runs.index.get_level_values("device").to_numpy(dtype=object),
        kind="module_launch",
        name=runs.index.get_level_values("module").to_numpy(dtype=object),
        start_ns=runs["start"].to_numpy(dtype=np.int64),
        end_ns=runs["end"].to_numpy(dtype=np.int64),
    )


def _step_markers(nv: pd.DataFrame, host: str) -> pd.DataFrame:
    """``step`` markers (device "": every device of the host) for NVTX ranges named like steps."""
    if not len(nv) or not nv["is_step"].any():
        return empty_markers()
    s = nv.loc[nv["is_step"], ["clean", "start", "end"]].sort_values("start", kind="stable")
    number = pd.Series([trailing_number(c) for c in s["clean"]], index=s.index)
    number = number.where(number >= 0)
    # ranges without a number (train_step) are numbered by their order, per name
    ordinal = s.groupby("clean").cumcount()
    steps = number.fillna(ordinal).to_numpy(dtype=np.int64)
    return make_markers(
        host=host,
        device="",
        kind="step",
        name=s["clean"].to_numpy(dtype=object),
        start_ns=s["start"].to_numpy(dtype=np.int64),
        end_ns=s["end"].to_numpy(dtype=np.int64),
        number=steps,
    )
