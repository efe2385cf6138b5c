"""The ``moeprof`` command."""

from __future__ import annotations

import typer

from .._version import __version__
from .analyze import analyze_command
from .baseline import app as baseline_app
from .capture import app as capture_app
from .check import check_command
from .classify import classify_command
from .common import FittingHelp
from .diff import diff_command
from .events import events_command
from .flops import flops_command
from .history import history_command

app = typer.Typer(
    name="moeprof",
    help="Find where a mixture-of-experts training step loses its time on GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("analyze", cls=FittingHelp)(analyze_command)
app.command("events", cls=FittingHelp)(events_command)
app.command("classify", cls=FittingHelp)(classify_command)
app.command("flops", cls=FittingHelp)(flops_command)
from .annotate import annotate_command  # noqa: E402
from .report import report_command  # noqa: E402

app.command("report", cls=FittingHelp)(report_command)
app.command("annotate", cls=FittingHelp)(annotate_command)
app.add_typer(capture_app, name="capture")
app.command("check", cls=FittingHelp)(check_command)
app.command("diff", cls=FittingHelp)(diff_command)
app.command("history", cls=FittingHelp)(history_command)
app.add_typer(baseline_app, name="baseline")


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
