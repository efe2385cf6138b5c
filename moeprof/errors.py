"""Errors that the CLI turns into one line on stderr and exit code 2."""

from __future__ import annotations

from pathlib import Path


def one_line(text: str) -> str:
    """Control characters (a newline in a file name) would split the error line: show them escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class InputError(Exception):
    """Bad input: missing, empty, truncated, wrong format, or unusable options.

    The message names the file and the problem in one line.
    """

    def __init__(self, path: str | Path | None, problem: str) -> None:
        self.path = None if path is None else str(path)
        self.problem = problem
        super().__init__(f"{one_line(self.path)}: {one_line(problem)}" if self.path else one_line(problem))

    def __reduce__(self) -> tuple[type[InputError], tuple[str | None, str]]:
        # picklable, so an error raised in a worker process reaches the parent intact
        return (InputError, (self.path, self.problem))


# The words of the last-resort catch-alls (the CLI's and each reader's): an exception moeprof did not turn into
# what is wrong with the input. No exception type or message is shown (they are moeprof's inside, not the user's
# terms); MOEPROF_DEBUG=1 lets the exception through with its traceback. The project's fuzz tests fail on a
# message holding these words, so that the next such case is found in CI, not by a user.
UNFORESEEN = "moeprof did not foresee"


def unforeseen() -> str:
    return f"something {UNFORESEEN} (a moeprof bug: MOEPROF_DEBUG=1 prints the traceback to report)"


def unforeseen_in(path: str | Path, what: str) -> InputError:
    """A reader's own catch-all, called in its ``except`` block: a library's generic exception on the file
    (a ValueError, a TypeError) that the reader did not turn into what is wrong with it. ``what`` says what
    could not be read ("not a readable rocpd database"); with MOEPROF_DEBUG=1 the exception goes on as it is."""
    import os

    if os.environ.get("MOEPROF_DEBUG"):
        raise
    return InputError(path, f"{what}: {unforeseen()}")


# import names whose package is installed under another name
_PACKAGE_OF_MODULE = {"google": "protobuf", "yaml": "pyyaml"}


def missing_package(exc: ImportError) -> str | None:
    """What to install where an import failed because a package is missing (``pip install protobuf`` for
    ``No module named 'google'``); None where the missing module is moeprof's own (a bug, not the user's set-up)."""
    name = (exc.name or "").split(".")[0]
    if not name or name == "moeprof":
        return None
    package = _PACKAGE_OF_MODULE.get(name, name)
    return f"needs the Python package {package}, which is not installed here (pip install {package})"
