"""Benchmark: moeprof's rocprofv3 JSON reader against a parse floor measured in the same run.

The input is one process's ``<pid>_results.json`` as :mod:`synthetic.rocprof` writes it (generateJSON.cpp's
layout, save.hpp's fields: agents, kernel symbols, string tables, ``buffer_records`` with kernel
dispatches, memory copies, HIP and RCCL API calls and ROCTx ranges), its records repeated ``--copies``
times, each copy shifted past the previous one in time with fresh correlation ids: the mix of a real
training capture (per kernel a dispatch and its launching HIP call; RCCL calls for the collectives),
grown to a size where parsing dominates.

Each command runs in its own process, interleaved, best of ``--repeat``; wall time and peak RSS come
from ``os.wait4``. The floor is ``orjson.loads`` of the file plus, for every kernel dispatch, memory
copy and API record, its start and end, its correlation id and its kernel id or operation: what any
reader of this JSON into columns pays (orjson is the fastest JSON parser for Python on this file).
Target (issue 27): ``read_file`` <= 1.5x the floor. Also printed: ``moeprof analyze --json``'s peak RSS
over the file, against the input guard's factor (``readers/base.py`` MEMORY_FACTOR["rocprof-json"]).

    python benchmarks/bench_rocprof_json.py [--copies 4000] [--repeat 3] [--keep FILE]

Measured (2026-12-03, 2 shared cores, one round while CI installed beside it): 4,000 copies, 115 MiB
(168k dispatches, 36k copies, 156k HIP, 84k RCCL, 24k ROCTx records): floor 2.99 s, 986 MiB; read_file
3.15 s (1.05x: met), 1,075 MiB; analyze 3.60 s, peak 9.5x the file (the guard's factor was 8, now 10).
At 100 copies (3 MiB) the interpreter's imports dominate (6x): compare at a size where parsing does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from synthetic.rocprof import build, json_doc  # noqa: E402  (the generator's writer)

RECORDS = ("kernel_dispatch", "memory_copy", "hip_api", "rccl_api", "marker_api")


def write_input(path: Path, copies: int) -> dict[str, int]:
    """One process's document with its records repeated ``copies`` times; the record counts."""
    doc = json_doc(build(), 0)
    tool = doc["rocprofiler-sdk-tool"][0]
    records = tool["buffer_records"]
    times = [r[k] for key in RECORDS for r in records[key] for k in ("start_timestamp", "end_timestamp")]
    period = max(times) - min(times) + 1_000_000
    ids = [r["correlation_id"]["internal"] for key in RECORDS for r in records[key]]
    id_step = max(ids) + 1
    grown: dict[str, list] = {key: [] for key in RECORDS}
    for c in range(copies):
        for key in RECORDS:
            for r in records[key]:
                r2 = dict(r)
                r2["start_timestamp"] = r["start_timestamp"] + c * period
                r2["end_timestamp"] = r["end_timestamp"] + c * period
                corr = dict(r["correlation_id"])
                corr["internal"] += c * id_step
                if corr.get("ancestor"):
                    corr["ancestor"] += c * id_step
                r2["correlation_id"] = corr
                grown[key].append(r2)
    tool["buffer_records"] = grown
    markers = tool["strings"]["marker_api"]
    tool["strings"]["marker_api"] = [
        {"key": m["key"] + c * id_step, "value": m["value"]} for c in range(copies) for m in markers
    ]
    path.write_bytes(orjson.dumps(doc) + b"\n")
    return {key: len(v) for key, v in grown.items()}


FLOOR = """
import sys, time, orjson
t = time.process_time()
doc = orjson.loads(open(sys.argv[1], "rb").read())
n = 0
for tool in doc["rocprofiler-sdk-tool"]:
    for key, records in tool["buffer_records"].items():
        for r in records:
            n += r["end_timestamp"] - r["start_timestamp"] + r["correlation_id"]["internal"]
            info = r.get("dispatch_info")
            n += info["kernel_id"] if info is not None else r["operation"]
print(time.process_time() - t, file=sys.stderr)
"""

READ = """
import sys, time
t = time.process_time()
from moeprof.readers.registry import read_file
trace = read_file(sys.argv[1])
assert len(trace.events), "no events"
print(time.process_time() - t, file=sys.stderr)
"""


def run(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"{' '.join(cmd[:4])} failed: {err.strip()[-500:]}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=4000, help="copies of the generator's records")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="write the input here (and keep it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "12345_results.json"
        counts = write_input(path, args.copies)
        size = path.stat().st_size
        print(f"input: {size / 2**20:.0f} MiB, " + ", ".join(f"{v:,} {k}" for k, v in counts.items()))
        commands = {
            "floor (orjson.loads + every record's fields)": [sys.executable, "-c", FLOOR, str(path)],
            "moeprof read_file": [sys.executable, "-c", READ, str(path)],
            "moeprof analyze --json": [sys.executable, "-m", "moeprof", "analyze", str(path), "--json"],
        }
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.repeat):  # interleaved: a slow spell of the machine hits every command
            for label, cmd in commands.items():
                wall, rss = run(cmd)
                old = best.get(label)
                best[label] = (min(wall, old[0]) if old else wall, max(rss, old[1]) if old else rss)
    for label, (wall, rss) in best.items():
        print(f"{label:48s} {wall:7.2f} s  {rss:7.0f} MiB")
    from moeprof.readers.base import MEMORY_FACTOR

    floor = best["floor (orjson.loads + every record's fields)"][0]
    ratio = best["moeprof read_file"][0] / floor
    factor = best["moeprof analyze --json"][1] * 2**20 / size
    print(f"read_file / floor, wall: {ratio:.2f}x (target <= 1.5: {'met' if ratio <= 1.5 else 'NOT MET'})")
    print(
        f"analyze peak RSS / file: {factor:.1f}x (the input guard's factor: {MEMORY_FACTOR['rocprof-json']};"
        f" {'holds' if factor <= MEMORY_FACTOR['rocprof-json'] else 'TOO LOW'})"
    )


if __name__ == "__main__":
    main()
