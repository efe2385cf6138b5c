"""The one answer to Ctrl-C, SIGTERM and SIGHUP, shared by the CLI's entry point and its error boundary (stdlib
only: it is imported before typer, rich and pandas)."""

from __future__ import annotations

import signal
import sys
import threading

from ..stopping import stopping_signal

_SAID = [False]  # whether this process said it was stopped
_WORDS = {signal.SIGINT: "interrupted", signal.SIGTERM: "stopped by SIGTERM"}
if hasattr(signal, "SIGHUP"):
    _WORDS[signal.SIGHUP] = "stopped by SIGHUP"


def interrupted(detail: str = "") -> int:
    """Answer Ctrl-C (or SIGTERM, SIGHUP: :mod:`moeprof.stopping`): one line on stderr, once, and the exit code
    128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP), as a shell reports it.

    A second Ctrl-C while the command winds down (workers stopped, files closed) is ignored from
    here on: it would print a traceback from wherever it landed, or, once the interpreter is
    exiting, end the process silently."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    number = stopping_signal()
    if not _SAID[0]:
        _SAID[0] = True
        try:
            sys.stderr.write(f"moeprof: {_WORDS.get(number, number.name)}{f' {detail}' if detail else ''}\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed terminal (SIGHUP): nobody to tell
            pass
    return 128 + number


def said_interrupted() -> bool:
    return _SAID[0]
