"""Training steps (spec §5): marker ranges, or executions of the dominant XLA module."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..errors import InputError
from ..words import plural
from . import intervals as iv
from .trace import Trace

STEP_COLUMNS = ["device", "step", "start_ns", "end_ns", "source", "name"]

# module-execution marker kinds, by the evidence that delimits them (first found wins for a module)
MODULE_EVIDENCE: dict[str, str] = {
    "module": "the XLA Modules line",
    "module_launch": "host launches, linked by correlation id, inside the host's executions of the module",
    "module_run": "the run ids of the module's thunks",
}


def step_marker_pattern(step_marker: str | None) -> re.Pattern[str] | None:
    """The user's ``--step-marker`` regex, compiled (None where none is given). Every reader and
    :func:`find_steps` take it from here: a pattern that does not compile is refused in one line naming
    the option, wherever it is first met."""
    if not step_marker:
        return None
    try:
        return re.compile(step_marker)
    except (re.error, RecursionError, OverflowError) as exc:  # OverflowError: a repeat count past any int
        raise InputError(None, f"--step-marker {step_marker!r}: not a regular expression ({exc})") from None


def find_steps(trace: Trace, step_marker: str | None = None) -> pd.DataFrame:
    """One row per (device, step): its window. Empty when the trace marks no steps.

    Sources, first found wins: step markers (``Steps`` line, StepTraceAnnotation,
    ``ProfilerStep#N``, NVTX ranges; only those matching ``step_marker`` when it is
    given), else executions of the XLA module that owns the most device time
    (``source`` then names the evidence that delimits them: a kind of :data:`MODULE_EVIDENCE`).
    """
    activity = trace.events
    devices = activity[["host", "device"]].drop_duplicates()
    markers = trace.markers[trace.markers["kind"] == "step"]
    pattern = step_marker_pattern(step_marker)
    if pattern is not None:
        # each distinct name tried once (pandas' str.contains also warns where the pattern has a group)
        codes, names = pd.factorize(markers["name"].astype(str))
        matching = np.array([pattern.search(name) is not None for name in names], dtype=bool)
        markers = markers[matching[codes] if len(codes) else np.zeros(0, dtype=bool)]
    source = "marker"
    if markers.empty:
        markers = _dominant_module_runs(trace.markers, activity)
        source = str(markers["kind"].iloc[0]) if len(markers) else "module"
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
                "name": rows["name"].astype(str).to_numpy(dtype=object),
            }
        )
        .drop_duplicates(["device", "step"], keep="first")
        .reset_index(drop=True)
    )


def fallback_note(steps: pd.DataFrame) -> str | None:
    """The line that says steps are the dominant module's executions (spec §5's fallback), and on what
    evidence; None when steps come from markers or there are none."""
    if steps.empty or str(steps["source"].iloc[0]) not in MODULE_EVIDENCE:
        return None
    source = str(steps["source"].iloc[0])
    module = re.sub(r"\(\d+\)$", "", str(steps["name"].iloc[0]))
    per_device = steps.groupby("device").size()
    lo, hi = int(per_device.min()), int(per_device.max())
    count = plural(hi, "execution") if lo == hi else f"{lo}-{hi} executions"
    return (
        f"steps: no step markers; {count} of module {module} per device "
        f"(fallback of spec §5; delimited by {MODULE_EVIDENCE[source]})"
    )


def event_modules(names: np.ndarray | pd.Series, modules: np.ndarray | pd.Series) -> np.ndarray:
    """Each event's XLA module, filled in by kernel name where the reader kept the stats of some events
    of a name only (the module of the name's first event that has one); "" where none of them does."""
    modules = np.asarray(modules, dtype=object)
    known = modules != ""
    if known.all() or not known.any():
        return modules
    codes = np.full(1, -1)
    if isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype):
        codes = names.cat.codes.to_numpy()  # the event table's names: coded already
    if codes.min() < 0:  # not coded, or a missing name
        codes = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)[0]
    first = pd.Series(modules[known]).groupby(codes[known], sort=False).first()
    by_name = np.full(int(codes.max()) + 1, "", dtype=object)
    by_name[first.index.to_numpy()] = first.to_numpy(dtype=object)
    return np.where(known, modules, by_name[codes])


def launch_module_runs(events: pd.DataFrame, executions: pd.DataFrame) -> pd.DataFrame:
    """Executions of each XLA module per device, from launch evidence.

    ``events``: device activity with ``device``, ``module`` (see :func:`event_modules`),
    ``start_ns``, ``end_ns`` and ``launch_ns`` (when the host issued it: the launch call
    that shares its correlation id; -1 unknown). ``executions``: the host's executions
    of a module (``line``: the host thread, ``module``, ``start_ns``, ``end_ns``).

    A device's launches of a module come from one host thread (the one whose executions
    of that module hold most of them); each execution on that thread is one run, and
    the run's window on the device is ``[first start, last end]`` of the module's events
    launched inside it. Returns ``device, module, start_ns, end_ns`` rows.
    """
    out = pd.DataFrame({"device": [], "module": [], "start_ns": [], "end_ns": []})
    if events.empty or executions.empty:
        return out.astype({"start_ns": np.int64, "end_ns": np.int64})
    mod_codes, mod_names = pd.factorize(events["module"].to_numpy(dtype=object))
    launch = events["launch_ns"].to_numpy(dtype=np.int64)
    dev_codes, dev_names = pd.factorize(events["device"].to_numpy(dtype=object))
    start = events["start_ns"].to_numpy(dtype=np.int64)
    end = events["end_ns"].to_numpy(dtype=np.int64)
    # the rows of each module whose launch is known, by module name
    usable = np.flatnonzero(launch >= 0)
    order = np.argsort(mod_codes[usable], kind="stable")
    bounds = np.searchsorted(mod_codes[usable][order], np.arange(len(mod_names) + 1))
    rows_of = {str(m): usable[order[bounds[i] : bounds[i + 1]]] for i, m in enumerate(mod_names.tolist()) if m != ""}
    # each (module, thread): its executions as disjoint segments (nested host ranges merge)
    groups: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []  # module, segments, rows of the module
    for (mod, _line), ex in executions.groupby(["module", "line"], sort=True):
        rows = rows_of.get(str(mod), np.zeros(0, dtype=np.int64))
        if len(rows):
            seg_s, seg_e = iv.union(ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy())
            groups.append((str(mod), seg_s, seg_e, rows))
    if not groups:
        return out.astype({"start_ns": np.int64, "end_ns": np.int64})
    # the thread of each (module, device): the one whose executions hold most of its launches
    counts = np.array(
        [np.bincount(dev_codes[r][iv.inside(launch[r], s, e)], minlength=len(dev_names)) for _, s, e, r in groups]
    )
    parts = []
    for g, (mod, seg_s, seg_e, rows) in enumerate(groups):
        rivals = [h for h, other in enumerate(groups) if other[0] == mod]
        best = np.array(rivals)[np.argmax(counts[rivals], axis=0)]  # per device code
        mine = rows[(best[dev_codes[rows]] == g) & (counts[g, dev_codes[rows]] > 0)]
        run = np.searchsorted(seg_s, launch[mine], side="right") - 1
        inside = (run >= 0) & (launch[mine] < seg_e[np.maximum(run, 0)])
        mine, run = mine[inside], run[inside]
        if len(mine):
            frame = pd.DataFrame({"device": dev_codes[mine], "run": run, "start_ns": start[mine], "end_ns": end[mine]})
            spans = frame.groupby(["device", "run"], sort=True).agg(
                start_ns=("start_ns", "min"), end_ns=("end_ns", "max")
            )
            codes = spans.index.get_level_values("device").to_numpy()
            parts.append(
                pd.DataFrame(
                    {
                        "device": np.asarray(dev_names, dtype=object)[codes],
                        "module": mod,
                        "start_ns": spans["start_ns"].to_numpy(dtype=np.int64),
                        "end_ns": spans["end_ns"].to_numpy(dtype=np.int64),
                    }
                )
            )
    if not parts:
        return out.astype({"start_ns": np.int64, "end_ns": np.int64})
    return pd.concat(parts, ignore_index=True)


def _dominant_module_runs(markers: pd.DataFrame, activity: pd.DataFrame) -> pd.DataFrame:
    modules = markers[markers["kind"].isin(list(MODULE_EVIDENCE))]
    if modules.empty:
        return modules
    mods = event_modules(activity["name"], activity["hlo_module"])
    named = mods != ""
    if not named.any():
        top = modules.assign(d=modules["end_ns"] - modules["start_ns"]).groupby("name")["d"].sum().idxmax()
    else:
        dur = activity["end_ns"].to_numpy()[named] - activity["start_ns"].to_numpy()[named]
        top = pd.Series(dur).groupby(mods[named]).sum().idxmax()
    # XLA Modules lines spell the module "name(program id)" on GPU; CPU captures use the bare name
    bare = modules["name"].astype(str).str.replace(r"\(\d+\)$", "", regex=True)
    mine = modules[bare == top]
    if mine.empty:
        return mine
    # one kind of evidence per module, in the order of MODULE_EVIDENCE
    kind = next(k for k in MODULE_EVIDENCE if (mine["kind"] == k).any())
    return mine[mine["kind"] == kind].assign(number=-1)


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
