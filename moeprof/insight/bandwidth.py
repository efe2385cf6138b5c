"""Achieved bandwidth of each collective against the peak of the link it used.

Algorithm bandwidth is one call's bytes over its duration; bus bandwidth
scales it by the nccl-tests factor of the collective so that numbers compare
across group sizes and with the link's peak:
all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, all-to-all (n-1)/n,
send-recv and broadcast 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from ..core.analysis import Collective
from ..core.hardware import (
    CPU_FABRICS,
    TPU_FABRICS,
    ChipPreset,
    Match,
    Vendor,
    fabric,
    is_cpu_job,
    is_tpu_job,
    match,
    preset_names,
    table,
    vendor_named,
    vendor_of,
)
from ..core.sections import Hardware
from ..errors import InputError

IB_PRESETS = {"ndr": 50.0, "xdr": 100.0, "hdr": 25.0}


class LinkPeaks(dict[str, float]):
    """Peak GB/s per link as the command line gives them (``--chip`` preset, ``--link-peak`` over it).

    A plain dict works too (the library's ``link_peaks=``): it is taken as overrides. The peaks the
    analysis uses are the trace's own GPU's (:func:`job_hardware`) unless these say otherwise.
    """

    gpu: Match | None = None  # the --chip (--gpu) preset
    overrides: dict[str, float]

    def __init__(
        self,
        peaks: Mapping[str, float] | None = None,
        gpu: Match | None = None,
        overrides: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(peaks or {})
        self.gpu = gpu
        self.overrides = dict(overrides if overrides is not None else (peaks or {}))


def bus_factor(kind: str, n: int) -> float:
    if n <= 1:
        return 0.0
    if kind == "all-reduce":
        return 2 * (n - 1) / n
    if kind in ("all-gather", "reduce-scatter", "all-to-all", "ep-dispatch", "ep-combine"):
        return (n - 1) / n
    return 1.0  # send-recv, broadcast: every byte crosses once


def gpu_preset(gpu: str, option: str = "--chip") -> Match:
    """``--chip NAME`` (``--gpu NAME``): its preset, or a one-line error listing them."""
    found = match(gpu)
    if found.preset is None:
        why = f" ({found.note.split('(', 1)[1]}" if found.note and "no preset (" in found.note else ""
        raise InputError(None, f"{option} {gpu!r}: unknown{why}; presets: {', '.join(preset_names())}")
    return found


def link_peaks(gpu: str | None, override: str | None) -> LinkPeaks:
    """Peak GB/s per link from a chip preset (``--chip``, alias ``--gpu``) and/or ``--link-peak nvlink=450,ib=50``
    (override wins)."""
    peaks: dict[str, float] = {}
    chosen = None
    if gpu:
        chosen = gpu_preset(gpu)
        assert chosen.preset is not None
        peaks.update(chosen.preset.link_peaks())
    overrides: dict[str, float] = {}
    if override:
        for part in override.split(","):
            name, _, value = part.partition("=")
            name = name.strip().lower()
            if value.strip().lower() in IB_PRESETS and name == "ib":
                overrides["ib"] = IB_PRESETS[value.strip().lower()]
                continue
            try:
                overrides[name] = float(value)
            except ValueError:
                raise InputError(None, f"--link-peak {override!r}: expected nvlink=GBPS,ib=GBPS") from None
            if name not in ("nvlink", "ib") or not math.isfinite(overrides[name]) or overrides[name] <= 0:
                raise InputError(None, f"--link-peak {override!r}: expected nvlink=GBPS,ib=GBPS") from None
    return LinkPeaks({**peaks, **overrides}, chosen, overrides)


@dataclass(frozen=True)
class JobHardware:
    """The GPUs of a job and the peaks its figures are measured against."""

    peaks: dict[str, float]
    preset: ChipPreset | None
    summary: Hardware | None  # the JSON ``hardware`` object; None where nothing is known
    warnings: tuple[str, ...] = ()
    scale_up: str = "nvlink"  # fabric key of the scale-up domain: the preset's, else its vendor's


def job_vendor(models: Mapping[str, str], hint: str | None = None) -> Vendor | None:
    """The vendor the job's GPU names agree on (a name that says none does not disagree), else the
    ``hint`` (the files' own: rocprofv3 runs on AMD GPUs only), else None."""
    said = {v.name: v for v in (vendor_of(n) for n in set(models.values()) if n) if v is not None}
    if len(said) == 1:
        return next(iter(said.values()))
    return vendor_named(hint) if hint and not said else None


def job_hardware(
    models: Mapping[str, str],
    given: Mapping[str, float] | None = None,
    vendor_hint: str | None = None,
    kinds: Iterable[str] = (),
) -> JobHardware:
    """The job's chip (from the names its traces carry, or ``--chip``), its link peaks, and what disagrees.

    ``--chip`` wins over the trace (and a disagreement is a warning); ``--link-peak`` wins over both.
    A model without a preset gets a note, never a guess; its vendor still names the scale-up fabric
    (xGMI on AMD: :func:`job_vendor`, ``vendor_hint`` where no name says). A job of TPU chips (``kinds``: each
    device's kind as its reader recorded it) names its fabrics ICI and DCN, with or without a preset.
    """
    kinds = list(kinds)
    tpu = is_tpu_job(kinds)
    if is_cpu_job(kinds) and not models and getattr(given, "gpu", None) is None:
        # XLA:CPU devices: no chip, no peak, no fabric but the host's memory (--chip still names one)
        up, out = (fabric(k) for k in CPU_FABRICS)
        cpu: dict[str, Any] = {"accelerator": "CPU", "scale_up": up.name, "scale_out": out.name}
        cpu["scale_up_domain"] = up.domain
        given_peaks = dict(getattr(given, "overrides", dict(given or {})))
        if given_peaks:
            cpu["link_peaks_gbps"] = dict(sorted(given_peaks.items()))
        return JobHardware(given_peaks, None, cast("Hardware", cpu), (), CPU_FABRICS[0])
    per_name: dict[str, int] = {}
    for name in models.values():
        per_name[name] = per_name.get(name, 0) + 1
    matches = [match(n) for n in sorted(per_name)]
    presets = {m.preset.name: m.preset for m in matches if m.preset is not None}
    unknown = [m for m in matches if m.preset is None]
    trace_preset = next(iter(presets.values())) if len(presets) == 1 and not unknown else None
    notes = []
    if len(matches) > 1 and (len(presets) > 1 or (presets and unknown)):
        notes.append(f"devices of {len(matches)} GPU models ({', '.join(sorted(per_name))}): no one peak applies")
    elif unknown:
        notes.append(unknown[0].note)
    gpu = getattr(given, "gpu", None)
    overrides = getattr(given, "overrides", dict(given or {}))
    warnings = []
    if gpu is not None and gpu.preset is not None:
        preset, origin = gpu.preset, "--chip"
        if per_name and (trace_preset is None or trace_preset.name != preset.name):
            named = ", ".join(
                f"{n} ({m.preset.name if m.preset else 'no preset'})"
                for n, m in zip(sorted(per_name), matches, strict=True)
            )
            warnings.append(
                f"--chip {gpu.name} ({preset.name}) is not what the trace names: {named}; the peaks of --chip are used"
            )
    else:
        preset, origin = trace_preset, "trace"
    vendor = vendor_named(preset.vendor) if preset is not None else job_vendor(models, vendor_hint)
    scale_up = preset.scale_up if preset is not None else vendor.scale_up if vendor is not None else "nvlink"
    if tpu:
        scale_up = TPU_FABRICS[0]
    if preset is None and not per_name and vendor is None and not tpu:
        return JobHardware(dict(overrides), None, None)
    peaks = {**(preset.link_peaks() if preset else {}), **overrides}
    summary: dict[str, Any] = {"models": dict(sorted(per_name.items()))}
    if preset is None and vendor is not None:  # no peaks, but the fabric's name
        summary.update(vendor=vendor.name, scale_up=fabric(vendor.scale_up).name)
    if preset is not None:
        summary.update(
            preset=preset.name,
            preset_from=origin,
            vendor=preset.vendor,
            bf16_tflops=preset.bf16_tflops,
            fp8_tflops=preset.fp8_tflops,
            scale_up=fabric(preset.scale_up).name,
            scale_up_gbps=preset.scale_up_gbps,
            nic_gbps=preset.scale_out_gbps,
            sources=list(preset.sources),
        )
        if preset.is_tpu:  # (GPU summaries keep their keys as they were)
            summary.update(scale_out=fabric(preset.scale_out).name, hbm_gbps=preset.hbm_gbps)
    if tpu:
        up, out = (fabric(k) for k in TPU_FABRICS)
        summary.update(accelerator="TPU", scale_up=up.name, scale_out=out.name, scale_up_domain=up.domain)
    if peaks:
        summary["link_peaks_gbps"] = dict(sorted(peaks.items()))
    if notes:
        summary["note"] = notes[0]
    return JobHardware(peaks, preset, cast("Hardware", summary), tuple(warnings), scale_up)


def latency_knee_bytes(kind: str, n: int, link: str, peak_gbps: float, scale_up: str = "nvlink") -> float | None:
    """Message size (bytes per call) below which a collective of ``n`` ranks is latency-bound on its link.

    NCCL's cost model (src/graph/tuning.cc) times a ring collective as a fixed latency plus one hop's
    latency per step, plus its bytes over the bandwidth: ``T = (base + steps * hop) + bytes * f / peak``
    in bus-bandwidth terms (``f`` the nccl-tests factor). The latency dominates below
    ``bytes = (base + steps * hop) * peak / f``: the knee. Steps: all-reduce 2(n-1), all-gather,
    reduce-scatter and broadcast n-1, point-to-point kinds (all-to-all, send-recv, EP) one.
    """
    factor = bus_factor(kind, n)
    if factor <= 0 or peak_gbps <= 0:
        return None
    t = table()
    scale_out = "dcn" if scale_up == "ici" else "ib"
    hop = t.fabrics[scale_out if link in ("ib", "mixed") else scale_up].hop_latency_us
    if hop is None:  # a fabric without a published latency (TPU ICI/DCN): no knee is drawn
        return None
    if kind == "all-reduce":
        steps = 2 * (n - 1)
    elif kind in ("all-gather", "reduce-scatter", "broadcast"):
        steps = n - 1
    else:
        steps = 1
    latency_s = (t.base_latency_us + steps * hop) * 1e-6
    return latency_s * peak_gbps * 1e9 / factor


def verdict(utilization: float, below_knee: bool = True) -> str:
    """How a collective uses its link: under 20% of the peak it is latency-bound only where its messages are
    below the link's latency-bandwidth knee; a large message that slow is ``below-peak`` (contention, the
    algorithm or protocol, chunking), which batching small calls would not fix."""
    if utilization < 0.2:
        return "latency-bound" if below_knee else "below-peak"
    if utilization < 0.7:
        return "under-utilized"
    return "bandwidth-bound"


def annotate(
    collectives: list[Collective],
    group_sizes: dict[tuple[str, str], int],
    peaks: dict[str, float],
    scale_up: str = "nvlink",
) -> list[Collective]:
    """Each collective with algorithm/bus bandwidth (GB/s), the link peak and a verdict added."""
    out = []
    for c in collectives:
        n = group_sizes.get((c.name, c.kind), 0)
        per_call = c.total_ns / c.count if c.count else 0
        if not c.bytes_per_call or per_call <= 0:
            out.append(replace(c, group_size=n or None))
            continue
        algbw = c.bytes_per_call / per_call  # bytes per ns = GB/s
        busbw = algbw * bus_factor(c.kind, n) if n else None
        # a mixed point-to-point collective is bounded by its slowest (InfiniBand) share
        link = "ib" if c.link in ("ib", "mixed") else c.link
        peak = peaks.get(link)
        util = busbw / peak if busbw is not None and peak else None
        knee = latency_knee_bytes(c.kind, n, link, peak, scale_up) if util is not None and peak else None
        out.append(
            replace(
                c,
                group_size=n or None,
                algo_bandwidth_gbps=round(algbw, 3),
                bus_bandwidth_gbps=None if busbw is None else round(busbw, 3),
                link_peak_gbps=peak,
                link_utilization=None if util is None else round(util, 4),
                bandwidth_verdict=None if util is None else verdict(util, knee is None or c.bytes_per_call < knee),
                latency_knee_bytes=None if knee is None else round(knee),
            )
        )
    return out
