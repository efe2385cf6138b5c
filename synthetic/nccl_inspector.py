"""A folder of NCCL Inspector logs (JSON mode) from an 8-rank job with one slow rank, and its truth.

Written the way the plugin writes them (NVIDIA/nccl ``plugins/profiler/inspector``; fields in
docs/metrics.md, "NCCL Inspector logs"): one file per process, ``<hostname>-pid<pid>.log``, one
compact JSON object per line, ``header`` / ``metadata`` / ``coll_perf`` (v4.0) in that order, an
integer ``coll_exec_time_us`` (the longest channel's GPU time truncated to µs), algbw and busbw from
``inspectorComputeOpBw`` (All2All: 0). ``version="v4.3"`` writes the later layout instead: one
``dump_stats`` line with the header per communicator dump, then operation lines without one, with
``coll_algo`` / ``coll_proto``.

The job: 2 hosts x 4 GPUs. A world communicator (8 ranks, 2 nodes) runs AllReduce, AllGather and
ReduceScatter; each host's communicator (4 ranks, 1 node) runs AllReduce and AlltoAll. In every
collective all members end together, so a member's time is its wait for the last arrival plus the
transfer; the slow process (global rank 5) arrives last in ``slow_share`` of the instances (its call
is the shortest), a random other member in the rest. The truth (``truth``) is computed here from the
times written: bus bandwidth per kind and size bucket, the shortest member's count and the time the
others spent beyond it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HOSTS = ("node0", "node1")
GPUS_PER_HOST = 4
SLOW_RANK = 5
GIT_REV = "5067397c2"

# (collective, message bytes) per step, per communicator: world ops cross hosts (IB), host ops stay in it
WORLD_OPS = (("AllReduce", 64 << 20), ("AllGather", 8 << 20), ("ReduceScatter", 8 << 20), ("AllReduce", 256 << 10))
HOST_OPS = (("AlltoAll", 16 << 20), ("AllReduce", 32 << 20))
# the bus bandwidth a transfer runs at (GB/s) and its latency (µs): IB across hosts, NVLink inside one
WORLD_BUS_GBS, WORLD_LATENCY_US = 40.0, 25.0
HOST_BUS_GBS, HOST_LATENCY_US = 350.0, 8.0


def bus_traffic(coll: str, size: int, n: int) -> tuple[float, float]:
    """(traffic bytes, bus factor) as ``inspectorComputeOpBw`` (inspector.cc) has them; 0 traffic: unknown."""
    if coll == "AllReduce":
        return float(size), 2 * (n - 1) / n
    if coll in ("AllGather", "AllGatherV", "ReduceScatter"):
        return float(size * n), (n - 1) / n
    if coll in ("Broadcast", "Reduce"):
        return float(size), 1.0
    return 0.0, 0.0


def size_bucket(size: int) -> int:
    """The lower edge of a message size's power-of-two bucket (the analysis buckets the same way)."""
    return 1 << (int(size).bit_length() - 1) if size > 0 else 0


KIND = {
    "AllReduce": "all-reduce", "AllGather": "all-gather", "ReduceScatter": "reduce-scatter", "AlltoAll": "all-to-all",
}  # fmt: skip


@dataclass
class Job:
    """Every record written (per process) and what the analysis must find."""

    lines: dict[str, list[str]] = field(default_factory=dict)  # file name -> lines
    truth: dict[str, Any] = field(default_factory=dict)


def _pid(rank: int) -> int:
    return 41000 + 17 * rank


def _host(rank: int) -> str:
    return HOSTS[rank // GPUS_PER_HOST]


def build(steps: int = 20, seed: int = 7, slow_share: float = 0.9, version: str = "v4.0") -> Job:
    rng = np.random.default_rng(seed)
    world = [(f"0x{0x5EED0000A11C0DE5:016x}", "world", list(range(8)), 2, WORLD_OPS, WORLD_BUS_GBS, WORLD_LATENCY_US)]
    comms = world + [
        (f"0x{0x11C0FFEE00000000 + h:016x}", f"host{h}", list(range(h * 4, h * 4 + 4)), 1, HOST_OPS,
         HOST_BUS_GBS, HOST_LATENCY_US)
        for h in range(len(HOSTS))
    ]  # fmt: skip
    records: dict[int, list[tuple[str, str, int, int, int, dict[str, Any]]]] = {r: [] for r in range(8)}
    shortest: dict[int, int] = {r: 0 for r in range(8)}
    caused_us: dict[int, int] = {r: 0 for r in range(8)}
    instances = 0
    beyond_total_us = 0
    bw: dict[tuple[str, int], list[float]] = {}  # (kind, bucket) -> [bus bytes, exec µs, transfer µs (min)]
    clock_us = 1_796_000_000_000_000
    for comm_id, comm_name, members, nnodes, ops, bus_gbs, latency_us in comms:
        n = len(members)
        sn = 0
        for _step in range(steps):
            for coll, size in ops:
                sn += 1
                traffic, factor = bus_traffic(coll, size, n)
                bus_bytes = traffic * factor if traffic else size * (n - 1) / n  # All2All still moves bytes
                transfer_ns = int(latency_us * 1000 + bus_bytes / bus_gbs)  # bytes / (GB/s) = ns
                last = SLOW_RANK if SLOW_RANK in members and rng.random() < slow_share else int(rng.choice(members))
                waits = {m: 0 if m == last else int(rng.integers(5_000, 400_000)) for m in members}
                exec_us = {m: (transfer_ns + waits[m]) // 1000 for m in members}
                low = min(exec_us.values())
                at_low = [m for m in members if exec_us[m] == low]
                instances += 1
                beyond = sum(exec_us[m] - low for m in members)
                beyond_total_us += beyond
                if len(at_low) == 1:
                    shortest[at_low[0]] += 1
                    caused_us[at_low[0]] += beyond
                key = (KIND[coll], size_bucket(size))
                acc = bw.setdefault(key, [0.0, 0.0, 0.0])
                if traffic:
                    acc[0] += traffic * factor * n
                    acc[1] += sum(exec_us.values())
                    acc[2] += low * n
                clock_us += 500
                for m in members:
                    t_s = exec_us[m] / 1e6
                    algbw = traffic / 1e9 / t_s if traffic and t_s > 0 else 0.0
                    perf = {
                        "coll": coll,
                        "coll_sn": sn,
                        "coll_msg_size_bytes": size,
                        "coll_exec_time_us": exec_us[m],
                        "coll_timing_source": "kernel_gpu",
                        "coll_algobw_gbs": round(algbw, 6),
                        "coll_busbw_gbs": round(algbw * factor, 6),
                    }
                    if version != "v4.0":
                        perf["coll_algo"] = "RING"
                        perf["coll_proto"] = "SIMPLE" if size >= 1 << 20 else "LL128"
                    records[m].append((comm_id, comm_name, members.index(m), n, nnodes, perf))
    job = Job()
    for rank in range(8):
        name = f"{_host(rank)}-pid{_pid(rank)}.log"
        job.lines[name] = _lines(rank, records[rank], version, clock_us)
    peaks_note = "bus GB/s = Σ bus bytes / Σ exec time of every member's record; transfer: of the shortest member"
    job.truth = {
        "ranks": 8,
        "slow_process": f"{_host(SLOW_RANK)}:{_pid(SLOW_RANK)}",
        "instances": instances,
        "beyond_shortest_us": beyond_total_us,
        "shortest": {f"{_host(r)}:{_pid(r)}": {"count": shortest[r], "caused_us": caused_us[r]} for r in range(8)},
        "bandwidth_note": peaks_note,
        "bandwidth": [
            {
                "kind": kind,
                "size_bucket": bucket,
                "bus_bandwidth_gbps": acc[0] / (acc[1] * 1000) if acc[1] else None,
                "transfer_bus_bandwidth_gbps": acc[0] / (acc[2] * 1000) if acc[2] else None,
            }
            for (kind, bucket), acc in sorted(bw.items())
        ],
    }
    return job


Record = tuple[str, str, int, int, int, dict[str, Any]]  # comm id, comm name, rank in it, n, nnodes, coll_perf


def _lines(rank: int, recs: list[Record], version: str, clock: int) -> list[str]:
    def header(comm_id: str, comm_name: str, crank: int, n: int, nnodes: int) -> dict[str, Any]:
        # comm_name: NCCL 2.30 on (2.28.3 wrote none); the reader takes both
        return {"id": comm_id, "comm_name": comm_name, "rank": crank, "n_ranks": n, "nnodes": nnodes}

    def metadata(ts: int) -> dict[str, Any]:
        return {
            "inspector_output_format_version": version,
            "git_rev": GIT_REV,
            "rec_mechanism": "nccl_profiler_interface",
            "dump_timestamp_us": ts,
            "hostname": _host(rank),
            "pid": _pid(rank),
        }

    out: list[str] = []
    dumps = 4  # the plugin dumps each communicator's completed ops at intervals
    by_comm: dict[str, list[tuple[str, str, int, int, int, dict[str, Any]]]] = {}
    for r in recs:
        by_comm.setdefault(r[0], []).append(r)
    for d in range(dumps):
        ts = clock + d * 1_000_000 + rank
        for comm_recs in by_comm.values():
            chunk = comm_recs[d * math.ceil(len(comm_recs) / dumps) : (d + 1) * math.ceil(len(comm_recs) / dumps)]
            if not chunk:
                continue
            comm_id, comm_name, crank, n, nnodes, _ = chunk[0]
            head = header(comm_id, comm_name, crank, n, nnodes)
            if version == "v4.0":
                out.extend(_dump({"header": head, "metadata": metadata(ts), "coll_perf": c[5]}) for c in chunk)
            else:
                stats = {"coll_records": len(chunk), "p2p_records": 0, "proxy_records": 0, "dropped_records": 0}
                out.append(_dump({"header": head, "metadata": metadata(ts), "dump_stats": stats}))
                out.extend(_dump({"coll_perf": c[5]}) for c in chunk)
    return out


def _dump(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def write(folder: Path, steps: int = 20, seed: int = 7, slow_share: float = 0.9, version: str = "v4.0") -> Job:
    """Write the job's logs into ``folder`` (created) and its truth beside it, ``<folder>.truth.json``."""
    job = build(steps, seed, slow_share, version)
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in job.lines.items():
        (folder / name).write_text("".join(line + "\n" for line in lines))
    folder.with_name(folder.name + ".truth.json").write_text(json.dumps(job.truth, indent=1) + "\n")
    return job


if __name__ == "__main__":
    import sys

    out = write(Path(sys.argv[1] if len(sys.argv) > 1 else "sample_traces/nccl_inspector_8rank"))
    print(json.dumps(out.truth["shortest"]))
