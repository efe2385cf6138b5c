"""Ctrl-C's one answer, shared by the CLI's entry point and its error boundary (stdlib only: it is imported
before typer, rich and pandas)."""

from __future__ import annotations

import signal
import sys
import threading

_SAID = [False]  # whether this process said it was interrupted


def interrupted(detail: str = "") -> int:
    """Answer Ctrl-C: one line on stderr, once, and the exit code 130 (128 + SIGINT).

    A second Ctrl-C while the command winds down (workers stopped, files closed) is ignored from
    here on: it would print a traceback from wherever it landed, or, once the interpreter is
    exiting, end the process silently."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _SAID[0]:
        _SAID[0] = True
        sys.stderr.write(f"moeprof: interrupted{f' {detail}' if detail else ''}\n")
        sys.stderr.flush()
    return 130


def said_interrupted() -> bool:
    return _SAID[0]
