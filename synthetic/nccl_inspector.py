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


# P2P (``p2p=True``): a pipeline communicator over the 8 ranks; per step each rank sends to the next (ring) and
# receives from the previous, 16 MiB; 3->4 and 7->0 cross hosts (IB), the rest stay in one (NVLink)
PP_COMM = f"0x{0x9A9E11E000000000:016x}"
PP_BYTES = 16 << 20


def build(
    steps: int = 20, seed: int = 7, slow_share: float = 0.9, version: str = "v4.0", p2p: bool = False,
    p2p_drop: bool = False,
) -> Job:  # fmt: skip
    """The job; ``p2p`` adds the pipeline communicator's Send/Recv records (NCCL 2.30's ``p2p_perf``),
    ``p2p_drop`` then leaves rank 0's last Recv from rank 7 out of its log (as a ring overwrite would)."""
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
    p2p_truth = _p2p_records(rng, steps, slow_share, records, p2p_drop) if p2p else None
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
    if p2p_truth is not None:
        job.truth["p2p"] = p2p_truth
    return job


def _p2p_records(
    rng: np.random.Generator, steps: int, slow_share: float, records: dict[int, list[Record]], drop: bool
) -> dict[str, Any]:
    """Append each rank's Send/Recv records of the pipeline communicator; return what the analysis must find.

    A Send and its Recv end together, so the one posted last has the shorter call (its transfer) and the
    other waited for it. p2p_sn is each rank's own counter over its P2P calls (even ranks send first, odd
    ranks receive first, after unwritten small calls), so a pair's two numbers differ (matching must not
    rely on them)."""
    n = 8
    calls: dict[int, list[tuple[str, int, int]]] = {r: [] for r in range(n)}  # rank -> (op, peer, exec µs)
    pairs = []  # (src, dst, send µs, recv µs)
    for _step in range(steps):
        for src in range(n):
            dst = (src + 1) % n
            cross = _host(src) != _host(dst)
            bus_gbs, latency_us = (WORLD_BUS_GBS, WORLD_LATENCY_US) if cross else (HOST_BUS_GBS, HOST_LATENCY_US)
            transfer_ns = int(latency_us * 1000 + PP_BYTES / bus_gbs)
            if SLOW_RANK in (src, dst) and rng.random() < slow_share:
                last = SLOW_RANK
            else:
                last = src if rng.random() < 0.5 else dst
            wait = int(rng.integers(5_000, 400_000))
            send_us = (transfer_ns + (0 if last == src else wait)) // 1000
            recv_us = (transfer_ns + (0 if last == dst else wait)) // 1000
            pairs.append((src, dst, send_us, recv_us))
        for src, dst, send_us, _ in pairs[-n:]:
            calls[src].append(("Send", dst, send_us))
        for src, dst, _, recv_us in pairs[-n:]:
            calls[dst].append(("Recv", src, recv_us))
    dropped = (7, 0) if drop else None  # (src, dst) of the direction whose last Recv is lost
    if drop:
        last_recv = max(i for i, c in enumerate(calls[0]) if c[0] == "Recv" and c[1] == 7)
        del calls[0][last_recv]
    for rank in range(n):
        sends = [c for c in calls[rank] if c[0] == "Send"]
        recvs = [c for c in calls[rank] if c[0] == "Recv"]
        first, second = (sends, recvs) if rank % 2 == 0 else (recvs, sends)
        ordered = [c for pair in zip(first, second) for c in pair] + first[len(second) :] + second[len(first) :]
        # the counter also counts calls under NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES, which are not written: here
        # 3 x rank small calls before the first written one, so a pair's two numbers differ
        for sn, (op, peer, t_us) in enumerate(ordered, 1 + 3 * rank):
            algbw = PP_BYTES / 1e9 / (t_us / 1e6) if t_us > 0 else 0.0
            perf = {
                "p2p": op,
                "p2p_sn": sn,
                "p2p_peer": peer,
                "p2p_msg_size_bytes": PP_BYTES,
                "p2p_exec_time_us": t_us,
                "p2p_timing_source": "kernel_gpu",
                "p2p_algobw_gbs": round(algbw, 6),
                "p2p_busbw_gbs": round(algbw, 6),
            }
            records[rank].append((PP_COMM, "pp", rank, n, 2, perf))
    # the truth, from the pairs made above
    shortest = {f"{_host(r)}:{_pid(r)}": {"count": 0, "caused_us": 0} for r in range(n)}
    instances = beyond_total = tied = 0
    bw: dict[tuple[str, str], list[float]] = {}  # (op, link) -> [bytes, exec µs, shortest member µs]
    seen: dict[tuple[int, int], int] = {}
    for src, dst, send_us, recv_us in pairs:
        k = seen[(src, dst)] = seen.get((src, dst), 0) + 1
        unmatched = dropped == (src, dst)
        is_lost = unmatched and k == steps
        link = "unknown" if unmatched else ("ib" if _host(src) != _host(dst) else "nvlink")
        low = min(send_us, recv_us)
        for op, t_us in (("Send", send_us), ("Recv", recv_us)):
            if op == "Recv" and is_lost:
                continue
            acc = bw.setdefault((op, link), [0.0, 0.0, 0.0])
            acc[0] += PP_BYTES
            acc[1] += t_us
            acc[2] += t_us if unmatched else low
        if unmatched:
            continue
        instances += 1
        beyond_total += abs(send_us - recv_us)
        if send_us == recv_us:
            tied += 1
            continue
        member = src if send_us < recv_us else dst
        shortest[f"{_host(member)}:{_pid(member)}"]["count"] += 1
        shortest[f"{_host(member)}:{_pid(member)}"]["caused_us"] += abs(send_us - recv_us)
    records_n = 2 * len(pairs) - (1 if drop else 0)
    unmatched_n = 2 * steps - 1 if drop else 0
    return {
        "records": records_n,
        "matched_records": records_n - unmatched_n,
        "unmatched_records": unmatched_n,
        "instances": instances,
        "incomplete_instances": steps if drop else 0,
        "tied_instances": tied,
        "beyond_shortest_us": beyond_total,
        "shortest": shortest,
        "slow_process": f"{_host(SLOW_RANK)}:{_pid(SLOW_RANK)}",
        "bandwidth": [
            {
                "op": op,
                "link": link,
                "size_bucket": size_bucket(PP_BYTES),
                "bus_bandwidth_gbps": acc[0] / (acc[1] * 1000),
                "transfer_bus_bandwidth_gbps": acc[0] / (acc[2] * 1000),
            }
            for (op, link), acc in sorted(bw.items())
        ],
    }


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
                out.extend(_dump({"header": head, "metadata": metadata(ts), _part(c[5]): c[5]}) for c in chunk)
            else:
                n_p2p = sum(1 for c in chunk if "p2p" in c[5])
                stats = {"coll_records": len(chunk) - n_p2p, "p2p_records": n_p2p, "proxy_records": 0,
                         "dropped_records": 0}  # fmt: skip
                out.append(_dump({"header": head, "metadata": metadata(ts), "dump_stats": stats}))
                out.extend(_dump({_part(c[5]): c[5]}) for c in chunk)
    return out


def _part(perf: dict[str, Any]) -> str:
    return "p2p_perf" if "p2p" in perf else "coll_perf"


def _dump(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def write(
    folder: Path, steps: int = 20, seed: int = 7, slow_share: float = 0.9, version: str = "v4.0", p2p: bool = False,
    p2p_drop: bool = False,
) -> Job:  # fmt: skip
    """Write the job's logs into ``folder`` (created) and its truth beside it, ``<folder>.truth.json``."""
    job = build(steps, seed, slow_share, version, p2p, p2p_drop)
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in job.lines.items():
        (folder / name).write_text("".join(line + "\n" for line in lines))
    folder.with_name(folder.name + ".truth.json").write_text(json.dumps(job.truth, indent=1) + "\n")
    return job


if __name__ == "__main__":
    import sys

    out = write(Path(sys.argv[1] if len(sys.argv) > 1 else "sample_traces/nccl_inspector_8rank"))
    print(json.dumps(out.truth["shortest"]))
