"""What NCCL Inspector logs tell (pure functions over the reader's operation rows).

An Inspector record is one rank's execution time of one collective, with no start time: so there is
no timeline, and none of the §4 figures that need one (exposed comm, overlap, span, idle). What the
rows do give, and this module measures (definitions in docs/metrics.md, "NCCL Inspector logs"):

- bus bandwidth per collective kind, link and power-of-two message-size bucket, from the message size
  and the Inspector's own traffic rules, against the GPU's link peak (``--gpu``);
- matching ranks by (communicator, ``coll_sn``): in a collective all members end together, so the
  member with the shortest call arrived last and the others waited for it. Per process: how often its
  call was the single shortest, and the time the other members spent beyond it (Σ over those
  instances of each member's time minus the instance's minimum).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

# a process is "consistently" the last to arrive when its call is the shortest in at least this share of
# the complete instances it took part in (a random member is shortest in 1/n of them)
CONSISTENT_SHARE = 0.5

CANNOT_TELL = (
    "exposed communication and its overlap with compute: a record has no start time, so no timeline "
    "(dump_timestamp_us is when it was written)",
    "the §4 figures (span, busy, idle, comm share, exposed comm): null in 'total', no 'devices'",
    "wait vs transfer exactly: a member's time beyond the shortest member is its wait minus the shortest "
    "member's own wait when their transfers take equal time (so a lower bound on its wait); unequal "
    "transfers (a slower link, a channel imbalance) blur it",
    "clock alignment across hosts, the order of collectives across communicators, compute between them",
    "which GPU, stream or kernel ran it (no device id; rank is per communicator, a process is host:pid)",
    "operations under NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES (8192 by default) or overwritten in the 1024-entry "
    "ring before a dump: not written",
)


def traffic_factor(kind: str, op: str, size: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, bool]:
    """(bus bytes per call, known): inspectorComputeOpBw's traffic x bus factor (NVIDIA/nccl inspector.cc)."""
    size = size.astype(np.float64)
    nf = n.astype(np.float64)
    if kind == "all-reduce":
        return size * 2 * (nf - 1) / nf, True
    if kind in ("all-gather", "reduce-scatter"):
        return size * nf * (nf - 1) / nf, True
    if kind == "broadcast" or op.lower() == "reduce" or kind == "send-recv":
        return size, True
    return np.zeros_like(size), False  # All2All and others: the Inspector has no traffic rule (it writes 0)


def size_bucket(size: np.ndarray) -> np.ndarray:
    """Lower edge of each size's power-of-two bucket (0 for 0)."""
    s = np.maximum(size.astype(np.int64), 1)
    return np.where(size > 0, np.left_shift(1, np.floor(np.log2(s)).astype(np.int64)), 0)


def bytes_label(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def link_of(nnodes: np.ndarray) -> np.ndarray:
    """A communicator on one node runs on the scale-up fabric; one spanning nodes is bounded by the scale-out."""
    return np.where(nnodes > 1, "ib", "nvlink")


def measure(rows: pd.DataFrame, peaks: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``inspector`` section of the analysis from every file's operation rows (concatenated)."""
    peaks = peaks or {}
    versions = rows.attrs.get("versions", ())
    rows = rows.drop_duplicates(["comm", "op", "seq", "rank"], ignore_index=True)  # a record dumped twice
    coll = rows[rows["peer"].isna()].reset_index(drop=True)
    return {
        "format": "nccl-inspector",
        "versions": sorted({str(v) for v in versions}),
        "records": len(rows),
        "collective_records": len(coll),
        "p2p_records": len(rows) - len(coll),
        "processes": int(rows.groupby(["host", "pid"], observed=True).ngroups),
        "communicators": _communicators(rows),
        "exec_us": float(rows["exec_us"].sum()),
        **_instances(coll),
        "bandwidth": _bandwidth(coll, peaks),
        "cannot_tell": list(CANNOT_TELL),
    }


def _communicators(rows: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for comm, g in rows.groupby("comm", observed=True, sort=True):
        out.append(
            {
                "id": str(comm),
                "name": None if g["comm_name"].isna().all() else str(g["comm_name"].dropna().iloc[0]),
                "n_ranks": int(g["n_ranks"].max()),
                "nnodes": int(g["nnodes"].max()),
                "ranks_seen": int(g["rank"].nunique()),
                "records": len(g),
            }
        )
    return out


def _instances(coll: pd.DataFrame) -> dict[str, Any]:
    """Match each collective's members by (communicator, seq); the shortest member of a complete instance
    arrived last: the rest of the members' time beyond it is put to its process."""
    empty = {"instances": 0, "incomplete_instances": 0, "beyond_shortest_us": 0.0, "last_to_arrive": []}
    if not len(coll):
        return empty
    key = ["comm", "op", "seq"]
    grouped = coll.groupby(key, observed=True, sort=False)
    members = grouped["rank"].transform("nunique").to_numpy()
    complete = members == coll["n_ranks"].to_numpy()
    incomplete = int(grouped.ngroups - coll[complete].groupby(key, observed=True).ngroups)
    c = coll[complete].reset_index(drop=True)
    if not len(c):
        return {**empty, "incomplete_instances": incomplete}
    g = c.groupby(key, observed=True, sort=False)
    exec_us = c["exec_us"].to_numpy()
    low = g["exec_us"].transform("min").to_numpy()
    beyond = exec_us - low
    at_low = exec_us == low
    instance = g.ngroup().to_numpy()
    n_at_low = np.bincount(instance, weights=at_low)[instance]
    instance_beyond = np.bincount(instance, weights=beyond)[instance]
    single = at_low & (n_at_low == 1)  # ties at the minimum name no member
    # processes (host, pid) numbered once; names built per process, not per row
    procs = c.groupby(["host", "pid"], observed=True, sort=True)
    proc = procs.ngroup().to_numpy()
    keys = list(procs.groups.keys())
    n_proc = len(keys)
    instances = np.bincount(proc, minlength=n_proc)
    shortest = np.bincount(proc[single], minlength=n_proc)
    caused = np.bincount(proc[single], weights=instance_beyond[single], minlength=n_proc)
    comm_label = c["comm_name"].astype(object).where(c["comm_name"].notna(), c["comm"].astype(object))
    seen = pd.DataFrame({"proc": proc, "label": comm_label.to_numpy(), "rank": c["rank"].to_numpy()}).drop_duplicates()
    ranks: dict[int, list[str]] = {}
    for p_, label, rank in seen.itertuples(index=False):
        ranks.setdefault(int(p_), []).append(f"{label}:{rank}")
    order = sorted(range(n_proc), key=lambda i: (-caused[i], -shortest[i], str(keys[i])))
    rows = []
    for i in order:
        host, pid = keys[i]
        share = float(shortest[i]) / float(instances[i]) if instances[i] else 0.0
        rows.append(
            {
                "process": f"{host}:{pid}",
                "host": str(host),
                "pid": int(pid),
                "ranks": ", ".join(sorted(ranks.get(i, []))),
                "instances": int(instances[i]),
                "shortest": int(shortest[i]),
                "shortest_share": share,
                "caused_us": float(caused[i]),
                "flagged": share >= CONSISTENT_SHARE and int(shortest[i]) > 0,
            }
        )
    n_complete = int(g.ngroups)
    return {
        "instances": n_complete,
        "incomplete_instances": incomplete,
        "tied_instances": int(n_complete - single.sum()),
        "beyond_shortest_us": float(beyond.sum()),
        "last_to_arrive": rows,
    }


def _bandwidth(coll: pd.DataFrame, peaks: Mapping[str, float]) -> list[dict[str, Any]]:
    """Per (kind, op, link, size bucket): bus GB/s over every member's time, and over the shortest member's
    (the instance's transfer, as near as a log without timestamps gets), against the link's peak."""
    if not len(coll):
        return []
    c = coll.assign(
        bucket=size_bucket(coll["bytes"].to_numpy()),
        link=link_of(coll["nnodes"].to_numpy()),
        low=coll.groupby(["comm", "op", "seq"], observed=True)["exec_us"].transform("min"),
    )
    out = []
    for (kind, op, link, bucket), g in c.groupby(["kind", "op", "link", "bucket"], observed=True, sort=True):
        bus, known = traffic_factor(str(kind), str(op), g["bytes"].to_numpy(), g["n_ranks"].to_numpy())
        exec_us = float(g["exec_us"].sum())
        low_us = float(g["low"].sum())
        bus_gbps = float(bus.sum()) / (exec_us * 1000) if known and exec_us > 0 else None  # bytes/ns = GB/s
        transfer_gbps = float(bus.sum()) / (low_us * 1000) if known and low_us > 0 else None
        peak = peaks.get(str(link))
        out.append(
            {
                "kind": str(kind),
                "op": str(op),
                "link": str(link),
                "size_bucket_bytes": int(bucket),  # type: ignore[call-overload]
                "size_bucket": f"{bytes_label(int(bucket))}+",  # type: ignore[call-overload]
                "records": len(g),
                "instances": int(g[["comm", "seq"]].drop_duplicates().shape[0]),
                "bytes_per_call": int(g["bytes"].median()),
                "exec_us": exec_us,
                "mean_exec_us": exec_us / len(g),
                "bus_bandwidth_gbps": bus_gbps,
                "transfer_bus_bandwidth_gbps": transfer_gbps,
                "inspector_busbw_gbps_median": float(g["busbw_gbs"].median()) if known else None,
                "link_peak_gbps": peak,
                "peak_share": bus_gbps / peak if peak and bus_gbps is not None else None,
                "transfer_peak_share": transfer_gbps / peak if peak and transfer_gbps is not None else None,
            }
        )
    return out
