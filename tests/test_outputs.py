"""Every file moeprof writes is written whole or not at all (moeprof.outputs, issue 49): a full disk part-way
through a report, an annotated trace, an event table, a critical path, a baseline, a JUnit report or a history
database leaves the file that was there as it was, and nothing beside it.

A full disk without root: the command runs in a child under ``RLIMIT_FSIZE`` (with SIGXFSZ ignored, a write
past the limit fails with EFBIG, "File too large", as a write to a full disk fails with ENOSPC)."""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from moeprof.errors import UNFORESEEN
from moeprof.outputs import TEMPORARY_MARK, cannot_write, replacing, write_bytes

from .helpers import SAMPLES, moeprof_here

GPU_SAMPLE = SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb"  # read without a temporary file
GOOD = b"a good file written before\n"
FULL_AT = 2000  # bytes: every output below is larger, every input read and scratch file of these runs smaller


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ---------------------------------------------------------------- the helper


def test_a_write_replaces_the_file_whole_and_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_bytes(GOOD)
    target.chmod(0o600)
    write_bytes(target, b"new")
    assert target.read_bytes() == b"new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert _listing(tmp_path) == ["report.html"]
    fresh = tmp_path / "fresh.html"
    umask = os.umask(0o022)
    os.umask(umask)
    write_bytes(fresh, b"x")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask  # as a plain open would make it


def test_a_link_stays_a_link_and_its_target_takes_the_bytes(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_bytes(GOOD)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_bytes(link, b"{}")
    assert link.is_symlink() and real.read_bytes() == b"{}"
    assert _listing(tmp_path) == ["link.json", "real.json"]


@pytest.mark.parametrize("stop", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_write_that_stops_part_way_leaves_the_old_file_and_nothing_beside_it(tmp_path: Path, stop) -> None:
    target = tmp_path / "events.parquet"
    target.write_bytes(GOOD)
    with pytest.raises(type(stop)), replacing(target) as into:
        into.write_bytes(b"half of the new")
        assert TEMPORARY_MARK in into.name and into.parent == tmp_path
        raise stop
    assert target.read_bytes() == GOOD and _listing(tmp_path) == ["events.parquet"]


def test_what_is_no_regular_file_is_written_as_it_is(tmp_path: Path) -> None:
    with replacing(Path(os.devnull)) as into:
        assert into == Path(os.devnull)
        into.write_bytes(b"x")
    assert cannot_write(tmp_path / "x", OSError(27, "Error writing bytes to file. Detail: [errno 27] File too large"))
    assert str(cannot_write(Path("x"), OSError(27, "pyarrow's words"))) == "x: cannot write: File too large"


# ---------------------------------------------------------------- every command, on a full disk


def _moeprof(tmp_path: Path, *args: str | Path, full: bool = True, room: int = FULL_AT) -> subprocess.CompletedProcess:
    """``python -m moeprof ARGS`` in ``tmp_path`` (its TMPDIR ``tmp_path/tmp``); ``full``: on a disk with ``room``
    bytes left for each file (a child's resource limit). With room, the command runs in this process (tests/helpers.py
    moeprof_here, its temporary files in the same folder): only the limit needs a process of its own."""

    def full_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (room, room))

    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    if not full:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(tempfile, "tempdir", str(scratch))
            return moeprof_here(list(args), tmp_path, {"TMPDIR": str(scratch)})
    return subprocess.run(
        [sys.executable, "-m", "moeprof", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        # no bytecode: CPython writes a .pyc with one unchecked write(), so under the limit it would rename a
        # truncated one into the checkout's __pycache__, and every later import of that module (the module only
        # this command imports, in every test after it) fails with "marshal data too short"
        env={**os.environ, "TMPDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1"},
        preexec_fn=full_disk,
    )


def _refused_for_the_disk(res: subprocess.CompletedProcess, path: Path, what: str = "") -> None:
    assert res.returncode == 2, (res.returncode, res.stdout[-300:], res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert lines == [f"moeprof: {path}: cannot write{what}: File too large"], res.stderr
    assert UNFORESEEN not in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("r.html", ["report", GPU_SAMPLE, "-o"]),
        ("a.json", ["annotate", GPU_SAMPLE, "-o"]),
        ("a.trace.json.gz", ["annotate", GPU_SAMPLE, "-o"]),
        ("e.parquet", ["events", GPU_SAMPLE, "-o"]),
        ("e.csv", ["events", GPU_SAMPLE, "-o"]),
        ("cp.parquet", ["analyze", GPU_SAMPLE, "--critical-path"]),
        ("base.json", ["baseline", "save", GPU_SAMPLE, "-o"]),
    ],
)
def test_a_full_disk_leaves_the_file_that_was_there(tmp_path: Path, name: str, args: list) -> None:
    """It was truncated at the disk's end (report, annotate, baseline) or removed (events, critical path)."""
    target = tmp_path / name
    target.write_bytes(GOOD)
    _refused_for_the_disk(_moeprof(tmp_path, *args, name), Path(name))
    assert target.read_bytes() == GOOD
    assert _listing(tmp_path) == sorted([name, "tmp"]) and _listing(tmp_path / "tmp") == []
    # with room, the same command replaces it
    assert _moeprof(tmp_path, *args, name, full=False).returncode == 0
    assert target.read_bytes() != GOOD and _listing(tmp_path) == sorted([name, "tmp"])


@pytest.mark.slow
def test_a_full_disk_leaves_no_junit_report_half_written(tmp_path: Path) -> None:
    target = tmp_path / "gates.xml"
    target.write_bytes(GOOD)
    gates = ["--max-comm-share", "0.9", "--max-idle-fraction", "0.9"]  # a report of about 600 bytes
    res = _moeprof(tmp_path, "check", GPU_SAMPLE, *gates, "--junit", "gates.xml", room=300)
    _refused_for_the_disk(res, Path("gates.xml"), " the JUnit report")
    assert target.read_bytes() == GOOD and _listing(tmp_path) == ["gates.xml", "tmp"]


@pytest.mark.slow
def test_a_full_scratch_disk_does_not_stop_a_read(tmp_path: Path) -> None:
    """The XPlane reader keeps jaxlib's native log in a scratch file: with no room for one (not even the few
    bytes tempfile probes a folder with) the read went to the catch-all; the log is now dropped instead."""
    res = _moeprof(tmp_path, "analyze", GPU_SAMPLE, "--json", room=0)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["schema"] == "moeprof.analysis/1"


@pytest.mark.slow
def test_a_full_disk_leaves_no_stub_history_database(tmp_path: Path) -> None:
    """It said "not a usable history database: disk I/O error" (or SQLite's "cannot rollback - no transaction is
    active") and left a stub database of 0 to 28,672 bytes, with its -wal and -shm."""
    gate = ["--max-comm-share", "0.9"]
    res = _moeprof(tmp_path, "check", GPU_SAMPLE, *gate, "--history", "runs.db")
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "moeprof: runs.db: cannot write the history database: disk I/O error (is the disk full?)"
    ], res.stderr
    assert _listing(tmp_path) == ["tmp"] and _listing(tmp_path / "tmp") == []
    # an existing database keeps every run it held; the next run with room appends to it
    assert _moeprof(tmp_path, "check", GPU_SAMPLE, *gate, "--history", "runs.db", full=False).returncode == 0
    res = _moeprof(tmp_path, "check", GPU_SAMPLE, *gate, "--history", "runs.db")
    assert res.returncode == 2 and "cannot write the history database: disk I/O error" in res.stderr, res.stderr
    conn = sqlite3.connect(tmp_path / "runs.db")
    try:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    finally:
        conn.close()
    assert _moeprof(tmp_path, "check", GPU_SAMPLE, *gate, "--history", "runs.db", full=False).returncode == 0
    doc = json.loads(_moeprof(tmp_path, "history", "runs.db", "--json", full=False).stdout)
    assert [r["id"] for r in doc["runs"]] == [1, 2]
    assert _listing(tmp_path) == ["runs.db", "tmp"]  # its WAL files gone with the last connection
