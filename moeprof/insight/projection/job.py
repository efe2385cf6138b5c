"""Spec §9: the job graph: the whole job's activities as the replay sees them, built once and replayed for
every projection (the ``balance`` one, each opportunity's, the one ``--what-if`` asked for), and the figures
of a replayed timeline (step times, critical path, §4/§8 figures per device).

The per-file map keeps, per device activity, the compact columns the replay needs
(:mod:`.columns`); the merge joins them with the §8 instances and clock offsets into a
:class:`ReplayJob`, whose graph (:mod:`.replay`) is built once. Which activities a term changes, and
how, is decided by the terms (:mod:`.terms`); here a change is only new durations (and transfers ``τ``
for instance members).

Readings of §9 (docs/metrics.md, "Projection", holds them all):

* an activity belongs to the §5 step whose window on its device holds its start;
  ``step_ns`` of a step is the job's window of it: its devices' §5 windows from the earliest
  start to the latest end (aligned), each window's edges tied to the activities that bound them
  in a replay (:class:`moeprof.core.steps.StepEdges`: the idle a TPU's Steps line holds is kept);
  a job without steps is one step, numbered -1, its activities' span;
* the critical path is the one of the step with the longest projected time; it follows
  the last arrival through each instance, so waiting for peers is never on it (its
  ``wait`` is 0 by construction) and shows as the peers' work it waited for;
* the projected timeline's §4 window of a device: each measured window segment
  becomes the projected [earliest start, latest end] of the activities that started in it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar, cast

import numpy as np
import pandas as pd

from ...core import intervals as iv
from ...core.analysis import (
    CAUSES,
    NS_KEYS,
    CriticalPath,
    DeviceFigures,
    Projection,
    StepBound,
    StepFigures,
    StepProjection,
)
from ...core.events import BUCKETS, bucket_codes, column_codes, gathered, lookup
from ...core.expert_load import RoutedLoad
from ...core.ledger import Ledger, build_ledger
from ...core.metrics import DeviceTimeline, EventColumns
from ...core.roofline import activity_roof_ns
from ...core.sections import Throughput
from ...core.steps import StepEdges, step_edges
from ..throughput import projected_throughput
from .replay import Graph, build_graph, latest_end_zeroed, replay, walk_back

T = TypeVar("T")
_BUCKET_CAUSE = {"compute": "compute", "comm": "transfer", "memcpy": "copy", "other": "other"}
NO_STEP = -(2**62)  # the step of an activity outside every §5 step window


def bound_of(by_device: Mapping[str, Mapping[str, int]]) -> StepBound | None:
    """What sets a step's end, from its critical path's time per cause, per device: the cause with the most
    time, its share of the path, and the devices that time lies on (the most first, at most 4)."""
    by_cause = {c: sum(per.values()) for c, per in by_device.items()}
    total = sum(by_cause.values())
    if total <= 0:
        return None
    cause = max(by_cause, key=lambda c: (by_cause[c], c))
    devices = sorted(by_device[cause], key=lambda d: (-by_device[cause][d], d))[:4]
    return StepBound(cause, by_cause[cause] / total, tuple(devices))


def _built() -> Graph:
    raise AssertionError("the graph is built once")


def _codes_of(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    codes, values = column_codes(column)
    return codes, values


@dataclass
class ReplayJob:
    """The whole job's activities as the replay sees them, and its graph (built once, when first replayed:
    the measured step times need only the aligned times)."""

    table: pd.DataFrame  # REPLAY_COLUMNS, one row per activity
    make_graph: Callable[[], Graph] = field(repr=False, compare=False)
    start: np.ndarray  # per row: its aligned measured start ŝ
    end: np.ndarray  # per row: its aligned measured end ê (>= start)
    delta: np.ndarray  # per row: the clock offset δ of its host (ŝ = start − δ)
    step: np.ndarray  # per row: its §5 step (-1: the whole trace when the job has no steps)
    step_numbers: np.ndarray  # the steps, sorted
    # each device's §5 step windows, their edges tied to the activities that bound them (the idle a device-side
    # marker holds at its edges, a TPU's Steps line, kept as measured): a replayed timeline's steps
    step_edges: StepEdges
    device_names: np.ndarray  # device code -> name
    bucket: np.ndarray  # int8 index into BUCKETS
    windows: pd.DataFrame  # device, start_ns, end_ns: the measured windows (own clock)
    records: pd.DataFrame | None = None  # the ledger's comm records (own clock), for the projected §8 figures
    record_rows: np.ndarray | None = None  # the replay row of each record
    # how the measured records matched (§8), where ``records`` are the measured ledger's in its row order: a
    # replayed timeline whose records keep their occurrence order matches the same way (not matched again)
    matching: Any = field(default=None, repr=False, compare=False)
    whole_job: bool = False
    device_ids: Mapping[int, str] = field(default_factory=dict)
    hosts: Mapping[str, str] = field(default_factory=dict)  # device -> host
    kinds: Mapping[str, str] = field(default_factory=dict)  # device -> GPU | TPU | CPU (its reader's record)
    # spec §10: the chip's peaks every activity's roof is taken against (None: not known)
    peak_flops_per_s: float | None = None
    peak_hbm_bytes_per_s: float | None = None
    # spec §11: the tokens the run routed per (step, layer, expert), where measured (a manifest, --expert-load):
    # the balance-router term spreads those rows rather than the expert work's durations
    routed: RoutedLoad | None = None
    _codes: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)
    _step_rows: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    _kept: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def size(self) -> int:
        return len(self.table)

    @cached_property
    def graph(self) -> Graph:
        """The dependency graph (:func:`.replay.build_graph`), built on first use."""
        graph = self.make_graph()
        self.make_graph = _built  # the arrays it was made from are let go
        return graph

    def codes(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """A string column's (codes, distinct values), factorized once per job (every what-if filter and
        every opportunity selects on them)."""
        if column not in self._codes:
            self._codes[column] = column_codes(self.table[column])
        return self._codes[column]

    @classmethod
    def build(
        cls,
        table: pd.DataFrame,
        instance: np.ndarray,
        clock_offsets: Mapping[str, int],
        steps: pd.DataFrame,
        windows: pd.DataFrame,
        syncs: pd.DataFrame | None = None,
        records: pd.DataFrame | None = None,
        whole_job: bool = False,
        device_ids: Mapping[int, str] | None = None,
        hosts: Mapping[str, str] | None = None,
        kinds: Mapping[str, str] | None = None,
        peaks: tuple[float | None, float | None] = (None, None),
        matching: Any = None,
    ) -> ReplayJob:
        """``table``: REPLAY_COLUMNS; ``instance``: complete §8 instance per row (-1 none); ``steps``:
        (step, device, start_ns, end_ns) on each device's own clock; ``windows``: measured windows."""
        table = table.reset_index(drop=True)
        dev_c, dev_v = _codes_of(table["device"])
        names = np.array([str(v) for v in dev_v.tolist()], dtype=object)
        clock_c, clock_v = _codes_of(table["clock"])
        delta_of = np.array([int(clock_offsets.get(str(c), 0)) for c in clock_v.tolist()] + [0], dtype=np.int64)
        delta = gathered(delta_of, clock_c)  # one host's clock, the usual case: one offset broadcast, in no memory
        start = table["start_ns"].to_numpy(np.int64)
        end = np.maximum(table["end_ns"].to_numpy(np.int64), start)
        stream = _codes_of(table["stream"])[0] + 1  # the graph takes a stream as a (device, stream) pair
        launch_ns = table["launch_ns"].to_numpy(np.int64)
        th_c, th_v = _codes_of(table["launch_thread"])
        known_thread = np.array([bool(v) for v in th_v.tolist()] + [False], dtype=bool)[th_c]
        # thread ids are a file's own: a thread is (device, thread)
        pair = dev_c * (len(th_v) + 1) + (th_c + 1)
        thread = np.where(known_thread, pair, -1)
        launching = np.zeros(len(names) * (len(th_v) + 1) + 1, dtype=bool)  # the pairs that launched something
        launching[pair[known_thread]] = True
        sync_arrays = None
        if syncs is not None and len(syncs):
            th_lut = {str(v): i for i, v in enumerate(th_v.tolist())}
            dev_lut = {str(v): i for i, v in enumerate(names.tolist())}
            s_dev = np.array([dev_lut.get(str(d), -1) for d in syncs["device"].tolist()], dtype=np.int64)
            s_th_c = np.array([th_lut.get(str(x), -1) for x in syncs["thread"].tolist()], dtype=np.int64)
            s_pair = s_dev * (len(th_v) + 1) + (s_th_c + 1)
            launched = launching[np.clip(s_pair, 0, launching.size - 1)]
            s_th = np.where((s_dev >= 0) & (s_th_c >= 0) & launched, s_pair, -1)
            first_row = np.full(len(names) + 1, 0, dtype=np.int64)
            first_row[dev_c[::-1]] = np.arange(dev_c.size)[::-1]
            s_delta = np.where(s_dev >= 0, delta[first_row[s_dev]], 0)
            keep = (s_dev >= 0) & (s_th >= 0)
            sync_arrays = (
                s_th[keep],
                syncs["start_ns"].to_numpy(np.int64)[keep] - s_delta[keep],
                syncs["end_ns"].to_numpy(np.int64)[keep] - s_delta[keep],
                s_dev[keep],
            )
        has_launch = known_thread & (launch_ns >= 0)
        aligned_start, aligned_end = start - delta, end - delta

        def make_graph() -> Graph:
            return build_graph(
                dev_c,
                stream,
                aligned_start,
                aligned_end,
                instance,
                np.where(has_launch, launch_ns - delta, -1),
                np.where(has_launch, thread, -1),
                sync_arrays,
            )

        step, numbers = _steps_of(dev_c, names, start, steps)
        windows_of_steps = _aligned_windows(steps, names, dev_c, delta)
        edges = step_edges(dev_c, step, start - delta, end - delta, numbers, windows_of_steps)
        record_rows = None
        if records is not None:
            record_rows = np.flatnonzero(bucket_codes(table["bucket"]) == BUCKETS.index("comm"))
        return cls(
            table=table,
            make_graph=make_graph,
            start=aligned_start,
            end=aligned_end,
            delta=delta,
            step=step,
            step_numbers=numbers,
            step_edges=edges,
            device_names=names,
            bucket=bucket_codes(table["bucket"]),
            windows=windows,
            records=records,
            record_rows=record_rows,
            matching=matching if records is not None else None,
            whole_job=whole_job,
            device_ids=dict(device_ids or {}),
            hosts=dict(hosts or {}),
            kinds=dict(kinds or {}),
            peak_flops_per_s=peaks[0],
            peak_hbm_bytes_per_s=peaks[1],
        )

    @cached_property
    def roof_ns(self) -> np.ndarray:
        """Per row: its time at the chip's roof, ``max(f/P, b/B)`` in ns (spec §10; float64, NaN where the
        activity has no counts or no peak is known: no roof, never 0)."""
        if "flops" not in self.table.columns:
            return np.full(self.size, np.nan)
        return activity_roof_ns(
            self.table["flops"].to_numpy(np.float64),
            self.table["hbm_bytes"].to_numpy(np.float64),
            self.peak_flops_per_s,
            self.peak_hbm_bytes_per_s,
        )

    # ------------------------------------------------------------ running

    def run(
        self, duration: np.ndarray | None = None, transfer: np.ndarray | None = None, gap: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Projected (start, end) of every row, aligned (ŝ clock); ``gap``: changed trigger gaps ``g_x`` (the
        balance-router term scales the host time inside a token-driven loop), default the measured ones (the
        graph holds them per run, so a change goes through :func:`replay`)."""
        return replay(self.graph, duration, transfer, gap=gap)

    def step_spans(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Per step (``step_numbers`` order): its step time on a replayed timeline: the job's window over its
        devices' §5 windows, each moved with the activities that bound it (:class:`StepEdges`; the measured
        timeline gives the measured windows exactly: §5's step, the one every screen shows); a step without
        windows (a job without steps): the latest end − earliest start of its activities."""
        spans, windowed = self.step_edges.spans(s, e)
        if bool(windowed.all()):  # (the activities' spans are not needed: not computed)
            return spans
        return np.where(windowed, spans, self._activity_spans(s, e))

    def _activity_spans(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Per step (``step_numbers`` order): latest end − earliest start of its activities (0 without any)."""
        size = self.step_numbers.size
        lo = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)
        rows, held, at = self._by_step
        if rows is None:  # every activity in one step: no gather
            if s.size:
                lo[0], hi[0] = s.min(), e.max()
        elif rows.size:
            lo[held] = np.minimum.reduceat(s[rows], at)
            hi[held] = np.maximum.reduceat(e[rows], at)
        return np.where(hi >= lo, hi - lo, 0)

    def step_windows(self, s: np.ndarray, e: np.ndarray) -> pd.DataFrame:
        """Each device's §5 step windows on a replayed timeline (:class:`StepEdges`), on its own clock:
        ``device, step, start_ns, end_ns``."""
        edges = self.step_edges
        lo, hi = edges.windows(s, e)
        first_row = np.zeros(len(self.device_names), dtype=np.int64)
        dev_c = self.codes("device")[0]
        first_row[dev_c[::-1]] = np.arange(dev_c.size)[::-1]
        shift = self.delta[first_row[edges.device]] if self.delta.size else np.zeros(edges.size, dtype=np.int64)
        return pd.DataFrame(
            {
                "device": self.device_names[edges.device],
                "step": self.step_numbers[edges.step],
                "start_ns": lo + shift,
                "end_ns": hi + shift,
            }
        )

    @cached_property
    def _by_step(self) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """The activities inside a step grouped by step (rows in step order, the steps that hold any, where each
        one's rows begin); rows None where every activity is in the one step."""
        inside = self.step != NO_STEP
        if self.step_numbers.size == 1 and bool(inside.all()):
            return None, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        code = np.searchsorted(self.step_numbers, self.step)
        rows = np.flatnonzero(inside)
        rows = rows[np.argsort(code[rows], kind="stable")]
        sorted_code = code[rows]
        at = np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]]) if rows.size else rows
        # kept for the job's life: rows as 4-byte integers where they fit (half the memory of 1M activities')
        return rows.astype(np.int32) if rows.size < 2**31 else rows, sorted_code[at], at

    @cached_property
    def measured_spans(self) -> np.ndarray:
        """:meth:`step_spans` of the measured timeline (every projection compares with it)."""
        return self.step_spans(self.start, self.end)

    def rows_of_step(self, step: int) -> np.ndarray:
        """The rows of one step (kept: every projection's critical path lies in its worst step, mostly one)."""
        if step not in self._step_rows:
            self._step_rows[step] = np.flatnonzero(self.step == step)
        return self._step_rows[step]

    def kept(self, key: str, make: Callable[[], T]) -> T:
        """What ``make`` computes from the job, computed once per job (a term's per-job tables: the balance
        term's counterpart medians serve the balance projection and every straggler's saving)."""
        if key not in self._kept:
            self._kept[key] = make()
        return cast("T", self._kept[key])

    @cached_property
    def step_rows(self) -> np.ndarray:
        """The rows of activities inside a step (every saving end to end is measured over them)."""
        return np.flatnonzero(self.step != NO_STEP)

    def steps_end_saving(self, s: np.ndarray, e: np.ndarray) -> int:
        """The mean step saving measured end to end: (the latest end of the steps' activities, measured
        minus replayed) / steps. In a loop of back-to-back steps it is the mean of the per-step savings
        (they telescope); unlike a per-step span it never turns negative when work is removed (a step's
        span can grow when its first activity moves earlier more than its last end does)."""
        if not self.step_rows.size:
            return 0
        return self.steps_end_saving_of(int(e[self.step_rows].max()))

    def steps_end_saving_of(self, latest_end: int) -> int:
        """:meth:`steps_end_saving` from the replay's latest end of the steps' activities."""
        if not self.step_numbers.size or not self.step_rows.size:
            return 0
        return round((int(self.graph.end[self.step_rows].max()) - latest_end) / self.step_numbers.size)

    def latest_end_without(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        """Per set of rows: the steps' latest projected end were those activities to take no time."""
        return latest_end_zeroed(self.graph, rows, self.step_rows)

    def steps_end_chain(self) -> tuple[np.ndarray, np.ndarray]:
        """The measured chain of tight edges behind the steps' latest end (what ``steps_end_saving``
        measures), back to a root: its rows and each row's weight (its duration; its transfer ``τ`` for
        an instance member). Taking work ``W`` away moves that end earlier by at most the weight of ``W``
        on the chain: every link of the chain still holds in the replay, so the end stays at or after
        the measured end minus what ``W`` removed from the chain (a bound the savings use to skip
        replays that cannot save anything)."""
        g = self.graph
        inside = self.step_rows
        if not inside.size:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        chain, _, _ = walk_back(g, g.start, g.end, int(inside[np.argmax(g.end[inside])]))
        node = g.node_of[chain]
        weight = np.where(g.nodes.member_lo[node] >= 0, g.nodes.transfer[node], g.duration[chain])
        return chain, weight

    def projection(
        self,
        what_if: Sequence[str],
        s: np.ndarray,
        e: np.ndarray,
        figures: bool = True,
        throughput: Throughput | None = None,
        path: bool = True,
    ) -> Projection:
        """The :class:`Projection` of a replayed timeline (``s``, ``e`` from :meth:`run`): its step times, what
        bounds its longest step, and (``figures``) the projected timeline's §4/§8 figures per device; ``path``:
        with the critical path's segments (else only its time per cause, what the screen shows)."""
        measured = self.measured_spans
        projected = self.step_spans(s, e)
        steps = tuple(
            StepProjection(int(n), int(m), int(p)) for n, m, p in zip(self.step_numbers.tolist(), measured, projected)
        )
        m_mean = _mean(measured)
        p_mean = _mean(projected)
        segments = CriticalPath.empty()
        by_cause: dict[str, int] = dict.fromkeys(CAUSES, 0)
        critical = None
        bound = None
        if steps:
            worst = int(np.argmax(projected))
            critical = int(self.step_numbers[worst])
            if path:
                segments = self.critical_path(s, e, critical)
                by_cause, bound = segments.by_cause(), bound_of(segments.by_cause_device())
            else:
                per = self.critical_time(s, e, critical)
                by_cause, bound = {c: sum(per.get(c, {}).values()) for c in CAUSES}, bound_of(per)
        devices = self.device_figures(s, e) if figures else ()
        return Projection(
            what_if=tuple(what_if),
            measured_step_ns=m_mean,
            projected_step_ns=p_mean,
            saving_ns=m_mean - p_mean,
            steps=steps,
            critical_path=segments,
            critical_step=critical if critical != NO_STEP else -1,
            path_by_cause=by_cause,
            devices=devices,
            throughput=projected_throughput(throughput, m_mean, p_mean),
            bound=bound,
        )

    # ------------------------------------------------------------ the critical path

    def critical_path(self, s: np.ndarray, e: np.ndarray, step: int) -> CriticalPath:
        """The chain of tight edges from the step's last end back to a root (or to the step's start)."""
        return self._critical(s, e, step)[0]

    def critical_rows(self, s: np.ndarray, e: np.ndarray, step: int) -> np.ndarray:
        """The activities on the step's critical path (rows, in path order)."""
        return self._critical(s, e, step)[1]

    def critical_time(self, s: np.ndarray, e: np.ndarray, step: int) -> dict[str, dict[str, int]]:
        """The time of the step's critical path per cause, per device (what :meth:`critical_path`'s segments
        sum to), without the segments."""
        return cast("dict[str, dict[str, int]]", self._critical(s, e, step, segments=False)[0])

    def critical_work(self, s: np.ndarray, e: np.ndarray, step: int) -> tuple[dict[str, dict[str, int]], np.ndarray]:
        """:meth:`critical_time` and the activities on that path (rows, in path order), from one walk."""
        time, rows = self._critical(s, e, step, segments=False)
        return cast("dict[str, dict[str, int]]", time), rows

    def _critical(self, s: np.ndarray, e: np.ndarray, step: int, segments: bool = True) -> tuple[Any, np.ndarray]:
        g = self.graph
        rows = self.rows_of_step(step)
        if not rows.size:
            return CriticalPath.empty() if segments else {}, np.zeros(0, dtype=np.int64)
        if rows.size == s.size:  # every activity in this step (rows: all of them, in order): no gathers
            step_start, x = int(s.min()), int(np.argmax(e))
        else:
            step_start, x = int(s[rows].min()), int(rows[np.argmax(e[rows])])
        visited, arrived, pred = walk_back(g, s, e, x, after=step_start)
        # per step of the walk: the activity's time from its arrival to its end, then the launch/host gap
        # before that arrival (from the predecessor's end), both clipped at the step's start
        arrival = s[arrived]
        work_lo = np.maximum(arrival, step_start)
        work_hi = e[visited]
        before = e[np.maximum(pred, 0)]
        gap_ok = (pred >= 0) & (arrival > step_start) & (before < arrival)
        gap_lo = np.maximum(before, step_start)
        names_c, names_v = self.codes("name")
        kind_c, kind_v = self.codes("kind")
        b = self.bucket[visited].astype(np.int64)
        bucket_of = np.where(b >= 0, b, len(BUCKETS))  # "other" where the bucket is none of them
        bucket_names = [*BUCKETS, "other"]
        # each step's cause as a code into CAUSES (its work's by its bucket; the gap before it: "launch")
        cause_code = np.array([CAUSES.index(_BUCKET_CAUSE.get(x, "other")) for x in bucket_names])[bucket_of]
        cause_names = np.array(CAUSES, dtype=object)
        launch = CAUSES.index("launch")

        if not segments:
            return _time_on_path(
                np.r_[cause_code, np.full(visited.size, launch)],
                cause_names,
                np.r_[g.device[visited], g.device[arrived]],
                np.r_[work_hi - work_lo, np.where(gap_ok, arrival - gap_lo, 0)],
                self.device_names,
            ), visited

        def text(values: np.ndarray, *more: str) -> np.ndarray:
            """The strings codes read: ``str`` of each distinct value, then "" (code -1, missing), then ``more``."""
            return np.array([*(str(v) for v in np.asarray(values).tolist()), "", *more], dtype=object)

        # slot 2i: step i's work, slot 2i + 1: the gap before its arrival; the path runs from the last slot back
        keep = np.empty(2 * visited.size, dtype=bool)
        keep[0::2] = work_hi > work_lo
        keep[1::2] = gap_ok & (arrival > gap_lo)

        def column(work: np.ndarray, gap: Any) -> np.ndarray:
            both = np.empty(2 * visited.size, dtype=work.dtype)
            both[0::2], both[1::2] = work, gap
            return np.ascontiguousarray(both[keep][::-1])

        def coded(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
            return np.where(codes < 0, len(values), codes)  # -1 (missing) reads the "" after the values

        devices = np.array([str(d) for d in self.device_names.tolist()], dtype=object)
        device_code = column(g.device[visited], g.device[arrived])
        cause_column = column(cause_code, launch)
        path = CriticalPath.coded(
            {
                "device": (device_code, devices),
                "bucket": (column(bucket_of, len(bucket_names)), np.array([*bucket_names, ""], dtype=object)),
                "kind": (column(coded(kind_c[visited], kind_v), len(kind_v)), text(kind_v)),
                "cause": (cause_column, cause_names),
                "name": (column(coded(names_c[visited], names_v), len(names_v) + 1), text(names_v, "launch/host gap")),
            },
            column(work_lo, gap_lo),
            column(work_hi, arrival),
        )
        return path, visited[::-1].copy()

    # ------------------------------------------------------------ §4/§8 figures of the projected timeline

    def device_figures(self, s: np.ndarray, e: np.ndarray) -> tuple[DeviceFigures, ...]:

        own_s, own_e = s + self.delta, e + self.delta
        dev = self.graph.device
        order = np.argsort(dev, kind="stable")
        bounds = np.searchsorted(dev[order], np.arange(self.device_names.size + 1))
        w_dev = self.windows["device"].astype(str).to_numpy()
        w_s = self.windows["start_ns"].to_numpy(np.int64)
        w_e = self.windows["end_ns"].to_numpy(np.int64)
        m_start = self.table["start_ns"].to_numpy(np.int64)
        # one table of the projected timeline, its columns shared by every device's timeline
        frame = pd.DataFrame({"start_ns": own_s, "end_ns": own_e, "ib_fraction": self.table["ib_fraction"]})
        columns = EventColumns(frame)
        columns.derived("bucket", lambda: self.bucket)  # codes, not strings: a string per row costs more
        out: list[DeviceFigures] = []
        proj_windows: list[tuple[str, np.ndarray, np.ndarray]] = []
        exposed: list[tuple[str, np.ndarray, np.ndarray]] = []
        for d, name in enumerate(self.device_names.tolist()):
            rows = order[bounds[d] : bounds[d + 1]]
            mine = w_dev == name
            if not rows.size or not mine.any():
                continue
            ws, we = w_s[mine], w_e[mine]
            seg_lo, seg_hi = [], []
            for a, b in zip(ws.tolist(), we.tolist()):
                inside = rows[(m_start[rows] >= a) & (m_start[rows] < b)]
                if inside.size:
                    seg_lo.append(int(own_s[inside].min()))
                    seg_hi.append(int(own_e[inside].max()))
            if not seg_lo:
                continue
            win_s, win_e = iv.union(np.array(seg_lo, np.int64), np.array(seg_hi, np.int64))
            measured = DeviceTimeline(frame, rows, columns).measure(win_s, win_e, segments_only=True)
            figs = measured.figures
            proj_windows.append((name, win_s, win_e))
            exposed.append((name, *measured.exposed_segments))
            out.append(
                DeviceFigures(
                    device=name,
                    host=self.hosts.get(name, name.split("/")[0]),
                    kind=self.kinds.get(name, ""),
                    **{k: getattr(figs, k) for k in NS_KEYS},
                )
            )
        if self.records is not None and self.record_rows is not None and len(self.records) == self.record_rows.size:
            recs = self.records.copy(deep=False)  # its own start and end below; the rest shared (copy on write)
            recs["start_ns"] = own_s[self.record_rows]
            recs["end_ns"] = own_e[self.record_rows]
            ledger = build_ledger(
                recs, _segments(proj_windows), _segments(exposed), self.whole_job, dict(self.device_ids), self.matching
            )
            per = {d.device: d.figures() for d in ledger.devices}
            out = [replace(d, ledger=per.get(d.device)) if d.device in per else d for d in out]
        return tuple(sorted(out, key=lambda d: d.device))


def _time_on_path(
    cause: np.ndarray, cause_names: np.ndarray, device: np.ndarray, ns: np.ndarray, device_names: np.ndarray
) -> dict[str, dict[str, int]]:
    """Per cause (``cause``: codes into ``cause_names``; the causes in name order), per device: the summed ``ns``
    of the path's pieces that last (``ns`` > 0)."""
    keep = ns > 0
    n_dev, n_cause = int(device_names.size), len(cause_names)
    total = np.zeros(n_cause * n_dev, dtype=np.int64)
    np.add.at(total, cause[keep] * n_dev + device[keep], ns[keep])
    held = np.zeros(n_cause, dtype=bool)
    held[cause[keep]] = True
    out: dict[str, dict[str, int]] = {}
    for i in sorted(np.flatnonzero(held).tolist(), key=lambda c: str(cause_names[c])):
        per = total[i * n_dev : (i + 1) * n_dev]
        out[str(cause_names[i])] = {str(device_names[d]): int(per[d]) for d in np.flatnonzero(per).tolist()}
    return out


def _mean(values: np.ndarray) -> int:
    return int(round(float(np.mean(values)))) if values.size else 0


def _segments(parts: list[tuple[str, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame({"device": [], "start_ns": np.zeros(0, np.int64), "end_ns": np.zeros(0, np.int64)})
    return pd.DataFrame(
        {
            "device": pd.Categorical.from_codes(  # type: ignore[call-overload]
                np.repeat(np.arange(len(parts)), [s.size for _, s, _ in parts]), [d for d, _, _ in parts]
            ),
            "start_ns": np.concatenate([s for _, s, _ in parts]).astype(np.int64),
            "end_ns": np.concatenate([e for _, _, e in parts]).astype(np.int64),
        }
    )


def _aligned_windows(steps: pd.DataFrame, names: np.ndarray, dev_c: np.ndarray, delta: np.ndarray) -> pd.DataFrame:
    """The §5 step windows (``steps``: device, step, start_ns, end_ns on each device's own clock) with device
    codes and aligned times (less the δ of the device's host), for :func:`moeprof.core.steps.step_edges`."""
    if steps is None or not len(steps):
        return pd.DataFrame({c: np.zeros(0, np.int64) for c in ("device", "step", "start_ns", "end_ns")})
    code_of = {str(n): i for i, n in enumerate(names.tolist())}
    first_row = np.zeros(len(names), dtype=np.int64)
    first_row[dev_c[::-1]] = np.arange(dev_c.size)[::-1]
    codes, values = column_codes(steps["device"])
    dev = lookup(codes, np.array([code_of.get(str(v), -1) for v in values.tolist()], dtype=np.int64), -1)
    ok = dev >= 0
    shift = delta[first_row[np.maximum(dev, 0)]] if delta.size else np.zeros(dev.size, dtype=np.int64)
    return pd.DataFrame(
        {
            "device": dev[ok],
            "step": steps["step"].to_numpy(np.int64)[ok],
            "start_ns": steps["start_ns"].to_numpy(np.int64)[ok] - shift[ok],
            "end_ns": steps["end_ns"].to_numpy(np.int64)[ok] - shift[ok],
        }
    )


def _steps_of(
    dev_c: np.ndarray, names: np.ndarray, start: np.ndarray, steps: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's §5 step (the step window of its device that holds its start; NO_STEP: none) and the
    sorted step numbers; a job without steps is one step, -1."""
    n = start.size
    if steps is None or not len(steps):
        return np.full(n, -1, dtype=np.int64), np.array([-1], dtype=np.int64)
    step = np.full(n, NO_STEP, dtype=np.int64)
    sd = steps["device"].astype(str).to_numpy()
    ss = steps["start_ns"].to_numpy(np.int64)
    se = steps["end_ns"].to_numpy(np.int64)
    sn = steps["step"].to_numpy(np.int64)
    # each device's rows: a slice where they come by device (a merged job's do: no gathers), else a stable sort
    sliced = n < 2 or bool(np.all(dev_c[1:] >= dev_c[:-1]))
    by_device = np.arange(n) if sliced else np.argsort(dev_c, kind="stable")
    bounds = np.searchsorted(dev_c if sliced else dev_c[by_device], np.arange(len(names) + 1))
    for d, name in enumerate(names.tolist()):
        mine = np.flatnonzero(sd == name)
        if not mine.size:
            continue
        mine = mine[np.argsort(ss[mine], kind="stable")]
        lo, hi = int(bounds[d]), int(bounds[d + 1])
        rows: slice | np.ndarray = slice(lo, hi) if sliced else by_device[lo:hi]
        mine_start = start[rows]
        k = np.searchsorted(ss[mine], mine_start, side="right") - 1
        inside = (k >= 0) & (mine_start < se[mine[np.maximum(k, 0)]])
        step[rows] = np.where(inside, sn[mine[np.maximum(k, 0)]], NO_STEP)
    return step, np.unique(sn)


def joined_job(
    table: pd.DataFrame,
    records: pd.DataFrame | None,
    ledger: Ledger | None,
    steps: Sequence[StepFigures],
    windows: pd.DataFrame,
    syncs: pd.DataFrame,
    whole_job: bool,
    device_ids: Mapping[int, str],
    hosts: Mapping[str, str],
    kinds: Mapping[str, str] | None = None,
    peaks: tuple[float | None, float | None] = (None, None),
) -> ReplayJob | None:
    """The :class:`ReplayJob` of the whole job: the files' replay columns (``table``, :mod:`.columns`) joined
    with the §8 instances and clock offsets of ``ledger`` (None: no comm records); None without activities.
    ``peaks``: the chip's FLOP/s and HBM bytes/s, what every activity's roof is taken against (spec §10)."""
    if table.empty:
        return None
    comm = bucket_codes(table["bucket"]) == BUCKETS.index("comm")
    instance = np.full(len(table), -1, dtype=np.int64)
    offsets: dict[str, int] = {}
    record_of = np.cumsum(comm) - 1  # the i-th comm row is the i-th record
    if ledger is not None and records is not None:
        if int(comm.sum()) != len(records):
            raise AssertionError(f"{int(comm.sum())} comm activities to replay but {len(records)} ledger records")
        instance[comm] = ledger.records["instance"].to_numpy(np.int64)
        offsets = dict(ledger.clock_offsets_ns)
    # one row order whatever order the files' results arrived in: devices by name (each device's rows
    # come from one file, in start order), so that ties in the replay break the same way
    codes, names = column_codes(table["device"])  # codes of the categorical: no string per row
    if (codes < 0).any():
        codes, names = pd.factorize(table["device"].astype(str).to_numpy(dtype=object))
    rank_of = np.argsort(np.argsort(np.asarray([str(v) for v in names], dtype=object)))
    order = np.argsort(rank_of[codes], kind="stable")
    matching = ledger.matching if ledger is not None else None
    if not bool(np.all(order[1:] > order[:-1])):  # already in that order (one file's devices): no copy
        matching = None  # the records in another row order than the ledger's: matched again where replayed
        table = table.iloc[order].reset_index(drop=True)
        instance = instance[order]
        if records is not None:
            records = records.iloc[record_of[order][comm[order]]].reset_index(drop=True)
    elif records is not None:
        records = records.reset_index(drop=True)
    step_frame = pd.DataFrame(
        {
            "step": [s.step for s in steps],
            "device": [s.device for s in steps],
            "start_ns": np.array([s.start_ns for s in steps], dtype=np.int64),
            "end_ns": np.array([s.end_ns for s in steps], dtype=np.int64),
        }
    )
    return ReplayJob.build(
        table,
        instance,
        offsets,
        step_frame,
        windows,
        syncs=syncs,
        records=records if ledger is not None else None,
        whole_job=whole_job,
        device_ids=device_ids,
        hosts=hosts,
        kinds=kinds,
        peaks=peaks,
        matching=matching,
    )
