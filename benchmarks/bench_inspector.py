"""Benchmark: reading NCCL Inspector logs against a parse floor measured in the same run.

The input is a job folder as the plugin writes it (``<host>-pid<pid>.log`` per process, one compact JSON
object per line, v4.0 ``header`` / ``metadata`` / ``coll_perf`` with the writer's key order and an integer
``coll_exec_time_us``: see synthetic/nccl_inspector.py), ``--lines`` lines over ``--ranks`` files.

Measured, best of ``--repeat``, each in this process on one file after another:

- floor A: ``pyarrow.json.read_json`` of each file (the JSON parse into columns, nothing else);
- floor B: ``orjson.loads`` of each line (what any reader into Python objects pays at least);
- moeprof: ``read_inspector`` of each file (Arrow's parse + the operation rows) and ``measure`` of them all.

Target (issue 27): moeprof's read <= 1.5x the pyarrow floor (the parse it is built on: on many cores
Arrow's multi-threaded parse is the faster one; on a loaded 2-core machine orjson per line is, and the
ratio to it is printed too). Then the peak RSS of reading the largest
file, in a fresh process, over its size: the input guard's factor (readers/base.py ``MEMORY_FACTOR``).

    python benchmarks/bench_inspector.py [--lines 1000000] [--ranks 8] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
COLLS = (("AllReduce", 64 << 20, 2.0), ("AllGather", 8 << 20, 1.0), ("ReduceScatter", 8 << 20, 1.0),
         ("AllReduce", 256 << 10, 2.0), ("AlltoAll", 16 << 20, 0.0))  # fmt: skip


def write_job(folder: Path, lines: int, ranks: int, seed: int = 1) -> int:
    """``lines`` records over ``ranks`` files; returns the bytes written."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    per_rank = lines // ranks
    total = 0
    for rank in range(ranks):
        host, pid = f"node{rank // 8}", 40000 + 17 * rank
        times = rng.integers(200, 5000, per_rank)
        out = []
        ts = 1_796_000_000_000_000 + rank
        for i in range(per_rank):
            coll, size, factor = COLLS[i % len(COLLS)]
            t = int(times[i])
            algbw = (size / 1e9) / (t / 1e6) if factor else 0.0
            if i % 1000 == 0:
                ts += 1_000_000
            out.append(
                f'{{"header":{{"id":"0x5eed0000a11c0de5","comm_name":"world","rank":{rank},"n_ranks":{ranks},'
                f'"nnodes":{max(1, ranks // 8)}}},"metadata":{{"inspector_output_format_version":"v4.0",'
                f'"git_rev":"5067397c2","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":{ts},'
                f'"hostname":"{host}","pid":{pid}}},"coll_perf":{{"coll":"{coll}","coll_sn":{i + 1},'
                f'"coll_msg_size_bytes":{size},"coll_exec_time_us":{t},"coll_timing_source":"kernel_gpu",'
                f'"coll_algobw_gbs":{algbw:.6f},"coll_busbw_gbs":{algbw * factor * (ranks - 1) / ranks:.6f}}}}}\n'
            )
        data = "".join(out).encode()
        (folder / f"{host}-pid{pid}.log").write_bytes(data)
        total += len(data)
    return total


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


RSS_SNIPPET = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
import pandas, pyarrow.json
from moeprof.readers.registry import read_inspector
rows = len(read_inspector(Path({path!r})).rows) if {path!r} else 0
# VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(hwm * 1024, rows)
"""


def peak_rss(path: str) -> tuple[int, int]:
    """Peak RSS (bytes) of a fresh process that imports the reader and reads ``path`` ("" : imports only)."""
    env = {**os.environ, "MOEPROF_IGNORE_MEMORY_CHECK": "1"}
    snippet = RSS_SNIPPET.format(root=str(ROOT), path=path)
    out = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, env=env, check=True)
    rss, rows = out.stdout.split()
    return int(rss), int(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import orjson
    import pyarrow as pa
    import pyarrow.json as pj

    from moeprof.core.inspector import measure
    from moeprof.readers.registry import read_inspector

    tmp = Path(tempfile.mkdtemp(prefix="bench-inspector-"))
    folder = args.keep or tmp / "nccl-inspector-1"
    size = write_job(folder, args.lines, args.ranks)
    files = sorted(folder.iterdir())
    print(f"{args.lines:,} lines in {len(files)} files, {size / 1e6:.1f} MB")

    def arrow_floor() -> None:
        for f in files:
            pj.read_json(pa.input_stream(str(f)), read_options=pj.ReadOptions(block_size=1 << 24))

    def orjson_floor() -> None:
        for f in files:
            with f.open("rb") as fh:
                for line in fh:
                    orjson.loads(line)

    rows: list = []

    def moeprof_read() -> None:
        rows[:] = [read_inspector(f).rows for f in files]

    t_arrow = best(arrow_floor, args.repeat)
    t_orjson = best(orjson_floor, args.repeat)
    t_read = best(moeprof_read, args.repeat)
    import pandas as pd

    all_rows = pd.concat(rows, ignore_index=True)
    t_measure = best(lambda: measure(all_rows, {"nvlink": 450.0, "ib": 50.0}), args.repeat)
    floor = min(t_arrow, t_orjson)
    print(f"floor pyarrow.json.read_json: {t_arrow:.3f} s")
    print(f"floor orjson.loads per line:  {t_orjson:.3f} s")
    print(f"moeprof read (rows):          {t_read:.3f} s  = {t_read / floor:.2f}x the faster floor")
    print(f"moeprof measure (all rows):   {t_measure:.3f} s")
    ratio_arrow, ratio_orjson = t_read / t_arrow, t_read / t_orjson
    met = "met" if ratio_arrow <= 1.5 else "MISSED"
    print(f"moeprof read / pyarrow floor: {ratio_arrow:.2f}x (target <= 1.5x: {met})")
    print(f"moeprof read / orjson floor:  {ratio_orjson:.2f}x")
    largest = max(files, key=lambda f: f.stat().st_size)
    base, _ = peak_rss("")
    peak, n = peak_rss(str(largest))
    file_size = largest.stat().st_size
    print(
        f"peak RSS reading {largest.name} ({file_size / 1e6:.1f} MB, {n:,} rows): +{(peak - base) / 1e6:.0f} MB "
        f"over the imports alone ({base / 1e6:.0f} MB) = {(peak - base) / file_size:.2f}x its size"
        " (the guard's MEMORY_FACTOR)"
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
