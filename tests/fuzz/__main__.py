"""Long fuzz runs from the command line (the test suite runs a short, fixed slice of the same cases).

python -m tests.fuzz --runs 5000 --seed 1 --report /tmp/fuzz.jsonl   # thousands of cases
python -m tests.fuzz --route rocpd --runs 200                         # the rocpd databases' cases
python -m tests.fuzz --replay 1:1234 --keep /tmp/case                 # one case again, files kept
python -m tests.fuzz --replay rocpd:1:17                              # a case of another route: ROUTE:SEED:INDEX
python -m tests.fuzz --specials                                      # the file-system cases
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from . import known
from .engine import Harness, Result
from .known import escaped_type
from .mutators import Case, generate, generate_rocprof, generate_tpu, special_cases
from .oracle import Violation
from .rocpd_cases import generate_rocpd
from .runner import Outcome
from .value_cases import generate_values

# the random cases, drawn apart per route so that each route's earlier campaigns replay as they were; a case's key
# is SEED:INDEX on the main route, ROUTE:SEED:INDEX on the others (NCCL Inspector logs: tests/test_fuzz_inspector.py)
ROUTES: dict[str, Callable[[int, int], Case]] = {
    "main": generate,
    "rocprof": generate_rocprof,
    "rocpd": generate_rocpd,
    "tpu": generate_tpu,
    "values": generate_values,  # hostile option values and hand-written files (issue 49)
}


def case_of_key(key: str) -> Case:
    """The case a key names (as a failure's report prints it)."""
    *route, seed, index = key.split(":")
    if len(route) > 1 or (route and route[0] not in ROUTES):
        raise SystemExit(f"--replay {key}: not SEED:INDEX or ROUTE:SEED:INDEX (routes: {', '.join(ROUTES)})")
    return ROUTES[route[0] if route else "main"](int(seed), int(index))


def _signature(r: Result) -> str:
    if r.known:
        return (
            "known: "
            + ", ".join(k.id for k in r.known)
            + (f" + unexplained {sorted({v.code for v in r.unexplained})}" if r.unexplained else "")
        )
    exc = escaped_type(r.outcome)
    return f"NEW {r.case.fmt}: {sorted({v.code for v in r.violations})}" + (f" {exc}" if exc else "")


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--route", choices=list(ROUTES), default="main", help="which random cases (default: main)")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long")
    ap.add_argument("--replay", help="SEED:INDEX (ROUTE:SEED:INDEX off the main route) of one case")
    ap.add_argument("--special", help="name of one file-system case (special:NAME)")
    ap.add_argument("--specials", action="store_true", help="run every file-system case")
    ap.add_argument("--keep", type=Path, help="leave the case's files here (with --replay/--special)")
    ap.add_argument("--report", type=Path, help="append one JSON line per failing case")
    ap.add_argument("--reclassify", type=Path, help="a --report file: count its failures by the current classes")
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args()
    if args.reclassify:
        return reclassify(args.reclassify)

    with tempfile.TemporaryDirectory(prefix="moeprof-fuzz-") as tmp:
        harness = Harness(Path(tmp))
        try:
            if args.replay or args.special:
                if args.replay:
                    case = case_of_key(args.replay)
                else:
                    case = next(c for c in special_cases(sys.executable) if c.key == f"special:{args.special}")
                result = harness.run(case, keep=args.keep)
                print(result.report() if result.violations else f"passes: {case.describe()}")
                return 1 if result.violations else 0
            cases = special_cases(sys.executable) if args.specials else None
            return _campaign(harness, args, cases)
        finally:
            harness.close()


def _campaign(harness: Harness, args: argparse.Namespace, cases) -> int:
    start = time.monotonic()
    classes: dict[str, list[Result]] = defaultdict(list)
    modes: Counter[str] = Counter()
    timing: dict[str, list[float]] = defaultdict(list)
    passed = 0
    todo = cases if cases is not None else range(args.start, args.start + args.runs)
    for n, item in enumerate(todo, 1):
        if args.seconds and time.monotonic() - start > args.seconds:
            break
        try:
            case = item if isinstance(item, Case) else ROUTES[args.route](args.seed, item)
        except Exception as exc:  # a harness bug: report it, keep fuzzing
            print(f"HARNESS ERROR generating {args.route} {args.seed}:{item}: {type(exc).__name__}: {exc}", flush=True)
            classes["HARNESS ERROR"].append(None)  # type: ignore[arg-type]
            continue
        if n % 100 == 0:
            print(f"... {n} cases, {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
        result = harness.run(case)
        modes[case.mode] += 1
        timing[f"{case.seed or case.fmt}/{case.mode}"].append(result.outcome.seconds)
        if result.ok:
            passed += 1
            if args.verbose:
                print(f"ok   {case.describe()}", flush=True)
            continue
        sig = _signature(result)
        classes[sig].append(result)
        if len(classes[sig]) == 1 or args.verbose:
            print(f"FAIL [{sig}]\n{result.report()}\n", flush=True)
        if args.report:
            with args.report.open("a") as fh:
                fh.write(json.dumps({
                    "key": case.key, "seed": case.seed, "fmt": case.fmt, "arg": case.arg, "command": case.command,
                    "mode": case.mode,
                    "expect": case.expect, "steps": case.steps, "rc": result.outcome.rc,
                    "violations": [str(v) for v in result.violations], "known": [k.id for k in result.known],
                    "stderr": result.outcome.stderr[-2000:],
                }) + "\n")  # fmt: skip
    total = passed + sum(len(v) for v in classes.values())
    print(f"\n{total} cases ({dict(modes)}) in {time.monotonic() - start:.0f} s: {passed} passed")
    if args.verbose:
        for k, secs in sorted(timing.items()):
            print(f"  time {k}: {len(secs)} runs, mean {sum(secs) / len(secs):.2f} s, max {max(secs):.2f} s")
    for sig, results in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(results):5d}  {sig}   e.g. {results[0].case.key if results[0] else '-'}")
    return 1 if any(sig.startswith(("NEW", "HARNESS")) or "unexplained" in sig for sig in classes) else 0


def reclassify(report: Path) -> int:
    """Failures of a recorded campaign, counted by the classes known.py has now (after a fix: what is left)."""
    per_class: dict[str, list[dict]] = defaultdict(list)
    for line in report.read_text().splitlines():
        rec = json.loads(line)
        case = Case(rec["key"], rec["seed"], rec["fmt"], rec["steps"], rec["expect"], {}, rec.get("arg", ""), "",
                    rec["command"], rec["mode"])  # fmt: skip
        outcome = Outcome(rec["rc"], "", rec["stderr"])
        violations = [Violation(*v.split(": ", 1)) for v in rec["violations"]]
        classes = known.classify(case, outcome, violations)
        for k in classes:
            per_class[k.id].append(rec)
        left = known.unexplained(violations, classes)
        if left:
            per_class["UNEXPLAINED " + ",".join(sorted({v.code for v in left}))].append(rec)
    for name, recs in sorted(per_class.items(), key=lambda kv: -len(kv[1])):
        smallest = min(recs, key=lambda r: (len(r["steps"]), len(" ".join(r["steps"]))))
        steps = " ; ".join(smallest["steps"])[:160]
        print(f"{len(recs):5d}  {name}   e.g. {smallest['key']} [{smallest['seed']}]: {steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
