"""Shared fixtures: the samples folder, a real Dask cluster. What tests import (paths, builders, the bad-input
contract) is in tests/helpers.py."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import CPU_COMPILE_FLAGS, SAMPLES

# pytest-xdist gives each worker the controller's terminal width as COLUMNS (80 when piped), where a serial
# run has none: the CLI's width rules (a piped report is wide) would then differ between the two. Drop it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)

# every JAX process the tests start inherits it (helpers.CPU_COMPILE_FLAGS says why)
if CPU_COMPILE_FLAGS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {CPU_COMPILE_FLAGS}".strip()


def _ignore_hangup(signum: int, frame: object) -> None:
    """The suite goes on when its terminal closes (as under ``nohup``)."""


# Tests send real SIGINT and SIGHUP to the programs they start, which must meet them as from a terminal. Run in a
# shell's background job or under ``nohup``, the suite starts with them ignored, and an ignored signal stays ignored
# in every child (Python then installs no Ctrl-C handler; moeprof keeps an ignored SIGHUP ignored, as nohup asks).
# A handler is reset to the default in a child at exec, so the suite handles them instead of ignoring them.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, _ignore_hangup)


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


# fixtures that cost tens of seconds (a demo run in a child JAX process, a Dask cluster): a test that takes one
# is slow whatever its own time, and leaves the edit loop (python -m pytest -m "not slow")
SLOW_FIXTURES = frozenset({"child", "child_dir", "capacity_run", "dask_scheduler"})


# module fixtures that cost tens of seconds of one process (a JAX child): their tests are collected first, so
# that pytest-xdist's first chunk of consecutive tests (a quarter of a worker's share) sends all of them to one
# worker, which makes the fixture once and at the start, beside the rest of the suite rather than after it
# (pytest-xdist's loadgroup would say it, but its group rides on item._nodeid, which pytest 9.2 no longer reads)
FIRST_FIXTURES = frozenset({"child", "capacity_run"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first: list[pytest.Item] = []
    rest: list[pytest.Item] = []
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if SLOW_FIXTURES & names:
            item.add_marker(pytest.mark.slow)
        (first if FIRST_FIXTURES & names else rest).append(item)
    items[:] = first + rest
