"""The analysis as typed values: what ``measure`` returns and every renderer and gate reads.

Field names are the spec's JSON keys (``moeprof.analysis/1``, spec §7). A saved
``analysis.json`` read back with :meth:`Analysis.from_json` and a fresh result are
the same type, so ``check``/``diff``/``history`` never work on JSON text.
Every ratio is computed here, from the ns sums, in one place (:func:`ratio`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, NamedTuple, Self, TypeVar

from ..errors import InputError
from .ledger import DEVICE_KEYS

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


class PlainRecords(list[dict[str, Any]]):
    """JSON records whose values are all str or int (a critical path's segments): :func:`_clean` keeps the
    list as it is instead of looking at each of its values (tens of thousands of segments per projection)."""


def _clean(value: Any) -> Any:
    """JSON has no NaN: unknown figures are null."""
    kind = type(value)
    if kind is PlainRecords:
        return value
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
    bound_from: str  # exposed | hlo | ledger: what bounds saving_bound_ns
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
    """One piece of a critical path: an activity's time, or the launch/host gap before one.

    A named tuple, not a frozen dataclass like its neighbours: a projection's path holds tens of thousands,
    and a frozen dataclass takes about four times as long to make (its fields are set one call each)."""

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


@dataclass(frozen=True, slots=True)
class Projection:
    """Spec §9: one projection of the job (the measured job replayed with some changes)."""

    what_if: tuple[str, ...]
    measured_step_ns: int
    projected_step_ns: int
    saving_ns: int
    steps: tuple[StepProjection, ...] = ()
    critical_path: tuple[PathSegment, ...] = ()  # of the step with the longest projected time
    critical_step: int | None = None
    path_by_cause: Mapping[str, int] = field(default_factory=dict)
    devices: tuple[DeviceFigures, ...] = ()
    throughput: Mapping[str, Any] | None = None  # projected tokens/s, TFLOPS per device, MFU
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
            "critical_path": PlainRecords(p.to_json() for p in self.critical_path),
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
            critical_path=tuple(
                PathSegment(
                    str(p.get("device", "")),
                    str(p.get("bucket", "")),
                    str(p.get("kind", "")),
                    str(p.get("cause", "")),
                    str(p.get("name", "")),
                    int(p.get("start_ns", 0)),
                    int(p.get("end_ns", 0)),
                )
                for p in doc.get("critical_path") or ()
            ),
            critical_step=doc.get("critical_step"),
            path_by_cause={str(k): int(v) for k, v in (doc.get("path_by_cause") or {}).items()},
            devices=tuple(DeviceFigures.from_json(d) for d in doc.get("devices") or ()),
            throughput=doc.get("throughput") if isinstance(doc.get("throughput"), dict) else None,
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
    throughput: Mapping[str, Any] | None = None  # tokens/s, TFLOPS per device, MFU
    manifest: Mapping[str, Any] | None = None  # the run folder's reproduction record, when the input is one
    ledger: Mapping[str, Any] | None = None  # §8 summary: instances, incomplete, desynchronized, clocks
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys of a saved analysis this version does not know
    producer: str = field(default="", compare=False)  # moeprof version that wrote a saved analysis ("" = this one)
    skipped: tuple[Mapping[str, str], ...] = ()  # inputs left out with --skip-bad: file and problem
    hardware: Mapping[str, Any] | None = None  # the GPUs the traces name, the preset and peaks used
    dropped_activities: int = 0  # device activities the readers dropped as unplaceable (in the JSON when > 0)
    # NCCL Inspector logs: per-collective figures without a timeline (devices empty, §4 total null)
    inspector: Mapping[str, Any] | None = None
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
    utilization: Mapping[str, Any] | None = None
    # the exposed time of each device's first and last collective, where a capture cuts the run of steps
    # (insight.edges): JSON "edge_exposure"
    edges: Mapping[str, Any] | None = None
    # what the host's kernel launches say (readers.kineto.launch_facts, summed over the files): launches, those
    # without their activity, those inside a graph capture; JSON "launches"
    launches: Mapping[str, Any] | None = None

    schema: ClassVar[str] = SCHEMA

    def first_try(self) -> Projection | None:
        """The change that buys the most of "what would it buy" (the asked one aside: moeprof's own first try),
        where it shortens the step by ``SIGNIFICANT_SAVING`` of it or more; None where nothing does."""
        candidates = [p for p in self.projections if p.role != "asked" and p.shortens]
        return max(candidates, key=lambda p: p.saving_ns, default=None)

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
        """An analysis of NCCL Inspector logs alone: no device timeline, so no §4 figure."""
        return self.inspector is not None and not self.devices

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
                throughput=doc.get("throughput") if isinstance(doc.get("throughput"), dict) else None,
                manifest=doc.get("manifest") if isinstance(doc.get("manifest"), dict) else None,
                ledger=doc.get("ledger") if isinstance(doc.get("ledger"), dict) else None,
                skipped=tuple(s for s in doc.get("skipped") or () if isinstance(s, dict)),
                projections=tuple(Projection.from_json(p) for p in _dicts(doc.get("projections"))),
                hardware=doc.get("hardware") if isinstance(doc.get("hardware"), dict) else None,
                dropped_activities=_int(doc.get("dropped_activities")),
                inspector=doc.get("inspector") if isinstance(doc.get("inspector"), dict) else None,
                step_ns=_int(doc["step_ns"]) if doc.get("step_ns") is not None else None,
                step_bound=StepBound.from_json(doc["step_bound"]) if isinstance(doc.get("step_bound"), dict) else None,
                scopes=tuple(ScopeRow.from_json(r) for r in _dicts(doc.get("scopes"))),
                utilization=doc.get("utilization") if isinstance(doc.get("utilization"), dict) else None,
                edges=doc.get("edge_exposure") if isinstance(doc.get("edge_exposure"), dict) else None,
                launches=doc.get("launches") if isinstance(doc.get("launches"), dict) else None,
                extra={k: v for k, v in doc.items() if k not in known},
                producer=str(doc.get("moeprof_version") or ""),
            )
        except (TypeError, ValueError, KeyError) as exc:
            raise InputError(origin, f"not a valid {SCHEMA} object ({exc})") from None


def _dicts(items: Any) -> list[dict[str, Any]]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise ValueError(f"expected a list, got {type(items).__name__}")
    return [i for i in items if isinstance(i, dict)]
