"""Plain-text pieces every renderer shares (terminal, HTML): number formats, the evidence line, the verdict."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..core.analysis import SIGNIFICANT_SAVING, Analysis, Opportunity, Projection, ScopeRow, StepBound
from ..core.hardware import fabric_text
from ..core.scopes import NO_SCOPE, TOP_LEVEL
from ..core.summary import MOSTLY, LedgerSummary, PerDevice, Verdict
from ..insight.remedies import by_id
from ..words import plural  # re-exported: renderers count with it

NBSP = "\u00a0"  # between a number and its unit: a wrapped line never ends in "88.9" and starts with "ms"
LINK_WORDS = {"nvlink": "over NVLink", "ib": "over InfiniBand", "unknown": "on links moeprof could not tell"}

# what the fabrics are called while a report is rendered: (scale-up, scale-out, what a scale-up domain is):
# NVLink and InfiniBand, xGMI on AMD GPUs, ICI and DCN on TPUs (an ICI slice). The analysis calls every
# scale-up domain's link "nvlink" and the scale-out's "ib"; on screen they take the trace's own names
FABRICS: ContextVar[tuple[str, str, str]] = ContextVar("moeprof_fabrics", default=("NVLink", "InfiniBand", "domain"))


def scale_up_word(analysis: Analysis | None) -> tuple[str, str, str]:
    """The fabric names an analysis is rendered with (its ``hardware`` object's ``scale_up``, ``scale_out``)."""
    hardware: Any = (analysis.hardware if analysis is not None else None) or {}
    return (
        str(hardware.get("scale_up") or "NVLink"),
        str(hardware.get("scale_out") or "InfiniBand"),
        str(hardware.get("scale_up_domain") or "domain"),
    )


@contextmanager
def fabric_words(words: tuple[str, str, str]) -> Iterator[None]:
    """Render with ``words`` for the fabrics (see :func:`on_fabric`)."""
    token = FABRICS.set(words)
    try:
        yield
    finally:
        FABRICS.reset(token)


def hardware_line(analysis: Analysis) -> str | None:
    """``GPUs: 8 x NVIDIA H100 80GB HBM3 = H100 SXM (NVLink 450 GB/s, NIC 50 GB/s per GPU each way; 989 TFLOPS
    bf16)``: what the traces name, and the peaks the figures are measured against (or why there are none)."""
    hw: Any = analysis.hardware
    if not hw:
        return None
    models = ", ".join(f"{n} x {name}" for name, n in (hw.get("models") or {}).items())
    tpu = hw.get("accelerator") == "TPU" or hw.get("scale_out") == "DCN"  # TPU chips, or a TPU preset
    unit, label = ("chip", f"{hw.get('accelerator') or 'TPU'}s") if tpu else ("GPU", "GPUs")
    line = f"{label}: {models}" if models else f"{label}: not named in the trace"
    if hw.get("preset"):
        peaks = hw.get("link_peaks_gbps") or {}
        links = [
            f"{hw.get('scale_up', 'NVLink')} {peaks['nvlink']:,.0f} GB/s" if "nvlink" in peaks else "",
            f"{'DCN' if tpu else 'NIC'} {peaks['ib']:,.{1 if tpu else 0}f} GB/s" if "ib" in peaks else "",
        ]
        said = "--chip " if hw.get("preset_from") in ("--chip", "--gpu") else ""
        shown = ", ".join(x for x in links if x)
        line += f" = {said}{hw['preset']} ({shown + f' per {unit} each way; ' if shown else ''}"
        line += f"{hw.get('bf16_tflops', 0):,.0f} TFLOPS bf16"
        line += f", HBM {hw['hbm_gbps']:,.0f} GB/s)" if hw.get("hbm_gbps") else ")"
    if hw.get("note"):
        line += f"; {hw['note']}: no peaks (give --chip or --link-peak)"
    return line


def scopes_shown(result: Analysis) -> list[ScopeRow]:
    """The scope rows, where at least one is a scope a user named (not only top-level ops or none)."""
    named = [r for r in result.scopes if r.scope not in (NO_SCOPE, TOP_LEVEL)]
    return list(result.scopes) if named else []


def utilization_line(result: Analysis) -> str | None:
    """``FLOPs the ops state (XLA model_flops): 3.72 T per step, 50.1 TFLOP/s per chip: MFU 24.7% of
    202.7 TFLOP/s (the device plane)``; None where the trace states no FLOPs."""
    u = result.utilization
    if not u:
        return None
    line = f"FLOPs the ops state (XLA {u['flops_source']})"
    if u.get("flops_per_step") is not None:
        line += f": {u['flops_per_step'] / 1e12:,.3g} TFLOP per step"
    if u.get("tflops_per_s_per_device") is not None:
        line += f", {u['tflops_per_s_per_device']:,.1f} TFLOP/s per device"
    if u.get("mfu") is not None:
        line += f": MFU {pct(u['mfu'])} of {u['peak_tflops']:,.1f} TFLOP/s ({u.get('peak_from', '')})"
        if u.get("ops_above_peak_count"):
            line += f"; overstated: {u['ops_above_peak_count']} ops state more FLOPs than the peak allows"
    elif u.get("note"):
        line += f"; {u['note']}"
    return line


def on_fabric(text: str) -> str:
    """``text`` with "NVLink" and "InfiniBand" (and a link column's "nvlink", "ib") named as the fabrics being
    rendered (:func:`moeprof.core.hardware.fabric_text`)."""
    scale_up, scale_out, domain = FABRICS.get()
    return fabric_text(text, scale_up, scale_out, domain)


def ms(ns: int | float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def duration(ns: float | None) -> str:
    """A time with its unit and three significant digits: ``120 µs``, ``75.1 ms``, ``5.32 s`` (joined by NBSP)."""
    if ns is None:
        return "-"
    scale, unit = next(((s, u) for s, u in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")) if abs(ns) >= s), (1.0, "ns"))
    value = ns / scale
    digits = 0 if abs(value) >= 100 or unit == "ns" else (1 if abs(value) >= 10 else 2)
    return f"{value:,.{digits}f}{NBSP}{unit}"


def _same_time(merged: Sequence[Mapping]) -> str:
    """The findings merged into one, in a few words: op-level ones counted by kind, others by title."""
    ops = Counter(str(m.get("kind", "")) for m in merged if m.get("kind") not in ("straggler", "expert-exchange"))
    words = []
    if ops:
        kinds = ", ".join(f"{n} {kind}" for kind, n in ops.most_common())
        words.append(f"{plural(sum(ops.values()), 'op-level finding')} ({kinds})")
    words += [f"{m.get('name', '')}'s straggler finding" for m in merged if m.get("kind") == "straggler"]
    words += [str(m.get("title", "")) for m in merged if m.get("kind") == "expert-exchange"]
    return "; ".join(words)


def evidence_text(opportunity: Opportunity) -> str:
    """One line of an opportunity's evidence: what to look for in a trace viewer to verify it."""
    ev = opportunity.evidence
    parts = []
    if "count" in ev:
        devices = ev.get("devices")
        on = plural(devices, "device") if isinstance(devices, int) else "? devices"
        parts.append(f"{plural(int(ev['count']), 'call')} on {on}")
    if "exposed_share_of_its_time" in ev:
        parts.append(f"{pct(ev['exposed_share_of_its_time'])} of its time exposed")
    if "worst_device" in ev:
        parts.append(f"worst {ev['worst_device']}")
    if opportunity.link:
        parts.append(f"link {on_fabric(opportunity.link)}")
    if "independent_compute_ns" in ev:
        parts.append(f"independent compute (HLO) {ms(ev['independent_compute_ns'])} ms")
    if ev.get("bus_bandwidth_gbps") is not None:
        parts.append(f"bus bw {ev['bus_bandwidth_gbps']:.3g} GB/s")
    if "detail" in ev:
        parts.append(str(ev["detail"]))
    same = ev.get("same_time_as") or ()
    if same:
        # the findings merged into this one: they count the same time, so they are not listed again
        parts.append(f"counts the same time as {_same_time(same)}")
    return ", ".join(parts)


def _remedy_parts(opportunity: Opportunity) -> tuple[str, str]:
    """(the catalogue's text, what this opportunity adds to it); the whole remedy where the id is unknown
    (an analysis saved by another version)."""
    known = by_id(opportunity.remedy_id) if opportunity.remedy_id else None
    if known is not None and opportunity.remedy.startswith(known.text):
        return known.text, opportunity.remedy[len(known.text) :].strip()
    return opportunity.remedy, ""


def remedy_texts(opportunities: Sequence[Opportunity]) -> list[str]:
    """The remedy of each opportunity as shown (numbered from 1): a remedy that serves several is printed
    once, at the first, with the numbers it serves; the others refer to it and keep only what they add
    (their bandwidth, the device they wait for)."""
    parts = [_remedy_parts(o) for o in opportunities]
    serves: dict[str, list[int]] = {}
    for i, (base, _) in enumerate(parts, 1):
        serves.setdefault(base, []).append(i)
    out = []
    for i, (base, note) in enumerate(parts, 1):
        users = serves[base]
        first = users[0]
        if len(users) == 1:
            out.append(opportunities[i - 1].remedy)
        elif i == first:
            out.append(f"(for {', '.join(map(str, users))}) {base}" + (f" {note}" if note else ""))
        else:
            same_note = note == parts[first - 1][1]
            out.append(f"the remedy of {first}." + (f" {note}" if note and not same_note else ""))
    return out


def _where_exposed(v: Verdict) -> str:
    """``mostly all-to-all (78%) over NVLink``: what the exposed communication is made of."""
    kind = ""
    if v.exposed_kind is not None:
        lead = "mostly" if v.exposed_kind.share > MOSTLY else "led by"
        kind = f"{lead} {v.exposed_kind.name} ({v.exposed_kind.share:.0%})"
    link = ""
    if v.exposed_link is not None:
        most = v.exposed_link.share > MOSTLY
        link = on_fabric(LINK_WORDS[v.exposed_link.name] if most else "over NVLink and InfiniBand")
        if most and v.exposed_link.share < 1 and v.exposed_link.name != "unknown":
            link += f" ({v.exposed_link.share:.0%})"
    made_of = f", {kind} {link}" if kind and link else (f", {kind or 'mostly ' + link}" if kind or link else "")
    if v.exposed_wait_share is not None and v.exposed_wait_share > MOSTLY:
        # the cross-rank ledger tells waiting from moving bytes: waiting is a different fix
        made_of += f", {v.exposed_wait_share:.0%} of it waiting for the last rank"
    return made_of


def verdict_lines(v: Verdict | None) -> list[str]:
    """The report's first lines in words: where the step loses its time, then the first thing to try."""
    if v is None:
        return ["No device activity found in the input: there is nothing to measure."]
    large_idle = v.idle_fraction >= 0.1  # below this, idle time is not where the step loses its time
    if not v.has_comm:
        where = (
            f"No communication kernels in this trace: compute is {pct(v.compute_share)} of accumulated kernel time"
            f" and {pct(v.idle_fraction)} of the devices' span is idle."
        )
    elif not v.has_exposed:
        idle = f"; {pct(v.idle_fraction)} of the devices' span is idle" if large_idle else ""
        where = (
            f"Communication is {pct(v.comm_share)} of accumulated kernel time, all of it overlapped with compute:"
            f" none is exposed{idle}."
        )
    else:
        idle = f", and {pct(v.idle_fraction)} is idle" if large_idle else ""
        where = (
            f"Communication is {pct(v.comm_share)} of accumulated kernel time; {pct(v.exposed_comm_fraction)} of the"
            f" devices' span is exposed communication{_where_exposed(v)}{idle}."
        )
    hot = v.hot_straggler
    if hot is not None:
        where += (
            f" The straggler is the hot device: {hot.device} gets {hot.tokens_over_mean:.1f}x the mean device's"
            f" routed tokens and arrives last in {pct(hot.last_share)} of its collectives; the others wait for it."
        )
    if v.projected:
        first = first_try_line(v)
    elif v.first is not None:
        # not projected (a saved analysis from before §9, a job too large for this install): §6's bound only
        if v.first_saving_per_step_ns is not None:
            saving = f"hidden: at most {duration(v.first_saving_per_step_ns)} per step on the worst device"
        else:
            saving = f"hidden: at most {duration(v.first.saving_bound_ns)} on the worst device over the capture"
        first = f"First try: {v.first.title} ({saving}) — see opportunity 1."
    elif v.has_exposed:
        first = "moeprof ranked no opportunity for it: the collectives below show where it is."
    else:
        first = "Nothing to hide: moeprof found no exposed communication or launch overhead to attack."
    return [where, first]


def headline(v: Verdict | None) -> list[str]:
    """The key figures in parts (a renderer joins them), per device: a sum over devices reads as longer than the run."""
    if v is None:
        return []
    scope = f"{plural(v.devices, 'device')} from {plural(v.files, 'trace file')}"
    if v.steps:
        scope += f", {plural(v.steps, 'step')}"
    # one step time everywhere: §9's (the job's §5 window over its devices, mean over steps);
    # every figure of the line over that window: beside it, exposed comm per device and step
    stepped = v.step_ns is not None
    exposed = v.exposed_per_step if (stepped and v.exposed_per_step is not None) else v.exposed
    per_what = "per device and step" if exposed is v.exposed_per_step else "per device"
    per = (
        f"step {duration(v.step_ns)} (the job's{', mean over steps' if v.steps > 1 else ''})"
        if stepped
        else f"per device: span {duration(v.span.mean_ns)}"
    )
    if v.has_comm:
        per += f" · {per_what}:" if stepped else ","
        per += f" exposed comm {duration(exposed.mean_ns)}"
        if v.devices > 1:
            per += f" mean, {duration(exposed.worst_ns)} worst ({exposed.worst_device})"
    return [scope, f"comm share {pct(v.comm_share)}", per]


def _mean_worst(fig: PerDevice) -> str:
    return f"{duration(fig.mean_ns)} mean, {duration(fig.worst_ns)} worst ({fig.worst_device})"


def ledger_headline(v: Verdict | None) -> list[str]:
    """The exposed comm split by cause (§8), per device; nothing where the ledger did not run."""
    if v is None or v.ledger is None or not v.has_comm:
        return []
    led = v.ledger
    if not led.instances:  # one rank of a group, or members' traces missing: no split, and no made-up one
        if led.incomplete:
            return [
                "waiting vs moving bytes: unknown, the traces of the other members of its groups are missing "
                "(analyze every member's trace together)"
            ]
        return [
            "waiting vs moving bytes: unknown, no collective matched across ranks "
            "(analyze the traces of every member of its groups together)"
        ]
    unmatched = _mean_worst(led.exposed_unmatched) if led.has_unmatched else "none"
    return [
        f"exposed comm waiting: {_mean_worst(led.exposed_wait)}",
        f"moving bytes: {_mean_worst(led.exposed_transfer)}",
        f"unmatched: {unmatched}",
    ]


def clock_text(led: LedgerSummary) -> str:
    """How the hosts' clocks were put on one time base (§8), in a clause."""
    if len(led.clock_offsets_ns) <= 1:
        return "all on one clock"
    reference = led.clock_offsets_ns[0][0]
    hosts = len(led.clock_offsets_ns)
    far = led.largest_offset
    assert far is not None
    offset = ("+" if far[1] >= 0 else "−") + duration(abs(far[1]))
    text = f"{hosts} hosts' clocks aligned to {reference}"
    text += f" ({far[0]} {offset})" if hosts == 2 else f", {far[0]} the furthest at {offset}"
    if led.unaligned_hosts:
        n = len(led.unaligned_hosts)
        names = ", ".join(led.unaligned_hosts[:3]) + (f" and {n - 3} more" if n > 3 else "")
        text += f"; not aligned (no collective shared with {reference}): {names}"
    return text


def ledger_line(led: LedgerSummary, lead: str = "Cross-rank ledger: ") -> str:
    """The ledger's matching in one sentence: instances matched, those that could not be, the clocks."""
    across = led.instances - led.single_member
    matched = f"{plural(across, 'collective instance')} matched across ranks"
    if led.single_member:  # a group of one chip (one TPU's expert all-to-all): nothing to match, nobody waits
        alone = f"{plural(led.single_member, 'instance')} of a one-member group (nobody to wait for)"
        matched = f"{matched}, {alone}" if across else f"no collective spans two devices: {alone}"
    if not (led.incomplete or led.desynchronized):
        return f"{lead}{matched}, none incomplete or desynchronized; {clock_text(led)}."
    problems = []
    if led.incomplete:
        # an incomplete key is a call that some members of its group have and others do not: with nothing
        # matched, the other members' traces are missing (one rank file of a job, say so plainly)
        keys = plural(led.incomplete, "incomplete key")
        calls = plural(led.incomplete, "call")
        if led.instances:
            problems.append(
                f"{calls} found on only some members of their group "
                f"(the others' traces missing or lacking them: {keys})"
            )
        else:
            problems.append(
                f"the traces of the other members are missing for {calls} "
                f"({keys}; analyze every member's trace together)"
            )
    if led.desynchronized:
        problems.append(plural(led.desynchronized, "desynchronized key"))
    sep = ";" if led.instances else ":"
    return f"{lead}{matched}{sep} {'; '.join(problems)}; {clock_text(led)}."


def step_name(number: int, position: int | None) -> str:
    """A step as the trace numbers it (what the JSON says), with its ``--steps`` position where that differs."""
    if position is None or position == number:
        return f"step {number}"
    return f"step {number} (--steps {position})"


CAUSE_WORDS = {
    "launch": "launch/host gaps",
    "compute": "compute",
    "transfer": "moving bytes",
    "copy": "copies",
    "other": "other device work",
    "wait": "waiting",
}
_OPPORTUNITY = re.compile(r"opportunity=(\d+)")


def and_join(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""


def bound_text(b: StepBound) -> str:
    """What sets a step's end, in a clause: "its critical path is 98.4% launch/host gaps: the hosts of
    rank4/GPU:4 and rank5/GPU:5 set its end"."""
    where = and_join(b.devices[:3])
    if b.cause == "launch":
        return f"its critical path is {pct(b.share)} launch/host gaps: the hosts of {where} set its end"
    return f"its critical path is {pct(b.share)} {CAUSE_WORDS.get(b.cause, b.cause)}, on {where}"


def opportunity_number(p: Projection) -> int | None:
    """The opportunity a projection of role ``opportunity`` makes free (from 1)."""
    m = _OPPORTUNITY.search(" ".join(p.what_if)) if p.role == "opportunity" else None
    return int(m.group(1)) if m else None


def first_try_line(v: Verdict) -> str:
    """The verdict's first try (§9): the change of "what would it buy" that saves the most, or, where none
    shortens the step by ``SIGNIFICANT_SAVING``, what sets the step's end."""
    p = v.first_try
    if p is None:
        floor = f"{SIGNIFICANT_SAVING:.0%}"
        why = f": {bound_text(v.step_bound)}" if v.step_bound is not None else ""
        return f"None of the changes moeprof tries by itself shortens the step by {floor} or more{why}."
    saving = f"projected to save {duration(p.saving_ns)} of the {duration(p.measured_step_ns)} step"
    saving += f" ({pct(p.saving_fraction)})"
    n = opportunity_number(p)
    if n is not None:
        return f"First try: {v.first_try_title or p.label} — {saving}; see opportunity {n}."
    what = {
        "straggler": "make every rank as fast as the median rank (the straggler fix)",
        "router": "balance the router, so that every device gets the same expert work",
    }.get(p.role, p.label)
    return f"First try: {what} — {saving}; see what would it buy."


@dataclass(frozen=True)
class PayoffRow:
    """One row of "what would it buy": the change in words, its terms, the projected step, the saving (blank
    where it does not shorten the step), and what to say of it."""

    label: str
    terms: str
    projected_ms: str
    saving_ms: str
    saving: str
    note: str


def payoff_rows(analysis: Analysis) -> list[PayoffRow]:
    """The projections the analysis carries, as the table shows them: the one asked for first, then the rest
    by saving, most first (the first of those is the verdict's first try)."""
    asked = [p for p in analysis.projections if p.role == "asked"]
    rest = sorted((p for p in analysis.projections if p.role != "asked"), key=lambda p: -p.saving_ns)
    rows = []
    for p in [*asked, *rest]:
        note = p.note
        if p.selected == 0:
            note = note or "selects no activity: the step is the measured one"
        elif not p.shortens and p.role in ("straggler", "router", "asked"):  # the questions asked by name
            why = f": {bound_text(p.bound)}" if p.bound is not None else ""
            note = f"would not shorten this step{why}" + (f"; {note}" if note else "")
        shortens = p.shortens
        rows.append(
            PayoffRow(
                p.label,
                " ".join(p.what_if),
                ms(p.projected_step_ns),
                ms(p.saving_ns) if shortens else "-",
                pct(p.saving_fraction) if shortens else "none",
                note,
            )
        )
    return rows


def opportunity_savings_text(o: Opportunity, steps: int, step_ns: int | None) -> tuple[str, str]:
    """An opportunity's two answers, to two questions: hidden under compute, at most what (spec §6's bound,
    per step, on the worst device); taken away, what the replay says the step gains (§9)."""
    per = o.saving_bound_ns / steps if steps else None
    amount = duration(per if per is not None else o.saving_bound_ns)
    amount += " per step" if per is not None and steps > 1 else ""
    bound = "bounded by independent compute in the HLO" if o.bound_from == "hlo" else "its exposed time"
    hidden = f"hidden: at most {amount} on the worst device ({bound})"
    if o.projected_saving_ns is not None and step_ns:
        if o.projected_saving_ns >= SIGNIFICANT_SAVING * step_ns:
            share = pct(o.projected_saving_ns / step_ns)
            return hidden, f"taken away: the step {duration(o.projected_saving_ns)} ({share}) shorter (projected)"
        return hidden, f"taken away: the step under {SIGNIFICANT_SAVING:.0%} shorter (projected)"
    if o.projected_saving_max_ns is not None:
        return hidden, f"taken away: the step at most {duration(o.projected_saving_max_ns)} shorter (bounded)"
    return hidden, ""


def asked_line(p: Projection) -> str:
    """The answer to ``--what-if``, first on the screen: the step measured and projected, or that the terms
    select no activity, or that the change would not shorten the step and what sets its end."""
    head = f"Asked: --what-if {' '.join(p.what_if)}: "
    note = f" ({p.note})" if p.note else ""
    if p.selected == 0:
        return head + f"the terms select no activity: the step stays {ms(p.measured_step_ns)} ms{note}."
    # to the µs: the change asked for may move the step by less than three significant digits show
    step = f"the step {ms(p.measured_step_ns)} ms → {ms(p.projected_step_ns)} ms (projected)"
    if p.shortens:
        return head + f"{step}, {duration(p.saving_ns)} ({pct(p.saving_fraction)}) shorter{note}."
    why = f": {bound_text(p.bound)}" if p.bound is not None else ""
    return head + f"{step}: it would not shorten the step{why}{note}."


def opportunity_ranking(analysis: Analysis) -> str:
    """How the opportunities are ordered, in words: by the §9 saving (those under ``SIGNIFICANT_SAVING`` of the
    step tie, then by their bound), or by the bound alone where nothing was projected."""
    if any(o.projected_saving_ns is not None for o in analysis.opportunities):
        return f"projected saving; under {SIGNIFICANT_SAVING:.0%} of the step, by what hiding it could save"
    return "what hiding it could save"
