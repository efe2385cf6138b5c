"""Side-by-side comparison of analyses: ``moeprof diff`` as a library.

Times are normalized to **one device and one step** (totals divided by devices x
measured steps), so a 2-step capture compares with a 5-step one and an 8-device
run with a 16-device run; ratios need no normalization. Deltas are given against
the first run and against the previous one. When every input is a run folder the
comparison also carries an ablation table (throughput and the gain each run
contributed), and runs that differ in device count or topology are flagged.

Noise: the steps of a run give the figure's step-to-step spread, shown as ± half the range
(max − min) of its per-step values. A difference is *within noise* when Welch's two-sided test
on the two runs' per-step values does not reject equal means at 5% (``noise.DIFF_ALPHA``). A run
with fewer than two steps has no spread, and then no noise verdict is given.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.analysis import LEDGER_KEYS, NS_KEYS, Analysis, Collective, Opportunity
from ..core.hardware import fabric_text
from ..core.roofline import ON_CHIP
from ..core.scopes import NO_SCOPE, TOP_LEVEL
from ..errors import InputError
from ..insight.attribution import step_parts
from ..insight.explain import explain_change
from ..insight.projection import Projector
from ..options import ExecOptions, LoadOptions, StepOptions
from ..pipeline import Request, run
from ..readers import discover
from ..readers.runfolder import read_manifest
from ..words import plural
from .check import Source, is_analysis_json, load_source, measure, step_count, step_time_ns
from .noise import DIFF_ALPHA, indistinguishable

DIFF_SCHEMA = "moeprof.diff/1"

BUCKETS = (
    ("compute", "compute_ns"),
    ("comm NVLink", "comm_nvlink_ns"),
    ("comm IB", "comm_ib_ns"),
    ("comm unknown link", "comm_unknown_link_ns"),
    ("memcpy", "memcpy_ns"),
    ("other", "other_ns"),
    ("idle", "idle_ns"),
)


@dataclass
class RunInfo:
    label: str
    path: str
    kind: str
    devices: int
    hosts: int | None
    devices_per_host: int | None
    nvlink_domain: str | None
    steps: int
    throughput: dict | None

    @property
    def topology(self) -> str:
        # a domain of one host says nothing "1 host x 8" does not (and an XLA:CPU host has no NVLink)
        domain = f", NVLink domain {self.nvlink_domain}" if self.nvlink_domain not in (None, "one host") else ""
        hosts = "? hosts" if self.hosts is None else plural(self.hosts, "host")
        return f"{plural(self.devices, 'device')}, {hosts} x {self.devices_per_host}{domain}"


def labels(n: int) -> list[str]:
    return [chr(ord("A") + i) if i < 26 else f"R{i}" for i in range(n)]


def run_info(label: str, source: Source) -> RunInfo:
    """Devices and topology: the manifest's record where there is one, else what the trace shows."""
    a = source.analysis
    devices = a.devices
    per_host: dict[str, int] = {}
    for d in devices:
        per_host[d.host] = per_host.get(d.host, 0) + 1
    topo = (a.manifest or {}).get("topology") or {}
    domain = topo.get("nvlink_domain") or topo.get("ici_domain")
    return RunInfo(
        label=label,
        path=str(source.path),
        kind=source.kind,
        devices=len(devices),
        hosts=topo.get("hosts") or len(per_host),
        devices_per_host=topo.get("devices_per_host") or (max(per_host.values()) if per_host else 0),
        nvlink_domain=None if domain is None else str(domain),
        steps=step_count(a),
        throughput=dict(a.throughput) if a.throughput else None,
    )


def topology_warning(runs: list[RunInfo]) -> str | None:
    """One line when runs differ in device count, hosts, devices per host or NVLink domain."""
    keys = {(r.devices, r.hosts, r.devices_per_host) for r in runs}
    domains = {r.nvlink_domain for r in runs if r.nvlink_domain is not None}
    if len(keys) <= 1 and len(domains) <= 1:
        return None
    what = "; ".join(f"{r.label}: {r.topology}" for r in runs)
    return f"runs differ in device count or topology ({what}): a single-node win can vanish across racks"


Samples = list[float] | None  # a run's per-step values of a figure (None: fewer than two steps, or none for it)


def within_noise(samples: Samples, ref_samples: Samples) -> bool | None:
    """Whether two runs' per-step values cannot be told apart (:func:`noise.indistinguishable`); None when unknown."""
    if samples is None or ref_samples is None:
        return None
    return indistinguishable(ref_samples, samples)


def half_range(samples: Samples) -> float | None:
    """Half of (max - min) of a run's per-step values: the ``±`` shown beside a value."""
    return None if samples is None else (max(samples) - min(samples)) / 2


def _row(section: str, name: str, unit: str, values: list[float | None], samples: list[Samples] | None = None) -> dict:
    samples = samples or [None] * len(values)

    def delta(v: float | None, ref: float | None) -> float | None:
        return None if v is None or ref is None else v - ref

    def change(v: float | None, ref: float | None) -> float | None:
        # relative change only for amounts; a ratio's change is its delta in points
        return None if unit == "ratio" or v is None or not ref else v / ref - 1

    first = values[0]
    return {
        "section": section,
        "name": name,
        "unit": unit,
        "values": values,
        "delta_first": [delta(v, first) for v in values],
        "change_first": [change(v, first) for v in values],
        "delta_previous": [None] + [delta(v, p) for p, v in pairwise(values)],
        "change_previous": [None] + [change(v, p) for p, v in pairwise(values)],
        # half the range of the run's per-step values (None: fewer than two steps, or no steps for this figure)
        "spread": [half_range(s) for s in samples],
        "within_noise_first": [None] + [within_noise(s, samples[0]) for s in samples[1:]],
        "within_noise_previous": [None] + [within_noise(s, p) for p, s in pairwise(samples)],
    }


def step_frame(a: Analysis) -> pd.DataFrame:
    """Per step: every ns figure (and §8 figure, where the ledger ran) summed over devices, the number of
    devices and the step's time (the job's, ``spread.steps``: §5's window over its devices; a saved analysis
    without it, the slowest device's span)."""
    if not a.steps:
        return pd.DataFrame()
    keys = [*NS_KEYS, *(LEDGER_KEYS if any(s.ledger is not None for s in a.steps) else ())]
    frame = pd.DataFrame([{"step": s.step, **{k: s.value(k) for k in keys}} for s in a.steps])
    grouped = frame.groupby("step")
    out = grouped[keys].sum()
    out["devices"] = grouped.size()
    out["step_span_ns"] = grouped["span_ns"].max()
    job = pd.Series({s.step: s.span_ns for s in a.spread.steps}, dtype="float64")
    if len(job):
        out["step_span_ns"] = job.reindex(out.index).fillna(out["step_span_ns"])
    return out


# a row's value in every step, from the steps' sums (one value per row of step_frame)
StepValue = Callable[[pd.DataFrame], pd.Series]


def per_device_ms(key: str) -> StepValue:
    return lambda f: f[key] / f["devices"] / 1e6


def step_ratio(num: str, den: str) -> StepValue:
    # a share is 0 where its denominator is (spec §4)
    return lambda f: (f[num] / f[den].where(f[den] != 0)).fillna(0.0)


def step_samples(steps: pd.DataFrame, value: StepValue) -> Samples:
    """A figure's value in each step of one run; None with fewer than two steps (or without the figure per
    step)."""
    if len(steps) < 2:
        return None
    try:
        values = value(steps).astype(float)
    except KeyError:  # a §8 figure of a run whose steps carry no ledger figures
        return None
    return [float(v) for v in values.tolist()]


def _kinds(items: list[Collective] | list[Opportunity]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item.kind, None)
    return list(seen)


def _by_kind(rows: tuple[Collective, ...] | tuple[Opportunity, ...], kind: str, key: str) -> float:
    return float(sum(getattr(r, key) or 0 for r in rows if r.kind == kind))


def _opportunity_key(o: Opportunity) -> str:
    """What a diff row sums opportunities by: their kind, an on-chip lever's its own (``on-chip glue``)."""
    return f"{o.kind} {o.name}" if o.kind == ON_CHIP else o.kind


def _bytes_per_call(rows: tuple[Collective, ...], kind: str) -> float | None:
    sized = [r for r in rows if r.kind == kind and r.bytes is not None and r.count]
    calls = sum(r.count for r in sized)
    return float(sum(r.bytes or 0 for r in sized)) / calls if calls else None


def compare(sources: list[Source]) -> dict:
    """The ``moeprof.diff/1`` object for two or more analyses, in the order given."""
    if len(sources) < 2:
        raise ValueError("diff needs two or more inputs")
    host_only = [s for s in sources if s.analysis.host_only]
    if host_only:
        raise InputError(host_only[0].path, f"{Analysis.HOST_ONLY}: no figure diff compares (analyze them)")
    free = [s.analysis.timeline_free for s in sources]
    if all(free):
        return compare_inspector(sources)
    if any(free):
        odd = sources[free.index(True)]
        raise InputError(
            odd.path,
            "NCCL Inspector logs (no timeline) compared with timeline traces: they share no figure; diff them apart",
        )
    runs = [run_info(label, s) for label, s in zip(labels(len(sources)), sources)]
    analyses = [s.analysis for s in sources]
    # totals over devices and steps -> one device-step, in ms
    norms = [max(r.devices, 1) * r.steps for r in runs]

    def per_device_step(values: list[float]) -> list[float | None]:
        return [v / n / 1e6 for v, n in zip(values, norms)]

    def total(key: str) -> list[float]:
        return [a.total.value(key) for a in analyses]

    frames = [step_frame(a) for a in analyses]

    def samples_of(value: StepValue) -> list[Samples]:
        return [step_samples(f, value) for f in frames]

    rows = [
        _row("buckets", name, "ms", per_device_step(total(key)), samples_of(per_device_ms(key)))
        for name, key in BUCKETS
    ]
    rows += [
        _row(
            "comm",
            "accumulated",
            "ms",
            per_device_step(total("accumulated_ns")),
            samples_of(per_device_ms("accumulated_ns")),
        ),
        _row(
            "comm",
            "comm share",
            "ratio",
            [measure(a, "comm_share").value for a in analyses],
            samples_of(step_ratio("comm_ns", "accumulated_ns")),
        ),
        _row(
            "comm",
            "exposed comm",
            "ms",
            per_device_step(total("exposed_comm_ns")),
            samples_of(per_device_ms("exposed_comm_ns")),
        ),
        # §8 split, where a run had the traces of several members of a group (None elsewhere)
        _row(
            "comm",
            "exposed: waiting for the last rank",
            "ms",
            [v if a.ledger_matched else None for v, a in zip(per_device_step(total("exposed_wait_ns")), analyses)],
            samples_of(per_device_ms("exposed_wait_ns")),
        ),
        _row(
            "comm",
            "exposed: moving bytes",
            "ms",
            [v if a.ledger_matched else None for v, a in zip(per_device_step(total("exposed_transfer_ns")), analyses)],
            samples_of(per_device_ms("exposed_transfer_ns")),
        ),
        _row(
            "comm",
            "exposed comm / span",
            "ratio",
            [measure(a, "exposed_comm_fraction").value for a in analyses],
            samples_of(step_ratio("exposed_comm_ns", "span_ns")),
        ),
        _row(
            "comm",
            "step time",
            "ms",
            [step_time_ns(a) / 1e6 for a in analyses],
            samples_of(lambda f: f["step_span_ns"] / 1e6),
        ),
    ]
    step_time_row = rows[-1]
    collectives = [a.collectives for a in analyses]
    for kind in _kinds([c for cs in collectives for c in cs]):
        rows.append(
            _row(
                "collectives",
                f"{kind} total",
                "ms",
                per_device_step([_by_kind(cs, kind, "total_ns") for cs in collectives]),
            )
        )
        rows.append(
            _row(
                "collectives",
                f"{kind} exposed",
                "ms",
                per_device_step([_by_kind(cs, kind, "exposed_ns") for cs in collectives]),
            )
        )
        rows.append(
            _row("collectives", f"{kind} bytes/call", "bytes", [_bytes_per_call(cs, kind) for cs in collectives])
        )
    opportunities = [a.opportunities for a in analyses]
    keys: dict[str, None] = dict.fromkeys(_opportunity_key(o) for os_ in opportunities for o in os_)
    for key in keys:
        # a saving bound is already one (the worst) device's time: divide by steps only; on-chip levers one row
        # each (they overlap: the token movement holds its backward scatter-adds)
        bounds: list[float | None] = [
            sum(o.saving_bound_ns for o in os_ if _opportunity_key(o) == key) / r.steps / 1e6
            for os_, r in zip(opportunities, runs)
        ]
        rows.append(_row("opportunities", f"{key} saving bound", "ms", bounds))
    warnings = [w for w in [topology_warning(runs), chip_warning(runs, analyses)] if w]
    # TPU runs name their fabrics ICI and DCN (the rows keep the NVLink/IB names of the JSON keys)
    hardware = [a.hardware or {} for a in analyses]
    named = {(h.get("scale_up"), h.get("scale_out"), h.get("scale_up_domain")) for h in hardware}
    fabrics = list(named.pop()) if len(named) == 1 and None not in next(iter(named)) else None
    if fabrics:  # "NVLink domain" in the runs' own words (an ICI slice, an XLA:CPU host's memory)
        warnings = [fabric_text(w, *(str(f) for f in fabrics)) for w in warnings]
    return {
        "schema": DIFF_SCHEMA,
        "normalization": "times in ms per device and step (totals / (devices x steps)); saving bounds per step",
        "noise": "spread = half the range of a run's per-step values; a difference is within noise when Welch's"
        f" two-sided test on the runs' per-step values does not reject equal means at {DIFF_ALPHA:g}; null without two"
        " steps in both",
        "runs": [
            {
                "label": r.label,
                "path": r.path,
                "kind": r.kind,
                "devices": r.devices,
                "hosts": r.hosts,
                "devices_per_host": r.devices_per_host,
                "nvlink_domain": r.nvlink_domain,
                "steps": r.steps,
                "throughput": r.throughput,
            }
            for r in runs
        ],
        "rows": rows,
        "ablation": ablation(runs, analyses, step_time_row) if all(s.kind == "run" for s in sources) else None,
        "warnings": warnings,
        **({"fabrics": fabrics} if fabrics else {}),
    }


def compare_inspector(sources: list[Source]) -> dict:
    """``moeprof.diff/1`` for analyses of NCCL Inspector logs: collective time per process, the time beyond
    each collective's shortest member, and bus bandwidth per collective, link and size bucket."""
    sections: list[Mapping[str, Any]] = [s.analysis.inspector or {} for s in sources]
    names = labels(len(sources))

    def share(section: Mapping[str, Any], key: str) -> float | None:
        total = float(section.get("exec_us") or 0.0)
        if key == "last":
            top = (section.get("last_to_arrive") or [None])[0]
            value = float(top["caused_us"]) if top else 0.0
        else:
            value = float(section.get(key) or 0.0)
        return value / total if total else None

    rows = [
        _row(
            "inspector",
            "collective time per process",
            "ms",
            [float(x.get("exec_us") or 0.0) / max(int(x.get("processes") or 1), 1) / 1000 for x in sections],
        ),
        _row("inspector", "beyond each collective's shortest member / all", "ratio",
             [share(x, "beyond_shortest_us") for x in sections]),
        _row("inspector", "beyond the top last-to-arrive process / all", "ratio", [share(x, "last") for x in sections]),
    ]  # fmt: skip
    keyed = [{(b["op"], b["link"], b["size_bucket_bytes"]): b for b in x.get("bandwidth") or ()} for x in sections]
    for op, link, bucket in sorted({k for table in keyed for k in table}):
        cells = [t.get((op, link, bucket)) for t in keyed]
        label = f"{op} {link} {cells[0]['size_bucket'] if cells[0] else bucket}"
        rows.append(_row("bus bandwidth (GB/s; more is better)", f"{label} bus GB/s", "GB/s",
                         [c["bus_bandwidth_gbps"] if c else None for c in cells]))  # fmt: skip
        rows.append(_row("bus bandwidth (GB/s; more is better)", f"{label} mean ms per call", "ms",
                         [c["mean_exec_us"] / 1000 if c else None for c in cells]))  # fmt: skip
    runs: list[dict[str, Any]] = []
    for label, source, x in zip(names, sources, sections):
        flagged = [r["process"] for r in x.get("last_to_arrive") or () if r.get("flagged")]
        runs.append(
            {
                "label": label,
                "path": str(source.path),
                "kind": source.kind,
                "devices": int(x.get("processes") or 0),  # processes: the logs name no device
                "hosts": len({r["host"] for r in x.get("last_to_arrive") or ()}) or None,
                "devices_per_host": None,
                "nvlink_domain": None,
                "steps": 1,
                "throughput": None,
                "last_to_arrive": flagged,
            }
        )
    warnings = []
    if len({tuple(r["last_to_arrive"]) for r in runs}) > 1:
        warnings.append(
            "the last to arrive differs: " + "; ".join(f"{r['label']}: {', '.join(r['last_to_arrive']) or 'none'}"
                                                       for r in runs)
        )  # fmt: skip
    return {
        "schema": DIFF_SCHEMA,
        "normalization": "NCCL Inspector logs (no timeline, no steps): collective time per process; ratios of all"
        " collective time; bus bandwidth per collective, link and message-size bucket",
        "noise": "no steps in Inspector logs: no noise verdict",
        "runs": runs,
        "rows": rows,
        "ablation": None,
        "warnings": warnings,
    }


def ablation(runs: list[RunInfo], analyses: list[Analysis], step_time_row: dict | None = None) -> dict:
    """Per run in order: throughput, comm figures and the gain over the previous run and over the first.

    The gain is the ratio of tokens/s when every run reports it, else the inverse
    ratio of step times (a shorter step is a gain). Both follow from the step time,
    so a gain is within noise when the step-time difference is (``step_time_row``).
    """
    noise_first = (step_time_row or {}).get("within_noise_first") or [None] * len(runs)
    noise_previous = (step_time_row or {}).get("within_noise_previous") or [None] * len(runs)
    tokens = [(r.throughput or {}).get("tokens_per_second") for r in runs]
    step_ms = [step_time_ns(a) / 1e6 for a in analyses]
    use_tokens = all(t for t in tokens)
    speed: list[float | None] = (
        [float(t) for t in tokens if t is not None] if use_tokens else [1 / s if s else None for s in step_ms]
    )

    def ratio(v: float | None, ref: float | None) -> float | None:
        return v / ref if v is not None and ref else None

    rows = []
    for i, (r, a) in enumerate(zip(runs, analyses)):
        rows.append(
            {
                "label": r.label,
                "path": r.path,
                "tokens_per_second": tokens[i],
                "tflops_per_device": (r.throughput or {}).get("tflops_per_device"),
                "step_ms": step_ms[i],
                "comm_share": measure(a, "comm_share").value,
                "exposed_comm_ms": a.total.exposed_comm_ns / max(r.devices, 1) / r.steps / 1e6,
                "gain_vs_previous": ratio(speed[i], speed[i - 1]) if i else None,
                "gain_vs_first": ratio(speed[i], speed[0]) if i else None,
                "gain_vs_previous_within_noise": noise_previous[i],
                "gain_vs_first_within_noise": noise_first[i],
            }
        )
    return {"metric": "tokens_per_second" if use_tokens else "1/step_time", "runs": rows}


# ---------------------------------------------------------------- explaining a measured ablation (§9)


@dataclass(frozen=True)
class ChangeRatio:
    """One change B shows against A, per device and step: a collective kind's transfer (its duration where
    the ledger did not split it) or the compute time, and the scale() term that applies it to A."""

    what: str  # "all-to-all transfer", "all-reduce duration", "compute"
    term: str  # scale(kind=all-to-all)=0.5
    a_ns: float  # per device and step
    b_ns: float
    ratio: float


def change_ratios(a: Analysis, b: Analysis) -> list[ChangeRatio]:
    """Per collective kind both runs have, and for compute: B's time over A's, per device and step.

    A kind's time is its transfer (§8: an instance member's end minus the last arrival) where the
    ledger split both runs, since the projection replays waiting itself; else its whole duration.
    Kinds only one run has and figures that are 0 in A are left out (no ratio to scale by).
    """
    norm_a = max(len(a.devices), 1) * step_count(a)
    norm_b = max(len(b.devices), 1) * step_count(b)
    out = []
    kinds_b = {c.kind for c in b.collectives}
    split = a.ledger_matched and b.ledger_matched
    for kind in _kinds(list(a.collectives)):
        if kind not in kinds_b:
            continue
        key = "transfer_ns" if split else "total_ns"
        a_ns = _by_kind(a.collectives, kind, key) / norm_a
        b_ns = _by_kind(b.collectives, kind, key) / norm_b
        if a_ns > 0:
            what = f"{kind} {'transfer' if split else 'duration'}"
            out.append(ChangeRatio(what, f"scale(kind={kind})={b_ns / a_ns:.6g}", a_ns, b_ns, b_ns / a_ns))
    a_ns, b_ns = a.total.compute_ns / norm_a, b.total.compute_ns / norm_b
    if a_ns > 0:
        out.append(ChangeRatio("compute", f"scale(bucket=compute)={b_ns / a_ns:.6g}", a_ns, b_ns, b_ns / a_ns))
    return out


def explanation(
    a: Analysis,
    a_projector: Projector,
    b: Analysis,
    b_projector: Projector,
    labels_ab: tuple[str, str] = ("A", "B"),
) -> dict:
    """Where B's step went against A's: per (JAX scope, pass, op) what got cheaper, dearer, is new or gone,
    per device and step, and the residual no part carries (:func:`moeprof.insight.explain.explain_change`).

    Beside it, ``projection``: A replayed with the uniform ratios B shows per collective kind and for compute
    (§9, :func:`change_ratios`), against B's measured step: ``explained_ms`` is A's step minus that projection,
    ``missed_ms`` B's measured step minus it (what uniform ratios do not carry: a new kernel, a change that is
    not uniform, a different schedule); left out where the install cannot replay the job in seconds.
    """
    parts = explain_change(step_parts(a_projector.job), step_parts(b_projector.job))
    return {
        "reference": labels_ab[0],
        "run": labels_ab[1],
        "reference_step_ms": parts["step"]["reference_ms"],
        "measured_step_ms": parts["step"]["run_ms"],
        "step_change_ms": parts["step"]["delta_ms"],
        **parts,
        "projection": _ratio_projection(a, a_projector, b) if a_projector.affordable else None,
    }


def _ratio_projection(a: Analysis, a_projector: Projector, b: Analysis) -> dict:
    """A projected with B's uniform change ratios (§9), beside B's measured step."""
    ratios = change_ratios(a, b)
    terms = [r.term for r in ratios]
    projected = a_projector.project(terms, figures=False)
    b_step = float(step_time_ns(b))
    a_step = float(projected.measured_step_ns)
    p_step = float(projected.projected_step_ns)
    return {
        "changes": [
            {"what": r.what, "term": r.term, "reference_ms": r.a_ns / 1e6, "run_ms": r.b_ns / 1e6, "ratio": r.ratio}
            for r in ratios
        ],
        "what_if": terms,
        "projected_step_ms": p_step / 1e6,
        "explained_ms": (a_step - p_step) / 1e6,
        "missed_ms": (b_step - p_step) / 1e6,
        "missed_fraction": (b_step - p_step) / b_step if b_step else None,
    }


def load_with_traces(
    path: Path,
    options: LoadOptions | None = None,
    step_options: StepOptions | None = None,
    execution: ExecOptions | None = None,
    keep_traces: bool = True,
) -> tuple[Source, Projector | None]:
    """A trace or run folder analyzed with its projector kept (a projection replays its job); a saved
    analysis, a run folder that kept only its analysis, or any input when ``keep_traces`` is False, as
    ``load_source`` reads it, without one (both in workers, per ``execution``)."""
    if not (keep_traces and _replayable(path, options)):
        return load_source(path, options, step_options, execution), None
    result = run(Request([path], options or LoadOptions(), step_options, execution or ExecOptions()))
    analysis = result.analysis
    kind = "run" if path.is_dir() and read_manifest(path) is not None else "trace"
    # NCCL Inspector logs have no timeline to replay: nothing for a projection to explain
    return Source(path, kind, analysis), None if analysis.timeline_free else result.projector


def _replayable(path: Path, options: LoadOptions | None) -> bool:
    if not path.exists() or is_analysis_json(path):
        return False
    try:
        return bool(discover([path], options))
    except InputError:
        return False


# ---------------------------------------------------------------- an ablation ladder (issue 49)

# the run settings a manifest records (``model``: capture demo's configuration) in words, and those that are
# bookkeeping, not a change of the step (how many steps were profiled)
SETTING_WORDS: dict[str, str] = {
    "dtype": "dtype",
    "capacity_factor": "capacity factor",
    "expert_compute": "expert compute",
    "top_k": "top-k",
    "experts": "experts",
    "tokens_per_device": "tokens per device",
    "hidden": "hidden",
    "expert_ffn": "expert FFN",
    "layers": "layers",
    "shared_expert": "shared expert",
    "router": "router",
    "router_skew": "router skew",
    "a2a": "exchange",
    "permute_backward": "permutations' backward",
    "skip_one_device_exchange": "skip the one-device exchange",
    "expert_tile_rows": "expert tile rows",
    "sync_every": "host waits every N steps",
    "devices": "devices",
}
NOT_SETTINGS = frozenset({"steps", "warmup_steps"})
LADDER_SCOPES = 3  # the scopes a rung names as where its change went


def _setting_value(key: str, value: Any) -> str:
    if key == "capacity_factor" and value is None:
        return "dropless"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "auto"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def run_settings(manifest: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a run folder's manifest says the run was: its configuration (``model``), its devices, its XLA flags
    and its JAX version; None where the input has no manifest (a trace, a saved analysis)."""
    if not manifest:
        return None
    settings: dict[str, Any] = {k: v for k, v in (manifest.get("model") or {}).items() if k not in NOT_SETTINGS}
    devices = manifest.get("devices") or {}
    if devices:
        settings["chips"] = f"{devices.get('count', '?')} x {devices.get('kind', '?')}"
    settings["xla_flags"] = str(manifest.get("xla_flags") or "")
    jax = (manifest.get("versions") or {}).get("jax")
    if jax:
        settings["jax"] = str(jax)
    return settings


def setting_changes(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """What differs between two runs' settings, in words ("dtype float32 → bfloat16", "capacity factor 1.25 →
    dropless"); empty where either has none recorded."""
    if a is None or b is None:
        return []
    out = []
    for key in [*a, *(k for k in b if k not in a)]:
        va, vb = a.get(key), b.get(key)
        if va == vb:
            continue
        name = {"chips": "chips", "xla_flags": "XLA flags", "jax": "jax"}.get(key) or SETTING_WORDS.get(key, key)
        if key == "xla_flags":
            out.append(f"{name} {va or '(none)'!r} → {vb or '(none)'!r}")
        else:
            out.append(f"{name} {_setting_value(key, va)} → {_setting_value(key, vb)}")
    return out


def _by_scope(parts: list[dict[str, Any]], top: int = LADDER_SCOPES) -> list[dict[str, Any]]:
    """A rung's part changes summed per scope and pass, the ``top`` largest |Δ| first."""
    sums: dict[tuple[str, bool], float] = {}
    for p in parts:
        key = (str(p["scope"]), bool(p.get("backward")))
        sums[key] = sums.get(key, 0.0) + float(p["delta_ms"])
    ranked_scopes = sorted(sums.items(), key=lambda kv: (-abs(kv[1]), kv[0]))
    return [{"scope": s, "backward": bwd, "delta_ms": d} for (s, bwd), d in ranked_scopes[:top]]


def ladder(runs: list[dict[str, Any]], analyses: list[Analysis], explanations: list[dict[str, Any]]) -> dict:
    """An ablation ladder, one rung per pair of consecutive runs: what changed between them (their manifests'
    settings), the step before and after, the rung's change and its share of the whole ladder's change (the
    rungs' changes add up to the last run's step minus the first's), and where it went: the scopes (and
    passes) whose activity time changed most, from the rung's explanation, and the residual no part carries."""
    settings = [run_settings(a.manifest) for a in analyses]
    steps = [step_time_ns(a) / 1e6 for a in analyses]
    whole = steps[-1] - steps[0]
    by_pair = {(e["reference"], e["run"]): e for e in explanations}
    rungs = []
    for i in range(1, len(runs)):
        a, b = runs[i - 1]["label"], runs[i]["label"]
        e = by_pair.get((a, b))
        delta = steps[i] - steps[i - 1]
        rungs.append(
            {
                "from": a,
                "to": b,
                "changed": setting_changes(settings[i - 1], settings[i]),
                "settings_known": settings[i - 1] is not None and settings[i] is not None,
                "step_ms": [steps[i - 1], steps[i]],
                "delta_ms": delta,
                "gain": steps[i - 1] / steps[i] if steps[i] else None,
                "share_of_ladder": delta / whole if whole else None,
                "by_scope": _by_scope(e["parts"]) if e else [],
                "residual_ms": e["residual_ms"] if e else None,
            }
        )
    return {
        "unit": "ms per device and step; a rung's share is its step change over the whole ladder's",
        "step_ms": [steps[0], steps[-1]],
        "delta_ms": whole,
        "rungs": rungs,
    }


# ---------------------------------------------------------------- runs that do not compare

# below this share of either run's time in what both runs hold (scopes of the same name; without scopes, parts
# matched by kernel name and kind), the two runs are not one program: two variants of one MoE step (the padded
# einsum and the ragged_dot experts of tpu_v5e_moe_step) keep 40-66% of their time in scopes both name, the
# demo against that step 0%
PROGRAMS_SHARED = 0.25


def _chips(a: Analysis) -> str:
    """The job's chips in words: the models the traces name, else the devices' kind."""
    models = (a.hardware or {}).get("models") or {}
    if models:
        return ", ".join(f"{n} x {name}" for name, n in sorted(models.items()))
    kinds = sorted({d.kind or "unknown" for d in a.devices})
    return f"{len(a.devices)} x {'/'.join(kinds)}"


def chip_warning(runs: list[RunInfo], analyses: list[Analysis]) -> str | None:
    """One line where the runs ran on different chips (a TPU against a GPU, an H100 against an A100)."""
    kinds = [(sorted({d.kind for d in a.devices}), sorted((a.hardware or {}).get("models") or {})) for a in analyses]
    if all(k == kinds[0] for k in kinds[1:]):
        return None
    said = "; ".join(f"{r.label}: {_chips(a)}" for r, a in zip(runs, analyses))
    return f"the runs ran on different chips ({said}): their figures compare the hardware as much as the program"


_NUMBERED = re.compile(r"^[A-Za-z_]+?_?(\d+|\*)$")  # a numbered layer's component: layer0, layers_3, layer*


def _named_scopes(a: Analysis) -> dict[str, float]:
    """A run's scopes a user named (not "(no scope)" nor "(top level)"), each with its share of the job's time,
    by their names without their numbered layer components (``layer*/moe/moe_experts`` and ``layer0/moe/moe_experts``
    are ``moe/moe_experts``: a version of the program that wraps its MoE block in numbered layers, or has one
    layer, is still that program)."""
    out: dict[str, float] = {}
    for r in a.scopes:
        name = "/".join(c for c in r.scope.split("/") if not _NUMBERED.match(c))
        if r.scope not in (NO_SCOPE, TOP_LEVEL) and name:
            out[name] = out.get(name, 0.0) + r.share
    return out


def shared_work(a: Analysis, b: Analysis, e: dict[str, Any] | None) -> tuple[float, float, str] | None:
    """(the share of A's time, the share of B's, how they were matched) that both runs hold: by the scopes both
    name where both name some (the program's own structure, whatever its ops became), else by the explanation's
    parts (kernel names and kinds); None where neither tells."""
    sa, sb = _named_scopes(a), _named_scopes(b)
    if sa and sb:
        both = sa.keys() & sb.keys()
        return sum(sa[k] for k in both) / sum(sa.values()), sum(sb[k] for k in both) / sum(sb.values()), "scope"
    if e is None:
        return None
    held = [p for p in e["parts"] if p["reference_ms"] > 0 and p["run_ms"] > 0]
    a_all = sum(p["reference_ms"] for p in e["parts"])
    b_all = sum(p["run_ms"] for p in e["parts"])
    if a_all <= 0 or b_all <= 0:
        return None
    return sum(p["reference_ms"] for p in held) / a_all, sum(p["run_ms"] for p in held) / b_all, e["matched_by"]


def program_warning(labels_ab: tuple[str, str], a: Analysis, b: Analysis, e: dict[str, Any] | None) -> str | None:
    """One line where two runs share little of their work (less than ``PROGRAMS_SHARED`` of either's time):
    different programs or frameworks, whose comparison compares unlike parts."""
    shared = shared_work(a, b, e)
    if shared is None or min(shared[:2]) >= PROGRAMS_SHARED:
        return None
    ref, run = labels_ab
    by = "in scopes both name" if shared[2] == "scope" else f"in parts both hold, by {shared[2]}"
    return (
        f"{run} and {ref} share little of their work ({shared[0]:.0%} of {ref}'s time and {shared[1]:.0%} of {run}'s"
        f" is {by}): they do not look like one program, and their comparison is of unlike parts"
    )


def with_explanations(doc: dict, loaded: list[tuple[Source, Projector | None]], explain: bool = True) -> dict:
    """``doc`` (:func:`compare`'s) with each run explained against the one before it (an ablation ladder: the
    first rung A → B, then B → C, ...), the ladder's rungs (:func:`ladder`), and a warning where two explained
    runs do not look like one program or a saved analysis leaves nothing to explain."""
    names = [r["label"] for r in doc["runs"]]
    doc["explanations"] = [
        explanation(a.analysis, a_projector, b.analysis, b_projector, (names[i - 1], names[i]))
        for i, ((a, a_projector), (b, b_projector)) in enumerate(pairwise(loaded), 1)
        if a_projector is not None and b_projector is not None
    ]
    explained = {(e["reference"], e["run"]): e for e in doc["explanations"]}
    for i, ((a, _), (b, _)) in enumerate(pairwise(loaded), 1):
        pair = (names[i - 1], names[i])
        if (w := program_warning(pair, a.analysis, b.analysis, explained.get(pair))) is not None:
            doc["warnings"].append(w)
    if explain and any(p is None for _, p in loaded):
        doc["warnings"].append(
            "a saved analysis has no activities to explain a change with: diff the traces or run folders"
            " to see where the step went"
        )
    analyses = [s.analysis for s, _ in loaded]
    if not any(a.timeline_free for a in analyses):
        doc["ladder"] = ladder(doc["runs"], analyses, doc["explanations"])
    return doc
