"""The ``moeprof`` command."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from .._version import __version__
from .common import FittingHelp, MoeprofGroup

# every subcommand, in the order `moeprof --help` lists them: name -> (module, the command function or,
# for a group of subcommands, its Typer app)
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("analyze", "analyze_command"),
    "events": ("events", "events_command"),
    "classify": ("classify", "classify_command"),
    "flops": ("flops", "flops_command"),
    "report": ("report", "report_command"),
    "annotate": ("annotate", "annotate_command"),
    "capture": ("capture", "app"),
    "check": ("check", "check_command"),
    "diff": ("diff", "diff_command"),
    "history": ("history", "history_command"),
    "baseline": ("baseline", "app"),
}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"moeprof {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Find where a mixture-of-experts training step loses its time on GPUs and TPUs."""


def build_app(only: str | None = None) -> typer.Typer:
    """The ``moeprof`` app with every subcommand, or with ``only`` that one: typer turns every command it
    holds into a click command (signature, options, types) before it parses anything, so a run of one
    command need not import and convert the ten others (part of every command's start: docs/performance.md)."""
    app = typer.Typer(
        name="moeprof",
        help="Find where a mixture-of-experts training step loses its time on GPUs and TPUs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        cls=MoeprofGroup,
    )
    app.callback()(_root)
    for name, (module, attr) in COMMANDS.items():
        if only is not None and name != only:
            continue
        target = getattr(importlib.import_module(f"{__package__}.{module}"), attr)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name, cls=FittingHelp)(target)
    return app


def main() -> None:
    args = sys.argv[1:]
    # `moeprof analyze ...` builds only analyze; help, --version or an unknown name gets the whole app
    build_app(args[0] if args and args[0] in COMMANDS else None)()


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole app, for the tests' CliRunner and for `python -m typer`-style tools
        app = globals()["app"] = build_app()
        return app
    raise AttributeError(name)
