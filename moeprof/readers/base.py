"""What every reader shares: where a file sits in its job, the reading context, the format sniffer,
the memory guard, and the small interface each reader implements."""

from __future__ import annotations

import gzip
import os
import re
import sys
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from ..core.events import isolated_activity, outside_window
from ..core.time_window import MAX_DURATION_NS, TOTAL_LIMIT_NS
from ..core.trace import Trace
from ..errors import InputError
from ..options import LoadOptions
from ..words import plural
from .rocpd_schema import is_rocpd

_GZIP_MAGIC = b"\x1f\x8b"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_NSYS_REP_MAGIC = b"NVIDIA"


@dataclass(frozen=True)
class Placement:
    """Where one trace file sits in the job: which host, and which of the host's devices it holds."""

    host_index: int  # position of the host among the job's hosts (global ids: host_index * devices_per_host + ...)
    host: str | None = None  # host name to use (None: the one the trace states)
    first_ordinal: int = 0  # this file's device N is the host's device first_ordinal + N
    devices_per_host: int | None = None  # None: the devices in this file


@dataclass(frozen=True)
class ReadContext:
    """What a reader needs besides the file: the user's options and the file's place in the job."""

    options: LoadOptions = field(default_factory=LoadOptions)
    placement: Placement = field(default_factory=lambda: Placement(0))
    kind: str | None = None  # what sniff found the file to be, where the caller sniffed it already


class Reader(Protocol):
    """One trace format: recognize a path, read it into a :class:`Trace`."""

    format: str

    def sniff(self, path: Path, kind: str) -> bool:
        """Whether this reader reads ``path``, whose content :func:`sniff` called ``kind``."""
        ...

    def read(self, path: Path, context: ReadContext) -> Trace: ...


# the header rocprofv3 writes first in its CSV outputs (rocprofiler-sdk source/lib/output/generateCSV.cpp;
# rocpd's conversion adds a leading "Guid" column): kernel trace, memory copy trace, agent list
_ROCPROF_CSV = re.compile(
    rb'^\s*(?:"?Guid"?,)?(?:"?Kind"?,"?(?:Agent_Id|Direction)"?,|"?Node_Id"?,"?Logical_Node_Id"?,)'
)

# rocprofv3's JSON output opens with its one key (rocprofiler-sdk source/lib/output/generateJSON.cpp)
_ROCPROF_JSON = b'"rocprofiler-sdk-tool"'


def sniff(path: Path) -> str:
    """The format of a file from its first bytes (and name; a SQLite file from its schema): xplane, json, sqlite,
    rocpd, nsys-rep, rocprof-csv."""
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not head:
        raise InputError(path, "empty file")
    name = path.name.lower()
    if head.startswith(_SQLITE_MAGIC):
        # rocprofv3's rocpd database and an Nsight Systems export are both SQLite: the schema tells them apart
        return "rocpd" if is_rocpd(path) else "sqlite"
    if head.startswith(_NSYS_REP_MAGIC) or name.endswith(".nsys-rep"):
        return "nsys-rep"
    if head.startswith(_GZIP_MAGIC):
        try:
            with gzip.open(path, "rb") as fh:
                inner = fh.read(64)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(path, f"corrupt gzip data: {exc}") from None
        if name.endswith(".pb.gz"):  # a gzipped XPlane (protobuf has no magic: its name says it)
            return "xplane"
        if _ROCPROF_CSV.match(inner):
            return "rocprof-csv"
        if _ROCPROF_JSON in inner:
            return "rocprof-json"
        return _json_kind(path, inner)
    if _ROCPROF_CSV.match(head):
        return "rocprof-csv"
    if _ROCPROF_JSON in head:
        return "rocprof-json"
    if head.lstrip()[:1] in (b"{", b"["):
        return _json_kind(path, head)
    if name.endswith(".pb"):
        return "xplane"
    return "unknown"


def _json_kind(path: Path, head: bytes) -> str:
    """JSON text: an NCCL Inspector log (JSON lines whose first object has the Inspector's keys) or a
    Chrome/Kineto trace ("json"); neither: "unknown"."""
    if head.lstrip()[:1] not in (b"{", b"["):
        return "unknown"
    if head.lstrip()[:1] == b"{":
        from .nccl_inspector import is_inspector_log

        if is_inspector_log(path):
            return "nccl-inspector"
    return "json"


# peak memory of analyzing a file, as a multiple of its size on disk (measured on the benchmarks and
# the shared traces: XPlane read by the wire decoder ~3.2x at 10M events (1.39 GiB for 440 MiB with its
# lines decoded on 2 threads, 1.41 GiB on 8; at 1M events the ~110 MiB of imports make it 6x), an XPlane
# the decoder refuses is read by jaxlib instead, at ~10x, not guarded for; Kineto JSON decoded to columns
# ~2.5x its text, which gzip holds in ~1/10 of it -- a gzip is also capped while it inflates, see
# chrome.read_bytes; NCCL Inspector logs decoded (msgspec) into the operation rows: 2.3x (+136 MB for 58.7 MB,
# 125k lines; Arrow's route, for files the typed one does not take, 3.3-4.8x) (benchmarks/bench_inspector.py),
# gzip ~10x smaller; rocprofv3 CSV read by Arrow into categories 1.37x at 300k real-shaped rows (199 MB,
# benchmarks/bench_rocprof.py), which gzip holds in ~1/20 (the real MI350X trace: 597 KB in 30 KB); rocprofv3
# JSON decoded to dicts ~6.4x its (indented) text above the imports (19 MB, 16,800 dispatches: 230 MiB peak,
# 107 MiB of it imports), a gzip of it capped while it inflates as Kineto's)
MEMORY_FACTOR = {
    "xplane": 4,
    # a gzipped XPlane is inflated to a temporary file first (protobuf varints compress ~3-5x)
    "xplane.gz": 20,
    "json": 4,
    "json.gz": 40,
    "sqlite": 3,
    "nsys-rep": 3,
    "rocprof-csv": 2,
    "rocprof-csv.gz": 40,
    # rocprofv3 JSON: analyze's peak 9.5x the file (1,089 MiB for 115 MiB; orjson's objects alone 8.6x, the
    # floor of any Python reader of it; benchmarks/bench_rocprof_json.py, 2026-12-03)
    "rocprof-json": 10,
    "rocprof-json.gz": 40,
    # rocpd: analyze's peak 6.6x the file (995 MiB for 151 MiB holding 1.38M dispatch rows and nothing else,
    # the densest shape, 2026-12-03: the reader's columns plus the replay's graph; real files, with an
    # event row per dispatch and HIP regions, sit lower; benchmarks/bench_rocpd.py)
    "rocpd": 7,
    "nccl-inspector": 6,
    "nccl-inspector.gz": 60,
}


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
    gz = fmt in ("xplane", "json", "rocprof-csv", "rocprof-json", "nccl-inspector") and path.name.lower().endswith(
        ".gz"
    )
    need = size * MEMORY_FACTOR.get(f"{fmt}.gz" if gz else fmt, 12)
    if need > available:
        gib = 2**30
        raise InputError(
            path,
            f"too large to analyze in memory here ({size / gib:.1f} GiB on disk needs about {need / gib:.0f} GiB,"
            f" {available / gib:.0f} GiB available); analyze one file per host or rank, or set"
            " MOEPROF_IGNORE_MEMORY_CHECK=1 to try anyway",
        )


def screen_times(trace: Trace, path: Path | str) -> Trace:
    """The trace without the device activities (and step/module markers) its times cannot place.

    Every reader's table passes through here (``read_file``). A row with an end point at or past
    +-2^62 ns (where the readers put NaN, inf and times no int64 holds) or before 0, that ends before
    it starts, or that lasts more than a day is dropped, and one warning counts what was dropped and
    why (markers: all but the last rule). A file where nothing is left, or whose activities add up
    past 2^62 ns, is refused. See docs/metrics.md, "Times moeprof accepts".
    """
    events, markers = trace.events, trace.markers
    if not len(events) and not len(markers):
        return trace
    ev = outside_window(events["start_ns"].to_numpy(), events["end_ns"].to_numpy())
    mk = outside_window(markers["start_ns"].to_numpy(), markers["end_ns"].to_numpy())
    drop = ev["beyond"] | ev["negative"] | ev["reversed"] | ev["long"]
    drop_markers = mk["beyond"] | mk["negative"] | mk["reversed"]  # a step may last longer than a day
    if drop.any() and drop.all():
        raise InputError(path, f"no device activity with placeable times: {_why(ev)} ({WINDOW})")
    warnings = list(trace.warnings)
    if drop.any():
        dropped = plural(int(drop.sum()), "device activity", "device activities")
        warnings.append(f"{path}: dropped {dropped} whose times cannot be placed: {_why(ev)} ({WINDOW})")
        events = events.loc[~drop].reset_index(drop=True)
    # an activity more than a day away from the rest of its device's activity (a corrupt offset) would
    # stretch the device's span and idle time to that distance: an outlier, dropped as a day-long one is
    isolated = isolated_activity(events["device"], events["start_ns"].to_numpy(), events["end_ns"].to_numpy())
    if isolated.any():
        dropped = plural(int(isolated.sum()), "device activity", "device activities")
        warnings.append(f"{path}: dropped {dropped} as outliers: {ISOLATED}")
        events = events.loc[~isolated].reset_index(drop=True)
    if drop_markers.any():
        dropped = plural(int(drop_markers.sum()), "step or module marker")
        warnings.append(f"{path}: dropped {dropped} whose times cannot be placed: {_why(mk, long=False)}")
        markers = markers.loc[~drop_markers].reset_index(drop=True)
    total = float(np.sum(events["end_ns"].to_numpy(np.float64) - events["start_ns"].to_numpy(np.float64)))
    if total >= TOTAL_LIMIT_NS:
        raise InputError(path, f"device activities add up to {total:.3g} ns, past what int64 sums hold (2^62 ns)")
    if len(warnings) == len(trace.warnings):
        return trace
    return trace.replace(
        events=events,
        markers=markers,
        warnings=tuple(warnings),
        # outliers are dropped activities too: check refuses both unless --allow-dropped
        dropped_activities=trace.dropped_activities + int(drop.sum()) + int(isolated.sum()),
    )


ISOLATED = (
    f"more than {MAX_DURATION_NS // 3_600_000_000_000} h after or before the rest of their device's activity "
    f"(each device keeps its largest run of activities without such a gap)"
)
WINDOW = f"accepted: 0 <= time < 2^62 ns, 0 <= duration <= {MAX_DURATION_NS // 3_600_000_000_000} h"


def _why(masks: dict[str, np.ndarray], long: bool = True) -> str:
    said = {
        "beyond": "with a time past +-2^62 ns or not a finite number",
        "negative": "before the clock's zero",
        "reversed": "ending before they start",
        "long": "lasting more than a day",
    }
    if not long:
        del said["long"]
    return "; ".join(f"{int(masks[k].sum()):,} {text}" for k, text in said.items() if masks[k].any())


# absl/glog's line prefix ("E0000 00:00:1796119877.337271    5474 wire_format_lite.cc:578] ") and its first-log notice
_GLOG_PREFIX = re.compile(r"^[EWIF]\d{4} [\d:. ]+\s+\d+ [\w.]+:\d+\] ")
_ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog()"


@contextmanager
def native_log(path: Path | str) -> Iterator[None]:
    """Keep what native code (jaxlib's C++, XLA) writes to file descriptor 2 meanwhile off the terminal.

    Python-level redirection cannot catch it: fd 2 itself is pointed at a temporary file (never beside
    the input). When the read succeeds the lines are dropped; when it fails with an InputError, the first
    of them is folded into its one line.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2 to redirect: nothing native can reach a terminal either
        yield
        return
    try:
        scratch: IO[bytes] = tempfile.TemporaryFile()
    except OSError:  # no room for a scratch file (a full /tmp, issue 49): the lines are dropped, not kept
        scratch = open(os.devnull, "w+b")  # closed by the with below
    with scratch as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        except InputError as exc:
            said = _native_lines(log, saved)
            saved = -1
            if said and exc.path is not None:
                raise InputError(exc.path, f"{exc.problem} ({said[0][:300]})") from None
            raise
        finally:
            if saved >= 0:
                _native_lines(log, saved)


def _native_lines(log: object, saved: int) -> list[str]:
    """Restore fd 2 and return what was logged meanwhile, prefixes and notices removed."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(saved, 2)
    os.close(saved)
    log.seek(0)  # type: ignore[attr-defined]
    text = log.read().decode("utf-8", "replace")  # type: ignore[attr-defined]
    return [
        _GLOG_PREFIX.sub("", line).strip() for line in text.splitlines() if line.strip() and _ABSL_NOTICE not in line
    ]
