"""``check --baseline`` against the noise of the steps: no failure on unchanged runs, a real regression caught.

Two experiments, each printing its figures:

1. Unchanged demo captures. ``--pairs`` pairs of ``moeprof capture demo`` runs of one configuration
   (``--demo-args``); run A of each pair is saved as the baseline (``moeprof baseline save``) and run B
   is checked against it. Counted: pairs where a gate fails, at the defaults (tolerance 0.02, Welch's
   test at alpha 0.001), at ``--tolerance 0.05`` (docs/ci.md), and with the tolerance alone
   (``--noise-alpha 1``: what check did before the noise test). An unchanged program must not fail.
2. A synthetic job with a real regression (``synthetic.gpu.build``, one host of 8 GPUs, ``--layers`` MoE
   layers, ``--steps`` steps; its exposed comm moves 3-5% from step to step):
   per pair a baseline (seed s), an unchanged capture (seed s+1: other draws, the same job) and the same
   capture with ``--regression`` more exposed comm in every step of every device (``regression=0.10``).
   Counted: unchanged pairs that fail, regressed ones whose exposed-comm-ms gate fails (caught).

    python benchmarks/bench_gate_noise.py                       # 10 demo pairs, 20 synthetic pairs
    python benchmarks/bench_gate_noise.py --work /tmp/noise --reuse   # keep and reuse the captures

The captures take most of the time (15-60 s each on a 2-core machine). No timing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from moeprof.gate.check import CheckConfig, GateResult, evaluate, load_source  # noqa: E402
from moeprof.gate.noise import DEFAULT_ALPHA  # noqa: E402
from synthetic.gpu import build, host_name, truth, write_xplane  # noqa: E402

DEMO_ARGS = "--devices 4 --expert-ffn 1024 --steps 6 --warmup 1"
VARIANTS = {  # label -> (tolerance, alpha)
    "defaults (tolerance 0.02, Welch alpha 0.001)": (0.02, DEFAULT_ALPHA),
    "--tolerance 0.05": (0.05, DEFAULT_ALPHA),
    "tolerance alone, 0.02 (before)": (0.02, 1.0),
    "tolerance alone, 0.05 (before)": (0.05, 1.0),
}


def moeprof(*args: str | Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "moeprof", *map(str, args)], env=env, capture_output=True, text=True, check=False
    )


def capture(out: Path, demo_args: str, reuse: bool) -> None:
    if reuse and (out / "manifest.json").is_file():
        return
    t0 = time.perf_counter()
    res = moeprof("capture", "demo", "--out", out, *shlex.split(demo_args), "--json")
    if res.returncode != 0:
        raise SystemExit(f"capture {out} failed: {res.stderr.strip().splitlines()[-1:]}")
    print(f"  captured {out.name} in {time.perf_counter() - t0:.0f} s", flush=True)


def failed(results: list[GateResult]) -> list[str]:
    return [r.name for r in results if not r.passed]


def demo_pairs(work: Path, pairs: int, demo_args: str, reuse: bool) -> None:
    print(f"1. unchanged demo captures: {pairs} pairs of `moeprof capture demo {demo_args}`", flush=True)
    fails: dict[str, list[int]] = {label: [] for label in VARIANTS}
    gates: dict[str, dict[str, int]] = {label: {} for label in VARIANTS}
    for i in range(pairs):
        a, b = work / f"demo_{2 * i:02d}", work / f"demo_{2 * i + 1:02d}"
        capture(a, demo_args, reuse)
        capture(b, demo_args, reuse)
        baseline = work / f"baseline_{i:02d}.json"
        res = moeprof("baseline", "save", a, "-o", baseline)
        if res.returncode != 0:
            raise SystemExit(f"baseline save {a} failed: {res.stderr.strip()}")
        cli = moeprof("check", b, "--baseline", baseline, "--json")  # what CI runs, at the defaults
        base = load_source(baseline).analysis
        current = load_source(b).analysis
        for label, (tolerance, alpha) in VARIANTS.items():
            names = failed(evaluate(current, CheckConfig(tolerance=tolerance, noise_alpha=alpha), base))
            if names:
                fails[label].append(i)
            for n in names:
                gates[label][n] = gates[label].get(n, 0) + 1
        print(f"  pair {i}: `moeprof check` exit {cli.returncode} at the defaults", flush=True)
        if cli.returncode not in (0, 1):
            raise SystemExit(f"check {b} failed: {cli.stderr.strip()}")
    for label in VARIANTS:
        detail = ", ".join(f"{n} x{c}" for n, c in sorted(gates[label].items())) or "-"
        print(f"  {label:<45} pairs failed: {len(fails[label]):>2} of {pairs}   gates: {detail}")


def write_job(
    folder: Path, steps: int, layers: int, seed: int, regression: float = 0.0, with_truth: bool = False
) -> dict | None:
    scen = build(folder.name, 1, 8, steps=steps, layers=layers, seed=seed, regression=regression)
    folder.mkdir(parents=True, exist_ok=True)
    write_xplane(scen, 0, folder / f"{host_name(scen, 0)}.xplane.pb")
    return truth(scen) if with_truth else None


def synthetic_pairs(work: Path, pairs: int, steps: int, layers: int, regression: float) -> None:
    print(
        f"2. synthetic job (1 host x 8 GPUs, {layers} layers, {steps} steps): {pairs} pairs, "
        f"unchanged and with +{regression:.0%} exposed comm",
        flush=True,
    )
    unchanged_failed = 0
    caught: dict[str, int] = dict.fromkeys(VARIANTS, 0)
    changes = []
    built = float("nan")
    cfg = CheckConfig()
    for i in range(pairs):
        seed = 1000 + 2 * i
        # the brute-force truth (one boolean per ns) is slow: the first pair's proves the regression as built
        write_job(work / f"synth_base_{i:02d}", steps, layers, seed)
        same_truth = write_job(work / f"synth_same_{i:02d}", steps, layers, seed + 1, with_truth=i == 0)
        worse_truth = write_job(work / f"synth_worse_{i:02d}", steps, layers, seed + 1, regression, i == 0)
        if same_truth and worse_truth:
            built = worse_truth["total"]["exposed_comm_ns"] / same_truth["total"]["exposed_comm_ns"] - 1
        base = load_source(work / f"synth_base_{i:02d}").analysis
        same = load_source(work / f"synth_same_{i:02d}").analysis
        worse = load_source(work / f"synth_worse_{i:02d}").analysis
        # and as moeprof measures it, every pair: the regressed capture over its unregressed twin
        changes.append(worse.total.exposed_comm_ns / same.total.exposed_comm_ns - 1)
        if failed(evaluate(same, cfg, base)):
            unchanged_failed += 1
        for label, (tolerance, alpha) in VARIANTS.items():
            results = evaluate(worse, CheckConfig(tolerance=tolerance, noise_alpha=alpha), base)
            caught[label] += "exposed-comm-ms-vs-baseline" in failed(results)
    print(f"  regression as built (brute-force truth of pair 0, regressed / unchanged twin): {built:+.4%}")
    print(f"  regression as measured (every pair, same ratio): {min(changes):+.4%} to {max(changes):+.4%}")
    print(f"  unchanged pairs failed at the defaults: {unchanged_failed} of {pairs}")
    for label in VARIANTS:
        print(f"  {label:<45} regressions caught (exposed-comm-ms-vs-baseline): {caught[label]:>2} of {pairs}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10, help="pairs of unchanged demo captures (0: skip)")
    ap.add_argument("--demo-args", default=DEMO_ARGS, help="options of moeprof capture demo")
    ap.add_argument("--synthetic-pairs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=20, help="steps of the synthetic job")
    ap.add_argument("--layers", type=int, default=16, help="MoE layers of the synthetic job")
    ap.add_argument("--regression", type=float, default=0.10, help="extra exposed comm of the regressed job")
    ap.add_argument("--work", type=Path, help="folder for the captures (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true", help="reuse the demo captures already in --work")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="moeprof-noise-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if args.pairs:
            demo_pairs(work, args.pairs, args.demo_args, args.reuse)
        if args.synthetic_pairs:
            synthetic_pairs(work, args.synthetic_pairs, args.steps, args.layers, args.regression)
        print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
