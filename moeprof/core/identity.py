"""What makes files one job: the same capture in two formats, and files that cannot be one job.

Two questions, both answered from what each file carries and nothing else (docs/metrics.md, "One job"):

- **The same capture?** A file's *activity fingerprint* survives the change of format (XPlane, xprof
  trace JSON, Kineto, Nsight): per device, how many activities, their total duration, and the first
  :data:`FINGERPRINT_ACTIVITIES` activities' start offsets (from the device's first activity) and
  durations, in whole µs (Chrome JSON's unit, the coarsest any format uses). Names are not used: Nsight
  writes demangled kernel names where xprof writes short ones.
- **One job?** A file's :class:`JobIdentity` (world size, device models, framework, HLO modules, the
  time its activities cover); two files whose identities disagree on a field cannot be one job.

Pure functions on columns. Each file's :class:`FileIdentity` (both answers' evidence, and the devices it
claims) is computed once, beside its figures (:func:`identify`, in the per-file map); the merge compares them
(:func:`decide_files`) and computes nothing of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from ..errors import InputError
from .events import column_codes
from .trace import TPU, Trace

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
    # the XLA programs its TPU chips ran, as "module (program <id>)": on a TPU the program id is the compiled
    # program's fingerprint, the same on every chip of one SPMD program (GPU ids are per process: not kept)
    programs: tuple[str, ...] = ()

    @property
    def wall_clock(self) -> bool:
        return self.start_ns is not None and self.start_ns >= EPOCH_NS


def normal_model(name: str) -> str:
    """A GPU model as the formats agree on it: without vendor words, case and spacing."""
    words = [w for w in name.lower().replace("-", " ").split() if w not in ("nvidia", "tesla", "amd", "geforce")]
    return " ".join(words)


def _listed(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"({names[0]}, ...)"


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
    if a.programs and b.programs and not set(a.programs) & set(b.programs):
        return (
            f"XLA programs {_listed(a.programs)} vs {_listed(b.programs)}, none in common (their TPU chips ran "
            "different compiled programs)"
        )
    groups_a, groups_b = dict(a.process_groups), dict(b.process_groups)
    for name in sorted(groups_a.keys() & groups_b.keys()):
        if len(groups_a[name]) != len(groups_b[name]):
            return f"process group {name} of {len(groups_a[name])} vs {len(groups_b[name])} ranks"
    if a.wall_clock and b.wall_clock and a.end_ns is not None and b.end_ns is not None:
        gap = max(a.start_ns or 0, b.start_ns or 0) - min(a.end_ns, b.end_ns)
        if gap > JOB_GAP_NS:
            return f"time range: their activities lie {_span(gap)} apart"
    return None


FORMAT_RICHNESS = ("xplane", "nsys", "nsys-parquet", "kineto", "chrome")  # of one capture's formats, read the first


@dataclass(frozen=True)
class FileIdentity:
    """What decides whether a file joins the job: its identity, its fingerprint, the devices it claims."""

    source: str
    format: str
    identity: JobIdentity
    fingerprint: tuple[DeviceFingerprint, ...]
    claimed: tuple[str, ...]


def job_identity(trace: Trace) -> JobIdentity:
    """What the trace says of its job: the merge refuses files that cannot be one job."""
    events = trace.events
    has = bool(len(events))
    return JobIdentity(
        format=trace.format,
        world_size=trace.job.world_size,
        rank=trace.job.rank,
        devices=len(trace.device_names) if has or trace.devices else 0,
        device_models=tuple(sorted({str(m) for m in trace.device_models.values() if m})),
        framework=trace.framework,
        hlo_modules=tuple(sorted({str(module) for module, _ in trace.hlo})),
        hosts=tuple(trace.job.hosts),
        start_ns=int(events["start_ns"].min()) if has else None,
        end_ns=int(events["end_ns"].max()) if has else None,
        process_groups=tuple(sorted((str(k), tuple(v)) for k, v in trace.process_groups.items())),
        programs=tpu_programs(trace),
    )


def tpu_programs(trace: Trace) -> tuple[str, ...]:
    """The XLA programs the trace's TPU chips ran (their activities' module and program id), sorted."""
    events = trace.events
    chips = [d for d, k in trace.device_kinds.items() if k == TPU]
    if not chips or not len(events):
        return ()
    dev_c, dev_v = column_codes(events["device"])
    on_chip = np.isin(dev_c, np.flatnonzero(np.isin(dev_v.astype(str), chips)))
    mod_c, mod_v = column_codes(events["hlo_module"])
    pid = events["program_id"].to_numpy(dtype=np.int64)
    known = on_chip & (mod_c >= 0) & (pid != -1)
    pairs = pd.DataFrame({"m": mod_c[known], "p": pid[known]}).drop_duplicates()
    return tuple(
        sorted(
            f"{mod_v[m]} (program {p & (2**64 - 1)})"  # the id as XLA prints it: unsigned
            for m, p in zip(pairs["m"].tolist(), pairs["p"].tolist(), strict=True)
            if str(mod_v[m])
        )
    )


def identify(trace: Trace, prints: Sequence[DeviceFingerprint] | None = None) -> FileIdentity:
    """A file's :class:`FileIdentity`; ``prints``: its devices' fingerprints where the caller made them while
    measuring (the per-file map walks each device's activities once for both), else made here."""
    return FileIdentity(
        source=str(trace.path),
        format=trace.format,
        identity=job_identity(trace),
        fingerprint=canonical(prints) if prints is not None else fingerprint(trace.events),
        claimed=tuple(trace.device_names),
    )


def decide_files(files: Mapping[int, FileIdentity]) -> tuple[set[int], list[str]]:
    """Which files of a job are set aside as another format of a capture read once, and the notes that
    say so; refuses (InputError) files that cannot be one job, or two files that claim one device.

    Input order decides every tie, so the answer never depends on the order results arrived in."""
    order = sorted(files)
    dropped: set[int] = set()
    twins: dict[int, list[int]] = {}  # kept file -> the files of its capture set aside
    buckets: dict[tuple[int, ...], set[int]] = {}
    for i in order:
        for printed in files[i].fingerprint:
            buckets.setdefault(own_key(printed), set()).add(i)
    for i in order:
        if i in dropped:
            continue
        a = files[i]
        near = {j for printed in a.fingerprint for key in index_keys(printed) for j in buckets.get(key, ())}
        for j in sorted(near):
            b = files[j]
            if j <= i or j in dropped or not _maybe_same_capture(a, b):
                continue
            a_holds_b = covers(a.fingerprint, b.fingerprint)
            b_holds_a = (not a_holds_b or len(a.fingerprint) == len(b.fingerprint)) and covers(
                b.fingerprint, a.fingerprint
            )
            if not (a_holds_b or b_holds_a):
                continue
            # the file holding more devices, else the richer format, else the earlier input
            keep, drop = (i, j) if a_holds_b and (not b_holds_a or _richness(a) <= _richness(b)) else (j, i)
            dropped.add(drop)
            twins.setdefault(keep, []).append(drop)
            if drop == i:
                break
    kept = [i for i in order if i not in dropped]
    notes = [
        f"{', '.join(files[d].source for d in sorted(twins[k]))} "
        f"{'holds' if len(twins[k]) == 1 else 'hold'} the same activities as {files[k].source}: one "
        f"capture in two formats (or one file twice); read {files[k].source} only"
        for k in kept
        if k in twins
    ]
    _refuse_different_jobs([files[i] for i in kept])
    owner: dict[str, str] = {}
    for i in kept:
        f = files[i]
        for device in f.claimed:
            first = owner.setdefault(device, f.source)
            if first != f.source:
                # two inputs that claim one device are two jobs (or one job twice): refuse, naming both
                raise InputError(
                    f.source,
                    f"claims device {device}, which {first} holds too: traces of different jobs, or one job "
                    "twice? Analyze them separately (moeprof report --compare shows them side by side)",
                )
    return dropped, notes


def _richness(f: FileIdentity) -> int:
    return FORMAT_RICHNESS.index(f.format) if f.format in FORMAT_RICHNESS else len(FORMAT_RICHNESS)


def _maybe_same_capture(a: FileIdentity, b: FileIdentity) -> bool:
    """What the files say before their activities are compared: two ranks, or two hosts named by one
    format, are two captures however alike their activities."""
    if a.identity.rank is not None and b.identity.rank is not None and a.identity.rank != b.identity.rank:
        return False
    named = ("xplane", "nsys", "nsys-parquet")  # host names from the file's content (Chrome's is its file name)
    if a.format == b.format in named and a.identity.hosts and b.identity.hosts:
        return a.identity.hosts == b.identity.hosts
    return True


_STATES: tuple[Callable[[JobIdentity], bool], ...] = (
    lambda i: i.world_size is not None,
    lambda i: bool(i.device_models),
    lambda i: i.framework in ("jax", "tensorflow", "pytorch") and i.format in FRAMEWORK_FORMATS,
    lambda i: bool(i.hlo_modules),
    lambda i: bool(i.programs),
    lambda i: bool(i.process_groups),
    lambda i: i.wall_clock,
)


def _refuse_different_jobs(files: Sequence[FileIdentity]) -> None:
    """Refuse files that cannot be one job, naming both and the field that disagrees (core.identity).

    Each file is compared, in input order (the message never depends on which result arrived first),
    with the first earlier file that states each field (a few files, so 1,000 files cost 1,000
    comparisons, not half a million), and the ranks and devices of the files must fit the world they
    state."""
    references: list[FileIdentity] = []  # the first file that states each field
    for b in files:
        for a in references:
            why = disagreement(a.identity, b.identity)
            if why:
                raise InputError(
                    b.source,
                    f"cannot be one job with {a.source}: {why}. Analyze them separately "
                    "(moeprof report --compare shows them side by side)",
                )
        for states in _STATES:
            if states(b.identity) and not any(states(a.identity) for a in references):
                references.append(b)
                break
    stated = next((f for f in files if f.identity.world_size is not None), None)
    if stated is None or stated.identity.world_size is None:
        return
    world = stated.identity.world_size
    ranks: set[int] = set()
    devices = 0
    counted: list[FileIdentity] = []
    for f in files:
        if f.identity.rank is not None:
            ranks.add(f.identity.rank)
        else:
            devices += f.identity.devices
        counted.append(f)
        if len(counted) > 1 and len(ranks) + devices > world:
            # name the file that stated the world and another: the one that went over, or the one before it
            other = f if f is not stated else counted[-2]
            raise InputError(
                other.source,
                f"cannot be one job with {stated.source}: world size {world}, but the files hold "
                f"{len(ranks) + devices} ranks or devices. Analyze them separately "
                "(moeprof report --compare shows them side by side)",
            )
