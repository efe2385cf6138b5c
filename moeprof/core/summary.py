"""Figures derived from an :class:`Analysis` for the reports: nothing here measures a trace again.

The terminal (and any other renderer) states figures **per device**: a sum over
devices is only in the JSON ``total``, because 8 devices x 6 s of exposed
communication read as 48 s is longer than the run. This module computes the
per-device mean and worst device, the statistics that stand in for a table of
1,000 devices, and the verdict's ingredients (where the time goes, the first
thing to try); the renderers only put them into words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .analysis import (
    NS_KEYS,
    SIGNIFICANT_SAVING,
    Analysis,
    DeviceFigures,
    Figures,
    Opportunity,
    Projection,
    StepBound,
    ratio,
)
from .hardware import is_cpu_job, is_tpu_job

# a kind or link is "most of" exposed communication above this share
MOSTLY = 0.5


@dataclass(frozen=True, slots=True)
class PerDevice:
    """A time figure over the devices: its mean and its worst (largest) device."""

    mean_ns: float
    worst_ns: int
    worst_device: str


@dataclass(frozen=True, slots=True)
class Part:
    """The largest part of a whole (a collective kind, a link) and its share of the whole."""

    name: str
    share: float


@dataclass(frozen=True, slots=True)
class HotStraggler:
    """The device with the most routed tokens (a demo capture's manifest says which) when it is also the
    device the others wait for most (the ledger's first straggler): the imbalance is the routing's."""

    device: str
    tokens_over_mean: float  # its routed (token, k) assignments over the mean device's
    last_share: float  # of the collectives it took part in, those it arrived last in


# below this, the hottest device's tokens are within the routing's own spread: naming it would mislead
HOT_DEVICE_MIN_IMBALANCE = 1.5


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the first lines of a report say: where the time goes and what to try first."""

    devices: int
    files: int
    steps: int  # distinct steps measured; 0 when the trace has none (the window is one step)
    comm_share: float  # comm / accumulated kernel time
    compute_share: float  # compute / accumulated kernel time
    exposed_comm_fraction: float  # exposed comm / span, over all devices
    idle_fraction: float  # idle / span, over all devices
    span: PerDevice
    exposed: PerDevice
    exposed_kind: Part | None  # the collective kind with the most exposed time
    exposed_link: Part | None  # the link (nvlink, ib, unknown) with the most exposed time
    exposed_wait_share: float | None  # of the exposed comm, the part waiting for the last rank (§8; None: no ledger)
    ledger: LedgerSummary | None  # §8, where the cross-rank ledger ran
    first: Opportunity | None  # the top-ranked opportunity
    first_saving_per_step_ns: float | None  # its saving bound per step; None without steps
    hot_straggler: HotStraggler | None = None  # the most loaded device, when it is the one the others wait for
    # §9, where the job was projected: the step time (the one every screen shows), the change that buys the most
    # (None: none shortens the step by SIGNIFICANT_SAVING), what sets the measured step's end
    step_ns: int | None = None
    projected: bool = False
    first_try: Projection | None = None
    first_try_title: str = ""  # the opportunity the first try makes free, where it is one
    step_bound: StepBound | None = None
    # per device, the mean over its steps of its exposed comm inside each step (the window of the headline's
    # step time); None without steps
    exposed_per_step: PerDevice | None = None
    # the first lines' facts (issue 39): where the time goes whatever the bucket, what is already done, what
    # the capture's edges hold, whether the trace can answer at all, and the first try's own opportunity
    memcpy_share: float = 0.0  # memcpy / accumulated kernel time
    other_share: float = 0.0
    comm_hidden_share: float | None = None  # of the collectives' time, the part under compute (None: no comm)
    edge_exposed: PerDevice | None = None  # exposed comm of each device's first and last collective
    edges: Mapping[str, Any] | None = None  # Analysis.edges (which ops)
    cannot_answer: Mapping[str, Any] | None = None  # the launch facts, where most launches ran no kernel
    first_opportunity: int | None = None  # the opportunity (from 1) the first try is, projected or bounded
    first_try_of: Opportunity | None = None  # that opportunity
    first_bounded: bool = False  # no replay measured it: its §6 bound per step stands
    # opportunities (number, why: "hidden" | "edges", the opportunity) that save more but are no first try
    set_aside: tuple[tuple[int, str, Opportunity], ...] = ()
    tpu: bool = False  # the screens say chip, not rank or device
    cpu: bool = False  # XLA:CPU devices (threads of one host): no fabric, and a late device is mostly scheduling
    # the devices the traces name (their GPU or TPU models), where more than had device activity; 0 otherwise
    named_devices: int = 0

    @property
    def has_comm(self) -> bool:
        return self.comm_share > 0

    @property
    def has_exposed(self) -> bool:
        return self.exposed.worst_ns > 0


def step_count(analysis: Analysis) -> int:
    """Distinct steps measured (0 when the trace has none)."""
    return len({s.step for s in analysis.steps})


def per_step(ns: float, steps: int) -> float | None:
    """A time over the measured window as a time per step; None when the trace has no steps."""
    return ns / steps if steps else None


def per_device(devices: Sequence[DeviceFigures], key: str) -> PerDevice:
    return _mean_worst([d.device for d in devices], np.array([d.value(key) for d in devices], dtype=np.float64))


def _mean_worst(names: Sequence[str], values: np.ndarray) -> PerDevice:
    if not values.size:
        return PerDevice(0.0, 0, "")
    worst = int(np.argmax(values))
    return PerDevice(float(values.mean()), round(float(values[worst])), names[worst])


def step_divisor(analysis: Analysis) -> int:
    """What a figure over the measured window is divided by to be per step: the steps measured (1 without
    steps: the window is the one step). Every screen says its times per device and step this way (issue 49),
    as ``diff`` does: the window's sum over the steps, its gaps between steps included; the JSON keeps the
    window's sums."""
    return max(step_count(analysis), 1)


def figures_per_step(fig: Figures, steps: int) -> Figures:
    """``fig`` (a window's figures) per step: every ns figure, the ledger's included, over ``steps``, to the ns;
    its ratios unchanged (they are ratios of the same sums)."""
    if steps <= 1:
        return fig
    kw: dict[str, Any] = {k: round(getattr(fig, k) / steps) for k in NS_KEYS}
    if fig.ledger is not None:
        kw["ledger"] = {k: round(v / steps) for k, v in fig.ledger.items()}
    return Figures(**kw)


def per_device_step(analysis: Analysis, key: str, each: bool = False) -> Any:
    """A figure per device and step (each device's mean over its steps), its mean over devices and worst device
    (``each``: the per-device means themselves, a Series by device); None when the trace has no steps."""
    if not analysis.steps:
        return None
    frame = pd.DataFrame({"device": [s.device for s in analysis.steps], "v": [s.value(key) for s in analysis.steps]})
    means = frame.groupby("device", sort=True)["v"].mean()
    if each:
        return means
    worst = str(means.idxmax())
    return PerDevice(float(means.mean()), round(float(means[worst])), worst)


def largest_part(parts: dict[str, float]) -> Part | None:
    whole = sum(parts.values())
    if whole <= 0:
        return None
    name, value = max(parts.items(), key=lambda kv: kv[1])
    return Part(name, value / whole)


def exposed_by_kind(analysis: Analysis) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in analysis.collectives:
        out[c.kind] = out.get(c.kind, 0.0) + c.exposed_ns
    return out


def verdict(analysis: Analysis) -> Verdict | None:
    """The verdict's figures; None when the input has no device activity."""
    devices = analysis.devices
    if not devices:
        return None
    t = analysis.total
    steps = step_count(analysis)
    first = analysis.opportunities[0] if analysis.opportunities else None
    links = {
        "nvlink": float(t.exposed_comm_nvlink_ns),
        "ib": float(t.exposed_comm_ib_ns),
        "unknown": float(t.exposed_comm_unknown_link_ns),
    }
    ledger = ledger_summary(analysis, per_device_step(analysis, "exposed_comm_ns", each=True))
    chosen = choose_first_try(analysis)
    comm_total = sum(c.total_ns for c in analysis.collectives)
    edges = analysis.edges or None
    return Verdict(
        devices=len(devices),
        files=len(analysis.inputs),
        steps=steps,
        comm_share=t.comm_share,
        compute_share=ratio(t.compute_ns, t.accumulated_ns),
        exposed_comm_fraction=t.exposed_comm_fraction,
        idle_fraction=t.idle_fraction,
        span=per_device(devices, "span_ns"),
        exposed=per_device(devices, "exposed_comm_ns"),
        exposed_kind=largest_part(exposed_by_kind(analysis)),
        exposed_link=largest_part(links),
        exposed_wait_share=(
            ratio(t.ledger.get("exposed_wait_ns", 0), t.exposed_comm_ns) if t.ledger is not None else None
        ),
        ledger=ledger,
        first=first,
        first_saving_per_step_ns=per_step(first.saving_bound_ns, steps) if first is not None else None,
        hot_straggler=hot_straggler(analysis, ledger),
        step_ns=analysis.step_ns,
        projected=bool(analysis.projections),
        first_try=chosen.projection,
        first_try_title=_opportunity_title(analysis, chosen.projection),
        step_bound=analysis.step_bound,
        exposed_per_step=per_device_step(analysis, "exposed_comm_ns"),
        memcpy_share=ratio(t.memcpy_ns, t.accumulated_ns),
        other_share=ratio(t.other_ns, t.accumulated_ns),
        comm_hidden_share=(
            1 - sum(c.exposed_ns for c in analysis.collectives) / comm_total if comm_total > 0 else None
        ),
        edge_exposed=(
            PerDevice(float(edges["exposed_ns"]) / len(devices), int(edges["exposed_ns"]), "") if edges else None
        ),
        edges=edges,
        cannot_answer=cannot_answer(analysis.launches),
        first_opportunity=chosen.number,
        first_try_of=_nth(analysis.opportunities, chosen.number),
        first_bounded=chosen.bounded is not None,
        set_aside=tuple((n, why, analysis.opportunities[n - 1]) for n, why in chosen.set_aside),
        tpu=is_tpu_job(d.kind for d in devices),
        cpu=is_cpu_job(d.kind for d in devices),
        named_devices=named_devices(analysis),
    )


def named_devices(analysis: Analysis) -> int:
    """How many devices the traces name (their models: the hardware summary's ``models``), where that is more
    than the devices with activity (a TensorFlow worker's 8 GPU planes, 3 of which ran kernels); else 0."""
    models = (analysis.hardware or {}).get("models") or {}
    named = sum(int(n) for n in models.values() if isinstance(n, int | float))
    return named if named > len(analysis.devices) else 0


# an opportunity whose comm is already this hidden under compute is done, where compute bounds the step: the
# compute is the lever (the remedies' own threshold for "already overlapped", insight/remedies.toml)
ALREADY_HIDDEN = 0.8
EDGE_MOSTLY = 0.5  # an opportunity more than half of whose exposed time lies at the capture's edges


def _nth(opportunities: Sequence[Opportunity], n: int | None) -> Opportunity | None:
    """Opportunity ``n`` (from 1), None where there is no such one."""
    return opportunities[n - 1] if n is not None and 0 < n <= len(opportunities) else None


def cannot_answer(launches: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The launch facts where the trace cannot time the step: more of its kernel launches ran no kernel in
    the file (a graph capture records them without running them; a profiler that lost its activity buffer
    drops them) than ran one. None where it can."""
    if not launches:
        return None
    launched = int(launches.get("kernel_launches") or 0)
    missing = int(launches.get("without_activity") or 0)
    return launches if launched and missing > launched - missing else None


def edge_share(analysis: Analysis, o: Opportunity) -> float:
    """Of an opportunity's exposed time, the share that lies at the capture's edges (Analysis.edges)."""
    edges = analysis.edges
    if not edges or o.exposed_ns <= 0:
        return 0.0
    if o.kind == "expert-exchange":
        ns = sum(int(v) for k, v in (edges.get("by_kind") or {}).items() if k in EXPERT_KINDS)
    elif o.link is not None:  # one collective op
        ns = int((edges.get("by_op") or {}).get(o.name, 0))
    else:
        return 0.0
    return min(ns / o.exposed_ns, 1.0)


EXPERT_KINDS = ("all-to-all", "ep-dispatch", "ep-combine")


def _opportunity_number(p: Projection) -> int | None:
    m = re.search(r"opportunity=(\d+)", " ".join(p.what_if)) if p.role == "opportunity" else None
    return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class FirstTry:
    """The first try (:func:`choose_first_try`): the projected change that buys the most (None: none shortens
    the step), the opportunity it is (from 1), an opportunity no replay measured whose §6 bound per step beats
    every projected saving, and the opportunities set aside (number, why: "hidden" | "edges")."""

    projection: Projection | None = None
    number: int | None = None
    bounded: Opportunity | None = None
    set_aside: tuple[tuple[int, str], ...] = ()


def choose_first_try(analysis: Analysis) -> FirstTry:
    """The one first try, for the verdict's first lines and for what a report draws unasked: the biggest lever
    that is an action (issue 39), communication, host gaps and on-chip levers alike ranked by their §9
    projected saving (issue 46: a TPU's host gaps by the replay of their closing, not by their §6 bound, so a
    95%-busy chip is not called host-bound): of the projected changes, those that shorten the step by
    SIGNIFICANT_SAVING, less the sensitivity rows (a kind at half its transfer: no action), an opportunity mostly
    at the capture's edges, and one already hidden where compute bounds the step; else the top opportunity no
    replay measured (projected neither exactly nor bounded: a job too large to project) where its §6 bound per
    step is as large."""
    steps = step_count(analysis)
    step = float(analysis.step_ns or 0)
    compute_bound = analysis.step_bound is not None and analysis.step_bound.cause == "compute"
    aside: list[tuple[int, str]] = []
    why: dict[int, str] = {}
    for i, o in enumerate(analysis.opportunities, 1):
        hidden = o.evidence.get("hidden_share") if isinstance(o.evidence, Mapping) else None
        if edge_share(analysis, o) > EDGE_MOSTLY:
            why[i] = "edges"
        elif compute_bound and isinstance(hidden, int | float) and hidden >= ALREADY_HIDDEN:
            why[i] = "hidden"
    candidates = []
    for p in analysis.projections:
        if p.role in ("asked", "kind") or not p.shortens:
            continue
        n = _opportunity_number(p)
        if n is not None and n in why:
            aside.append((n, why[n]))
            continue
        candidates.append(p)
    best = max(candidates, key=lambda p: p.saving_ns, default=None)
    best_ns = best.saving_ns if best is not None else 0
    # an opportunity the replay could not take away (not activities, or not projected): its bound per step,
    # where it beats every projected saving
    for i, o in enumerate(analysis.opportunities, 1):
        if o.projected_saving_ns is not None or o.projected_saving_max_ns is not None or i in why:
            continue
        if not steps or not step:
            continue
        per_step = o.saving_bound_ns / steps
        if per_step >= SIGNIFICANT_SAVING * step and per_step > best_ns:
            return FirstTry(None, i, o, tuple(aside))
    return FirstTry(best, _opportunity_number(best) if best is not None else None, None, tuple(aside))


def _opportunity_title(analysis: Analysis, p: Projection | None) -> str:
    """The title of the opportunity a projection makes free (``opportunity=N`` in its terms), else ""."""
    o = _nth(analysis.opportunities, _opportunity_number(p) if p is not None else None)
    return o.title if o is not None else ""


def _device_index(name: str) -> int | None:
    # "vm/CPU:3", "/device:GPU:3": jax's device id ends the name
    tail = name.rsplit(":", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None


def hot_straggler(analysis: Analysis, ledger: LedgerSummary | None) -> HotStraggler | None:
    """The hottest device of a demo capture, when it is the ledger's first straggler and clearly hotter."""
    demo = (analysis.manifest or {}).get("demo")
    load = demo.get("load") if isinstance(demo, Mapping) else None
    if ledger is None or not ledger.stragglers or not isinstance(load, Mapping):
        return None
    hottest, imbalance = load.get("hottest_device"), load.get("imbalance_max_over_mean")
    if not isinstance(hottest, int) or not isinstance(imbalance, int | float) or imbalance < HOT_DEVICE_MIN_IMBALANCE:
        return None
    named = [d.device for d in analysis.devices if _device_index(d.device) == hottest]
    top = ledger.stragglers[0]
    if named != [top.device]:
        return None
    return HotStraggler(top.device, float(imbalance), top.last_share)


def mean_figures(devices: Sequence[Figures]) -> Figures:
    """The mean device: every ns figure averaged (to the ns); its ratios are those of the total."""
    n = len(devices)
    if not n:
        return Figures()
    return Figures(**{k: round(sum(getattr(d, k) for d in devices) / n) for k in NS_KEYS})


@dataclass(frozen=True, slots=True)
class Stat:
    """One figure over the devices, each statistic taken on its own (min and max are not one device)."""

    min: float
    median: float
    max: float


def device_stats(devices: Sequence[Figures], keys: Sequence[str]) -> dict[str, Stat]:
    """Min, median and max over the devices of each figure in ``keys`` (ns figures or ratios)."""
    out: dict[str, Stat] = {}
    for key in keys:
        values = np.array([d.value(key) for d in devices], dtype=np.float64)
        if values.size:
            out[key] = Stat(float(values.min()), float(np.median(values)), float(values.max()))
    return out


def worst_devices(devices: Sequence[DeviceFigures], n: int, key: str = "exposed_comm_ns") -> list[DeviceFigures]:
    """The ``n`` devices with the largest ``key``, largest first (ties in the order of the input)."""
    order = sorted(range(len(devices)), key=lambda i: -devices[i].value(key))
    return [devices[i] for i in order[:n]]


def zero_everywhere(devices: Sequence[Figures], key: str) -> bool:
    """True when no device has any of this figure (a column that would only show zeros)."""
    return all(d.value(key) == 0 for d in devices)


# ---------------------------------------------------------------- the cross-rank ledger (spec §8)


@dataclass(frozen=True, slots=True)
class StragglerRow:
    """A device that arrives last in some collectives: every other member waits for it there."""

    device: str
    straggler_count: int  # complete instances it arrived last in
    caused_wait_ns: int  # the other members' waiting in those instances, summed
    instances: int  # complete instances it took part in
    last_share: float  # straggler_count / instances


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    """What the reports say about the ledger: matching, clocks, stragglers and the split of exposed comm."""

    instances: int  # complete collective instances matched across the inputs
    incomplete: int
    desynchronized: int
    clock_offsets_ns: tuple[tuple[str, int], ...]  # (host, δ), by host; the first is the reference
    unaligned_hosts: tuple[str, ...]
    stragglers: tuple[StragglerRow, ...]  # most waiting caused first
    # the split of each device's exposed comm per step (the headline's figure, ``Verdict.exposed_per_step``), so
    # that the three add up to it; over the window where the trace has no steps
    exposed_wait: PerDevice  # exposed comm spent waiting for the last member
    exposed_transfer: PerDevice  # exposed comm moving bytes
    exposed_unmatched: PerDevice  # exposed comm in no complete instance
    exposed_shares: tuple[float, float, float]  # wait, transfer, unmatched over all devices' exposed comm

    @property
    def has_unmatched(self) -> bool:
        return self.exposed_unmatched.worst_ns > 0

    @property
    def largest_offset(self) -> tuple[str, int] | None:
        """The host whose clock is furthest from the reference's (None with one host)."""
        others = self.clock_offsets_ns[1:]
        return max(others, key=lambda hd: abs(hd[1])) if others else None


def _straggler_rows(rows: Any) -> tuple[StragglerRow, ...]:
    out = [
        StragglerRow(
            device=str(r.get("device", "")),
            straggler_count=int(r.get("straggler_count") or 0),
            caused_wait_ns=int(r.get("caused_wait_ns") or 0),
            instances=int(r.get("instances") or 0),
            last_share=float(r.get("last_share") or 0.0),
        )
        for r in rows or ()
        if isinstance(r, Mapping)
    ]
    return tuple(sorted(out, key=lambda r: (-r.caused_wait_ns, -r.straggler_count, r.device)))


def ledger_summary(analysis: Analysis, exposed_per_step: pd.Series | None = None) -> LedgerSummary | None:
    """The ledger's figures for the reports; None where it did not run (one rank, one device).

    ``exposed_per_step``: each device's exposed comm per step (the mean over its steps, by device name), the
    headline's figure. The ledger splits a device's exposed comm over its window (spec §8); per step, each part
    is that split of the device's per-step figure (the window's part times its per-step exposed comm over its
    window's), so the parts add up to the headline's whole on every device and in the mean. Where the steps
    tile the window (every capture moeprof has met) that is the window's part over the steps."""
    doc = analysis.ledger
    if doc is None and analysis.total.ledger is None:
        return None
    doc = doc or {}
    devices = analysis.devices
    parts = ("exposed_wait_ns", "exposed_transfer_ns", "exposed_unmatched_ns")
    names = [d.device for d in devices]
    if exposed_per_step is not None:
        window = np.array([d.exposed_comm_ns for d in devices], dtype=np.float64)
        step = np.array([float(exposed_per_step.get(n, 0.0)) for n in names])
        scale = np.divide(step, window, out=np.zeros_like(window), where=window > 0)
    else:
        scale = np.ones(len(devices))

    def split(key: str) -> PerDevice:
        return _mean_worst(names, np.array([d.value(key) for d in devices], dtype=np.float64) * scale)

    exposed = [analysis.total.value(k) for k in parts]
    whole = float(analysis.total.exposed_comm_ns)
    offsets = doc.get("clock_offsets_ns") or {}
    return LedgerSummary(
        instances=int(doc.get("instances") or 0),
        incomplete=int(doc.get("incomplete") or 0),
        desynchronized=int(doc.get("desynchronized") or 0),
        clock_offsets_ns=tuple(sorted((str(h), int(d)) for h, d in offsets.items())),
        unaligned_hosts=tuple(str(h) for h in doc.get("unaligned_hosts") or ()),
        stragglers=_straggler_rows(doc.get("stragglers")),
        exposed_wait=split("exposed_wait_ns"),
        exposed_transfer=split("exposed_transfer_ns"),
        exposed_unmatched=split("exposed_unmatched_ns"),
        exposed_shares=(ratio(exposed[0], whole), ratio(exposed[1], whole), ratio(exposed[2], whole)),
    )


@dataclass(frozen=True)
class ArrivalSkew:
    """One collective's complete instances in time order: when its first and last member arrived (aligned clocks)."""

    name: str
    kind: str
    first_ns: np.ndarray  # int64, aligned ns (spec §8: start − δ of the member's host)
    last_ns: np.ndarray  # int64: the last arrival, the moment every other member stops waiting
    straggler: np.ndarray  # object: the device that arrived last

    @property
    def count(self) -> int:
        return int(self.first_ns.size)

    @property
    def spread_ns(self) -> np.ndarray:
        return self.last_ns - self.first_ns

    @property
    def median_spread_ns(self) -> float:
        return float(np.median(self.spread_ns)) if self.count else 0.0

    @property
    def max_spread_ns(self) -> int:
        return int(self.spread_ns.max()) if self.count else 0

    def most_often_last(self) -> tuple[str, int]:
        """The device last in the most instances, and in how many (ties: the first device name); ("", 0) where
        no instance has a straggler (a group of one chip has none, spec §8)."""
        named = [str(d) for d in self.straggler.tolist() if isinstance(d, str) and d]
        if not named:
            return "", 0
        counts = pd.Series(named).value_counts()
        top = int(counts.max())
        return min(str(d) for d, n in counts.items() if n == top), top


def arrival_skew(analysis: Analysis, table: pd.DataFrame | None, top: int = 6) -> list[ArrivalSkew]:
    """The ``top`` costliest collectives (the collectives' order: most time first) that have complete instances
    (``table``: the §8 instances a timeline measurement leaves beside the analysis)."""
    if table is None or not len(table):
        return []
    table = table[table["op"].notna() & table["kind"].notna()]  # as a groupby on them would drop them
    if "members" in table:  # an instance of one member (a group of one chip) has no arrival to spread
        table = table[table["members"].to_numpy() > 1]
    if not len(table):
        return []
    rank = {(c.name, c.kind): i for i, c in enumerate(analysis.collectives)}
    # rank the distinct (op, kind) pairs first: a capture holds thousands of them, and only `top` are drawn
    pairs = table[["op", "kind"]].drop_duplicates()
    keys = sorted(
        ((str(n), str(k)) for n, k in zip(pairs["op"].tolist(), pairs["kind"].tolist())),
        key=lambda key: (rank.get(key, len(rank)), key[0], key[1]),
    )[:top]
    op = table["op"].astype(str).to_numpy(dtype=object)
    kind = table["kind"].astype(str).to_numpy(dtype=object)
    out = []
    for name, k in keys:
        rows = table[(op == name) & (kind == k)].sort_values(["first_ns", "instance"], kind="stable")
        out.append(
            ArrivalSkew(
                name,
                k,
                rows["first_ns"].to_numpy(np.int64),
                rows["last_ns"].to_numpy(np.int64),
                rows["straggler"].to_numpy(dtype=object),
            )
        )
    return out
