"""The terminal report: per-device table, bucket bars, top collectives and opportunities."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..core.analysis import Analysis, Figures
from .text import evidence_text, ms, pct

_BAR_COLORS = {
    "compute": "green",
    "comm_nvlink": "cyan",
    "comm_ib": "magenta",
    "comm_unknown": "yellow",
    "memcpy": "blue",
    "other": "white",
}


def make_console() -> Console:
    """Stdout console; piped or in CI it is wide, so tables are not folded to 80 columns."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def bucket_bar(fig: Figures, width: int = 40) -> Text:
    """One line of the bucket split of accumulated time, drawn with block characters."""
    total = fig.accumulated_ns or 1
    parts = [
        ("compute", fig.compute_ns),
        ("comm_nvlink", fig.comm_nvlink_ns),
        ("comm_ib", fig.comm_ib_ns),
        ("comm_unknown", fig.comm_unknown_link_ns),
        ("memcpy", fig.memcpy_ns),
        ("other", fig.other_ns),
    ]
    text = Text()
    used = 0
    for i, (name, value) in enumerate(parts):
        cells = round(width * value / total) if i < len(parts) - 1 else width - used
        cells = max(0, min(cells, width - used))
        used += cells
        text.append("█" * cells, style=_BAR_COLORS[name])
    return text


def device_table(result: Analysis) -> Table:
    table = Table(title="Per device (ms; shares of accumulated kernel time)", title_justify="left", expand=False)
    for col, justify in [
        ("device", "left"),
        ("accum.", "right"),
        ("compute", "right"),
        ("comm NVLink", "right"),
        ("comm IB", "right"),
        ("comm ?link", "right"),
        ("memcpy", "right"),
        ("idle", "right"),
        ("comm share", "right"),
        ("exposed comm", "right"),
        ("exp./span", "right"),
    ]:
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]

    def row(label: str, fig: Figures, style: str | None = None) -> None:
        table.add_row(
            label,
            ms(fig.accumulated_ns),
            ms(fig.compute_ns),
            ms(fig.comm_nvlink_ns),
            ms(fig.comm_ib_ns),
            ms(fig.comm_unknown_link_ns),
            ms(fig.memcpy_ns),
            ms(fig.idle_ns),
            pct(fig.comm_share),
            ms(fig.exposed_comm_ns),
            pct(fig.exposed_comm_fraction),
            style=style,
        )

    for dev in result.devices:
        row(dev.device, dev)
    if len(result.devices) > 1:
        row("total", result.total, style="bold")
    return table


def split_table(result: Analysis) -> Table:
    """The bucket split of each device's accumulated time, one bar a line."""
    table = Table(title="Bucket split of accumulated time", title_justify="left", box=None, show_header=False)
    table.add_column("device", no_wrap=True)
    table.add_column("bar", no_wrap=True)
    table.add_column("comm", justify="right", no_wrap=True)
    rows: list[tuple[str, Figures]] = [(d.device, d) for d in result.devices]
    if len(result.devices) > 1:
        rows.append(("total", result.total))
    for label, fig in rows:
        table.add_row(label, bucket_bar(fig, 50), f"comm {pct(fig.comm_share)}")
    return table


def collectives_table(result: Analysis, top: int) -> Table:
    table = Table(title=f"Top collectives (of {len(result.collectives)})", title_justify="left")
    columns = [
        ("op", "left"),
        ("kind", "left"),
        ("link", "left"),
        ("count", "right"),
        ("total ms", "right"),
        ("exposed ms", "right"),
        ("bytes/call", "right"),
        ("bus GB/s", "right"),
        ("of link peak", "right"),
    ]
    for col, justify in columns:
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for c in result.collectives[:top]:
        name = c.name if len(c.name) <= 60 else c.name[:57] + "..."
        busbw = c.bus_bandwidth_gbps
        util = c.link_utilization
        table.add_row(
            name,
            c.kind,
            c.link,
            f"{c.count:,}",
            ms(c.total_ns),
            ms(c.exposed_ns),
            human_bytes(c.bytes_per_call),
            "-" if busbw is None else f"{busbw:,.3g}",
            "-" if util is None else f"{pct(util)} {c.bandwidth_verdict}",
        )
    return table


def opportunities_panel(result: Analysis, top: int) -> Panel:
    items = []
    for i, o in enumerate(result.opportunities[:top], 1):
        head = Text(f"{i}. {o.title[:90]}", style="bold")
        bound = "bounded by independent compute in the HLO" if o.bound_from == "hlo" else "exposed time"
        head.append(f"  save up to {ms(o.saving_bound_ns)} ms on the worst device ({bound})", style="bold red")
        body = Text(f"   {ms(o.exposed_ns)} ms at stake over all devices: {evidence_text(o)}\n   → {o.remedy}")
        items.extend([head, body])
    if not items:
        items = [Text("No exposed communication or launch overhead found: nothing to hide.")]
    return Panel(Group(*items), title="Opportunities (ranked by saving bound)", title_align="left")


def spread_line(result: Analysis) -> str | None:
    sp = result.spread
    parts = []
    if sp.straggler is not None and sp.straggler.flagged:
        st = sp.straggler
        parts.append(f"straggler {st.device}: compute {st.compute_over_median:.2f}x the median device")
    if sp.slowest_step is not None and sp.slowest_step.over_median:
        slow = sp.slowest_step
        flag = " (slow step)" if slow.flagged else ""
        parts.append(
            f"{len(sp.steps)} steps, slowest step {slow.step} at {slow.over_median:.2f}x the median span{flag}"
        )
    return "; ".join(parts) or None


def render(result: Analysis, console: Console | None = None, top: int = 8) -> None:
    console = console or make_console()
    t = result.total
    console.print(
        Text.assemble(
            ("moeprof ", "bold"),
            f"{len(result.devices)} device(s) from {len(result.inputs)} trace file(s)  ",
            ("comm share ", "bold"),
            (pct(t.comm_share), "bold magenta"),
            "  ",
            ("exposed comm ", "bold"),
            (f"{ms(t.exposed_comm_ns)} ms", "bold red"),
            f" ({pct(t.exposed_comm_fraction)} of span)",
        )
    )
    if result.throughput:
        tp = result.throughput
        line = f"throughput {tp['tokens_per_second']:,.0f} tokens/s"
        if "tflops_per_device" in tp:
            line += f", {tp['tflops_per_device']:.4g} model TFLOPS per device"
        if tp.get("mfu") is not None:
            line += f", MFU {pct(tp['mfu'])} of {tp['peak_tflops']:,.0f} TFLOPS {tp.get('dtype', '')}"
        if result.manifest:
            dev = result.manifest.get("devices") or {}
            line += f"  ({dev.get('count', '?')} x {dev.get('kind', '?')}, {result.manifest.get('kind')} capture)"
        console.print(line)
    if not result.devices:
        console.print("[yellow]No device activity found in the input.[/yellow]")
    else:
        console.print(device_table(result))
        console.print(split_table(result))
        legend = Text("split: ")
        for name, color in _BAR_COLORS.items():
            legend.append("█ ", style=color).append(name.replace("_", " ") + "  ")
        console.print(legend)
    spread = spread_line(result)
    if spread:
        console.print(spread)
    if result.collectives:
        console.print(collectives_table(result, top))
    console.print(opportunities_panel(result, top))
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
