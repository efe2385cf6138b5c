"""Benchmark: does the local process pool use the machine's cores on a multi-file job? (issue 14)

Writes ``--files`` XPlane host files shaped like XLA GPU captures (``bench_xplane.build``: 8 GPUs x
compute/collective/copy streams, ~28% collectives and copies with XLA's stats) into one folder, then
runs ``moeprof analyze FOLDER --json`` with ``--jobs 1`` and with ``--jobs N`` (N = cores), each in its
own process. The CPU of the whole process tree (the coordinator, the pool's forkserver and its
workers) is sampled with psutil every 50 ms: the pool's workers are not reaped by the coordinator, so
``RUSAGE_CHILDREN`` does not see them. Figures: wall, tree CPU seconds, CPU% (tree CPU over wall:
~100 x cores when every core is busy), the speed-up of N jobs over 1, and whether both give the
same JSON.

    python benchmarks/bench_parallel.py [--files 8] [--events 250000] [--jobs N]

Targets: CPU% of N jobs near 100 x N; speed-up near N on an idle machine (the coordinator's merge and
the process start-ups are serial).

Measured on this project's 2-core machine, otherwise idle (2026-12-01; same JSON in every run), with
the CLI starting the pool's fork server before it imports the pipeline (``moeprof.workers``):

    files x events       --jobs 1            --jobs 2                        speed-up
    2 x 1,000,000        2.12 s, CPU% 102    1.73 s, CPU% 160                1.22x
    8 x 250,000          3.15 s, CPU% 101    2.23 s, CPU% 168                1.42x
    24 x 250,000         7.99 s, CPU% 100    4.99 s, CPU% 173                1.60x

(Before that early start: 1.31x / 156% on 8 files, 1.54x / 169% on 24.) What stays serial is the
coordinator's imports, the workers' first fork, result pickling and the merge; the per-file work
runs on both cores, so the speed-up grows with the number of files.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_xplane import build


def tree_cpu(cmd: list[str], out: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds of the process tree of ``cmd`` (stdout to ``out``)."""
    seen: dict[int, float] = {}
    with out.open("wb") as sink:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                for p in [root, *root.children(recursive=True)]:
                    try:
                        t = p.cpu_times()
                        seen[p.pid] = max(seen.get(p.pid, 0.0), t.user + t.system)
                    except psutil.Error:
                        pass  # ended between listing and reading: its last sample stands
            except psutil.Error:
                pass
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err[-2000:]}")
    return wall, sum(seen.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--events", type=int, default=250_000, help="events per file")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "job")
        folder.mkdir()
        for i in range(args.files):
            build(folder / f"host{i}.xplane.pb", args.events, seed=i)
        size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
        print(f"{args.files} XPlane files, {args.events:,} events each ({size:.0f} MiB), {os.cpu_count()} cores")
        runs = {}
        for jobs in (1, args.jobs):
            out = Path(tmp, f"jobs{jobs}.json")
            cmd = [sys.executable, "-m", "moeprof", "analyze", str(folder), "--json", "--jobs", str(jobs)]
            wall, cpu = tree_cpu(cmd, out)
            runs[jobs] = (wall, cpu, out.read_bytes())
            print(f"--jobs {jobs}: wall {wall:6.2f} s, tree CPU {cpu:6.2f} s, CPU% {100 * cpu / wall:4.0f}")
        (w1, _, j1), (wn, cn, jn) = runs[1], runs[args.jobs]
        print(
            f"speed-up of --jobs {args.jobs} over --jobs 1: {w1 / wn:.2f}x (ideal {args.jobs}x); "
            f"CPU% {100 * cn / wn:.0f} (target ~{100 * args.jobs}); same JSON: {j1 == jn}"
        )


if __name__ == "__main__":
    main()
