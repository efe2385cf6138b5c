"""moeprof's command line: thin typer commands over the library, one module per command."""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    # `moeprof --version` answers before typer, rich and pandas are imported (start-up is most of its cost)
    if sys.argv[1:] == ["--version"]:
        from .._version import __version__

        print(f"moeprof {__version__}")
        return
    from .main import main as run

    run()


def __getattr__(name: str) -> Any:
    if name == "app":
        from .main import app

        return app
    raise AttributeError(name)


__all__ = ["app", "main"]
