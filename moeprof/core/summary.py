"""Figures derived from an :class:`Analysis` for the reports: nothing here measures a trace again.

The terminal (and any other renderer) states figures **per device**: a sum over
devices is only in the JSON ``total``, because 8 devices x 6 s of exposed
communication read as 48 s is longer than the run. This module computes the
per-device mean and worst device, the statistics that stand in for a table of
1,000 devices, and the verdict's ingredients (where the time goes, the first
thing to try); the renderers only put them into words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .analysis import NS_KEYS, Analysis, DeviceFigures, Figures, Opportunity, ratio

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
    first: Opportunity | None  # the top-ranked opportunity
    first_saving_per_step_ns: float | None  # its saving bound per step; None without steps

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
    values = np.array([d.value(key) for d in devices], dtype=np.float64)
    if not values.size:
        return PerDevice(0.0, 0, "")
    worst = int(np.argmax(values))
    return PerDevice(float(values.mean()), int(values[worst]), devices[worst].device)


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
        first=first,
        first_saving_per_step_ns=per_step(first.saving_bound_ns, steps) if first is not None else None,
    )


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
