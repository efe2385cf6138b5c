"""The terminal report: the verdict first, then the per-device figures, the bucket split, collectives, opportunities.

Everything shown is per device (the sums are in the JSON ``total``). The layout
follows the console: at 80 columns the per-device table drops its least needed
columns instead of cutting numbers; without colour (piped, ``NO_COLOR``) the
bucket bars use one character per bucket so the split still reads.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..core.analysis import Analysis, Collective, Figures
from ..core.names import cut
from ..core.summary import (
    LedgerSummary,
    device_stats,
    figures_per_step,
    mean_figures,
    step_count,
    step_divisor,
    verdict,
    worst_devices,
    zero_everywhere,
)
from ..words import plural
from .fitting import NAME_MIN_WIDTH, cut_apart, cut_path
from .routing import load_line, load_table, timeline_free_lines, traffic_line, traffic_renderables
from .text import (
    NBSP,
    TextTable,
    asked_line,
    evidence_text,
    fabric_words,
    hardware_line,
    headline,
    human_bytes,
    ledger_headline,
    ledger_line,
    ms,
    on_fabric,
    opportunity_ranking,
    opportunity_savings_text,
    payoff_rows,
    pct,
    remedy_texts,
    roles_table,
    roofline_table,
    scale_up_word,
    scope_figures,
    scopes_attributed,
    scopes_shown,
    step_name,
    token_movement_line,
    utilization_line,
    verdict_lines,
)

PIPED_WIDTH = 160  # a report piped into a CI log without COLUMNS: wide, tables are not folded
DEVICE_ROWS_AUTO = 16  # up to this many devices every one gets a row; more: statistics and the worst ones
WORST_DEVICES = 5
STRAGGLER_ROWS = 8  # the devices that cause the most waiting; the JSON lists every one

# bucket -> (figure, legend name, colour, character when there is no colour)
BUCKETS: tuple[tuple[str, str, str, str], ...] = (
    ("compute_ns", "compute", "green", "█"),
    ("comm_nvlink_ns", "comm NVLink", "cyan", "▓"),
    ("comm_ib_ns", "comm IB", "magenta", "▒"),
    ("comm_unknown_link_ns", "comm ?link", "yellow", "░"),
    ("memcpy_ns", "memcpy", "blue", "="),
    ("other_ns", "other", "white", "·"),
)


def console_width() -> int:
    """Width for a console that is not a terminal: COLUMNS, else the terminal stderr is on, else wide."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if sys.stderr.isatty():  # `moeprof analyze ... | less`: the user still reads it in this terminal
            return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        pass
    return PIPED_WIDTH


def spaced(text: str) -> str:
    """NBSP as a plain space, where rich wraps the text (rich breaks lines at NBSP too)."""
    return text.replace(NBSP, " ")


def wrap(text: str, width: int) -> list[str]:
    """Word-wrapped lines; a number stays with its unit (joined by NBSP in the text, a space on screen)."""
    lines = textwrap.wrap(text, width=max(width, 20), break_long_words=False, break_on_hyphens=False)
    return [spaced(line) for line in lines]


def pack(parts: Sequence[str], width: int, sep: str = " · ") -> list[str]:
    """Parts joined by ``sep`` into lines of at most ``width``; a part is split only when it is wider than a line."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(sep) + len(part) <= width:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return [wrapped for line in lines for wrapped in wrap(line, width)]


def make_console() -> Console:
    """Stdout console: a terminal's own width; piped, the width the reader is likely to have (see console_width)."""
    console = Console()
    return console if console.is_terminal else Console(width=console_width())


def has_colour(console: Console) -> bool:
    return console.color_system is not None and not console.no_color


def bucket_bar(fig: Figures, width: int = 40, colour: bool = True) -> Text:
    """The bucket split of accumulated time in ``width`` cells: coloured blocks, or one character per bucket.

    Cells are cut at the rounded running total, so each bucket gets its share to within one cell
    and the cells add up to ``width`` (an empty device gets an empty bar).
    """
    text = Text()
    total = fig.accumulated_ns
    if total <= 0:
        return text.append(" " * width)
    running = 0
    used = 0
    for key, _, color, char in BUCKETS:
        running += getattr(fig, key)
        end = round(width * running / total)
        cells, used = end - used, end
        if colour:
            text.append("█" * cells, style=color)
        else:
            text.append(char * cells)
    return text


def bar_legend(fig: Figures, colour: bool) -> Text:
    """What each colour or character of the bars is (the buckets that occur)."""
    legend = Text("split: ")
    for key, name, color, char in BUCKETS:
        if getattr(fig, key) > 0:
            legend.append("█" if colour else char, style=color if colour else "").append(f" {on_fabric(name)}  ")
    return legend


# ---------------------------------------------------------------- the per-device table


@dataclass(frozen=True)
class Column:
    header: str  # words separated by a space; a narrow layout stacks them on two lines
    key: str  # a figure of Figures.value
    unit: str  # "ms" or "ratio"
    stacked: str = ""  # the header on two lines, where splitting at the first space reads wrong

    def head(self, stacked: bool) -> str:
        if not stacked:
            return on_fabric(self.header)
        return on_fabric(self.stacked or self.header.replace(" ", "\n", 1))


ACCUM = Column("accum.", "accumulated_ns", "ms")
COMPUTE = Column("compute", "compute_ns", "ms")
NVLINK = Column("comm NVLink", "comm_nvlink_ns", "ms")
IB = Column("comm IB", "comm_ib_ns", "ms")
UNKNOWN = Column("comm ?link", "comm_unknown_link_ns", "ms")
COMM = Column("comm", "comm_ns", "ms")
MEMCPY = Column("memcpy", "memcpy_ns", "ms")
IDLE = Column("idle", "idle_ns", "ms")
SHARE = Column("comm share", "comm_share", "ratio")
EXPOSED = Column("exposed comm", "exposed_comm_ns", "ms")
EXP_SPAN = Column("exp./span", "exposed_comm_fraction", "ratio", "exp./\nspan")
FULL = (ACCUM, COMPUTE, NVLINK, IB, UNKNOWN, MEMCPY, IDLE, SHARE, EXPOSED, EXP_SPAN)
LINKS = (NVLINK, IB, UNKNOWN)


@dataclass(frozen=True)
class Layout:
    columns: list[Column]
    hidden: list[str]  # what this layout leaves out (said in the caption)
    stacked: bool  # headers on two lines


def column_layouts(devices: Sequence[Figures]) -> list[Layout]:
    """The layouts to try, richest first.

    Columns that are zero on every device are never shown (the caption names them). For
    narrower consoles: headers on two lines, then the link split becomes one comm column
    (the bars keep the split), then accumulated, memcpy, idle and comm share go, in that order.
    """
    columns = [c for c in FULL if not (c in (*LINKS, MEMCPY) and zero_everywhere(devices, c.key))]
    layouts = [Layout(columns, [], False), Layout(columns, [], True)]
    merged = [c for c in columns if c not in LINKS]
    merged.insert(merged.index(IDLE) - (MEMCPY in merged), COMM)
    # one link column alone merges into "comm" without losing anything
    hidden = ["the link split"] if sum(c in LINKS for c in columns) >= 2 else []
    if merged != columns:
        layouts.append(Layout(merged, hidden, True))
    for drop in (ACCUM, MEMCPY, IDLE, SHARE):
        if drop in merged:
            merged = [c for c in merged if c is not drop]
            hidden = [*hidden, drop.header]
            layouts.append(Layout(merged, hidden, True))
    return layouts


Row = tuple[str, Callable[[str], float], str | None]  # label, figure by key, style


def _decimals(values: list[float]) -> int:
    """Decimals for a column of ms values: the largest one keeps at most 5-6 significant digits."""
    top = max((abs(v) for v in values), default=0.0) / 1e6
    return 3 if top < 100 else (2 if top < 1000 else 1)


def _table(layout: Layout, rows: Sequence[Row | None], footer: Row | None, title: str, caption: str | None) -> Table:
    """Rows (None: a blank line between groups) and a footer row under a rule (the mean device)."""
    table = Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE,
        show_edge=False,
        show_footer=footer is not None,
    )
    columns = layout.columns
    real = [r for r in (*rows, footer) if r is not None]
    decimals = {c.key: _decimals([get(c.key) for _, get, _ in real]) for c in columns if c.unit == "ms"}

    def cells(get: Callable[[str], float]) -> list[str]:
        return [f"{get(c.key) / 1e6:,.{decimals[c.key]}f}" if c.unit == "ms" else pct(get(c.key)) for c in columns]

    foot = [footer[0], *cells(footer[1])] if footer is not None else [""] * (len(columns) + 1)
    labels = [r[0] for r in real]
    table.add_column("device", overflow="fold", footer=foot[0], min_width=min(12, max(map(len, labels))))
    for c, f in zip(columns, foot[1:]):
        table.add_column(c.head(layout.stacked), justify="right", no_wrap=True, footer=f)
    for row in rows:
        if row is None:
            table.add_section()
            continue
        label, get, style = row
        table.add_row(label, *cells(get), style=style)
    return table


def per_step_title(result: Analysis) -> str:
    """The unit of a table's times: per step where the trace has several (the window's sums over them)."""
    steps = step_count(result)
    return f"ms per step, the capture's {steps} steps" if steps > 1 else "ms"


def device_rows(result: Analysis, rows: int | None) -> tuple[list[Row | None], Row | None, str, str | None]:
    """Every device, or (``rows`` given) min/median/max over all of them and the ``rows`` worst; the mean below.
    Times per step (:func:`~moeprof.core.summary.step_divisor`), as the headline's."""
    steps = step_divisor(result)
    devices = [figures_per_step(d, steps) for d in result.devices]
    names = [d.device for d in result.devices]
    out: list[Row | None] = []
    if rows is None or rows >= len(devices):
        out = [(name, d.value, None) for name, d in zip(names, devices, strict=True)]
        title = f"Per device ({per_step_title(result)})"
    else:
        stats = device_stats(devices, [c.key for c in (*FULL, COMM)])
        out += [
            ("min", lambda key: stats[key].min, "dim"),
            ("median", lambda key: stats[key].median, "dim"),
            ("max", lambda key: stats[key].max, "dim"),
        ]
        out.append(None)
        out += [(d.device, figures_per_step(d, steps).value, None) for d in worst_devices(result.devices, rows)]
        title = f"Per device ({per_step_title(result)}), {plural(len(devices), 'device')} summarized"
    footer: Row | None = ("mean", mean_figures(devices).value, "bold") if len(devices) > 1 else None
    note = (
        None
        if rows is None or rows >= len(devices)
        else f"min, median, max: each column on its own over all devices; then the {plural(rows, 'device')}"
        " with the most exposed comm (--devices all lists every one)"
    )
    return out, footer, title, note


def natural_width(renderable: RenderableType) -> int:
    """The width a table takes when nothing limits it (rich clamps a measure to the console's width)."""
    return Console(width=100_000).measure(renderable).maximum


def device_table(result: Analysis, width: int = PIPED_WIDTH, rows: int | None = None) -> Table:
    """The per-device figures in ``width`` columns: the richest layout that fits, numbers never cut.

    When not even the narrowest layout fits (very long device names), the device names fold.
    """
    body, footer, title, summary_note = device_rows(result, rows)
    zero = [on_fabric(c.header) for c in (*LINKS, MEMCPY) if zero_everywhere(result.devices, c.key)]
    table = None
    for layout in column_layouts(result.devices):
        notes = [summary_note] if summary_note else []
        if zero:
            notes.append(f"0 on every device: {', '.join(zero)}")
        if layout.hidden:
            notes.append(f"left out at {width} columns: {on_fabric(', '.join(layout.hidden))} (all in --json)")
        table = _table(layout, body, footer, title, "; ".join(notes) or None)
        if natural_width(table) <= width:
            return table
    assert table is not None
    return table


def split_table(result: Analysis, width: int = PIPED_WIDTH, colour: bool = True, rows: int | None = None) -> Table:
    """The bucket split of each device's accumulated time, one bar a line (the worst devices when summarized)."""
    devices = result.devices
    every = rows is None or rows >= len(devices)
    listed = devices if every else worst_devices(devices, rows or 0)
    shown: list[tuple[str, Figures]] = [(d.device, d) for d in listed]
    if len(devices) > 1:
        shown.append(("mean", mean_figures(devices)))
    label_width = max(len(label) for label, _ in shown)
    bar_width = max(16, min(50, width - label_width - 16))
    title = "Bucket split of accumulated time" + ("" if every else " (the devices listed above)")
    table = Table(title=title, title_justify="left", box=None, show_header=False)
    table.add_column("device", overflow="fold")
    table.add_column("bar", no_wrap=True)
    table.add_column("comm", justify="right", no_wrap=True)
    for label, fig in shown:
        table.add_row(label, bucket_bar(fig, bar_width, colour), f"comm {pct(fig.comm_share)}")
    return table


# ---------------------------------------------------------------- collectives, opportunities


OP_MIN_WIDTH = 18  # narrower than this, an op name is cut to too little to tell kernels apart
OP_MAX_WIDTH = 60  # wider, a name is cut however wide the console (cut from its middle: fitting.cut)


def collectives_table(result: Analysis, top: int, width: int = PIPED_WIDTH) -> Table:
    """The top collectives. Columns with nothing to say ("-" on every row) are left out; the rest fit
    ``width`` by dropping the least needed (link peak, the bandwidths, bytes per call, count, link), then
    by cutting the op name in its middle, on one line (:func:`~.fitting.cut`). Numbers are never cut. Where the
    ledger ran, wait and transfer split the time."""

    steps = step_divisor(result)

    def cells(c: Collective) -> dict[str, str]:
        util = c.link_utilization
        n = max(c.devices, 1) * steps  # times per device and step: the mean over the devices it ran on
        return {
            "op": c.name,
            "kind": c.kind,
            "link": on_fabric(c.link),
            "count": f"{c.count:,}",
            "total ms": ms(c.total_ns / n),
            "exposed ms": ms(c.exposed_ns / n),
            "wait ms": ms(None if c.wait_ns is None else c.wait_ns / n),
            "transfer ms": ms(None if c.transfer_ns is None else c.transfer_ns / n),
            "bytes/call": human_bytes(c.bytes_per_call),
            "bus GB/s": "-" if c.bus_bandwidth_gbps is None else f"{c.bus_bandwidth_gbps:,.3g}",
            "of link peak": "-" if util is None else f"{pct(util)} {c.bandwidth_verdict}",
            # the bus bandwidth over the transfer part alone (§8): what the link did while bytes moved
            "transfer GB/s": "-" if c.transfer_bus_bandwidth_gbps is None else f"{c.transfer_bus_bandwidth_gbps:,.3g}",
        }

    data = [cells(c) for c in result.collectives[:top]]
    names = [n for n in data[0] if n == "op" or any(d[n] != "-" for d in data)] if data else ["op"]
    op_width = min(OP_MAX_WIDTH, max([len("op"), *(len(d["op"]) for d in data)]))
    per = "ms per device and step" if steps > 1 else "ms per device"
    title = f"Top collectives (of {len(result.collectives)}), {per}: the mean over the devices each ran on"

    def build(stacked: bool, op_cells: list[str]) -> Table:
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
        for n in names:
            if n == "op":
                table.add_column(n, no_wrap=True)
            else:
                head = "\n".join(n.rsplit(" ", 1)) if stacked else n
                table.add_column(head, justify="left" if n in ("kind", "link") else "right", no_wrap=True)
        for d, op in zip(data, op_cells, strict=True):
            table.add_row(*(op if n == "op" else d[n] for n in names))
        return table

    # headers on two lines first, then the least needed columns go, until the op name has its room
    tries: list[tuple[str | None, bool]] = [(None, False), (None, True)]
    tries += [(drop, True) for drop in ("of link peak", "bus GB/s", "transfer GB/s", "bytes/call", "count", "link")]
    room = op_width
    for drop, stacked in tries:
        if drop is not None and drop in names:
            names.remove(drop)
        room = width - (natural_width(build(stacked, [""] * len(data))) - len("op"))
        if room >= min(op_width, OP_MIN_WIDTH):
            break
    op_room = max(min(op_width, room), min(op_width, NAME_MIN_WIDTH))
    return build(stacked, cut_apart([d["op"] for d in data], op_room))


SCOPE_MIN_WIDTH = 16  # narrower, a scope path says too little (its innermost component, cut)


def scope_table(result: Analysis, top: int, width: int = PIPED_WIDTH) -> Table | None:
    """Time per JAX name scope (xprof's framework op stats by scope; layers folded), largest first; the time of
    the activities that serve each scope beside its own where some run outside it (the backward custom calls,
    the parameters' updates: docs/metrics.md "Components"); the FLOPs columns where the trace's ops state them.
    None where the trace names no scope."""
    rows = scopes_shown(result)
    if not rows:
        return None
    flops = any(r.tflops_per_s is not None for r in rows)
    xla = any(r.peak_fraction_xla is not None for r in rows[:top])  # ragged dots recounted: XLA's own beside
    attributed = scopes_attributed(rows)
    steps = step_divisor(result)
    title = f"Scopes ({len(result.scopes)}, layers folded), ms per device{' and step' if steps > 1 else ''}"
    if attributed:
        title += ": own (the scope's ops), attributed (the ops that serve it: its own, its backward's, its weights'"
        title += " updates and casts)"
    times = ("own ms", "attributed ms") if attributed else ("ms",)
    heads = ["scope", "calls", *times, "share", "backward", "comm ms", *(("TFLOP/s", "of peak") if flops else ())]
    heads += ["XLA's"] if xla else []
    lines = []
    for r in rows[:top]:
        n = max(r.devices, 1) * steps
        _, share, backward = scope_figures(r, attributed)
        served = [ms((r.attributed_ns or 0) / n)] if attributed else []
        cells = [
            r.scope,
            f"{r.count / n:,.4g}",
            ms(r.total_ns / n),
            *served,
            pct(share),
            pct(backward),
            ms(r.comm_ns / n),
        ]
        if flops:
            cells += ["-" if r.tflops_per_s is None else f"{r.tflops_per_s:,.1f}", pct(r.peak_fraction)]
        if xla:
            cells.append("" if r.peak_fraction_xla is None else pct(r.peak_fraction_xla))
        lines.append(cells)
    shown = list(range(len(heads)))
    stacked = False
    left_out: list[str] = []

    def build(scopes: list[str]) -> Table:
        caption = f"left out at {width} columns: {', '.join(left_out)} (all in --json)" if left_out else None
        table = Table(
            title=title, title_justify="left", caption=caption, caption_justify="left", box=box.SIMPLE_HEAD,
            show_edge=False,
        )  # fmt: skip
        for i in shown:
            head = heads[i].replace(" ", "\n") if stacked and i else heads[i]
            table.add_column(head, justify="right" if i else "left", no_wrap=True)
        for scope, cells in zip(scopes, lines, strict=True):
            table.add_row(*(scope if i == 0 else cells[i] for i in shown))
        return table

    # the scope names whole where they fit, else the headers stack, then the columns with nothing to say go
    # (comm ms 0.000 on every row: no collective under any scope), then the names are cut (their first and last
    # components kept, else the innermost alone) to what the numbers leave
    longest = max([len("scope"), *(len(c[0]) for c in lines)])
    room = width - (natural_width(build([""] * len(lines))) - len("scope"))
    if room < longest:
        stacked = True
        room = width - (natural_width(build([""] * len(lines))) - len("scope"))
    silent = [i for i in shown if i and all(c[i] in ("-", "", ms(0)) for c in lines)]
    if room < longest and silent:
        shown = [i for i in shown if i not in silent]
        room = width - (natural_width(build([""] * len(lines))) - len("scope"))
    # still no room for a name worth showing: the least needed columns go, said in the caption
    for least in ("XLA's", "calls", "backward", "of peak"):
        if room >= min(longest, SCOPE_MIN_WIDTH) or least not in heads:
            continue
        shown = [i for i in shown if heads[i] != least]
        left_out.append(least)
        room = width - (natural_width(build([""] * len(lines))) - len("scope"))
    fitted = max(min(longest, room), min(longest, NAME_MIN_WIDTH))
    return build(cut_apart([c[0] for c in lines], fitted, cut_path))


def text_table(t: TextTable, width: int = PIPED_WIDTH) -> Table:
    """A table the renderers share (reports.text), for the console: the first column's text folds where the
    numbers leave it too little room."""
    table = Table(
        title=t.title, title_justify="left", caption=t.caption or None, caption_justify="left", box=box.SIMPLE_HEAD,
        show_edge=False,
    )  # fmt: skip
    numeric = {"ms", "share", "exposed ms", "TFLOP/s", "HBM GB/s", "of peak", "below roof ms", "calls"}
    for h in t.headers:
        right = h in numeric
        table.add_column(h, justify="right" if right else "left", no_wrap=right, overflow="fold")
    for row in t.rows:
        table.add_row(*row)
    return table


def opportunities_panel(result: Analysis, top: int, width: int = PIPED_WIDTH) -> Panel:
    """Each opportunity: what, the saving bound (per step where there are steps), evidence and remedy.

    The number sits in its own column so that wrapped lines keep their indent. How they are ranked is in the
    panel's title where the title fits its top border, else on the panel's first line (a border cuts a title).
    """
    steps = step_count(result)
    title = f"Opportunities (ranked by {opportunity_ranking(result)})"
    ranked_inside = len(title) + 6 > width  # "╭─ " + title + " ─╮" at the least
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    if ranked_inside and result.opportunities:
        grid.add_row("", Text(f"ranked by {opportunity_ranking(result)}", style="dim"))
    shown = result.opportunities[:top]
    for i, (o, remedy) in enumerate(zip(shown, remedy_texts(shown), strict=True), 1):
        hidden, removed = opportunity_savings_text(o, steps, result.step_ns)
        # the op's name in the title cut in its middle (a kernel's demangled name runs to hundreds of characters)
        room = max(NAME_MIN_WIDTH, min(48, width // 2))
        title_text = o.title.replace(o.name, cut(o.name, room)) if o.name else o.title
        head = Text(on_fabric(title_text)[:90], style="bold", overflow="fold")
        head.append(f"  {removed}" if removed else "", style="bold red")
        head.append(f"{';' if removed else ''} {on_fabric(hidden)}")
        # a flag list longer than the line folds instead of being cut
        stake = f"{ms(o.exposed_ns / max(steps, 1))} ms per step" if steps > 1 else f"{ms(o.exposed_ns)} ms"
        body = Text(f"{stake} at stake over all devices: {evidence_text(o, steps)}\n→ {remedy}", overflow="fold")
        grid.add_row(Text(f"{i}.", style="bold"), Group(head, body))
    content: RenderableType = grid
    if not result.opportunities:
        content = Text("No exposed communication or launch overhead found: nothing to hide.")
    return Panel(content, title="Opportunities" if ranked_inside else title, title_align="left")


def straggler_table(led: LedgerSummary, rows: int = STRAGGLER_ROWS, steps: int = 1) -> Table | None:
    """The devices that arrive last in collectives (§8), most waiting caused first, the waiting they caused per
    step (``steps``: the steps measured); None when none does."""
    shown = led.stragglers[:rows]
    if not shown:
        return None
    more = len(led.stragglers) - len(shown)
    table = Table(
        title="Last to arrive: the devices the others wait for",
        title_justify="left",
        caption=f"{plural(more, 'more device')} arrived last at least once (all in --json)" if more else None,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    table.add_column("device", overflow="fold")
    table.add_column("last in", justify="right", no_wrap=True)
    table.add_column("of its\ncollectives", justify="right", no_wrap=True)
    table.add_column("others waited\nfor it, ms" + ("/step" if steps > 1 else ""), justify="right", no_wrap=True)
    for r in shown:
        waited = ms(r.caused_wait_ns / max(steps, 1))
        table.add_row(r.device, f"{r.straggler_count:,} of {r.instances:,}", pct(r.last_share), waited)
    return table


def payoff_table(result: Analysis, width: int = PIPED_WIDTH) -> Table | None:
    """What would it buy (§9): the projections the analysis carries, the asked one first; per change the
    projected step and the saving; the measured step (the job's, the same for every row) is in the title.
    Narrower than ``width``, the what-if column goes. None where the job was not projected."""
    rows = payoff_rows(result)
    if not rows:
        return None
    notes = [f"{r.terms}: {r.note}" for r in rows if r.note]
    table = Table()
    for with_terms in (True, False):
        caption = "each row is `analyze --what-if TERM`" + ("" if with_terms else " (a wider console shows TERM)")
        table = Table(
            title=f"What would it buy (projected; the step is {ms(result.step_ns)} ms, the job's mean)",
            title_justify="left",
            caption="\n".join([caption, *notes]),
            caption_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
        )
        table.add_column("change", overflow="fold")
        if with_terms:
            table.add_column("what-if", overflow="fold", style="dim")
        table.add_column("projected ms", justify="right", no_wrap=True)
        table.add_column("saving ms", justify="right", no_wrap=True)
        table.add_column("saving", justify="right", no_wrap=True)
        for r in rows:
            table.add_row(r.label, *([r.terms] if with_terms else []), r.projected_ms, r.saving_ms, r.saving)
        if natural_width(table) <= width:
            break
    return table


def spread_parts(result: Analysis) -> list[str]:
    sp = result.spread
    parts = []
    if sp.straggler is not None and sp.straggler.flagged:
        st = sp.straggler
        # "straggler" is the ledger's word (spec §8: last to arrive); this is the heaviest compute load
        parts.append(f"most compute: {st.device} at {st.compute_over_median:.2f}x the median device")
    if sp.slowest_step is not None and sp.slowest_step.over_median and len(sp.steps) > 1:
        slow = sp.slowest_step
        flag = " (slow step)" if slow.flagged else ""
        steps = plural(len(sp.steps), "step")
        parts.append(
            f"{steps}, slowest {step_name(slow.step, slow.position)} at {slow.over_median:.2f}x the median span{flag}"
        )
    return parts


def throughput_parts(result: Analysis) -> list[str]:
    tp = result.throughput or {}
    parts = [f"throughput {tp['tokens_per_second']:,.0f} tokens/s"]
    # one FLOP rate per screen: the ops' own (the utilization line) where the trace states them
    ops_rate = (result.utilization or {}).get("tflops_per_s_per_device") is not None
    if "tflops_per_device" in tp and not ops_rate:
        parts[0] += f", {tp['tflops_per_device']:.4g} model TFLOPS per device"
    if tp.get("mfu") is not None:
        parts[0] += f", MFU {pct(tp['mfu'])} of {tp['peak_tflops']:,.0f} TFLOPS {tp.get('dtype', '')}".rstrip()
    if result.manifest:
        dev = result.manifest.get("devices") or {}
        parts.append(f"({dev.get('count', '?')} x {dev.get('kind', '?')}, {result.manifest.get('kind')} capture)")
    return parts


def device_rows_shown(n_devices: int, devices: int | str | None) -> int | None:
    """Rows of devices to show: None (every device) or how many worst devices next to the statistics.

    ``devices`` is "all", a number, or None (automatic: every device up to 16, else the 5 worst).
    """
    if devices == "all":
        return None
    if devices is None:
        return None if n_devices <= DEVICE_ROWS_AUTO else WORST_DEVICES
    return int(devices)


def render(
    result: Analysis,
    console: Console | None = None,
    top: int = 8,
    devices: int | str | None = None,
) -> None:
    """The report. ``devices``: "all", a number of worst devices to list, or None (automatic, see above).
    The "what would it buy" table is the projections the analysis carries (§9)."""
    if result.timeline_free and result.inspector is not None:
        from .inspector import render as render_inspector

        render_inspector(result.inspector, console or make_console(), top, result.warnings)
        return
    if result.timeline_free and result.traffic:  # host-only traces: their all-to-all split sizes alone
        _render_routing(result, console or make_console(), timeline=False)
        return
    with fabric_words(scale_up_word(result)):
        _render(result, console or make_console(), top, devices)


def _render(
    result: Analysis,
    console: Console,
    top: int,
    devices: int | str | None,
) -> None:
    width = console.width
    colour = has_colour(console)
    v = verdict(result)
    asked = result.projection("asked")
    if asked is not None:  # the question asked is answered first
        for line in wrap(asked_line(asked), width):
            console.print(Text(line, style="bold"), soft_wrap=True)
    for sentence in verdict_lines(v):
        for line in wrap(sentence, width):
            console.print(Text(line, style="bold"), soft_wrap=True)
    if (glue := token_movement_line(result)) is not None:
        for line in wrap(glue, width):
            console.print(Text(line, style="bold"), soft_wrap=True)
    for sentence in routing_lines(result):  # spec §11: a skewed router, capacity drops, a hot receiver
        for line in wrap(sentence, width):
            console.print(Text(line, style="bold"), soft_wrap=True)
    for parts in (headline(v), ledger_headline(v)):
        for line in pack(parts, width):
            console.print(Text(line), soft_wrap=True)
    if (gpus := hardware_line(result)) is not None:
        for line in wrap(gpus, width):
            console.print(Text(line), soft_wrap=True)
    if (flops := utilization_line(result)) is not None:
        for line in wrap(flops, width):
            console.print(Text(line), soft_wrap=True)
    if result.throughput:
        for line in pack(throughput_parts(result), width, "  "):
            console.print(Text(line), soft_wrap=True)
    if result.devices:
        rows = device_rows_shown(len(result.devices), devices)
        console.print()
        console.print(device_table(result, width, rows))
        console.print(split_table(result, width, colour, rows))
        console.print(bar_legend(mean_figures(result.devices), colour))
    for line in pack(spread_parts(result), width, "; "):
        console.print(Text(line), soft_wrap=True)
    if v is not None and v.ledger is not None:
        console.print()
        for line in wrap(ledger_line(v.ledger), width):
            console.print(Text(line), soft_wrap=True)
        stragglers = straggler_table(v.ledger, steps=step_divisor(result))
        if stragglers is not None:
            console.print(stragglers)
    bought = payoff_table(result, width)
    if bought is not None:
        console.print(bought)
    if result.collectives:
        console.print(collectives_table(result, top, width))
    for shared in (roles_table(result), roofline_table(result, top)):
        if shared is not None:
            console.print(text_table(shared, width))
    if (scopes := scope_table(result, top, width)) is not None:
        console.print(scopes)
    _render_routing(result, console)
    console.print(opportunities_panel(result, top, width))
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")


def routing_lines(result: Analysis) -> list[str]:
    """The first lines' sentences of spec §11 (:mod:`.routing`): the expert load, the traffic."""
    return [line for line in (load_line(result.expert_load), traffic_line(result.traffic)) if line]


def _render_routing(result: Analysis, console: Console, timeline: bool = True) -> None:
    """Spec §11's sections: the expert load per layer, the all-to-all traffic per pair; without a device
    timeline (``timeline`` False), its first lines and the warnings too."""
    width = console.width
    if not timeline:
        for sentence in (*timeline_free_lines(result), *routing_lines(result)):
            for line in wrap(sentence, width):
                console.print(Text(line, style="bold"), soft_wrap=True)

    def fits(table: Table) -> bool:
        return natural_width(table) <= width

    if result.expert_load:
        console.print()
        console.print(load_table(result.expert_load, fits))
    if result.traffic:
        console.print()
        for part in traffic_renderables(result.traffic, fits):
            if isinstance(part, str):
                for line in wrap(part, width):
                    console.print(Text(line), soft_wrap=True)
            else:
                console.print(part)
    if not timeline:
        for w in result.warnings:
            console.print(f"[yellow]warning:[/yellow] {w}")


__all__ = ["bucket_bar", "device_table", "make_console", "payoff_table", "render", "split_table", "straggler_table"]
