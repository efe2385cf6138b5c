"""What every command shares: options, the error boundary, progress on stderr."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ..errors import InputError
from ..options import ExecOptions, LoadOptions, StepOptions
from ..words import plural

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")


@cache
def stderr_console() -> Console:
    """rich's console on stderr (rich is imported when a command first prints through it)."""
    from rich.console import Console

    return Console(stderr=True)


class FittingHelp(typer.core.TyperCommand):
    """typer's help panels where every option name shows whole; otherwise click's plain help.

    typer lays options out in a table of six columns (name, short name, two for a --flag/--other
    pair, type, help). When the console is narrower than about twice the longest option name plus
    the other columns, rich shrinks the name column together with the help column and cuts the
    names: at 80 columns ``--max-exposed-comm-fraction`` and ``--max-exposed-comm-ms`` both read
    ``--max-exposed-comm-…``. So the panels are rendered once aside and used only when every
    name came out whole; click's plain layout never cuts a name.
    """

    def format_help(self, ctx: Any, formatter: Any) -> None:
        if panels_show_every_name(self, ctx, lambda: super(FittingHelp, self).format_help(ctx, formatter)):
            super().format_help(ctx, formatter)
        else:
            # the command class typer builds on (its copy of click): usage, text, options, epilog
            super(typer.core.TyperCommand, self).format_help(ctx, formatter)


def panels_show_every_name(command: Any, ctx: Any, render: Callable[[], None]) -> bool:
    """Whether typer's help, rendered to a buffer at the same width, shows every option name whole."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):  # typer prints the panels to sys.stdout
        render()
    text = re.sub(r"\x1b\[[0-9;]*m", "", buffer.getvalue())
    names = [
        opt
        for param in command.get_params(ctx)
        if not getattr(param, "hidden", False)
        for opt in (*param.opts, *getattr(param, "secondary_opts", ()))
        if opt.startswith("--")
    ]
    return all(re.search(rf"{re.escape(name)}(?![\w-])", text) for name in names)


RulesOption = Annotated[
    Path | None, typer.Option("--rules", help="Extra taxonomy rules (TOML), tried before the built-in ones.")
]
GpusPerNodeOption = Annotated[
    int | None,
    typer.Option(
        "--gpus-per-node",
        min=1,
        metavar="N",
        help="GPUs per host where the trace does not say (Kineto: deviceProperties, else 8).",
    ),
]
DomainOption = Annotated[
    int | None,
    typer.Option(
        "--nvlink-domain-size",
        min=1,
        metavar="N",
        help="Global ranks per NVLink domain (e.g. 72 for NVL72); default: one host.",
    ),
]
RunOption = Annotated[
    str | None, typer.Option("--run", help="TensorBoard log dir: the plugins/profile/<run> to read (default: newest).")
]


JobsOption = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        help="Local worker processes for several files (default: cores); 1 also decodes each on one thread.",
    ),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        help="Run the per-file map on a Dask cluster: tcp://host:8786 or a scheduler JSON file "
        "(default: $MOEPROF_SCHEDULER, else local processes).",
    ),
]
SkipBadOption = Annotated[
    bool,
    typer.Option("--skip-bad", help="Analyze the other files when one is bad; list the skipped ones in warnings."),
]


def exec_options(jobs: int | None, scheduler: str | None, skip_bad: bool) -> ExecOptions:
    return ExecOptions(jobs=jobs, scheduler=scheduler, skip_bad=skip_bad)


SkipFirstOption = Annotated[
    int, typer.Option("--skip-first", min=0, metavar="N", help="Drop the first N steps (warm-up).")
]
StepsOption = Annotated[
    str | None,
    typer.Option(
        "--steps",
        help="Measure only steps A:B: 0-based positions, half-open, whatever numbers the trace gives its steps "
        "(reports name a step by its number, with its position beside it where they differ).",
    ),
]
StepMarkerOption = Annotated[str | None, typer.Option("--step-marker", help="Regex naming the step ranges (NVTX).")]
GpuOption = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        help="Peaks (links, MFU) of this GPU instead of the one the trace names: V100, A100, H100, H200, H800, "
        "B200, GB200, GB300, MI300X, MI325X, MI355X.",
    ),
]


def load_options(
    rules: Path | None, gpus_per_node: int | None, nvlink_domain_size: int | None, run: str | None
) -> LoadOptions:
    return LoadOptions(rules=rules, gpus_per_node=gpus_per_node, nvlink_domain_size=nvlink_domain_size, run=run)


def analyze_options(
    steps: str | None,
    skip_first: int,
    nvlink_domain_size: int | None = None,
    gpus_per_node: int | None = None,
    *,
    step_marker: str | None = None,
    rules: Path | None = None,
    run: str | None = None,
) -> tuple[LoadOptions, StepOptions]:
    """The reading and step options every analyzing command takes, with ``--steps`` validated."""
    from ..core.steps import parse_selection

    try:
        selection = parse_selection(steps)
    except ValueError as exc:
        raise fail(str(exc)) from None
    load = LoadOptions(
        rules=rules,
        gpus_per_node=gpus_per_node,
        nvlink_domain_size=nvlink_domain_size,
        run=run,
        step_marker=step_marker,
    )
    return load, StepOptions(selection, skip_first, step_marker)


def fail(message: str, code: int = 2) -> typer.Exit:
    stderr_console().print(f"moeprof: {message}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def guarded(fn: Callable[[], T]) -> T:
    """Run a command body: bad input becomes one line on stderr and exit code 2, never a traceback."""
    try:
        return fn()
    except InputError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None
    except (typer.Exit, typer.Abort):
        raise
    except MemoryError:
        raise fail("out of memory reading the input; analyze fewer files at once") from None
    except Exception as exc:  # an input we did not foresee must still not print a traceback
        if os.environ.get("MOEPROF_DEBUG"):
            raise
        raise fail(
            f"cannot process the input: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            " (set MOEPROF_DEBUG=1 for a traceback)"
        ) from None


@contextmanager
def file_progress(total: int, enabled: bool = True) -> Iterator[Callable[[Path | str], None]]:
    """A progress bar on stderr over the trace files of a job: done/total, rate, elapsed, ETA.

    Shown only where stderr is a terminal and there are several files; never under --json.
    """
    if not enabled or total < 2 or not sys.stderr.isatty():
        yield lambda _path: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class FilesPerSecond(ProgressColumn):
        """How many trace files a second are done (the rate the ETA follows)."""

        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.1f} files/s", style="progress.data.speed")

    columns = [
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        FilesPerSecond(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=stderr_console(), transient=True) as progress:
        task = progress.add_task(plural(total, "trace file"), total=total)
        # a URL (str) names its file after the last slash, as a path does
        yield lambda path: progress.update(task, advance=1, description=PurePosixPath(path).name)
