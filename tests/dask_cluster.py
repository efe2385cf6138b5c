"""A real Dask cluster on 127.0.0.1 for the tests: ``dask scheduler`` and N ``dask worker`` processes.

.ci/run starts the same cluster in bash (and exports MOEPROF_TEST_SCHEDULER);
a developer's pytest run without that variable gets one from this module,
through the session fixture in conftest.py.

The scheduler takes port 0 (the OS picks a free one) and writes its address to
a scheduler file. Its settings keep the worker-crash test fast and exact: a
task that kills its worker fails at once (allowed-failures 0, instead of being
retried on three more workers), and a one-thread worker holds one task at a
time (worker-saturation 1.0), so a dying worker takes no innocent task with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEDULER_ARGS = ["--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
WORKER_ARGS = ["--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard", "--memory-limit", "0"]
SCHEDULER_SETTINGS = {
    "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
    "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "1.0",
}


@dataclass
class LocalCluster:
    address: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        """SIGTERM each process group (a worker's nanny and its worker), then SIGKILL what is left."""
        for p in self.processes:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.processes:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()


def _signal_group(p: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(p.pid, sig)  # started with start_new_session: its group id is its pid
    except ProcessLookupError:
        pass


def start(folder: Path, workers: int = 2, timeout_s: float = 60) -> LocalCluster:
    """Start a scheduler and ``workers`` one-thread workers; return once all workers have joined."""
    scheduler_file = folder / "scheduler.json"
    base_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # one Python for scheduler, workers and tests: the same packages on every side
    dask = [sys.executable, "-m", "dask"]
    cluster = LocalCluster("")
    try:
        cluster.processes.append(
            subprocess.Popen(
                [*dask, "scheduler", *SCHEDULER_ARGS, "--scheduler-file", str(scheduler_file)],
                env={**base_env, **SCHEDULER_SETTINGS},
                stdout=(folder / "scheduler.log").open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        for i in range(workers):
            scratch = str(folder / f"worker{i}")
            cluster.processes.append(
                subprocess.Popen(
                    [
                        *dask,
                        "worker",
                        *WORKER_ARGS,
                        "--scheduler-file",
                        str(scheduler_file),
                        "--local-directory",
                        scratch,
                    ],
                    env=base_env,
                    stdout=(folder / f"worker{i}.log").open("wb"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        cluster.address = wait_for_workers(scheduler_file, workers, timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def wait_for_workers(scheduler_file: Path, workers: int, timeout_s: float = 60) -> str:
    """The scheduler's address, once ``workers`` workers have joined it."""
    from distributed import Client

    deadline = time.monotonic() + timeout_s
    address = None
    while address is None:
        try:
            address = json.loads(scheduler_file.read_text())["address"]
        except (OSError, ValueError, KeyError):  # not written yet, or half written
            if time.monotonic() > deadline:
                raise TimeoutError(f"no Dask scheduler wrote {scheduler_file} within {timeout_s:.0f} s") from None
            time.sleep(0.05)
    with Client(address, timeout=timeout_s, set_as_default=False) as client:
        client.wait_for_workers(workers, timeout=max(1.0, deadline - time.monotonic()))
    return address


if __name__ == "__main__":
    # .ci/run: python -m tests.dask_cluster SCHEDULER_FILE N: wait for N workers, print the address
    print(wait_for_workers(Path(sys.argv[1]), int(sys.argv[2])))
