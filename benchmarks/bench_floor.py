"""Benchmark: ``moeprof analyze --json`` against the floor of reading the same file, on issue 41's four shapes and
issue 49's kernel-dense one.

One command prints issue 41's table: for each shape, the floor's CPU time (user + system) and peak RSS,
``analyze --json``'s, the JSON's bytes, and the ratios (targets: CPU <= 1.5x the floor's, peak RSS <= 1.0x).

* ``one-step``: ``bench_xplane.py --shape one-step``, a one-step XPlane capture of a large job (one long step,
  8 GPUs running the same program, collectives on three streams, ~18% of kernels);
* ``xla``: ``bench_xplane.py --shape xla`` (10 steps, compute, collective and copy streams);
* ``kernel-only``: ``bench_xplane.py --shape kernel-only`` (compute kernels only);
* ``kineto``: ``bench_kineto.py --shape one-step``, one rank's Kineto capture of one long step of a large job
  (~19% of device activities collectives on five NCCL streams);
* ``kernel-dense`` (issue 49): ``bench_xplane.py --shape kernel-dense``, one long step where every event is a
  device kernel (8 GPUs, ~1.9 stats an event, collectives on three streams; no derived lines or host
  launches): the kernel-dense end of real captures.

The floors are the benchmarks' own: for XPlane, jaxlib's ``ProfileData.from_file`` and the name and duration of
every event read from Python (``bench_xplane.FLOOR``: what any Python reader built on jaxlib pays); for Kineto,
orjson decoding the file and the name and duration of every device event (``bench_kineto.FLOOR``). Each
measurement is its own process; CPU time and peak RSS come from ``os.wait4``; the floor and analyze (and, with
``--compare``, another checkout's analyze) run round-robin in one run, best CPU of ``--repeat``, median RSS.
CPU time is the figure to read on a shared machine (wall time follows its load).

Read the ratios on a machine without an accelerator: on the TPU machine's host jaxlib starts the TPU runtime
when the floor imports it (1.9-2.0 s, even with ``JAX_PLATFORMS=cpu``), which inflates the XPlane floor and
hides analyze's cost.

    python benchmarks/bench_floor.py [--events 1000000] [--repeat 3]
                                     [--shapes one-step,xla,kernel-only,kineto,kernel-dense]
                                     [--keep DIR [--reuse]] [--compare CHECKOUT]
    python benchmarks/bench_floor.py --events 10000000 --shapes one-step --repeat 1     # the 10M row
    python benchmarks/bench_floor.py --shapes kernel-dense --parts                      # where analyze's cost lies

``--parts`` measures, beside the floor, the stages ``analyze --json`` goes through, each a process of its own
that stops there: Python alone, importing numpy and pandas (the table's), importing what ``analyze`` imports, the
XPlane read (``moeprof.readers.read_file``), the read classified (``load_trace``: taxonomy, scopes, roles, links),
``analyze --json --no-projection`` and ``analyze --json``. Each row is its CPU and peak RSS and their ratios to the
floor's; the difference between two rows is the cost of the stage between them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_kineto import FLOOR as KINETO_FLOOR  # noqa: E402
from benchmarks.bench_startup import compile_package  # noqa: E402
from benchmarks.bench_xplane import FLOOR as XPLANE_FLOOR  # noqa: E402

SHAPES = ("one-step", "xla", "kernel-only", "kineto", "kernel-dense")
CPU_TARGET = 1.5
RSS_TARGET = 1.0


def build(shape: str, path: Path, events: int) -> None:
    """The shape's trace at ``path``, built in a child process (a forked child's peak RSS starts from its
    parent's, so the parent stays small for the measured children's figures to be theirs)."""
    if shape == "kineto":
        code = (
            "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from benchmarks.bench_kineto import build; "
            "build(Path(sys.argv[2]), int(sys.argv[3]), one_step=True); Path(sys.argv[2] + '.gz').unlink()"
        )
        cmd = [sys.executable, "-c", code, str(ROOT), str(path), str(events)]
    else:
        cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_xplane.py"), "--build-only", str(path)]
        cmd += ["--events", str(events), "--shape", shape]
    subprocess.run(cmd, check=True, capture_output=True)


# the stages of ``analyze --json`` (``--parts``): each a command that stops there; the XPlane shapes only
PARTS: dict[str, str] = {
    "python alone": "pass",
    "import numpy, pandas": "import numpy, pandas",
    "import what analyze imports": (
        "import moeprof.cli.main, moeprof.cli.analyze, moeprof.pipeline.runner, moeprof.pipeline.merge, "
        "moeprof.insight.projection, moeprof.reports.json_report, moeprof.readers.xplane"
    ),
    "read (readers.read_file)": "import sys; from moeprof.readers import read_file; read_file(sys.argv[1])",
    "read + classify (load_trace)": (
        "import sys; from moeprof.pipeline.runner import load_trace; load_trace(sys.argv[1])"
    ),
}


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """CPU seconds (user + system), peak RSS (MiB) and stdout bytes of one child process (run from the temporary
    folder: ``python -m`` puts its working folder first on the path, which would choose the checkout)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env = {**os.environ, **(env or {})}
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=tempfile.gettempdir())
        _, status, usage = os.wait4(proc.pid, 0)
        size = out.seek(0, os.SEEK_END)
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err.read().decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--keep", type=Path, help="build the traces into this folder and keep them")
    ap.add_argument("--reuse", action="store_true", help="with --keep: use the traces already there")
    ap.add_argument("--compare", type=Path, help="another checkout whose analyze --json is measured too (before)")
    ap.add_argument("--parts", action="store_true", help="the stages of analyze --json, each against the floor")
    args = ap.parse_args()
    if args.parts and (args.compare or "kineto" in args.shapes.split(",")):
        raise SystemExit("--parts: the XPlane shapes, one checkout")
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(unknown)}: of {', '.join(SHAPES)}")
    compile_package()  # bytecode, as an installed package has it
    checkouts = {"analyze": ROOT}
    if args.compare:
        checkouts = {"before": args.compare.resolve(), "after": ROOT}
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkouts["before"] / "moeprof")], check=True)
    py = sys.executable
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for shape in shapes:
            suffix = ".pt.trace.json" if shape == "kineto" else ".xplane.pb"
            trace = folder / f"{shape}_{args.events}{suffix}"
            if not (args.reuse and trace.exists()):
                build(shape, trace, args.events)
            floor = [py, "-c", KINETO_FLOOR if shape == "kineto" else XPLANE_FLOOR, str(trace)]
            runs = {"floor": (floor, {})}
            here = {"PYTHONPATH": str(ROOT)}
            if args.parts:
                for label, code in PARTS.items():
                    runs[label] = ([py, "-c", code, str(trace)], here)
                cmd = [py, "-m", "moeprof", "analyze", str(trace), "--json", "--no-projection"]
                runs["analyze --json --no-projection"] = (cmd, here)
            for label, checkout in checkouts.items():
                runs[label] = ([py, "-m", "moeprof", "analyze", str(trace), "--json"], {"PYTHONPATH": str(checkout)})
            got: dict[str, list[tuple[float, float, int]]] = {label: [] for label in runs}
            for _ in range(args.repeat):  # round-robin: a slow spell of the machine falls on every command
                for label, (cmd, env) in runs.items():
                    got[label].append(measure(cmd, env))
            best = {
                k: (min(c for c, _, _ in v), statistics.median(r for _, r, _ in v), v[0][2]) for k, v in got.items()
            }
            size_mib = trace.stat().st_size / 2**20
            rows.append((shape, size_mib, best))
            if args.parts:
                fc, fr, _ = best["floor"]
                print(f"{shape}: the stages of analyze --json, each a process that stops there (best of {args.repeat})")
                for label, (c, r, _) in best.items():
                    print(f"  {label:34s} {c:6.2f} s {c / fc:5.2f}x   {r:5.0f} MiB {r / fr:5.2f}x")
            figures = ", ".join(f"{k} {c:.2f} s {r:.0f} MiB" for k, (c, r, _) in best.items())
            print(f"{shape}: {size_mib:.1f} MiB, {figures}")
    events = f"{args.events / 1e6:g}M"
    head = f"{events + '-event input':22s} {'floor CPU / RSS':>20s}  {'analyze --json CPU / RSS':>26s}"
    print(f"\n{head} {'JSON':>10s}  ratio")
    for shape, _, best in rows:
        fc, fr, _ = best["floor"]
        for label in checkouts:
            c, r, size = best[label]
            name = shape if len(checkouts) == 1 else f"{shape} ({label})"
            cpu_met = "met" if c / fc <= CPU_TARGET else "NOT MET"
            rss_met = "met" if r / fr <= RSS_TARGET else "NOT MET"
            print(
                f"{name:22s} {fc:7.2f} s / {fr:6.0f} MiB  {c:9.2f} s / {r:6.0f} MiB {size / 1e6:8.2f} MB  "
                f"CPU {c / fc:.2f}x ({cpu_met}), RSS {r / fr:.2f}x ({rss_met})"
            )
    print(f"(targets: CPU <= {CPU_TARGET}x the floor's, peak RSS <= {RSS_TARGET}x; best CPU of {args.repeat},")
    print(" median RSS; read on a machine without an accelerator: see the module docstring)")


if __name__ == "__main__":
    main()
