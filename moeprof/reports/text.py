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
from ..core.hardware import fabric_text, is_cpu_job, is_tpu_job
from ..core.names import said
from ..core.roofline import ON_CHIP
from ..core.scopes import NO_SCOPE, TOP_LEVEL
from ..core.summary import MOSTLY, LedgerSummary, PerDevice, Verdict, step_divisor
from ..insight.remedies import action_of, by_id
from ..words import plural  # re-exported: renderers count with it

NBSP = "\u00a0"  # between a number and its unit: a wrapped line never ends in "88.9" and starts with "ms"
LINK_WORDS = {"nvlink": "over NVLink", "ib": "over InfiniBand", "unknown": "on links moeprof could not tell"}

# what the fabrics are called while a report is rendered: (scale-up, scale-out, what a scale-up domain is):
# NVLink and InfiniBand, xGMI on AMD GPUs, ICI and DCN on TPUs (an ICI slice). The analysis calls every
# scale-up domain's link "nvlink" and the scale-out's "ib"; on screen they take the trace's own names
FABRICS: ContextVar[tuple[str, ...]] = ContextVar("moeprof_fabrics", default=("NVLink", "InfiniBand", "domain", "rank"))


def scale_up_word(analysis: Analysis | None) -> tuple[str, str, str, str]:
    """The fabric names an analysis is rendered with (its ``hardware`` object's ``scale_up``, ``scale_out``), and
    what a device of the job is called on screen: a TPU chip is a ``chip``, never a rank."""
    hardware: Any = (analysis.hardware if analysis is not None else None) or {}
    tpu = analysis is not None and is_tpu_job(d.kind for d in analysis.devices)
    return (
        str(hardware.get("scale_up") or "NVLink"),
        str(hardware.get("scale_out") or "InfiniBand"),
        str(hardware.get("scale_up_domain") or "domain"),
        "chip" if tpu else "rank",
    )


@contextmanager
def fabric_words(words: tuple[str, ...]) -> Iterator[None]:
    """Render with ``words`` for the fabrics and the device unit (see :func:`on_fabric`)."""
    token = FABRICS.set(tuple(words) if len(words) > 3 else (*words, "rank"))
    try:
        yield
    finally:
        FABRICS.reset(token)


_RANK_WORDS = ((re.compile(r"\bCross-rank\b"), "Cross-chip"), (re.compile(r"\branks\b"), "chips"),
               (re.compile(r"\brank\b"), "chip"), (re.compile(r"\bthe worst device\b"), "the worst chip"))  # fmt: skip


def chip_words(text: str) -> str:
    """``text`` written for ranks, said of TPU chips ("the last rank" -> "the last chip", "Cross-rank")."""
    for pattern, word in _RANK_WORDS:
        text = pattern.sub(word, text)
    return text


def hardware_line(analysis: Analysis) -> str | None:
    """``GPUs: 8 x NVIDIA H100 80GB HBM3 = H100 SXM (NVLink 450 GB/s, NIC 50 GB/s per GPU each way; 989 TFLOPS
    bf16)``: what the traces name, and the peaks the figures are measured against (or why there are none)."""
    hw: Any = analysis.hardware
    if not hw:
        return None
    if hw.get("accelerator") == "CPU":
        n = len(analysis.devices)
        return (
            f"CPUs: {plural(n, 'XLA:CPU device')} of one host (threads of one process, sharing its cores): their"
            f" collectives are copies in {hw.get('scale_up', 'host memory')}, over no fabric; no peaks"
        )
    models = ", ".join(f"{n} x {name}" for name, n in (hw.get("models") or {}).items())
    peak = peak_text(analysis)
    tpu = hw.get("accelerator") == "TPU" or hw.get("scale_out") == "DCN"  # TPU chips, or a TPU preset
    unit, label = ("chip", f"{hw.get('accelerator') or 'TPU'}s") if tpu else ("GPU", "GPUs")
    line = f"{label}: {models}" if models else f"{label}: not named in the trace"
    if hw.get("preset"):
        peaks = hw.get("link_peaks_gbps") or {}
        links = [
            f"{hw.get('scale_up', 'NVLink')} {peaks['nvlink']:,.0f} GB/s" if "nvlink" in peaks else "",
            f"{'DCN' if tpu else 'NIC'} {peaks['ib']:,.{1 if tpu else 0}f} GB/s" if "ib" in peaks else "",
        ]
        given = "--chip " if hw.get("preset_from") in ("--chip", "--gpu") else ""
        shown = ", ".join(x for x in links if x)
        line += f" = {given}{hw['preset']}"
        if peak is None:  # a saved analysis from before the roofline: the preset's own peaks
            line += f" ({shown + f' per {unit} each way; ' if shown else ''}"
            line += f"{hw.get('bf16_tflops', 0):,.0f} TFLOPS bf16"
            line += f", HBM {hw['hbm_gbps']:,.0f} GB/s)" if hw.get("hbm_gbps") else ")"
        elif shown:
            line += f" ({shown} per {unit} each way)"
    if peak is not None:
        # the one peak every figure of the screen is measured against (spec §10), where it comes from
        line += f"; peak {peak}"
        note = (analysis.roofline or {}).get("note")
        if note:
            line += f"; {note}"
    if hw.get("note"):
        line += f"; {hw['note']}: no peaks (give --chip or --link-peak)"
    return line


def scopes_shown(result: Analysis) -> list[ScopeRow]:
    """The scope rows, where at least one is a scope a user named (not only top-level ops or none)."""
    named = [r for r in result.scopes if r.scope not in (NO_SCOPE, TOP_LEVEL)]
    return list(result.scopes) if named else []


def scopes_attributed(rows: Sequence[ScopeRow]) -> bool:
    """Whether the table shows attributed time beside own time: some scope is served by activities outside it
    (docs/metrics.md, "Components")."""
    return any(r.attributed_ns is not None and r.attributed_ns != r.total_ns for r in rows)


def scope_figures(r: ScopeRow, attributed: bool) -> tuple[float, float | None, float | None]:
    """(the time a row is ranked and shared by, its share, its backward fraction): the attributed time where the
    table shows it, else the own time; the backward fraction of the activities that serve the row wherever
    they are known (a Kineto backward kernel's pass is its launch's, not its scope's)."""
    total, share = (r.attributed_ns, r.attributed_share) if attributed and r.attributed_ns is not None else (
        r.total_ns, r.share)  # fmt: skip
    if r.attributed_ns is not None and r.attributed_backward_ns is not None:
        backward = r.attributed_backward_ns / r.attributed_ns if r.attributed_ns else None
    else:
        backward = r.backward_ns / r.total_ns if r.total_ns else None
    return total, share, backward


def utilization_line(result: Analysis) -> str | None:
    """``FLOPs the ops state (XLA model_flops; 27 ragged-dot ops recounted from the HLO shapes): 3.72 TFLOP per
    step, 50.1 TFLOP/s per chip: MFU 24.7% of 202.7 TFLOP/s (the device plane's ...); XLA's count: 22.3
    TFLOP per step, MFU 149%``; None where the trace states no FLOPs."""
    u = result.utilization
    if not u:
        return None
    recounted = u.get("recounted_ops")
    useful = u.get("useful") or {}
    line = f"FLOPs the ops state (XLA {u['flops_source']}"
    line += f"; {plural(int(recounted), 'op')} with ragged dots recounted from the HLO shapes" if recounted else ""
    if useful.get("padding_waste"):
        # spec §10: a capacity run's padded rows are no model work
        line += (
            f"; useful rows only: the experts' buffers padded to {useful.get('capacity')} rows, "
            f"{pct(useful['padding_waste'])} of their FLOPs padding"
        )
        line += f", {pct(useful['dropped'])} of the assignments dropped" if useful.get("dropped") else ""
    line += ")"
    per_step = useful.get("flops_per_step", u.get("flops_per_step"))
    if per_step is not None:
        line += f": {per_step / 1e12:,.3g} TFLOP per step"
    if u.get("tflops_per_s_per_device") is not None:
        line += f", {u['tflops_per_s_per_device']:,.1f} TFLOP/s per device"
    if u.get("mfu") is not None:
        # the one peak: where it comes from is said once, beside the chip (hardware_line), where that says it
        said = peak_text(result) is not None and result.hardware is not None
        line += f": MFU {pct(u['mfu'])} of {u['peak_tflops']:,.1f} TFLOP/s"
        line += "" if said else f" ({u.get('peak_from', '')})"
        if u.get("ops_above_peak_count"):
            line += f"; overstated: {u['ops_above_peak_count']} ops state more FLOPs than the peak allows"
    elif u.get("note"):
        line += f"; {u['note']}"
    if u.get("mfu_counted") is not None and u.get("mfu_counted") != u.get("mfu"):
        line += f"; MFU {pct(u['mfu_counted'])} counting the padded rows"
    if recounted:
        xla = [f"{u['flops_per_step_xla'] / 1e12:,.3g} TFLOP per step"] if u.get("flops_per_step_xla") else []
        xla += [f"MFU {pct(u['mfu_xla'])}"] if u.get("mfu_xla") is not None else []
        line += f"; XLA's own count: {', '.join(xla)}" if xla else ""
    return line


def on_fabric(text: str) -> str:
    """``text`` with "NVLink" and "InfiniBand" (and a link column's "nvlink", "ib") named as the fabrics being
    rendered (:func:`moeprof.core.hardware.fabric_text`), and ranks called chips where the job's are."""
    scale_up, scale_out, domain, unit = FABRICS.get()
    text = fabric_text(text, scale_up, scale_out, domain)
    return chip_words(text) if unit == "chip" else text


def human_bytes(n: float | None) -> str:
    """Bytes in binary units ("1.5 MiB"); "-" unknown."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


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


# a link value (a collective's ``link``) in words; the fabrics are renamed for the job by on_fabric
LINK_WORDS = {
    "nvlink": "over NVLink",
    "ib": "over InfiniBand",
    "mixed": "over NVLink and InfiniBand",
    "unknown": "on links moeprof could not tell",
}


def evidence_text(opportunity: Opportunity, steps: int = 1) -> str:
    """One line of an opportunity's evidence: what to look for in a trace viewer to verify it; its times per
    step where ``steps`` (the steps measured) is more than one."""
    ev = opportunity.evidence
    per = max(steps, 1)
    unit = " ms per step" if per > 1 else " ms"
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
        parts.append(LINK_WORDS.get(opportunity.link, f"link {opportunity.link}"))
    if "independent_compute_ns" in ev:
        parts.append(f"independent compute (HLO) {ms(ev['independent_compute_ns'] / per)}{unit}")
    if "compute_to_hide_under_ns" in ev and "exposed_ns" in ev:  # host copies against the compute beside them
        parts.append(
            f"on it {ms(ev['exposed_ns'] / per)}{unit} exposed against {ms(ev['compute_to_hide_under_ns'] / per)}"
            f"{unit} of compute beside no copy"
        )
    if ev.get("bus_bandwidth_gbps") is not None:
        parts.append(f"bus bw {ev['bus_bandwidth_gbps']:.3g} GB/s")
    if "detail" in ev:
        parts.append(str(ev["detail"]))
    same = ev.get("same_time_as") or ()
    if same:
        # the findings merged into this one: they count the same time, so they are not listed again
        parts.append(f"counts the same time as {_same_time(same)}")
    return on_fabric(", ".join(parts))


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
    return [on_fabric(r) for r in out]


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
    """The report's first lines in words (issue 39): where the step loses its time, naming the largest bucket
    whatever it is and what already runs hidden; then the first thing to try, as an action. A trace that
    cannot time its step (a graph capture, launches without their kernels) says so instead."""
    if v is None:
        return ["No device activity found in the input: there is nothing to measure."]
    if v.cannot_answer is not None:
        return [on_fabric(cannot_answer_line(v.cannot_answer))]
    where = _where_line(v)
    hot = v.hot_straggler
    if hot is not None:
        where += (
            f" The straggler is the hot device: {hot.device} gets {hot.tokens_over_mean:.1f}x the mean device's"
            f" routed tokens and arrives last in {pct(hot.last_share)} of its collectives; the others wait for it."
        )
    if v.cpu and hot is None and v.devices > 1 and (v.projected or v.first is not None):
        first = cpu_first_line(v)  # no device of these is slower: what they show is the program's structure
    elif v.projected or v.step_bound is not None or v.first_bounded:
        first = first_try_line(v)
    elif v.first is not None:
        # not projected (a saved analysis from before §9, a job too large for this install): §6's bound only
        if v.first_saving_per_step_ns is not None:
            saving = f"hidden: at most {duration(v.first_saving_per_step_ns)} per step on the worst device"
        else:
            saving = f"hidden: at most {duration(v.first.saving_bound_ns)} on the worst device over the capture"
        first = f"First try: {_action(v.first)} ({saving}) — see opportunity 1 ({v.first.title})."
    elif v.has_exposed:
        first = "moeprof ranked no opportunity for it: the collectives below show where it is."
    else:
        first = "Nothing to hide: moeprof found no exposed communication or launch overhead to attack."
    return [on_fabric(where), on_fabric(first)]


def cpu_first_line(v: Verdict) -> str:
    """The first try of a job of XLA:CPU devices (``capture demo`` without an accelerator): these are threads
    of one process sharing the host's cores, so no fabric is measured, and the device the others wait for is
    mostly the one the host scheduled later, not a slower device (where the routing is skewed, the hot device is
    named instead and the usual first try stands). The largest projected change is said as what it is here."""
    line = (
        "First try: capture the same program on GPUs or TPUs before tuning it — these XLA:CPU devices share one"
        " host's cores, so their timings show the program's structure (which collectives are exposed, which"
        " wait), not a fabric's or a slower device's"
    )
    p = v.first_try
    if p is None:
        return line + "."
    saving = f"{duration(p.saving_ns)} ({pct(p.saving_fraction)})"
    if p.role == "straggler":
        return (
            f"{line}; the straggler fix would save {saving} here, but on shared cores a device that arrives late is"
            " mostly one the host scheduled later: no device to fix."
        )
    n = opportunity_number(p)
    what = f"opportunity {n} ({v.first_try_title}) taken away" if n is not None else p.label
    return f"{line}; the largest projected change here: {what}, {saving}."


def cannot_answer_line(launches: Mapping[str, Any]) -> str:
    """Why the trace cannot time its step: its launches ran no kernel in it."""
    launched = int(launches.get("kernel_launches") or 0)
    missing = int(launches.get("without_activity") or 0)
    captured = int(launches.get("captured") or 0)
    ran = launched - missing
    if captured:
        api = str(launches.get("capture_api") or "cudaStreamBeginCapture")
        end = api.replace("Begin", "End")
        return (
            "This trace cannot time a step: it recorded a graph capture. "
            f"{plural(captured, 'kernel launch', 'kernel launches')} lie inside {api} … {end}, which records them"
            " into a graph without running them, and "
            f"{plural(ran, 'kernel')} ran. Profile the graph's replays (the step as it runs, {api[:3]}GraphLaunch)"
            " instead: the figures below are only the kernels that ran."
        )
    return (
        f"This trace cannot time a step: {missing:,} of its {plural(launched, 'kernel launch', 'kernel launches')}"
        " have no kernel in it (the profiler lost their activity: a full activity buffer, or GPU activity not"
        f" recorded), and {plural(ran, 'kernel')} ran. Profile again with GPU activity recorded: the figures below"
        " are only the kernels that ran."
    )


def _where_line(v: Verdict) -> str:
    """Where the time goes: the largest bucket of the kernel time whatever it is, the idle time where it is
    large, what of the communication already runs under compute, and the capture's edges."""
    unit = "chips" if v.tpu else "devices"
    # one device's span, or the devices' together
    one = v.devices == 1
    span = f"the {unit[:-1]}'s span" if one else f"the {unit}' span"
    idle = f"{pct(v.idle_fraction)} of {span} is idle"
    if not v.has_comm:
        buckets = sorted(
            (("compute", v.compute_share), ("memcpy", v.memcpy_share), ("other", v.other_share)), key=lambda b: -b[1]
        )
        (top, share), rest = buckets[0], [f"{name} {pct(x)}" for name, x in buckets[1:] if x >= 0.0005]
        others = f" ({', '.join(rest)})" if rest else ""
        head = f"No communication between {unit} in this trace"
        if v.idle_fraction >= MOSTLY:  # idle is where the time goes: said first
            return (
                f"{head}: the {unit[:-1] + ' is' if one else unit + ' are'} idle {pct(v.idle_fraction)} of"
                f" {'its' if one else 'their'} span; of the kernel time, {top} is"
                f" {pct(share)}{others}."
            )
        return f"{head}: {top} is {pct(share)} of accumulated kernel time{others}, and {idle}."
    hidden = v.comm_hidden_share
    # what already runs hidden is said as done, where most of it does
    under = f", {pct(hidden)} of it already under compute" if hidden is not None and hidden > MOSTLY else ""
    large_idle = f", and {idle}" if v.idle_fraction >= 0.1 else ""
    if not v.has_exposed:
        return (
            f"Communication is {pct(v.comm_share)} of accumulated kernel time, all of it under compute: none is"
            f" exposed{large_idle}."
        )
    return (
        f"Communication is {pct(v.comm_share)} of accumulated kernel time{under}; {pct(v.exposed_comm_fraction)} of"
        f" {span} is exposed communication{_where_exposed(v)}{_edges(v)}{large_idle}."
    )


def _edges(v: Verdict) -> str:
    """The exposed time at the capture's edges, named as such (insight.edges)."""
    e, edges = v.edge_exposed, v.edges or {}
    if e is None or not edges or v.exposed.mean_ns <= 0:
        return ""
    first, last = edges.get("first") or {}, edges.get("last") or {}
    named = [f"the first {said(str(first['op']))}" if first.get("exposed_ns") else "",
             f"the last {said(str(last['op']))}" if last.get("exposed_ns") else ""]  # fmt: skip
    what = " and ".join(n for n in named if n)
    share = e.mean_ns / v.exposed.mean_ns
    if share < EDGES_SAID:
        return ""
    return (
        f"; {duration(e.mean_ns)} of it ({share:.0%}) at the capture's edges ({what}: no step before or after them"
        " in the capture to run under)"
    )


EDGES_SAID = 0.1  # the capture's edges are named where they hold this share of the exposed time or more


def _action(o: Opportunity) -> str:
    """What to do about an opportunity, as one action: its remedy family's, else its title."""
    return action_of(o.remedy_family) or o.title


def _ops_text(b: StepBound) -> str:
    """``on rank0/GPU:0 stream 7: m_grouped_fp8_ptp128c::GemmKernel 17.7 ms, ...``: the activities that make
    most of a bound's time on the critical path, where they run."""
    if not b.ops:
        return f", on {and_join(list(b.devices[:3]))}" if b.devices else ""
    places = {(op.device, op.stream) for op in b.ops}
    if len(places) == 1:
        device, stream = b.ops[0].device, b.ops[0].stream
        where = f" on {device}{' ' + stream if stream else ''}"
        ops = ", ".join(f"{said(op.name)} {duration(op.ns)}" for op in b.ops)
        return f"{where}: {ops}"
    ops = ", ".join(f"{said(op.name)} {duration(op.ns)} ({op.device} {op.stream})" for op in b.ops)
    return f": {ops}"


BOUND_ACTIONS = {
    "compute": "speed up the compute that bounds the step",
    "copy": "overlap or shrink the copies that bound the step",
    "transfer": "move fewer bytes in the collectives that bound the step",
    "wait": "even out the work before the collectives the step waits in",
    "other": "look at the device work that bounds the step",
}


def bound_action(b: StepBound) -> str:
    """What sets the step's end, as the thing to do: "speed up the compute that bounds the step — 75.8% of its
    critical path is compute on rank0/GPU:0 stream 7: ..."."""
    if b.cause == "launch":
        hosts = and_join(list(b.devices[:3]))
        return (
            f"shorten what the hosts of {hosts} do between launches — launch/host gaps are {pct(b.share)} of the"
            " step's critical path"
        )
    what = CAUSE_WORDS.get(b.cause, b.cause)
    action = BOUND_ACTIONS.get(b.cause, "look at what bounds the step")
    return f"{action} — {pct(b.share)} of its critical path is {what}{_ops_text(b)}"


def _aside(v: Verdict) -> str:
    """The opportunities that save more but are no first try, and why."""
    out = []
    for n, why, o in v.set_aside:
        saving = o.projected_saving_ns
        amount = ""
        if saving is not None and v.step_ns:
            amount = f": taking its exposed rest away would save {duration(saving)} ({pct(saving / v.step_ns)})"
        if why == "hidden":
            share = o.evidence.get("hidden_share") if isinstance(o.evidence, Mapping) else None
            done = f"{pct(float(share))} hidden" if isinstance(share, int | float) else "mostly hidden"
            out.append(f"opportunity {n} ({o.title}) is already {done}{amount}")
        else:
            out.append(f"opportunity {n} ({o.title}) is mostly exposed at the capture's edges{amount}")
    return "; ".join(out)


def first_try_line(v: Verdict) -> str:
    """The verdict's first try (§9, issue 39): the biggest lever as an action. The change of "what would it buy"
    that saves the most where it is one (an opportunity's remedy in one action, the straggler fix, the
    router); an opportunity no replay measured, by its bound; else what sets the step's end, as the thing to
    do, beside the opportunities set aside (already hidden, at the capture's edges)."""
    p = v.first_try
    o = v.first_try_of
    if o is not None and v.first_bounded:
        per = o.saving_bound_ns / (v.steps or 1)
        return (
            f"First try: {_action(o)} — {o.title}, up to {duration(per)} per step"
            f"{'' if v.devices == 1 else ' (the worst device)'}; see"
            f" opportunity {v.first_opportunity}."
        )
    if p is None:
        aside = _aside(v)
        floor = f"{SIGNIFICANT_SAVING:.0%}"
        if v.step_bound is not None:
            nothing = f"none of the changes moeprof projects saves {floor} or more of the step"
            tail = f"; {aside}" if aside else f"; {nothing}"
            return f"First try: {bound_action(v.step_bound)}{tail}."
        return f"None of the changes moeprof tries by itself shortens the step by {floor} or more."
    n = opportunity_number(p)
    lever = o is not None and is_lever(o)
    saving = f"projected to save {'up to ' if lever else ''}{duration(p.saving_ns)} of the"
    saving += f" {duration(p.measured_step_ns)} step ({pct(p.saving_fraction)}){' at its roof' if lever else ''}"
    if n is not None:
        what = _action(o) if o is not None else (v.first_try_title or p.label)
        return f"First try: {what} — {saving}; see opportunity {n}."
    what = {
        "straggler": "make every rank as fast as the median rank (the straggler fix)",
        "router": "balance the router, so that every device gets the same expert work",
    }.get(p.role, p.label)
    return f"First try: {what} — {saving}; see what would it buy."


def headline(v: Verdict | None) -> list[str]:
    """The key figures in parts (a renderer joins them), per device: a sum over devices reads as longer than the run."""
    if v is None:
        return []
    scope = f"{plural(v.devices, 'chip' if v.tpu else 'device')} from {plural(v.files, 'trace file')}"
    if v.named_devices:  # planes without activity: the device count is not the job's size
        named = "the trace names" if v.files == 1 else f"the {v.files} trace files name"
        scope = f"{v.devices} of the {v.named_devices} {'chips' if v.tpu else 'GPUs'} {named} had device activity"
    if v.cannot_answer is not None:  # what is left of the step is no step: no figure of it
        return [scope, "step: not timed (the trace cannot answer, above)"]
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
    """The exposed comm split by cause (§8), per device and step as the headline's exposed comm (the parts add up
    to it); nothing where the ledger did not run."""
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
            on_fabric(
                "waiting vs moving bytes: unknown, no collective matched across ranks "
                "(analyze the traces of every member of its groups together)"
            )
        ]
    unmatched = _mean_worst(led.exposed_unmatched) if led.has_unmatched else "none"
    # in the unit of the headline's exposed comm, so that the three parts add up to it (summary.ledger_summary)
    per = "per device and step" if v.exposed_per_step is not None and v.step_ns is not None else "per device"
    return [
        f"{per}, exposed comm waiting: {_mean_worst(led.exposed_wait)}",
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
    matched = f"{plural(led.instances, 'collective instance')} matched across ranks"
    if not (led.incomplete or led.desynchronized):
        return on_fabric(f"{lead}{matched}, none incomplete or desynchronized; {clock_text(led)}.")
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
    return on_fabric(f"{lead}{matched}{sep} {'; '.join(problems)}; {clock_text(led)}.")


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


CPU_STRAGGLER = (
    "XLA:CPU devices share the host's cores: the late ones are mostly those the host scheduled later, not slower"
    " devices (no straggler to fix)"
)


def payoff_rows(analysis: Analysis) -> list[PayoffRow]:
    """The projections the analysis carries, as the table shows them: the one asked for first, then the rest
    by saving, most first (the first of those is the verdict's first try)."""
    asked = [p for p in analysis.projections if p.role == "asked"]
    rest = sorted((p for p in analysis.projections if p.role != "asked"), key=lambda p: -p.saving_ns)
    rows = []
    cpu = is_cpu_job(d.kind for d in analysis.devices)
    for p in [*asked, *rest]:
        note = p.note
        if cpu and p.role == "straggler":  # no slower device among threads of one host: a sensitivity, no fix
            note = "; ".join(n for n in (CPU_STRAGGLER, note) if n)
        if p.selected == 0:
            note = note or "selects no activity: the step is the measured one"
        elif not p.shortens and p.role in ("straggler", "router", "asked"):  # the questions asked by name
            why = f": {bound_text(p.bound)}" if p.bound is not None else ""
            note = f"would not shorten this step{why}" + (f"; {note}" if note else "")
        shortens = p.shortens
        rows.append(
            PayoffRow(
                on_fabric(p.label),
                " ".join(p.what_if),
                ms(p.projected_step_ns),
                ms(p.saving_ns) if shortens else "-",
                pct(p.saving_fraction) if shortens else "none",
                on_fabric(note),
            )
        )
    return rows


# what an opportunity's saving bound is bounded by (Opportunity.bound_from), in words
BOUND_WORDS = {
    "hlo": "bounded by independent compute in the HLO",
    "compute": "bounded by the compute beside them, all overlap can hide",
}


def is_lever(o: Opportunity) -> bool:
    """An on-chip lever (spec §10): its saving is its activities at the chip's roof, a bound."""
    return o.kind == ON_CHIP


def opportunity_savings_text(o: Opportunity, steps: int, step_ns: int | None) -> tuple[str, str]:
    """An opportunity's two answers, to two questions: hidden under compute, at most what (spec §6's bound,
    per step, on the worst device); taken away, what the replay says the step gains (§9). An on-chip lever's:
    its time below the roof (per step, on the worst device), and the step at its roof (up to: a bound)."""
    per = o.saving_bound_ns / steps if steps else None
    amount = duration(per if per is not None else o.saving_bound_ns)
    amount += " per step" if per is not None and steps > 1 else ""
    if is_lever(o):
        below = f"below its roof: {amount} on the worst device"
        if o.projected_saving_ns is not None and step_ns:
            if o.projected_saving_ns >= SIGNIFICANT_SAVING * step_ns:
                share = pct(o.projected_saving_ns / step_ns)
                at = f"at its roof: the step up to {duration(o.projected_saving_ns)} ({share}) shorter (projected)"
                return below, at
            return below, f"at its roof: the step under {SIGNIFICANT_SAVING:.0%} shorter (projected)"
        return below, ""
    bound = BOUND_WORDS.get(o.bound_from, "its exposed time")
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


# ---------------------------------------------------------------- §10: roles and the roofline

GLUE_SAID = 0.1  # the token movement is said in the first lines from this share of the accumulated time
_GLUE_WORDS = {
    "router": "router",
    "permute": "permute",
    "unpermute": "unpermute",
    "dispatch": "one-chip exchanges",
    "combine": "one-chip exchanges",
}  # fmt: skip  (in the order the words are said)


def per_step_unit(result: Analysis) -> str:
    """What a per-step figure of the screens is (core.summary.step_divisor): "per device and step" with several
    steps, else "per device" (the window)."""
    return "per device and step" if step_divisor(result) > 1 else "per device"


def token_movement_line(result: Analysis) -> str | None:
    """``Token movement (router, permute, unpermute, one-chip exchanges) is 50.4% of the chip's time: 68.1 ms per
    step at 0.18 TFLOP/s and 41% of HBM bandwidth.``: the glue around the experts (spec §10), where it is
    :data:`GLUE_SAID` of the time or more; None elsewhere."""
    glue = (result.roofline or {}).get("glue")
    if not glue or float(glue.get("share") or 0) < GLUE_SAID:
        return None
    named = set(glue.get("roles") or ())
    words = list(dict.fromkeys(w for r, w in _GLUE_WORDS.items() if r in named))
    tpu = is_tpu_job(d.kind for d in result.devices)
    if not tpu:
        words = [w.replace("one-chip", "one-device") for w in words]
    unit = "chip" if tpu else "device"
    whose = f"the {unit}'s time" if len(result.devices) == 1 else f"the {unit}s' time"
    line = f"Token movement ({', '.join(words)}) is {pct(glue['share'])} of {whose}: {duration(glue['time_ns'])}"
    line += " per step" if step_divisor(result) > 1 else ""
    rates = []
    if glue.get("tflops_per_s") is not None:
        rates.append(f"{glue['tflops_per_s']:,.2g} TFLOP/s")
    if glue.get("hbm_util") is not None:
        rates.append(f"{pct(glue['hbm_util'])} of HBM bandwidth")
    return line + (f" at {' and '.join(rates)}." if rates else ".")


def peak_text(result: Analysis) -> str | None:
    """The one peak every figure is measured against, and where it comes from: ``202.7 TFLOP/s bf16 and HBM 819
    GB/s, from the device plane's peak_teraflops_per_second and peak_hbm_bw_gigabytes_per_second``; None without
    one."""
    rf = result.roofline or {}
    flops, hbm = rf.get("peak_flops"), rf.get("peak_hbm_bytes_per_s")
    if not flops and not hbm:
        return None
    parts = []
    if flops:
        parts.append(f"{flops / 1e12:,.1f} TFLOP/s bf16")
    if hbm:
        parts.append(f"HBM {hbm / 1e9:,.0f} GB/s")
    source = rf.get("from")
    return f"{' and '.join(parts)}" + (f", from {source}" if source else "")


@dataclass(frozen=True)
class TextTable:
    """A table as the renderers share it: a title, the headers, the rows as text, a caption."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


def _rate(value: float | None, time_ns: float, uncounted: float | None, per: float) -> float | None:
    counted = time_ns - (uncounted or 0.0)
    return None if value is None or counted <= 0 else value / counted / per


def _of_peak(row: Mapping[str, Any]) -> str:
    util = row.get("hbm_util") if row.get("bound") == "memory" else row.get("flop_util")
    return "-" if util is None else pct(float(util))


def roles_table(result: Analysis) -> TextTable | None:
    """The roles per step (spec §10): time, share, exposed, TFLOP/s, HBM GB/s, bound, of its peak, time below the
    roof; token movement marked. None where no role is known."""
    if not result.roles:
        return None
    unit = per_step_unit(result)
    peak = peak_text(result)
    rows = []
    for r in result.roles:
        time = float(r.get("time_ns") or 0)
        uncounted = r.get("uncounted_ns")
        tflops = _rate(r.get("flops"), time, uncounted, 1e3)
        gbps = _rate(r.get("hbm_bytes"), time, uncounted, 1.0)
        below = r.get("below_roof_ns")
        rows.append(
            [
                f"{r['role']}{' *' if r.get('glue') else ''}",
                ms(time),
                pct(r.get("share")),
                ms(r.get("exposed_ns")),
                "-" if tflops is None else f"{tflops:,.3g}",
                "-" if gbps is None else f"{gbps:,.4g}",
                str(r.get("bound") or "-"),
                _of_peak(r),
                "-" if below is None else ms(below),
            ]
        )
    title = f"MoE roles, ms {unit} (the mean over devices{' and steps' if step_divisor(result) > 1 else ''})"
    caption = "* token movement (router, permute, unpermute, exchanges on a group of one device)"
    headers = ["role", "ms", "share", "exposed ms", "TFLOP/s", "HBM GB/s", "bound", "of peak", "below roof ms"]
    if result.roofline is None:  # no activity has a FLOP or byte count: the time alone, said
        caption += "; no FLOP or HBM byte count in this trace (no roofline: not zero)"
        return TextTable(title, headers[:4], [row[:4] for row in rows], caption)
    if peak:
        caption += f"; of peak: of the bound's peak, {peak}"
    uncounted = result.roofline.get("uncounted_ns")
    if uncounted:
        caption += f"; {duration(uncounted)} over the capture has no FLOP or byte count (no roofline, not zero)"
    return TextTable(title, headers, rows, caption)


def roofline_table(result: Analysis, top: int) -> TextTable | None:
    """The ops that take the most time against the roof (xprof's op_profile with the MoE role beside), per step:
    calls, time, TFLOP/s, HBM GB/s, bound, of peak, time below the roof. None where no op has counts."""
    rf = result.roofline or {}
    ops = list(rf.get("ops") or ())[:top]
    if not ops:
        return None
    per = float(step_divisor(result) * max(int(rf.get("devices") or 1), 1))
    rows = []
    for o in ops:
        time = float(o.get("time_ns") or 0)
        uncounted = o.get("uncounted_ns")
        tflops = _rate(o.get("flops"), time, uncounted, 1e3)
        gbps = _rate(o.get("hbm_bytes"), time, uncounted, 1.0)
        below = o.get("below_roof_ns")
        util = o.get("hbm_util")
        wrong = util is not None and float(util) > 1  # a count above the roof is a wrong count, said
        rows.append(
            [
                said(str(o.get("op", ""))),  # a GPU kernel's demangled name runs to hundreds of characters
                str(o.get("role", "")),
                str(o.get("scope", "")),
                f"{int(o.get('count') or 0) / per:,.3g}",
                ms(time / per),
                "-" if tflops is None else f"{tflops:,.3g}",
                "-" if gbps is None else f"{gbps:,.4g}",
                str(o.get("bound") or "-"),
                _of_peak(o) + (" (!)" if wrong else ""),
                "-" if below is None else ms(float(below) / per),
            ]
        )
    unit = per_step_unit(result)
    title = f"Ops against the roof (the {len(ops)} longest of {len(rf.get('ops') or ())}), ms {unit}"
    caption = (
        "of peak: of the bound's peak (HBM bytes over time for memory-bound ops, FLOPs for compute-bound);"
        " (!): above the peak, a count that cannot be right"
    )
    headers = ["op", "role", "scope", "calls", "ms", "TFLOP/s", "HBM GB/s", "bound", "of peak", "below roof ms"]
    return TextTable(title, headers, rows, caption)
