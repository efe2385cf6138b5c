"""Achieved bandwidth of each collective against the peak of the link it used.

Algorithm bandwidth is one call's bytes over its duration; bus bandwidth
scales it by the nccl-tests factor of the collective so that numbers compare
across group sizes and with the link's peak:
all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, all-to-all (n-1)/n,
send-recv and broadcast 1.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..core.analysis import Collective
from ..errors import InputError

# GB/s per GPU, one direction. NVLink 4 (H100/H200): 18 links x 25 GB/s = 450; NVLink 5
# (B200/GB200/GB300): 900. InfiniBand per NIC: NDR 400 Gb/s = 50 GB/s, XDR 800 Gb/s = 100 GB/s.
LINK_PRESETS: dict[str, dict[str, float]] = {
    "h100": {"nvlink": 450.0, "ib": 50.0},
    "h200": {"nvlink": 450.0, "ib": 50.0},
    "h800": {"nvlink": 200.0, "ib": 50.0},  # the export part: NVLink cut to 8 links (400 GB/s both ways)
    "b200": {"nvlink": 900.0, "ib": 50.0},
    "gb200": {"nvlink": 900.0, "ib": 50.0},
    "gb300": {"nvlink": 900.0, "ib": 100.0},
}
IB_PRESETS = {"ndr": 50.0, "xdr": 100.0, "hdr": 25.0}


def bus_factor(kind: str, n: int) -> float:
    if n <= 1:
        return 0.0
    if kind == "all-reduce":
        return 2 * (n - 1) / n
    if kind in ("all-gather", "reduce-scatter", "all-to-all", "ep-dispatch", "ep-combine"):
        return (n - 1) / n
    return 1.0  # send-recv, broadcast: every byte crosses once


def link_peaks(gpu: str | None, override: str | None) -> dict[str, float]:
    """Peak GB/s per link from a GPU preset and/or ``--link-peak nvlink=450,ib=50`` (override wins)."""
    peaks: dict[str, float] = {}
    if gpu:
        key = re.sub(r"[^a-z0-9]", "", gpu.lower())
        match = next((v for k, v in LINK_PRESETS.items() if k in key), None)
        if match is None:
            raise InputError(None, f"--gpu {gpu!r}: unknown; presets: {', '.join(sorted(LINK_PRESETS))}")
        peaks.update(match)
    if override:
        for part in override.split(","):
            name, _, value = part.partition("=")
            name = name.strip().lower()
            if value.strip().lower() in IB_PRESETS and name == "ib":
                peaks["ib"] = IB_PRESETS[value.strip().lower()]
                continue
            try:
                peaks[name] = float(value)
            except ValueError:
                raise InputError(None, f"--link-peak {override!r}: expected nvlink=GBPS,ib=GBPS") from None
            if name not in ("nvlink", "ib") or peaks[name] <= 0:
                raise InputError(None, f"--link-peak {override!r}: expected nvlink=GBPS,ib=GBPS") from None
    return peaks


def verdict(utilization: float) -> str:
    if utilization < 0.2:
        return "latency-bound"
    if utilization < 0.7:
        return "under-utilized"
    return "bandwidth-bound"


def annotate(
    collectives: list[Collective], group_sizes: dict[tuple[str, str], int], peaks: dict[str, float]
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
        out.append(
            replace(
                c,
                group_size=n or None,
                algo_bandwidth_gbps=round(algbw, 3),
                bus_bandwidth_gbps=None if busbw is None else round(busbw, 3),
                link_peak_gbps=peak,
                link_utilization=None if util is None else round(util, 4),
                bandwidth_verdict=None if util is None else verdict(util),
            )
        )
    return out
