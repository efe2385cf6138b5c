"""Run the per-file map: in this process, in a local process pool, or on a Dask cluster.

``map_files(fn, items, on_result=...)`` calls ``fn(item)`` once per trace file and
hands each result to ``on_result(index, value)`` as soon as it is ready, so the
caller merges incrementally and never holds every per-file result at once.
Results arrive in completion order; ``index`` is the item's position in
``items``, which is all a caller needs to lay them out in input order.

Executors:

- in-process: one file, or ``jobs=1``;
- local pool (the default): ``jobs`` worker processes of our own (not
  ``ProcessPoolExecutor``, whose one dead worker breaks the whole pool without
  saying which file killed it: here each worker holds one file at a time, so a
  worker that dies names its file);
- Dask: ``scheduler="tcp://host:8786"`` (or a scheduler JSON file) sends one
  task per file to ``dask.distributed`` workers, which read the files themselves
  (paths must be visible to them, or URLs: see ``moeprof.readers.sources``).

Errors: a file's :class:`InputError` travels back intact. By default the first
one stops everything and is raised (one line naming the file); with
``skip_bad=True`` it is recorded as a :class:`SkippedFile` and the rest goes on.
A worker that dies (killed, out of memory) is reported the same way, by file.
An InputError without a path (a bad option) stops the run even with
``skip_bad``: every file would fail alike. Any other exception is a bug: it is
raised with a note naming the file. Ctrl-C cancels the pending work.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import tempfile
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from ..errors import InputError
from ..workers import (
    end_work_in,
    own_process,
    process_is_owned,
    sigint_ignored,
    start_fork_server,
    start_method,
    unblock_sigint,
    usable_cores,
    work_in,
)

T = TypeVar("T")
R = TypeVar("R")

SCHEDULER_ENV = "MOEPROF_SCHEDULER"
CONNECT_TIMEOUT_S = 10  # a scheduler address that does not answer fails in one line, not a hang


@dataclass(frozen=True)
class SkippedFile:
    """A file left out with ``skip_bad``: its position in the inputs, its name, and why."""

    index: int
    file: str
    problem: str


def resolve_scheduler(option: str | None) -> str | None:
    """The Dask scheduler to use: the ``--scheduler`` option, else ``$MOEPROF_SCHEDULER``, else None (local)."""
    return option or os.environ.get(SCHEDULER_ENV) or None


def default_jobs(n_items: int) -> int:
    """Worker processes for the local pool: one per usable core, never more than there are files."""
    return max(1, min(n_items, usable_cores()))


def concurrent_files(n_items: int, jobs: int | None, scheduler: str | None) -> int | None:
    """How many files :func:`map_files` reads at once on this machine: 1 inline, the pool's size, or
    None on a Dask cluster (its workers' cores are not this machine's)."""
    if scheduler:
        return None
    jobs = default_jobs(n_items) if jobs is None else max(1, jobs)
    return 1 if jobs == 1 or n_items <= 1 else min(jobs, n_items)


def describe(item: object) -> str:
    """The file an item stands for: the item itself, or the first field of a task tuple."""
    if isinstance(item, tuple) and item:
        return str(item[0])
    return str(item)


def map_files(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    on_result: Callable[[int, R], None],
    scheduler: str | None = None,
    jobs: int | None = None,
    skip_bad: bool = False,
    on_skip: Callable[[SkippedFile], None] | None = None,
    name: Callable[[T], str] = describe,
) -> list[SkippedFile]:
    """Call ``fn`` on every item, streaming ``on_result(index, value)`` in completion order.

    ``fn`` and the items must pickle (``fn`` by reference: a module-level function).
    Returns the files skipped with ``skip_bad`` (empty otherwise), in input order.
    """
    settle = _Settler(skip_bad, on_skip)
    if not items:
        return []
    workers = concurrent_files(len(items), jobs, scheduler)
    if workers is None:
        assert scheduler is not None
        _map_dask(fn, items, scheduler, on_result, settle, name)
    elif workers == 1:
        _map_inline(fn, items, on_result, settle, name)
    else:
        _map_pool(fn, items, workers, on_result, settle, name)
    return sorted(settle.skipped, key=lambda s: s.index)


class _Settler:
    """What to do with a file that failed: raise (default) or record it (``skip_bad``)."""

    def __init__(self, skip_bad: bool, on_skip: Callable[[SkippedFile], None] | None) -> None:
        self.skip_bad = skip_bad
        self.on_skip = on_skip
        self.skipped: list[SkippedFile] = []

    def bad_file(self, index: int, file: str, error: InputError) -> None:
        if error.path is None or not self.skip_bad:
            raise error
        problem = error.problem if error.path == file else str(error)
        skipped = SkippedFile(index, file, problem)
        self.skipped.append(skipped)
        if self.on_skip:
            self.on_skip(skipped)

    def failed(self, index: int, file: str, error: BaseException, remote_traceback: str | None = None) -> None:
        if isinstance(error, InputError):
            self.bad_file(index, file, error)
            return
        # a bug, not bad input: keep its type and say where it happened
        error.add_note(f"while analyzing {file}")
        if remote_traceback:
            error.add_note(f"worker traceback:\n{remote_traceback.rstrip()}")
        raise error


# ---------------------------------------------------------------------------------------------- in-process
def _map_inline(
    fn: Callable[[T], R],
    items: Sequence[T],
    on_result: Callable[[int, R], None],
    settle: _Settler,
    name: Callable[[T], str],
) -> None:
    for index, item in enumerate(items):
        try:
            value = fn(item)
        except InputError as exc:
            settle.bad_file(index, name(item), exc)
            continue
        except Exception as exc:
            settle.failed(index, name(item), exc)
            continue
        on_result(index, value)


# ---------------------------------------------------------------------------------------------- local pool
def _worker_main(conn: Connection, fn: Callable[[Any], Any], scratch: str) -> None:
    """One pool worker: take (index, item), send back (index, ok, value or error, traceback). Its temporary
    folders, and those of the programs it runs, go in ``scratch`` (:func:`~moeprof.workers.work_in`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # started so already (sigint_ignored); kept under any start method
    unblock_sigint()
    own_process()
    work_in(scratch)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        index, item = task
        reply: tuple[int, bool, Any, str | None]
        try:
            reply = (index, True, fn(item), None)
        except Exception as exc:
            reply = (index, False, exc, traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as exc:  # a value or error that does not pickle: say so instead of dying
            conn.send((index, False, RuntimeError(f"result does not pickle: {exc!r}"), traceback.format_exc()))


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    scratch: str  # its own temporary folder (and its programs')
    task: int | None = None  # index of the file it holds


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = f"signal {-exitcode}"
        hint = " (out of memory?)" if -exitcode == signal.SIGKILL else ""
        return f"the worker process analyzing it was killed by {sig}{hint}"
    return f"the worker process analyzing it exited with code {exitcode}"


def _map_pool(
    fn: Callable[[T], R],
    items: Sequence[T],
    jobs: int,
    on_result: Callable[[int, R], None],
    settle: _Settler,
    name: Callable[[T], str],
) -> None:
    ctx: Any = mp.get_context(start_method())  # the typeshed base context lacks Process
    forked = ctx.get_start_method() == "forkserver"
    if forked:
        start_fork_server()  # a no-op where the CLI started it already

    # every worker's temporary folders under one of the run's own: a worker killed (out of memory, an error
    # elsewhere that stops the run, Ctrl-C, SIGTERM) cannot remove its own, nor end the programs it started
    scratch = tempfile.mkdtemp(prefix="moeprof-workers-")

    def start() -> _Worker:
        parent, child = ctx.Pipe()
        folder = tempfile.mkdtemp(prefix="worker-", dir=scratch)
        process = ctx.Process(target=_worker_main, args=(child, fn, folder), daemon=True, name="moeprof-worker")
        # Ctrl-C is the coordinator's to answer, from a worker's first instruction: the fork server's
        # children inherit its ignoring it; a spawned worker is started ignoring it (a few ms, where a start
        # through the fork server can wait a second for its imports, with the coordinator's Ctrl-C held)
        with nullcontext() if forked else sigint_ignored():
            process.start()
        child.close()  # only the worker holds its end: its death reads as EOF here
        return _Worker(process, parent, folder)

    pending = deque(range(len(items)))
    workers: list[_Worker] = []

    def assign(worker: _Worker) -> None:
        if not pending:
            return
        index = pending.popleft()
        try:
            worker.conn.send((index, items[index]))
        except OSError:  # it died while idle: no file to blame, hand the file to a fresh worker
            worker.process.kill()
            worker.process.join()
            end_work_in(worker.scratch)
            workers.remove(worker)
            worker = start()
            workers.append(worker)
            worker.conn.send((index, items[index]))
        worker.task = index

    try:
        for _ in range(jobs):
            worker = start()
            workers.append(worker)
            assign(worker)
        while True:
            busy = [w for w in workers if w.task is not None]
            if not busy:
                break
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
            for worker in busy:
                if worker.conn not in ready and worker.process.sentinel not in ready:
                    continue
                index = worker.task
                assert index is not None
                try:
                    _, ok, payload, remote_tb = worker.conn.recv()
                except (EOFError, OSError):
                    worker.process.join()
                    end_work_in(worker.scratch)  # what it left: its folders, the programs it ran
                    workers.remove(worker)
                    worker.conn.close()
                    file = name(items[index])
                    settle.bad_file(index, file, InputError(file, _death(worker.process.exitcode)))
                    if pending:  # replace the dead worker
                        worker = start()
                        workers.append(worker)
                        assign(worker)
                    continue
                worker.task = None
                if ok:
                    on_result(index, payload)
                else:
                    settle.failed(index, name(items[index]), payload, remote_tb)
                assign(worker)
    finally:
        _stop(workers)
        end_work_in(scratch)


def _stop(workers: list[_Worker]) -> None:
    """Idle workers are told to finish; busy ones (an error or Ctrl-C stopped the run) are killed, and what they
    left is removed (:func:`~moeprof.workers.end_work_in`)."""
    for w in workers:
        try:
            if w.task is None:
                w.conn.send(None)
            else:
                w.process.kill()
        except OSError:
            w.process.kill()
    for w in workers:
        w.process.join(timeout=5)
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        w.conn.close()
        end_work_in(w.scratch)


# ---------------------------------------------------------------------------------------------- Dask
def connect(scheduler: str) -> Any:
    """A ``dask.distributed.Client`` for an address (``tcp://host:8786``) or a scheduler JSON file."""
    try:
        from distributed import Client
    except ImportError:
        raise InputError(
            None, f"--scheduler {scheduler}: dask.distributed is not installed (pip install 'dask[distributed]')"
        ) from None
    if process_is_owned():
        _quiet_dask_logs()
    kwargs: dict[str, Any] = {"timeout": CONNECT_TIMEOUT_S, "set_as_default": False}
    if scheduler.endswith(".json") and os.path.isfile(scheduler):
        kwargs["scheduler_file"] = scheduler
    else:
        kwargs["address"] = scheduler
    try:
        return Client(**kwargs)
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(None, f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None


def _quiet_dask_logs() -> None:
    """In moeprof's own process (the CLI): no log line of dask.distributed on stderr. Its warnings are about what
    the map already answers in moeprof's words (a result lost with a dead worker is computed again: "Couldn't
    gather 1 keys, rescheduling"; a task's error, a dead worker, an unreachable scheduler are each said in one
    line); its timestamped lines would be a library speaking to the user. A library caller keeps its logging."""
    import logging

    # distributed gives each logger of its configuration (distributed, distributed.client, tornado, ...) a stderr
    # handler of its own and stops it propagating: each is silenced
    names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] in ("distributed", "tornado", "bokeh")]
    for name in {"distributed", *names}:
        log = logging.getLogger(name)
        log.handlers.clear()
        log.propagate = False
        log.setLevel(logging.CRITICAL + 1)


def _outcome(value: Any) -> tuple[str, Any]:
    """What ``as_completed(with_results=True, raise_errors=False)`` handed over for a future, from the value
    itself: ``("error", (type, exception, traceback))``, ``("cancelled", CancelledError)`` or ``("finished",
    result)``. Not from ``future.status``, read later: a result fetched after its worker died (computed again,
    then gathered) can read "lost" or "pending" by then, and a good file would be refused."""
    from distributed.client import CancelledError

    if isinstance(value, CancelledError):
        return "cancelled", value
    if (
        isinstance(value, tuple)
        and len(value) == 3
        and isinstance(value[0], type)
        and issubclass(value[0], BaseException)
        and isinstance(value[1], BaseException)
    ):
        return "error", value
    return "finished", value


def _map_dask(
    fn: Callable[[T], R],
    items: Sequence[T],
    scheduler: str,
    on_result: Callable[[int, R], None],
    settle: _Settler,
    name: Callable[[T], str],
) -> None:
    from distributed import KilledWorker, as_completed

    client = connect(scheduler)
    run = uuid.uuid4().hex[:12]  # keys unique across runs sharing one cluster
    keys = [f"moeprof-{run}-{i}" for i in range(len(items))]
    index_of = {k: i for i, k in enumerate(keys)}
    futures: list[Any] = []
    try:
        # pure=False with explicit keys: never deduplicated against another run's task
        futures = client.map(fn, list(items), key=keys, pure=False, retries=0)
        # results are fetched in batches as tasks finish, not one round trip per file
        for future, value in as_completed(futures, loop=client.loop, with_results=True, raise_errors=False):
            index = index_of[future.key]
            status, value = _outcome(value)
            future.release()  # the cluster forgets it: memory stays flat over 1,000 files
            if status == "finished":
                on_result(index, value)
                continue
            file = name(items[index])
            if status != "error":  # cancelled by someone else, or with the scheduler: not the file's fault
                raise InputError(None, f"{file}: its Dask task was {status} (scheduler restarted?)")
            _, error, tb = value
            if isinstance(error, KilledWorker):
                died = InputError(file, "the Dask worker analyzing it died (killed, or out of memory?)")
                settle.bad_file(index, file, died)
            elif isinstance(error, ModuleNotFoundError):  # the workers' environment, not the file
                raise InputError(
                    None, f"the Dask workers cannot import {error.name!r}: install moeprof and its dependencies on them"
                ) from None
            else:
                settle.failed(index, file, error.with_traceback(tb))
    except BaseException:
        if futures:
            client.cancel([f for f in futures if not f.done()])
        raise
    finally:
        client.close()
