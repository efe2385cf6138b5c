"""How a moeprof command is stopped from outside: Ctrl-C (SIGINT), a batch scheduler's or ``kill``'s SIGTERM, a
closed terminal's SIGHUP. All three take the same road (stdlib only: the CLI sets it up before typer, rich and
pandas are imported).

Python answers SIGINT by raising ``KeyboardInterrupt`` in the main thread, and the code is written for that: every
``finally`` runs (temporary folders removed, an ``nsys export`` stopped, the local pool's workers and what they
started ended, a Dask run's tasks cancelled), and the CLI says one line and exits 130. SIGTERM and SIGHUP would
end the process at once, with none of that: :func:`stop_on_termination` makes them raise the same
``KeyboardInterrupt``, and :func:`stopping_signal` tells which signal it was (the exit code is 128 + its number,
as a shell reports a process killed by it).
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

_TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
_RECEIVED: list[int] = []  # the terminating signal that stopped this process, if one did


def stop_on_termination() -> None:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` in the main thread, as Ctrl-C does. A signal the process
    started with ignored stays ignored (``nohup moeprof ...`` keeps running when the terminal closes)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for number in _TERMINATING:
        if signal.getsignal(number) is signal.SIG_DFL:
            signal.signal(number, _terminate)


def _terminate(number: int, frame: FrameType | None) -> None:
    if not _RECEIVED:
        _RECEIVED.append(number)
    for other in _TERMINATING:  # one answer: a second signal would land in the wind-down itself
        signal.signal(other, signal.SIG_IGN)
    raise KeyboardInterrupt


def ignore_termination() -> None:
    """SIGTERM and SIGHUP ignored from now on (the command is done: nothing is left to stop), as far as they were
    made to stop it (a handler of the caller's own is left alone)."""
    for number in _TERMINATING:
        if signal.getsignal(number) is _terminate:
            signal.signal(number, signal.SIG_IGN)


def stopping_signal() -> signal.Signals:
    """The signal that stopped the command: SIGTERM or SIGHUP where one of them did, else SIGINT (Ctrl-C)."""
    return signal.Signals(_RECEIVED[0]) if _RECEIVED else signal.SIGINT


def terminated() -> bool:
    """Whether SIGTERM or SIGHUP (not Ctrl-C) stopped this process: it must end now, not go on to a next stage
    as after a Ctrl-C that only stopped a program it was waiting for."""
    return bool(_RECEIVED)


def raise_lost_interrupts() -> None:
    """A Ctrl-C (or SIGTERM, SIGHUP) whose ``KeyboardInterrupt`` landed where Python can only ignore an exception
    (a weakref callback such as importlib's module-lock ``cb``, a ``__del__``) is raised again, not lost: Python
    printed "Exception ignored in ..." with a traceback and the command ran on to exit 0 (seen in CI: the interrupt
    test's Ctrl-C at 0.6 s, while the pool's workers imported the pipeline). Other unraisable exceptions go to the
    hook they replace."""
    previous = sys.unraisablehook

    def raise_again_if_interrupt(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt) or not hasattr(signal, "pthread_kill"):
            previous(unraisable)
            return
        # the signal again, to the main thread, from a timer thread: sent from here its handler would raise inside
        # this hook (where it is ignored again); a real signal also ends a blocking call the main thread is in by then
        main = threading.main_thread().ident
        if main is not None:
            timer = threading.Timer(LOST_INTERRUPT_DELAY_S, signal.pthread_kill, (main, signal.SIGINT))
            timer.daemon = True
            timer.start()

    sys.unraisablehook = raise_again_if_interrupt


LOST_INTERRUPT_DELAY_S = 0.005  # after the hook and the callback it reports have returned
