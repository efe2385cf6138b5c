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
from typing import Any, cast

import numpy as np
import pandas as pd

from . import intervals as iv
from .analysis import CAUSES, NS_KEYS, DeviceFigures, PathSegment, Projection, StepProjection
from .events import BUCKETS, bucket_codes, categorical, categorical_of, column_codes, combine_codes, lookup
from .ledger_records import clock_domain
from .metrics import EventColumns
from .replay import NEG, Graph, build_graph, latest_end_zeroed, replay, walk_back
from .steps import StepEdges, step_edges
from .trace import Trace
from .vocabulary import vocabulary

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
    "moe_role": "str",  # MOE_ROLES: the routed experts' compute, the dispatch/combine exchange, or ""
    # what the op is, for diff's explanation by scope and op (never by an HLO op name: it does not survive a
    # recompilation): XLA's hlo_category and the HLO opcode, "" unknown
    "category": "str",
    "opcode": "str",
}
# what a row is to the router (the balance-router term): the routed experts' compute, a dispatch/combine exchange
# whose bytes are fixed by shape (padded, capacity), one whose bytes follow the routing (ragged, EP kernels)
MOE_ROLES = ("expert", "exchange", "exchange-ragged")
SYNC_COLUMNS = ("device", "thread", "start_ns", "end_ns")  # host synchronizations (waited for the device)


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
        return _categorical(codes[rows], values)

    start = columns.numbers("start_ns")[rows]
    dev_c, dev_v = columns.strings("device")
    # each of positions is one device's rows: its code repeated (no hash of every row's code)
    lengths = np.array([len(p) for p in positions], dtype=np.int64)
    dev_rows = dev_c[rows]
    dev_first = dev_c[np.asarray([p[0] if len(p) else 0 for p in positions], dtype=np.int64)]
    one_device_each = bool(np.array_equal(dev_rows, np.repeat(dev_first, lengths)))

    def per_device(values: np.ndarray) -> pd.Categorical:
        if not one_device_each:
            return categorical_of(dev_rows, values)
        part = categorical_of(dev_first[lengths > 0], values)
        return pd.Categorical.from_codes(np.repeat(part.codes, lengths[lengths > 0]), dtype=part.dtype)

    clocks = np.array([clock_domain(trace, str(d)) for d in dev_v.tolist()], dtype=object)
    op_c, op_v = columns.strings("hlo_op")
    name_c, name_v = columns.strings("name")
    op_known = lookup(op_c, columns.nonempty("hlo_op"), True)
    op_code = np.where(op_known, op_c, np.where(name_c >= 0, name_c + len(op_v), -1))[rows]
    launch = table["launch_ns"].to_numpy(np.int64)[rows] if "launch_ns" in table.columns else np.full(rows.size, -1)
    if "launch_thread" in table.columns:
        thread = strings("launch_thread")
    else:
        thread = categorical("", rows.size)
    role_codes, roles = moe_roles(trace, columns)
    return pd.DataFrame(
        {
            "device": per_device(dev_v),
            "clock": per_device(clocks),
            "stream": strings("stream"),
            "name": strings("name"),
            "op": _categorical(op_code, np.concatenate([op_v, name_v])),
            "bucket": strings("bucket"),
            "kind": strings("kind"),
            "copy_kind": strings("copy_kind"),
            "ib_fraction": columns.numbers("ib_fraction", np.float64)[rows],
            "start_ns": start,
            "end_ns": np.maximum(columns.numbers("end_ns")[rows], start),
            "launch_ns": launch,
            "launch_thread": thread,
            "scope": strings("scope") if "scope" in table.columns else categorical("", rows.size),
            "moe_role": _categorical(role_codes[rows], roles),
            "category": strings("category") if "category" in table.columns else categorical("", rows.size),
            "opcode": strings("opcode") if "opcode" in table.columns else categorical("", rows.size),
        },
        copy=False,  # fresh arrays each: not stacked into blocks (a copy of the four int64 columns)
    )


def _categorical(codes: np.ndarray, values: np.ndarray) -> pd.Categorical:
    """The strings ``values[codes]`` (-1: missing) as a categorical of the distinct strings they hold, in the
    order of ``values``: a count over the codes, not a hash of every row (``categorical_of`` numbers them by
    first appearance instead; a few columns of a million rows cost more that way than the replay)."""
    values = np.asarray(values, dtype=object)
    codes = np.asarray(codes, dtype=np.int64)
    # a code of -1 reads the last slot (numpy's negative index): the missing one, no shifted copy of the codes
    seen = np.zeros(len(values) + 1, dtype=bool)
    seen[codes] = True
    used = np.flatnonzero(seen[:-1])
    merged, distinct = pd.factorize(values[used])  # distinct codes may spell one string
    width = np.int8 if len(distinct) < 127 else np.int16 if len(distinct) < 32_767 else np.int32  # pandas' own
    renumber = np.full(len(values) + 1, -1, dtype=width)
    renumber[used] = merged
    codes_out = cast("np.ndarray[Any, np.dtype[np.integer]]", renumber[codes])
    return pd.Categorical.from_codes(codes_out, categories=pd.Index(distinct, dtype=object), validate=False)


def moe_roles(trace: Trace, columns: EventColumns) -> tuple[np.ndarray, np.ndarray]:
    """Each row's role to the router (codes into ``("", *MOE_ROLES)``).

    * ``expert``: compute whose HLO op_name scope (XLA traces carry it in the HLO) names the routed experts
      (vocabulary ``expert_scope``), or whose kernel name does (megablox gmm, fused_moe, GroupedMLP), or a
      grouped GEMM kernel (``gemm`` and ``grouped_gemm``), or an HLO ``ragged-dot``;
    * ``exchange-ragged``: EP dispatch/combine kernels (DeepEP, NCCL EP) and the ragged all-to-all, whose bytes
      follow the routing;
    * ``exchange``: any other all-to-all, unless its HLO op_name is known and names no MoE scope (an
      embedding exchange): its bytes are fixed by its shape (padded, capacity-bound).

    Each test runs once per distinct string of its column (names, opcodes, kinds) or per distinct HLO op,
    then maps over the rows: no key over the six columns, no pass per distinct tuple."""
    n = len(columns)
    roles = np.array(("", *MOE_ROLES), dtype=object)
    if not n:
        return np.zeros(0, dtype=np.int64), roles
    vocab = vocabulary()

    def per_value(column: str, test: Callable[[str], bool]) -> np.ndarray:
        """Per row: ``test`` of its string ("" where missing), evaluated once per distinct string."""
        codes, values = columns.strings(column)
        flags = np.array([test(str(v)) for v in values.tolist()], dtype=bool)
        return lookup(codes, flags, test(""))

    bucket = per_value("bucket", "compute".__eq__), per_value("bucket", "comm".__eq__)
    compute, comm = bucket
    name_expert = per_value(
        "name",
        lambda s: bool(vocab.expert_scope.search(s) or (vocab.gemm.search(s) and vocab.grouped_gemm.search(s))),
    )
    scope_expert, scope_moe, scope_known = _scope_flags(trace, columns, vocab)
    expert = compute & (scope_expert | name_expert | per_value("opcode", "ragged-dot".__eq__))
    ragged = (
        per_value("kind", lambda s: s in ("ep-dispatch", "ep-combine"))
        | per_value("opcode", lambda s: s.startswith("ragged-all-to-all"))
        | per_value("name", lambda s: "RaggedAllToAll" in s)
    )
    exchange_ragged = comm & ragged
    exchange = comm & ~ragged & per_value("kind", "all-to-all".__eq__) & (~scope_known | scope_moe)
    role = np.zeros(n, dtype=np.int64)
    role[expert] = 1 + MOE_ROLES.index("expert")
    role[exchange] = 1 + MOE_ROLES.index("exchange")
    role[exchange_ragged] = 1 + MOE_ROLES.index("exchange-ragged")
    return role, roles


def _scope_flags(trace: Trace, columns: EventColumns, vocab: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, from the HLO op_name of its (HLO module, HLO op): whether it names the routed experts, whether
    it names an MoE scope, whether it is known (not "")."""
    n = len(columns)
    op_names: dict[tuple[str, str], str] = {}
    for (module, _), hlo in trace.hlo.items():
        for op, inst in hlo.instructions.items():
            op_names.setdefault((module, op), inst.op_name)
    if not any(op_names.values()):  # every scope ""
        return (
            np.full(n, bool(vocab.expert_scope.search("")), dtype=bool),
            np.full(n, bool(vocab.moe_scope.search("")), dtype=bool),
            np.zeros(n, dtype=bool),
        )
    mod_c, mod_v = columns.strings("hlo_module")
    op_c, op_v = columns.strings("hlo_op")
    # the distinct (module, op) pairs the rows hold, each looked up once
    pair = (mod_c + 1) * (len(op_v) + 1) + (op_c + 1)
    row_pair, pairs = pd.factorize(pair)
    mod_of, op_of = pairs // (len(op_v) + 1) - 1, pairs % (len(op_v) + 1) - 1
    mods = np.array([*(str(v) for v in mod_v.tolist()), ""], dtype=object)
    ops = np.array([*(str(v) for v in op_v.tolist()), ""], dtype=object)
    scopes = [op_names.get((m, o), "") for m, o in zip(mods[mod_of].tolist(), ops[op_of].tolist())]
    expert = np.array([bool(vocab.expert_scope.search(s)) for s in scopes], dtype=bool)
    moe = np.array([bool(vocab.moe_scope.search(s)) for s in scopes], dtype=bool)
    known = np.array([s != "" for s in scopes], dtype=bool)
    return expert[row_pair], moe[row_pair], known[row_pair]


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
    # each device's §5 step windows, their edges tied to the activities that bound them (the idle a device-side
    # marker holds at its edges, a TPU's Steps line, kept as measured): a replayed timeline's steps
    step_edges: StepEdges
    device_names: np.ndarray  # device code -> name
    bucket: np.ndarray  # int8 index into BUCKETS
    windows: pd.DataFrame  # device, start_ns, end_ns: the measured windows (own clock)
    records: pd.DataFrame | None = None  # the ledger's comm records (own clock), for the projected §8 figures
    record_rows: np.ndarray | None = None  # the replay row of each record
    whole_job: bool = False
    device_ids: Mapping[int, str] = field(default_factory=dict)
    hosts: Mapping[str, str] = field(default_factory=dict)  # device -> host
    kinds: Mapping[str, str] = field(default_factory=dict)  # device -> GPU | TPU | CPU (its reader's record)
    _codes: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)
    _step_rows: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

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
        kinds: Mapping[str, str] | None = None,
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
        windows_of_steps = _aligned_windows(steps, names, dev_c, delta)
        edges = step_edges(dev_c, step, start - delta, end - delta, numbers, windows_of_steps)
        record_rows = None
        if records is not None:
            record_rows = np.flatnonzero(bucket_codes(table["bucket"]) == BUCKETS.index("comm"))
        return cls(
            table=table,
            graph=graph,
            delta=delta,
            step=step,
            step_numbers=numbers,
            step_edges=edges,
            device_names=names,
            bucket=bucket_codes(table["bucket"]),
            windows=windows,
            records=records,
            record_rows=record_rows,
            whole_job=whole_job,
            device_ids=dict(device_ids or {}),
            hosts=dict(hosts or {}),
            kinds=dict(kinds or {}),
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
        return np.where(windowed, spans, _activity_spans(self.step, self.step_numbers, s, e))

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
    def measured_spans(self) -> np.ndarray:
        """:meth:`step_spans` of the measured timeline (every projection compares with it)."""
        return self.step_spans(self.graph.start, self.graph.end)

    def rows_of_step(self, step: int) -> np.ndarray:
        """The rows of one step (kept: every projection's critical path lies in its worst step, mostly one)."""
        if step not in self._step_rows:
            self._step_rows[step] = np.flatnonzero(self.step == step)
        return self._step_rows[step]

    @cached_property
    def counterpart_medians(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row, its duration balanced (§9 ``balance``: in-step compute rows get their median counterpart
        duration), and which rows have counterparts; computed once (:func:`counterpart_durations`)."""
        return _counterpart_medians(self)

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
        throughput: Mapping[str, Any] | None = None,
    ) -> Projection:
        """The :class:`Projection` of a replayed timeline (``s``, ``e`` from :meth:`run`)."""
        measured = self.measured_spans
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

    def critical_time(self, s: np.ndarray, e: np.ndarray, step: int) -> dict[str, dict[str, int]]:
        """The time of the step's critical path per cause, per device (what :meth:`critical_path`'s segments
        sum to), without the segments."""
        return cast("dict[str, dict[str, int]]", self._critical(s, e, step, segments=False)[0])

    def _critical(self, s: np.ndarray, e: np.ndarray, step: int, segments: bool = True) -> tuple[Any, np.ndarray]:
        g = self.graph
        rows = self.rows_of_step(step)
        if not rows.size:
            return () if segments else {}, np.zeros(0, dtype=np.int64)
        step_start = int(s[rows].min())
        x = int(rows[np.argmax(e[rows])])
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
        bucket = np.array(bucket_names, dtype=object)[bucket_of]
        cause = np.array([_BUCKET_CAUSE.get(x, "other") for x in bucket_names], dtype=object)[bucket_of]

        if not segments:
            return _time_on_path(
                np.r_[cause, np.full(visited.size, "launch", dtype=object)],
                np.r_[g.device[visited], g.device[arrived]],
                np.r_[work_hi - work_lo, np.where(gap_ok, arrival - gap_lo, 0)],
                self.device_names,
            ), visited

        def text(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
            """Each row's string ("" where missing), ``str`` taken once per distinct value."""
            return lookup(codes, np.array([str(v) for v in np.asarray(values).tolist()], dtype=object), "")

        # slot 2i: step i's work, slot 2i + 1: the gap before its arrival; the path runs from the last slot back
        keep = np.empty(2 * visited.size, dtype=bool)
        keep[0::2] = work_hi > work_lo
        keep[1::2] = gap_ok & (arrival > gap_lo)

        def column(work: np.ndarray, gap: Any) -> list[Any]:
            both = np.empty(2 * visited.size, dtype=work.dtype)
            both[0::2], both[1::2] = work, gap
            return both[keep][::-1].tolist()

        devices = np.array([str(d) for d in self.device_names.tolist()], dtype=object)
        segments_of = zip(
            column(devices[g.device[visited]], devices[g.device[arrived]]),
            column(bucket, ""),
            column(text(kind_c[visited], kind_v), ""),
            column(cause, "launch"),
            column(text(names_c[visited], names_v), "launch/host gap"),
            column(work_lo, gap_lo),
            column(work_hi, arrival),
        )
        return tuple(map(PathSegment._make, segments_of)), visited[::-1].copy()

    # ------------------------------------------------------------ §4/§8 figures of the projected timeline

    def device_figures(self, s: np.ndarray, e: np.ndarray) -> tuple[DeviceFigures, ...]:
        from .ledger import build_ledger
        from .metrics import DeviceTimeline, EventColumns

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
            measured = DeviceTimeline(frame, rows, columns).measure(win_s, win_e)
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
            recs = self.records.copy()
            recs["start_ns"] = own_s[self.record_rows]
            recs["end_ns"] = own_e[self.record_rows]
            ledger = build_ledger(
                recs, _segments(proj_windows), _segments(exposed), self.whole_job, dict(self.device_ids)
            )
            per = {d.device: d.figures() for d in ledger.devices}
            out = [replace(d, ledger=per.get(d.device)) if d.device in per else d for d in out]
        return tuple(sorted(out, key=lambda d: d.device))


_NO_STEP = -(2**62)


def _time_on_path(
    cause: np.ndarray, device: np.ndarray, ns: np.ndarray, device_names: np.ndarray
) -> dict[str, dict[str, int]]:
    """Per cause, per device: the summed ``ns`` of the path's pieces that last (``ns`` > 0)."""
    keep = ns > 0
    causes, cause_of = np.unique(cause[keep].astype(str), return_inverse=True)
    n_dev = int(device_names.size)
    total = np.zeros(causes.size * n_dev, dtype=np.int64)
    np.add.at(total, cause_of.reshape(-1) * n_dev + device[keep], ns[keep])
    out: dict[str, dict[str, int]] = {}
    for i, c in enumerate(causes.tolist()):
        per = total[i * n_dev : (i + 1) * n_dev]
        out[str(c)] = {str(device_names[d]): int(per[d]) for d in np.flatnonzero(per).tolist()}
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


def _activity_spans(step: np.ndarray, numbers: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per step (``numbers`` order): latest end − earliest start of its activities (0 without any)."""
    code = np.searchsorted(numbers, step)
    lo = np.full(numbers.size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(numbers.size, np.iinfo(np.int64).min, dtype=np.int64)
    inside = step != _NO_STEP
    np.minimum.at(lo, code[inside], s[inside])
    np.maximum.at(hi, code[inside], e[inside])
    return np.where(hi >= lo, hi - lo, 0)


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
    # each device's rows: a slice where they come by device (a merged job's do), else a stable sort
    by_device = np.arange(n) if n < 2 or bool(np.all(dev_c[1:] >= dev_c[:-1])) else np.argsort(dev_c, kind="stable")
    bounds = np.searchsorted(dev_c[by_device], np.arange(len(names) + 1))
    for d, name in enumerate(names.tolist()):
        mine = np.flatnonzero(sd == name)
        if not mine.size:
            continue
        mine = mine[np.argsort(ss[mine], kind="stable")]
        rows = by_device[bounds[d] : bounds[d + 1]]
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
    balanced, has_counterparts = job.counterpart_medians
    return np.where(selected & has_counterparts, balanced, job.graph.duration)


def _counterpart_medians(job: ReplayJob) -> tuple[np.ndarray, np.ndarray]:
    """Every row's duration with each in-step compute row's median counterpart duration in its place, and
    which rows those are (one computation per job: the balance projection and each straggler's share it)."""
    g = job.graph
    duration = g.duration.copy()
    compute = job.bucket == BUCKETS.index("compute")
    has_counterparts = compute & (job.step != _NO_STEP)
    rows = np.flatnonzero(has_counterparts)
    if not rows.size:
        return duration, has_counterparts
    name_c = job.codes("name")[0][rows]
    dev = g.device[rows]
    stp = job.step[rows]
    start = g.start[rows]
    n_dev = int(dev.max()) + 1
    # (step, name) as one code: packed where the range is small (no hash), else numbered densely
    names = int(name_c.max()) + 2
    kernels = (int(stp.max()) - int(stp.min()) + 1) * names
    if kernels * n_dev <= 4 * rows.size + 1024:
        kernel = (stp - stp.min()) * names + (name_c + 1)
    else:
        kernel = combine_codes(stp, name_c)
        kernels = int(kernel.max()) + 1
    cell = kernel * n_dev + dev  # (step, name, device)
    if rows.size < 2 or bool(np.all((dev[1:] > dev[:-1]) | ((dev[1:] == dev[:-1]) & (start[1:] >= start[:-1])))):
        # the rows come by (device, start, row) already (a merged job's do): a stable sort by kernel keeps that,
        # each (kernel, device) together
        order = _stable_order(kernel)
    else:
        order = np.lexsort((rows, start, name_c, stp, dev))
    key = cell[order]
    first = np.r_[True, key[1:] != key[:-1]]
    run_start = np.maximum.accumulate(np.where(first, np.arange(key.size), 0))
    occurrence = np.empty(rows.size, dtype=np.int64)
    occurrence[order] = np.arange(key.size) - run_start
    # (step, name, occurrence) numbered densely: each kernel's occurrences follow the kernels before it, as
    # many as its device with the most of them has
    width = np.bincount(cell, minlength=kernels * n_dev).reshape(kernels, n_dev).max(axis=1)
    del cell, key, first, run_start, order, start, stp, name_c  # the peak of the projection: keep it low
    group = (np.cumsum(width) - width)[kernel] + occurrence
    del kernel, occurrence
    duration[rows] = _group_medians(group, dev, duration[rows])
    return duration, has_counterparts


def _stable_order(codes: np.ndarray) -> np.ndarray:
    """``np.argsort(codes, kind="stable")`` for codes >= 0, by 16-bit radix passes where they fit."""
    top = int(codes.max()) if codes.size else 0
    if top < 1 << 16:
        return np.argsort(codes.astype(np.uint16), kind="stable")
    if top < 1 << 32:
        low = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
        return low[np.argsort((codes[low] >> 16).astype(np.uint16), kind="stable")]
    return np.argsort(codes, kind="stable")


def _group_medians(group: np.ndarray, device: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per row, the median ``d`` of its group (codes 0..G-1, at most one row per (group, device)): the mean of
    the two middle values for even counts, half to even."""
    n_groups = int(group.max()) + 1
    n_dev = int(device.max()) + 1
    count = np.bincount(group, minlength=n_groups)
    if n_groups * n_dev <= 4 * group.size + 1024:
        # a row of the devices' values per group, sorted: no sort of the rows themselves
        table = np.full((n_groups, n_dev), np.iinfo(np.int64).max, dtype=np.int64)
        table.reshape(-1)[group * n_dev + device] = d
        table.sort(axis=1)
        at = np.arange(n_groups)
        held = count > 0  # a code no row has (numbers may skip): 0, never read
        mid_lo = np.where(held, table[at, np.maximum((count - 1) // 2, 0)], 0)
        mid_hi = np.where(held, table[at, np.minimum(count // 2, n_dev - 1)], 0)
    else:
        by = np.lexsort((d, group))
        lo = np.r_[0, np.cumsum(count)[:-1]]
        ds = d[by]
        last = max(ds.size - 1, 0)
        mid_lo = ds[np.clip(lo + (count - 1) // 2, 0, last)]
        mid_hi = ds[np.clip(lo + count // 2, 0, last)]
    total = mid_lo + mid_hi  # exact in int64; the mean rounded half to even
    med = total // 2 + ((total % 2 == 1) & ((total // 2) % 2 == 1))
    return med[group]


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


@dataclass(frozen=True)
class RouterBalance:
    """What the balance-router change found and did (the projection's line says it)."""

    expert_rows: int  # the routed experts' activities found
    exchange_rows: int  # the dispatch/combine activities found
    ragged_rows: int  # of those, the ones whose bytes follow the routing (their transfer changed)
    regions: int  # (step, region between exchanges, EP group) cells whose expert work was spread evenly
    moved_ns: int  # expert work taken from the devices above their group's mean, summed over cells
    unplaced_ns: int  # work due to a device with no activity to carry it in its region (left out)


def _role_mask(job: ReplayJob, role: str) -> np.ndarray:
    """The rows of one MOE_ROLES role (none where the table has no role column)."""
    if "moe_role" not in job.table.columns:
        return np.zeros(job.size, dtype=bool)
    codes, values = job.codes("moe_role")
    return lookup(codes, np.array([str(v) == role for v in values.tolist()], dtype=bool), False)


def router_balanced(
    job: ReplayJob, duration: np.ndarray, transfer: np.ndarray, gap: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, RouterBalance]:
    """The ``balance-router`` change: what a balanced router does to the job, work conserved.

    A router moves tokens, so it moves expert work: in each *cell* (a §5 step, the region between two of a
    device's dispatch/combine exchanges counted in start order, and the devices of one EP group: the members
    of its exchange instances), every device of the group gets the group's mean expert work. A device's expert
    work in a cell is its expert activities' durations plus the gaps between two of them (a token-driven loop
    runs, and launches, more iterations with more tokens); each is scaled by (the mean / the device's work).
    A device with no expert activity in a cell where the mean is not 0 gets its share on its last compute
    activity of that cell (else it is left out: ``unplaced_ns``). Exchanges whose bytes follow the routing
    (``exchange-ragged``) move bytes with the tokens: a device's sends are conserved (its tokens, top-k copies
    each) and its receives follow its expert work in the region the exchange feeds (after it) or drains
    (before it), whichever holds more; the busiest member (the most expert work, ``W_max``) sets when the
    exchange ends, so every member's transfer ``τ`` (a non-member's duration) scales by
    ``(W̄ + W̄) / (W̄ + W_max) = 2 / (1 + W_max / W̄)``. Fixed-shape exchanges (padded, capacity) keep theirs.
    Durations are rounded half to even."""
    g = job.graph
    duration, transfer, gap = duration.copy(), transfer.copy(), gap.copy()
    n = job.size
    inside = job.step != _NO_STEP
    compute = job.bucket == BUCKETS.index("compute")
    member = g.is_member
    expert = _role_mask(job, "expert") & compute & inside & ~member
    ragged = _role_mask(job, "exchange-ragged")
    exchange = (_role_mask(job, "exchange") | ragged) & (job.bucket == BUCKETS.index("comm")) & inside
    if not expert.any():
        return duration, transfer, gap, RouterBalance(0, int(exchange.sum()), int((ragged & exchange).sum()), 0, 0, 0)
    dev = g.device
    # the region of each row: the exchanges of its (device, step) that start at or before it (an exchange opens
    # the region after it), in the device's (start, end, row) order
    order = np.lexsort((np.arange(n), g.end, g.start, job.step, dev))
    ex_sorted = exchange[order].astype(np.int64)
    cell = combine_codes(dev[order], job.step[order])
    first = np.r_[True, cell[1:] != cell[:-1]] if n else np.zeros(0, dtype=bool)
    run = np.cumsum(ex_sorted)
    base = np.maximum.accumulate(np.where(first, run - ex_sorted, 0))
    region = np.empty(n, dtype=np.int64)
    region[order] = run - base
    # EP groups: a device belongs to the group of the first device among the members of its exchange instances
    n_dev = int(job.device_names.size)
    group_of = np.full(n_dev, -1, dtype=np.int64)
    ex_members = np.flatnonzero(exchange & member)
    if ex_members.size:
        inst = g.instance[ex_members]
        inst_u, inst_i = np.unique(inst, return_inverse=True)
        lowest = np.full(inst_u.size, n_dev, dtype=np.int64)
        np.minimum.at(lowest, inst_i, dev[ex_members])
        lead = np.full(n_dev, n_dev, dtype=np.int64)
        np.minimum.at(lead, dev[ex_members], lowest[inst_i])
        group_of = np.where(lead < n_dev, lead, -1)
    groups, group_size = np.unique(group_of, return_counts=True)
    size_of = dict(zip(groups.tolist(), group_size.tolist()))
    group = group_of[dev]
    # expert work per (cell, device): durations, plus the gaps between two expert activities of one region
    rows = np.flatnonzero(expert)
    trig = g.trigger[rows]
    internal = trig >= 0
    internal[internal] = expert[trig[internal]] & (region[trig[internal]] == region[rows[internal]])
    work = duration[rows] + np.where(internal, gap[rows], 0)
    key = combine_codes(job.step[rows], region[rows], group[rows])
    cells, cell_of = np.unique(key, return_inverse=True)
    k = cells.size
    total = np.bincount(cell_of, weights=work.astype(np.float64), minlength=k)
    per = np.zeros((k, n_dev), dtype=np.float64)
    np.add.at(per, (cell_of, dev[rows]), work.astype(np.float64))
    members_of = np.zeros(k, dtype=np.int64)
    members_of[cell_of] = group[rows]
    members = np.array([size_of[int(c)] for c in members_of.tolist()], dtype=np.float64)
    mean = total / members
    factor = np.where(per > 0, mean[:, None] / np.where(per > 0, per, 1.0), 1.0)
    f = factor[cell_of, dev[rows]]
    duration[rows] = np.rint(duration[rows] * f).astype(np.int64)
    scaled_gap = rows[internal]
    gap[scaled_gap] = np.rint(gap[scaled_gap] * f[internal]).astype(np.int64)
    moved = float(np.clip(per - mean[:, None], 0, None).sum())

    def cell_index(step: np.ndarray, reg: np.ndarray, grp: np.ndarray) -> np.ndarray:
        """The cell of each (step, region, group), -1 where no expert activity made one (one numbering)."""
        keys = combine_codes(np.r_[job.step[rows], step], np.r_[region[rows], reg], np.r_[group[rows], grp])
        lut = np.full(int(keys.max()) + 1, -1, dtype=np.int64)
        lut[keys[: rows.size]] = cell_of
        return lut[keys[rows.size :]]

    # devices of a cell's group with no expert activity in it: their share on their last compute of the region
    unplaced = 0.0
    cell_group = np.zeros(k, dtype=np.int64)
    cell_group[cell_of] = group[rows]
    empty_c, empty_d = np.nonzero((group_of[None, :] == cell_group[:, None]) & (per == 0) & (mean[:, None] > 0))
    if empty_c.size:
        carriers = np.flatnonzero(compute & inside & ~member)
        carriers = carriers[cell_index(job.step[carriers], region[carriers], group[carriers]) >= 0]
        c_cell = cell_index(job.step[carriers], region[carriers], group[carriers])
        slot = c_cell * n_dev + dev[carriers]
        by = np.lexsort((g.start[carriers], slot))  # per (cell, device), the latest start last
        last_of = np.full(k * n_dev, -1, dtype=np.int64)
        is_last = np.r_[slot[by][1:] != slot[by][:-1], True] if by.size else np.zeros(0, dtype=bool)
        last_of[slot[by][is_last]] = carriers[by][is_last]
        carrier = last_of[empty_c * n_dev + empty_d]
        placed = carrier >= 0
        np.add.at(duration, carrier[placed], np.rint(mean[empty_c[placed]]).astype(np.int64))
        unplaced = float(mean[empty_c[~placed]].sum())
    # exchanges whose bytes follow the routing: each device's transfer follows its tokens
    ragged_rows = np.flatnonzero(ragged & exchange)
    if ragged_rows.size:
        at = (job.step[ragged_rows], group[ragged_rows])
        feed = cell_index(at[0], region[ragged_rows], at[1])  # the region after it: the tokens it dispatches
        drain = cell_index(at[0], region[ragged_rows] - 1, at[1])  # the one before it: the results it combines
        w_feed = np.where(feed >= 0, total[np.maximum(feed, 0)], -1.0)
        w_drain = np.where(drain >= 0, total[np.maximum(drain, 0)], -1.0)
        chosen = np.where(w_feed >= w_drain, feed, drain)
        ok = chosen >= 0
        # the busiest member's bytes set the exchange's end: max over the group's devices of the cell
        busiest = per.max(axis=1) / np.where(mean > 0, mean, 1.0)
        scale = np.where(ok, 2.0 / (1.0 + busiest[np.maximum(chosen, 0)]), 1.0)
        is_m = member[ragged_rows]
        transfer[ragged_rows[is_m]] = np.rint(transfer[ragged_rows[is_m]] * scale[is_m]).astype(np.int64)
        duration[ragged_rows[~is_m]] = np.rint(duration[ragged_rows[~is_m]] * scale[~is_m]).astype(np.int64)
    return (
        duration,
        transfer,
        gap,
        RouterBalance(
            int(rows.size), int(exchange.sum()), int(ragged_rows.size), int(k), int(round(moved)), int(round(unplaced))
        ),
    )
