"""moeprof's command line: thin typer commands over the library, one module per command."""

from __future__ import annotations

import gc
import sys
from typing import Any


def main() -> None:
    # `moeprof --version` answers before typer, rich and pandas are imported (start-up is most of its cost)
    if sys.argv[1:] == ["--version"]:
        from .._version import __version__

        print(f"moeprof {__version__}")
        return
    from ..workers import own_process
    from .main import main as run

    own_process()
    try:
        run()
    finally:
        # the work is done: the exit need not search everything imported (pandas, pyarrow...) for
        # reference cycles, ~0.1 s of a command; atexit handlers still run
        gc.freeze()


def __getattr__(name: str) -> Any:
    if name == "app":
        from .main import app

        return app
    raise AttributeError(name)


__all__ = ["app", "main"]
