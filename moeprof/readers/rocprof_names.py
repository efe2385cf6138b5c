"""rocprofv3's output file names (no pandas: discovery uses them): ``<prefix>kernel_trace.csv`` and its
companions, prefix ``<pid>_`` in a ``<hostname>/`` folder by default, ``NAME_`` with ``-o NAME``
(rocprofiler-sdk ``source/bin/rocprofv3.py``, ``-o``; ``source/lib/output/generateCSV.cpp``)."""

from __future__ import annotations

from pathlib import Path

KERNEL_SUFFIX = "kernel_trace.csv"
COPY_SUFFIX = "memory_copy_trace.csv"
AGENT_SUFFIX = "agent_info.csv"
RCCL_SUFFIX = "rccl_api_trace.csv"  # --rccl-trace
HIP_SUFFIX = "hip_api_trace.csv"  # --hip-trace
MARKER_SUFFIX = "marker_api_trace.csv"  # --marker-trace (ROCTx)
RESULTS_SUFFIX = "results.json"  # the JSON output (--output-format json)


def capture_prefix(name: str) -> str | None:
    """``<prefix>`` of a rocprofv3 output name (kernel trace, memory copies, agent list, JSON results), else None."""
    lower = name.lower()
    if lower.endswith(".gz"):
        name, lower = name[:-3], lower[:-3]
    for suffix in (KERNEL_SUFFIX, COPY_SUFFIX, AGENT_SUFFIX, RESULTS_SUFFIX):
        if lower.endswith(suffix):
            return name[: -len(suffix)]
    return None


def companion(path: Path, suffix: str) -> Path | None:
    """The file of the same output set with ``suffix`` (plain or gzipped), if it exists."""
    prefix = capture_prefix(path.name)
    if prefix is None:
        return None
    for candidate in (path.with_name(prefix + suffix), path.with_name(prefix + suffix + ".gz")):
        if candidate.is_file() and candidate != path:
            return candidate
    return None


def host_name(path: Path) -> str:
    """The host of an output set: its folder for rocprofv3's default ``%hostname%/%pid%_`` names, else the
    prefix (``-o NAME``: ``NAME``), else the folder."""
    prefix = (capture_prefix(path.name) or path.stem).rstrip("_-. ")
    if prefix and not prefix.isdigit():
        return prefix
    parent = path.resolve().parent.name
    return parent or prefix or "host0"
