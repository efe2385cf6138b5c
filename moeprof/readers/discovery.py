"""From what the user typed to trace files: folders, TensorBoard log dirs, run folders, and the
layout of a job's files over hosts."""

from __future__ import annotations

from pathlib import Path, PurePath, PurePosixPath
from typing import TypeVar

from ..errors import InputError
from ..options import LoadOptions
from .base import Placement
from .sources import TraceSource, is_url

P = TypeVar("P", bound=PurePath)

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


def plan_placements(files: list[TraceSource]) -> list[Placement]:
    """Lay a job's trace files out over hosts before reading them.

    One XPlane per host is the common case. When several XPlanes name the same
    host (one process per GPU, or several processes on one machine), they are
    that host's processes: their GPUs are numbered one after another (files in
    name order) and share the host's NVLink domain. CPU-only captures of several
    processes on one host keep a host each (``host:file``), as their devices do
    not say which CPU they are. URLs are not peeked (that would mean a download): a host each.
    """
    from .xspace_proto import WireError, peek

    peeked: list[tuple[str, int] | None] = []
    for f in files:
        if isinstance(f, Path) and f.is_file() and f.name.lower().endswith(".pb"):
            try:
                hostnames, planes, _ = peek(f)
            except (OSError, WireError, IndexError):
                peeked.append(None)  # the full read reports what is wrong with it
                continue
            gpus = sum(1 for p in planes if p.startswith("/device:GPU:"))
            peeked.append((hostnames[0] if hostnames else capture_stem(f.name), gpus))
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
            key = host = f"{p[0]}:{capture_stem(PurePosixPath(f).name)}"
        else:
            key, host = p[0], None
        if key not in hosts:
            hosts.append(key)
        first = used.get(key, 0)
        if p is not None and host == p[0]:
            used[key] = first + p[1]
        out.append(Placement(hosts.index(key), host, first, per_host_gpus.get(host) if host else None))
    return out


NOT_FILE_OR_DIR = "neither a regular file nor a directory (a FIFO, a socket or a device?): nothing to read"

# JSON files that sit beside traces and are not traces: a run folder's records, test truth
NOT_TRACES = ("manifest.json", "analysis.json", ".truth.json", "package.json")


def _is_trace_file(path: PurePath) -> bool:
    name = path.name.lower()
    if name.startswith(".") or name.endswith(NOT_TRACES):
        return False
    return any(name.endswith(s) for s in TRACE_SUFFIXES)


def is_nsys_parquet_dir(path: Path) -> bool:
    """A folder written by ``nsys export --type parquetdir`` (one parquet file per table)."""
    return path.is_dir() and (path / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").is_file()


def _tensorboard_runs(root: Path) -> list[Path]:
    base: Path | None = root / "plugins" / "profile"
    if base is None or not base.is_dir():
        base = root if root.name == "profile" and root.parent.name == "plugins" else None
    if base is None:
        return []
    return sorted((p for p in base.iterdir() if p.is_dir()), key=lambda p: p.name)


def choose_run(where: str | Path, runs: list[P], options: LoadOptions) -> P:
    """The TensorBoard run to read: the one ``--run`` names, else the newest."""
    if options.run is not None:
        chosen = [r for r in runs if r.name == options.run]
        if not chosen:
            raise InputError(where, f"no run named {options.run!r} (runs: {', '.join(r.name for r in runs)})")
        return chosen[0]
    return runs[-1]  # run folders are named by capture time: the newest sorts last


def discover(inputs: list[str | Path], options: LoadOptions | None = None) -> list[TraceSource]:
    """Trace files named by the user's inputs, in host/rank order, without duplicates."""
    return discover_job(inputs, options)[0]


def discover_job(inputs: list[str | Path], options: LoadOptions | None = None) -> tuple[list[TraceSource], list[str]]:
    """Trace files named by the user's inputs, and what discovery left out and why (warnings).

    Local inputs give paths; URLs (``gs://``, ``s3://``, ``memory://``) give URLs, expanded through
    fsspec (imported only then); ``file://`` URLs give local paths.
    """
    options = options or LoadOptions()
    found: list[TraceSource] = []
    notes: list[str] = []
    for raw in inputs:
        if is_url(raw):
            from .sources import discover_url

            found.extend(discover_url(str(raw), options, notes))
            continue
        path = Path(raw)
        if not path.exists():
            raise InputError(path, "no such file or directory")
        if path.is_file() or is_nsys_parquet_dir(path):
            found.append(path)
            continue
        if not path.is_dir():
            raise InputError(path, NOT_FILE_OR_DIR)
        runs = _tensorboard_runs(path)
        if runs:
            files = _trace_files_in(choose_run(path, runs, options), notes)
        else:
            files = _trace_files_in(path, notes)
            if not files:
                # a moeprof run folder keeps its traces one level down
                for sub in sorted(p for p in path.iterdir() if p.is_dir()):
                    files.extend(
                        _trace_files_in(sub, notes)
                        or [f for r in _tensorboard_runs(sub)[-1:] for f in _trace_files_in(r, notes)]
                    )
        if not files:
            raise InputError(
                path,
                "directory holds no trace files "
                "(.xplane.pb, .trace.json[.gz], .pt.trace.json[.gz], .sqlite, .nsys-rep, nsys parquet export,"
                " NCCL Inspector .log)",
            )
        found.extend(files)
    seen: set[TraceSource] = set()
    unique = []
    for f in found:
        key = f if isinstance(f, str) else f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, notes


# one capture saved in several formats (xprof writes host.xplane.pb and host.trace.json.gz; nsys a .nsys-rep
# and its .sqlite export; the synthetic samples all three): read the richest once. Richest first.
FORMAT_PREFERENCE = (
    ".xplane.pb",
    ".sqlite",
    ".nsys-rep",
    ".pt.trace.json.gz",
    ".pt.trace.json",
    ".trace.json.gz",
    ".trace.json",
    ".json.gz",
    ".json",
)
_FORMAT_WORDS = (".nsys", ".xplane", ".pt", ".trace")


def capture_stem(name: str) -> str:
    """The capture a file name belongs to: the name without its format suffixes."""
    lower = name.lower()
    for suffix in FORMAT_PREFERENCE:
        if lower.endswith(suffix):
            name, lower = name[: -len(suffix)], lower[: -len(suffix)]
            break
    while lower.endswith(_FORMAT_WORDS):
        cut = next(w for w in _FORMAT_WORDS if lower.endswith(w))
        name, lower = name[: -len(cut)], lower[: -len(cut)]
    return name


def _rank(path: PurePath) -> int:
    lower = path.name.lower()
    return next((i for i, s in enumerate(FORMAT_PREFERENCE) if lower.endswith(s)), len(FORMAT_PREFERENCE))


def _trace_files_in(folder: Path, notes: list[str]) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    traces = select_trace_files(files, folder, notes)
    return traces + inspector_logs_in(folder, [p for p in files if p not in traces], notes)


INSPECTOR_SUFFIXES = (".log", ".log.gz", ".jsonl", ".jsonl.gz")


def inspector_logs_in(folder: Path, files: list[Path], notes: list[str]) -> list[Path]:
    """The NCCL Inspector logs among a folder's files (``<host>-pid<pid>.log``, also .log.gz, .jsonl[.gz]),
    told by content. In a folder that holds some, every other file is skipped with a note."""
    from .nccl_inspector import is_inspector_log

    named = [p for p in files if p.name.lower().endswith(INSPECTOR_SUFFIXES) and not p.name.startswith(".")]
    logs = [p for p in named if is_inspector_log(p)]
    if logs:
        for p in files:
            if p not in logs and not p.name.startswith("."):
                notes.append(f"{folder}: skipped {p.name}: not an NCCL Inspector log")
    return logs


def select_trace_files(files: list[P], folder: Path | str, notes: list[str]) -> list[P]:
    """The trace files among a folder's (sorted) files, one per capture; ``folder`` names it in notes.

    Paths are local, or a URL's ``PurePosixPath`` (``moeprof.readers.sources``).
    """
    files = [p for p in files if _is_trace_file(p)]
    by_capture: dict[str, list[P]] = {}
    for p in files:
        by_capture.setdefault(capture_stem(p.name), []).append(p)
    keep = []
    for stem, group in by_capture.items():
        best = min(group, key=_rank)
        keep.append(best)
        others = [p.name for p in group if p is not best]
        # xprof's own pair (host.xplane.pb + host.trace.json.gz) and nsys's (.nsys-rep + .sqlite) are expected
        expected = {best.name.lower().replace(".xplane.pb", ".trace.json.gz"), capture_stem(best.name) + ".nsys-rep"}
        if any(o.lower() not in expected for o in others):
            where = folder / stem if isinstance(folder, Path) else f"{folder.rstrip('/')}/{stem}"
            notes.append(
                f"{where}: one capture in several formats ({', '.join(p.name for p in group)}); read {best.name} only"
            )
    return sorted(keep)
