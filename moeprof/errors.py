"""Errors that the CLI turns into one line on stderr and exit code 2."""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad input: missing, empty, truncated, wrong format, or unusable options.

    The message names the file and the problem in one line.
    """

    def __init__(self, path: str | Path | None, problem: str) -> None:
        self.path = None if path is None else str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)
