"""moeprof's command line: thin typer commands over the library, one module per command."""

from __future__ import annotations

from .main import app, main

__all__ = ["app", "main"]
