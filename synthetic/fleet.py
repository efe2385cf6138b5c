"""A synthetic N-rank PyTorch job: one small Kineto trace per rank, and its truth.

``python -m synthetic.fleet OUT --ranks 1024 [--steps 3] [--layers 2] [--seed 0]``
writes ``OUT/rank0000.pt.trace.json.gz`` ... and ``OUT/fleet.truth.json``.

Each rank runs the same MoE-like step: an H2D copy, then per layer a router
GEMM, the dispatch all-to-all over its expert-parallel group (16 consecutive
ranks: two 8-GPU nodes, so it leaves the node) with a shared-expert kernel
overlapping it, the expert GEMM, the combine all-to-all, and at the end of the
step an all-reduce over every rank. One clock for the whole job: a collective
ends on every member when its last member has arrived plus the transfer, so
early ranks wait (rank 0 is a 25% slower straggler).

Each collective's launch is wrapped in ``record_param_comms`` with what PyTorch
records: collective name, process group name/description/ranks (abbreviated
past 30 ranks, as PyTorch does), group size, global rank start/stride, the
process group's sequence number ``Seq`` (also on the kernel), dtype and message
sizes. ``distributedInfo`` has rank, world size and ``pg_config``.

The truth (per-rank and total accumulated/compute/comm/memcpy ns, collective
counts) is summed from the generator's own integer-ns event list, sharing no
code with moeprof. Deterministic for a seed; about 3 KB per rank.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .gpu import COMM_OPS, COMPUTE_KERNELS, _write_gz_json
from .kineto import GPUS_PER_NODE, rank_doc

EP_GROUP = 16  # expert-parallel group: consecutive ranks over two nodes
STRAGGLER = 0  # the rank that computes 25% slower
STRAGGLER_FACTOR = 1.25
TRUTH_NAME = "fleet.truth.json"
MAX_RANKS_LISTED = 30  # PyTorch abbreviates "Process Group Ranks" past this many

A2A_KERNEL = COMM_OPS[0][0]  # NCCL runs all-to-all as SendRecv
ALLREDUCE_KERNEL = COMM_OPS[3][0]
GEMM, ROUTER = COMPUTE_KERNELS[0][0], COMPUTE_KERNELS[4][0]
SHARED_EXPERT = COMPUTE_KERNELS[1][0]
COMPUTE_STREAM, COMM_STREAM, COPY_STREAM = 7, 13, 21


@dataclass(frozen=True)
class Group:
    name: str  # PyTorch's process group name ("0" is the default group)
    desc: str
    ranks: tuple[int, ...]


@dataclass
class Activity:
    bucket: str  # compute / comm / memcpy (the truth)
    name: str
    start: int  # ns
    dur: int  # ns
    stream: int
    collective: str = ""  # all_to_all / allreduce
    group: Group | None = None
    seq: int = 0  # the process group's sequence number of this collective


@dataclass
class Job:
    ranks: int
    steps: int
    layers: int
    seed: int
    activities: list[list[Activity]]  # per rank
    step_windows: list[list[tuple[int, int]]]  # per rank: (start, end) of each step
    world: Group
    ep_groups: list[Group]

    def ep_group_of(self, rank: int) -> Group:
        return self.ep_groups[rank // EP_GROUP]


def build(ranks: int, steps: int = 3, layers: int = 2, seed: int = 0) -> Job:
    """Every rank's activities: per-rank random durations drawn as arrays over ranks, one draw per phase."""
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    rng = np.random.default_rng(seed)
    world = Group("0", "default_pg", tuple(range(ranks)))
    ep_groups = [
        Group(str(1 + g), f"ep_group_{g}", tuple(range(lo, min(lo + EP_GROUP, ranks))))
        for g, lo in enumerate(range(0, ranks, EP_GROUP))
    ]
    ep_of = np.arange(ranks) // EP_GROUP
    ep_starts = np.arange(0, ranks, EP_GROUP)
    slow = np.ones(ranks)
    slow[STRAGGLER] = STRAGGLER_FACTOR
    acts: list[list[Activity]] = [[] for _ in range(ranks)]
    windows: list[list[tuple[int, int]]] = [[] for _ in range(ranks)]
    seqs: dict[str, int] = {}

    def draw(lo: int, hi: int) -> np.ndarray:
        return rng.integers(lo, hi, size=ranks)

    def compute(name: str, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
        for r in range(ranks):
            acts[r].append(Activity("compute", name, int(start[r]), int(dur[r]), COMPUTE_STREAM))
        return start + dur

    def collective(kernel: str, coll: str, arrive: np.ndarray, transfer: int, ep: bool) -> np.ndarray:
        # every member ends when the group's last member has arrived, plus the transfer
        if ep:
            last = np.maximum.reduceat(arrive, ep_starts)[ep_of]
        else:
            last = np.full(ranks, arrive.max())
        end = last + transfer
        groups = ep_groups if ep else [world]
        for g in groups:
            seqs[g.name] = seqs.get(g.name, 0) + 1
        for r in range(ranks):
            group = ep_groups[ep_of[r]] if ep else world
            acts[r].append(
                Activity(
                    "comm", kernel, int(arrive[r]), int(end[r] - arrive[r]), COMM_STREAM, coll, group, seqs[group.name]
                )
            )
        return end

    t = 1_000_000 + draw(0, 2_000)
    for _ in range(steps):
        step_start = t.copy()
        copy = draw(2_000, 6_000)
        for r in range(ranks):
            acts[r].append(Activity("memcpy", "Memcpy HtoD (Pageable -> Device)", int(t[r]), int(copy[r]), COPY_STREAM))
        t = t + 1_000
        for _layer in range(layers):
            t = compute(ROUTER, t, (draw(3_000, 8_000) * slow).astype(np.int64)) + draw(100, 800)
            dispatch_end = collective(A2A_KERNEL, "all_to_all", t, int(rng.integers(6_000, 20_000)), ep=True)
            # the shared expert runs beside the dispatch and may or may not cover it
            shared_end = compute(SHARED_EXPERT, t, (draw(4_000, 24_000) * slow).astype(np.int64))
            t = np.maximum(dispatch_end, shared_end) + draw(100, 800)
            t = compute(GEMM, t, (draw(10_000, 30_000) * slow).astype(np.int64)) + draw(100, 800)
            t = collective(A2A_KERNEL, "all_to_all", t, int(rng.integers(6_000, 20_000)), ep=True) + draw(100, 800)
        t = collective(ALLREDUCE_KERNEL, "allreduce", t, int(rng.integers(20_000, 60_000)), ep=False)
        for r in range(ranks):
            windows[r].append((int(step_start[r]), int(t[r])))
        t = t + 50_000
    return Job(ranks, steps, layers, seed, acts, windows, world, ep_groups)


# ----------------------------------------------------------------------------- truth
def truth(job: Job) -> dict:
    """Per-rank sums of durations by bucket (spec §4: accumulated = Σ durations), from the event list."""
    per_rank = []
    for r, acts in enumerate(job.activities):
        sums = {b: sum(a.dur for a in acts if a.bucket == b) for b in ("compute", "comm", "memcpy")}
        per_rank.append(
            {
                "rank": r,
                "device": f"rank{r}/GPU:{r % GPUS_PER_NODE}",
                "accumulated_ns": sum(sums.values()),
                **{f"{b}_ns": v for b, v in sums.items()},
                "collectives": sum(1 for a in acts if a.bucket == "comm"),
                "kernels": sum(1 for a in acts if a.bucket != "memcpy"),
            }
        )
    keys = ("accumulated_ns", "compute_ns", "comm_ns", "memcpy_ns", "collectives", "kernels")
    return {
        "ranks": job.ranks,
        "steps": job.steps,
        "layers": job.layers,
        "seed": job.seed,
        "gpus_per_node": GPUS_PER_NODE,
        "ep_group_size": EP_GROUP,
        "straggler_rank": STRAGGLER,
        "total": {k: sum(p[k] for p in per_rank) for k in keys},
        "per_rank": per_rank,
    }


# ----------------------------------------------------------------------------- Kineto writer
def _ranks_text(ranks: tuple[int, ...]) -> str:
    if len(ranks) <= MAX_RANKS_LISTED:
        return "[" + ", ".join(map(str, ranks)) + "]"
    return "[" + ", ".join(map(str, ranks[:MAX_RANKS_LISTED])) + ", ...]"


def kineto_doc(job: Job, rank: int) -> dict:
    """The Kineto trace of one rank: kernels with their launches, collectives under record_param_comms."""
    device = rank % GPUS_PER_NODE
    ep = job.ep_group_of(rank)
    events: list[dict] = []
    for i, (s, e) in enumerate(job.step_windows[rank]):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 100,
                "tid": 1,
                "ts": (s - 30_000) / 1e3,
                "dur": (e - s + 30_000) / 1e3,
            }
        )
    for corr, act in enumerate(sorted(job.activities[rank], key=lambda a: a.start), 1):
        launch = act.start - 20_000
        args: dict = {"device": device, "stream": act.stream, "correlation": corr, "External id": corr}
        cat = "gpu_memcpy" if act.bucket == "memcpy" else "kernel"
        if act.bucket == "memcpy":
            args["bytes"] = 1 << 20
        if act.group is not None:
            g = act.group
            nelems = 1 << 18
            args["Seq"] = act.seq
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "record_param_comms",
                    "pid": 100,
                    "tid": 1,
                    "ts": (launch - 500) / 1e3,
                    "dur": 2.0,
                    "args": {
                        "External id": corr,
                        "Collective name": act.collective,
                        "Process Group Name": g.name,
                        "Process Group Description": g.desc,
                        "Process Group Ranks": _ranks_text(g.ranks),
                        "Group size": len(g.ranks),
                        "Global rank start": g.ranks[0],
                        "Global rank stride": 1,
                        "Rank": rank,
                        "Seq": act.seq,
                        "dtype": "BFloat16",
                        "In msg nelems": nelems,
                        "Out msg nelems": nelems,
                    },
                }
            )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync",
                "pid": 100,
                "tid": 1,
                "ts": launch / 1e3,
                "dur": 1.0,
                "args": {"correlation": corr, "External id": corr},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": act.name,
                "pid": device,
                "tid": act.stream,
                "ts": act.start / 1e3,
                "dur": act.dur / 1e3,
                "args": args,
            }
        )
    # the default group needs no list (it is every rank); the rank's EP group is listed
    ep_group = {"pg_name": ep.name, "pg_desc": ep.desc, "backend_config": "cuda:nccl", "pg_size": len(ep.ranks),
                "ranks": list(ep.ranks)}  # fmt: skip
    return rank_doc(rank, job.ranks, events, (ep_group,))


def rank_file_name(rank: int, ranks: int) -> str:
    return f"rank{rank:0{len(str(max(ranks - 1, 0)))}d}.pt.trace.json.gz"


def write_job(out: Path, ranks: int, steps: int = 3, layers: int = 2, seed: int = 0) -> list[Path]:
    """Write the rank files and ``fleet.truth.json`` into ``out``; the rank files, in rank order."""
    job = build(ranks, steps, layers, seed)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(ranks):
        path = out / rank_file_name(r, ranks)
        _write_gz_json(path, kineto_doc(job, r))
        paths.append(path)
    (out / TRUTH_NAME).write_text(json.dumps(truth(job), indent=1) + "\n")
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m synthetic.fleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=64, help="world size (1 to 1024)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 1 <= args.ranks <= 1024:
        parser.error("--ranks must be between 1 and 1024")
    paths = write_job(args.out, args.ranks, args.steps, args.layers, args.seed)
    size = sum(p.stat().st_size for p in paths)
    print(f"{len(paths)} rank files, {size / 1e6:.2f} MB, truth in {args.out / TRUTH_NAME}")


if __name__ == "__main__":
    main()
