"""The Nsight Systems tables moeprof reads, and what both export formats (SQLite, parquet) hand the event
builder alike: the :class:`Frames` contract, the small tables (enums, host, GPUs, payload schemas), the
host synchronizations beside the activities."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .columns import ints, numeric

if TYPE_CHECKING:
    from .parquet import ParquetTables
    from .sqlite import SqliteTables


KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"


MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"


RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


SYNCHRONIZATION = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"


NVTX = "NVTX_EVENTS"


STRINGS = "StringIds"


ACTIVITY_TABLES = (KERNEL, MEMCPY, MEMSET)


NAME_COLUMNS = ("demangledName", "shortName", "mangledName")  # preferred first


DOMAIN_CREATE = 75  # NvtxDomainCreate in ENUM_NSYS_EVENT_TYPE, the same in every schema seen


PID_SHIFT = 24  # globalTid = globalPid | tid: the low 24 bits are the thread


# CUDA_MEMCPY_KIND_* of ENUM_CUDA_MEMCPY_OPER, for exports that lack the enum table
MEMCPY_ENUM_FALLBACK = {
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


MEMCPY_SIDE = {"H": "H", "D": "D", "A": "D", "P": "P"}  # an array lives in device memory


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


SYNC_LIKE = ("cu%Synchronize%", "cu%Memcpy%")  # SQL pre-filter of StringIds (a superset of SYNC_CALL)


@dataclass
class Frames:
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


class Unplaceable(Exception):
    """An activity table with rows but without the columns that place them (refused, naming the file)."""


def placing_columns(t: SqliteTables | ParquetTables, table: str) -> bool:
    """Whether ``table`` has start, end and deviceId; a table with rows that lacks one is refused (its
    activities would be left out without a word), an empty or absent one is skipped."""
    cols = t.columns(table)
    missing = sorted({"start", "end", "deviceId"} - set(cols))
    if missing and cols and t.rows(table):
        raise Unplaceable(f"{table} has rows but no {' or '.join(missing)} column: its activities cannot be placed")
    return not missing


def matching_calls(calls: pd.DataFrame, names: np.ndarray) -> pd.DataFrame:
    """The rows of ``calls`` whose name matches SYNC_CALL (each distinct name tried once)."""
    if not len(calls):
        return pd.DataFrame()
    codes, uniques = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=True)
    hit = np.array([isinstance(v, str) and bool(SYNC_CALL.match(v)) for v in uniques], dtype=bool)
    keep = np.zeros(len(calls), dtype=bool)
    keep[codes >= 0] = hit[codes[codes >= 0]]
    return calls.loc[keep, ["start", "end", "tid", "corr"]].reset_index(drop=True)


def beside_activities(frame: Callable[[str, list[str]], pd.DataFrame], sync_calls: pd.DataFrame) -> dict[str, Any]:
    """The :class:`Frames` fields both export formats read the same way: the small tables, and the host
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
            "corr": ints(sync["correlationId"], n, -2),
            "pid": ints(sync["globalPid"], n) >> PID_SHIFT if "globalPid" in sync else np.full(n, -1),
            "deviceId": ints(sync["deviceId"], n),
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
    ids, null, bad = numeric(table["id"])
    names = table["name"].to_numpy(dtype=object)
    return {int(i): str(v) for i, v, skip in zip(ids, names, null | bad) if not skip and isinstance(v, str)}


def report_stem(path: Path) -> str:
    name = path.name
    for suffix in (".sqlite", ".nsys-rep", ".parquetdir", ".parquet"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or name
    return path.stem or name
