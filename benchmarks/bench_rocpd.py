"""Benchmark: moeprof's rocpd reader against a parse floor measured in the same run, and the input guard's factor.

The input is one process's database of the synthetic MI300X job (sample_traces/synthetic_rocpd_mi300x) with
its activity doubled, times shifted, until ``--dispatches``: by default as rocprofv3 writes it, every dispatch
and copy with its host API rows (the launching HIP call's event and region, the RCCL calls and ROCTx ranges,
the calls' arguments; ids and stack ids renumbered so each copy links as the original); with
``--dispatches-only`` the dispatch rows alone, the densest shape, whose memory factor bounds rocprofv3's own
files from above.

Each command runs in its own process, in the checkout, alternated, best of ``--repeat``; wall and CPU seconds of
its own work (on a loaded machine the CPU ratio is the steadier one) and peak RSS from ``os.wait4``. The floor
is sqlite3 fetching the rows the reader reads: the dispatch columns and, on the default input, the host API rows
as the reader selects them. Target (issue 27): ``read_file`` <= 1.5x the floor. ``--compare DIR`` also times
another checkout's reader (before/after in one run). Also printed: ``moeprof analyze --json``'s peak RSS over
the file's size (``readers/base.py`` MEMORY_FACTOR["rocpd"]).

Figures (2 cores shared with other jobs, best of 3, before = 950298f, each pair from one run):

- ``--dispatches-only``, 1.38M dispatches (151 MiB): floor 2.17 s; read_file 7.03 s before (3.23x), 2.18 s
  after (1.00x: met; 0.90-1.37x over four runs). The reader's own route to the columns, bare, takes 1.09 s:
  against that stricter floor read_file is 2.0x (names, streams and agents mapped, the table built).
- default, 172k dispatches with their API rows (204 MiB; the sample's shape, 54 RCCL and 51 HIP calls per 42
  dispatches): floor 1.53-1.59 s; read_file 1.91-2.40x before, 1.44x, 1.45x and 1.86x after in three runs (met
  in two, not in the third: at the target, not under it with a margin): beyond the floor, the RCCL calls'
  grouping (nsys.py's ``_nccl_launch_info``), the kernels' stack ids, and the API rows' conversion.

    python benchmarks/bench_rocpd.py [--dispatches N] [--dispatches-only] [--repeat 3] [--keep DIR]
                                     [--compare DIR]
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
t, u = time.perf_counter(), time.process_time()
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro&immutable=1", uri=True)
rows = c.execute('SELECT agent_id, start, "end", stream_id, kernel_id, event_id FROM rocpd_kernel_dispatch').fetchall()
if sys.argv[2] == "api":
    api = [c.execute(q).fetchall() for q in sys.argv[3:]]
print(time.perf_counter() - t, time.process_time() - u)
"""
# the reader's own way to the dispatch columns, bare (no check of the cells): SQLite joins each column into one
# text, numpy parses it. A second, stricter floor for the dispatch part, printed beside the target's
TEXT_FLOOR = """
import sqlite3, sys, time
import numpy, pandas
t, u = time.perf_counter(), time.process_time()
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro&immutable=1", uri=True)
cells = ("agent_id", "start", '"end"', "stream_id", "kernel_id", "COALESCE(event_id, -1)")
sql = "SELECT " + ", ".join(f"group_concat({x}, ',')" for x in cells) + " FROM rocpd_kernel_dispatch"
texts = c.execute(sql).fetchone()
columns = [numpy.fromstring(x, dtype=numpy.int64, sep=",") for x in texts]
print(time.perf_counter() - t, time.process_time() - u)
"""
# the host API rows the reader reads beside the dispatches, as it selects them (readers/rocpd.py): its memory
# copies, RCCL calls and ROCTx ranges, HIP launches made inside another call, and the calls' peer arguments
API_ROWS = (
    'SELECT M.start, M."end", S.string, M.src_agent_id, M.dst_agent_id, M.size, M.stream_id, ST.name '
    "FROM rocpd_memory_copy M LEFT JOIN rocpd_string S ON S.id = M.name_id AND S.guid = M.guid "
    "LEFT JOIN rocpd_info_stream ST ON ST.id = M.stream_id AND ST.guid = M.guid",
    'SELECT R.tid, R.start, R."end", N.string, C.string, E.id, E.stack_id, E.extdata '
    "FROM rocpd_region R JOIN rocpd_event E ON E.id = R.event_id AND E.guid = R.guid "
    "LEFT JOIN rocpd_string N ON N.id = R.name_id AND N.guid = R.guid "
    "LEFT JOIN rocpd_string C ON C.id = E.category_id AND C.guid = E.guid "
    "WHERE C.string = 'RCCL_API' OR C.string LIKE 'MARKER%'",
    "SELECT E.stack_id, E.parent_stack_id FROM rocpd_event E "
    "JOIN rocpd_string C ON C.id = E.category_id AND C.guid = E.guid "
    "WHERE C.string LIKE 'HIP%' AND E.parent_stack_id <> 0 AND E.parent_stack_id <> E.stack_id",
    "SELECT event_id, value FROM rocpd_arg WHERE name = 'peer'",
)
READ = """
import sys, time
from pathlib import Path
from moeprof.readers import read_file
import moeprof.readers.rocpd
t, u = time.perf_counter(), time.process_time()
read_file(Path(sys.argv[1]))
print(time.perf_counter() - t, time.process_time() - u)
"""


def _table(conn: sqlite3.Connection, view: str) -> str:
    """The uuid-suffixed table under one of rocpd's views."""
    (name,) = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ? ESCAPE '\\'",
        (view.replace("_", "\\_") + "\\_%",),
    ).fetchone()
    return str(name)


def build(path: Path, dispatches: int, api: bool = True) -> int:
    """The sample database with its activity doubled until ``dispatches``: every dispatch and memory copy
    with, where ``api``, the host API rows rocprofv3 writes beside them (the launching HIP call's event and
    region, the RCCL calls and ROCTx ranges, the calls' arguments), ids and stack ids renumbered so that
    each copy links as the original does, times shifted past the previous copies."""
    shutil.copyfile(SAMPLE, path)
    conn = sqlite3.connect(path)
    tables = {v: _table(conn, v) for v in ("rocpd_kernel_dispatch", "rocpd_memory_copy", "rocpd_event",
                                           "rocpd_region", "rocpd_arg")}  # fmt: skip
    columns = {v: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for v, t in tables.items()}
    shift = 10_000_000
    dispatch = tables["rocpd_kernel_dispatch"]
    while conn.execute(f'SELECT count(*) FROM "{dispatch}"').fetchone()[0] < dispatches:
        (events,) = conn.execute(f'SELECT max(id) FROM "{tables["rocpd_event"]}"').fetchone()
        (stacks,) = conn.execute(f'SELECT max(stack_id) FROM "{tables["rocpd_event"]}"').fetchone()
        moved = {
            "start": f'"start" + {shift}',
            "end": f'"end" + {shift}',
            "event_id": f'"event_id" + {events}',
            "stack_id": f'"stack_id" + {stacks}',
            "parent_stack_id": f'CASE "parent_stack_id" WHEN 0 THEN 0 ELSE "parent_stack_id" + {stacks} END',
        }
        for view, table in tables.items():
            if not api and view not in ("rocpd_kernel_dispatch", "rocpd_memory_copy"):
                continue
            cols = [c for c in columns[view] if c != "id" or view == "rocpd_event"]
            if view == "rocpd_event":
                moved_here = {**moved, "id": f'"id" + {events}'}
            else:
                moved_here = moved if api else {k: v for k, v in moved.items() if k in ("start", "end")}
            picked = ", ".join(moved_here.get(c, f'"{c}"') for c in cols)
            names = ", ".join(f'"{c}"' for c in cols)
            conn.execute(f'INSERT INTO "{table}" ({names}) SELECT {picked} FROM "{table}"')
        shift *= 2
    conn.commit()
    conn.execute("VACUUM")
    n = conn.execute(f'SELECT count(*) FROM "{dispatch}"').fetchone()[0]
    conn.close()
    return int(n)


def run(args: list[str], root: Path = ROOT) -> tuple[float, float, int]:
    """The seconds the command printed for its own work, wall and CPU (else its wall time, twice), and its peak
    RSS (bytes)."""
    env = {**os.environ, "PYTHONPATH": str(root), "MOEPROF_IGNORE_MEMORY_CHECK": "1"}
    t = time.perf_counter()
    # run in the checkout: ``python -c`` puts the working folder ahead of PYTHONPATH
    proc = subprocess.Popen(args, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = cpu = time.perf_counter() - t
    if status != 0:
        raise SystemExit(f"{args[:4]} failed: {proc.stderr.read().decode()[-500:] if proc.stderr else ''}")
    try:
        wall, cpu = (float(x) for x in out.decode().strip().splitlines()[-1].split())
    except (ValueError, IndexError):
        pass
    return wall, cpu, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dispatches", type=int, help="at least this many (default 170,000; 1,000,000 dispatches only)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="build the database in DIR and keep it; reused where DIR has it")
    ap.add_argument("--dispatches-only", action="store_true", help="grow the dispatch rows alone (the densest shape)")
    ap.add_argument("--compare", type=Path, help="also time read_file of another moeprof checkout (before/after)")
    a = ap.parse_args()
    folder = (a.keep or Path(tempfile.mkdtemp(prefix="moeprof-bench-rocpd-"))).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "41200_results.db"
    api = not a.dispatches_only
    if a.keep is not None and db.exists():
        with sqlite3.connect(db) as conn:
            n = int(conn.execute("SELECT count(*) FROM rocpd_kernel_dispatch").fetchone()[0])
            (events,) = conn.execute("SELECT count(*) FROM rocpd_event").fetchone()
        api = events > n  # the database kept says which shape it is
    else:
        n = build(db, a.dispatches or (170_000 if api else 1_000_000), api=api)
    size = db.stat().st_size
    # alternated, so that a burst of load on the machine falls on both; best of each (wall, and CPU: on a
    # loaded machine the CPU seconds are the steadier ratio)
    floors, reads, others, texts = [], [], [], []
    for _ in range(a.repeat):
        texts.append(run([sys.executable, "-c", TEXT_FLOOR, str(db)]))
        floors.append(run([sys.executable, "-c", FLOOR, str(db), *(["api", *API_ROWS] if api else ["dispatches"])]))
        reads.append(run([sys.executable, "-c", READ, str(db)]))
        if a.compare:
            others.append(run([sys.executable, "-c", READ, str(db)], a.compare.resolve()))
    floor, floor_cpu = min(f[0] for f in floors), min(f[1] for f in floors)
    read, read_cpu = min(r[0] for r in reads), min(r[1] for r in reads)
    text, text_cpu = min(r[0] for r in texts), min(r[1] for r in texts)
    print(
        f"dispatch columns as SQLite texts parsed by numpy (the reader's route, bare): {text:.2f} s wall, "
        f"{text_cpu:.2f} s CPU" + ("" if api else f"; read_file = {read / text:.2f}x that")
    )
    if others:
        other, other_cpu = min(r[0] for r in others), min(r[1] for r in others)
        print(
            f"read_file of {a.compare}: {other:.2f} s wall = {other / floor:.2f}x the floor; "
            f"{other_cpu:.2f} s CPU = {other_cpu / floor_cpu:.2f}x"
        )
    *_, rss = run([sys.executable, "-m", "moeprof", "analyze", str(db), "--json"])
    print(f"database: {n:,} dispatches, {size / 2**20:.0f} MiB")
    what = "the dispatch columns and the API rows the reader selects" if api else "the dispatch columns"
    print(f"floor (sqlite3 fetch of {what}): {floor:.2f} s wall, {floor_cpu:.2f} s CPU")
    verdict = "met" if read <= 1.5 * floor else "NOT met"
    print(
        f"read_file: {read:.2f} s wall = {read / floor:.2f}x the floor (target <= 1.5x: {verdict}); "
        f"{read_cpu:.2f} s CPU = {read_cpu / floor_cpu:.2f}x"
    )
    print(f"analyze peak RSS: {rss / 2**20:.0f} MiB = {rss / size:.2f}x the file (MEMORY_FACTOR['rocpd'])")
    if a.keep is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
