"""What makes files one job: the same capture in two formats, and files that cannot be one job.

Two questions, both answered from what each file carries and nothing else (docs/metrics.md, "One job"):

- **The same capture?** A file's *activity fingerprint* survives the change of format (XPlane, xprof
  trace JSON, Kineto, Nsight): per device, how many activities, their total duration, and the first
  :data:`FINGERPRINT_ACTIVITIES` activities' start offsets (from the device's first activity) and
  durations, in whole µs (Chrome JSON's unit, the coarsest any format uses). Names are not used: Nsight
  writes demangled kernel names where xprof writes short ones.
- **One job?** A file's :class:`JobIdentity` (world size, device models, framework, HLO modules, the
  time its activities cover); two files whose identities disagree on a field cannot be one job.

Pure functions on columns; the pipeline computes both per file (the map) and decides in the merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from .events import column_codes

FINGERPRINT_ACTIVITIES = 256  # first activities of a device kept in its fingerprint
US = 1000  # ns per µs: Chrome JSON's unit, the coarsest of the formats
TOLERANCE_US = 1  # one rounding step either way
MATCH_SHARE = 0.9  # share of a fingerprint's offsets and durations that must agree within the tolerance
MIN_MATCHED_ACTIVITIES = 32  # fewer activities than this decide nothing (a memset or two per device)
# wall-clock (epoch) timestamps: from 2001-09 on in ns; smaller ones count from boot or the session start
EPOCH_NS = 10**18
JOB_GAP_NS = 5 * 60 * 10**9  # files of one job whose activities lie farther apart than this cannot be one job
# formats whose framework is read from the file itself (Nsight's is a guess from kernel and range names)
FRAMEWORK_FORMATS = ("xplane", "kineto", "chrome")


@dataclass(frozen=True)
class DeviceFingerprint:
    """One device's activities, in whole µs, as any format of the capture shows them."""

    count: int
    busy_us: int  # sum of durations
    offsets_us: tuple[int, ...]  # first activities' starts from the device's first start, sorted
    durations_us: tuple[int, ...]  # the same activities' durations, sorted

    @cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Offsets and durations as arrays, made once: a job's files are compared pairwise."""
        return np.asarray(self.offsets_us, dtype=np.int64), np.asarray(self.durations_us, dtype=np.int64)


def device_fingerprint(start: np.ndarray, end: np.ndarray, by_start: bool = False) -> DeviceFingerprint:
    """One device's fingerprint from its activities' starts and ends (ns); ``by_start``: already sorted."""
    k = FINGERPRINT_ACTIVITIES
    first: slice | np.ndarray = slice(0, k)
    if not by_start and start.size > k:
        first = np.argpartition(start, k - 1)[:k]  # the first activities without a full sort
    s, d = start[first], np.maximum(end[first] - start[first], 0)
    return DeviceFingerprint(
        count=int(start.size),
        busy_us=int(np.rint(np.maximum(end - start, 0).sum() / US)),
        offsets_us=tuple(np.sort(np.rint((s - start.min()) / US).astype(np.int64)).tolist()),
        durations_us=tuple(np.sort(np.rint(d / US).astype(np.int64)).tolist()),
    )


def canonical(prints: Sequence[DeviceFingerprint]) -> tuple[DeviceFingerprint, ...]:
    """A file's device fingerprints in an order that does not depend on device names."""
    return tuple(sorted(prints, key=lambda f: (f.count, f.busy_us, f.durations_us)))


def fingerprint(events: pd.DataFrame) -> tuple[DeviceFingerprint, ...]:
    """Every device's fingerprint (:func:`canonical` order), one pass per device."""
    if not len(events):
        return ()
    start = events["start_ns"].to_numpy(dtype=np.int64)
    end = events["end_ns"].to_numpy(dtype=np.int64)
    codes, values = column_codes(events["device"])
    groups = [np.flatnonzero(codes == c) for c in range(-1, len(values))]
    return canonical([device_fingerprint(start[rows], end[rows]) for rows in groups if rows.size])


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    n = min(a.size, b.size)
    if not n:
        return False
    # a quick no first, on 16 spread positions: one capture's two formats agree nearly everywhere,
    # two different devices almost nowhere, so half of the sample missing decides (1,000 files compare
    # pairwise)
    step = max(1, n // 16)
    a_s, b_s = a[:n:step], b[:n:step]
    if np.count_nonzero(np.abs(a_s - b_s) <= TOLERANCE_US) * 2 < a_s.size:
        return False
    return int(np.count_nonzero(np.abs(a[:n] - b[:n]) <= TOLERANCE_US)) >= MATCH_SHARE * n


def same_device(a: DeviceFingerprint, b: DeviceFingerprint) -> bool:
    """Whether two fingerprints show one device's activities (within a rounding step, a few missing)."""
    if abs(a.count - b.count) > max(1, a.count // 100):
        return False
    if abs(a.busy_us - b.busy_us) > max(a.count, b.count) * TOLERANCE_US + a.busy_us // 100:
        return False
    (a_off, a_dur), (b_off, b_dur) = a.arrays, b.arrays
    return _close(a_off, b_off) and _close(a_dur, b_dur)  # offsets part different devices soonest


BUCKET_US = 4  # the index's bucket: more than twice the tolerance, so a match lies in a neighbouring one
_PROBES = (15, 63)  # activities whose offsets index a fingerprint


def index_keys(f: DeviceFingerprint) -> list[tuple[int, ...]]:
    """The buckets a matching fingerprint may sit in (its own and the neighbours): files that share none
    are not compared (a 1,000-file job is compared in buckets, not in half a million pairs). The probed
    offsets of one capture's two formats agree within the tolerance wherever 90% of them do in practice."""
    if not f.offsets_us:
        return [()]
    probes = [f.offsets_us[min(p, len(f.offsets_us) - 1)] // BUCKET_US for p in _PROBES]
    return [
        (a, b) for a in (probes[0] - 1, probes[0], probes[0] + 1) for b in (probes[1] - 1, probes[1], probes[1] + 1)
    ]


def own_key(f: DeviceFingerprint) -> tuple[int, ...]:
    if not f.offsets_us:
        return ()
    return tuple(f.offsets_us[min(p, len(f.offsets_us) - 1)] // BUCKET_US for p in _PROBES)


def covers(big: tuple[DeviceFingerprint, ...], small: tuple[DeviceFingerprint, ...]) -> bool:
    """Whether every device of ``small`` is a distinct device of ``big`` (the same capture, or part of it)."""
    if not small or len(small) > len(big):
        return False
    if sum(f.count for f in small) < MIN_MATCHED_ACTIVITIES:
        return False
    free = list(big)
    for f in small:
        match = next((i for i, g in enumerate(free) if same_device(f, g)), None)
        if match is None:
            return False
        free.pop(match)
    return True


@dataclass(frozen=True)
class JobIdentity:
    """What a file says about the job it belongs to (``None`` / empty: the file does not say)."""

    format: str = ""
    world_size: int | None = None
    rank: int | None = None
    devices: int = 0  # devices the file holds
    device_models: tuple[str, ...] = ()
    framework: str = "unknown"
    hlo_modules: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    start_ns: int | None = None  # the time its activities cover
    end_ns: int | None = None
    process_groups: tuple[tuple[str, tuple[int, ...]], ...] = field(default=())

    @property
    def wall_clock(self) -> bool:
        return self.start_ns is not None and self.start_ns >= EPOCH_NS


def normal_model(name: str) -> str:
    """A GPU model as the formats agree on it: without vendor words, case and spacing."""
    words = [w for w in name.lower().replace("-", " ").split() if w not in ("nvidia", "tesla", "amd", "geforce")]
    return " ".join(words)


def _span(ns: int) -> str:
    seconds = ns / 1e9
    return f"{seconds / 86400:.1f} days" if seconds >= 86400 else f"{seconds / 60:.1f} min"


def disagreement(a: JobIdentity, b: JobIdentity) -> str | None:
    """Why two files cannot be one job (the field that disagrees, with both values), or None."""
    if a.world_size is not None and b.world_size is not None and a.world_size != b.world_size:
        return f"world size {a.world_size} vs {b.world_size}"
    for x, y in ((a, b), (b, a)):
        if x.rank is not None and y.world_size is not None and x.rank >= y.world_size:
            return f"rank {x.rank} in a world of {y.world_size}"
    models_a, models_b = {normal_model(m) for m in a.device_models}, {normal_model(m) for m in b.device_models}
    # compared within one format: XPlane names a GPU by its compute capability, Kineto and Nsight by product
    if a.format == b.format and models_a and models_b and not models_a & models_b:
        return f"device model {', '.join(sorted(a.device_models))} vs {', '.join(sorted(b.device_models))}"
    known = ("jax", "tensorflow", "pytorch")
    if (
        a.format in FRAMEWORK_FORMATS
        and b.format in FRAMEWORK_FORMATS
        and a.framework in known
        and b.framework in known
        and a.framework != b.framework
    ):
        return f"framework {a.framework} vs {b.framework}"
    if a.hlo_modules and b.hlo_modules and not set(a.hlo_modules) & set(b.hlo_modules):
        return f"HLO modules ({a.hlo_modules[0]}, ...) vs ({b.hlo_modules[0]}, ...), none in common"
    groups_a, groups_b = dict(a.process_groups), dict(b.process_groups)
    for name in sorted(groups_a.keys() & groups_b.keys()):
        if len(groups_a[name]) != len(groups_b[name]):
            return f"process group {name} of {len(groups_a[name])} vs {len(groups_b[name])} ranks"
    if a.wall_clock and b.wall_clock and a.end_ns is not None and b.end_ns is not None:
        gap = max(a.start_ns or 0, b.start_ns or 0) - min(a.end_ns, b.end_ns)
        if gap > JOB_GAP_NS:
            return f"time range: their activities lie {_span(gap)} apart"
    return None
