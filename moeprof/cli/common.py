"""What every command shares: options, the error boundary, progress on stderr."""

from __future__ import annotations

import contextlib
import io
import os
import re
import select
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from ..errors import InputError, missing_package, unforeseen
from ..options import ExecOptions, LoadOptions, StepOptions
from ..words import plural
from .interrupt import interrupted

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")


@cache
def stderr_console() -> Console:
    """rich's console on stderr (rich is imported when a command first prints through it)."""
    from rich.console import Console

    return Console(stderr=True)


class DeferredCoercionParse:
    """Mixed into typer's command and group classes: their parameters coerce through :class:`_DeferredCoercion`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            defer_coercion(param)
        return super().parse_args(ctx, args)  # type: ignore[misc]


class FittingHelp(DeferredCoercionParse, typer.core.TyperCommand):
    """typer's help panels where every option name shows whole; otherwise click's plain help.

    typer lays options out in a table of six columns (name, short name, two for a --flag/--other
    pair, type, help). When the console is narrower than about twice the longest option name plus
    the other columns, rich shrinks the name column together with the help column and cuts the
    names: at 80 columns ``--max-exposed-comm-fraction`` and ``--max-exposed-comm-ms`` both read
    ``--max-exposed-comm-…``. So the panels are rendered once aside and used only when every
    name came out whole; otherwise the same boxes with two columns (names and value, help), which fit
    every name (:func:`two_column_panels`); click's plain layout only where this typer lacks the pieces.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            name_metavar(param)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.get_params(ctx):  # --help is made here, not in __init__
            name_metavar(param)
            list_terms(param)
        if panels_show_every_name(self, ctx, lambda: super(FittingHelp, self).format_help(ctx, formatter)):
            super().format_help(ctx, formatter)
        elif not two_column_panels(self, ctx):
            # the command class typer builds on (its copy of click): usage, text, options, epilog
            super(typer.core.TyperCommand, self).format_help(ctx, formatter)


class _DeferredCoercion:
    """typer's coercion of one parameter's value, its pydantic TypeAdapter built only for a value that needs one.

    typer coerces every parameter through a pydantic TypeAdapter it builds on first use: importing pydantic
    and building ~25 adapters cost ~0.1 s of CPU in every ``analyze`` (a tenth of reading a 1M-event trace),
    while most parameters keep their defaults. What needs no adapter is answered as typer's adapter answers
    it: no value (None; ``()`` for a parameter of several values), the parameter's own default, text for a
    plain ``str``, and a list of text for ``list[str]``; any other value goes through typer's own coercion
    (its checks and messages: ``--top abc``, ``--top 0``, a path)."""

    def __init__(self, param: Any) -> None:
        self.param = param
        self.full: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if (param.multiple or param.nargs == -1) else None
        default = param.default
        if not callable(default) and type(value) is type(default) and value == default:
            return value
        descriptor = param.type_descriptor
        plain = descriptor.parameter_info.parser is None and not (
            descriptor.is_path or descriptor.is_file or descriptor.is_choice
        )
        if plain and descriptor.annotation is str and type(value) is str:
            return value
        if (
            plain
            and descriptor.annotation == list[str]
            and isinstance(value, list | tuple)
            and all(type(v) is str for v in value)
        ):
            return list(value)
        if self.full is None:
            from typer._coercion import build_runtime_param

            self.full = build_runtime_param(descriptor)
        return self.full.coerce(value, param=param, ctx=ctx)


def defer_coercion(param: Any) -> None:
    """Give a typer parameter :class:`_DeferredCoercion` (a typer without runtime coercion is left as it is)."""
    if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
        param._runtime_param = _DeferredCoercion(param)


class MoeprofGroup(DeferredCoercionParse, typer.core.TyperGroup):
    """The command groups: a bad option value or a usage mistake is one line on stderr and exit 2, as every
    other refusal (typer draws a five-line box with the usage), and the help names option values as FittingHelp."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.get_params(ctx):
            name_metavar(param)
        super().format_help(ctx, formatter)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **kwargs: Any,
    ) -> Any:
        kwargs["windows_expand_args"] = windows_expand_args
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **kwargs)
        # rich and typer answer a closed stdout pipe by pointing stdout at /dev/null and exiting 1: a copy of
        # the original descriptor still tells whether that is why a command ended
        fd = stdout_fd()
        original = None if fd is None else os.dup(fd)
        try:
            self._main_one_line_errors(args, prog_name, complete_var, **kwargs)
        except SystemExit as exc:
            if exc.code not in (0, None) and original is not None and stdout_is_a_closed_pipe(original):
                end_like_a_pipe_tool()
            raise
        finally:
            if original is not None:
                os.close(original)

    def _main_one_line_errors(
        self, args: Sequence[str] | None, prog_name: str | None, complete_var: str | None, **kwargs: Any
    ) -> NoReturn:
        errors = typer.core._click.exceptions
        try:
            # not standalone: the errors come back here instead of being drawn in typer's box
            done = super().main(args, prog_name, complete_var, False, **kwargs)
        except errors.NoArgsIsHelpError as exc:  # a bare `moeprof capture`: its help, as before
            exc.show()
            sys.exit(exc.exit_code)
        except errors.ClickException as exc:
            command = getattr(getattr(exc, "ctx", None), "command_path", "") or "moeprof"
            message = " ".join(exc.format_message().split())
            raise SystemExit(_usage_refusal(f"{message} (see {command} --help)", exc.exit_code)) from None
        except typer.Abort:  # click's answer to a Ctrl-C outside a command's body
            raise SystemExit(interrupted()) from None
        if done == 130:  # typer's answer to a Ctrl-C outside the command's body: Exit(130), nothing said
            raise SystemExit(interrupted())
        sys.exit(done if isinstance(done, int) else 0)


def _usage_refusal(message: str, code: int) -> int:
    stderr_console().print(f"moeprof: {message}", markup=False, highlight=False, soft_wrap=True)
    return code


def name_metavar(param: Any) -> None:
    """Give a parameter without a metavar one a user reads as what to type, instead of typer's Python types
    (``<bool>``, ``<int range>``, ``<list[str]>``): none for a flag, N for an integer, X for a number,
    PATH for a path, the option's own name for text (``--gpu GPU``), ``PATHS...`` for arguments."""
    if param.metavar is not None:
        return
    if isinstance(param, typer.core.TyperArgument):
        param.metavar = param.name.upper()  # the usage line adds "..." where it takes several
        param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]  # the name says it all
        return
    kind = param.bare_type()  # the annotation without None: "bool", "int", "float", "str", "Path", "list[str]"
    if getattr(param, "is_flag", False) or kind == "bool":
        param.metavar = ""  # a flag takes no value
        return
    if kind == "int":
        param.metavar = "N"
    elif kind == "float":
        param.metavar = "X"
    elif param.type_descriptor.is_path:
        param.metavar = "PATH"
    else:
        longest = max((o for o in param.opts if o.startswith("--")), key=len, default=param.name or "value")
        param.metavar = longest.lstrip("-").upper().replace("-", "_")


WHAT_IF = "what_if"  # the parameter of --what-if, wherever a command takes it


def list_terms(param: Any) -> None:
    """The ``--what-if`` help of a command: its own sentence, then every term of the projection's table, one a
    line (:func:`moeprof.insight.projection.term_help`), so a term added there is listed in every command's
    help. Imported only when a help is drawn: the projection package costs ~1 s of imports a run may not need."""
    if getattr(param, "name", None) != WHAT_IF or getattr(param, "terms_listed", False):
        return
    from ..insight.projection import term_help

    lines = "\n\n".join(f"{line}." for line in term_help())  # typer and click keep a paragraph a line
    param.help = f"{param.help or ''}\n\n{lines}"
    param.terms_listed = True


def two_column_panels(command: Any, ctx: Any) -> bool:
    """typer's help, boxed the same way, with each option's names and value in one column and its help in the
    other (typer's six columns, three of them empty for moeprof's options, leave a name at 80 columns 28
    characters, and ``--max-exposed-transfer-fraction`` has 31). Drawn with typer's own pieces (console, help
    text, each parameter's help); False, drawing nothing, where this typer lacks one of them."""
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text
    from typer import rich_utils

    try:
        console = rich_utils._get_rich_console()
        markup: Any = getattr(rich_utils, "DEFAULT_MARKUP_MODE", "rich")
        help_text = rich_utils._get_help_text(obj=command, markup_mode=markup) if command.help else None
        rows: dict[str, list[tuple[Text, Any]]] = {"Arguments": [], "Options": []}
        for param in command.get_params(ctx):
            if getattr(param, "hidden", False):
                continue
            argument = isinstance(param, typer.core.TyperArgument)
            names = [param.metavar or param.name.upper()] if argument else [*param.opts, *param.secondary_opts]
            label = Text(("* " if param.required else "") + ", ".join(names), style="bold cyan", no_wrap=True)
            value = "" if argument else param.metavar or ""  # name_metavar's: N, X, PATH, the option's name
            if value:
                label.append(f" {value}", style="bold yellow")
            help_cell = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup)
            rows["Arguments" if argument else "Options"].append((label, help_cell))
    except (AttributeError, TypeError):
        return False
    console.print(Padding(rich_utils.highlighter(command.get_usage(ctx)), 1), style=rich_utils.STYLE_USAGE_COMMAND)
    if help_text is not None:
        console.print(Padding(help_text, (0, 1, 1, 1)))
    for title, entries in rows.items():
        if not entries:
            continue
        table = Table(show_header=False, expand=True, box=None, padding=(0, 1))
        table.add_column(no_wrap=True)
        table.add_column()
        for label, help_cell in entries:
            table.add_row(label, help_cell)
        console.print(Panel(table, border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER, title=title, title_align="left"))
    return True


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
    # a name the help text also mentions (--slice-size in another option's help) is found even where its own
    # cell is cut: a cut cell ends in an ellipsis
    return "…" not in text and all(re.search(rf"{re.escape(name)}(?![\w-])", text) for name in names)


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
SliceOption = Annotated[
    int | None,
    typer.Option(
        "--slice-size",
        min=1,
        metavar="N",
        help="TPU chips per slice (the ICI domain); default: every chip the collectives name, one host's in a "
        "multi-slice capture.",
    ),
]


def scale_up_domain(nvlink_domain_size: int | None, slice_size: int | None) -> int | None:
    """The scale-up domain's size: ``--nvlink-domain-size`` and ``--slice-size`` name the same setting (an
    NVLink domain of GPUs, an ICI slice of TPU chips); two different values are refused."""
    if nvlink_domain_size and slice_size and nvlink_domain_size != slice_size:
        raise InputError(
            None,
            f"--nvlink-domain-size {nvlink_domain_size} and --slice-size {slice_size}: one scale-up domain, give one",
        )
    return nvlink_domain_size or slice_size


ExpertLoadOption = Annotated[
    Path | None,
    typer.Option(
        "--expert-load",
        metavar="FILE",
        help="Tokens routed per expert as your framework logs them: a JSON or CSV of step, layer, expert, tokens"
        " (optionally device). Default: the run folder's manifest's, where it records them.",
    ),
]


def read_load(path: Path | None) -> Any:
    """``--expert-load``'s routed load (core.expert_load.RoutedLoad), read before any trace; None without it."""
    if path is None:
        return None
    from ..readers.expert_load import read_expert_load

    return read_expert_load(path)


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
        help="Measure only steps A:B (0-based positions, half-open, whatever numbers the trace gives its steps; "
        "reports name a step by its number, with its position beside it where they differ).",
    ),
]
StepMarkerOption = Annotated[str | None, typer.Option("--step-marker", help="Regex naming the step ranges (NVTX).")]
GpuOption = Annotated[
    str | None,
    typer.Option(
        "--chip",
        "--gpu",
        metavar="CHIP",
        help="Peaks (links, MFU) of this chip instead of the one the trace names: V100, A100, H100, H200, H800, "
        "B200, GB200, GB300, MI300X, MI325X, MI350X, MI355X, 'TPU v4', 'TPU v5e', 'TPU v5p', 'TPU v6e' (Trillium), "
        "TPU7x (Ironwood). --gpu is the same option.",
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
    from ..core.steps import parse_selection, step_marker_pattern

    try:
        selection = parse_selection(steps)
    except ValueError as exc:
        raise fail(str(exc)) from None
    try:
        step_marker_pattern(step_marker)  # refused before any file is read
    except InputError as exc:
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


def stdout_fd() -> int | None:
    try:
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a test runner's buffer, a closed stream
        return None


def stdout_is_a_closed_pipe(fd: int | None = None) -> bool:
    """Whether stdout (or ``fd``, a copy of it) is a pipe whose reader has gone (``moeprof ... | head``)."""
    fd = stdout_fd() if fd is None else fd
    if fd is None or not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def end_like_a_pipe_tool() -> NoReturn:
    """Stop the way cat, grep or git stop when their reader has gone: killed by SIGPIPE, nothing said (the
    shell reports 141; ``set -o pipefail`` sees it). Python ignores SIGPIPE and raises BrokenPipeError
    instead, which typer turned into exit 1 and a JSON write left at exit 0: the same event, two codes."""
    with contextlib.suppress(OSError, ValueError):
        # what is still buffered must not fail again while the interpreter would exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGPIPE)
    raise SystemExit(141)  # where there is no SIGPIPE: the code a shell would report


def guarded(fn: Callable[[], T]) -> T:
    """Run a command body: bad input becomes one line on stderr and exit code 2, never a traceback."""
    try:
        result = fn()
        sys.stdout.flush()  # output still buffered meets a closed pipe here, inside the boundary
        return result
    except BrokenPipeError:
        if stdout_is_a_closed_pipe():
            end_like_a_pipe_tool()
        raise
    except InputError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt as exc:
        # a long wait on another program (nsys export) says what it was doing and what it stopped
        raise typer.Exit(interrupted(str(exc))) from None
    except (typer.Exit, typer.Abort):
        raise
    except MemoryError:
        raise fail("out of memory reading the input; analyze fewer files at once") from None
    except OSError as exc:
        if os.environ.get("MOEPROF_DEBUG"):
            raise
        if exc.filename is None:
            # the system's own words where it gave some (no space left on device), else the catch-all's
            raise fail(f"cannot process the input: {exc.strerror.lower()}" if exc.strerror else _unforeseen()) from None
        # a file or folder moeprof could not open, wherever that happened: named, as bad input is
        raise fail(f"{exc.filename}: {(exc.strerror or 'cannot be read').lower()}") from None
    except ImportError as exc:
        missing = missing_package(exc)
        if missing is not None:
            raise fail(f"this command {missing}") from None
        if os.environ.get("MOEPROF_DEBUG"):
            raise
        raise fail(_unforeseen()) from None
    except Exception as exc:  # an input we did not foresee must still not print a traceback
        if os.environ.get("MOEPROF_DEBUG"):
            if isinstance(exc, EOFError):  # click takes an EOFError for Ctrl-D at a prompt: "interrupted", no traceback
                raise RuntimeError(f"EOFError: {exc}") from exc
            raise
        raise fail(_unforeseen()) from None


def _unforeseen() -> str:
    return f"cannot process the input: {unforeseen()}"


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
