"""Benchmark: the per-file map of an N-rank job through each executor (issue 14).

Generates 64/256/1,024-rank jobs with ``synthetic.fleet`` and runs the map step
of ``analyze_paths`` (``moeprof.pipeline._map_one`` per rank file) through
``map_files`` on each executor: in-process, the local pool (2 workers), and a
Dask cluster (``--scheduler ADDRESS``, else a 2-worker ``LocalCluster`` that
this script starts). Each (job, executor) runs in a fresh coordinator process
so its peak RSS (``ru_maxrss``, no psutil) is its own. The coordinator keeps
what the current pipeline keeps (every per-file ``HostAnalysis``) and merges at
the end; ``--stream`` keeps nothing instead (what a compact, incrementally
merged result would cost).

Figures: wall of the map, files/s, merge wall, coordinator peak RSS, and per
worker process the CPU time its tasks used over the map's wall (each task
reports ``time.process_time`` of its own work: the pool's workers are not the
coordinator's children, so ``RUSAGE_CHILDREN`` cannot see them). Ratios: RSS
and wall at the largest job over the smallest.

    python benchmarks/bench_fleet.py [--ranks 64 256 1024] [--executors inline pool dask] [--scheduler ADDR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_map_one(task: tuple) -> tuple[object, float, int, float]:
    """``_map_one`` plus the CPU seconds it took, the process that ran it, and that process's CPU so far."""
    from moeprof.pipeline import _map_one

    cpu = time.process_time()
    part = _map_one(task)
    done = time.process_time()
    return part, done - cpu, os.getpid(), done


def one(folder: Path, executor: str, scheduler: str | None, stream: bool) -> dict:
    """``moeprof.analyze_paths`` of one job, as ``moeprof analyze`` runs it, in this process (the coordinator).

    Each file's result is merged as it arrives (pipeline.merge.JobResults) and dropped: the coordinator's
    peak RSS is what it keeps of the job. ``stream`` is accepted for compatibility (the merge always streams).
    """
    from moeprof.options import ExecOptions
    from moeprof.pipeline import analyze_paths

    execution = {
        "inline": ExecOptions(jobs=1),
        "pool": ExecOptions(jobs=2),
        "dask": ExecOptions(scheduler=scheduler),
    }[executor]
    files = sorted(folder.glob("*.pt.trace.json.gz"))
    before = os.times()
    start = time.perf_counter()
    result = analyze_paths([folder], execution=execution)
    wall = time.perf_counter() - start
    after = os.times()
    assert len(result.devices) == len(files)
    own = (after.user - before.user) + (after.system - before.system)
    children = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {
        "files": len(files),
        "executor": executor,
        "wall_s": wall,
        "files_per_s": len(files) / wall,
        "merge_s": 0.0,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
        "workers": 2 if executor != "inline" else 1,
        # CPU of this process and of the pool's workers (reaped children) over wall: ~200% = both cores busy
        "worker_busy": [(own + children) / wall],
        "task_cpu_ms_per_file": 1e3 * (own + children) / len(files),
        "overhead_ms_per_file": 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--executors", nargs="+", default=["inline", "pool", "dask"])
    parser.add_argument("--scheduler", help="a running Dask scheduler (default: start a 2-worker LocalCluster)")
    parser.add_argument("--stream", action="store_true", help="keep no per-file result in the coordinator")
    parser.add_argument("--out", type=Path, help="where the jobs go (default: a temporary folder)")
    parser.add_argument("--one", nargs=2, metavar=("FOLDER", "EXECUTOR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.one[0]), args.one[1], args.scheduler, args.stream)))
        return

    sys.path.insert(0, str(ROOT))
    from synthetic.fleet import write_job

    base = args.out or Path(tempfile.mkdtemp(prefix="moeprof-fleet-"))
    cluster = None
    scheduler = args.scheduler
    if "dask" in args.executors and not scheduler:
        from distributed import LocalCluster

        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        scheduler = cluster.scheduler_address
    rows = []
    try:
        for n in args.ranks:
            folder = base / f"job{n}"
            if not folder.is_dir():
                write_job(folder, n)
            size = sum(p.stat().st_size for p in folder.glob("*.pt.trace.json.gz"))
            for executor in args.executors:
                cmd = [sys.executable, __file__, "--one", str(folder), executor]
                cmd += (["--scheduler", scheduler] if executor == "dask" else []) + (
                    ["--stream"] if args.stream else []
                )
                env = {
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                }
                row = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
                row["ranks"], row["job_mb"] = n, size / 1e6
                rows.append(row)
                busy = " ".join(f"{b:.0%}" for b in row["worker_busy"]) + (
                    " (Dask workers' CPU is not seen here)" if executor == "dask" else ""
                )
                print(
                    f"{n:5d} ranks ({row['job_mb']:.1f} MB)  {executor:6s}  map {row['wall_s']:6.2f} s"
                    f"  {row['files_per_s']:6.1f} files/s  merge {row['merge_s']:5.2f} s"
                    f"  coordinator RSS {row['rss_mb']:6.0f} MB  task CPU {row['task_cpu_ms_per_file']:4.0f} ms/file"
                    f" (+{row['overhead_ms_per_file']:.0f} ms outside tasks)"
                    f"  CPU/wall (coordinator + pool): {busy}",
                    flush=True,
                )
    finally:
        if cluster is not None:
            cluster.close()
    lo, hi = min(args.ranks), max(args.ranks)
    if lo != hi:
        for executor in args.executors:
            a = next(r for r in rows if r["ranks"] == lo and r["executor"] == executor)
            b = next(r for r in rows if r["ranks"] == hi and r["executor"] == executor)
            print(
                f"{executor:6s}  {hi} vs {lo} ranks: files x{hi / lo:.0f}, map wall x{b['wall_s'] / a['wall_s']:.1f},"
                f" coordinator RSS x{b['rss_mb'] / a['rss_mb']:.2f} (+{b['rss_mb'] - a['rss_mb']:.0f} MB)"
            )


if __name__ == "__main__":
    main()
