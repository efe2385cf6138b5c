"""Trace readers: one module per format, each returning the same event table.

``discover`` turns what the user typed (files, a folder of per-host/per-rank
traces, a TensorBoard log dir, a moeprof run folder) into a list of trace files;
``parse_file`` reads one of them with the reader its content calls for.
"""

from __future__ import annotations

import gc
import gzip
import os
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Placement:
    """Where one trace file sits in the job: which host, and which of the host's devices it holds."""

    host_index: int  # position of the host among the job's hosts (global ids: host_index * devices_per_host + ...)
    host: str | None = None  # host name to use (None: the one the trace states)
    first_ordinal: int = 0  # this file's device N is the host's device first_ordinal + N
    devices_per_host: int | None = None  # None: the devices in this file


def plan_placements(files: list[Path]) -> list[Placement]:
    """Lay a job's trace files out over hosts before reading them.

    One XPlane per host is the common case. When several XPlanes name the same
    host (one process per GPU, or several processes on one machine), they are
    that host's processes: their GPUs are numbered one after another (files in
    name order) and share the host's NVLink domain. CPU-only captures of several
    processes on one host keep a host each (``host:file``), as their devices do
    not say which CPU they are.
    """
    from .xspace_proto import WireError, peek

    peeked: list[tuple[str, int] | None] = []
    for f in files:
        if f.is_file() and f.name.lower().endswith(".pb"):
            try:
                hostnames, planes, _ = peek(f)
            except (OSError, WireError, IndexError):
                peeked.append(None)  # the full read reports what is wrong with it
                continue
            gpus = sum(1 for p in planes if p.startswith("/device:GPU:"))
            peeked.append((hostnames[0] if hostnames else f.name.split(".")[0], gpus))
        else:
            peeked.append(None)
    names = [p[0] for p in peeked if p]
    repeated = {h for h in names if names.count(h) > 1}
    hosts: list[str] = []
    per_host_gpus: dict[str, int] = {}
    for p in peeked:
        if p and p[0] in repeated and p[1]:
            per_host_gpus[p[0]] = per_host_gpus.get(p[0], 0) + p[1]
    used: dict[str, int] = {}
    out = []
    for f, p in zip(files, peeked):
        if p is None:
            key = f"file:{f}"
            host = None
        elif p[0] in repeated and p[1]:
            key = host = p[0]
        elif p[0] in repeated:
            key = host = f"{p[0]}:{f.name.split('.')[0]}"
        else:
            key, host = p[0], None
        if key not in hosts:
            hosts.append(key)
        first = used.get(key, 0)
        if p is not None and host == p[0]:
            used[key] = first + p[1]
        out.append(Placement(hosts.index(key), host, first, per_host_gpus.get(host) if host else None))
    return out


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
    # one capture, two formats: xprof writes host.xplane.pb and host.trace.json.gz, nsys a .nsys-rep and
    # its .sqlite export; read the richer one once
    stems = {p.name[: -len(".xplane.pb")] for p in files if p.name.endswith(".xplane.pb")}
    exported = {p.name[: -len(".sqlite")] for p in files if p.name.endswith(".sqlite")}
    return [
        p
        for p in files
        if not (p.name.endswith(".trace.json.gz") and p.name[: -len(".trace.json.gz")] in stems)
        and not (p.name.endswith(".nsys-rep") and p.name[: -len(".nsys-rep")] in exported)
    ]


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
        from .chrome import parse
    elif fmt in ("sqlite", "nsys-rep", "nsys-parquet"):
        from .nsys import parse
    else:
        raise KeyError(fmt)
    return parse


# peak memory of reading a file, as a multiple of its size on disk (measured on the benchmarks and
# the shared traces: XPlane ~12x; Kineto JSON decoded to columns ~2.5x its text, which gzip holds
# in ~1/10 of it -- a gzip is also capped while it inflates, see chrome.read_bytes)
MEMORY_FACTOR = {"xplane": 16, "json": 4, "json.gz": 40, "sqlite": 3, "nsys-rep": 3}


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


def parse_file(
    path: Path, host_index: int = 0, options: LoadOptions | None = None, placement: Placement | None = None
) -> pd.DataFrame:
    """Read one trace file into the raw event table."""
    options = options or LoadOptions()
    fmt = "nsys-parquet" if is_nsys_parquet_dir(path) else sniff(path)
    check_fits_in_memory(path, fmt)
    # readers build millions of small objects and no cycles: the cyclic GC would only rescan them
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_file(path, fmt, host_index, options, placement)
    finally:
        if enabled:
            gc.enable()


def _parse_file(
    path: Path, fmt: str, host_index: int, options: LoadOptions, placement: Placement | None
) -> pd.DataFrame:
    if fmt == "unknown":
        raise InputError(
            path,
            "unrecognized format (expected XPlane .xplane.pb, Chrome/Kineto JSON, Nsight Systems .sqlite or .nsys-rep)",
        )
    if fmt == "xplane" and placement is not None:
        from .xplane import parse as parse_xplane

        return parse_xplane(path, host_index=placement.host_index, options=options, placement=placement)
    return _reader(fmt)(path, host_index=host_index if placement is None else placement.host_index, options=options)
