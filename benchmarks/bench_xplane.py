"""Benchmark: ``moeprof analyze --json`` on a 1M-event XPlane against the floor of any Python reader.

The floor is ``jax.profiler.ProfileData.from_file`` plus touching every event's
name and duration: what any tool reading XPlane from Python must pay. Target:
moeprof within 1.5x of it in wall time and in peak RSS. Each side runs in its
own process; wall time and peak RSS come from ``os.wait4`` for that process.

    python benchmarks/bench_xplane.py [--events 1000000] [--repeat 3] [--keep out.xplane.pb]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

KERNELS = [
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_NTN", "gemm_fusion_dot.{i}", "Stream #13(Compute)"),
    ("loop_multiply_fusion_{i}", "loop_multiply_fusion.{i}", "Stream #13(Compute)"),
    ("input_reduce_fusion_{i}", "input_reduce_fusion.{i}", "Stream #13(Compute)"),
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "all-to-all.{i}", "Stream #21(Collective)"),
    (
        "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "all-gather-start.{i}",
        "Stream #21(Collective)",
    ),
    (
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "reduce-scatter.{i}",
        "Stream #22(Collective)",
    ),
    ("MemcpyD2H", "", "Stream #35(MemcpyD2H)"),
]

WEIGHTS = [0.30, 0.30, 0.22, 0.06, 0.05, 0.04, 0.03]  # ~15% collectives, ~3% copies


def build(path: Path, n_events: int, gpus: int = 8, seed: int = 0) -> None:
    """A realistic-shaped XPlane of ``n_events`` events in all, laid out as XLA GPU profiles are.

    Per kernel there are three events, as in real traces: the kernel on its
    stream line (with correlation_id, kernel_details and the XLA stats), its op
    on the derived ``XLA Ops`` line, and its launch on a host thread. So 1M
    events hold ~333k kernels over 8 GPUs.
    """
    from moeprof.readers.xspace_proto import messages
    from synthetic.gpu import _PlaneBuilder

    rng = np.random.default_rng(seed)
    space = messages()["XSpace"]()
    space.hostnames.append("bench0")
    per_gpu = n_events // (3 * gpus)
    host = _PlaneBuilder(space.planes.add(), "/host:CPU", 1)
    for d in range(gpus):
        plane = _PlaneBuilder(space.planes.add(), f"/device:GPU:{d}", 100 + d)
        # ~15% of kernels are collectives and ~3% copies, as in a MoE training step's timeline
        picks = rng.choice(len(KERNELS), per_gpu, p=WEIGHTS)
        layer = rng.integers(0, 61, per_gpu)  # 61 layers' worth of distinct op names
        durs = rng.integers(2_000, 40_000, per_gpu)
        gaps = rng.integers(100, 3_000, per_gpu)
        starts = np.cumsum(gaps + durs // 2)
        lines: dict[str, list] = {}
        ops, launches = [], []
        for j, (k, i, s, du) in enumerate(zip(picks.tolist(), layer.tolist(), starts.tolist(), durs.tolist())):
            name, op, stream = KERNELS[k]
            stats = {"correlation_id": j, "kernel_details": "regs:128 shm:0 grid:132,1,1 block:384,1,1"}
            if op:
                stats.update(hlo_op=op.format(i=i), hlo_module="jit_train_step", program_id=7)
            lines.setdefault(stream, []).append((name.format(i=i), s, du, stats))
            ops.append((op.format(i=i) or name, s, du, {}))
            launches.append(("cuLaunchKernel", max(0, s - 5_000), 3_000, {"correlation_id": j, "device_id": d}))
        for line_id, (stream, evs) in enumerate(sorted(lines.items()), 1):
            plane.add_line(line_id, stream, evs)
        plane.add_line(90, "XLA Ops", ops)
        host.add_line(1000 + d, f"Host Threads/{4000 + d}", launches)
    path.write_bytes(space.SerializeToString())


FLOOR = """
import sys
from jax.profiler import ProfileData
n = 0
total = 0.0
for plane in ProfileData.from_file(sys.argv[1]).planes:
    for line in plane.lines:
        for ev in line.events:
            ev.name
            total += ev.duration_ns
            n += 1
print(n, total)
"""


def measure(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="also keep the generated trace here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.keep or Path(tmp) / "bench.xplane.pb"
        t0 = time.perf_counter()
        build(trace, args.events)
        print(
            f"built {args.events:,} events, {trace.stat().st_size / 2**20:.1f} MiB in {time.perf_counter() - t0:.1f} s"
        )
        runs = {
            "floor (ProfileData + name/duration of every event)": [sys.executable, "-c", FLOOR, str(trace)],
            "moeprof analyze --json": [sys.executable, "-m", "moeprof", "analyze", str(trace), "--json"],
        }
        results = {}
        for label, cmd in runs.items():
            samples = [measure(cmd) for _ in range(args.repeat)]
            results[label] = (min(s[0] for s in samples), max(s[1] for s in samples))
        print(f"{'':56s} {'wall s (best)':>14s} {'peak RSS MiB':>14s}")
        for label, (wall, rss) in results.items():
            print(f"{label:56s} {wall:14.2f} {rss:14.0f}")
        (fw, fr), (mw, mr) = results.values()
        print(f"{'ratio moeprof / floor':56s} {mw / fw:14.2f} {mr / fr:14.2f}   (target <= 1.5)")


if __name__ == "__main__":
    main()
