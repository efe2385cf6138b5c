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

The package, one concern a module: ``export`` (a ``.nsys-rep`` through ``nsys export``), ``sqlite`` and
``parquet`` (the two export formats, read into one :class:`~.tables.Frames`), ``tables`` (the tables and
what both formats read alike), ``columns`` (values as numbers), ``nvtx`` (range families, the innermost
range of a launch), ``payloads`` (NCCL's NVTX payloads and communicators), ``events`` (the event
table), ``steps`` (step and module-execution markers). What the rocpd reader shares with it is public
beside it: ``readers.sqlite_files`` (read-only SQLite) and ``readers.nccl_calls`` (NCCL calls -> launches).
"""

from __future__ import annotations

from pathlib import Path

from ...core.steps import step_marker_pattern
from ...core.trace import Trace
from ...errors import InputError
from ..base import ReadContext, sniff
from ..sqlite_files import one_line
from .events import build
from .export import EXPORT_TIMEOUT_ENV, export_timeout, parse_report, signal_of
from .parquet import ParquetTables, parquet_frames
from .sqlite import parse_sqlite
from .tables import ACTIVITY_TABLES, Unplaceable, report_stem

__all__ = ["EXPORT_TIMEOUT_ENV", "export_timeout", "read", "read_parquet_dir", "signal_of"]


def read(path: Path, context: ReadContext | None = None) -> Trace:
    """Read one Nsight Systems export (``.sqlite``, parquet folder) or report (``.nsys-rep``)."""
    context = context or ReadContext()
    host_index = context.placement.host_index
    marker = step_marker_pattern(context.options.step_marker)
    path = Path(path)
    if path.is_dir():
        return read_parquet_dir(path, context)
    fmt = context.kind or sniff(path)
    if fmt == "sqlite":
        return parse_sqlite(path, path, report_stem(path), host_index, marker)
    if fmt == "nsys-rep":
        return parse_report(path, host_index, marker)
    raise InputError(path, "not an Nsight Systems SQLite export or .nsys-rep report")


def read_parquet_dir(folder: Path, context: ReadContext | None = None) -> Trace:
    """Read a parquet folder written by ``nsys export --type parquetdir``."""
    context = context or ReadContext()
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(folder, "not a folder of parquet tables")
    tables = ParquetTables(folder)
    if not tables.names & set(ACTIVITY_TABLES):
        raise InputError(folder, "no CUPTI activity tables")
    try:
        frames = parquet_frames(tables)
    except Unplaceable as exc:
        raise InputError(folder, str(exc)) from None
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(folder, f"cannot read the parquet tables: {one_line(exc)}") from None
    marker = step_marker_pattern(context.options.step_marker)
    trace = build(frames, frames.hostname or report_stem(folder), context.placement.host_index, folder, marker)
    return trace.replace(format="nsys-parquet")
