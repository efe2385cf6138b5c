"""One fuzz run: put a case on disk, run moeprof, check the contract, name the failure class."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import known
from .mutators import SAME, SAME_OR_REJECT, Case, seed_case
from .oracle import Violation, check, figures
from .runner import Outcome, Worker, materialize, run_subprocess, snapshot, unlock


@dataclass
class Result:
    case: Case
    outcome: Outcome
    violations: list[Violation]
    known: list[known.KnownClass] = field(default_factory=list)  # classes that explain every violation

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def unexplained(self) -> list[Violation]:
        return known.unexplained(self.violations, self.known)

    def report(self) -> str:
        o = self.outcome
        lines = [
            self.case.describe(),
            f"  input: in/{self.case.arg}   target: {self.case.target!r}",
            f"  exit: {o.rc}  signal: {o.signal}  timed out: {o.timed_out}  {o.seconds:.2f} s",
            *(f"  violation {v}" for v in self.violations),
        ]
        if self.known:
            lines.append(f"  known class(es): {', '.join(k.id for k in self.known)}")
        if o.stderr.strip():
            lines.append(f"  stderr: {o.stderr.strip()[:600]!r}")
        if o.escaped:
            lines.append(f"  escaped: {o.escaped[:300]}")
        key = self.case.key
        replay = f"--special {key.split(':', 1)[1]}" if key.startswith("special:") else f"--replay {key}"
        lines.append(f"  replay: python -m tests.fuzz {replay} --keep /tmp/fuzz-case")
        return "\n".join(lines)


class Harness:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.worker = Worker()
        self._seed_results: dict[str, Result] = {}
        self._count = 0

    def close(self) -> None:
        self.worker.close()

    def seed_result(self, name: str) -> Result:
        """The run of the unmutated seed (once per harness)."""
        if name not in self._seed_results:
            self._seed_results[name] = self.run(seed_case(name), with_seed=False)
        return self._seed_results[name]

    def seed_figures(self, name: str) -> dict:
        """The unmutated seed's figures: what a meaning-preserving mutation must reproduce."""
        result = self.seed_result(name)
        # a seed may only fail in known ways (numpy warnings on stderr), never in its figures
        if result.outcome.rc != 0 or (result.violations and not result.known) or result.unexplained:
            raise RuntimeError(f"seed {name} does not pass the contract itself:\n{result.report()}")
        return figures(json.loads(result.outcome.stdout))

    def run(self, case: Case, *, with_seed: bool = True, keep: Path | None = None) -> Result:
        self._count += 1
        root = keep or self.workdir / f"case-{self._count}"
        materialize(case, root)
        before = snapshot(root)
        outcome = run_subprocess(case, root) if case.mode == "subprocess" else self.worker.run(case, root)
        after = snapshot(root)
        want = None
        if with_seed and case.seed and case.expect in (SAME, SAME_OR_REJECT):
            want = self.seed_figures(case.seed)
        outputs = {p.name: p.stat().st_size for p in (root / "out").iterdir() if p.is_file()}
        violations = check(case, outcome, before, after, want, outputs)
        if any(v.code == "unforeseen-exception" for v in violations) and not outcome.escaped:
            outcome.escaped = self._exception_behind(case, root)
        if keep is None:
            unlock(root)
            shutil.rmtree(root, ignore_errors=True)
            for suffix in (".stdout", ".stderr"):
                root.with_name(root.name + suffix).unlink(missing_ok=True)
        result = Result(case, outcome, violations)
        if violations:
            result.known = known.classify(case, outcome, violations)
        return result

    def _exception_behind(self, case: Case, root: Path) -> str:
        """The exception a catch-all answered for (its message names none): the case again as ``python -m
        moeprof`` with MOEPROF_DEBUG=1, which lets it through (a new process: the in-process worker's pool workers
        would not see the variable), as "Type: message"; "" where it did not show."""
        outcome = run_subprocess(replace(case, mode="subprocess", env={**case.env, "MOEPROF_DEBUG": "1"}), root)
        if "Traceback (most recent call last):" not in outcome.stderr:
            return ""
        # the first line at the margin after the last traceback's (indented) frames; notes follow it
        after = outcome.stderr.split("Traceback (most recent call last):")[-1].splitlines()
        return next((ln for ln in after if ln.strip() and not ln[0].isspace()), "")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
