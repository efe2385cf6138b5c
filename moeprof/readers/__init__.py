"""Trace readers: one module per format, each returning a :class:`~moeprof.core.trace.Trace`.

``discover`` turns what the user typed (files, a folder of per-host/per-rank
traces, a TensorBoard log dir, a moeprof run folder) into trace files;
``read_file`` reads one of them with the reader its content calls for. Readers
are tried in :data:`READERS` order; each says from the sniffed content (and the
name) whether the file is its format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Names are imported on first use: the wire decoder (``readers.xplane_wire``) then loads without pandas,
# which the event table needs and a decoder of bytes into numpy columns does not.
_WHERE = {
    "READERS": "registry",
    "read_file": "registry",
    "reader_for": "registry",
    "Placement": "base",
    "ReadContext": "base",
    "Reader": "base",
    "check_fits_in_memory": "base",
    "screen_times": "base",
    "sniff": "base",
    "NOT_FILE_OR_DIR": "discovery",
    "TRACE_SUFFIXES": "discovery",
    "discover": "discovery",
    "is_nsys_parquet_dir": "discovery",
    "plan_placements": "discovery",
    "TraceSource": "sources",
    "is_url": "sources",
    "LoadOptions": "moeprof.options",
}

if TYPE_CHECKING:
    from ..options import LoadOptions
    from .base import Placement, ReadContext, Reader, check_fits_in_memory, screen_times, sniff
    from .discovery import NOT_FILE_OR_DIR, TRACE_SUFFIXES, discover, is_nsys_parquet_dir, plan_placements
    from .registry import READERS, read_file, reader_for
    from .sources import TraceSource, is_url


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:  # a submodule not imported yet: `from moeprof.readers import nsys` imports it then
        raise AttributeError(f"module 'moeprof.readers' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(where if "." in where else f"{__name__}.{where}")
    value = getattr(module, name)
    globals()[name] = value
    return value


__all__ = [
    "NOT_FILE_OR_DIR",
    "READERS",
    "TRACE_SUFFIXES",
    "LoadOptions",
    "Placement",
    "ReadContext",
    "Reader",
    "TraceSource",
    "check_fits_in_memory",
    "discover",
    "is_nsys_parquet_dir",
    "is_url",
    "plan_placements",
    "read_file",
    "reader_for",
    "screen_times",
    "sniff",
]
