"""Structure-aware fuzz of every reader, through the real CLI (the harness is tests/fuzz/).

Each case mutates a committed sample or a small hand-built trace, runs a moeprof command on it (most in
the in-process worker, a sample as ``python -m moeprof``), and checks the bad-input contract and the
sanity of accepted figures. Cases that fail only in ways a known, not yet fixed, class explains
(tests/fuzz/known.py, catalog in tests/fuzz/KNOWN_FAILURES.md) are xfailed; any other failure is red.

Knobs: MOEPROF_FUZZ_RUNS (random cases, default 150), MOEPROF_FUZZ_SECONDS (time budget of this module,
default 30: random cases past it are skipped), MOEPROF_FUZZ_TPU_RUNS (cases on a real TPU capture, default 30),
MOEPROF_FUZZ_SEED (default 1). A failing case prints its
seed, mutation log and replay command: ``python -m tests.fuzz --replay SEED:INDEX --keep /tmp/case``.
Thousands of cases: ``python -m tests.fuzz --runs 5000 --seed 7 --report /tmp/fuzz.jsonl``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from moeprof.errors import unforeseen
from tests.fuzz import known, protowire
from tests.fuzz.__main__ import case_of_key
from tests.fuzz.engine import Harness
from tests.fuzz.mutators import (
    ANY,
    REJECT,
    ROCPROF_SEED_WEIGHTS,
    SAME,
    SEED_WEIGHTS,
    SPECIALS,
    TPU_SEED_WEIGHTS,
    Case,
    generate,
    generate_rocprof,
    generate_tpu,
    special_cases,
)
from tests.fuzz.oracle import check, sanity
from tests.fuzz.rocpd_cases import generate_rocpd
from tests.fuzz.runner import Outcome

from .helpers import judge_fuzz_result

RUNS = int(os.environ.get("MOEPROF_FUZZ_RUNS", "150"))
ROCPROF_RUNS = int(os.environ.get("MOEPROF_FUZZ_ROCPROF_RUNS", "40"))
TPU_RUNS = int(os.environ.get("MOEPROF_FUZZ_TPU_RUNS", "30"))
SECONDS = float(os.environ.get("MOEPROF_FUZZ_SECONDS", "30"))
SEED = int(os.environ.get("MOEPROF_FUZZ_SEED", "1"))
CATALOG = Path(__file__).parent / "fuzz" / "KNOWN_FAILURES.md"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory):
    h = Harness(tmp_path_factory.mktemp("fuzz"))
    yield h
    h.close()


@pytest.fixture(scope="module")
def deadline() -> float:
    """The module's time budget, counted from its first test (seeds and file-system cases run first, in full)."""
    return time.monotonic() + SECONDS


@pytest.fixture(scope="module")
def specials() -> dict[str, Case]:
    return {c.key.split(":", 1)[1]: c for c in special_cases(sys.executable)}


# ---- moeprof under fuzz ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SEED_WEIGHTS | ROCPROF_SEED_WEIGHTS | TPU_SEED_WEIGHTS))
def test_seed_is_accepted(harness: Harness, deadline: float, name: str) -> None:
    """Every seed, unmutated, is a valid trace: the mutations start from something moeprof reads."""
    result = harness.seed_result(name)
    assert result.outcome.rc == 0, result.report()
    judge_fuzz_result(result)


@pytest.mark.slow
@pytest.mark.parametrize("name", SPECIALS)
def test_fuzz_special(harness: Harness, specials: dict[str, Case], name: str) -> None:
    """FIFOs, /dev/null, newlines in names, WAL in a read-only folder, sparse giants, a gzip bomb, nsys stand-ins."""
    judge_fuzz_result(harness.run(specials[name]))


@pytest.mark.slow
@pytest.mark.parametrize("index", range(RUNS))
def test_fuzz(harness: Harness, deadline: float, index: int) -> None:
    if time.monotonic() > deadline:
        pytest.skip(f"MOEPROF_FUZZ_SECONDS={SECONDS:g} spent")
    judge_fuzz_result(harness.run(generate(SEED, index)))


@pytest.mark.slow
@pytest.mark.parametrize("index", range(TPU_RUNS))
def test_fuzz_tpu(harness: Harness, deadline: float, index: int) -> None:
    """The XPlane mutations on a real TPU v5e capture: TPU planes, their metadata stats, async lines."""
    if time.monotonic() > deadline:
        pytest.skip(f"MOEPROF_FUZZ_SECONDS={SECONDS:g} spent")
    judge_fuzz_result(harness.run(generate_tpu(SEED, index)))


@pytest.mark.slow
@pytest.mark.parametrize("index", range(ROCPROF_RUNS))
def test_fuzz_rocprof(harness: Harness, deadline: float, index: int) -> None:
    """rocprofv3 CSV output sets: hostile cells, times as text, dropped columns and companions, cut bytes."""
    if time.monotonic() > deadline:
        pytest.skip(f"MOEPROF_FUZZ_SECONDS={SECONDS:g} spent")
    judge_fuzz_result(harness.run(generate_rocprof(SEED, index)))


# ---- the harness itself ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cases_are_reproducible() -> None:
    for index in range(40):
        a, b = generate(SEED, index), generate(SEED, index)
        assert (a.seed, a.steps, a.expect, a.command, a.mode) == (b.seed, b.steps, b.expect, b.command, b.mode)
        assert a.files == b.files
        a, b = generate_rocprof(SEED, index), generate_rocprof(SEED, index)
        assert (a.seed, a.steps, a.expect, a.command, a.mode) == (b.seed, b.steps, b.expect, b.command, b.mode)
        assert a.files == b.files


def test_a_failures_replay_key_names_its_case() -> None:
    """The replay command a report prints (``--replay KEY``) builds the very case, on every route."""
    for index in (0, 3, 25):
        for case in (generate(SEED, index), generate_rocprof(SEED, index), generate_rocpd(SEED, index)):
            again = case_of_key(case.key)
            assert (again.key, again.seed, again.steps, again.expect, again.command, again.mode) == (
                case.key, case.seed, case.steps, case.expect, case.command, case.mode,
            )  # fmt: skip
            assert again.files == case.files
    with pytest.raises(SystemExit, match="ROUTE:SEED:INDEX"):
        case_of_key("nsys:1:2")


def test_protowire_round_trip() -> None:
    raw = (Path(__file__).parents[1] / "sample_traces" / "synthetic_1host_8gpu" / "node0.xplane.pb").read_bytes()
    fields = protowire.decode(raw)
    assert protowire.encode(fields) == raw
    planes = [protowire.text(protowire.get(p.value, "name")[0]) for p in protowire.get(fields, "planes")]
    assert sum(p.startswith("/device:GPU:") for p in planes) == 8


def _case(expect: str = ANY, command: str = "analyze") -> Case:
    return Case("t:0", "", "kineto", ["test"], expect, {}, "rank0.pt.trace.json", "rank0.pt.trace.json", command)


def _codes(case: Case, outcome: Outcome, before: dict | None = None, after: dict | None = None, **kw) -> set[str]:
    return {v.code for v in check(case, outcome, before or {}, after or {}, None, **kw)}


def test_oracle_error_contract() -> None:
    line = "moeprof: in/rank0.pt.trace.json: not valid JSON\n"
    assert _codes(_case(), Outcome(2, "", line)) == set()
    assert _codes(_case(), Outcome(2, "", "moeprof: not valid JSON\n")) == {"unnamed-file"}
    assert "stderr-lines" in _codes(_case(), Outcome(2, "", "E0000 log line\n" + line))
    assert "traceback" in _codes(_case(), Outcome(1, "", "Traceback (most recent call last):\n  x\n"))
    # the catch-alls' words, the CLI's and a reader's (which names the file, and is still a failure)
    assert "unforeseen-exception" in _codes(
        _case(), Outcome(2, "", f"moeprof: cannot process the input: {unforeseen()}\n")
    )
    assert _codes(
        _case(), Outcome(2, "", f"moeprof: in/rank0.pt.trace.json: cannot read as json: {unforeseen()}\n")
    ) == {"unforeseen-exception"}
    assert _codes(_case(), Outcome(None, "", "", timed_out=True)) == {"hang"}
    assert _codes(_case(), Outcome(None, "", "", signal=9)) == {"crash"}
    assert "accepted-bad-input" in _codes(_case(REJECT), Outcome(0, '{"schema": "moeprof.analysis/1"}', ""))
    assert "rejected-good-input" in _codes(_case(SAME), Outcome(2, "", line))
    assert _codes(_case(), Outcome(2, "", line), {"in/a": ("file", 1, "x")}, {"in/a": ("file", 1, "y")}) == {
        "input-modified"
    }
    assert _codes(_case(), Outcome(2, "", line), {}, {"in/a-wal": ("file", 0, "z")}) == {"files-written"}
    assert _codes(_case(command="events"), Outcome(0, "", "wrote 3 rows\n"), outputs={}) == {"no-output"}
    assert _codes(_case(command="events"), Outcome(0, "", "wrote 3 rows\n"), outputs={"events.csv": 9}) == set()


def _device(**over: int | float) -> dict:
    row = {
        "device": "h/GPU:0", "accumulated_ns": 100, "compute_ns": 50, "comm_ns": 40, "memcpy_ns": 6, "other_ns": 4,
        "span_ns": 120, "busy_ns": 90, "idle_ns": 30, "exposed_comm_ns": 20, "overlapped_comm_ns": 15,
        "comm_nvlink_ns": 30, "comm_ib_ns": 10, "comm_unknown_link_ns": 0, "comm_share": 0.4,
        "exposed_comm_fraction": 20 / 120,
    }  # fmt: skip
    row.update(over)
    return row


def test_oracle_sanity_relations() -> None:
    def codes(**over: int | float) -> set[str]:
        dev = _device(**over)
        total = {k: v for k, v in dev.items() if k != "device"}
        return {c for c, _ in sanity({"devices": [dev], "total": total})}

    assert codes() == set()
    assert "negative-ns" in codes(compute_ns=-10, accumulated_ns=-20, comm_share=-2.0)
    assert "fraction-range" in codes(comm_share=1.5)
    assert codes(other_ns=5) == {"bucket-sum"}
    assert codes(comm_ib_ns=11) == {"link-sum"}
    assert "busy-span" in codes(busy_ns=130, idle_ns=-10)
    assert "busy-accumulated" in codes(busy_ns=110, idle_ns=10)
    assert "exposed-span" in codes(exposed_comm_ns=121, exposed_comm_fraction=1.0)


def test_every_known_class_is_in_the_catalog() -> None:
    text = CATALOG.read_text()
    missing = [k.id for k in known.KNOWN if f"`{k.id}`" not in text]
    assert not missing, f"known classes without an entry in {CATALOG.name}: {missing}"


def test_oracle_counts_the_error_line_apart_from_warnings() -> None:
    """check prints every warning, then refuses in one line (the dropped activities it refuses for are named in
    the warning above it): warnings before the error are no second error line; two error lines still are."""
    line = f"moeprof: {_case().target}: the reader dropped 1 device activity\n"
    warning = f"moeprof: warning: {_case().target}: dropped 1 device activity whose times cannot be placed\n"
    assert "stderr-lines" not in _codes(_case(), Outcome(2, "", warning + line))
    assert "stderr-lines" in _codes(_case(), Outcome(2, "", line + line))
