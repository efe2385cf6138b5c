"""Benchmark: moeprof's rocpd reader against a parse floor measured in the same run, and the input guard's factor.

The input is one process's database of the synthetic MI300X job (sample_traces/synthetic_rocpd_mi300x) with
its kernel dispatch rows doubled, times shifted, until ``--dispatches``: the densest rocpd shape (dispatch rows
and nothing else per dispatch), so the memory factor measured is an upper bound for rocprofv3's own files,
which also hold an event row and HIP regions per dispatch.

Each command runs in its own process, best of ``--repeat``; wall time and peak RSS from ``os.wait4``. The
floor is sqlite3 fetching the dispatch columns the reader needs (what any reader of this table into columns
pays). Target (issue 27): ``read_file`` <= 1.5x the floor. Also printed: ``moeprof analyze --json``'s peak RSS
over the file's size (``readers/base.py`` MEMORY_FACTOR["rocpd"]).

    python benchmarks/bench_rocpd.py [--dispatches 1000000] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "synthetic_rocpd_mi300x" / "mi300x-node0" / "41200_results.db"

# each times its own work, after its imports (moeprof's and pandas' imports are no part of a parse)
FLOOR = """
import sqlite3, sys, time
import numpy, pandas
t = time.perf_counter()
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro&immutable=1", uri=True)
rows = c.execute('SELECT agent_id, start, "end", stream_id, kernel_id, event_id FROM rocpd_kernel_dispatch').fetchall()
print(time.perf_counter() - t)
"""
READ = """
import sys, time
from pathlib import Path
from moeprof.readers import read_file
import moeprof.readers.rocpd
t = time.perf_counter()
read_file(Path(sys.argv[1]))
print(time.perf_counter() - t)
"""


def build(path: Path, dispatches: int) -> int:
    shutil.copyfile(SAMPLE, path)
    conn = sqlite3.connect(path)
    (table,) = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rocpd\\_kernel\\_dispatch\\_%' ESCAPE '\\'"
    ).fetchone()
    cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[1] != "id"]
    names = ", ".join(f'"{c}"' for c in cols)
    shift = 10_000_000
    while conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] < dispatches:
        picked = ", ".join(f'"{c}" + {shift}' if c in ("start", "end") else f'"{c}"' for c in cols)
        conn.execute(f'INSERT INTO "{table}" ({names}) SELECT {picked} FROM "{table}"')
        shift *= 2
    conn.commit()
    conn.execute("VACUUM")
    n = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    conn.close()
    return int(n)


def run(args: list[str]) -> tuple[float, int]:
    """The seconds the command printed (its own work; else its wall time) and its peak RSS (bytes)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOEPROF_IGNORE_MEMORY_CHECK": "1"}
    t = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        raise SystemExit(f"{args[:4]} failed: {proc.stderr.read().decode()[-500:] if proc.stderr else ''}")
    try:
        wall = float(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    return wall, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dispatches", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path)
    a = ap.parse_args()
    folder = a.keep or Path(tempfile.mkdtemp(prefix="moeprof-bench-rocpd-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "41200_results.db"
    n = build(db, a.dispatches)
    size = db.stat().st_size
    floor = min(run([sys.executable, "-c", FLOOR, str(db)])[0] for _ in range(a.repeat))
    read = min(run([sys.executable, "-c", READ, str(db)])[0] for _ in range(a.repeat))
    _, rss = run([sys.executable, "-m", "moeprof", "analyze", str(db), "--json"])
    print(f"database: {n:,} dispatches, {size / 2**20:.0f} MiB")
    print(f"floor (sqlite3 fetch of the dispatch columns): {floor:.2f} s")
    verdict = "met" if read <= 1.5 * floor else "NOT met"
    print(f"read_file: {read:.2f} s = {read / floor:.2f}x the floor (target <= 1.5x: {verdict})")
    print(f"analyze peak RSS: {rss / 2**20:.0f} MiB = {rss / size:.2f}x the file (MEMORY_FACTOR['rocpd'])")
    if a.keep is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
