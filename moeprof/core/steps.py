"""Training steps (spec §5): marker ranges, or executions of the dominant XLA module."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..words import plural
from . import intervals as iv
from .events import column_codes, combine_codes, distinct_rows, lookup, narrow_codes
from .patterns import user_pattern
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
    return user_pattern(step_marker, "--step-marker")


def find_steps(trace: Trace, step_marker: str | None = None) -> pd.DataFrame:
    """One row per (device, step): its window. Empty when the trace marks no steps.

    Sources, first found wins: step markers (``Steps`` line, StepTraceAnnotation,
    ``ProfilerStep#N``, NVTX ranges; only those matching ``step_marker`` when it is
    given), else executions of the XLA module that owns the most device time
    (``source`` then names the evidence that delimits them: a kind of :data:`MODULE_EVIDENCE`).
    """
    activity = trace.events
    devices = distinct_rows(activity, ["host", "device"])
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
    # device-level markers are the step as it is on their device; host-level ones (device "") time the host:
    # their step on each device of the host is what was launched inside them (spec §5)
    markers = markers[markers["end_ns"] > markers["start_ns"]]
    own = markers[markers["device"] != ""]
    host_level = markers[markers["device"] == ""]
    if source == "marker":  # a window of what was launched: zero-length activities make a zero-length step
        shared = launched_windows(host_level, activity)
    else:
        shared = host_level.drop(columns=["device"]).merge(devices, on="host")
    rows = pd.concat([own, shared], ignore_index=True).sort_values(["device", "start_ns"])
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


def launched_windows(markers: pd.DataFrame, activity: pd.DataFrame) -> pd.DataFrame:
    """The step of each host-level marker on each device of its host (spec §5): the activities launched inside
    its range (``launch_ns``: when the launching call ran, joined by correlation id by the reader), and its
    window on a device from the earliest start to the latest end of them. The GPU may run tens of ms behind
    the host, so the range itself, laid on device time, would cut the step short.

    An activity belongs to one step only: the range of its host that holds its launch (of nested or
    overlapping ranges, the one that started last). An activity whose launch the trace does not link
    (``launch_ns`` -1: no correlation, a reader without launch columns) is placed by its start, the only
    evidence left. The ranges of one step number on a host (one per process) are one range, from the first
    start to the last end. Returns marker rows (``MARKER_COLUMNS``) with ``device`` set and
    ``start_ns``/``end_ns`` the window; a step that launched nothing on a device has no row for it.
    """
    if markers.empty or activity.empty:
        return markers.iloc[:0]
    start = activity["start_ns"].to_numpy(dtype=np.int64)
    end = activity["end_ns"].to_numpy(dtype=np.int64)
    launch = activity["launch_ns"].to_numpy(dtype=np.int64) if "launch_ns" in activity else np.full(start.size, -1)
    when = np.where(launch >= 0, launch, start)  # when the host issued it; unknown: when it ran
    host_c, host_v = narrow_codes(activity["host"])  # the table's own codes (added only to int64 arrays)
    dev_c, dev_v = narrow_codes(activity["device"])
    m_host = markers["host"].astype(str).to_numpy(dtype=object)
    number = markers["number"].to_numpy(dtype=np.int64)
    # one range per (host, step number): several processes' ranges of one step; unnumbered ones stay apart
    key = np.where(number >= 0, number, -2 - np.arange(number.size))
    hull = pd.DataFrame(
        {
            "host": m_host,
            "key": key,
            "s": markers["start_ns"].to_numpy(dtype=np.int64),
            "e": markers["end_ns"].to_numpy(dtype=np.int64),
        }
    ).groupby(["host", "key"], sort=False)
    m_start = hull["s"].transform("min").to_numpy(dtype=np.int64)
    m_end = hull["e"].transform("max").to_numpy(dtype=np.int64)  # fmt: skip
    marker_of = np.full(start.size, -1, dtype=np.int64)
    for h, host in enumerate(host_v.tolist()):  # a file holds a few hosts: one pass each
        mine = np.flatnonzero(m_host == str(host))
        if not mine.size:
            continue
        mine = mine[np.argsort(m_start[mine], kind="stable")]
        reach = np.maximum.accumulate(m_end[mine])  # the latest end among the ranges started by each
        rows = np.arange(start.size) if len(host_v) == 1 else np.flatnonzero(host_c == h)
        t = when if len(host_v) == 1 else when[rows]
        ends = m_end[mine]
        k = np.searchsorted(m_start[mine], t, side="right") - 1
        # the range that started last and holds it; where that one ended, an earlier one still open
        while True:
            at = np.maximum(k, 0)
            open_ = (k >= 0) & (t < reach[at])
            holds = open_ & (t < ends[at])
            marker_of[rows[holds]] = mine[at[holds]]
            left = open_ & ~holds
            if not left.any():
                break
            rows, k, t = rows[left], k[left] - 1, t[left]
    inside = np.flatnonzero(marker_of >= 0)
    if not inside.size:
        return markers.iloc[:0]
    # one cell per (step, device): the marker of the step that comes first names it; its activities' hull
    step_c, first_marker = np.unique(key, return_index=True)  # key -> its first marker (keys sorted)
    cell = np.searchsorted(step_c, key[marker_of[inside]]) * len(dev_v) + dev_c[inside]
    # each cell's earliest start and latest end (cells are a few steps x devices: a table of them, no group-by)
    lo = np.full(step_c.size * len(dev_v), np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(lo.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, cell, start[inside])
    np.maximum.at(hi, cell, end[inside])
    cells = np.flatnonzero(np.bincount(cell, minlength=lo.size))
    out = markers.iloc[first_marker[cells // len(dev_v)]].reset_index(drop=True)
    out["device"] = lookup(cells % len(dev_v), dev_v, "")
    out["start_ns"] = lo[cells]
    out["end_ns"] = hi[cells]
    return out


def job_step_windows(steps: pd.DataFrame, offsets: Mapping[str, int] | None = None) -> pd.DataFrame:
    """Each step's window over the job's devices (spec §9's ``step_ns`` is its length): from the earliest start
    to the latest end of its devices' windows, on the aligned clock (``offsets``: device -> δ, the clock
    offset of its host, §8; absent: 0). ``steps``: ``step, device, start_ns, end_ns`` (each device's own
    clock). Returns ``step, start_ns, end_ns`` sorted by step."""
    if steps is None or not len(steps):
        return pd.DataFrame({"step": np.zeros(0, np.int64), "start_ns": np.zeros(0, np.int64),
                             "end_ns": np.zeros(0, np.int64)})  # fmt: skip
    delta = np.zeros(len(steps), dtype=np.int64)
    if offsets:
        codes, names = column_codes(steps["device"])
        delta = lookup(codes, np.array([int(offsets.get(str(n), 0)) for n in names.tolist()], dtype=np.int64), 0)
    frame = pd.DataFrame(
        {
            "step": steps["step"].to_numpy(dtype=np.int64),
            "start_ns": steps["start_ns"].to_numpy(dtype=np.int64) - delta,
            "end_ns": steps["end_ns"].to_numpy(dtype=np.int64) - delta,
        }
    )
    return frame.groupby("step", sort=True).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max")).reset_index()


@dataclass(frozen=True)
class StepEdges:
    """Each step's window on each device, its edges tied to the activities that bound them: what a replay of the
    activities (spec §9) makes of the step (docs/metrics.md, "Projection", the step of a replayed timeline).

    A window's start is its step's first activity's start less the idle before it, kept as measured; where the
    device ran something before the window (a TPU's ``Steps`` line tiles time: a step begins where the previous
    program ended) that idle is measured from the end of the device's latest activity by then instead, so it
    moves with the program before. Its end moves as the step's last activity over all its devices does (the idle
    after it is the step's: a device done early absorbs its slowdown), never before its own last activity. A window
    whose edges hold no idle (a host marker's: its activities' span) is its activities' first start to last end.
    A window that holds no activity keeps its measured times where nothing bounds it.
    """

    device: np.ndarray  # per window: its device (code)
    step: np.ndarray  # the index of its step among the sorted step numbers
    start_row: np.ndarray  # the activity its start is measured from (-1: none, fixed at ``start``)
    start_from_end: np.ndarray  # from that activity's end (the device's previous one), else from its start
    start: np.ndarray  # the window's start on the measured timeline (aligned)
    end_row: np.ndarray  # the step's last activity on the device (-1: none, fixed at ``end``)
    end: np.ndarray
    steps: int  # how many step numbers

    @property
    def size(self) -> int:
        return int(self.step.size)

    def windows(self, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every window's (start, end) on a timeline of the activities (``s``, ``e``: each row's times); the
        measured times give back the measured windows.

        The idle after a step's last activity is the step's, not each device's: a window ends where the step's
        last activity over all its devices has moved (the idle after it kept), or later where its own last
        activity runs past that. A device that idled to the end of the step (done early, waiting) absorbs its
        own slowdown in that idle, as it would: slowing it does not lengthen the step until it is the last. On
        one device this is its last activity's move."""
        row = np.maximum(self.start_row, 0)
        anchor = np.where(self.start_from_end, e[row], s[row])
        measured = np.where(self.start_from_end, self.e0[row], self.s0[row])
        lo = np.where(self.start_row >= 0, self.start + (anchor - measured), self.start)
        last = np.maximum(self.end_row, 0)
        moved = e[last] - self.e0[last]
        own = (self.end_row >= 0) & self.end_own
        # per step: how far its last activity over its devices moved
        newest = np.full(self.steps, np.iinfo(np.int64).min, dtype=np.int64)
        measured_last = newest.copy()
        np.maximum.at(newest, self.step[own], e[last[own]])
        np.maximum.at(measured_last, self.step[own], self.e0[last[own]])
        shift = (newest - measured_last)[self.step]
        # an activity that ran past its window's measured end keeps doing so by as much (a TPU op past its Steps
        # line's end): the window ends no earlier than that
        past = np.maximum(self.e0[last] - self.end, 0)
        hi_own = np.maximum(self.end + shift, e[last] - past)
        hi = np.where(own, hi_own, np.where(self.end_row >= 0, self.end + moved, self.end))
        return lo, hi

    def spans(self, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per step (sorted numbers): the job's window length over its devices' windows on that timeline (the
        earliest start to the latest end), and whether the step has a window at all."""
        lo_w, hi_w = self.windows(s, e)
        lo = np.full(self.steps, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(self.steps, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(lo, self.step, lo_w)
        np.maximum.at(hi, self.step, hi_w)
        has = hi >= lo
        return np.where(has, hi - lo, 0), has

    # the measured times of every row (what an anchor's move is measured against)
    s0: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    e0: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # per window: whether ``end_row`` is the window's own last activity (not the program before an empty window)
    end_own: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


def step_edges(
    device: np.ndarray,
    step: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    numbers: np.ndarray,
    windows: pd.DataFrame,
) -> StepEdges:
    """The :class:`StepEdges` of a job's activities: ``device`` (integer codes), ``step`` (each row's step
    number, any other value for none), ``start``/``end`` (aligned), ``numbers`` (the sorted step numbers);
    ``windows``: ``device`` (codes), ``step``, ``start_ns``, ``end_ns`` (aligned), one row per device and step."""
    w_dev = windows["device"].to_numpy(dtype=np.int64)
    w_step = windows["step"].to_numpy(dtype=np.int64)
    at = np.searchsorted(numbers, w_step)
    known = at < numbers.size
    known[known] = numbers[at[known]] == w_step[known]
    w_dev, w_step, at = w_dev[known], w_step[known], at[known]
    w_start = windows["start_ns"].to_numpy(dtype=np.int64)[known]
    w_end = windows["end_ns"].to_numpy(dtype=np.int64)[known]
    start_row = np.full(w_dev.size, -1, dtype=np.int64)
    from_end = np.zeros(w_dev.size, dtype=bool)
    end_row = np.full(w_dev.size, -1, dtype=np.int64)
    end_own = np.zeros(w_dev.size, dtype=bool)
    if start.size and w_dev.size:
        # each window's first (earliest start) and last (latest end) activity, where it holds any
        inside = np.flatnonzero(np.isin(step, numbers))
        cell = combine_codes(np.r_[device[inside], w_dev], np.r_[step[inside], w_step])
        act_cell, win_cell = cell[: inside.size], cell[inside.size :]
        first = np.full(int(cell.max()) + 1, -1, dtype=np.int64)
        last = first.copy()
        if inside.size:
            lo = pd.Series(start[inside]).groupby(act_cell, sort=False).idxmin()  # positions into ``inside``
            hi = pd.Series(end[inside]).groupby(act_cell, sort=False).idxmax()
            first[lo.index.to_numpy(dtype=np.int64)] = inside[lo.to_numpy(dtype=np.int64)]
            last[hi.index.to_numpy(dtype=np.int64)] = inside[hi.to_numpy(dtype=np.int64)]
        first_row, end_row = first[win_cell], last[win_cell]
        end_own = end_row >= 0
        idle_before = (first_row < 0) | (start[np.maximum(first_row, 0)] > w_start)
        # where idle leads the window: the device's latest activity ending by its start (the program before);
        # only those devices' activities are sorted (a host marker's windows start at their first activity)
        prev = np.full(w_dev.size, -1, dtype=np.int64)
        needed = np.unique(w_dev[idle_before])
        if needed.size:
            rows = np.flatnonzero(np.isin(device, needed))
            rows = rows[np.lexsort((end[rows], device[rows]))]
            bounds = np.asarray(np.searchsorted(device[rows], np.r_[needed, needed.max() + 1]), dtype=np.int64)
            for i, d in enumerate(needed.tolist()):  # a job's devices: one search each
                mine = np.flatnonzero((w_dev == d) & idle_before)
                own = rows[bounds[i] : bounds[i + 1]]
                k = np.searchsorted(end[own], w_start[mine], side="right") - 1
                ok = k >= 0
                prev[mine[ok]] = own[k[ok]]
        from_end = idle_before & (prev >= 0)
        start_row = np.where(from_end, prev, first_row)
        end_row = np.where(end_row >= 0, end_row, np.where(from_end, prev, -1))  # nothing in it: moves with prev
    return StepEdges(
        device=w_dev,
        step=at,
        start_row=start_row,
        start_from_end=from_end,
        start=w_start,
        end_row=end_row,
        end=w_end,
        steps=int(numbers.size),
        s0=np.asarray(start, dtype=np.int64),
        e0=np.asarray(end, dtype=np.int64),
        end_own=end_own,
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
