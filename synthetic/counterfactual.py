"""A simulated multi-rank MoE job that can be run again with one change: the truth of spec §9's projection.

``python -m synthetic.counterfactual OUT [--ranks 8] [--steps 3] [--layers 4] [--seed 0] [--change NAME]
[--router-skew S [--ragged]]`` writes one Kineto trace per rank and ``counterfactual.truth.json``.

Each rank has a CPU thread that launches its kernels one after another (every
``cudaLaunchKernel`` takes a few µs; a kernel starts no earlier than its launch
returned plus the launch latency) and synchronizes with the device at the end of
every step (``cudaDeviceSynchronize``), then spends host time loading the next
batch. Per layer: a router GEMM, the dispatch all-to-all (comm stream, after the
router), a shared expert beside it, the expert GEMM (after both), the combine
all-to-all; each step ends with a gradient all-reduce and an optimizer kernel.
A collective ends on every member at the last member's arrival plus its
transfer. Rank ``SLOW_RANK`` runs its expert GEMMs ``SLOW_FACTOR`` times slower.

Every random draw is made up front, independent of the change, so the job can be
simulated again with exactly one change (:data:`CHANGES`): the slow rank fixed,
one collective kind's transfer halved, all compute halved. The truth is the
simulated step times: for each step, the latest end minus the earliest start of
its activities over the ranks.

A skewed router (``router_skew`` S > 0) gives rank ``r`` a share ``load_r`` of the routed
tokens (``exp(S * (1 - 2r / (R - 1)))``, normalized to a mean of 1: rank 0 the hottest), and
its expert GEMM takes ``load_r`` times its base time; with ``ragged`` the expert all-to-alls
move bytes with the tokens (XLA's ``RaggedAllToAll`` kernel name), so an instance's transfer is
its base times ``(1 + max load) / 2`` (a rank sends its own tokens, receives its load; the
busiest member sets the end). :data:`ROUTER_CHANGE` runs the job again with every load 1: the
router balanced, work conserved (what ``--what-if balance-router`` projects).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .gpu import _write_gz_json
from .kineto import GPUS_PER_NODE, rank_doc

SLOW_RANK = 3
SLOW_FACTOR = 1.5
COMPUTE_STREAM, COMM_STREAM = 7, 13
ROUTER = "triton_softmax_topk_router"
SHARED = "shared_expert_mlp_fusion"
EXPERT = "moe_grouped_gemm_expert_kernel"
OPTIMIZER = "multi_tensor_apply_kernel_adam"
A2A = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
A2A_RAGGED = "RaggedAllToAllKernelImpl"  # an exchange whose bytes follow the routing
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
LAUNCH_CALL_NS = 4_000  # one cudaLaunchKernel on the host
LAUNCH_LATENCY_NS = 2_000  # from the call's return to the kernel's earliest start
DEVICE_GAP_NS = 1_000  # between a kernel's dependencies ending and its start
SYNC_TAIL_NS = 3_000  # cudaDeviceSynchronize returns this long after the device went idle
HOST_STEP_NS = 150_000  # host time between steps (data loading)

# the changes the job can be simulated again with, and the --what-if terms that project them
CHANGES: dict[str, list[str]] = {
    "none": [],
    "fix-slow-rank": [f"scale(device=rank{SLOW_RANK}/GPU:{SLOW_RANK},name~{EXPERT})={1 / SLOW_FACTOR!r}"],
    "half-all-to-all": ["scale(kind=all-to-all)=0.5"],
    "half-compute": ["scale(bucket=compute)=0.5"],
}
ROUTER_CHANGE = "balance-router"  # the router balanced: every rank's load 1 (a job with router_skew > 0)


@dataclass
class Act:
    bucket: str
    name: str
    stream: int
    start: int
    end: int
    launch: tuple[int, int]  # the launching call (start, end) on the host thread
    kind: str = ""  # all_to_all / allreduce for comm
    seq: int = 0
    step: int = 0


@dataclass
class Rank:
    acts: list[Act] = field(default_factory=list)
    syncs: list[tuple[int, int]] = field(default_factory=list)
    steps: list[tuple[int, int]] = field(default_factory=list)  # the ProfilerStep range on the host


@dataclass
class Job:
    ranks: int
    steps: int
    layers: int
    seed: int
    change: str
    per_rank: list[Rank]

    def step_times(self) -> list[int]:
        out = []
        for k in range(self.steps):
            acts = [a for r in self.per_rank for a in r.acts if a.step == k]
            out.append(max(a.end for a in acts) - min(a.start for a in acts))
        return out


def router_loads(ranks: int, skew: float) -> np.ndarray:
    """Each rank's share of the routed tokens, mean 1 (all 1 without skew): rank 0 the hottest."""
    w = np.exp(skew * (1 - 2 * np.arange(ranks) / max(ranks - 1, 1)))
    return w / w.mean()


def simulate(
    ranks: int = 8,
    steps: int = 3,
    layers: int = 4,
    seed: int = 0,
    change: str = "none",
    router_skew: float = 0.0,
    ragged: bool = False,
    slow_factor: float = SLOW_FACTOR,
) -> Job:
    """Run the job (with one of :data:`CHANGES`, or :data:`ROUTER_CHANGE`); deterministic for a seed."""
    if change not in CHANGES and change != ROUTER_CHANGE:
        raise ValueError(f"unknown change {change!r}")
    rng = np.random.default_rng(seed)
    # every draw up front: base durations per (step, layer) shared by the ranks, a small per-rank jitter
    shape = (steps, layers)
    router = rng.integers(20_000, 40_000, shape)
    # the shared expert ends before the dispatch does, in every variant: the expert GEMM's wait for the
    # dispatch is then visible in the measured trace (a dependency that never binds cannot be seen)
    shared = rng.integers(10_000, 14_000, shape)
    expert = rng.integers(120_000, 200_000, shape)
    optimizer = rng.integers(60_000, 100_000, steps)
    jitter = rng.uniform(0.98, 1.02, (ranks, steps, layers, 3))
    a2a = rng.integers(40_000, 70_000, (steps, layers, 2))
    allreduce = rng.integers(150_000, 250_000, steps)
    host_jitter = rng.integers(0, 20_000, (ranks, steps))
    first = rng.integers(0, 10_000, ranks)

    compute_scale = 0.5 if change == "half-compute" else 1.0
    a2a_scale = 0.5 if change == "half-all-to-all" else 1.0
    slow = np.ones(ranks)
    if change != "fix-slow-rank" and SLOW_RANK < ranks:
        slow[SLOW_RANK] = slow_factor
    load = np.ones(ranks) if change == ROUTER_CHANGE else router_loads(ranks, router_skew)
    a2a_name = A2A_RAGGED if ragged else A2A
    a2a_bytes = (1 + load.max()) / 2 if ragged else 1.0  # the busiest member's bytes, over the balanced ones

    def dur(base: float, r: int, extra: float = 1.0) -> int:
        return int(round(base * extra * compute_scale))

    per_rank = [Rank() for _ in range(ranks)]
    host = first.astype(np.int64) + 1_000_000  # each rank's host thread time
    stream_free = np.zeros((ranks, 2), dtype=np.int64)  # compute, comm
    seq = 0

    def launch(r: int) -> tuple[int, int]:
        s = int(host[r])
        host[r] = s + LAUNCH_CALL_NS
        return s, s + LAUNCH_CALL_NS

    def kernel(r: int, k: int, name: str, length: int, after: int, stream: int = 0) -> Act:
        call = launch(r)
        start = max(int(stream_free[r, stream]) + DEVICE_GAP_NS, after + DEVICE_GAP_NS, call[1] + LAUNCH_LATENCY_NS)
        act = Act("compute", name, COMPUTE_STREAM if stream == 0 else COMM_STREAM, start, start + length, call, step=k)
        stream_free[r, stream] = act.end
        per_rank[r].acts.append(act)
        return act

    def collective(k: int, name: str, kind: str, transfer: int, after: np.ndarray) -> list[Act]:
        nonlocal seq
        seq += 1
        arrivals = []
        calls = []
        for r in range(ranks):
            call = launch(r)
            calls.append(call)
            arrivals.append(
                max(int(stream_free[r, 1]) + DEVICE_GAP_NS, int(after[r]) + DEVICE_GAP_NS, call[1] + LAUNCH_LATENCY_NS)
            )
        end = max(arrivals) + transfer
        acts = []
        for r in range(ranks):
            act = Act("comm", name, COMM_STREAM, arrivals[r], end, calls[r], kind, seq, k)
            stream_free[r, 1] = end
            per_rank[r].acts.append(act)
            acts.append(act)
        return acts

    for k in range(steps):
        step_begin = host.copy()
        prev_end = np.array([max(int(stream_free[r].max()), 0) for r in range(ranks)], dtype=np.int64)
        for layer in range(layers):
            routed = [
                kernel(r, k, ROUTER, dur(router[k, layer] * jitter[r, k, layer, 0], r), int(prev_end[r]))
                for r in range(ranks)
            ]
            dispatch = collective(
                k, a2a_name, "all_to_all", int(round(a2a[k, layer, 0] * a2a_scale * a2a_bytes)),
                np.array([a.end for a in routed]),
            )  # fmt: skip
            shared_acts = [
                kernel(r, k, SHARED, dur(shared[k, layer] * jitter[r, k, layer, 1], r), routed[r].end)
                for r in range(ranks)
            ]
            experts = [
                kernel(
                    r,
                    k,
                    EXPERT,
                    dur(expert[k, layer] * jitter[r, k, layer, 2], r, slow[r] * load[r]),
                    max(dispatch[r].end, shared_acts[r].end),
                )
                for r in range(ranks)
            ]
            combine = collective(
                k, a2a_name, "all_to_all", int(round(a2a[k, layer, 1] * a2a_scale * a2a_bytes)),
                np.array([a.end for a in experts]),
            )  # fmt: skip
            prev_end = np.array([a.end for a in combine], dtype=np.int64)
        reduced = collective(k, ALLREDUCE, "allreduce", int(allreduce[k]), prev_end)
        for r in range(ranks):
            opt = kernel(r, k, OPTIMIZER, dur(optimizer[k], r), reduced[r].end)
            # the host waits for the device, then loads the next batch
            sync_start = int(host[r])
            sync_end = max(sync_start, opt.end) + SYNC_TAIL_NS
            per_rank[r].syncs.append((sync_start, sync_end))
            per_rank[r].steps.append((int(step_begin[r]), sync_end))
            host[r] = sync_end + HOST_STEP_NS + int(host_jitter[r, k])
    return Job(ranks, steps, layers, seed, change, per_rank)


def kineto_doc(job: Job, rank: int) -> dict:
    """The Kineto trace of one rank: kernels with their cudaLaunchKernel, collectives under
    record_param_comms (process group 0, its sequence number), cudaDeviceSynchronize, ProfilerStep#."""
    device = rank % GPUS_PER_NODE
    r = job.per_rank[rank]
    events: list[dict] = []
    for i, (s, e) in enumerate(r.steps):
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 100, "tid": 1,
             "ts": s / 1e3, "dur": (e - s) / 1e3}
        )  # fmt: skip
    for s, e in r.syncs:
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 100, "tid": 1,
             "ts": s / 1e3, "dur": (e - s) / 1e3, "args": {"correlation": 0}}
        )  # fmt: skip
    for corr, act in enumerate(sorted(r.acts, key=lambda a: a.start), 1):
        args: dict = {"device": device, "stream": act.stream, "correlation": corr, "External id": corr}
        if act.bucket == "comm":
            args["Seq"] = act.seq
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100, "tid": 1,
                 "ts": (act.launch[0] - 500) / 1e3, "dur": (act.launch[1] - act.launch[0] + 1_000) / 1e3,
                 "args": {"External id": corr, "Collective name": act.kind, "Process Group Name": "0",
                          "Process Group Description": "default_pg",
                          "Process Group Ranks": "[" + ", ".join(map(str, range(job.ranks))) + "]",
                          "Group size": job.ranks, "Global rank start": 0, "Global rank stride": 1, "Rank": rank,
                          "Seq": act.seq, "dtype": "BFloat16", "In msg nelems": 1 << 20,
                          "Out msg nelems": 1 << 20}}
            )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 1,
             "ts": act.launch[0] / 1e3, "dur": (act.launch[1] - act.launch[0]) / 1e3,
             "args": {"correlation": corr, "External id": corr}}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "kernel", "name": act.name, "pid": device, "tid": act.stream,
             "ts": act.start / 1e3, "dur": (act.end - act.start) / 1e3, "args": args}
        )  # fmt: skip
    return rank_doc(rank, job.ranks, events)


TRUTH_NAME = "counterfactual.truth.json"


def write_job(
    out: Path,
    ranks: int = 8,
    steps: int = 3,
    layers: int = 4,
    seed: int = 0,
    change: str = "none",
    router_skew: float = 0.0,
    ragged: bool = False,
    slow_factor: float = SLOW_FACTOR,
) -> tuple[list[Path], Job]:
    """Write the rank files and the truth (step times) into ``out``."""
    job = simulate(ranks, steps, layers, seed, change, router_skew, ragged, slow_factor)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(ranks):
        path = out / f"rank{r}.pt.trace.json.gz"
        _write_gz_json(path, kineto_doc(job, r))
        paths.append(path)
    truth = {"ranks": ranks, "steps": steps, "layers": layers, "seed": seed, "change": change,
             "router_skew": router_skew, "ragged": ragged, "slow_factor": slow_factor,
             "what_if": CHANGES.get(change, [ROUTER_CHANGE]), "step_ns": job.step_times()}  # fmt: skip
    (out / TRUTH_NAME).write_text(json.dumps(truth, indent=1))
    return paths, job


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--change", choices=sorted([*CHANGES, ROUTER_CHANGE]), default="none")
    parser.add_argument("--router-skew", type=float, default=0.0)
    parser.add_argument("--ragged", action="store_true", help="expert all-to-alls move bytes with the tokens")
    parser.add_argument("--slow-factor", type=float, default=SLOW_FACTOR)
    args = parser.parse_args(argv)
    paths, job = write_job(
        args.out, args.ranks, args.steps, args.layers, args.seed, args.change, args.router_skew, args.ragged,
        args.slow_factor,
    )  # fmt: skip
    print(f"wrote {len(paths)} rank files to {args.out}; step times {job.step_times()}")


if __name__ == "__main__":
    main()
