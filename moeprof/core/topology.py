"""Which fabric carried each communication: NVLink, InfiniBand, or unknown (spec §3).

Every device sits in one NVLink domain: by default the devices of one host
(``gpus_per_domain`` set by the parser), or ``--nvlink-domain-size N`` global
ranks. For a comm activity whose group is known, ``local`` counts the other
members in the device's domain and ``remote`` those outside it.

TPUs have the same pair under other names: a chip's scale-up domain is its slice (ICI), the scale-out
between slices is DCN. The readers set ``gpus_per_domain`` to the slice's chips (every chip the collectives
name, where the capture shows no traffic between slices), ``--slice-size N`` (the same option) overrides
it, and the rules below then give ``nvlink`` (ICI) and ``ib`` (DCN) as they give NVLink and InfiniBand.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InputError
from .events import BUCKETS, bucket_codes, column_codes, combine_codes, first_rows, lookup
from .hardware import is_tpu_job
from .trace import Trace
from .vocabulary import vocabulary

# parsers whose one file covers one whole host (or, rocprofv3, one process of a host whose GPUs it numbers
# node-wide): a comm group nobody named is then all local when the analysis spans a single host
HOST_SCOPED_SOURCES = frozenset({"xplane", "chrome", "nsys", "rocprof"})


def ib_fraction(kind: str, own: int, members: list[int], per_domain: int) -> float:
    """Share of one collective carried over InfiniBand, for a device of global id ``own``.

    Spec §3 names a pattern for every kind but ``other``: an ``other`` collective that
    leaves the domain has no defined split, so its link is unknown (one that stays
    inside the domain is NVLink whatever its pattern).
    """
    if own < 0 or per_domain <= 0 or not members:
        return float("nan")
    patterns = vocabulary()
    domain = own // per_domain
    others = [m for m in members if m != own]
    remote = sum(1 for m in others if m // per_domain != domain)
    local = len(others) - remote
    if remote == 0:
        return 0.0
    if kind in patterns.point_to_point:
        return remote / (local + remote)
    if kind in patterns.ring_or_tree:
        return 1.0  # rings and trees: the cross-domain hop bounds the whole operation
    return float("nan")


def internode_fraction(rdma_ranks: int, per_domain: int) -> float:
    """The InfiniBand (RDMA) share of a DeepEP normal-mode internode kernel (link hint ``internode``): its
    group is every GPU of ``rdma_ranks`` nodes of ``per_domain`` GPUs, a point-to-point pattern, so §3 gives
    remote / (local + remote) = (R−1)·G / (R·G − 1); the rest is the NVLink inside the node (docs/metrics.md,
    "Link"). NaN where either count is unknown."""
    if rdma_ranks < 1 or per_domain < 1 or rdma_ranks * per_domain < 2:
        return float("nan")
    return (rdma_ranks - 1) * per_domain / (rdma_ranks * per_domain - 1)


def rdma_ranks_of(names: list[str]) -> int:
    """The RDMA ranks (nodes) DeepEP's internode kernels name (their second template argument): the most
    named among ``names`` (ties: the smallest), 0 where none names it."""
    pattern = vocabulary().deepep_rdma_ranks
    counts: dict[int, int] = {}
    for name in names:
        if m := pattern.search(name):
            counts[int(m.group(1))] = counts.get(int(m.group(1)), 0) + 1
    return min(counts, key=lambda r: (-counts[r], r)) if counts else 0


def check_domain_size(trace: Trace, nvlink_domain_size: int) -> None:
    """Refuse a ``--nvlink-domain-size`` that cuts a host's GPUs unevenly.

    A domain is whole hosts (NVL72 over hosts of 4: 72) or an even part of one host (pairs of PCIe
    cards joined by NVLink bridges: 2 on hosts of 8); any other size, e.g. 3 on hosts of 8, puts GPUs of
    one host in domains that are partly elsewhere and turns local traffic into made-up InfiniBand.
    """
    if not len(trace.events):
        return
    sizes = pd.unique(trace.events["gpus_per_domain"].to_numpy(dtype=np.int64))
    option, devices = "--nvlink-domain-size", "GPUs"
    # a TPU slice: the host's chips, not the default domain (the whole program)
    if is_tpu_job(trace.device_kinds.values()):
        sizes, option, devices = np.array([len(trace.devices)]), "--slice-size", "chips"
    for per_host in sorted(int(g) for g in sizes if g > 0):
        if nvlink_domain_size % per_host and per_host % nvlink_domain_size:
            raise InputError(
                trace.path,
                f"{option} {nvlink_domain_size} does not fit hosts of {per_host} {devices}: a domain is whole "
                f"hosts (a multiple of {per_host}) or an even part of one (a divisor of {per_host})",
            )


def attribute_links(trace: Trace, nvlink_domain_size: int | None = None, single_host: bool | None = None) -> Trace:
    """The trace with ``ib_fraction`` of every comm activity filled (spec §3)."""
    if nvlink_domain_size:
        check_domain_size(trace, nvlink_domain_size)
    return trace.replace(
        events=link_fractions(trace.events, nvlink_domain_size, single_host, all_local=job_fits_one_domain(trace))
    )


def job_fits_one_domain(trace: Trace) -> bool:
    """A rank file of a job whose every rank sits in one NVLink domain (world size <= GPUs per node).

    Spec §3: where every peer is local the link is NVLink, whatever the group, even for a kernel
    whose launch (and so its annotation) fell before the profiler started.
    """
    job = trace.job
    return bool(job.world_size and job.gpus_per_node and 0 < job.world_size <= job.gpus_per_node)


def link_fractions(
    events: pd.DataFrame,
    nvlink_domain_size: int | None = None,
    single_host: bool | None = None,
    all_local: bool = False,
) -> pd.DataFrame:
    """A copy of an event table with ``ib_fraction`` filled for comm rows (NaN elsewhere and where unknown)."""
    n = len(events)
    out = np.full(n, np.nan)
    if not n:
        return events.assign(ib_fraction=out)
    if single_host is None:
        single_host = events.loc[events["bucket"] != "", "host"].nunique() <= 1
    comm = np.flatnonzero(bucket_codes(events["bucket"]) == BUCKETS.index("comm"))
    if comm.size:
        per_domain = events["gpus_per_domain"].to_numpy(dtype=np.int64)[comm]
        if nvlink_domain_size:
            per_domain = np.full(comm.size, int(nvlink_domain_size), dtype=np.int64)
        own = events["global_id"].to_numpy(dtype=np.int64)[comm]
        strings = {c: column_codes(events[c]) for c in ("kind", "group", "link_hint", "source")}
        codes = {c: k[comm] for c, (k, _) in strings.items()}
        # each distinct (kind, own id, group, hint, domain size, source) is decided once
        combined = combine_codes(codes["kind"], own, codes["group"], codes["link_hint"], per_domain, codes["source"])
        firsts = first_rows(combined)

        def text(column: str) -> list:
            return lookup(codes[column][firsts], strings[column][1], np.nan).tolist()

        internode = np.array([h == "internode" for h in strings["link_hint"][1].tolist()], dtype=bool)
        rdma_ranks = 0
        if internode.any():  # the kernels of one file name one node count: taken from any of them
            name_codes, name_values = column_codes(events["name"])
            named = np.unique(name_codes[comm][lookup(codes["link_hint"], internode, False)])
            rdma_ranks = rdma_ranks_of([str(name_values[c]) for c in named[named >= 0].tolist()])
        values = np.empty(firsts.size)
        for i, (kind, own_id, group, hint, size, source) in enumerate(
            zip(
                text("kind"),
                own[firsts].tolist(),
                text("group"),
                text("link_hint"),
                per_domain[firsts].tolist(),
                text("source"),
                strict=True,
            )
        ):
            if hint == "ib":
                values[i] = 1.0
            elif hint == "internode":
                values[i] = internode_fraction(rdma_ranks, int(size))
            elif hint == "nvlink":
                values[i] = 0.0
            elif group:
                values[i] = ib_fraction(kind, int(own_id), [int(x) for x in group.split(",")], int(size))
            elif ((single_host and source in HOST_SCOPED_SOURCES) or all_local) and not nvlink_domain_size:
                values[i] = 0.0  # every peer of a single-host trace (or of a one-domain job) is local
            else:
                values[i] = np.nan
        out[comm] = values[combined]
    return events.assign(ib_fraction=out)
