"""Failure classes already found and not yet fixed (see KNOWN_FAILURES.md).

A failing case whose every violation is explained by a class here is an expected failure
(pytest.xfail, not strict); anything else fails the test. Whoever fixes a class deletes its entry:
from then on the harness enforces it. (Fixed on main and deleted so: multi-file-error-lost,
no-device-activity-accepted, newline-in-file-name, out-of-memory-unnamed; and, in issue 10, the
27 classes of the seed-100/300 campaigns: the list and their regression tests are in KNOWN_FAILURES.md.)
Helpers below (``_escaped``, ``_extreme``, the patterns) are kept for the next class.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .mutators import Case
from .oracle import Violation
from .runner import Outcome


@dataclass(frozen=True)
class KnownClass:
    id: str
    codes: frozenset[str]  # the violations this class explains
    matches: Callable[[Case, Outcome, list[Violation]], bool]


def escaped_type(outcome: Outcome) -> str:
    """The type of the exception behind a failure: one that left the command, or the one a catch-all answered
    for (whose message names none: the harness runs such a case again with MOEPROF_DEBUG=1 to learn it)."""
    m = re.match(r"([\w.]+)(?::|$)", outcome.escaped.strip(), re.M)
    return m.group(1) if m else ""


SANITY = frozenset({
    "negative-ns", "fraction-range", "bucket-sum", "link-sum", "busy-span", "idle", "busy-accumulated", "exposed-span",
    "exposed-comm", "step-order", "share", "total-sum", "collective", "opportunity", "non-finite",
})  # fmt: skip
ONE_LINE = frozenset({"unforeseen-exception", "unnamed-file", "stderr-lines"})
# values near or past the int64 range, as the mutation log spells them
_EXTREME = re.compile(
    r"9223372036854775807|9223372036854775808|2\^63|4611686018427387904|9223372036854|1000000000000000000"
    r"|18446744073709551615|1\.7e\+?1[58]|1700000000000000|1e\+?300"
)


_PY_WARNING = re.compile(r"\.py:\d+: \w*Warning: ")
_NATIVE_LOG = re.compile(r"(?m)^[EWIF]\d{4} \d\d:\d\d:\d\d|absl::InitializeLog")


def _steps(case: Case) -> str:
    return " ; ".join(case.steps)


def _codes(violations: list[Violation]) -> set[str]:
    return {v.code for v in violations}


def _escaped(*types: str, fmts: tuple[str, ...] = (), text: str = "") -> Callable[[Case, Outcome, list], bool]:
    def match(case: Case, outcome: Outcome, violations: list[Violation]) -> bool:
        return (
            escaped_type(outcome) in types and (not fmts or case.fmt in fmts) and (not text or text in outcome.stderr)
        )

    return match


def _extreme(fmt: str) -> Callable[[Case, Outcome, list], bool]:
    def match(case: Case, outcome: Outcome, violations: list[Violation]) -> bool:
        return case.fmt == fmt and outcome.rc == 0 and bool(_EXTREME.search(_steps(case)))

    return match


KNOWN: list[KnownClass] = []  # every class found so far is fixed (see KNOWN_FAILURES.md)


def classify(case: Case, outcome: Outcome, violations: list[Violation]) -> list[KnownClass]:
    return [k for k in KNOWN if any(v.code in k.codes for v in violations) and k.matches(case, outcome, violations)]


def unexplained(violations: list[Violation], classes: list[KnownClass]) -> list[Violation]:
    codes = set().union(*(k.codes for k in classes)) if classes else set()
    return [v for v in violations if v.code not in codes]
