"""A real ablation: the router balanced, projected from a skewed demo, against the balanced demo's measured step (§9).

Captures ``moeprof capture demo --router-skew 4`` and ``--router-skew 0`` (every other flag the
same) ``--repeat`` times each, projects from each skewed capture ``balance-router`` (what a
balanced router does: the routed experts' work spread evenly over the devices, work conserved;
docs/metrics.md) and ``balance`` (spec §9's "every rank as fast as the median rank", the
straggler fix, which answers another question), and prints both against the measured step of
the balanced captures: the relative error of each skewed capture's projection against the
balanced captures' mean measured step, then the spread over the skewed captures (mean, min and
max relative error, and the mean of their absolute values).

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

``--devices 4 --expert-ffn 1024`` makes expert work stand above XLA:CPU's thread scheduling (see
``benchmarks/demo_skew.py``); those are the defaults here.

Virtual CPU devices measure an ablation only where each has a core of its own: a fresh capture
needs at least ``--devices`` + 1 host cores this process may use (``os.sched_getaffinity``: one per
device, one for the Python thread that drives them and the profiler). With fewer, devices that
share a core slow each other down when all of them compute at once, the balanced rerun is not the
skewed job with its work moved, and the benchmark says so and stops instead of printing figures.
``--reuse`` of captures made elsewhere (a machine with the cores) is measured whatever this one has.

Measured on the TPU machine's 13 host cores (``JAX_PLATFORMS=cpu``): with ``--reuse`` of the
captures made there by main be72e35, ``balance-router`` within -0.2..+3.2% (4 devices) and
-2.1..+5.9% (8 devices) of the balanced captures' mean step; ``balance`` +120..+125% and
+158..+182%. Fresh captures by the merged code (2026-12-05, mean over steps): 4 devices
balance-router -7.8%, -0.3%, +13.2% (mean +1.7%), balance +103..+140%; 8 devices -3.4..+7.9%
(mean +3.4%), balance +147..+184%. The +13.2% capture's own skewed step was 218 ms against 186-194
ms for the other two, its compute summed over devices 387 ms against 318-343: the host was slower
during that capture, and a projection carries its input's pace.

With one warm-up capture thrown away (``--warmup 1``, now the default: on a freshly started host
the first capture was the slow one twice) and ``--repeat 5``, fresh on the same host the same day:
4 devices balance-router -0.6, +1.8, +5.5, -0.0, -5.5% (mean +0.2%; the balanced reruns' own
spread 9.9% of their mean), balance +111..+123%; 8 devices +5.4, +8.7, +9.8, +10.5, +8.4% (mean
+8.6%; reruns' spread 14.1%), balance +158..+171%. With ``--repeat 3``: 4 devices -0.9, +8.7, +5.0%,
8 devices +6.2, -4.1, +12.0%. At 8 devices the skewed captures' compute summed over the devices
was 585-620 ms per step against 504-599 for the balanced ones: the loaded devices ran the same
work more slowly on that host, which a projection that conserves work cannot see (its bias here).
The next day, ``--devices 8 --repeat 3`` (warm-up 1) on a freshly started host: +2.5, +8.5, -6.7%
(mean +1.5%; the balanced reruns' spread 13.4%), balance +146..+160%: of the 11 captures at 8
devices so far, 9 are within 10%.

    python benchmarks/bench_demo_ablation.py --repeat 3 [--devices 4] [--warmup 1] [--keep DIR [--reuse]]
"""

from __future__ import annotations

import argparse
import os
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


TERMS = {"router": "balance-router", "straggler": "balance"}


def step_times(folder: Path, median: bool = False) -> tuple[float, dict[str, float]]:
    """(measured step, projected step per role of TERMS) of one capture, ns: the mean over steps, or the median."""
    from moeprof.pipeline import analyze_paths

    analysis = analyze_paths([folder])
    out: dict[str, float] = {}
    measured = float(analysis.step_ns or 0)
    for role in TERMS:
        p = analysis.projection(role)
        if p is None:
            sys.exit(f"{folder}: no {TERMS[role]} projection (one device, or no expert work found)")
        if median:
            measured = statistics.median(s.measured_ns for s in p.steps)
            out[role] = statistics.median(s.projected_ns for s in p.steps)
        else:
            out[role] = float(p.projected_step_ns)
    return measured, out


def usable_cores() -> int:
    """The host cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="captures of each setting")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--expert-ffn", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=None, help="profiled steps per capture (the demo's default)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the captures in this folder")
    parser.add_argument("--reuse", action="store_true", help="use the captures already in --keep")
    parser.add_argument(
        "--warmup", type=int, default=1, help="captures made first and not measured (a cold host's first is slow)"
    )
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="moeprof-ablation-"))
    runs: dict[float, list[Path]] = {SKEWED: [], BALANCED: []}
    fresh = [
        base / f"skew{skew:g}-{i}"
        for i in range(args.repeat)
        for skew in (SKEWED, BALANCED)
        if not (args.reuse and (base / f"skew{skew:g}-{i}" / "analysis.json").is_file())
    ]
    cores = usable_cores()
    if fresh and cores < args.devices + 1:
        sys.exit(
            f"the ablation cannot be measured here: {args.devices} virtual devices need {args.devices + 1} host cores "
            f"(one each, one for the driver) and this machine gives this process {cores}; devices sharing cores slow "
            "each other down, so a balanced rerun is not the skewed job with its work moved. Capture on a machine "
            "with the cores and measure the captures with --keep DIR --reuse."
        )
    base.mkdir(parents=True, exist_ok=True)
    # the first capture on a freshly started host ran slower than the rest, twice (its compute summed over the
    # devices 387 and 403 ms per step against 295-343 for all later ones): one is made and thrown away first
    for i in range(args.warmup if fresh else 0):
        warm = base / f"warmup-{i}"
        shutil.rmtree(warm, ignore_errors=True)
        capture(warm, SKEWED, args.devices, args.expert_ffn, args.steps)
        shutil.rmtree(warm)
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
        print(
            "skewed capture      measured step  balance-router projected  vs balanced   balance projected  vs balanced"
        )
        errors: dict[str, list[float]] = {role: [] for role in TERMS}
        for folder in runs[SKEWED]:
            measured, projected = step_times(folder, median)
            cells = []
            for role in TERMS:
                error = projected[role] / reference - 1
                errors[role].append(error)
                cells.append((projected[role] / 1e6, error))
            (r_ms, r_err), (b_ms, b_err) = cells
            print(
                f"{folder.name:18}  {measured / 1e6:10.2f} ms  {r_ms:21.2f} ms  {r_err:+11.1%}  {b_ms:15.2f} ms"
                f"  {b_err:+11.1%}"
            )
        for role, term in TERMS.items():
            e = errors[role]
            print(
                f"relative error of {term}: mean {statistics.fmean(e):+.1%}, min {min(e):+.1%}, max {max(e):+.1%},"
                f" mean |error| {statistics.fmean(abs(x) for x in e):.1%}"
            )


if __name__ == "__main__":
    main()
