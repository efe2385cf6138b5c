"""The readers in the order they are tried, and :func:`read_file`: one trace file read by the reader its
content calls for (each reader says from the sniffed content, and the name, whether the file is its format)."""

from __future__ import annotations

import gc
import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..core.trace import Trace
from ..errors import InputError, missing_package, unforeseen
from .base import ReadContext, check_fits_in_memory, screen_times, sniff
from .discovery import NOT_FILE_OR_DIR, OTHER, UNREADABLE, is_nsys_parquet_dir
from .sources import TraceSource, is_url

if TYPE_CHECKING:
    from .nccl_inspector import InspectorLog


@dataclass(frozen=True)
class Format:
    """One trace format as a row of :data:`READERS`: the kinds :func:`~.base.sniff` finds in its files, and the
    module whose ``read(path, context)`` reads each kind (imported when a file of it is read). ``format`` names
    it in errors ("cannot read as nsys: ...")."""

    format: str
    modules: Mapping[str, str | None]  # sniffed kind -> reading module (None: a kind that is refused as a Trace)

    def sniff(self, path: Path, kind: str) -> bool:
        return kind in self.modules

    def read(self, path: Path, context: ReadContext) -> Trace:
        targets = set(self.modules.values())
        # one module for every kind (Nsight's SQLite, report and parquet folder alike), else the content decides
        kind = context.kind if context.kind in self.modules else None
        module = targets.pop() if len(targets) == 1 else self.modules.get(kind or sniff(path))
        if module is None:
            # NCCL Inspector logs: per-collective rows without a timeline (:func:`read_inspector`), never a Trace of
            # device activities (that would make up the §4 figures)
            raise InputError(path, INSPECTOR_NOT_A_TIMELINE)
        return cast(Trace, importlib.import_module(module, __package__).read(path, context))


INSPECTOR_NOT_A_TIMELINE = (
    "an NCCL Inspector log: per-collective times without timestamps, no device timeline; "
    "`moeprof analyze`, `check`, `diff`, `report` and `events` read a folder of them as such"
)


def read_inspector(path: Path) -> InspectorLog:
    """Read one NCCL Inspector log into operation rows: the memory guard first, one-line errors."""
    from .nccl_inspector import read

    check_fits_in_memory(path, "nccl-inspector")
    try:
        return read(path)
    except (InputError, KeyboardInterrupt):
        raise
    except MemoryError:
        raise InputError(path, "out of memory reading it; analyze fewer files at once") from None
    except Exception as exc:
        raise _last_resort(path, "nccl-inspector", exc) from None


# the readers in the order they are tried
READERS: tuple[Format, ...] = (
    Format("xplane", {"xplane": ".xplane"}),
    Format("json", {"json": ".chrome"}),  # xprof trace-viewer exports and PyTorch Kineto: the content decides
    Format("nsys", {"sqlite": ".nsys", "nsys-rep": ".nsys", "nsys-parquet": ".nsys"}),
    # AMD rocprofv3: CSV (kernel trace, memory copies, agent list) and JSON; its rocpd SQLite (ROCm 7's default)
    Format("rocprof", {"rocprof-csv": ".rocprof", "rocprof-json": ".rocprof_json"}),
    Format("rocpd", {"rocpd": ".rocpd"}),
    Format("nccl-inspector", {"nccl-inspector": None}),
)


def reader_for(path: Path, kind: str | None = None) -> tuple[Format, str]:
    """The reader of a file (and the sniffed kind), or an InputError naming the file. ``kind``: what the job's
    plan already sniffed (``discovery.file_kind``); a kind that is no format is found again here, where its
    refusal names the file."""
    if path.exists() and not path.is_file() and not path.is_dir():
        raise InputError(path, NOT_FILE_OR_DIR)  # opening a FIFO would wait for a writer
    if kind is None or kind in (OTHER, UNREADABLE):
        kind = "nsys-parquet" if is_nsys_parquet_dir(path) else sniff(path)
    for reader in READERS:
        if reader.sniff(path, kind):
            return reader, kind
    raise InputError(
        path,
        "unrecognized format (expected XPlane .xplane.pb, Chrome/Kineto JSON, Nsight Systems .sqlite or .nsys-rep,"
        " rocprofv3 kernel_trace.csv, results.json or results.db, NCCL Inspector .log)",
    )


def read_file(path: TraceSource, context: ReadContext | None = None, kind: str | None = None) -> Trace:
    """Read one trace file into a :class:`Trace` (raw columns; not yet classified); ``kind``: its sniffed kind
    where the job's plan holds it (not sniffed again).

    A URL is read through a local copy (``moeprof.readers.sources``).
    """
    context = context or ReadContext()
    if is_url(path):
        from .sources import read_url

        return read_url(str(path), context)
    path = Path(path)
    reader, kind = reader_for(path, kind)
    check_fits_in_memory(path, kind)
    # readers build many small objects and no cycles: the cyclic GC would only rescan them
    enabled = gc.isenabled()
    gc.disable()
    try:
        trace = reader.read(path, replace(context, kind=kind))
    except (InputError, KeyboardInterrupt):
        raise
    except MemoryError:
        raise InputError(
            path, "out of memory reading it; analyze fewer files at once, or on a bigger machine"
        ) from None
    except Exception as exc:
        raise _last_resort(path, reader.format, exc) from None
    finally:
        if enabled:
            gc.enable()
    return screen_times(trace, path)


def _last_resort(path: Path, fmt: str, exc: Exception) -> InputError:
    """A reader's exception that no reader turned into what is wrong with the file: a package this format needs
    that is not installed, in the user's terms; else the catch-all's words (:func:`~moeprof.errors.unforeseen`),
    or, with MOEPROF_DEBUG=1, the exception itself (re-raised by the caller's ``raise ... from``)."""
    missing = missing_package(exc) if isinstance(exc, ImportError) else None
    if missing:
        return InputError(path, f"cannot read as {fmt}: reading it {missing}")
    if os.environ.get("MOEPROF_DEBUG"):
        raise exc
    return InputError(path, f"cannot read as {fmt}: {unforeseen()}")
