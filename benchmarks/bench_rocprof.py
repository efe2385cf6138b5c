"""Benchmark: moeprof's rocprofv3 CSV reader against a parse floor measured in the same run.

The input is shaped like a real rocprofv3 kernel trace (the 22 columns of generateCSV.cpp, quoted strings,
``"Agent N"`` labels, rows not in start order): kernel names are drawn with the frequencies of the real
MI350X trace in ../shared/traces/rocprof (long PyTorch template names, ~660 bytes a row), or, where that
file is absent, from a fixed list of names of the same lengths. Its agent list sits beside it.

Each command runs in its own process, interleaved, best of ``--repeat``; wall time and peak RSS come from
``os.wait4``. The floor is pandas' ``read_csv`` of the whole file (the C parser, every column): what any
reader of this CSV into columns pays. Target (issue 27): ``read_file`` <= 1.5x the floor. Also printed:
``moeprof analyze --json``'s peak RSS over the file's size, the input guard's factor
(``readers/base.py`` MEMORY_FACTOR["rocprof-csv"]).

    python benchmarks/bench_rocprof.py [--rows 1000000] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces" / "rocprof"
sys.path.insert(0, str(ROOT))
from synthetic.rocprof import KERNEL_HEADER, write_csv_rows  # noqa: E402  (the generator's writer)


def name_weights() -> tuple[list[str], list[int], bytes | None]:
    """Kernel names and their counts in the real trace (and its agent list), else a stand-in of the same shape."""
    trace = REAL / "flydsl_moe_gemm_mi350x_kernel_trace.csv.gz"
    if trace.exists():
        with gzip.open(trace, "rt", newline="") as fh:
            counts = Counter(r["Kernel_Name"] for r in csv.DictReader(fh))
        agents = (REAL / "flydsl_moe_gemm_mi350x_agent_info.csv").read_bytes()
        return list(counts), list(counts.values()), agents
    names = [
        f"void at::native::elementwise_kernel_{i}<" + "at::native::Functor<float>, " * (i % 40) + ">" for i in range(37)
    ]
    return names, [25] * len(names), None


def kernel_rows(names: list[str], weights: list[int], rows: int, seed: int) -> Iterator[list[object]]:
    """The kernel trace's rows, in the order rocprofv3 writes them."""
    rng = random.Random(seed)
    ids = {n: i + 1 for i, n in enumerate(names)}
    picked = rng.choices(names, weights, k=rows)
    t = 2_365_495_439_975_118
    block: list[list[object]] = []
    for i, name in enumerate(picked):
        d = rng.randint(2_000, 80_000)
        block.append(["KERNEL_DISPATCH", "Agent 7", 1, 0, 1612342, i + 1, ids[name], name, i + 1, t, t + d,
                      0, 0, 32, 0, 48, 256, 1, 1, 65536, 1, 1])  # fmt: skip
        t += d + rng.randint(500, 20_000)
        if len(block) == 4096:
            # rocprofv3 flushes buffers: a block's rows come out of start order
            rng.shuffle(block)
            yield from block
            block = []
    yield from block


def write_trace(folder: Path, rows: int, seed: int = 1) -> Path:
    names, weights, agents = name_weights()
    path = folder / "1612342_kernel_trace.csv"
    with path.open("w", newline="") as fh:
        write_csv_rows(fh, KERNEL_HEADER, kernel_rows(names, weights, rows, seed))
    agent_text = agents or _agents()
    (folder / "1612342_agent_info.csv").write_bytes(agent_text)
    return path


def _agents() -> bytes:
    rows = ['"Node_Id","Logical_Node_Id","Agent_Type","Name","Product_Name"']
    rows += [f'{n},{n},"CPU","cpu","AMD EPYC"' for n in range(2)]
    rows += [f'{n},{n},"GPU","gfx950","AMD Instinct MI350X"' for n in range(2, 10)]
    return ("\n".join(rows) + "\n").encode()


def measure(code: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of ``python -c code`` in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOEPROF_IGNORE_MEMORY_CHECK": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"failed ({status}): {code}")
    return wall, usage.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write the trace here and keep it")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="moeprof-bench-rocprof-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        trace = write_trace(folder, args.rows)
        size = trace.stat().st_size
        print(f"{trace}: {args.rows:,} rows, {size / 1e6:.0f} MB, built in {time.perf_counter() - t0:.1f} s")
        commands = {
            "floor: pandas.read_csv, every column": f"import pandas as pd; pd.read_csv({str(trace)!r})",
            "(pyarrow.csv.read_csv, every column)": f"import pyarrow.csv as c; c.read_csv({str(trace)!r})",
            "moeprof read_file": f"from moeprof.readers import read_file; read_file({str(trace)!r})",
            "moeprof analyze --json": (
                f"import sys; sys.argv = ['moeprof', 'analyze', {str(trace)!r}, '--json'];"
                "from moeprof.cli import main; main()"
            ),
        }
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.repeat):
            for label, code in commands.items():
                wall, rss = measure(code)
                old = best.get(label)
                best[label] = (min(wall, old[0]) if old else wall, min(rss, old[1]) if old else rss)
        print(f"{'':40s} {'wall s':>8s} {'peak RSS MiB':>13s} {'RSS/file':>9s}")
        for label, (wall, rss) in best.items():
            print(f"{label:40s} {wall:8.2f} {rss:13.0f} {rss * 2**20 / size:9.2f}")
        ratio = best["moeprof read_file"][0] / best["floor: pandas.read_csv, every column"][0]
        factor = best["moeprof analyze --json"][1] * 2**20 / size
        print(f"\nread_file / floor: {ratio:.2f}x (target <= 1.5x: {'met' if ratio <= 1.5 else 'MISSED'})")
        print(f"analyze peak RSS / file size: {factor:.2f} (MEMORY_FACTOR['rocprof-csv'] must be at least this)")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
