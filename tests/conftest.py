"""Shared fixtures: where the samples and the shared real traces live; the bad-input contract as one assertion; a
fuzz result as a test's verdict."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .fuzz.engine import Result

# pytest-xdist gives each worker the controller's terminal width as COLUMNS (80 when piped), where a serial
# run has none: the CLI's width rules (a piped report is wide) would then differ between the two. Drop it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
SHARED_TRACES = ROOT.parent / "shared" / "traces"


def shared_trace(relative: str) -> Path:
    """A file under ../shared/traces, or skip: a fresh clone has no ../shared."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"{path} not present (../shared/traces is only beside the project's own checkout)")
    return path


def assert_refused(path: Path, *said: str, listing: Iterable[str] | None = None) -> None:
    """``python -m moeprof analyze PATH`` keeps the bad-input contract: exit 2, one line on stderr naming PATH and
    each of ``said``, no traceback; the file unchanged, its folder holding ``listing`` (default: what it holds now)."""
    before = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    names = sorted(p.name for p in path.parent.iterdir()) if listing is None else sorted(listing)
    res = subprocess.run(
        [sys.executable, "-m", "moeprof", "analyze", str(path)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert str(path) in lines[0], lines[0]
    for s in said:
        assert s in lines[0], lines[0]
    if before is not None:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in path.parent.iterdir()) == names


def judge_fuzz_result(result: Result) -> None:
    """A fuzz case's verdict: passes, xfails where known classes explain every violation, else fails with its
    report (the replay command in it)."""
    if result.ok:
        return
    if result.known and not result.unexplained:
        pytest.xfail(f"known: {', '.join(k.id for k in result.known)} (case {result.case.key})")
    pytest.fail(result.report(), pytrace=False)


@pytest.fixture
def samples() -> Path:
    return SAMPLES


@pytest.fixture(scope="session")
def dask_scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Address of a real Dask scheduler with 2 workers on 127.0.0.1.

    CI's .ci/run starts one and exports MOEPROF_TEST_SCHEDULER; otherwise this
    fixture starts its own (tests/dask_cluster.py) and stops it at the end.
    """
    address = os.environ.get("MOEPROF_TEST_SCHEDULER")
    if address:
        yield address
        return
    pytest.importorskip("distributed", reason="dask.distributed is not installed")
    from .dask_cluster import start

    cluster = start(tmp_path_factory.mktemp("dask"), workers=2)
    try:
        yield cluster.address
    finally:
        cluster.stop()
