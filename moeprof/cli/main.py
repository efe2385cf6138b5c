"""The ``moeprof`` command."""

from __future__ import annotations

import typer

from .. import __version__
from .analyze import analyze_command
from .capture import app as capture_app
from .classify import classify_command
from .events import events_command
from .flops import flops_command

app = typer.Typer(
    name="moeprof",
    help="Find where a mixture-of-experts training step loses its time on GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("analyze")(analyze_command)
app.command("events")(events_command)
app.command("classify")(classify_command)
app.command("flops")(flops_command)
app.add_typer(capture_app, name="capture")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"moeprof {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Find where a mixture-of-experts training step loses its time on GPUs."""


def main() -> None:
    app()
