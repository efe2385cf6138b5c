"""From what the user typed to trace files: folders, TensorBoard log dirs, run folders, and the
layout of a job's files over hosts, decided once into a :class:`JobPlan` that the pipeline follows."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, TypeVar

from ..errors import InputError
from ..options import LoadOptions
from .base import Placement, sniff
from .marks import ANNOTATED_SCHEMA, moeprof_output, no_trace_structure
from .rocpd_schema import RESULTS_SUFFIX
from .rocpd_schema import hostname as rocpd_host
from .rocprof_names import capture_prefix
from .rocprof_names import host_name as rocprof_host
from .sources import TraceSource, file_url_path, filesystem, is_url, url_info

P = TypeVar("P", bound=PurePath)

TRACE_SUFFIXES = (
    ".xplane.pb",
    ".xplane.pb.gz",
    ".pt.trace.json.gz",
    ".pt.trace.json",
    ".trace.json.gz",
    ".trace.json",
    ".json.gz",
    ".json",
    ".sqlite",
    ".nsys-rep",
    # rocprofv3's CSV output set: the kernel trace is the capture, its memory copies and agent list are read
    # from beside it (a memory-copy trace alone is a capture too)
    "kernel_trace.csv",
    "kernel_trace.csv.gz",
    "memory_copy_trace.csv",
    "memory_copy_trace.csv.gz",
    # rocprofv3's rocpd database, one per process (``<pid>_results.db``; generateRocpd.cpp)
    RESULTS_SUFFIX,
)


_TPU_CHIP = re.compile(r"^/device:TPU:\d{1,9}$")  # a TPU chip's plane (its SparseCore planes are not chips)


# a file's kind in a plan where it is no sniffed format: a URL or a folder (its read decides), or a file whose
# first bytes could not be read (its read says why)
OTHER, UNREADABLE = "other", "bad"
INSPECTOR_KIND = "nccl-inspector"


def file_kind(f: TraceSource) -> str:
    """What a file of a job is (:func:`~.base.sniff`), read once when the job is planned: the reader reads it
    by this kind, and a folder of NCCL Inspector logs takes their route."""
    if not isinstance(f, Path):
        return OTHER  # a URL: its local copy is sniffed when read
    if is_nsys_parquet_dir(f):
        return "nsys-parquet"
    if not f.is_file():
        return OTHER
    try:
        return sniff(f)
    except InputError:
        return UNREADABLE


@dataclass(frozen=True)
class JobPlan:
    """What the user's inputs name, decided once and handed on: the trace files in host/rank order, each
    one's kind (:func:`file_kind`) and place in the job (:func:`plan_placements`), what discovery left out
    and why, and the run folder's manifest where an input is one."""

    files: tuple[TraceSource, ...]
    kinds: tuple[str, ...]
    placements: tuple[Placement, ...]
    single_host: bool  # every file on one host: one NVLink domain unless --nvlink-domain-size says otherwise
    inspector: bool  # NCCL Inspector logs (no timeline): the pipeline takes their route
    notes: tuple[str, ...] = ()
    manifest: dict[str, Any] | None = None

    def keeping(self, kept: Sequence[int]) -> JobPlan | None:
        """The plan of the files at ``kept`` alone, where their layout differs from theirs among every file
        named (one capture's second format set aside may leave one host where there were two), else None."""
        alone = _planned([self.files[i] for i in kept], [self.kinds[i] for i in kept], self.notes, self.manifest)
        same = alone.single_host == self.single_host and alone.placements == tuple(self.placements[i] for i in kept)
        return None if same else alone


def plan_job(inputs: Sequence[str | Path], options: LoadOptions | None = None) -> JobPlan:
    """The :class:`JobPlan` of what the user typed: discovery, each file sniffed and placed, once."""
    from .runfolder import read_manifest

    files, notes = discover_job(list(inputs), options)
    manifest = next((m for raw in inputs if Path(raw).is_dir() and (m := read_manifest(Path(raw)))), None)
    return _planned(files, [file_kind(f) for f in files], notes, manifest)


def _planned(
    files: Sequence[TraceSource], kinds: Sequence[str], notes: Sequence[str], manifest: dict[str, Any] | None
) -> JobPlan:
    placements = tuple(plan_placements(files))
    return JobPlan(
        files=tuple(files),
        kinds=tuple(kinds),
        placements=placements,
        single_host=len({p.host_index for p in placements}) == 1,
        inspector=_inspector_logs(files, kinds),
        notes=tuple(notes),
        manifest=manifest,
    )


def _inspector_logs(files: Sequence[TraceSource], kinds: Sequence[str]) -> bool:
    """Whether the files are NCCL Inspector logs (all of them: a mix with timeline traces is refused). A file
    that cannot be read goes with the logs: reading it says what is wrong (or --skip-bad skips it)."""
    logs = [f for f, k in zip(files, kinds) if k == INSPECTOR_KIND]
    if not logs:
        return False
    others = [f for f, k in zip(files, kinds) if k not in (INSPECTOR_KIND, UNREADABLE)]
    if others:
        raise InputError(
            others[0],
            f"a timeline trace given with NCCL Inspector logs ({logs[0]}, ...): they measure different things;"
            " analyze them apart",
        )
    return True


def plan_placements(files: Sequence[TraceSource]) -> list[Placement]:
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
            gpus = sum(1 for p in planes if p.startswith("/device:GPU:") or _TPU_CHIP.match(p))
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
        if p is None and isinstance(f, Path) and capture_prefix(f.name) is not None:
            # rocprofv3 writes one output set per process (``%hostname%/%pid%_``), and each lists all of its
            # node's GPUs with their node-wide index: the processes of one host share its host index
            key, host = f"rocprof:{rocprof_host(f)}", None
        elif p is None and isinstance(f, Path) and f.name.lower().endswith(RESULTS_SUFFIX) and rocpd_host(f):
            # rocpd likewise: one database per process, each listing its node's GPUs by their node-wide index
            key, host = f"rocprof:{rocpd_host(f)}", None
        elif p is None:
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
    named: list[Path] = []  # files the user named (not found in a folder)
    notes: list[str] = []
    for raw in inputs:
        if is_url(raw):
            found.extend(discover_url(str(raw), options, notes))
            continue
        path = Path(raw)
        try:
            files = _local_trace_files(path, options, notes)
        except PermissionError as exc:  # an unreadable folder (or one inside it): name it, not a bare errno
            inside = exc.filename not in (None, str(path)) and os.access(path, os.R_OK | os.X_OK)
            raise InputError(path, f"cannot read{f' {exc.filename}' if inside else ''}: permission denied") from None
        if files == [path]:
            named.append(path)  # named by the user: a moeprof output here is refused or skipped, not read
        found.extend(files)
    found = _without_outputs(found, named, notes)
    seen: set[TraceSource] = set()
    unique = []
    for f in found:
        key = f if isinstance(f, str) else f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return _without_read_companions(unique, notes), notes


def _without_read_companions(files: list[TraceSource], notes: list[str]) -> list[TraceSource]:
    """A rocprofv3 memory-copy trace given beside its kernel trace: the kernel trace reads it already."""
    kernels = {
        f.resolve().parent / (capture_prefix(f.name) or "")
        for f in files
        if isinstance(f, Path) and f.name.lower().removesuffix(".gz").endswith("kernel_trace.csv")
    }
    out: list[TraceSource] = []
    for f in files:
        if (
            isinstance(f, Path)
            and f.name.lower().removesuffix(".gz").endswith("memory_copy_trace.csv")
            and f.resolve().parent / (capture_prefix(f.name) or "") in kernels
        ):
            notes.append(f"{f}: read with its kernel trace (rocprofv3 output set), not as a capture of its own")
            continue
        out.append(f)
    return out


def _local_trace_files(path: Path, options: LoadOptions, notes: list[str]) -> list[Path]:
    """The trace files one local input names: itself, or those its folder holds."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_file() or is_nsys_parquet_dir(path):
        return [path]
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
            " rocprofv3 *kernel_trace.csv, *_results.db, NCCL Inspector .log)",
        )
    return files


def _without_outputs(found: list[TraceSource], named: list[Path], notes: list[str]) -> list[TraceSource]:
    """The inputs less the files moeprof wrote that the user named beside traces (skipped with a note).

    An annotated trace named on its own is read (it is a Chrome trace of the measured activities: the
    round trip reproduces the figures); beside any trace it is skipped, never merged as more devices.
    Any other moeprof output named on its own is refused: it is no trace."""
    marks = {p: moeprof_output(p) for p in named if p.is_file()}
    outputs = [p for p, m in marks.items() if m]
    if not outputs:
        return found
    traces = [f for f in found if not (isinstance(f, Path) and marks.get(f))]
    if not traces:
        annotated = [p for p in outputs if marks[p] == ANNOTATED_SCHEMA]
        if annotated:
            return [f for f in found if f in annotated]
        raise InputError(outputs[0], f"written by moeprof ({marks[outputs[0]]}), not a trace: nothing to analyze")
    for p in outputs:
        notes.append(f"skipped {p}: written by moeprof ({marks[p]}), not a trace")
    return traces


# one capture saved in several formats (xprof writes host.xplane.pb and host.trace.json.gz; nsys a .nsys-rep
# and its .sqlite export; the synthetic samples all three): read the richest once. Richest first.
FORMAT_PREFERENCE = (
    ".xplane.pb",
    ".sqlite",
    ".nsys-rep",
    # rocprofv3 asked for several formats at once (<prefix>results.db, results.json, kernel_trace.csv: one capture):
    # the rocpd database, then the JSON, hold more than the CSV (RCCL calls, copy sizes)
    "results.db",
    "results.json",
    ".pt.trace.json.gz",
    ".pt.trace.json",
    ".trace.json.gz",
    ".trace.json",
    ".json.gz",
    ".json",
    "kernel_trace.csv.gz",
    "kernel_trace.csv",
    "memory_copy_trace.csv.gz",
    "memory_copy_trace.csv",
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
    chosen = select_trace_files(files, folder, notes)
    out = []
    for p in chosen:
        why = _not_a_trace(p) or no_trace_structure(p)
        if why:
            notes.append(f"skipped {p}: {why}")
        else:
            out.append(p)
    return out + inspector_logs_in(folder, [p for p in files if p not in chosen], notes)


def _not_a_trace(path: Path) -> str | None:
    """Why a file moeprof wrote is no trace to read (its mark, readers.marks), else None."""
    mark = moeprof_output(path)
    return f"written by moeprof ({mark}), not a trace" if mark else None


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
    for group in by_capture.values():
        best = min(group, key=_rank)
        keep.append(best)
        # the pairs the tools write themselves are one capture by construction: xprof's host.xplane.pb beside
        # host.trace.json.gz, nsys's .nsys-rep beside its .sqlite export, rocprofv3's memory-copy trace beside
        # its kernel trace. Any other files of one name are read, and the merge decides from their activities
        # whether they are one capture (core.identity)
        stem = capture_stem(best.name).lower()
        expected = {
            best.name.lower().replace(".xplane.pb", ".trace.json.gz"),
            stem + ".nsys-rep",
            *(stem + s for s in ("memory_copy_trace.csv", "memory_copy_trace.csv.gz")),
        }
        keep.extend(p for p in group if p is not best and p.name.lower() not in expected)
    return sorted(keep)


def discover_url(url: str, options: LoadOptions | None = None, notes: list[str] | None = None) -> list[TraceSource]:
    """Trace files a URL names, in name order, as URLs (``file://``: as local paths).

    What discovery leaves out (one capture in several formats) is appended to ``notes``.
    """
    notes = [] if notes is None else notes
    local = file_url_path(url)
    if local is not None:
        local_files, local_notes = discover_job([local], options)
        notes.extend(local_notes)
        return local_files
    fs, root = filesystem(url)
    found = url_info(fs, root, url)
    if found.get("type") != "directory" or fs.isfile(f"{root.rstrip('/')}/CUPTI_ACTIVITY_KIND_KERNEL.parquet"):
        return [url]  # a file, or an nsys parquet export (read as one)

    def listing(folder: str) -> tuple[list[str], list[str]]:
        try:
            entries = fs.ls(folder, detail=True)
        except Exception as exc:
            raise InputError(fs.unstrip_protocol(folder), f"cannot list: {exc}") from None
        files = sorted(e["name"] for e in entries if e.get("type") != "directory")
        dirs = sorted(e["name"] for e in entries if e.get("type") == "directory")
        return files, dirs

    def traces_in(folder: str) -> list[str]:
        files, _ = listing(folder)
        chosen = select_trace_files([PurePosixPath(f) for f in files], fs.unstrip_protocol(folder), notes)
        return [str(p) for p in chosen]

    def runs_of(folder: str) -> list[str]:
        base: str | None = f"{folder.rstrip('/')}/plugins/profile"
        if not fs.isdir(base):
            parts = PurePosixPath(folder).parts
            base = folder if parts[-2:] == ("plugins", "profile") else None
        return listing(base)[1] if base else []

    runs = runs_of(root)
    if runs:
        run = choose_run(url, [PurePosixPath(r) for r in runs], options or LoadOptions())
        files = traces_in(str(run))
    else:
        files = traces_in(root)
        if not files:  # a moeprof run folder keeps its traces one level down
            for sub in listing(root)[1]:
                files.extend(traces_in(sub) or [f for r in runs_of(sub)[-1:] for f in traces_in(r)])
    if not files:
        raise InputError(url, "directory holds no trace files")
    return [str(fs.unstrip_protocol(f)) for f in files]
