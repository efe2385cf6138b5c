"""Trace readers: one module per format, each returning a :class:`~moeprof.core.trace.Trace`.

``discover`` turns what the user typed (files, a folder of per-host/per-rank
traces, a TensorBoard log dir, a moeprof run folder) into trace files;
``read_file`` reads one of them with the reader its content calls for. Readers
are tried in :data:`READERS` order; each says from the sniffed content (and the
name) whether the file is its format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_attribute

# Names are imported on first use: the wire decoder (``readers.xplane_wire``) then loads without pandas,
# which the event table needs and a decoder of bytes into numpy columns does not.
_WHERE = {
    "READERS": "moeprof.readers.registry",
    "read_file": "moeprof.readers.registry",
    "reader_for": "moeprof.readers.registry",
    "Placement": "moeprof.readers.base",
    "ReadContext": "moeprof.readers.base",
    "Reader": "moeprof.readers.base",
    "check_fits_in_memory": "moeprof.readers.base",
    "screen_times": "moeprof.readers.base",
    "sniff": "moeprof.readers.base",
    "NOT_FILE_OR_DIR": "moeprof.readers.discovery",
    "TRACE_SUFFIXES": "moeprof.readers.discovery",
    "discover": "moeprof.readers.discovery",
    "is_nsys_parquet_dir": "moeprof.readers.discovery",
    "plan_placements": "moeprof.readers.discovery",
    "TraceSource": "moeprof.readers.sources",
    "is_url": "moeprof.readers.sources",
    "LoadOptions": "moeprof.options",
}

if TYPE_CHECKING:
    from ..options import LoadOptions
    from .base import Placement, ReadContext, Reader, check_fits_in_memory, screen_times, sniff
    from .discovery import NOT_FILE_OR_DIR, TRACE_SUFFIXES, discover, is_nsys_parquet_dir, plan_placements
    from .registry import READERS, read_file, reader_for
    from .sources import TraceSource, is_url


def __getattr__(name: str) -> Any:
    # a submodule not imported yet is no attribute: `from moeprof.readers import nsys` then imports it
    return lazy_attribute(globals(), __name__, _WHERE, name)


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
