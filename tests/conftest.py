"""Shared fixtures: where the samples and the shared real traces live; a fuzz result as a test's verdict."""

from __future__ import annotations

import os
from collections.abc import Iterator
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
