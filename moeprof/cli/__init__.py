"""moeprof's command line: thin typer commands over the library, one module per command."""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import threading
from typing import Any

from ..stopping import ignore_termination, raise_lost_interrupts, stop_on_termination, stopping_signal
from .interrupt import interrupted, said_interrupted


def _exit_interrupted() -> None:
    """The last exit handler: an interrupted command ends with 130 (143 after SIGTERM, 129 after SIGHUP), always.

    CPython ends a process whose KeyboardInterrupt went unhandled by killing itself with SIGINT, and it
    takes one for unhandled wherever a KeyboardInterrupt left code run through ``PyRun_String`` (as some
    compiled extensions run their module setup), even when moeprof caught it afterwards: the same Ctrl-C
    then ended with 130 or with SIGINT by chance. Registered first, this runs after every other exit
    handler (multiprocessing's stops the workers), then exits with the code said."""
    if said_interrupted():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(128 + stopping_signal())


def main() -> None:
    # `moeprof --version` answers before typer, rich and pandas are imported (start-up is most of its cost)
    if sys.argv[1:] == ["--version"]:
        from .._version import __version__

        print(f"moeprof {__version__}")
        return
    # a command is one process that ends with it: the cyclic GC is off for its life. Importing typer, pandas,
    # pyarrow and the pipeline builds ~10^5 objects that the collector would scan ~170 times (60 ms of a
    # command's CPU; the readers turn it off themselves), and a command leaves ~1-3k objects in cycles
    # (analyze, report, annotate of 1M events), far below what a collection costs (docs/performance.md)
    gc.disable()
    atexit.register(_exit_interrupted)
    stop_on_termination()  # SIGTERM and SIGHUP wind down as Ctrl-C does: nothing left behind
    raise_lost_interrupts()  # a Ctrl-C that lands in a weakref callback is raised again, not ignored
    try:
        from ..workers import own_process
        from .main import main as run

        own_process()
        run()
    except KeyboardInterrupt:  # outside a command's own boundary (imports, option parsing): the same line
        raise SystemExit(interrupted()) from None
    finally:
        # the work is done (or abandoned): the exit need not search everything imported (pandas,
        # pyarrow...) for reference cycles (docs/performance.md); atexit handlers still run. A Ctrl-C (SIGTERM,
        # SIGHUP) from here on finds nothing left to stop
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            ignore_termination()
        gc.freeze()


def __getattr__(name: str) -> Any:
    if name == "app":
        from .main import app

        return app
    raise AttributeError(name)


__all__ = ["app", "main"]
