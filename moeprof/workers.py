"""How the local pool's worker processes start (stdlib only: the CLI starts them early, before pandas).

A fork server is a clean single-threaded parent that imports moeprof once for all workers; ``fork``
would copy a coordinator that may run threads (progress bars, a Dask client) mid-lock. The CLI
starts the fork server at the top of a command that will likely map several files, so that it
imports the pipeline on another core while the coordinator imports it too: the workers fork the
moment the files are known, instead of after a second, serial import.
"""

from __future__ import annotations

import importlib.abc
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import TextIO

from .errors import UNFORESEEN

PRELOAD = ["moeprof.pipeline"]  # what every worker needs, imported once in the fork server


_OWNED = [False]  # see own_process


def own_process() -> None:
    """Mark this process as moeprof's own: the CLI, or a pool worker moeprof started. Only there may
    moeprof take process-wide shortcuts that a library must not take in its caller's process (the
    XPlane decoder's numba import skips numba's BLAS check; numpy loads with one BLAS thread)."""
    _OWNED[0] = True
    if not os.environ.get("MOEPROF_DEBUG"):
        warnings.showwarning = _one_line_warning
    if "numpy" not in sys.modules and not any(isinstance(f, _NumpyWithOneBlasThread) for f in sys.meta_path):
        sys.meta_path.insert(0, _NumpyWithOneBlasThread())


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A library's Python warning that reached moeprof's own process (none should: moeprof avoids them or says
    what they mean in its own warnings): one ``moeprof: warning:`` line with the catch-alls' words, not Python's
    two lines quoting moeprof's source (MOEPROF_DEBUG=1 keeps Python's, which say where it came from)."""
    text = " ".join(str(message).split()) or category.__name__
    try:
        (file or sys.stderr).write(f"moeprof: warning: {text} ({UNFORESEEN}; MOEPROF_DEBUG=1 shows where)\n")
    except (OSError, ValueError):  # stderr gone: nothing to tell
        pass


BLAS_THREADS = "OPENBLAS_NUM_THREADS"


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """``OPENBLAS_NUM_THREADS=1`` in the environment while inside, unless the user set it.

    numpy's OpenBLAS starts a thread per core (up to 64) as it loads, and each spins for a while before
    it sleeps: 1.2 s of CPU per process on a 13-core host, where moeprof multiplies no matrices. Set only
    while numpy loads, the programs the CLI runs (a capture's command, ``nsys profile``) and the environment
    a run folder records are the user's. The fork server starts inside it and keeps it, and so do its
    workers (they run no program that multiplies matrices: at most ``nsys export``)."""
    if BLAS_THREADS in os.environ:
        yield
        return
    os.environ[BLAS_THREADS] = "1"
    try:
        yield
    finally:
        os.environ.pop(BLAS_THREADS, None)


class _NumpyWithOneBlasThread(importlib.abc.MetaPathFinder):
    """Finds numpy as the import system would and loads it inside :func:`one_blas_thread` (once)."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name != "numpy":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is not None:

            def exec_with_one_blas_thread(module: ModuleType) -> None:
                with one_blas_thread():
                    exec_module(module)

            loader.exec_module = exec_with_one_blas_thread  # this spec's loader only
        return spec


def work_in(scratch: str) -> None:
    """In a pool worker: its temporary folders go in ``scratch``, and so do those of the programs it runs
    (``nsys export``), which inherit ``TMPDIR=scratch``: :func:`end_work_in` finds them by it."""
    import tempfile

    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = scratch


def end_work_in(scratch: str) -> None:
    """After a pool worker ended (finished, or killed where it stood): end the programs it started that still run
    (their environment holds its ``TMPDIR``; found through /proc where the system has one), and remove ``scratch``.

    A worker that ended normally left nothing: its programs were stopped and its folders removed by its own
    ``finally`` blocks, and its folder is empty; only a non-empty one calls for the search of /proc."""
    import shutil

    try:
        left = any(os.scandir(scratch))
    except OSError:  # already removed
        return
    if left:
        _kill_processes_with(f"TMPDIR={scratch}".encode())
    shutil.rmtree(scratch, ignore_errors=True)


def _kill_processes_with(variable: bytes) -> None:
    """SIGKILL every process of this user whose environment holds ``variable`` (``NAME=value``)."""
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:  # no /proc (macOS): the programs were stopped by the worker, or are left
        return
    for pid in entries:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                found = variable in fh.read().split(b"\0")
            if found and int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):  # gone, or another user's
            continue


def process_is_owned() -> bool:
    return _OWNED[0]


DECODE_THREADS_CAP = 8  # lines decoded at once hold their temporaries at once: memory grows with this


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_decode_threads(files_at_once: int = 1) -> int:
    """Threads decoding one XPlane file when ``files_at_once`` are read at once: their share of the
    usable cores, at most ``DECODE_THREADS_CAP``."""
    return max(1, min(DECODE_THREADS_CAP, usable_cores() // max(1, files_at_once)))


def start_method() -> str:
    import multiprocessing as mp  # (here: the XPlane decoder asks process_is_owned and needs none of it)

    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Processes started in this block begin with Ctrl-C (SIGINT) ignored, and keep it so.

    Ctrl-C reaches every process of the terminal's group: the fork server while it imports the pipeline
    (a second or more), and a worker before it could set its own handler, would each print a
    ``KeyboardInterrupt`` traceback. A process started while SIGINT is ignored inherits that through
    fork and exec, and Python then installs no handler of its own; the coordinator alone answers Ctrl-C
    (one line, exit 130) and stops its workers. SIGINT is also blocked meanwhile, as multiprocessing's
    resource tracker does around its own start: a Ctrl-C in the block waits, and reaches this process
    once it ends, instead of being lost (workers unblock it: :func:`unblock_sigint`). Outside the main
    thread signals cannot be set: a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    masking = hasattr(signal, "pthread_sigmask")
    if masking:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if masking:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def unblock_sigint() -> None:
    """In a process started under :func:`sigint_ignored`: SIGINT stays ignored but no longer blocked, so
    that the programs it runs (``nsys export``) start with the usual signal mask."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


# a Unix socket's path holds at most 107 bytes (Linux; 103 on macOS): multiprocessing puts the fork server's in
# <temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX, 33 bytes more than the temp dir
SOCKET_DIR_ROOM = 103 - 33


def short_socket_dir() -> None:
    """Where the temp dir (``$TMPDIR``) is too long for a socket path under it, multiprocessing's own folder goes
    in a short one instead (``/tmp``, ``/var/tmp``): else every local pool failed to start its fork server
    ("AF_UNIX path too long"). multiprocessing makes that folder once per process and removes it at exit."""
    import tempfile
    from multiprocessing import util

    if len(tempfile.gettempdir()) <= SOCKET_DIR_ROOM:
        return
    for short in ("/tmp", "/var/tmp"):
        if os.path.isdir(short) and os.access(short, os.W_OK | os.X_OK):
            saved = tempfile.tempdir
            tempfile.tempdir = short
            try:
                util.get_temp_dir()  # made now, under the short folder, and kept for the process
            finally:
                tempfile.tempdir = saved
            return


def start_fork_server() -> None:
    """The fork server, started (once) with Ctrl-C ignored, importing what every worker needs."""
    import multiprocessing as mp
    from multiprocessing import forkserver

    short_socket_dir()
    mp.get_context("forkserver").set_forkserver_preload(PRELOAD)
    with sigint_ignored(), one_blas_thread():  # the server imports numpy for every worker
        forkserver.ensure_running()


def warm_fork_server(paths: Sequence[object], jobs: int | None, scheduler: str | None) -> bool:
    """Start the fork server now where a local pool is likely: several inputs or a folder, more than
    one core and one job, no Dask scheduler. Returns whether it started one."""
    if jobs == 1 or scheduler or os.environ.get("MOEPROF_SCHEDULER") or usable_cores() < 2:
        return False
    if len(paths) < 2 and not any(Path(str(p)).is_dir() for p in paths):
        return False  # (asked first: multiprocessing, which start_method imports, is not needed for one file)
    if start_method() != "forkserver":
        return False
    start_fork_server()
    return True
