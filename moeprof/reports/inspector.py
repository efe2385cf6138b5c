"""The terminal view of an analysis of NCCL Inspector logs: bus bandwidth per kind and size against the
link peaks, the processes the others wait for, and what a log without timestamps cannot tell."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..words import plural


def _gbps(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def headline(section: Mapping[str, Any]) -> list[str]:
    """What the logs hold and the verdict on who the others wait for."""
    out = [
        f"NCCL Inspector logs: {plural(section['processes'], 'process', 'processes')}, "
        f"{plural(len(section['communicators']), 'communicator')}, {section['records']:,} records "
        f"({section['collective_records']:,} collectives, {section['p2p_records']:,} P2P), "
        f"{section['instances']:,} complete collective instances; no timeline (see below)."
    ]
    flagged = [r for r in section.get("last_to_arrive", []) if r["flagged"]]
    for r in flagged:
        out.append(
            f"{r['process']} ({r['ranks']}) is the last to arrive: its call is the shortest in {r['shortest']:,} of "
            f"{r['instances']:,} collectives ({_pct(r['shortest_share'])}); the other members spent "
            f"{_ms(r['caused_us'])} ms beyond it."
        )
    if not flagged and section.get("instances"):
        out.append(
            "No process is consistently the last to arrive (none is the shortest member in half its collectives)."
        )
    p2p = section.get("p2p") or {}
    if p2p.get("records"):
        out.append(
            f"P2P: {p2p['records']:,} Send/Recv records, {p2p['instances']:,} pairs matched across ranks, "
            f"{p2p['unmatched_records']:,} records unmatched (a side's log or records missing)."
        )
    for r in [r for r in p2p.get("last_to_arrive", []) if r["flagged"]]:
        out.append(
            f"{r['process']} ({r['ranks']}) is the last to arrive in P2P: its call is the shorter in {r['shortest']:,}"
            f" of {r['instances']:,} Send/Recv pairs ({_pct(r['shortest_share'])}); its peers spent "
            f"{_ms(r['caused_us'])} ms beyond it."
        )
    return out


def bandwidth_table(section: Mapping[str, Any], width: int | None = None) -> Table:
    """Bus bandwidth per collective and message size, in ``width`` columns: the peak columns go where no peak is
    known ("-" on every row), then the headers stack; the numbers are never cut, nor are the collective's names
    folded (the NCCL name over its kind where they do not fit side by side)."""
    heads = ("collective", "link", "size", "calls", "mean ms", "bus GB/s", "of peak", "shortest member GB/s", "of peak")
    rows = [
        (r["op"], r["kind"], r["link"], r["size_bucket"], f"{r['instances']:,}", _ms(r["mean_exec_us"]),
         _gbps(r["bus_bandwidth_gbps"]), _pct(r["peak_share"]),
         _gbps(r["transfer_bus_bandwidth_gbps"]), _pct(r["transfer_peak_share"]))
        for r in section["bandwidth"]
    ]  # fmt: skip
    caption = (
        "bus GB/s: bus bytes (NCCL's traffic rules) over every member's time; shortest member: over the "
        "instance's shortest call (the last arrival's, least wait). '-' for All2All: no traffic rule. "
        "link: one-node communicators on the scale-up fabric, others bounded by the scale-out."
    )
    if any(r["kind"] == "send-recv" for r in section["bandwidth"]):
        caption += (
            " Send/Recv: bus bytes = size; a matched pair's link from its two hosts, 'unknown' for an unmatched"
            " record of a communicator spanning nodes."
        )
    every = list(range(len(heads)))
    said = [i for i in every if not heads[i] == "of peak" or any(row[i + 1] != "-" for row in rows)]
    table = Table()
    for shown, stacked in ((every, False), (said, False), (said, True)):
        table = _bandwidth_table(rows, caption, [heads[i] for i in shown], shown, stacked)
        if width is None or natural_width(table) <= width:
            break
    return table


def _bandwidth_table(rows: list[tuple], caption: str, heads: list[str], shown: list[int], stacked: bool) -> Table:
    """One layout of :func:`bandwidth_table` (``shown``: the columns kept; ``stacked``: headers on two lines, the
    collective's kind under its NCCL name)."""
    table = Table(
        title="Bus bandwidth per collective and message size",
        box=box.SIMPLE_HEAD,
        title_justify="left",
        caption=caption,
        caption_justify="left",
    )
    for i, head in zip(shown, heads, strict=True):
        name = head.replace(" ", "\n") if stacked and i > 1 else head
        table.add_column(name, justify="left" if i in (0, 1) else "right", no_wrap=True)
    for row in rows:
        op, kind, *rest = row
        label = Text(op).append(f"\n({kind})", style="dim") if stacked else f"{op} ({kind})"
        cells = [label, *rest]
        table.add_row(*(cells[i] for i in shown))
    return table


def natural_width(table: Table) -> int:
    """The width a table takes when nothing limits it."""
    return Console(width=100_000).measure(table).maximum


def last_table(section: Mapping[str, Any], top: int, p2p: bool = False) -> Table:
    what = "of each Send/Recv pair" if p2p else "member of each collective"
    table = Table(title=f"Last to arrive (shortest {what})", box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("process", "ranks (communicator:rank)", "shortest", "of calls", "others' time beyond it ms"):
        table.add_column(name, justify="left" if name.startswith(("process", "ranks")) else "right")
    for r in section["last_to_arrive"][:top]:
        table.add_row(
            Text(r["process"], style="bold" if r["flagged"] else ""), r["ranks"], f"{r['shortest']:,}",
            _pct(r["shortest_share"]), _ms(r["caused_us"]),
        )  # fmt: skip
    matched = "(communicator, sender, receiver, k-th in p2p_sn order)" if p2p else "(communicator, coll_sn)"
    table.caption = (
        f"matched on {matched}; {section['instances']:,} complete instances, "
        f"{section.get('tied_instances', 0):,} tied at the minimum (no one named), "
        f"{section['incomplete_instances']:,} incomplete (left out); all members' time beyond the shortest: "
        f"{_ms(section['beyond_shortest_us'])} ms"
    )
    return table


def render(section: Mapping[str, Any], console: Console, top: int = 8, warnings: tuple[str, ...] = ()) -> None:
    """The report, its sentences wrapped at words to the console's width (the items of a list with a hanging
    indent), not left for the terminal to cut mid-word."""
    for line in headline(section):
        console.print(Text(line, style="bold"))
    console.print()
    console.print(bandwidth_table(section, console.width))
    if section["last_to_arrive"]:
        console.print(last_table(section, top))
    p2p = section.get("p2p") or {}
    if p2p.get("last_to_arrive"):
        console.print(last_table(p2p, top, p2p=True))
    console.print(Text("What a log without timestamps cannot tell:", style="bold"))
    items = Table.grid(padding=(0, 1))
    items.add_column(no_wrap=True)
    items.add_column()
    for item in section["cannot_tell"]:
        items.add_row("  -", item)
    console.print(items)
    for w in warnings:
        console.print(Text(f"warning: {w}", style="yellow"))


def html(section: Mapping[str, Any]) -> str:
    """The same view as HTML (for ``moeprof report``); every value escaped."""
    from markupsafe import escape

    def table(head: list[str], rows: list[list[str]]) -> str:
        th = "".join(f"<th>{escape(h)}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"

    parts = [f'<p class="headline">{escape(line)}</p>' for line in headline(section)]
    parts.append("<h3>Bus bandwidth per collective and message size</h3>")
    head = ["collective", "link", "size", "calls", "mean ms", "bus GB/s", "of peak", "shortest member GB/s", "of peak"]
    body = [
        [f"{r['op']} ({r['kind']})", r["link"], r["size_bucket"], f"{r['instances']:,}",
         _ms(r["mean_exec_us"]), _gbps(r["bus_bandwidth_gbps"]), _pct(r["peak_share"]),
         _gbps(r["transfer_bus_bandwidth_gbps"]), _pct(r["transfer_peak_share"])]
        for r in section["bandwidth"]
    ]  # fmt: skip
    parts.append(table(head, body))

    def last_to_arrive(rows: list[Mapping[str, Any]], title: str, head: list[str]) -> None:
        if rows:
            parts.append(f"<h3>Last to arrive ({title})</h3>")
            body = [
                [r["process"], r["ranks"], f"{r['shortest']:,}", _pct(r["shortest_share"]), _ms(r["caused_us"])]
                for r in rows
            ]
            parts.append(table(["process", "ranks (communicator:rank)", *head], body))

    last_to_arrive(
        section["last_to_arrive"],
        "shortest member of each collective",
        ["shortest", "of calls", "others' time beyond it ms"],
    )
    last_to_arrive(
        (section.get("p2p") or {}).get("last_to_arrive") or [],
        "shorter call of each Send/Recv pair",
        ["shorter", "of pairs", "peers' time beyond it ms"],
    )
    parts.append("<h3>What a log without timestamps cannot tell</h3><ul>")
    parts.extend(f"<li>{escape(item)}</li>" for item in section["cannot_tell"])
    parts.append("</ul>")
    return "\n".join(parts)
