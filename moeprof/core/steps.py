"""Training steps (spec §5): marker ranges, or executions of the dominant XLA module."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .trace import Trace

STEP_COLUMNS = ["device", "step", "start_ns", "end_ns", "source"]


def find_steps(trace: Trace, step_marker: str | None = None) -> pd.DataFrame:
    """One row per (device, step): its window. Empty when the trace marks no steps.

    Sources, first found wins: step markers (``Steps`` line, StepTraceAnnotation,
    ``ProfilerStep#N``, NVTX ranges; only those matching ``step_marker`` when it is
    given), else executions of the XLA module that owns the most device time.
    """
    activity = trace.events
    devices = activity[["host", "device"]].drop_duplicates()
    markers = trace.markers[trace.markers["kind"] == "step"]
    if step_marker:
        pattern = re.compile(step_marker)
        markers = markers[markers["name"].map(lambda n: bool(pattern.search(str(n))))]
    source = "marker"
    if markers.empty:
        markers = _dominant_module_runs(trace.markers, activity)
        source = "module"
    if markers.empty or devices.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    # device-level markers apply to their device; host-level ones (device "") to every device of the host
    own = markers[markers["device"] != ""]
    shared = markers[markers["device"] == ""].drop(columns=["device"]).merge(devices, on="host")
    rows = pd.concat([own, shared], ignore_index=True)
    rows = rows[rows["end_ns"] > rows["start_ns"]].sort_values(["device", "start_ns"])
    # numbered by the marker where it carries a number, else by order per device
    order = rows.groupby("device").cumcount().to_numpy()
    number = rows["number"].to_numpy(dtype=np.int64)
    use_own = (number >= 0) & (source == "marker")
    if use_own.all() and len(rows):
        steps = number
    else:
        steps = order
    return (
        pd.DataFrame(
            {
                "device": rows["device"].to_numpy(dtype=object),
                "step": steps,
                "start_ns": rows["start_ns"].to_numpy(dtype=np.int64),
                "end_ns": rows["end_ns"].to_numpy(dtype=np.int64),
                "source": source,
            }
        )
        .drop_duplicates(["device", "step"], keep="first")
        .reset_index(drop=True)
    )


def _dominant_module_runs(markers: pd.DataFrame, activity: pd.DataFrame) -> pd.DataFrame:
    modules = markers[markers["kind"] == "module"]
    if modules.empty:
        return modules
    named = activity[activity["hlo_module"] != ""]
    if named.empty:
        top = modules.assign(d=modules["end_ns"] - modules["start_ns"]).groupby("name")["d"].sum().idxmax()
    else:
        dur = (named["end_ns"] - named["start_ns"]).groupby(named["hlo_module"]).sum()
        top = dur.idxmax()
    # XLA Modules lines spell the module "name(program id)" on GPU; CPU captures use the bare name
    bare = modules["name"].astype(str).str.replace(r"\(\d+\)$", "", regex=True)
    return modules[bare == top].assign(number=-1)


def select_steps(steps: pd.DataFrame, selection: str | None = None, skip_first: int = 0) -> pd.DataFrame:
    """Keep the steps a user asked for: ``--skip-first N`` then ``--steps A:B`` (positions, half-open)."""
    if steps.empty:
        return steps
    numbers = np.sort(steps["step"].unique())[skip_first:]
    if selection:
        lo, _, hi = selection.partition(":")
        if not _:
            numbers = numbers[int(lo) : int(lo) + 1]
        else:
            numbers = numbers[int(lo) if lo else None : int(hi) if hi else None]
    return steps[steps["step"].isin(numbers)].reset_index(drop=True)


def parse_selection(selection: str | None) -> str | None:
    """Validate ``A:B`` / ``A`` (raises ValueError with a message the CLI prints)."""
    if selection is None:
        return None
    if not re.fullmatch(r"\d+|\d*:\d*", selection):
        raise ValueError(f"--steps {selection!r}: expected A:B, A: , :B or A (step positions, 0-based)")
    return selection
