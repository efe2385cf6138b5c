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

from . import __version__
from .capture.runfolder import read_manifest, throughput
from .classify import classify, rules_with
from .events import concat, set_strings
from .metrics import DeviceTimeline, collective_key, collectives_table, device_activity, sum_figures
from .options import LoadOptions
from .parsers import discover, parse_file
from .remedies import remedy
from .steps import find_steps, select_steps
from .topology import assign_links

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
            **({"throughput": self.throughput} if self.throughput else {}),
            **({"manifest": self.manifest} if self.manifest else {}),
        }


def load_file(
    path: Path, host_index: int = 0, options: LoadOptions | None = None, single_host: bool | None = None
) -> pd.DataFrame:
    """Parse, classify and attribute links for one trace file."""
    options = options or LoadOptions()
    events = parse_file(path, host_index=host_index, options=options)
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
    return concat([load_file(f, i, options, single_host=len(files) == 1) for i, f in enumerate(files)])


def _windows(steps: pd.DataFrame, device: str) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    rows = steps[steps["device"] == device]
    if rows.empty:
        return None, None
    from .intervals import union

    return union(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())


def analyze_host(events: pd.DataFrame, inputs: list[str], step_options: StepOptions | None = None) -> HostAnalysis:
    """Spec §4-§5 figures of every device in ``events`` (the map step)."""
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
    devices, steps, comm_parts = [], [], []
    for (host, device), rows in activity.groupby(["host", "device"], sort=True):
        timeline = DeviceTimeline(rows)
        win_s, win_e = _windows(selected, device) if windowed else (None, None)
        if windowed and win_s is None:
            continue  # this device ran nothing in the selected steps
        fig, clipped, exposed = timeline.figures(win_s, win_e)
        devices.append({"device": device, "host": host, **fig})
        for _, step in selected[selected["device"] == device].iterrows():
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
                    }
                )
            )
    rules = activity["rule"].astype(str).value_counts().to_dict() if len(activity) else {}
    if "unmatched" in rules:
        warnings.append(f"{rules['unmatched']} activities matched no taxonomy rule and count as 'other'")
    comm_table = (
        pd.concat(comm_parts, ignore_index=True)
        if comm_parts
        else pd.DataFrame(columns=["device", "key", "kind", "total_ns", "exposed_ns", "bytes", "ib_fraction", "xla"])
    )
    return HostAnalysis(inputs, devices, steps, comm_table, {str(k): int(v) for k, v in rules.items()}, warnings)


def opportunities(comm: pd.DataFrame, collectives: list[dict]) -> list[dict]:
    """Spec §6: exposed comm grouped by (op, kind), ranked by what hiding it could save.

    ``exposed_ns`` sums over devices; ``saving_bound_ns`` is the largest
    per-device exposed time, since devices run side by side and a step can
    shrink by at most what its slowest device loses.
    """
    exposed = comm[comm["exposed_ns"] > 0]
    if exposed.empty:
        return []
    per_device = exposed.groupby(["key", "kind", "device"], sort=False, observed=True)["exposed_ns"].sum()
    worst = per_device.groupby(level=["key", "kind"], sort=False).agg(["max", "idxmax", "size"])
    by_op = {(c["name"], c["kind"]): c for c in collectives}
    xla = exposed.groupby(["key", "kind"], sort=False, observed=True)["xla"].any()
    out = []
    for (key, kind), row in worst.iterrows():
        c = by_op[(str(key), str(kind))]
        out.append(
            {
                "title": f"exposed {kind} {key}",
                "kind": str(kind),
                "name": str(key),
                "link": c["link"],
                "exposed_ns": c["exposed_ns"],
                "saving_bound_ns": int(row["max"]),
                "evidence": {
                    "count": c["count"],
                    "devices": int(row["size"]),
                    "total_ns": c["total_ns"],
                    "worst_device": str(row["idxmax"][2]),
                    "exposed_share_of_its_time": round(c["exposed_ns"] / max(c["total_ns"], 1), 4),
                },
                "remedy": remedy(str(kind), c["link"], bool(xla[(key, kind)])),
            }
        )
    out.sort(key=lambda o: (-o["saving_bound_ns"], o["title"]))
    return out


def merge(parts: list[HostAnalysis]) -> AnalysisResult:
    """The reduce step: concatenate devices, sum totals, regroup collectives."""
    devices = sorted((d for p in parts for d in p.devices), key=lambda d: d["device"])
    comm = (
        pd.concat([p.comm for p in parts if not p.comm.empty], ignore_index=True)
        if any(not p.comm.empty for p in parts)
        else pd.DataFrame(columns=["device", "key", "kind", "total_ns", "exposed_ns", "bytes", "ib_fraction", "xla"])
    )
    rules: dict[str, int] = {}
    for p in parts:
        for k, v in p.rules.items():
            rules[k] = rules.get(k, 0) + v
    collectives = collectives_table(comm)
    return AnalysisResult(
        inputs=[i for p in parts for i in p.inputs],
        devices=devices,
        total=sum_figures(devices),
        collectives=collectives,
        steps=sorted((s for p in parts for s in p.steps), key=lambda s: (s["step"], s["device"])),
        opportunities=opportunities(comm, collectives),
        rules=dict(sorted(rules.items(), key=lambda kv: -kv[1])),
        warnings=[w for p in parts for w in p.warnings],
    )


def analyze(
    events: pd.DataFrame, step_options: StepOptions | None = None, inputs: list[str] | None = None
) -> AnalysisResult:
    """``moeprof.analyze``: the analysis of an already loaded event table."""
    return merge([analyze_host(events, inputs or [], step_options)])


def _map_one(args: tuple) -> HostAnalysis:
    path, index, options, step_options, single_host = args
    events = load_file(path, index, options, single_host)
    return analyze_host(events, [str(path)], step_options)


def analyze_paths(
    inputs: list[str | Path],
    options: LoadOptions | None = None,
    step_options: StepOptions | None = None,
    jobs: int | None = None,
    progress: Callable[[Path], None] | None = None,
) -> AnalysisResult:
    """Discover, parse and measure every trace file (in parallel when there are several), then merge."""
    options = options or LoadOptions()
    files = discover(inputs, options)
    tasks = [(f, i, options, step_options, len(files) == 1) for i, f in enumerate(files)]
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
    result = merge(parts)
    for raw in inputs:
        manifest = read_manifest(Path(raw)) if Path(raw).is_dir() else None
        if manifest:
            result.manifest = manifest
            result.throughput = throughput(manifest)
            break
    return result
