"""A history of runs in SQLite: what ``--history runs.db`` appends and ``moeprof history`` reads.

Several CI jobs may append to the same database at once, so every run is one
``BEGIN IMMEDIATE`` transaction (the write lock is taken up front: a read lock
upgraded later could fail with SQLITE_BUSY without waiting), the database is in
WAL mode (readers never block the writer), and a busy timeout plus a bounded
retry absorb the rest of the contention.

A write that fails (a full disk) leaves the database as it was: an existing one is protected by its
transaction; a new one is built beside its name and takes it only once it holds its first run
(:func:`_append_new`), so a failure leaves no half-made database behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import secrets
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from ..core.analysis import Analysis
from ..errors import InputError
from ..outputs import TEMPORARY_MARK, cannot_write
from ..readers.marks import HISTORY_APPLICATION_ID
from ..readers.sqlite_files import one_line, open_read_only
from .check import FIGURES, LEDGER_FIGURES, PROJECTION_FIGURES, GateResult, measure, step_count, step_time_ns

BUSY_TIMEOUT_S = 30.0
RETRY_DEADLINE_S = 120.0
SCHEMA_VERSION = 1
T = TypeVar("T")

_DDL = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time_utc TEXT NOT NULL,
    command TEXT NOT NULL,
    git_commit TEXT,
    inputs TEXT NOT NULL,
    passed INTEGER
);
CREATE TABLE IF NOT EXISTS figures (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    value REAL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS gates (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    figure TEXT NOT NULL,
    value REAL,
    limit_value REAL,
    passed INTEGER NOT NULL,
    device TEXT,
    message TEXT,
    PRIMARY KEY (run_id, name)
);
"""

# figures shown by ``moeprof history``, in this order; unit from the name
FIGURE_ORDER = (
    "comm_share",
    "exposed_comm_fraction",
    "idle_fraction",
    "exposed_comm_ms",
    "step_ms",
    "tokens_per_second",
    "tflops_per_device",
    "devices",
    "accumulated_ns",
    "compute_ns",
    "comm_ns",
    "comm_ib_ns",
    "exposed_comm_ns",
    "idle_ns",
    "span_ns",
)
SPARKS = "▁▂▃▄▅▆▇█"


def git_commit(cwd: Path | None = None, timeout_s: float = 5.0) -> str | None:
    """HEAD of the git checkout around ``cwd``, or None (no git, not a checkout, or too slow)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None


def key_figures(analysis: Analysis) -> dict[str, float]:
    """The total's figures a trend needs: the gate figures, the step time, a few totals, throughput."""
    total = analysis.total
    out: dict[str, float] = {
        name: measure(analysis, name).value
        for name in FIGURES
        if (analysis.ledger_matched or name not in LEDGER_FIGURES)  # nothing matched: no split, not a zero
        and name not in PROJECTION_FIGURES  # a projection, not a measured figure of the run
    }
    out["step_ms"] = step_time_ns(analysis) / 1e6
    out["steps"] = float(step_count(analysis))
    out["devices"] = float(len(analysis.devices))
    for key in ("accumulated_ns", "compute_ns", "comm_ns", "comm_ib_ns", "exposed_comm_ns", "idle_ns", "span_ns"):
        out[key] = total.value(key)
    throughput = analysis.throughput or {}
    for key, value in (
        ("tokens_per_second", throughput.get("tokens_per_second")),
        ("tflops_per_device", throughput.get("tflops_per_device")),
    ):
        if value is not None:
            out[key] = float(value)
    return out


def _retry(fn: Callable[[], T], deadline_s: float = RETRY_DEADLINE_S) -> T:
    """Run ``fn`` again while SQLite says the database is locked or busy (past the busy timeout)."""
    end = time.monotonic() + deadline_s
    delay = 0.01
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() > end:
                raise
        time.sleep(delay * (1 + random.random()))  # jitter: writers that collided do not collide again
        delay = min(delay * 2, 1.0)


def database_uri(path: Path, mode: str = "rwc") -> str:
    """The SQLite URI of the file ``path``.

    ``as_uri()`` percent-encodes what a URI would otherwise read as its query (``?``), fragment
    (``#``) or an escape (``%``), and spaces: ``f"file:{path}"`` would open ``runs`` for ``runs#1.db``.
    """
    return f"{Path(path).absolute().as_uri()}?mode={mode}"


# SQLite's answers where the disk, not the database, is at fault: a write that failed (a full disk, a file-size
# limit: "disk I/O error"), or a file or folder it may not write or open
_DISK_FULL = ("SQLITE_IOERR", "SQLITE_FULL")
_CANNOT_WRITE = (*_DISK_FULL, "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")


def _refusal(path: Path, exc: Exception, what: str) -> InputError:
    """One line for an SQLite failure on ``path``: the disk's (``cannot write the history database: disk I/O
    error (is the disk full?)``), else the database's (``what``: "not a usable history database")."""
    name = str(getattr(exc, "sqlite_errorname", ""))
    if name.startswith(_CANNOT_WRITE):
        full = " (is the disk full?)" if name.startswith(_DISK_FULL) else ""
        return InputError(path, f"cannot write the history database: {one_line(exc)}{full}")
    return InputError(path, f"{what}: {one_line(exc)}")


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) a history database in WAL mode with a busy timeout."""
    try:
        conn = sqlite3.connect(database_uri(path), uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise _refusal(path, exc, "cannot open the history database") from None
    try:
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        # switching to WAL takes an exclusive lock: retried like any write
        _retry(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone())
        conn.execute("PRAGMA synchronous=NORMAL")
        _retry(lambda: _create(conn))
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # see readers.sqlite_files.SQLITE_ERRORS
        conn.close()
        raise _refusal(path, exc, "not a usable history database") from None
    return conn


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` .. ``COMMIT``, rolled back where the block raises. SQLite may have rolled back
    itself (a COMMIT that met a full disk): then there is nothing to roll back, and the error that ended the
    transaction is the one said, not "cannot rollback - no transaction is active"."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


def _create(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
        return
    with _transaction(conn):
        for statement in _DDL.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        # the mark that keeps the database from being read as an Nsight export (readers.marks)
        conn.execute(f"PRAGMA application_id={HISTORY_APPLICATION_ID}")


@dataclass
class RunRecord:
    command: str  # "analyze" or "check"
    inputs: list[str]
    figures: dict[str, float]
    gates: list[GateResult] = field(default_factory=list)
    passed: bool | None = None  # check runs only
    time_utc: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    git_commit: str | None = None


def append(path: Path, record: RunRecord) -> int:
    """Append one run in one transaction; returns its id. A database that does not exist yet is made whole
    beside its name first (:func:`_append_new`)."""
    if not os.path.lexists(path):
        run_id = _append_new(path, record)
        if run_id is not None:
            return run_id
    conn = connect(path)
    try:
        return _retry(lambda: _insert(conn, record))
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise _refusal(path, exc, "cannot write the history database") from None
    finally:
        conn.close()


def _append_new(path: Path, record: RunRecord) -> int | None:
    """A new database holding ``record`` as its first run, built in a file beside ``path`` that takes the name
    only when whole (a hard link: never over a database another run made meanwhile; then None, and the run is
    appended to that one). Whatever fails, nothing is left: the name never held a half-made database."""
    temporary = path.with_name(f".{path.name}{TEMPORARY_MARK}{secrets.token_hex(4)}")
    try:
        try:
            conn = sqlite3.connect(database_uri(temporary), uri=True, isolation_level=None)
            try:
                _create(conn)
                run_id = _insert(conn, record)
                # WAL from its first use (a rollback journal until then: every byte is in the file itself)
                conn.execute("PRAGMA journal_mode=WAL").fetchone()
            finally:
                conn.close()
            fd = os.open(temporary, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise _refusal(path, exc, "cannot write the history database") from None
        except OSError as exc:
            raise cannot_write(path, exc, " the history database") from None
        try:
            os.link(temporary, path)
        except FileExistsError:
            return None
        except OSError as exc:
            raise cannot_write(path, exc, " the history database") from None
        return run_id
    finally:
        for leftover in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(f"{temporary}{leftover}")


def _insert(conn: sqlite3.Connection, r: RunRecord) -> int:
    with _transaction(conn):
        cur = conn.execute(
            "INSERT INTO runs (time_utc, command, git_commit, inputs, passed) VALUES (?, ?, ?, ?, ?)",
            (r.time_utc, r.command, r.git_commit, json.dumps(r.inputs), None if r.passed is None else int(r.passed)),
        )
        run_id = int(cur.lastrowid or 0)
        conn.executemany(
            "INSERT INTO figures (run_id, name, value) VALUES (?, ?, ?)",
            [(run_id, k, v) for k, v in r.figures.items() if _finite(v) is not None],  # inf is no figure
        )
        conn.executemany(
            "INSERT INTO gates (run_id, name, figure, value, limit_value, passed, device, message)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (run_id, g.name, g.figure, _finite(g.value), _finite(g.limit), int(g.passed), g.device, g.message)
                for g in r.gates
            ],
        )
    return run_id


def record_run(
    path: Path,
    command: str,
    analysis: Analysis,
    gates: list[GateResult] | None = None,
    passed: bool | None = None,
    cwd: Path | None = None,
) -> int:
    """What ``--history`` does: the run's figures (and gate results) with time, commit and inputs."""
    if analysis.timeline_free:  # its §4 figures are unknown: a history of zeros would be a false trend
        what = analysis.HOST_ONLY if analysis.host_only else "NCCL Inspector logs"
        raise InputError(path, f"--history records the §4 figures; {what} have none (no timeline): nothing recorded")
    record = RunRecord(
        command=command,
        inputs=list(analysis.inputs),
        figures=key_figures(analysis),
        gates=gates or [],
        passed=passed,
        git_commit=git_commit(cwd),
    )
    return append(path, record)


# ---------------------------------------------------------------- reading


@dataclass
class Run:
    id: int
    time_utc: str
    command: str
    git_commit: str | None
    inputs: list[str]
    passed: bool | None
    figures: dict[str, float] = field(default_factory=dict)
    gates: dict[str, dict] = field(default_factory=dict)


def read_runs(path: Path, last: int | None = None) -> list[Run]:
    """Runs in the order they were appended (the last ``last`` of them). A figure or a gate's value that is
    not a finite number (a damaged or hand-edited database: SQLite holds inf) is read as not recorded: the JSON
    says null, never a bare ``Infinity``."""
    if path.is_dir():
        raise InputError(path, _folder_problem(path))
    if not path.is_file():
        raise InputError(path, "no such file")
    # read as an immutable file (or a copy with its pending WAL, in scratch): reading never writes -wal and
    # -shm files beside the database, which a plain read-only connection to a WAL database does
    with open_read_only(path, path, "moeprof-history-") as conn:
        try:
            return _runs(conn, path, last)
        finally:
            conn.close()


def _runs(conn: sqlite3.Connection, path: Path, last: int | None) -> list[Run]:
    """The runs of the open database ``path`` (:func:`read_runs`)."""
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"runs", "figures", "gates"} <= tables:
            raise InputError(path, "not a moeprof history database (no runs table)")
        limit = -1 if last is None else int(last)
        rows = conn.execute(
            "SELECT id, time_utc, command, git_commit, inputs, passed FROM"
            " (SELECT * FROM runs ORDER BY id DESC LIMIT ?) ORDER BY id",
            (limit,),
        ).fetchall()
        runs = {
            r[0]: Run(r[0], r[1], r[2], r[3], json.loads(r[4] or "[]"), None if r[5] is None else bool(r[5]))
            for r in rows
        }
        if runs:
            first = min(runs)
            for run_id, name, value in conn.execute(
                "SELECT run_id, name, value FROM figures WHERE run_id >= ?", (first,)
            ):
                if run_id in runs and _finite(value) is not None:
                    runs[run_id].figures[name] = value
            for run_id, name, figure, value, limit_value, passed, device, message in conn.execute(
                "SELECT run_id, name, figure, value, limit_value, passed, device, message FROM gates WHERE run_id >= ?",
                (first,),
            ):
                if run_id in runs:
                    runs[run_id].gates[name] = {
                        "figure": figure,
                        "value": _finite(value),
                        "limit": _finite(limit_value),
                        "passed": bool(passed),
                        "device": device,
                        "message": message,
                    }
        return list(runs.values())
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"not a moeprof history database ({exc})") from None
    except ValueError as exc:  # SQLite's message quoting a name that is not UTF-8; a row's inputs that are no JSON
        raise InputError(path, f"a damaged moeprof history database ({one_line(exc)})") from None


def _finite(value: object) -> float | None:
    """A number SQLite returned, None where it is no finite number (NULL, inf, nan, text)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _folder_problem(folder: Path) -> str:
    """What is wrong with a folder given as the history database, and which file in it may be the one meant."""
    try:
        names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in (".db", ".sqlite", ".sqlite3"))
        empty = not any(folder.iterdir())
    except OSError as exc:
        return f"a folder, not a history database (and it cannot be listed: {exc.strerror or exc})"
    if empty:
        return "an empty folder, not a history database: give the file that --history wrote (e.g. runs.db)"
    if names:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return f"a folder, not a history database: give the file that --history wrote (this folder holds {shown})"
    return "a folder holding no history database: give the file that --history wrote (e.g. runs.db)"


def last_flip(path: Path) -> dict | None:
    """The most recent check run where a gate failed that had passed in the previous check run with it."""
    runs = [r for r in read_runs(path) if r.command == "check"]
    state: dict[str, tuple[bool, int]] = {}  # gate -> (passed, run id) as of the last check run with it
    flip: dict | None = None
    for run in runs:
        flipped = []
        for name, gate in run.gates.items():
            before = state.get(name)
            if before is not None and before[0] and not gate["passed"]:
                flipped.append({"gate": name, "previous_run": before[1], **gate})
            state[name] = (gate["passed"], run.id)
        if flipped:
            flip = {"run": run.id, "time_utc": run.time_utc, "git_commit": run.git_commit, "gates": flipped}
    return flip


def sparkline(values: list[float | None]) -> str:
    """One block character per value, scaled from the smallest to the largest (blank where missing)."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        elif hi == lo:
            out.append(SPARKS[len(SPARKS) // 2 - 1])
        else:
            out.append(SPARKS[min(len(SPARKS) - 1, int((v - lo) / (hi - lo) * len(SPARKS)))])
    return "".join(out)


def trends(runs: list[Run]) -> list[dict]:
    """Per figure: its values over ``runs`` (None where a run lacks it), first, last, min, max, sparkline."""
    names = [n for n in FIGURE_ORDER if any(n in r.figures for r in runs)]
    names += sorted({n for r in runs for n in r.figures} - set(names) - {"steps"})
    out = []
    for name in names:
        values = [r.figures.get(name) for r in runs]
        known = [v for v in values if v is not None]
        out.append(
            {
                "figure": name,
                "values": values,
                "first": known[0],
                "last": known[-1],
                "min": min(known),
                "max": max(known),
                "sparkline": sparkline(values),
            }
        )
    return out


def history_doc(runs: list[Run], trends_rows: list[dict], flip: dict | None) -> dict:
    """The ``moeprof.history/1`` object: the runs, each figure's trend, the last gate flip."""
    return {
        "schema": "moeprof.history/1",
        "runs": [
            {
                "id": r.id,
                "time_utc": r.time_utc,
                "command": r.command,
                "git_commit": r.git_commit,
                "inputs": r.inputs,
                "passed": r.passed,
                "figures": r.figures,
                "gates": r.gates,
            }
            for r in runs
        ],
        "trends": trends_rows,
        "last_flip": flip,
    }
