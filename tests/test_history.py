"""The run history: concurrent writers, what analyze/check append, trends and the last gate flip."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core.analysis import Analysis
from moeprof.gate.check import GateResult
from moeprof.gate.history import record_run, sparkline

from .helpers import SAMPLES

runner = CliRunner()
SAVED = SAMPLES / "cpu_moe_8dev" / "analysis.json"
SYNTH = SAMPLES / "synthetic_1host_8gpu"


def invoke(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


def _writer(db: str, runs: int, tag: str, start) -> None:
    analysis = Analysis.from_json(json.loads(SAVED.read_text()))
    start.wait(timeout=60)  # both writers begin together, so their transactions really interleave
    for i in range(runs):
        gate = GateResult("max-comm-share", "comm_share", "ratio", 0.5, 0.6, i % 2 == 0, "vm/CPU:0", None, None, tag)
        record_run(Path(db), "check", analysis, [gate], gate.passed)


@pytest.mark.slow
def test_two_writer_processes_append_every_run(tmp_path):
    db = tmp_path / "runs.db"
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters, as two CI jobs would be
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(str(db), 50, tag, start)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (100,)
        assert conn.execute("SELECT count(*) FROM gates").fetchone() == (100,)
        per_run = conn.execute("SELECT count(DISTINCT run_id), count(*) FROM figures").fetchone()
        assert per_run[0] == 100 and per_run[1] % 100 == 0  # every run has all its figures: one transaction each
        tags = conn.execute("SELECT message, count(*) FROM gates GROUP BY message ORDER BY message").fetchall()
        assert tags == [("a", 50), ("b", 50)]
    finally:
        conn.close()


def _git_checkout(folder: Path) -> str | None:
    if shutil.which("git") is None:
        return None
    run = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run([*run, "-C", str(folder), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    return subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.slow
def test_analyze_and_check_append_and_history_shows_the_last_flip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    commit = _git_checkout(tmp_path)
    db = tmp_path / "runs.db"
    share = json.loads(invoke("analyze", SYNTH, "--json").stdout)["total"]["comm_share"]
    assert invoke("analyze", SYNTH, "--history", db).exit_code == 0
    # pass, fail (flip), pass, fail (flip: the one to report), fail (no flip)
    limits = [share + 0.1, share - 0.1, share + 0.1, share - 0.1, share - 0.1]
    codes = [invoke("check", SYNTH, "--max-comm-share", repr(x), "--history", db).exit_code for x in limits]
    assert codes == [0, 1, 0, 1, 1]

    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT id, command, passed, git_commit, time_utc, inputs FROM runs ORDER BY id").fetchall()
    conn.close()
    assert [(r[1], r[2]) for r in rows] == [("analyze", None), ("check", 1), ("check", 0), ("check", 1)] + [
        ("check", 0)
    ] * 2
    assert all(r[3] == commit for r in rows)
    assert all(r[4].endswith("Z") for r in rows)
    assert json.loads(rows[0][5]) == [str(SYNTH / "node0.xplane.pb")]

    res = invoke("history", db, "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert len(doc["runs"]) == 6
    flip = doc["last_flip"]
    assert flip["run"] == rows[4][0] and [g["gate"] for g in flip["gates"]] == ["max-comm-share"]
    assert flip["gates"][0]["previous_run"] == rows[3][0] and flip["git_commit"] == commit
    trend = {t["figure"]: t for t in doc["trends"]}
    assert trend["comm_share"]["values"] == pytest.approx([share] * 6)
    assert len(trend["comm_share"]["sparkline"]) == 6

    res = invoke("history", db, "--last", "3")
    assert res.exit_code == 0, res.stderr
    assert "comm_share" in res.stdout and "last gate flip" in res.stdout and f"run #{rows[4][0]}" in res.stdout
    doc = json.loads(invoke("history", db, "--last", "2", "--json").stdout)
    assert [r["id"] for r in doc["runs"]] == [rows[4][0], rows[5][0]]


def test_sparkline():
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([2.0, 2.0, 2.0]) == "▄▄▄"
    assert sparkline([0.0, None, 1.0]) == "▁ █"
    assert sparkline([]) == ""


@pytest.mark.slow
def test_history_bad_input(tmp_path):
    def error(res) -> str:
        assert res.exit_code == 2, (res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("moeprof: ")
        return lines[0]

    assert "no such file" in error(invoke("history", tmp_path / "missing.db"))
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    assert "junk.db" in error(invoke("history", junk))
    empty = tmp_path / "other.db"
    sqlite3.connect(empty).execute("CREATE TABLE t (x)").connection.close()
    assert "not a moeprof history" in error(invoke("history", empty))
    assert "junk.db" in error(invoke("analyze", SYNTH, "--history", junk))
    line = error(invoke("check", SYNTH, "--max-comm-share", "1", "--history", tmp_path / "no" / "dir" / "r.db"))
    assert "r.db" in line


@pytest.mark.slow
@pytest.mark.parametrize("name", ["runs#1.db", "what?.db", "100%.db", "a%20b.db", "my runs.db", "x?mode=ro#y.db"])
def test_history_paths_with_uri_characters(tmp_path, monkeypatch, name):
    """A SQLite URI reads '?' as its query, '#' as its fragment and '%' as an escape: the file named
    is the one written and read back, and nothing else appears in the working directory."""
    monkeypatch.chdir(tmp_path)
    assert invoke("analyze", SYNTH, "--history", name).exit_code == 0
    assert invoke("check", SYNTH, "--max-comm-share", "1", "--history", name).exit_code == 0
    res = invoke("history", name, "--json")
    assert res.exit_code == 0, res.stderr
    assert [r["command"] for r in json.loads(res.stdout)["runs"]] == ["analyze", "check"]
    # the literal file holds both runs (a plain, non-URI open reads the name as it is)
    conn = sqlite3.connect(tmp_path / name)
    assert conn.execute("SELECT command FROM runs ORDER BY id").fetchall() == [("analyze",), ("check",)]
    conn.close()
    assert {p.name for p in tmp_path.iterdir()} <= {name, f"{name}-wal", f"{name}-shm"}
