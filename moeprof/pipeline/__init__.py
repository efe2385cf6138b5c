"""Load traces and measure them: a map over trace files (hosts/ranks) and a small merge.

``load`` reads, classifies and attributes links; ``analyze`` turns an event
table into an :class:`AnalysisResult`, the object every renderer reads.
``analyze_paths`` parses and measures each file on its own (in worker
processes when there are several), then merges the small per-file results, so a
1,000-GPU job never needs all its events in one process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import __version__
from ..capture.runfolder import read_manifest, throughput
from ..core.classify import classify, rules_with
from ..core.events import concat, set_strings
from ..core.metrics import DeviceTimeline, collective_key, collectives_table, device_activity, sum_figures
from ..core.steps import find_steps, select_steps
from ..core.topology import assign_links
from ..insight.bandwidth import annotate
from ..insight.opportunities import (
    comm_opportunities,
    device_signals,
    expert_exchange_opportunity,
    rank,
    signal_opportunities,
)
from ..options import LoadOptions
from ..readers import Placement, discover, parse_file, plan_placements

SCHEMA = "moeprof.analysis/1"


@dataclass(frozen=True)
class StepOptions:
    selection: str | None = None  # "A:B" step positions, half-open
    skip_first: int = 0
    marker: str | None = None  # regex on step marker names (NVTX ranges)


@dataclass
class HostAnalysis:
    """What one trace file contributes: small enough to send between processes."""

    inputs: list[str]
    devices: list[dict]
    steps: list[dict]
    comm: pd.DataFrame  # one row per comm activity: device, key, kind, total_ns, exposed_ns, bytes, ib_fraction, xla
    rules: dict[str, int] = field(default_factory=dict)  # rows per deciding rule
    warnings: list[str] = field(default_factory=list)
    independent: pd.DataFrame = field(default_factory=pd.DataFrame)  # device, key, independent_ns (from HLO)
    signals: list[dict] = field(default_factory=list)  # non-collective opportunities per device


@dataclass
class AnalysisResult:
    inputs: list[str]
    devices: list[dict]
    total: dict
    collectives: list[dict]
    steps: list[dict]
    opportunities: list[dict]
    rules: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    spread: dict = field(default_factory=dict)  # variation across devices and steps
    manifest: dict | None = None  # the run folder's reproduction record, when the input is one
    throughput: dict | None = None  # tokens/s and model TFLOPS per device, from the manifest

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "moeprof_version": __version__,
            "inputs": self.inputs,
            "devices": self.devices,
            "total": self.total,
            "collectives": self.collectives,
            "steps": self.steps,
            "opportunities": self.opportunities,
            "rules": self.rules,
            "warnings": self.warnings,
            "spread": self.spread,
            **({"throughput": self.throughput} if self.throughput else {}),
            **({"manifest": self.manifest} if self.manifest else {}),
        }


def load_file(
    path: Path,
    host_index: int = 0,
    options: LoadOptions | None = None,
    single_host: bool | None = None,
    placement: Placement | None = None,
) -> pd.DataFrame:
    """Parse, classify and attribute links for one trace file."""
    options = options or LoadOptions()
    events = parse_file(path, host_index=host_index, options=options, placement=placement)
    is_activity = events["activity"].isin(("kernel", "memcpy", "memset")).to_numpy()
    if is_activity.all():
        classify(events, rules_with(options.rules))
    else:
        activity = events[is_activity].copy()
        classify(activity, rules_with(options.rules))
        for col in ("bucket", "kind", "rule", "link_hint"):
            values = events[col].to_numpy(dtype=object).copy()
            values[is_activity] = activity[col].to_numpy(dtype=object)
            set_strings(events, col, values)
    return assign_links(events, options.nvlink_domain_size, single_host)


def load(paths: str | Path | list[str | Path], options: LoadOptions | None = None) -> pd.DataFrame:
    """The classified event table of one or several traces (``moeprof.load``)."""
    options = options or LoadOptions()
    inputs = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files = discover(inputs, options)
    places = plan_placements(files)
    single = len({p.host_index for p in places}) == 1
    return concat([load_file(f, p.host_index, options, single, p) for f, p in zip(files, places)])


def _windows(steps: pd.DataFrame, device: str) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    rows = steps[steps["device"] == device]
    if rows.empty:
        return None, None
    from ..core.intervals import union

    return union(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())


COMM_COLUMNS = ["device", "key", "kind", "total_ns", "exposed_ns", "bytes", "ib_fraction", "xla", "group_size"]


def _group_sizes(groups: np.ndarray) -> np.ndarray:
    """Members in each comma-separated group string (0 unknown), counted once per distinct string."""
    codes, uniques = pd.factorize(groups)
    sizes = np.array([len(str(g).split(",")) if g else 0 for g in uniques], dtype=np.int64)
    return sizes[codes] if len(uniques) else np.zeros(len(groups), dtype=np.int64)


def _independent_compute(device: str, frame: pd.DataFrame, clipped: np.ndarray, hlo: dict) -> list[dict]:
    """Per collective op of this device: compute time on ops the HLO graph shows independent of it."""
    from ..insight.dependency import independent_ops

    ops = frame["hlo_op"].to_numpy(dtype=object)
    names = frame["name"].to_numpy(dtype=object)
    bucket = frame["bucket"].to_numpy(dtype=object)
    compute = (bucket == "compute") & (clipped > 0)
    # compute kernels whose stats were read once per name: their op is the name's first op
    first_op = {n: o for n, o in zip(names[::-1], ops[::-1]) if o}
    compute_ops = np.array([o or first_op.get(n, "") for n, o in zip(names[compute], ops[compute])], dtype=object)
    op_time = pd.Series(clipped[compute]).groupby(compute_ops).sum().to_dict() if compute.any() else {}
    comm = (bucket == "comm") & (ops != "")
    out = []
    seen = set()
    modules = frame["hlo_module"].to_numpy(dtype=object)[comm]
    programs = frame["program_id"].to_numpy()[comm]
    for mod, pid, op in zip(modules, programs, ops[comm]):
        if (mod, pid, op) in seen:
            continue
        seen.add((mod, pid, op))
        module = hlo.get((mod, int(pid))) or hlo.get((mod, -1))
        if module is None or op not in module.instructions:
            continue
        free = independent_ops(module, op)
        out.append({"device": device, "key": op, "independent_ns": int(sum(op_time.get(o, 0) for o in free))})
    return out


def analyze_host(
    events: pd.DataFrame, inputs: list[str], step_options: StepOptions | None = None, hlo: dict | None = None
) -> HostAnalysis:
    """Spec §4-§5 figures of every device in ``events`` (the map step).

    ``hlo`` (``(module, program id) -> HloModule``) lets opportunities be bounded
    by the compute the dependency graph leaves independent of each collective.
    """
    step_options = step_options or StepOptions()
    warnings: list[str] = []
    all_steps = find_steps(events, step_options.marker)
    selected = select_steps(all_steps, step_options.selection, step_options.skip_first)
    if (step_options.selection or step_options.skip_first) and all_steps.empty:
        warnings.append("no steps found in the trace: step selection ignored, the whole trace is measured")
    elif (step_options.selection or step_options.skip_first) and selected.empty:
        warnings.append("the step selection matches no step: the whole trace is measured")
    windowed = not selected.empty and bool(step_options.selection or step_options.skip_first)
    activity = device_activity(events)
    devices, steps, comm_parts, independent, signals = [], [], [], [], []
    for (host, device), rows in activity.groupby(["host", "device"], sort=True, observed=True):
        timeline = DeviceTimeline(rows)
        win_s, win_e = _windows(selected, device) if windowed else (None, None)
        if windowed and win_s is None:
            continue  # this device ran nothing in the selected steps
        fig, clipped, exposed = timeline.figures(win_s, win_e)
        devices.append({"device": device, "host": host, **fig})
        device_steps = selected[selected["device"] == device]
        for _, step in device_steps.iterrows():
            sfig, _, _ = timeline.figures(np.array([step["start_ns"]]), np.array([step["end_ns"]]))
            steps.append(
                {
                    "step": int(step["step"]),
                    "device": device,
                    "host": host,
                    "start_ns": int(step["start_ns"]),
                    "end_ns": int(step["end_ns"]),
                    **sfig,
                }
            )
        lo, hi = timeline.bounds
        n_steps = len(device_steps) if windowed else int((all_steps["device"] == device).sum())
        signals.extend(
            device_signals(
                timeline.frame,
                timeline.start,
                timeline.end,
                clipped,
                win_s if win_s is not None else np.array([lo]),
                win_e if win_e is not None else np.array([hi]),
                max(n_steps, 1),
                device,
            )
        )
        if hlo:
            independent.extend(_independent_compute(device, timeline.frame, clipped, hlo))
        comm = timeline.is_comm & (clipped > 0)
        if comm.any():
            frame = timeline.frame[comm]
            comm_parts.append(
                pd.DataFrame(
                    {
                        "device": device,
                        "key": collective_key(frame),
                        "kind": frame["kind"].to_numpy(dtype=object),
                        "total_ns": clipped[comm],
                        "exposed_ns": exposed[comm],
                        "bytes": frame["bytes"].to_numpy(dtype=np.float64),
                        "ib_fraction": frame["ib_fraction"].to_numpy(dtype=np.float64),
                        "xla": (frame["hlo_op"].to_numpy(dtype=object) != "")
                        | (frame["source"].to_numpy(dtype=object) == "xplane"),
                        "group_size": _group_sizes(frame["group"].to_numpy(dtype=object)),
                    }
                )
            )
    rules = activity["rule"].astype(str).value_counts().to_dict() if len(activity) else {}
    if "unmatched" in rules:
        warnings.append(f"{rules['unmatched']} activities matched no taxonomy rule and count as 'other'")
    comm_table = pd.concat(comm_parts, ignore_index=True) if comm_parts else pd.DataFrame(columns=COMM_COLUMNS)
    return HostAnalysis(
        inputs,
        devices,
        steps,
        comm_table,
        {str(k): int(v) for k, v in rules.items()},
        warnings,
        pd.DataFrame(independent, columns=["device", "key", "independent_ns"]),
        signals,
    )


def spread(devices: list[dict], steps: list[dict]) -> dict:
    """How figures vary across devices and steps: a straggler device or a slow step shows here."""
    out: dict = {}
    if devices:
        frame = pd.DataFrame(devices).set_index("device")
        out["devices"] = {
            key: {
                "min": float(frame[key].min()),
                "median": float(frame[key].median()),
                "max": float(frame[key].max()),
                "max_device": str(frame[key].idxmax()),
            }
            for key in ("busy_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "comm_share", "idle_ns")
        }
        # the device that computes longest makes the others wait in their collectives
        if len(frame) > 1 and frame["compute_ns"].median() > 0:
            ratio = float(frame["compute_ns"].max() / frame["compute_ns"].median())
            out["straggler"] = {
                "device": str(frame["compute_ns"].idxmax()),
                "compute_over_median": round(ratio, 4),
                "flagged": ratio > 1.1,
            }
    if steps:
        frame = pd.DataFrame(steps)
        per_step = frame.groupby("step").agg(
            span_ns=("span_ns", "max"),
            exposed_comm_ns=("exposed_comm_ns", "mean"),
            comm_ns=("comm_ns", "sum"),
            accumulated_ns=("accumulated_ns", "sum"),
        )
        median = float(per_step["span_ns"].median())
        out["steps"] = [
            {
                "step": int(i),
                "span_ns": int(r.span_ns),
                "exposed_comm_ns": round(float(r.exposed_comm_ns)),
                "comm_share": float(r.comm_ns / r.accumulated_ns) if r.accumulated_ns else 0.0,
            }
            for i, r in per_step.iterrows()
        ]
        slow = per_step["span_ns"].idxmax()
        slow_span = float(per_step.loc[slow, "span_ns"])
        out["slowest_step"] = {
            "step": int(slow),
            "span_ns": int(slow_span),
            "over_median": round(slow_span / median, 4) if median else None,
            "flagged": bool(median and slow_span > 1.2 * median),
        }
    return out


def merge(parts: list[HostAnalysis], link_peaks: dict[str, float] | None = None) -> AnalysisResult:
    """The reduce step: concatenate devices, sum totals, regroup collectives, rank opportunities."""
    devices = sorted((d for p in parts for d in p.devices), key=lambda d: d["device"])
    comm_frames = [p.comm for p in parts if not p.comm.empty]
    comm = pd.concat(comm_frames, ignore_index=True) if comm_frames else pd.DataFrame(columns=COMM_COLUMNS)
    rules: dict[str, int] = {}
    for p in parts:
        for k, v in p.rules.items():
            rules[k] = rules.get(k, 0) + v
    collectives = collectives_table(comm)
    sized = comm[comm["group_size"] > 0] if not comm.empty else comm
    sizes = (
        sized.groupby(["key", "kind"], observed=True)["group_size"].agg(lambda s: int(s.mode().iloc[0]))
        if not sized.empty
        else pd.Series(dtype=np.int64)
    )
    annotate(collectives, {(str(k), str(c)): int(v) for (k, c), v in sizes.items()}, link_peaks or {})
    frames = [p.independent for p in parts if not p.independent.empty]
    independent = (
        pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["device", "key", "independent_ns"])
    )
    steps = sorted((s for p in parts for s in p.steps), key=lambda s: (s["step"], s["device"]))
    hide = comm_opportunities(comm, collectives, independent)
    return AnalysisResult(
        inputs=[i for p in parts for i in p.inputs],
        devices=devices,
        total=sum_figures(devices),
        collectives=collectives,
        steps=steps,
        opportunities=rank(
            hide + expert_exchange_opportunity(comm, hide) + signal_opportunities([s for p in parts for s in p.signals])
        ),
        rules=dict(sorted(rules.items(), key=lambda kv: -kv[1])),
        warnings=[w for p in parts for w in p.warnings],
        spread=spread(devices, steps),
    )


def analyze(
    events: pd.DataFrame,
    step_options: StepOptions | None = None,
    inputs: list[str] | None = None,
    link_peaks: dict[str, float] | None = None,
) -> AnalysisResult:
    """``moeprof.analyze``: the analysis of an already loaded event table."""
    return merge([analyze_host(events, inputs or [], step_options)], link_peaks)


def add_throughput(
    result: AnalysisResult,
    model: str,
    tokens_per_step: int,
    seq_len: int = 4096,
    gpu: str | None = None,
    dtype: str = "bf16",
    job_devices: int | None = None,
) -> None:
    """tokens/s, model TFLOPS per device and MFU from a model config and the measured step time.

    ``tokens_per_step`` is the job's global batch in tokens and ``job_devices`` the job's
    device count (default: the devices in the trace; a one-rank Kineto trace of a 64-GPU
    job needs 64).

    The step time is the median over steps of the slowest device's step span; without
    steps it is the longest device window (the trace is taken as one step).
    """
    from ..insight.flops import flops_per_token, load_model_config, throughput_figures

    cfg = load_model_config(model)
    per_token = flops_per_token(cfg, seq_len).total
    spans = [s["span_ns"] for s in result.spread.get("steps", [])]
    if spans:
        step_ns = float(np.median(spans))
    else:
        step_ns = float(max((d["span_ns"] for d in result.devices), default=0))
        result.warnings.append("no steps found: throughput takes the whole trace window as one step")
    if step_ns <= 0 or not result.devices:
        result.warnings.append("no device activity: throughput not computed")
        return
    kind = gpu or ((result.manifest or {}).get("devices") or {}).get("kind")
    result.throughput = {
        **throughput_figures(
            tokens_per_step, step_ns / 1e9, per_token, job_devices or len(result.devices), kind, dtype
        ),
        "model": cfg.name,
        "seq_len": seq_len,
        "step_ns": round(step_ns),
    }


def _map_one(args: tuple) -> HostAnalysis:
    path, placement, options, step_options, single_host = args
    events = load_file(path, placement.host_index, options, single_host, placement)
    from ..readers.xplane import take_hlo

    return analyze_host(events, [str(path)], step_options, hlo=take_hlo(path))


def analyze_paths(
    inputs: list[str | Path],
    options: LoadOptions | None = None,
    step_options: StepOptions | None = None,
    jobs: int | None = None,
    progress: Callable[[Path], None] | None = None,
    link_peaks: dict[str, float] | None = None,
) -> AnalysisResult:
    """Discover, parse and measure every trace file (in parallel when there are several), then merge."""
    options = options or LoadOptions()
    files = discover(inputs, options)
    places = plan_placements(files)
    single = len({p.host_index for p in places}) == 1
    tasks = [(f, p, options, step_options, single) for f, p in zip(files, places)]
    jobs = jobs if jobs is not None else min(len(files), os.cpu_count() or 1)
    if jobs <= 1 or len(files) == 1:
        parts = []
        for task in tasks:
            parts.append(_map_one(task))
            if progress:
                progress(task[0])
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            parts = []
            for task, part in zip(tasks, pool.map(_map_one, tasks)):
                parts.append(part)
                if progress:
                    progress(task[0])
    result = merge(parts, link_peaks)
    for raw in inputs:
        manifest = read_manifest(Path(raw)) if Path(raw).is_dir() else None
        if manifest:
            result.manifest = manifest
            result.throughput = throughput(manifest)
            break
    return result
