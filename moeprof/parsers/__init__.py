"""Trace readers: one module per format, each returning the same event table.

``discover`` turns what the user typed (files, a folder of per-host/per-rank
traces, a TensorBoard log dir, a moeprof run folder) into a list of trace files;
``parse_file`` reads one of them with the reader its content calls for.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..options import LoadOptions

# suffixes moeprof reads, longest first
TRACE_SUFFIXES = (
    ".xplane.pb",
    ".pt.trace.json.gz",
    ".pt.trace.json",
    ".trace.json.gz",
    ".trace.json",
    ".json.gz",
    ".json",
    ".sqlite",
    ".nsys-rep",
)
_GZIP_MAGIC = b"\x1f\x8b"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_NSYS_REP_MAGIC = b"NVIDIA"

Parser = Callable[..., pd.DataFrame]


# JSON files that sit beside traces and are not traces: a run folder's records, test truth
NOT_TRACES = ("manifest.json", "analysis.json", ".truth.json", "package.json")


def _is_trace_file(path: Path) -> bool:
    name = path.name.lower()
    if name.startswith(".") or name.endswith(NOT_TRACES):
        return False
    return any(name.endswith(s) for s in TRACE_SUFFIXES)


def is_nsys_parquet_dir(path: Path) -> bool:
    """A folder written by ``nsys export --type parquetdir`` (one parquet file per table)."""
    return path.is_dir() and (path / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").is_file()


def _tensorboard_runs(root: Path) -> list[Path]:
    base = root / "plugins" / "profile"
    if not base.is_dir():
        base = root if root.name == "profile" and root.parent.name == "plugins" else None
    if base is None:
        return []
    return sorted((p for p in base.iterdir() if p.is_dir()), key=lambda p: p.name)


def discover(inputs: list[str | Path], options: LoadOptions | None = None) -> list[Path]:
    """Trace files named by the user's inputs, in host/rank order, without duplicates."""
    options = options or LoadOptions()
    found: list[Path] = []
    for raw in inputs:
        path = Path(raw)
        if not path.exists():
            raise InputError(path, "no such file or directory")
        if path.is_file() or is_nsys_parquet_dir(path):
            found.append(path)
            continue
        runs = _tensorboard_runs(path)
        if runs:
            if options.run is not None:
                chosen = [r for r in runs if r.name == options.run]
                if not chosen:
                    raise InputError(path, f"no run named {options.run!r} (runs: {', '.join(r.name for r in runs)})")
                run = chosen[0]
            else:
                run = runs[-1]  # run folders are named by capture time: the newest sorts last
            files = _trace_files_in(run)
        else:
            files = _trace_files_in(path)
            if not files:
                # a moeprof run folder keeps its traces one level down
                for sub in sorted(p for p in path.iterdir() if p.is_dir()):
                    files.extend(
                        _trace_files_in(sub) or [f for r in _tensorboard_runs(sub)[-1:] for f in _trace_files_in(r)]
                    )
        if not files:
            raise InputError(
                path,
                "directory holds no trace files "
                "(.xplane.pb, .trace.json[.gz], .pt.trace.json[.gz], .sqlite, .nsys-rep, nsys parquet export)",
            )
        found.extend(files)
    seen: set[Path] = set()
    unique = []
    for f in found:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def _trace_files_in(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and _is_trace_file(p))
    # xprof writes both host.xplane.pb and host.trace.json.gz for one capture: read the XPlane
    xplanes = {p.name[: -len(".xplane.pb")] for p in files if p.name.endswith(".xplane.pb")}
    return [p for p in files if not (p.name.endswith(".trace.json.gz") and p.name[: -len(".trace.json.gz")] in xplanes)]


def sniff(path: Path) -> str:
    """The format of a file from its first bytes (and name): xplane, json, sqlite, nsys-rep."""
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not head:
        raise InputError(path, "empty file")
    name = path.name.lower()
    if head.startswith(_SQLITE_MAGIC):
        return "sqlite"
    if head.startswith(_NSYS_REP_MAGIC) or name.endswith(".nsys-rep"):
        return "nsys-rep"
    if head.startswith(_GZIP_MAGIC):
        try:
            with gzip.open(path, "rb") as fh:
                inner = fh.read(64)
        except (OSError, EOFError) as exc:
            raise InputError(path, f"corrupt gzip data: {exc}") from None
        return "json" if inner.lstrip()[:1] in (b"{", b"[") else "unknown"
    if head.lstrip()[:1] in (b"{", b"["):
        return "json"
    if name.endswith(".pb"):
        return "xplane"
    return "unknown"


def _reader(fmt: str) -> Parser:
    if fmt == "xplane":
        from .xplane import parse
    elif fmt == "json":
        from .json_trace import parse
    elif fmt in ("sqlite", "nsys-rep", "nsys-parquet"):
        from .nsys import parse
    else:
        raise KeyError(fmt)
    return parse


# peak memory of reading a file, as a multiple of its size on disk (measured on the benchmark and
# the shared traces: XPlane ~12x, gzipped Chrome/Kineto JSON ~60-100x once decoded into objects)
MEMORY_FACTOR = {"xplane": 16, "json": 12, "json.gz": 120, "sqlite": 3, "nsys-rep": 3}


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fits_in_memory(path: Path, fmt: str) -> None:
    """Refuse, in one line, a file whose reading would exhaust memory (instead of being killed)."""
    if os.environ.get("MOEPROF_IGNORE_MEMORY_CHECK") or path.is_dir():
        return
    available = available_memory()
    if available is None:
        return
    size = path.stat().st_size
    gz = fmt == "json" and path.name.lower().endswith(".gz")
    need = size * MEMORY_FACTOR.get("json.gz" if gz else fmt, 12)
    if need > available:
        gib = 2**30
        raise InputError(
            path,
            f"too large to analyze in memory here ({size / gib:.1f} GiB on disk needs about {need / gib:.0f} GiB,"
            f" {available / gib:.0f} GiB available); analyze one file per host or rank, or set"
            " MOEPROF_IGNORE_MEMORY_CHECK=1 to try anyway",
        )


def parse_file(path: Path, host_index: int = 0, options: LoadOptions | None = None) -> pd.DataFrame:
    """Read one trace file into the raw event table."""
    options = options or LoadOptions()
    fmt = "nsys-parquet" if is_nsys_parquet_dir(path) else sniff(path)
    check_fits_in_memory(path, fmt)
    if fmt == "unknown":
        raise InputError(
            path,
            "unrecognized format (expected XPlane .xplane.pb, Chrome/Kineto JSON, Nsight Systems .sqlite or .nsys-rep)",
        )
    return _reader(fmt)(path, host_index=host_index, options=options)
