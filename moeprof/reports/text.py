"""Plain-text pieces every renderer shares (terminal, HTML): number formats and the evidence line."""

from __future__ import annotations

from ..core.analysis import Opportunity


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 step``, ``3 steps``: a count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


def ms(ns: int | float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def evidence_text(opportunity: Opportunity) -> str:
    """One line of an opportunity's evidence: what to look for in a trace viewer to verify it."""
    ev = opportunity.evidence
    parts = []
    if "count" in ev:
        parts.append(f"{ev['count']:,} calls on {ev.get('devices', '?')} device(s)")
    if "exposed_share_of_its_time" in ev:
        parts.append(f"{pct(ev['exposed_share_of_its_time'])} of its time exposed")
    if "worst_device" in ev:
        parts.append(f"worst {ev['worst_device']}")
    if opportunity.link:
        parts.append(f"link {opportunity.link}")
    if "independent_compute_ns" in ev:
        parts.append(f"independent compute (HLO) {ms(ev['independent_compute_ns'])} ms")
    if ev.get("bus_bandwidth_gbps") is not None:
        parts.append(f"bus bw {ev['bus_bandwidth_gbps']:.3g} GB/s")
    if "detail" in ev:
        parts.append(str(ev["detail"]))
    return ", ".join(parts)
