"""Spec §9: a job's projection (what-if) as typed values, and the engine that computes it.

The per-file map keeps, per device activity, the compact columns the replay needs
(:data:`REPLAY_COLUMNS`: times, stream, name, bucket, kind, link share, launch);
the merge joins them with the §8 instances and clock offsets into a
:class:`ReplayJob`, whose graph is built once and replayed for every projection
(the ``balance`` one, each opportunity's, the one ``--what-if`` asked for).
Which activities a term changes is decided in :mod:`moeprof.insight.whatif`;
here a change is only new durations (and transfers ``τ`` for instance members).

Readings of §9 (docs/metrics.md, "Projection", holds them all):

* an activity belongs to the §5 step whose window on its device holds its start;
  ``step_ns`` of a step is the latest end minus the earliest start of the job's
  activities in that step (aligned); a job without steps is one step, numbered -1;
* the critical path is the one of the step with the longest projected time; it follows
  the last arrival through each instance, so waiting for peers is never on it (its
  ``wait`` is 0 by construction) and shows as the peers' work it waited for;
* the projected timeline's §4 window of a device: each measured window segment
  becomes the projected [earliest start, latest end] of the activities that started in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from . import intervals as iv
from .analysis import NS_KEYS, DeviceFigures, ratio
from .events import BUCKETS, bucket_codes, categorical, categorical_of, column_codes, combine_codes, lookup
from .ledger_records import clock_domain
from .metrics import EventColumns
from .replay import NEG, Graph, build_graph, latest_end_zeroed, replay, tight_predecessor
from .trace import Trace

CAUSES = ("compute", "transfer", "wait", "launch", "copy", "other")
_BUCKET_CAUSE = {"compute": "compute", "comm": "transfer", "memcpy": "copy", "other": "other"}

# per device activity: what the replay needs (strings categorical); comm rows are in the order of the
# file's ledger records, so the i-th comm row is the i-th record
REPLAY_COLUMNS: dict[str, str] = {
    "device": "str",
    "clock": "str",
    "stream": "str",
    "name": "str",
    "op": "str",  # the collectives row / opportunity it belongs to: the HLO op, else the kernel name
    "bucket": "str",
    "kind": "str",
    "copy_kind": "str",
    "ib_fraction": "float64",
    "start_ns": "int64",
    "end_ns": "int64",
    "launch_ns": "int64",  # the launching call's time on the host clock (-1 unknown)
    "launch_thread": "str",  # "" unknown
    "scope": "str",  # the JAX name scope path (what --what-if scope~REGEX searches), "" unknown
}
SYNC_COLUMNS = ("device", "thread", "start_ns", "end_ns")  # host synchronizations (waited for the device)


@dataclass(frozen=True, slots=True)
class StepProjection:
    step: int
    measured_ns: int
    projected_ns: int

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "measured_ns": self.measured_ns, "projected_ns": self.projected_ns}


@dataclass(frozen=True, slots=True)
class PathSegment:
    """One piece of a critical path: an activity's time, or the launch/host gap before one."""

    device: str
    bucket: str  # the activity's bucket ("" for a gap)
    kind: str  # §3 kind for comm, "" otherwise
    cause: str  # compute | transfer | wait | launch | copy | other
    name: str
    start_ns: int  # projected, on the reference clock
    end_ns: int

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "bucket": self.bucket,
            "kind": self.kind,
            "cause": self.cause,
            "name": self.name,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "ns": self.end_ns - self.start_ns,
        }


@dataclass(frozen=True, slots=True)
class Projection:
    """Spec §9: one projection of the job (the measured job replayed with some changes)."""

    what_if: tuple[str, ...]
    measured_step_ns: int
    projected_step_ns: int
    saving_ns: int
    steps: tuple[StepProjection, ...] = ()
    critical_path: tuple[PathSegment, ...] = ()  # of the step with the longest projected time
    critical_step: int | None = None
    path_by_cause: Mapping[str, int] = field(default_factory=dict)
    devices: tuple[DeviceFigures, ...] = ()
    throughput: Mapping[str, Any] | None = None  # projected tokens/s, TFLOPS per device, MFU

    @property
    def saving_fraction(self) -> float:
        return ratio(self.saving_ns, self.measured_step_ns)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "what_if": list(self.what_if),
            "step_ns": {"measured": self.measured_step_ns, "projected": self.projected_step_ns},
            "saving_ns": self.saving_ns,
            "saving_fraction": self.saving_fraction,
            "steps": [s.to_json() for s in self.steps],
            "critical_step": self.critical_step,
            "critical_path": [p.to_json() for p in self.critical_path],
            "path_by_cause": dict(self.path_by_cause),
            "devices": [d.to_json() for d in self.devices],
        }
        if self.throughput:
            out["throughput"] = dict(self.throughput)
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Projection:
        step_ns = doc.get("step_ns") or {}
        return cls(
            what_if=tuple(str(t) for t in doc.get("what_if") or ()),
            measured_step_ns=int(step_ns.get("measured") or 0),
            projected_step_ns=int(step_ns.get("projected") or 0),
            saving_ns=int(doc.get("saving_ns") or 0),
            steps=tuple(
                StepProjection(int(s["step"]), int(s["measured_ns"]), int(s["projected_ns"]))
                for s in doc.get("steps") or ()
            ),
            critical_path=tuple(
                PathSegment(
                    str(p.get("device", "")),
                    str(p.get("bucket", "")),
                    str(p.get("kind", "")),
                    str(p.get("cause", "")),
                    str(p.get("name", "")),
                    int(p.get("start_ns", 0)),
                    int(p.get("end_ns", 0)),
                )
                for p in doc.get("critical_path") or ()
            ),
            critical_step=doc.get("critical_step"),
            path_by_cause={str(k): int(v) for k, v in (doc.get("path_by_cause") or {}).items()},
            devices=tuple(DeviceFigures.from_json(d) for d in doc.get("devices") or ()),
            throughput=doc.get("throughput") if isinstance(doc.get("throughput"), dict) else None,
        )


def empty_replay_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            c: pd.Series(dtype={"str": object, "int64": np.int64, "float64": np.float64}[t])
            for c, t in REPLAY_COLUMNS.items()
        }
    )


def empty_syncs() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "device": pd.Series(dtype=object),
            "thread": pd.Series(dtype=object),
            "start_ns": pd.Series(dtype=np.int64),
            "end_ns": pd.Series(dtype=np.int64),
        }
    )


def replay_table(trace: Trace, columns: EventColumns, positions: Sequence[np.ndarray]) -> pd.DataFrame:
    """The replay's columns of a file's devices (``positions``: each device's rows, sorted by start, in the
    order the map step measures them, so comm rows follow the ledger records' order)."""
    if not positions:
        return empty_replay_table()
    rows = np.concatenate([np.asarray(p, dtype=np.int64) for p in positions])
    table = columns.table

    def strings(column: str) -> pd.Categorical:
        codes, values = columns.strings(column)
        return categorical_of(codes[rows], values)

    start = columns.numbers("start_ns")[rows]
    dev_c, dev_v = columns.strings("device")
    clocks = np.array([clock_domain(trace, str(d)) for d in dev_v.tolist()], dtype=object)
    op_c, op_v = columns.strings("hlo_op")
    name_c, name_v = columns.strings("name")
    op_known = lookup(op_c, columns.nonempty("hlo_op"), True)
    op_code = np.where(op_known, op_c, np.where(name_c >= 0, name_c + len(op_v), -1))[rows]
    launch = table["launch_ns"].to_numpy(np.int64)[rows] if "launch_ns" in table.columns else np.full(rows.size, -1)
    if "launch_thread" in table.columns:
        thread = categorical(table["launch_thread"].to_numpy(dtype=object)[rows], rows.size)
    else:
        thread = categorical("", rows.size)
    return pd.DataFrame(
        {
            "device": categorical_of(dev_c[rows], dev_v),
            "clock": categorical_of(dev_c[rows], clocks),
            "stream": strings("stream"),
            "name": strings("name"),
            "op": categorical_of(op_code, np.concatenate([op_v, name_v])),
            "bucket": strings("bucket"),
            "kind": strings("kind"),
            "copy_kind": strings("copy_kind"),
            "ib_fraction": columns.numbers("ib_fraction", np.float64)[rows],
            "start_ns": start,
            "end_ns": np.maximum(columns.numbers("end_ns")[rows], start),
            "launch_ns": launch,
            "launch_thread": thread,
            "scope": strings("scope") if "scope" in table.columns else categorical("", rows.size),
        }
    )


def _codes_of(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    codes, values = column_codes(column)
    return codes, values


@dataclass
class ReplayJob:
    """The whole job's activities as the replay sees them, and its graph (built once)."""

    table: pd.DataFrame  # REPLAY_COLUMNS, one row per activity
    graph: Graph
    delta: np.ndarray  # per row: the clock offset δ of its host (ŝ = start − δ)
    step: np.ndarray  # per row: its §5 step (-1: the whole trace when the job has no steps)
    step_numbers: np.ndarray  # the steps, sorted
    device_names: np.ndarray  # device code -> name
    bucket: np.ndarray  # int8 index into BUCKETS
    windows: pd.DataFrame  # device, start_ns, end_ns: the measured windows (own clock)
    records: pd.DataFrame | None = None  # the ledger's comm records (own clock), for the projected §8 figures
    record_rows: np.ndarray | None = None  # the replay row of each record
    whole_job: bool = False
    device_ids: Mapping[int, str] = field(default_factory=dict)
    hosts: Mapping[str, str] = field(default_factory=dict)  # device -> host
    _codes: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def size(self) -> int:
        return len(self.table)

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
    ) -> ReplayJob:
        """``table``: REPLAY_COLUMNS; ``instance``: complete §8 instance per row (-1 none); ``steps``:
        (step, device, start_ns, end_ns) on each device's own clock; ``windows``: measured windows."""
        table = table.reset_index(drop=True)
        dev_c, dev_v = _codes_of(table["device"])
        names = np.array([str(v) for v in dev_v.tolist()], dtype=object)
        clock_c, clock_v = _codes_of(table["clock"])
        delta_of = np.array([int(clock_offsets.get(str(c), 0)) for c in clock_v.tolist()] + [0], dtype=np.int64)
        delta = delta_of[clock_c]
        start = table["start_ns"].to_numpy(np.int64)
        end = np.maximum(table["end_ns"].to_numpy(np.int64), start)
        stream = combine_codes(dev_c, _codes_of(table["stream"])[0])
        launch_ns = table["launch_ns"].to_numpy(np.int64)
        th_c, th_v = _codes_of(table["launch_thread"])
        known_thread = np.array([bool(v) for v in th_v.tolist()] + [False], dtype=bool)[th_c]
        # thread ids are a file's own: a thread is (device, thread)
        pair = dev_c * (len(th_v) + 1) + (th_c + 1)
        pairs, thread = np.unique(np.where(known_thread, pair, -1), return_inverse=True)
        thread = np.where(known_thread, thread, -1)
        sync_arrays = None
        if syncs is not None and len(syncs):
            th_lut = {str(v): i for i, v in enumerate(th_v.tolist())}
            dev_lut = {str(v): i for i, v in enumerate(names.tolist())}
            s_dev = np.array([dev_lut.get(str(d), -1) for d in syncs["device"].tolist()], dtype=np.int64)
            s_th_c = np.array([th_lut.get(str(x), -1) for x in syncs["thread"].tolist()], dtype=np.int64)
            s_pair = s_dev * (len(th_v) + 1) + (s_th_c + 1)
            at = np.minimum(np.searchsorted(pairs, s_pair), max(pairs.size - 1, 0))
            s_th = np.where((pairs.size > 0) & (s_dev >= 0) & (s_th_c >= 0) & (pairs[at] == s_pair), at, -1)
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
        graph = build_graph(
            dev_c,
            stream,
            start - delta,
            end - delta,
            instance,
            np.where(has_launch, launch_ns - delta, -1),
            np.where(has_launch, thread, -1),
            sync_arrays,
        )
        step, numbers = _steps_of(dev_c, names, start, steps)
        record_rows = None
        if records is not None:
            record_rows = np.flatnonzero(bucket_codes(table["bucket"]) == BUCKETS.index("comm"))
        return cls(
            table=table,
            graph=graph,
            delta=delta,
            step=step,
            step_numbers=numbers,
            device_names=names,
            bucket=bucket_codes(table["bucket"]),
            windows=windows,
            records=records,
            record_rows=record_rows,
            whole_job=whole_job,
            device_ids=dict(device_ids or {}),
            hosts=dict(hosts or {}),
        )

    # ------------------------------------------------------------ running

    def run(
        self, duration: np.ndarray | None = None, transfer: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Projected (start, end) of every row, aligned (ŝ clock)."""
        return replay(self.graph, duration, transfer)

    def step_spans(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Per step (``step_numbers`` order): latest end − earliest start of its activities."""
        code = np.searchsorted(self.step_numbers, self.step)
        size = self.step_numbers.size
        lo = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)
        inside = self.step != _NO_STEP
        np.minimum.at(lo, code[inside], s[inside])
        np.maximum.at(hi, code[inside], e[inside])
        return np.where(hi >= lo, hi - lo, 0)

    @cached_property
    def step_rows(self) -> np.ndarray:
        """The rows of activities inside a step (every saving end to end is measured over them)."""
        return np.flatnonzero(self.step != _NO_STEP)

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
        start_by, start_how, end_by = tight_predecessor(g, g.start, g.end)
        x = int(inside[np.argmax(g.end[inside])])
        rows: list[int] = []
        while x >= 0 and len(rows) <= g.size:
            rows.append(x)
            arrived = int(end_by[x])
            if int(start_how[arrived]) == 0:
                break
            x = int(start_by[arrived])
        chain = np.array(rows, dtype=np.int64)
        weight = np.where(g.is_member[chain], g.transfer[chain], g.duration[chain])
        return chain, weight

    def projection(
        self,
        what_if: Sequence[str],
        s: np.ndarray,
        e: np.ndarray,
        figures: bool = True,
        throughput: Mapping[str, Any] | None = None,
    ) -> Projection:
        """The :class:`Projection` of a replayed timeline (``s``, ``e`` from :meth:`run`)."""
        g = self.graph
        measured = self.step_spans(g.start, g.end)
        projected = self.step_spans(s, e)
        steps = tuple(
            StepProjection(int(n), int(m), int(p)) for n, m, p in zip(self.step_numbers.tolist(), measured, projected)
        )
        m_mean = _mean(measured)
        p_mean = _mean(projected)
        path: tuple[PathSegment, ...] = ()
        by_cause: dict[str, int] = dict.fromkeys(CAUSES, 0)
        critical = None
        if steps:
            worst = int(np.argmax(projected))
            critical = int(self.step_numbers[worst])
            path = self.critical_path(s, e, critical)
            for seg in path:
                by_cause[seg.cause] += seg.end_ns - seg.start_ns
        devices = self.device_figures(s, e) if figures else ()
        return Projection(
            what_if=tuple(what_if),
            measured_step_ns=m_mean,
            projected_step_ns=p_mean,
            saving_ns=m_mean - p_mean,
            steps=steps,
            critical_path=path,
            critical_step=critical if critical != _NO_STEP else -1,
            path_by_cause=by_cause,
            devices=devices,
            throughput=projected_throughput(throughput, m_mean, p_mean),
        )

    # ------------------------------------------------------------ the critical path

    def critical_path(self, s: np.ndarray, e: np.ndarray, step: int) -> tuple[PathSegment, ...]:
        """The chain of tight edges from the step's last end back to a root (or to the step's start)."""
        return self._critical(s, e, step)[0]

    def critical_rows(self, s: np.ndarray, e: np.ndarray, step: int) -> np.ndarray:
        """The activities on the step's critical path (rows, in path order)."""
        return self._critical(s, e, step)[1]

    def _critical(self, s: np.ndarray, e: np.ndarray, step: int) -> tuple[tuple[PathSegment, ...], np.ndarray]:
        g = self.graph
        rows = np.flatnonzero(self.step == step)
        on_path: list[int] = []
        if not rows.size:
            return (), np.zeros(0, dtype=np.int64)
        step_start = int(s[rows].min())
        start_by, start_how, end_by = tight_predecessor(g, s, e)
        names_c, names_v = _codes_of(self.table["name"])
        kind_c, kind_v = _codes_of(self.table["kind"])
        dev = g.device
        out: list[PathSegment] = []

        def add(x: int, bucket: str, kind: str, cause: str, name: str, lo: int, hi: int) -> None:
            lo = max(lo, step_start)
            if hi > lo:
                out.append(PathSegment(str(self.device_names[dev[x]]), bucket, kind, cause, name, lo, hi))

        x = int(rows[np.argmax(e[rows])])
        seen = 0
        while x >= 0 and seen <= g.size:
            seen += 1
            b = int(self.bucket[x])
            bucket = BUCKETS[b] if b >= 0 else "other"
            kind = str(kind_v[kind_c[x]]) if kind_c[x] >= 0 else ""
            name = str(names_v[names_c[x]]) if names_c[x] >= 0 else ""
            arrived = int(end_by[x])
            on_path.append(x)
            cause = _BUCKET_CAUSE.get(bucket, "other")
            add(x, bucket, kind, cause, name, int(s[arrived]), int(e[x]))
            cur = arrived
            if s[cur] <= step_start:
                break
            how, pred = int(start_how[cur]), int(start_by[cur])
            if how == 0 or pred < 0:
                break
            if e[pred] < s[cur]:
                add(cur, "", "", "launch", "launch/host gap", int(e[pred]), int(s[cur]))
            if e[pred] <= step_start:
                break
            x = pred
        out.reverse()
        on_path.reverse()
        return tuple(out), np.array(on_path, dtype=np.int64)

    # ------------------------------------------------------------ §4/§8 figures of the projected timeline

    def device_figures(self, s: np.ndarray, e: np.ndarray) -> tuple[DeviceFigures, ...]:
        from .ledger import build_ledger
        from .metrics import DeviceTimeline

        own_s, own_e = s + self.delta, e + self.delta
        dev = self.graph.device
        order = np.argsort(dev, kind="stable")
        bounds = np.searchsorted(dev[order], np.arange(self.device_names.size + 1))
        w_dev = self.windows["device"].astype(str).to_numpy()
        w_s = self.windows["start_ns"].to_numpy(np.int64)
        w_e = self.windows["end_ns"].to_numpy(np.int64)
        m_start = self.table["start_ns"].to_numpy(np.int64)
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
            frame = pd.DataFrame(
                {
                    "start_ns": own_s[rows],
                    "end_ns": own_e[rows],
                    # codes, not strings: a string column of every row costs more than the figures
                    "bucket": pd.Categorical.from_codes(  # type: ignore[call-overload]
                        self.bucket[rows].astype(np.int64), list(BUCKETS)
                    ),
                    "ib_fraction": self.table["ib_fraction"].to_numpy(np.float64)[rows],
                }
            )
            measured = DeviceTimeline(frame).measure(win_s, win_e)
            figs = measured.figures
            proj_windows.append((name, win_s, win_e))
            exposed.append((name, *measured.exposed_segments))
            out.append(
                DeviceFigures(
                    device=name, host=self.hosts.get(name, name.split("/")[0]), **{k: getattr(figs, k) for k in NS_KEYS}
                )
            )
        if self.records is not None and self.record_rows is not None and len(self.records) == self.record_rows.size:
            recs = self.records.copy()
            recs["start_ns"] = own_s[self.record_rows]
            recs["end_ns"] = own_e[self.record_rows]
            ledger = build_ledger(
                recs, _segments(proj_windows), _segments(exposed), self.whole_job, dict(self.device_ids)
            )
            per = {d.device: d.figures() for d in ledger.devices}
            from dataclasses import replace

            out = [replace(d, ledger=per.get(d.device)) if d.device in per else d for d in out]
        return tuple(sorted(out, key=lambda d: d.device))


_NO_STEP = -(2**62)


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


def _steps_of(
    dev_c: np.ndarray, names: np.ndarray, start: np.ndarray, steps: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's §5 step (the step window of its device that holds its start; _NO_STEP: none) and the
    sorted step numbers; a job without steps is one step, -1."""
    n = start.size
    if steps is None or not len(steps):
        return np.full(n, -1, dtype=np.int64), np.array([-1], dtype=np.int64)
    step = np.full(n, _NO_STEP, dtype=np.int64)
    sd = steps["device"].astype(str).to_numpy()
    ss = steps["start_ns"].to_numpy(np.int64)
    se = steps["end_ns"].to_numpy(np.int64)
    sn = steps["step"].to_numpy(np.int64)
    for d, name in enumerate(names.tolist()):
        mine = np.flatnonzero(sd == name)
        if not mine.size:
            continue
        mine = mine[np.argsort(ss[mine], kind="stable")]
        rows = np.flatnonzero(dev_c == d)
        k = np.searchsorted(ss[mine], start[rows], side="right") - 1
        ok = k >= 0
        ok[ok] = start[rows[ok]] < se[mine[k[ok]]]
        step[rows[ok]] = sn[mine[k[ok]]]
    return step, np.unique(sn)


def projected_throughput(throughput: Mapping[str, Any] | None, measured: int, projected: int) -> dict | None:
    """tokens/s, TFLOPS per device and MFU at the projected step (they scale with 1 / step time)."""
    if not throughput or measured <= 0 or projected <= 0:
        return None
    factor = measured / projected
    out: dict[str, Any] = {}
    for key in ("tokens_per_second", "tflops_per_device", "mfu"):
        value = throughput.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = value * factor
    if "step_ns" in throughput:
        out["step_ns"] = round(float(throughput["step_ns"]) / factor)
    return out or None


def counterpart_durations(job: ReplayJob, selected: np.ndarray) -> np.ndarray:
    """§9 balance: each selected compute row's median counterpart duration (same name, same occurrence
    index among its device's rows of that name in the same step); even counts: the mean of the two
    middle values, half to even. Other rows keep their duration."""
    g = job.graph
    duration = g.duration.copy()
    compute = job.bucket == BUCKETS.index("compute")
    rows = np.flatnonzero(compute & (job.step != _NO_STEP))
    if not rows.size:
        return duration
    name_c = _codes_of(job.table["name"])[0][rows]
    dev = g.device[rows]
    stp = job.step[rows]
    order = np.lexsort((rows, g.start[rows], name_c, stp, dev))
    key = combine_codes(dev[order], stp[order], name_c[order])
    first = np.r_[True, key[1:] != key[:-1]]
    run_start = np.maximum.accumulate(np.where(first, np.arange(key.size), 0))
    occurrence = np.empty(rows.size, dtype=np.int64)
    occurrence[order] = np.arange(key.size) - run_start
    group = combine_codes(stp, name_c, occurrence)
    d = duration[rows]
    by = np.lexsort((d, group))
    gs, ds = group[by], d[by]
    lo = np.searchsorted(gs, gs, "left")
    hi = np.searchsorted(gs, gs, "right")
    count = hi - lo
    mid_lo = ds[lo + (count - 1) // 2]
    mid_hi = ds[lo + count // 2]
    total = mid_lo + mid_hi  # exact in int64; the mean rounded half to even
    med = total // 2 + ((total % 2 == 1) & ((total // 2) % 2 == 1))
    median = np.empty(rows.size, dtype=np.int64)
    median[by] = med
    chosen = selected[rows]
    duration[rows[chosen]] = median[chosen]
    return duration


__all__ = [
    "CAUSES",
    "NEG",
    "REPLAY_COLUMNS",
    "PathSegment",
    "Projection",
    "ReplayJob",
    "StepProjection",
    "counterpart_durations",
    "empty_replay_table",
    "empty_syncs",
]
