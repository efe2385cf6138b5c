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
