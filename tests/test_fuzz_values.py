"""Fuzz of hostile *values* through the real CLI (issue 49; the cases: tests/fuzz/value_cases.py): what-if factors,
regex patterns (what-if filters, --step-marker, --rules), a baseline's figures, a check config's keys and values,
a history database's values. Every case keeps the bad-input contract (exit 2 with one line naming the option or
the file, no traceback, no catch-all, nothing written beside the inputs) or is accepted with sane figures; a value
that can be no value (a factor that is no finite number >= 0, a pattern ``re`` does not compile, a figure no run
measures, a gate given twice) must be refused.

Knobs: MOEPROF_FUZZ_VALUES_RUNS (default 80), MOEPROF_FUZZ_VALUES_SECONDS (default 60: cases past it are
skipped), MOEPROF_FUZZ_SEED (default 1). A failing case prints its replay command:
``python -m tests.fuzz --replay values:SEED:INDEX --keep /tmp/case``; a campaign:
``python -m tests.fuzz --route values --runs 1000``.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.fuzz.__main__ import case_of_key
from tests.fuzz.engine import Harness
from tests.fuzz.mutators import ANY, REJECT
from tests.fuzz.value_cases import (
    HOSTILE_FIGURES,
    NESTED,
    baseline_expect,
    compiles,
    config_value_is_bad,
    factor_is_bad,
    generate_values,
)

from .helpers import judge_fuzz_result

RUNS = int(os.environ.get("MOEPROF_FUZZ_VALUES_RUNS", "80"))
SECONDS = float(os.environ.get("MOEPROF_FUZZ_VALUES_SECONDS", "60"))
SEED = int(os.environ.get("MOEPROF_FUZZ_SEED", "1"))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory):
    h = Harness(tmp_path_factory.mktemp("fuzz-values"))
    yield h
    h.close()


@pytest.fixture(scope="module")
def deadline() -> float:
    return time.monotonic() + SECONDS


@pytest.mark.slow
@pytest.mark.parametrize("index", range(RUNS))
def test_fuzz_values(harness: Harness, deadline: float, index: int) -> None:
    if time.monotonic() > deadline:
        pytest.skip(f"MOEPROF_FUZZ_VALUES_SECONDS={SECONDS:g} spent")
    judge_fuzz_result(harness.run(generate_values(SEED, index)))


# ---- what each value must give, decided without moeprof -------------------------------------------------------------


def test_the_cases_draw_every_kind_and_both_expectations() -> None:
    """The first RUNS cases hold each kind of value, each both refused and accepted where it can be (history:
    accepted, strict JSON)."""
    seen = {(c.steps[0], c.expect) for c in (generate_values(SEED, i) for i in range(max(RUNS, 80)))}
    for kind in ("[what-if factor]", "[pattern]", "[baseline]", "[config]"):
        assert {(kind, REJECT), (kind, ANY)} <= seen, kind
    assert ("[history]", ANY) in seen


def test_a_case_replays_from_its_key() -> None:
    for index in (0, 7, 33):
        case = generate_values(SEED, index)
        again = case_of_key(case.key)
        assert (again.key, again.steps, again.expect, again.command, again.options) == (
            case.key, case.steps, case.expect, case.command, case.options,
        )  # fmt: skip
        assert again.files == case.files


def test_the_expectations_follow_the_contract() -> None:
    assert [factor_is_bad(f) for f in ("5e13", "1e6", "0", "-0", "-1", "nan", "inf", "1e309", "0x10", "1_000")] == [
        False, False, False, False, True, True, True, True, True, False,
    ]  # fmt: skip
    assert not compiles("a{99999999999}") and not compiles(NESTED) and not compiles("[") and compiles("x{4294967294}")
    assert [config_value_is_bad("max_comm_share", v) for v in (0.5, "50%", "150%", 50, -0.1, True, "0.5")] == [
        False, False, True, True, True, True, False,
    ]  # fmt: skip
    assert config_value_is_bad("noise_alpha", 2) and not config_value_is_bad("max_exposed_comm_ms", 2)
    assert config_value_is_bad("per_device", 1) and not config_value_is_bad("per_device", False)
    good = {"total": {"accumulated_ns": 10, "compute_ns": 6, "comm_ns": 4, "span_ns": 9, "busy_ns": 7, "idle_ns": 2,
                      "exposed_comm_ns": 3}}  # fmt: skip
    assert baseline_expect(good) == ANY
    for key in good["total"]:
        for value in HOSTILE_FIGURES:
            bad = {"total": {**good["total"], key: value}}
            if value is None or isinstance(value, bool) or not isinstance(value, int | float):
                if value is not None:
                    assert baseline_expect(bad) == REJECT, (key, value)
            elif value < 0 or value != value or value > 2**63 - 1:
                assert baseline_expect(bad) == REJECT, (key, value)
    assert baseline_expect({"total": {}}) == REJECT
