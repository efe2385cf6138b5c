"""A real ablation: the ``balance`` projection of a skewed demo against the balanced demo's measured step (spec §9).

Captures ``moeprof capture demo --router-skew 4`` and ``--router-skew 0`` (every other flag the
same) ``--repeat`` times each, projects ``balance`` ("every rank as fast as the median rank")
from each skewed capture, and prints it against the measured step of the balanced captures:
the relative error of each skewed capture's projection against the balanced captures' mean
measured step, then the spread over the skewed captures (mean, min and max relative error,
and the mean of their absolute values).

Step times are spec §9's ``step_ns`` (latest end − earliest start over the job's devices in a
step, aligned), read from each capture's own projection so both sides are the same figure: the
mean over the measured steps (§9's figure), and the median over the steps, which a slow spell
of a shared machine moves less. The balanced captures' own spread (min and max step) is printed
too: a projection cannot be closer to the rerun than the reruns are to each other. So is each
capture's compute time per step summed over its devices: the work the projection assumes the
balanced rerun keeps (balance moves compute between ranks, it does not add any). Where the
balanced captures' sum is well above the skewed ones', the devices were not independent (virtual
devices sharing too few CPU cores slow each other down when all of them compute at once), and
no replay of the skewed trace can foresee that.

On a small machine ``--devices 4 --expert-ffn 1024`` makes expert work stand above XLA:CPU's
thread scheduling (see ``benchmarks/demo_skew.py``); those are the defaults here.

    python benchmarks/bench_demo_ablation.py --repeat 3 [--keep DIR [--reuse]]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SKEWED, BALANCED = 4.0, 0.0


def capture(out: Path, skew: float, devices: int, expert_ffn: int, steps: int | None) -> None:
    cmd = [sys.executable, "-m", "moeprof", "capture", "demo", "--out", str(out),
           "--devices", str(devices), "--expert-ffn", str(expert_ffn), "--router-skew", str(skew)]  # fmt: skip
    if steps is not None:
        cmd += ["--steps", str(steps)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"capture into {out} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


def compute_per_step(folder: Path) -> float:
    """The capture's compute time per step, summed over its devices (ns)."""
    from moeprof.pipeline import analyze_paths

    analysis = analyze_paths([folder])
    steps = max(len({s.step for s in analysis.steps}), 1)
    return sum(d.compute_ns for d in analysis.devices) / steps


def step_times(folder: Path, median: bool = False) -> tuple[float, float]:
    """(measured step, projected step under ``balance``) of one capture, ns: the mean over steps, or the median."""
    from moeprof.insight.whatif import project
    from moeprof.pipeline import analyze_job

    analysis, traces = analyze_job([folder])
    projection = project(traces, analysis, ["balance"])
    if median:
        return (
            statistics.median(s.measured_ns for s in projection.steps),
            statistics.median(s.projected_ns for s in projection.steps),
        )
    return float(projection.measured_step_ns), float(projection.projected_step_ns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="captures of each setting")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--expert-ffn", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=None, help="profiled steps per capture (the demo's default)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the captures in this folder")
    parser.add_argument("--reuse", action="store_true", help="use the captures already in --keep")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="moeprof-ablation-"))
    base.mkdir(parents=True, exist_ok=True)
    runs: dict[float, list[Path]] = {SKEWED: [], BALANCED: []}
    for i in range(args.repeat):
        for skew in (SKEWED, BALANCED):  # interleaved: a slow spell of the machine hits both settings
            out = base / f"skew{skew:g}-{i}"
            if not (args.reuse and (out / "analysis.json").is_file()):  # a capture that finished
                if out.exists():
                    shutil.rmtree(out)
                capture(out, skew, args.devices, args.expert_ffn, args.steps)
            runs[skew].append(out)
    print(f"demo: --devices {args.devices} --expert-ffn {args.expert_ffn}, {args.repeat} captures per setting ({base})")
    for skew in (SKEWED, BALANCED):
        sums = ", ".join(f"{compute_per_step(f) / 1e6:.0f}" for f in runs[skew])
        print(f"--router-skew {skew:g}: compute per step summed over the devices, ms: {sums}")
    for median in (False, True):
        over = "median over steps" if median else "mean over steps"
        balanced = [step_times(f, median)[0] for f in runs[BALANCED]]
        reference = statistics.fmean(balanced)
        print(
            f"\n[{over}] balanced (--router-skew 0) measured step: mean {reference / 1e6:.2f} ms, "
            f"min {min(balanced) / 1e6:.2f}, max {max(balanced) / 1e6:.2f} "
            f"(the reruns' own spread: {(max(balanced) - min(balanced)) / reference:.1%} of the mean)"
        )
        print("skewed capture      measured step  balance projected  vs balanced mean")
        errors = []
        for folder in runs[SKEWED]:
            measured, projected = step_times(folder, median)
            error = projected / reference - 1
            errors.append(error)
            print(f"{folder.name:18}  {measured / 1e6:10.2f} ms  {projected / 1e6:14.2f} ms  {error:+15.1%}")
        print(
            f"relative error of the balance projection: mean {statistics.fmean(errors):+.1%}, min {min(errors):+.1%},"
            f" max {max(errors):+.1%}, mean |error| {statistics.fmean(abs(e) for e in errors):.1%}"
        )


if __name__ == "__main__":
    main()
