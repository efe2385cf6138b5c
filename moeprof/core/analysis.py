"""The analysis as typed values: what ``measure`` returns and every renderer and gate reads.

Field names are the spec's JSON keys (``moeprof.analysis/1``, spec §7). A saved
``analysis.json`` read back with :meth:`Analysis.from_json` and a fresh result are
the same type, so ``check``/``diff``/``history`` never work on JSON text.
Every ratio is computed here, from the ns sums, in one place (:func:`ratio`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, NamedTuple, Self, TypeVar, cast

import numpy as np
import pandas as pd

from ..errors import InputError
from .expert_load import ExpertLoad
from .ledger import DEVICE_KEYS
from .sections import (
    EdgeExposure,
    Hardware,
    InspectorResult,
    Launches,
    LedgerTotals,
    RoleRow,
    Roofline,
    Throughput,
    Utilization,
)

SCHEMA = "moeprof.analysis/1"

# the §4 time figures of a window, in the order the JSON lists them
NS_KEYS: tuple[str, ...] = (
    "accumulated_ns",
    "compute_ns",
    "comm_ns",
    "memcpy_ns",
    "other_ns",
    "span_ns",
    "busy_ns",
    "idle_ns",
    "exposed_comm_ns",
    "overlapped_comm_ns",
    "comm_nvlink_ns",
    "comm_ib_ns",
    "comm_unknown_link_ns",
    "exposed_comm_nvlink_ns",
    "exposed_comm_ib_ns",
    "exposed_comm_unknown_link_ns",
)
# §8: present where the ledger ran (several members of a group in the inputs): the ledger's own per-device
# figures (core.ledger.DEVICE_KEYS), named once there
LEDGER_KEYS: tuple[str, ...] = DEVICE_KEYS
# ratio -> (numerator, denominator); the only definition of each ratio
RATIOS: dict[str, tuple[str, str]] = {
    "comm_share": ("comm_ns", "accumulated_ns"),
    "exposed_comm_fraction": ("exposed_comm_ns", "span_ns"),
    "idle_fraction": ("idle_ns", "span_ns"),
    # §8: exposed communication spent waiting for the last member, or moving bytes, per span
    "exposed_wait_fraction": ("exposed_wait_ns", "span_ns"),
    "exposed_transfer_fraction": ("exposed_transfer_ns", "span_ns"),
}
JSON_RATIOS = ("comm_share", "exposed_comm_fraction")  # the ratios the JSON carries (spec §4)


def ratio(numerator: float, denominator: float) -> float:
    """A share of two sums; 0 when the denominator is 0 (spec §4)."""
    return float(numerator) / float(denominator) if denominator else 0.0


_PLAIN = frozenset((str, int, bool, type(None)))  # values _clean keeps as they are, without a call


def _clean(value: Any) -> Any:
    """JSON has no NaN: unknown figures are null."""
    kind = type(value)
    if kind is dict:  # the common containers first, their plain values kept in place (a call per value
        # cost more than the rest of the JSON: a projection's critical path holds tens of thousands)
        return {k: v if type(v) in _PLAIN else _clean(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [v if type(v) in _PLAIN else _clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Figures:
    """The §4 figures of one window (a device, a step of a device, or the total)."""

    accumulated_ns: int = 0
    compute_ns: int = 0
    comm_ns: int = 0
    memcpy_ns: int = 0
    other_ns: int = 0
    span_ns: int = 0
    busy_ns: int = 0
    idle_ns: int = 0
    exposed_comm_ns: int = 0
    overlapped_comm_ns: int = 0
    comm_nvlink_ns: int = 0
    comm_ib_ns: int = 0
    comm_unknown_link_ns: int = 0
    exposed_comm_nvlink_ns: int = 0
    exposed_comm_ib_ns: int = 0
    exposed_comm_unknown_link_ns: int = 0
    ledger: Mapping[str, int] | None = None  # LEDGER_KEYS, where the ledger ran

    @property
    def comm_share(self) -> float:
        return ratio(self.comm_ns, self.accumulated_ns)

    @property
    def exposed_comm_fraction(self) -> float:
        return ratio(self.exposed_comm_ns, self.span_ns)

    @property
    def idle_fraction(self) -> float:
        return ratio(self.idle_ns, self.span_ns)

    def value(self, key: str) -> float:
        """A figure by its JSON name: an ns sum, a ledger figure or a ratio."""
        if key in RATIOS:
            num, den = RATIOS[key]
            return ratio(self.value(num), self.value(den))
        if key in LEDGER_KEYS:
            return float((self.ledger or {}).get(key, 0))
        return float(getattr(self, key))

    def figures_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in NS_KEYS}
        if self.ledger is not None:
            out.update({k: int(self.ledger.get(k, 0)) for k in LEDGER_KEYS})
        for k in JSON_RATIOS:
            out[k] = getattr(self, k)
        return out

    @staticmethod
    def figures_from(doc: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor arguments of the figure part of a JSON row (missing figures are 0)."""
        kw: dict[str, Any] = {k: _int(doc.get(k)) for k in NS_KEYS}
        if any(k in doc for k in LEDGER_KEYS):
            kw["ledger"] = {k: _int(doc.get(k)) for k in LEDGER_KEYS}
        return kw

    def to_json(self) -> dict[str, Any]:
        return self.figures_json()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Self:
        return cls(**cls.figures_from(doc))


def _int(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"expected a number, got {value!r}")
    return int(value)


def sum_figures(rows: Iterable[Figures]) -> Figures:
    """``total``: every ns key summed; ratios follow from the sums (spec §4)."""
    rows = list(rows)
    kw: dict[str, Any] = {k: sum(getattr(r, k) for r in rows) for k in NS_KEYS}
    if any(r.ledger is not None for r in rows):
        kw["ledger"] = {k: sum((r.ledger or {}).get(k, 0) for r in rows) for k in LEDGER_KEYS}
    return Figures(**kw)


@dataclass(frozen=True, slots=True)
class DeviceFigures(Figures):
    device: str = ""
    host: str = ""
    kind: str = ""  # GPU | TPU | CPU, as the device's reader recorded it (core.trace.DEVICE_KINDS); "" unknown

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "host": self.host, "kind": self.kind, **self.figures_json()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Self:
        device = str(doc.get("device", ""))
        kind = str(doc.get("kind") or saved_kind(device))
        return cls(device=device, host=str(doc.get("host", "")), kind=kind, **cls.figures_from(doc))


_SAVED_KIND = re.compile(r"/(GPU|TPU|CPU):\d+$")


def saved_kind(device: str) -> str:
    """The kind of a device of a saved analysis written before devices carried theirs: what its name, as
    moeprof's readers wrote it (``host/TPU:0``), says; "" for any other name. Only for those documents: a
    measured device's kind is its reader's record."""
    m = _SAVED_KIND.search(device)
    return m.group(1) if m else ""


def job_kind(devices: Iterable[DeviceFigures]) -> str:
    """GPU, TPU or CPU where every device is of that kind; "" for a mix, none, or kinds unknown."""
    kinds = {d.kind for d in devices}
    return kinds.pop() if len(kinds) == 1 else ""


@dataclass(frozen=True, slots=True)
class StepFigures(Figures):
    step: int = 0
    device: str = ""
    host: str = ""
    start_ns: int = 0
    end_ns: int = 0

    def to_json(self) -> dict[str, Any]:
        head = {
            "step": self.step,
            "device": self.device,
            "host": self.host,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
        }
        return {**head, **self.figures_json()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Self:
        return cls(
            step=_int(doc.get("step")),
            device=str(doc.get("device", "")),
            host=str(doc.get("host", "")),
            start_ns=_int(doc.get("start_ns")),
            end_ns=_int(doc.get("end_ns")),
            **cls.figures_from(doc),
        )


T = TypeVar("T")
S = TypeVar("S")


def _plain_to_json(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _plain_from_json(cls: type[T], doc: Mapping[str, Any]) -> T:
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in doc.items() if k in names})


@dataclass(frozen=True, slots=True)
class Collective:
    """One row of ``collectives``: an op (HLO op or kernel name) and kind, over all devices."""

    name: str
    kind: str
    link: str  # nvlink | ib | mixed | unknown
    count: int
    devices: int
    total_ns: int
    exposed_ns: int
    bytes: int | None = None
    bytes_per_call: int | None = None
    comm_nvlink_ns: int = 0
    comm_ib_ns: int = 0
    comm_unknown_link_ns: int = 0
    exposed_nvlink_ns: int = 0
    exposed_ib_ns: int = 0
    exposed_unknown_link_ns: int = 0
    ib_fraction: float | None = None
    group_size: int | None = None
    algo_bandwidth_gbps: float | None = None
    bus_bandwidth_gbps: float | None = None
    link_peak_gbps: float | None = None
    link_utilization: float | None = None
    bandwidth_verdict: str | None = None  # latency-bound | below-peak | under-utilized | bandwidth-bound
    wait_ns: int | None = None  # §8, where the ledger ran
    transfer_ns: int | None = None
    transfer_bus_bandwidth_gbps: float | None = None  # bytes over the transfer part alone
    latency_knee_bytes: int | None = None  # bytes per call below which the link's latency dominates (a peak known)

    def to_json(self) -> dict[str, Any]:
        out = _plain_to_json(self)
        for k in ("wait_ns", "transfer_ns", "transfer_bus_bandwidth_gbps", "latency_knee_bytes"):
            if out[k] is None:
                del out[k]
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Collective:
        return _plain_from_json(cls, doc)


@dataclass(frozen=True, slots=True)
class Opportunity:
    """Spec §6: something to attack, the most it could save on the worst device, and what to do."""

    title: str
    kind: str
    name: str
    link: str | None
    exposed_ns: int
    saving_bound_ns: int
    bound_from: str  # exposed | hlo | ledger | compute (the compute beside host copies): what bounds saving_bound_ns
    evidence: Mapping[str, Any]
    remedy: str
    remedy_id: str = ""  # key of the remedy text in the catalogue (a remedy is written once)
    remedy_family: str = ""  # what kind of fix it is, stable across the remedy's framework variants
    # what the remedy was chosen on: each condition of its row with what the trace showed, and the facts its
    # text depends on with the evidence for them (insight.remedies.Remedy.checked)
    remedy_checked: tuple[Mapping[str, Any], ...] = ()
    # §9: the mean step saving if its activities took no time (None: not computed, or not activities)
    projected_saving_ns: int | None = None
    # the most that saving can be (the work on the measured critical chain); set where it was bounded,
    # with projected_saving_ns None where that bound made the replay not worth it (docs/metrics.md §9)
    projected_saving_max_ns: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = _plain_to_json(self)
        out["evidence"] = dict(self.evidence)
        out["remedy_checked"] = [dict(c) for c in self.remedy_checked]
        for key in ("remedy_id", "remedy_family", "remedy_checked"):
            if not out[key]:
                del out[key]
        for key in ("projected_saving_ns", "projected_saving_max_ns"):
            if out[key] is None:
                del out[key]
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Opportunity:
        kw = dict(doc)
        kw.setdefault("name", kw.get("kind", ""))
        kw.setdefault("link", None)
        kw.setdefault("bound_from", "exposed")
        kw.setdefault("evidence", {})
        kw.setdefault("remedy", "")
        kw["remedy_checked"] = tuple(dict(c) for c in kw.get("remedy_checked") or () if isinstance(c, Mapping))
        return _plain_from_json(cls, kw)


@dataclass(frozen=True, slots=True)
class ScopeRow:
    """One row of ``scopes``: the activities of one JAX name scope (its layers folded: ``layer*/experts``),
    over every device, and the FLOPs and bytes their ops state where the trace gives them (TPU XPlanes)."""

    scope: str
    count: int
    devices: int
    total_ns: int
    share: float  # of the job's accumulated_ns
    compute_ns: int = 0
    comm_ns: int = 0
    backward_ns: int = 0  # of total_ns, in the backward pass (transpose in the name stack)
    members: tuple[str, ...] = ()  # the scopes folded into this row (layer0/experts, layer1/experts, ...)
    flops: float | None = None  # the ops' flops stat (XLA's cost model)
    model_flops: float | None = None  # the ops' model_flops stat
    bytes_accessed: float | None = None
    # the FLOPs moeprof counts (model_flops where stated, else flops; the ragged dots the HLO shows recounted)
    counted_flops: float | None = None
    tflops_per_s: float | None = None  # counted_flops over total_ns
    peak_fraction: float | None = None  # tflops_per_s over the chip's peak
    # XLA's own figure (its stat alone) where the recount changed it
    tflops_per_s_xla: float | None = None
    peak_fraction_xla: float | None = None
    # what the component costs: the activities that serve the scope (its own, its backward's, the updates and
    # casts of its parameters; docs/metrics.md "Components"), clipped and summed like total_ns; None: not measured
    attributed_count: int | None = None
    attributed_ns: int | None = None
    attributed_share: float | None = None  # of the job's accumulated_ns
    attributed_backward_ns: int | None = None  # of attributed_ns, serving the backward pass

    def to_json(self) -> dict[str, Any]:
        out = _plain_to_json(self)
        out["members"] = list(self.members)
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ScopeRow:
        kw = dict(doc)
        kw["members"] = tuple(kw.get("members") or ())
        return _plain_from_json(cls, kw)


@dataclass(frozen=True, slots=True)
class FigureSpread:
    min: float
    median: float
    max: float
    max_device: str


@dataclass(frozen=True, slots=True)
class ComputeStraggler:
    """The device that computes longest (it makes the others wait in their collectives)."""

    device: str
    compute_over_median: float
    flagged: bool


@dataclass(frozen=True, slots=True)
class StepSummary:
    step: int
    span_ns: int  # the job's step: its devices' §5 windows from the earliest start to the latest end (aligned)
    exposed_comm_ns: int  # mean over devices
    comm_share: float


@dataclass(frozen=True, slots=True)
class SlowestStep:
    step: int  # as the trace numbers it (ProfilerStep#N, the Steps line; the JSON's steps[].step)
    span_ns: int
    over_median: float | None
    flagged: bool
    position: int | None = None  # its position as --steps counts it (0-based, after --skip-first); None unknown


@dataclass(frozen=True, slots=True)
class Spread:
    """How figures vary across devices and steps: a straggler device or a slow step shows here."""

    devices: Mapping[str, FigureSpread] = field(default_factory=dict)
    straggler: ComputeStraggler | None = None
    steps: tuple[StepSummary, ...] = ()
    slowest_step: SlowestStep | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.devices:
            out["devices"] = {k: _plain_to_json(v) for k, v in self.devices.items()}
        if self.straggler is not None:
            out["straggler"] = _plain_to_json(self.straggler)
        if self.steps:
            out["steps"] = [_plain_to_json(s) for s in self.steps]
        if self.slowest_step is not None:
            out["slowest_step"] = _plain_to_json(self.slowest_step)
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Spread:
        return cls(
            devices={k: _plain_from_json(FigureSpread, v) for k, v in (doc.get("devices") or {}).items()},
            straggler=_plain_from_json(ComputeStraggler, doc["straggler"]) if doc.get("straggler") else None,
            steps=tuple(_plain_from_json(StepSummary, s) for s in doc.get("steps") or ()),
            slowest_step=_plain_from_json(SlowestStep, doc["slowest_step"]) if doc.get("slowest_step") else None,
        )


# ---------------------------------------------------------------- §9 projections (plain data)

CAUSES = ("compute", "transfer", "wait", "launch", "copy", "other")
# the question a projection answers; the JSON's "role"
PROJECTION_ROLES = ("straggler", "router", "asked", "opportunity", "kind")
# a projected saving below this share of the step is not one to say (replay noise: µs on a ms step)
SIGNIFICANT_SAVING = 0.01


@dataclass(frozen=True, slots=True)
class StepBound:
    """What sets a projected step's end: the largest cause on its critical path, its share of the path, and
    the devices that cause lies on (in path order); for the measured step, the activities that make most of
    that cause's time on the path (``ops``: what bounds the step, by name and stream)."""

    cause: str  # one of CAUSES
    share: float
    devices: tuple[str, ...]
    ops: tuple[PathOp, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cause": self.cause, "share": self.share, "devices": list(self.devices)}
        if self.ops:
            out["ops"] = [op._asdict() for op in self.ops]
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StepBound:
        ops = tuple(
            PathOp(str(o.get("name", "")), str(o.get("device", "")), str(o.get("stream", "")), int(o.get("ns") or 0))
            for o in doc.get("ops") or ()
            if isinstance(o, Mapping)
        )
        return cls(
            str(doc.get("cause", "")),
            float(doc.get("share") or 0.0),
            tuple(map(str, doc.get("devices") or ())),
            ops,
        )


class PathOp(NamedTuple):
    """Activities of one name on one device's stream that lie on a critical path, and their time there."""

    name: str
    device: str
    stream: str
    ns: int


@dataclass(frozen=True, slots=True)
class StepProjection:
    step: int
    measured_ns: int
    projected_ns: int

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "measured_ns": self.measured_ns, "projected_ns": self.projected_ns}


class PathSegment(NamedTuple):
    """One piece of a critical path: an activity's time, or the launch/host gap before one (what iterating a
    :class:`CriticalPath` gives, one at a time)."""

    device: str
    bucket: str  # the activity's bucket ("" for a gap)
    kind: str  # §3 kind for comm, "" otherwise
    cause: str  # compute | transfer | wait | launch | copy | other
    name: str
    start_ns: int  # projected, on the reference clock
    end_ns: int

    def to_json(self) -> dict[str, Any]:
        device, bucket, kind, cause, name, start_ns, end_ns = self
        return {
            "device": device,
            "bucket": bucket,
            "kind": kind,
            "cause": cause,
            "name": name,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "ns": end_ns - start_ns,
        }


PATH_COLUMNS = ("device", "bucket", "kind", "cause", "name", "start_ns", "end_ns")  # PathSegment's fields
STRING_COLUMNS = PATH_COLUMNS[:5]
LONGEST_SEGMENTS = 5  # the longest segments a projection's JSON lists (the whole path: a parquet file on request)


@dataclass(frozen=True, eq=False)
class CriticalPath:
    """A projected step's critical path as columns, one entry per segment in path order (spec §9): the strings
    as object arrays of shared values, the times as int64 arrays; a path of a million segments makes a few
    arrays, not a million Python objects.

    The JSON carries its figures, not its list (docs/metrics.md, "Projection"): the number of segments, their
    time, the devices it crosses (in path order) and the :data:`LONGEST_SEGMENTS` longest. A path read back
    from that JSON holds those longest segments only (``complete`` False); the whole path of a fresh
    projection is written with ``analyze --critical-path FILE.parquet`` (:meth:`frame`)."""

    device: np.ndarray
    bucket: np.ndarray
    kind: np.ndarray
    cause: np.ndarray
    name: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    segments: int = -1  # segments on the whole path (-1: as many as the columns hold)
    total_ns: int = -1  # their time (-1: the columns' sum)
    crossed: tuple[str, ...] | None = None  # the devices it crosses, in path order (None: from the columns)

    def __post_init__(self) -> None:
        if self.segments < 0:
            object.__setattr__(self, "segments", int(self.start_ns.size))
        if self.total_ns < 0:
            object.__setattr__(self, "total_ns", int(self.ns.sum(dtype=np.int64)))
        if self.crossed is None:
            named = self.device[self.device != ""] if self.device.size else self.device
            first = pd.unique(named) if named.size else ()
            object.__setattr__(self, "crossed", tuple(str(d) for d in first))

    @classmethod
    def empty(cls) -> CriticalPath:
        none = np.zeros(0, dtype=object)
        return cls(none, none, none, none, none, np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def of_segments(
        cls,
        rows: Iterable[PathSegment],
        segments: int = -1,
        total_ns: int = -1,
        crossed: tuple[str, ...] | None = None,
    ) -> CriticalPath:
        """A path from its segments (a few: tests, a saved analysis' longest)."""
        held = list(rows)
        cols = list(zip(*held)) if held else [()] * len(PATH_COLUMNS)
        text = [np.array(c, dtype=object) for c in cols[:5]]
        start, end = (np.array(c, dtype=np.int64) for c in cols[5:])
        device, bucket, kind, cause, name = text
        return cls(device, bucket, kind, cause, name, start, end, segments=segments, total_ns=total_ns, crossed=crossed)

    @property
    def complete(self) -> bool:
        """Whether the columns hold every segment of the path (a fresh projection's do)."""
        return int(self.start_ns.size) == self.segments

    @property
    def ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns

    def __len__(self) -> int:
        return self.segments

    def __bool__(self) -> bool:
        return self.segments > 0

    def __eq__(self, other: object) -> bool:
        """Two paths are equal where their JSON is (a path read back from it equals the fresh one)."""
        return isinstance(other, CriticalPath) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __iter__(self) -> Iterator[PathSegment]:
        """The segments held, one at a time (a few: tests, the longest of a saved analysis)."""
        for row in zip(*(getattr(self, c).tolist() for c in PATH_COLUMNS)):
            yield PathSegment(*row)

    @classmethod
    def coded(
        cls,
        strings: Mapping[str, tuple[np.ndarray, np.ndarray]],
        start: np.ndarray,
        end: np.ndarray,
    ) -> CriticalPath:
        """A path from its columns: the string ones (:data:`STRING_COLUMNS`) as codes into their values, made into
        strings only where a segment's string is read (the JSON reads the longest few; a path of a million segments
        makes no string column unless its whole list is asked for: :meth:`frame`); the figures over devices and
        causes (:meth:`by_cause`, :meth:`by_cause_device`, the devices crossed) are read off the codes, not hashed
        from a string per segment."""
        ns = end - start
        keep = ns > 0
        device_codes, device_names = strings["device"]
        cause_codes, cause_names = strings["cause"]
        cause_of, cause_used = pd.factorize(cause_codes[keep])
        device_of, device_used = pd.factorize(device_codes[keep])
        device_names = np.asarray(device_names, dtype=object)
        # the devices crossed, in path order (a device named "" is none)
        named = device_codes[np.array([d != "" for d in device_names.tolist()], dtype=bool)[device_codes]]
        crossed = tuple(str(d) for d in device_names[pd.unique(named)].tolist()) if named.size else ()
        path = object.__new__(cls)  # the string columns left out: __getattr__ makes each on first use
        total = int(ns.sum(dtype=np.int64))
        fields = {"start_ns": start, "end_ns": end, "segments": int(start.size), "total_ns": total, "crossed": crossed}
        for name, value in fields.items():
            object.__setattr__(path, name, value)
        coded = {c: (codes, np.asarray(v, dtype=object)) for c, (codes, v) in strings.items()}
        object.__setattr__(path, "_coded_strings", coded)
        pieces = (
            ns[keep],
            cause_of,
            np.asarray(cause_names, dtype=object)[cause_used],
            device_of,
            device_names[device_used],
        )
        object.__setattr__(path, "_coded_pieces", pieces)
        return path

    def __getattr__(self, name: str) -> Any:
        """A coded path's string column (:meth:`coded`), made on its first read and kept."""
        coded = self.__dict__.get("_coded_strings")
        if coded is None or name not in coded:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        codes, values = coded[name]
        column = values[codes]
        object.__setattr__(self, name, column)
        return column

    def _rows(self, column: str, rows: np.ndarray) -> np.ndarray:
        """One column's values at ``rows`` (a coded string column's without making all of it)."""
        coded = self.__dict__.get("_coded_strings")
        if coded is not None and column in coded and column not in self.__dict__:
            codes, values = coded[column]
            return values[codes[rows]]
        return cast("np.ndarray", getattr(self, column))[rows]

    def _pieces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The pieces that last: their time, and their cause and device as codes into distinct values (one
        hash of each column, not a comparison of strings per cause; read off the codes of a :meth:`coded` path)."""
        coded = self.__dict__.get("_coded_pieces")
        if coded is not None:
            return cast("tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]", coded)
        ns = self.ns
        keep = ns > 0
        cause_of, causes = pd.factorize(self.cause[keep])
        device_of, devices = pd.factorize(self.device[keep])
        return ns[keep], cause_of, np.asarray(causes, dtype=object), device_of, np.asarray(devices, dtype=object)

    def by_cause(self) -> dict[str, int]:
        """The path's time per cause (every one of ``CAUSES``, in their order)."""
        ns, cause_of, causes, _, _ = self._pieces()
        total = np.bincount(cause_of, weights=ns, minlength=causes.size) if ns.size else np.zeros(0)
        got = {str(c): int(v) for c, v in zip(causes.tolist(), total.tolist())}
        return {c: got.get(c, 0) for c in CAUSES}

    def by_cause_device(self) -> dict[str, dict[str, int]]:
        """The path's time per cause, per device (the pieces that last)."""
        ns, cause_of, causes, device_of, devices = self._pieces()
        if not ns.size:
            return {}
        # float64 sums of int64 ns are exact below 2^53 ns (104 days)
        total = np.bincount(cause_of * devices.size + device_of, weights=ns, minlength=causes.size * devices.size)
        total = total.reshape(causes.size, devices.size)
        return {
            str(c): {str(devices[d]): int(total[i, d]) for d in np.flatnonzero(total[i]).tolist()}
            for i, c in enumerate(causes.tolist())
        }

    def longest(self, k: int = LONGEST_SEGMENTS) -> CriticalPath:
        """The ``k`` longest segments held (ties: the earlier on the path), in path order."""
        ns = self.ns
        if ns.size <= k:
            return self
        # the segments at or above the k-th longest time (a partition), then the stable sort of those only
        kth = np.partition(ns, ns.size - k)[ns.size - k]
        candidates = np.flatnonzero(ns >= kth)
        keep = np.sort(candidates[np.argsort(-ns[candidates], kind="stable")[:k]])
        held: dict[str, Any] = {c: self._rows(c, keep) for c in PATH_COLUMNS}
        return replace(self, **held)

    def to_json(self) -> dict[str, Any]:
        """The path's figures (module docstring): segments, ns, the devices crossed, the longest segments."""
        return {
            "segments": self.segments,
            "ns": self.total_ns,
            "devices": list(self.crossed or ()),
            "longest": [s.to_json() for s in self.longest()],
        }

    @classmethod
    def from_json(cls, doc: Any) -> CriticalPath:
        """The figures (:meth:`to_json`), or a saved analysis' whole list of segments (before the lean form)."""

        def segment(p: Mapping[str, Any]) -> PathSegment:
            return PathSegment(
                str(p.get("device", "")), str(p.get("bucket", "")), str(p.get("kind", "")), str(p.get("cause", "")),
                str(p.get("name", "")), int(p.get("start_ns", 0)), int(p.get("end_ns", 0)),
            )  # fmt: skip

        if isinstance(doc, dict):
            rows = [segment(p) for p in doc.get("longest") or () if isinstance(p, dict)]
            devices = tuple(str(d) for d in doc.get("devices") or ())
            return cls.of_segments(
                rows, segments=_int(doc.get("segments")), total_ns=_int(doc.get("ns")), crossed=devices
            )
        return cls.of_segments(segment(p) for p in doc or () if isinstance(p, dict))

    def frame(self) -> pd.DataFrame:
        """The segments held as a table (PATH_COLUMNS and ``ns``), in path order."""
        out = pd.DataFrame({c: getattr(self, c) for c in PATH_COLUMNS})
        out["ns"] = self.ns
        return out


@dataclass(frozen=True, slots=True)
class Projection:
    """Spec §9: one projection of the job (the measured job replayed with some changes)."""

    what_if: tuple[str, ...]
    measured_step_ns: int
    projected_step_ns: int
    saving_ns: int
    steps: tuple[StepProjection, ...] = ()
    critical_path: CriticalPath = field(default_factory=CriticalPath.empty)  # of the longest projected step
    critical_step: int | None = None
    path_by_cause: Mapping[str, int] = field(default_factory=dict)
    devices: tuple[DeviceFigures, ...] = ()
    throughput: Throughput | None = None  # projected tokens/s, TFLOPS per device, MFU
    # the question it answers (PROJECTION_ROLES): the straggler fix, the balanced router, the --what-if asked for,
    # an opportunity made free, a collective kind at half its transfer
    role: str = ""
    label: str = ""  # what it changes, in words
    selected: int | None = None  # activities its terms change (0: the terms select none); None: not known
    bound: StepBound | None = None  # what sets the end of its longest projected step
    note: str = ""  # what the terms say they did or could not do (the router term without expert work found, ...)
    # what each term that says so selected (the tokens term: the batch found, time per class scaled and held)
    selection: tuple[Mapping[str, Any], ...] = ()

    @property
    def saving_fraction(self) -> float:
        return ratio(self.saving_ns, self.measured_step_ns)

    @property
    def shortens(self) -> bool:
        """Whether the step gets shorter by a figure worth saying (``SIGNIFICANT_SAVING`` of the step)."""
        return self.saving_ns > 0 and self.saving_fraction >= SIGNIFICANT_SAVING

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "what_if": list(self.what_if),
            "step_ns": {"measured": self.measured_step_ns, "projected": self.projected_step_ns},
            "saving_ns": self.saving_ns,
            "saving_fraction": self.saving_fraction,
            "steps": [s.to_json() for s in self.steps],
            "critical_step": self.critical_step,
            "critical_path": self.critical_path.to_json(),
            "path_by_cause": dict(self.path_by_cause),
            "devices": [d.to_json() for d in self.devices],
        }
        if self.throughput:
            out["throughput"] = dict(self.throughput)
        for key in ("role", "label", "note"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.selected is not None:
            out["selected_activities"] = self.selected
        if self.bound is not None:
            out["bound"] = self.bound.to_json()
        if self.selection:
            out["selection"] = [dict(found) for found in self.selection]
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Projection:
        step_ns = doc.get("step_ns") or {}
        return cls(
            what_if=tuple(str(t) for t in doc.get("what_if") or ()),
            measured_step_ns=int(step_ns.get("measured") or 0),
            projected_step_ns=int(step_ns.get("projected") or 0),
            saving_ns=int(doc.get("saving_ns") or 0),
            steps=tuple(
                StepProjection(int(s["step"]), int(s["measured_ns"]), int(s["projected_ns"]))
                for s in doc.get("steps") or ()
            ),
            critical_path=CriticalPath.from_json(doc.get("critical_path")),
            critical_step=doc.get("critical_step"),
            path_by_cause={str(k): int(v) for k, v in (doc.get("path_by_cause") or {}).items()},
            devices=tuple(DeviceFigures.from_json(d) for d in doc.get("devices") or ()),
            throughput=_section(Throughput, doc.get("throughput")),
            role=str(doc.get("role") or ""),
            label=str(doc.get("label") or ""),
            selected=_int(doc["selected_activities"]) if doc.get("selected_activities") is not None else None,
            bound=StepBound.from_json(doc["bound"]) if isinstance(doc.get("bound"), dict) else None,
            note=str(doc.get("note") or ""),
            selection=tuple(dict(f) for f in doc.get("selection") or () if isinstance(f, dict)),
        )


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything moeprof measured about a job; ``to_json`` is the ``moeprof.analysis/1`` object."""

    inputs: tuple[str, ...]
    devices: tuple[DeviceFigures, ...]
    total: Figures
    collectives: tuple[Collective, ...] = ()
    steps: tuple[StepFigures, ...] = ()
    opportunities: tuple[Opportunity, ...] = ()
    rules: Mapping[str, int] = field(default_factory=dict)  # activities per deciding taxonomy rule
    warnings: tuple[str, ...] = ()
    spread: Spread = field(default_factory=Spread)
    throughput: Throughput | None = None  # tokens/s, TFLOPS per device, MFU
    manifest: Mapping[str, Any] | None = None  # the run folder's reproduction record, when the input is one
    ledger: LedgerTotals | None = None  # §8 summary: instances, incomplete, desynchronized, clocks
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys of a saved analysis this version does not know
    producer: str = field(default="", compare=False)  # moeprof version that wrote a saved analysis ("" = this one)
    skipped: tuple[Mapping[str, str], ...] = ()  # inputs left out with --skip-bad: file and problem
    hardware: Hardware | None = None  # the GPUs the traces name, the preset and peaks used
    dropped_activities: int = 0  # device activities the readers dropped as unplaceable (in the JSON when > 0)
    # NCCL Inspector logs: per-collective figures without a timeline (devices empty, §4 total null)
    inspector: InspectorResult | None = None
    # §9: the balance projection (multi-device jobs), the one --what-if asked for, then the rest of "what would it
    # buy" (each with its role); the engine that made them is returned beside the analysis, never kept in it
    projections: tuple[Projection, ...] = ()
    # §9's step time of the job, measured: the mean over steps of the job's §5 window (its devices' step windows
    # from the earliest start to the latest end, aligned); the one step time every screen shows (None: no device
    # activity)
    step_ns: int | None = None
    # what sets the end of the measured job's longest step: its critical path's largest cause, and where
    step_bound: StepBound | None = None
    scopes: tuple[ScopeRow, ...] = ()  # per JAX name scope (traces that name scopes: XLA programs)
    # FLOPs the trace's ops state (TPU XPlanes) against the chip's peak: MFU, ops and steps above the peak
    utilization: Utilization | None = None
    # the exposed time of each device's first and last collective, where a capture cuts the run of steps
    # (insight.edges): JSON "edge_exposure"
    edges: EdgeExposure | None = None
    # what the host's kernel launches say (readers.kineto.launch_facts, summed over the files): launches, those
    # without their activity, those inside a graph capture; JSON "launches"
    launches: Launches | None = None
    # §10: per MoE role, its work per step (mean over steps and devices); the roofline per op, scope and role
    roles: tuple[RoleRow, ...] = ()
    roofline: Roofline | None = None
    # spec §11: tokens routed per layer and expert (the run's manifest or --expert-load), and the bytes each
    # all-to-all sent per (sender, receiver) pair (Kineto split sizes), joined to the §8 ledger
    expert_load: ExpertLoad | None = None
    traffic: tuple[Mapping[str, Any], ...] = ()

    schema: ClassVar[str] = SCHEMA

    def projection(self, role: str) -> Projection | None:
        """The first projection answering ``role`` (PROJECTION_ROLES); a saved analysis from before roles were
        written has its balance projection as the one whose terms are ``balance`` alone."""
        for p in self.projections:
            if p.role == role or (not p.role and role == "straggler" and tuple(p.what_if) == ("balance",)):
                return p
        return None

    @property
    def device_kind(self) -> str:
        """GPU, TPU or CPU where every device is of that kind (:func:`job_kind`), else ""."""
        return job_kind(self.devices)

    def with_(self, **changes: Any) -> Analysis:
        """A copy with some fields replaced (an Analysis is never changed in place)."""
        return replace(self, **changes)

    def with_warnings(self, *warnings: str) -> Analysis:
        return replace(self, warnings=(*self.warnings, *warnings))

    @property
    def timeline_free(self) -> bool:
        """An analysis without a device timeline, so no §4 figure: NCCL Inspector logs alone, or host-only traces
        whose all-to-all split sizes give their traffic (spec §11)."""
        return (self.inspector is not None or bool(self.traffic)) and not self.devices

    @property
    def host_only(self) -> bool:
        """Host-only traces (no device activity) analyzed for their all-to-all split sizes alone (spec §11)."""
        return self.timeline_free and self.inspector is None

    # what a gate or renderer calls an analysis without a timeline, in its refusals
    HOST_ONLY: ClassVar[str] = "host-only traces (no device activity: their all-to-all split sizes alone)"

    @property
    def ledger_matched(self) -> bool:
        """Whether the ledger matched a collective across ranks: only then is there a wait/transfer split
        (one rank alone has a ledger whose comm is all unmatched)."""
        return self.ledger is not None and int(self.ledger.get("instances", 0)) > 0

    def to_json(self) -> dict[str, Any]:
        from .._version import __version__

        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "moeprof_version": self.producer or __version__,
            "inputs": list(self.inputs),
            "devices": [d.to_json() for d in self.devices],
            "total": self.total.to_json(),
            "collectives": [c.to_json() for c in self.collectives],
            "steps": [s.to_json() for s in self.steps],
            "opportunities": [o.to_json() for o in self.opportunities],
            "rules": dict(self.rules),
            "warnings": list(self.warnings),
            "spread": self.spread.to_json(),
        }
        if self.ledger is not None:
            doc["ledger"] = dict(self.ledger)
        if self.skipped:
            doc["skipped"] = [dict(s) for s in self.skipped]
        if self.hardware:
            doc["hardware"] = dict(self.hardware)
        if self.dropped_activities:
            doc["dropped_activities"] = self.dropped_activities
        if self.inspector is not None:
            doc["inspector"] = dict(self.inspector)
            if not self.devices:  # no timeline: the §4 figures are unknown, not 0
                doc["total"] = {k: None for k in doc["total"]}
        elif self.timeline_free:  # host-only traces with their traffic (spec §11): no timeline either
            doc["total"] = {k: None for k in doc["total"]}
        if self.throughput:
            doc["throughput"] = dict(self.throughput)
        if self.manifest:
            doc["manifest"] = dict(self.manifest)
        if self.step_ns is not None:
            doc["step_ns"] = self.step_ns
        if self.step_bound is not None:
            doc["step_bound"] = self.step_bound.to_json()
        if self.projections:
            doc["projections"] = [p.to_json() for p in self.projections]
        if self.scopes:
            doc["scopes"] = [r.to_json() for r in self.scopes]
        if self.utilization:
            doc["utilization"] = dict(self.utilization)
        if self.edges:
            doc["edge_exposure"] = dict(self.edges)
        if self.launches:
            doc["launches"] = dict(self.launches)
        if self.roles:
            doc["roles"] = [dict(r) for r in self.roles]
        if self.roofline:
            doc["roofline"] = dict(self.roofline)
        if self.expert_load:
            doc["expert_load"] = dict(self.expert_load)
        if self.traffic:
            doc["traffic"] = [dict(t) for t in self.traffic]
        for k, v in self.extra.items():
            doc.setdefault(k, v)
        return _clean(doc)

    @classmethod
    def from_json(cls, doc: Any, origin: str | None = None) -> Analysis:
        """Read a ``moeprof.analysis/1`` object (a saved analysis.json, a baseline); one-line errors."""
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            schema = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
            raise InputError(origin, f"not a {SCHEMA} object (schema {schema!r})")
        if not isinstance(doc.get("total"), dict) or not isinstance(doc.get("devices"), list):
            raise InputError(origin, f"not a complete {SCHEMA} object: 'total' or 'devices' missing")
        known = {
            "schema",
            "moeprof_version",
            "inputs",
            "devices",
            "total",
            "collectives",
            "steps",
            "opportunities",
            "rules",
            "warnings",
            "spread",
            "throughput",
            "manifest",
            "ledger",
            "skipped",
            "projections",
            "hardware",
            "dropped_activities",
            "inspector",
            "step_ns",
            "step_bound",
            "scopes",
            "utilization",
            "edge_exposure",
            "launches",
            "roles",
            "roofline",
            "expert_load",
            "traffic",
        }
        try:
            return cls(
                inputs=tuple(str(i) for i in doc.get("inputs") or ()),
                devices=tuple(DeviceFigures.from_json(d) for d in _dicts(doc["devices"])),
                total=Figures.from_json(doc["total"]),
                collectives=tuple(Collective.from_json(c) for c in _dicts(doc.get("collectives"))),
                steps=tuple(StepFigures.from_json(s) for s in _dicts(doc.get("steps")) if "step" in s),
                opportunities=tuple(Opportunity.from_json(o) for o in _dicts(doc.get("opportunities"))),
                rules={str(k): int(v) for k, v in (doc.get("rules") or {}).items()},
                warnings=tuple(str(w) for w in doc.get("warnings") or ()),
                spread=Spread.from_json(doc.get("spread") or {}),
                throughput=_section(Throughput, doc.get("throughput")),
                manifest=doc.get("manifest") if isinstance(doc.get("manifest"), dict) else None,
                ledger=_section(LedgerTotals, doc.get("ledger")),
                skipped=tuple(s for s in doc.get("skipped") or () if isinstance(s, dict)),
                projections=tuple(Projection.from_json(p) for p in _dicts(doc.get("projections"))),
                hardware=_section(Hardware, doc.get("hardware")),
                dropped_activities=_int(doc.get("dropped_activities")),
                inspector=_section(InspectorResult, doc.get("inspector")),
                step_ns=_int(doc["step_ns"]) if doc.get("step_ns") is not None else None,
                step_bound=StepBound.from_json(doc["step_bound"]) if isinstance(doc.get("step_bound"), dict) else None,
                scopes=tuple(ScopeRow.from_json(r) for r in _dicts(doc.get("scopes"))),
                utilization=_section(Utilization, doc.get("utilization")),
                edges=_section(EdgeExposure, doc.get("edge_exposure")),
                launches=_section(Launches, doc.get("launches")),
                roles=tuple(cast(RoleRow, r) for r in _dicts(doc.get("roles"))),
                roofline=_section(Roofline, doc.get("roofline")),
                expert_load=_section(ExpertLoad, doc.get("expert_load")),
                traffic=tuple(_dicts(doc.get("traffic"))),
                extra={k: v for k, v in doc.items() if k not in known},
                producer=str(doc.get("moeprof_version") or ""),
            )
        except (TypeError, ValueError, KeyError) as exc:
            raise InputError(origin, f"not a valid {SCHEMA} object ({exc})") from None


def _section(kind: type[S], value: Any) -> S | None:
    """A JSON section of a saved analysis as its type (:mod:`.sections`), None where it is not an object."""
    return cast(S, value) if isinstance(value, dict) else None


def _dicts(items: Any) -> list[dict[str, Any]]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise ValueError(f"expected a list, got {type(items).__name__}")
    return [i for i in items if isinstance(i, dict)]
