"""What every reader shares: where a file sits in its job, the reading context, the format sniffer,
the memory guard, and the small interface each reader implements."""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..core.trace import Trace
from ..errors import InputError
from ..options import LoadOptions

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


class Reader(Protocol):
    """One trace format: recognize a path, read it into a :class:`Trace`."""

    format: str

    def sniff(self, path: Path, kind: str) -> bool:
        """Whether this reader reads ``path``, whose content :func:`sniff` called ``kind``."""
        ...

    def read(self, path: Path, context: ReadContext) -> Trace: ...


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


# peak memory of analyzing a file, as a multiple of its size on disk (measured on the benchmarks and
# the shared traces: XPlane read by the wire decoder ~3x at 10M events (1.3 GiB for 440 MiB; at 1M
# events the ~110 MiB of imports make it 6x), an XPlane the decoder refuses is read by jaxlib instead,
# at ~10x, not guarded for; Kineto JSON decoded to columns ~2.5x its text, which gzip holds in ~1/10
# of it -- a gzip is also capped while it inflates, see chrome.read_bytes)
MEMORY_FACTOR = {"xplane": 4, "json": 4, "json.gz": 40, "sqlite": 3, "nsys-rep": 3}


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
