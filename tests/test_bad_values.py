"""Issue 49, "bad values that pass or mislead": option values and saved files that moeprof accepted and then
answered with nonsense (a projected step of -4e12 ms, a gate against 7.3e24%), or met with a catch-all.
Each is refused in one line naming the option or the file and the problem (exit 2, no traceback), before any
work where the value alone is wrong; where a value is legal, however large, its answer holds."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core.patterns import MAX_REPEAT, pattern_problem, user_pattern
from moeprof.errors import UNFORESEEN, InputError
from moeprof.insight.projection import parse_terms

from .helpers import SAMPLES

runner = CliRunner()
GPU_SAMPLE = SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb"
INSPECTOR = SAMPLES / "nccl_inspector_8rank"
NESTED = "(" * 2000 + "a" + ")" * 2000  # past the depth Python's regex parser recurses to
HUGE_REPEAT = "a{99999999999}"


def invoke(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


def refused(res) -> str:
    """The bad-input contract: exit 2, one line on stderr, no traceback, no catch-all; that line."""
    assert res.exit_code == 2, (res.exit_code, res.stdout[-500:], res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moeprof: "), res.stderr
    assert "Traceback" not in res.stderr and UNFORESEEN not in res.stderr and "Error" not in lines[0], lines[0]
    return lines[0]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no pyproject.toml with gates above; whatever a command leaves is in sight


# ---------------------------------------------------------------- what-if factors


@pytest.mark.parametrize(
    ("term", "said"),
    [
        ("scale()=5e13", "is past 1,000,000, the most a term takes"),
        ("tokens=1e300", "is past 1,000,000"),
        ("tokens(routed)=2e6", "is past 1,000,000"),
        ("scale(bucket=comm)=1e309", "must be a finite number >= 0"),  # float() reads it as inf
        ("scale()=inf", "must be a finite number >= 0"),
        ("scale()=nan", "must be a finite number >= 0"),
        ("tokens=-0.5", "must be a finite number >= 0"),
    ],
)
def test_a_factor_that_cannot_be_is_refused_by_the_term_parser(term: str, said: str) -> None:
    with pytest.raises(InputError) as info:
        parse_terms([term])
    factor = term.rsplit("=", 1)[1]
    assert str(info.value).startswith(f"--what-if {term!r}: factor {factor!r} {said}"), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("term", ["scale()=1e6", "tokens=1000000", "scale(name~x)=0", "scale()=1e-300"])
def test_the_factors_at_the_bounds_are_taken(term: str) -> None:
    (parsed,) = parse_terms([term])
    assert 0 <= parsed.factor <= 1e6


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_analyze_refuses_a_huge_factor_before_reading(extra: list[str]) -> None:
    """It was exit 0 with a projected step of -4e12 ms (with --json an orjson TypeError through the catch-all)."""
    line = refused(invoke("analyze", SAMPLES / "no_such_trace", "--what-if", "scale()=5e13", *extra))
    assert line.startswith("moeprof: --what-if 'scale()=5e13': factor '5e13' is past 1,000,000"), line


def test_annotate_and_report_refuse_a_huge_factor_and_write_nothing(tmp_path: Path) -> None:
    line = refused(invoke("annotate", GPU_SAMPLE, "--what-if", "tokens=1e300", "-o", tmp_path / "a.json"))
    assert "--what-if 'tokens=1e300'" in line
    line = refused(invoke("report", GPU_SAMPLE, "--what-if", "scale()=5e13", "-o", tmp_path / "r.html"))
    assert "--what-if 'scale()=5e13'" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _kernels(path: Path, durations_us: list[int], gap_us: int) -> Path:
    """A Kineto trace of one device whose kernels run one after another on one stream, ``gap_us`` apart."""
    events, ts = [], 1000
    for i, dur in enumerate(durations_us):
        events.append(
            {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": {"device": 0, "stream": 7}}
        )  # fmt: skip
        ts += dur + gap_us
    path.write_text(json.dumps({"traceEvents": events}))
    return path


TWENTY_MINUTES_US = 1_200_000_000


def test_a_legal_factor_that_takes_times_past_int64_is_refused(tmp_path: Path) -> None:
    """Three 20-minute kernels at 10^6: each 38 years (within int64 ns), the step 114 years: past the 73 years a
    projected time holds (a quarter of int64's range). One 50-minute kernel at 10^6 is refused by itself."""
    trace = _kernels(tmp_path / "long.pt.trace.json", [TWENTY_MINUTES_US] * 3, 5)
    line = refused(invoke("analyze", trace, "--what-if", "scale()=1e6", "--json"))
    assert line.startswith("moeprof: --what-if 'scale()=1e6': the changed times reach 114 years, past the 73 "), line
    one = _kernels(tmp_path / "one.pt.trace.json", [3_000_000_000], 0)
    line = refused(invoke("analyze", one, "--what-if", "scale()=1e6"))
    assert "the changed times reach 95.1 years" in line, line
    # two terms that are legal alone (38 years each), refused together: the step would be 76 years
    terms = ["scale(name~k0)=1e6", "scale(name~k1)=1e6"]
    assert invoke("analyze", trace, "--what-if", terms[0]).exit_code == 0
    line = refused(invoke("analyze", trace, "--what-if", terms[0], "--what-if", terms[1]))
    assert line.startswith(f"moeprof: --what-if '{' '.join(terms)}': the changed times reach 76.1 years"), line


def test_a_large_legal_factor_projects_exactly_and_annotates_in_range(tmp_path: Path) -> None:
    """At 10^5 the three kernels take 2.28 years each: the replay is exact (their ends are the scaled durations
    plus the kept 5 µs gaps, by hand), the JSON is valid, annotate's events start where the kernels do."""
    factor = 100_000
    trace = _kernels(tmp_path / "long.pt.trace.json", [TWENTY_MINUTES_US] * 3, 5)
    res = invoke("analyze", trace, "--what-if", f"scale()={factor}", "--json")
    assert res.exit_code == 0, res.stderr
    doc = orjson.loads(res.stdout)
    (asked,) = [p for p in doc["projections"] if p["what_if"] == [f"scale()={factor}"]]
    want_ns = 3 * TWENTY_MINUTES_US * 1000 * factor + 2 * 5_000
    assert asked["step_ns"]["measured"] == 3 * TWENTY_MINUTES_US * 1000 + 2 * 5_000
    assert asked["step_ns"]["projected"] == pytest.approx(want_ns, rel=1e-12)
    out = tmp_path / "projected.json"
    res = invoke("annotate", trace, "--what-if", f"scale()={factor}", "-o", out)
    assert res.exit_code == 0, res.stderr
    kernels = sorted(
        (e["ts"], e["dur"])
        for e in orjson.loads(out.read_bytes())["traceEvents"]
        if e.get("name") in ("k0", "k1", "k2")
    )
    dur_us = TWENTY_MINUTES_US * factor
    assert kernels == [pytest.approx((i * (dur_us + 5), dur_us), rel=1e-12, abs=1e-3) for i in range(3)]


# ---------------------------------------------------------------- user patterns


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        (HUGE_REPEAT, f"a repeat count past {MAX_REPEAT:,}, the most the regex engine takes"),
        ("x{1,4294967295}", f"a repeat count past {MAX_REPEAT:,}"),
        (NESTED, "groups nested too deeply for Python's regex parser"),
        ("[", "unterminated character set at position 0"),
    ],
)
def test_one_helper_compiles_every_user_pattern(pattern: str, problem: str) -> None:
    assert pattern_problem(pattern) is not None and problem in str(pattern_problem(pattern))
    with pytest.raises(InputError) as info:
        user_pattern(pattern, "--step-marker")
    text = str(info.value)
    assert text.startswith("--step-marker ") and text.endswith(
        f": not a regular expression ({pattern_problem(pattern)})"
    )
    assert len(text) < 300  # a pattern of 4,001 characters is quoted by its start and its length
    assert user_pattern(f"x{{{MAX_REPEAT}}}", "--step-marker").pattern == f"x{{{MAX_REPEAT}}}"


@pytest.mark.parametrize("pattern", [HUGE_REPEAT, NESTED])
def test_a_what_if_filter_pattern_that_cannot_compile_is_refused(pattern: str) -> None:
    """OverflowError and RecursionError escaped the filter parser to the catch-all."""
    term = f"scale(name~{pattern})=0.5"
    line = refused(invoke("analyze", GPU_SAMPLE, "--what-if", term))
    assert line.startswith("moeprof: --what-if 'scale(name~") and ": name~ '" in line, line
    assert line.endswith(f": not a regular expression ({pattern_problem(pattern)})"), line
    line = refused(invoke("analyze", GPU_SAMPLE, "--what-if", f"tokens(scope~{pattern})=0.5"))
    assert ": scope~ '" in line and "not a regular expression" in line


@pytest.mark.parametrize("pattern", [HUGE_REPEAT, NESTED])
@pytest.mark.parametrize("where", ["match", "opcode"])  # the rule's pattern, or its condition on another field
def test_a_rules_pattern_that_cannot_compile_is_refused(tmp_path: Path, pattern: str, where: str) -> None:
    """OverflowError and RecursionError escaped `classify --rules` and `analyze --rules` to the catch-all."""
    rules = tmp_path / "rules.toml"
    patterns = {"match": "nccl", "opcode": "x", where: pattern}
    rules.write_text(
        f'[[rule]]\nid = "r"\nfield = "name"\nmatch = {json.dumps(patterns["match"])}\n'
        + (f"opcode = {json.dumps(patterns['opcode'])}\n" if where == "opcode" else "")
        + 'bucket = "compute"\n'
    )
    before = rules.read_bytes()
    for args in (["classify", "--rules", rules, "nccl"], ["analyze", GPU_SAMPLE, "--rules", rules]):
        line = refused(invoke(*args))
        assert line.startswith(f"moeprof: {rules}: rule 'r': {where} '"), line
        assert line.endswith(f": not a regular expression ({pattern_problem(pattern)})"), line
    assert rules.read_bytes() == before


# ---------------------------------------------------------------- NCCL Inspector logs: no timeline


def test_inspector_logs_refuse_what_needs_a_timeline(tmp_path: Path) -> None:
    """--what-if was ignored silently, --critical-path wrote a parquet of 0 rows."""
    for args, said in (
        (["analyze", INSPECTOR, "--what-if", "balance"], "moeprof: --what-if balance: NCCL Inspector logs have no "),
        (["analyze", INSPECTOR, "--what-if", "balance", "--json"], "moeprof: --what-if balance: NCCL Inspector"),
        (["analyze", INSPECTOR, "--critical-path", tmp_path / "cp.parquet"], f"moeprof: --critical-path {tmp_path}"),
        (["report", INSPECTOR, "--what-if", "balance", "-o", tmp_path / "r.html"], "moeprof: --what-if balance: NCCL"),
    ):
        line = refused(invoke(*args))
        assert line.startswith(said) and "no timeline to replay" in line, line
    assert list(tmp_path.iterdir()) == []
    assert invoke("analyze", INSPECTOR).exit_code == 0  # the logs themselves are read as before


# ---------------------------------------------------------------- a baseline's figures


def _saved(tmp_path: Path) -> dict:
    res = invoke("baseline", "save", GPU_SAMPLE, "-o", tmp_path / "good.json")
    assert res.exit_code == 0, res.stderr
    return json.loads((tmp_path / "good.json").read_text())


def _every_ns(doc: dict, value) -> dict:
    for row in [doc["total"], *doc["devices"], *doc["steps"]]:
        for key in [k for k in row if k.endswith("_ns") and k not in ("start_ns", "end_ns")]:
            row[key] = value(row[key])
    return doc


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: _every_ns(d, lambda v: None), "total: span_ns is 0 or missing: the analysis holds no measured time"),
        (lambda d: _every_ns(d, lambda v: -v - 1), "total: accumulated_ns is -"),
        (lambda d: _every_ns(d, lambda v: 1e30), "total: accumulated_ns is 1e+30 ns: no measured time is past int64"),
        (
            lambda d: {**d, "total": {**d["total"], "comm_ns": 9e18, "accumulated_ns": 9e18}},
            "total: compute, comm, memcpy and other add up to 9,000,000,000,0",
        ),
        (
            lambda d: {**d, "devices": [{**d["devices"][0], "exposed_comm_ns": 2 * d["devices"][0]["comm_ns"]}]},
            "device node0/GPU:0: exposed_comm_ns (",
        ),
        (lambda d: {**d, "steps": [{**d["steps"][0], "idle_ns": -5}]}, "step "),
    ],
    ids=["empty", "negative", "1e30", "parts-past-the-whole", "exposed-past-comm", "negative-step"],
)
def test_a_baseline_whose_figures_no_run_measures_is_refused(tmp_path: Path, edit, said: str) -> None:
    """Accepted before: 5 of 6 gates failed against 0%, or passed against 7.3e24%."""
    doc = edit(_saved(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    before = bad.read_bytes()
    line = refused(invoke("check", GPU_SAMPLE, "--baseline", bad))
    assert line.startswith(f"moeprof: {bad}: {said}"), line
    assert bad.read_bytes() == before
    # the good baseline it was made from holds against its own trace
    assert invoke("check", GPU_SAMPLE, "--baseline", tmp_path / "good.json", "--tolerance", "0").exit_code == 0


def test_a_saved_analysis_of_real_figures_passes_the_check_of_its_figures() -> None:
    from moeprof.gate.check import figures_problem, read_analysis

    for saved in (SAMPLES / "cpu_moe_8dev" / "analysis.json",):
        assert figures_problem(read_analysis(saved)) is None


# ---------------------------------------------------------------- history, config


def _history(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    for limit in ("0.9", "0.1"):
        res = invoke("check", GPU_SAMPLE, "--max-comm-share", limit, "--history", db)
        assert res.exit_code in (0, 1), res.stderr
    return db


def test_history_json_is_strict_json_where_the_database_holds_infinities(tmp_path: Path) -> None:
    """SQLite holds inf (a damaged or hand-edited database): `history --json` printed a bare Infinity, the table
    a crash in its sparkline. A value that is no finite number is read as not recorded."""
    db = _history(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE figures SET value = 9e999 WHERE name = 'step_ms' AND run_id = 1")
        conn.execute("UPDATE figures SET value = -9e999 WHERE name = 'comm_share' AND run_id = 2")
        conn.execute("UPDATE gates SET value = 9e999 WHERE run_id = 2")
    res = invoke("history", db, "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    first, second = doc["runs"]
    assert "step_ms" not in first["figures"] and "step_ms" in second["figures"]
    assert "comm_share" in first["figures"] and "comm_share" not in second["figures"]
    assert second["gates"]["max-comm-share"]["value"] is None
    trend = {t["figure"]: t for t in doc["trends"]}
    assert trend["step_ms"]["values"][0] is None and trend["step_ms"]["first"] == second["figures"]["step_ms"]
    assert invoke("history", db).exit_code == 0


def test_history_of_a_folder_says_what_is_wrong(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert refused(invoke("history", empty)) == (
        f"moeprof: {empty}: an empty folder, not a history database: give the file that --history wrote (e.g. runs.db)"
    )
    holding = tmp_path / "ci"
    holding.mkdir()
    _history(holding)
    line = refused(invoke("history", holding))
    assert line.endswith("a folder, not a history database: give the file that --history wrote (this folder holds "
                         "runs.db)"), line  # fmt: skip
    assert refused(invoke("history", tmp_path / "none.db")) == f"moeprof: {tmp_path / 'none.db'}: no such file"


@pytest.mark.parametrize(
    "text",
    [
        "max_comm_share = 0.1\nmax-comm-share = 0.9\n",
        "[tool.moeprof.check]\nmax-idle-fraction = 0.5\nmax_idle_fraction = 0.2\n",
    ],
)
def test_a_config_that_gives_one_gate_twice_is_refused_naming_both(tmp_path: Path, text: str) -> None:
    """The later one was kept silently."""
    config = tmp_path / "gates.toml"
    config.write_text(text)
    first, second = [line.split(" = ")[0] for line in text.splitlines() if " = " in line]
    line = refused(invoke("check", GPU_SAMPLE, "--config", config))
    assert line == f"moeprof: {config}: {first!r} and {second!r} are the same setting, given twice: keep one", line
