"""Spec §9: the dependency graph of a job's device activities, and its replay (a longest path).

Pure functions over columns (one row per device activity of the whole job, aligned
times ``ŝ``, ``ê``): :func:`build_graph` infers the edges once, :func:`replay` runs
the graph with changed durations (transfers, for instance members) and returns
every activity's projected start and end. Unchanged, the replay gives back every
measured start and end exactly (the graph keeps every gap it saw).

Edges of an activity ``x`` (every one points forward in measured time):

* ``p(x)``, the previous activity on its stream (start order), when it ends by ``ŝ_x``;
* ``t(x)``, the activity of its device, any stream, with the latest end ``≤ ŝ_x``
  (ties: ``p(x)``, then the later start, then the later row), among the activities
  before ``x`` in the device's (start, end, row) order, with its gap ``g_x = ŝ_x − ê_t``;
  without one, ``x`` is a **root** and keeps its start;
* launch-bound kernels (the launching call came after the trigger ended): a host
  that waited for the device before the launch (a synchronization that ended after
  the device work ``w`` it waited for ended) moves with ``w``: ``S'_x ≥ E'_w + (ŝ_x − ê_w)``;
  without such a synchronization the host is not replayed: ``S'_x ≥ ŝ_x``;
* members of a complete §8 instance end at ``max(S'_m over the members m that arrived
  by ê_x) + τ'_x``, ``τ_x = ê_x − a_x`` with ``a_x`` that latest arrival.

**Runs.** The graph the replay runs holds one node per *run*: activities that follow each
other on one stream where each one's only edge is its stream predecessor (which is also its
trigger; no launch bound, no floor, no instance) and that predecessor's end feeds nothing
else. Inside a run every start is the previous end plus its gap, so the run replays as one
node whose length is its measured span plus the changes of its activities' durations (and
inner gaps); each activity's projected times follow from the node's start by a prefix sum
(:meth:`Graph.expand`). The longest paths are those of the graph with a node per activity,
exactly (``build_graph(..., compact=False)`` builds that one; the tests replay both). A job
of one stream per device (every kernel back to back) is one node per device.

The replay is a Gauss-Seidel sweep over the nodes' start and end events in measured-time
order (ties: the node's (start, end, first row) order, start before end), repeated until
nothing moves: one sweep settles every edge that points forward in that order, a second
confirms it (edges between events at the same instant may point back; each extra sweep
settles one more of those). The sweep runs in C (``_replay_native.c``, with the edges' and
the runs' loops) where it was built, else compiled with numba where installed (from
``COMPILED_FROM`` nodes), else as one shortest-path search on reduced costs
(:func:`_sweep_shortest`, scipy's Dijkstra) from ``SHORTEST_FROM`` nodes, and below that, or
where the search cannot be made exact, a relaxation of every edge at once until nothing moves
(the same fixed point, one pass per edge of the longest chain).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

NEG = np.iinfo(np.int64).min // 4  # "no value yet": far below any time, never overflows when a gap is added


@dataclass(frozen=True)
class Nodes:
    """The graph the sweep runs (arrays over nodes: a run of activities each, see the module's docstring)."""

    start: np.ndarray  # measured start of the node's first activity
    end: np.ndarray  # measured end of its last (>= start)
    stream_pred: np.ndarray  # p(x), -1 none
    trigger: np.ndarray  # t(x), -1: a root
    gap: np.ndarray  # g_x = ŝ_x − ê_t(x) (0 for roots)
    launch_pred: np.ndarray  # w: the device work the launching host waited for, -1 none
    launch_gap: np.ndarray  # ŝ_x − ê_w
    floor: np.ndarray  # lowest projected start (NEG: none): a root's or a host-bound kernel's measured start
    instance: np.ndarray  # complete §8 instance id, -1 none (an instance member is a node of its own)
    member_order: np.ndarray  # members sorted by (instance, ŝ, row)
    member_lo: np.ndarray  # per member node: where its instance begins in member_order (-1 for non-members)
    member_k: np.ndarray  # per member node: members of its instance that arrived by its end
    transfer: np.ndarray  # τ_x = ê_x − a_x for members (0 otherwise)
    order: np.ndarray  # the events in sweep order: 2x (start) and 2x+1 (end)

    @property
    def size(self) -> int:
        return int(self.start.size)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    @property
    def is_member(self) -> np.ndarray:
        return self.member_lo >= 0


@dataclass(frozen=True, eq=False)
class Graph:
    """The inferred dependency graph of one job: per activity (the input's order) its measured times and
    device, and the :class:`Nodes` the sweep runs with the runs they stand for. The edges of every activity
    (``stream_pred``, ``trigger``, ``gap``, ... as the module's docstring defines them) are read back from
    the nodes on demand."""

    start: np.ndarray  # aligned measured start ŝ
    end: np.ndarray  # aligned measured end ê (>= start)
    device: np.ndarray  # device code
    nodes: Nodes
    node_of: np.ndarray  # per activity: its node
    node_lo: np.ndarray  # per node, and one past the last: where its run begins in the run order
    run_order: np.ndarray | None  # the activities, every node's run contiguous in node order (None: the rows')

    @property
    def size(self) -> int:
        return int(self.start.size)

    @cached_property
    def duration(self) -> np.ndarray:
        """Every activity's measured duration (made once: every replay reads it; read-only)."""
        out = self.end - self.start
        out.setflags(write=False)
        return out

    # ------------------------------------------------------------ the runs

    @cached_property
    def _run_rows(self) -> np.ndarray:
        return np.arange(self.size, dtype=np.int64) if self.run_order is None else self.run_order

    @cached_property
    def first(self) -> np.ndarray:
        """Per node: its first activity."""
        return self._run_rows[self.node_lo[:-1]]

    @cached_property
    def last(self) -> np.ndarray:
        """Per node: its last activity (the one whose end is the node's)."""
        return self._run_rows[self.node_lo[1:] - 1]

    @cached_property
    def position(self) -> np.ndarray:
        """Per activity: its place in the run order."""
        if self.run_order is None:
            return np.arange(self.size, dtype=np.int64)
        out = np.empty(self.size, dtype=np.int64)
        out[self.run_order] = np.arange(self.size, dtype=np.int64)
        return out

    @cached_property
    def run_prev(self) -> np.ndarray:
        """Per activity: the one before it in its run (its stream predecessor and trigger), -1 for a node's first."""
        rows = self._run_rows
        prev = np.empty(self.size, dtype=np.int64)
        if self.size:
            prev[0] = -1
            prev[1:] = rows[:-1]
            prev[self.node_lo[:-1]] = -1
        out = np.empty(self.size, dtype=np.int64)
        out[rows] = prev
        return out

    def _heads(self, per_node: np.ndarray, inner: Any) -> np.ndarray:
        """A per-activity array: the node's value on its first activity, ``inner`` on the others."""
        out = np.full(self.size, inner, dtype=per_node.dtype)
        out[self.first] = per_node
        return out

    def _head_pred(self, pred: np.ndarray) -> np.ndarray:
        """A node's predecessor node as the activity whose end is that node's (its last), -1 none."""
        return np.where(pred >= 0, self.last[np.maximum(pred, 0)], -1)

    # ------------------------------------------------------------ every activity's edges, read back

    def _run_edge(self, node_pred: np.ndarray) -> np.ndarray:
        """A per-activity edge that a run's activities chain (stream predecessor, trigger): a node's first activity
        takes the node's edge, every other one the activity before it in its run."""
        out = self._heads(self._head_pred(node_pred), -1)
        inner = self.run_prev >= 0
        out[inner] = self.run_prev[inner]
        return out

    @cached_property
    def stream_pred(self) -> np.ndarray:
        return self._run_edge(self.nodes.stream_pred)

    @cached_property
    def trigger(self) -> np.ndarray:
        return self._run_edge(self.nodes.trigger)

    @cached_property
    def gap(self) -> np.ndarray:
        out = self._heads(self.nodes.gap, 0)
        inner = np.flatnonzero(self.run_prev >= 0)
        out[inner] = self.start[inner] - self.end[self.run_prev[inner]]
        return out

    @cached_property
    def launch_pred(self) -> np.ndarray:
        return self._heads(self._head_pred(self.nodes.launch_pred), -1)

    @cached_property
    def launch_gap(self) -> np.ndarray:
        return self._heads(self.nodes.launch_gap, 0)

    @cached_property
    def floor(self) -> np.ndarray:
        return self._heads(self.nodes.floor, NEG)

    @cached_property
    def instance(self) -> np.ndarray:
        return self._heads(self.nodes.instance, -1)

    @cached_property
    def member_order(self) -> np.ndarray:
        return self.first[self.nodes.member_order]

    @cached_property
    def member_lo(self) -> np.ndarray:
        return self._heads(self.nodes.member_lo, -1)

    @cached_property
    def member_k(self) -> np.ndarray:
        return self._heads(self.nodes.member_k, 0)

    @cached_property
    def transfer(self) -> np.ndarray:
        return self._heads(self.nodes.transfer, 0)

    @cached_property
    def is_member(self) -> np.ndarray:
        return self._heads(self.nodes.member_lo >= 0, False)

    @cached_property
    def order(self) -> np.ndarray:
        """The activities' events in the order a graph of one node per activity sweeps them."""
        return _event_order(self.start, self.end, np.arange(self.size, dtype=np.int64))

    # ------------------------------------------------------------ changes, on the nodes and back

    def compact(
        self, duration: np.ndarray | None, transfer: np.ndarray | None, gap: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Per-activity changes as the nodes' (duration, transfer, trigger gap), and each activity's change of
        its place in its run (``delta``: its duration's change plus its inner gap's; None: nothing moved
        inside a run). A gap inside a run is at least 0: the stream edge holds it there."""
        nd = self.nodes
        node_duration = nd.duration
        delta: np.ndarray | None = None
        if duration is not None:
            delta = np.asarray(duration, dtype=np.int64) - self.duration
        node_gap = nd.gap
        if gap is not None:
            gap = np.asarray(gap, dtype=np.int64)
            node_gap = gap[self.first]
            inner = np.flatnonzero(self.run_prev >= 0)
            if inner.size:
                moved = np.zeros(self.size, dtype=np.int64)
                moved[inner] = np.maximum(gap[inner], 0) - (self.start[inner] - self.end[self.run_prev[inner]])
                delta = moved if delta is None else delta + moved
        if delta is not None:
            if delta.any():
                ordered = delta if self.run_order is None else delta[self.run_order]
                node_duration = node_duration + np.add.reduceat(ordered, self.node_lo[:-1])
            else:
                delta = None
        node_transfer = nd.transfer if transfer is None else np.asarray(transfer, dtype=np.int64)[self.first]
        return node_duration, node_transfer, node_gap, delta

    def expand(
        self,
        s: np.ndarray,
        e: np.ndarray,
        duration: np.ndarray | None,
        delta: np.ndarray | None,
        route: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every activity's projected (start, end) from its node's: the node's start moved, plus the changes
        before it in its run (``delta`` from :meth:`compact`). ``route``: "native" (the C loop, run by run; the
        default where built) or "numpy"."""
        native = _native() if route != "numpy" else None
        if native is not None and self.size:
            start = np.empty(self.size, dtype=np.int64)
            end = np.empty(self.size, dtype=np.int64)
            new = self.duration if duration is None else np.ascontiguousarray(duration, dtype=np.int64)
            changes = None if delta is None else np.ascontiguousarray(delta, dtype=np.int64)
            native.expand(
                self.node_lo, self._run_rows, np.ascontiguousarray(s, dtype=np.int64),
                np.ascontiguousarray(e, dtype=np.int64), self.nodes.start, self.nodes.member_lo, self.first, self.end,
                new, changes, start, end,
            )  # fmt: skip
            return start, end
        shift = s - self.nodes.start
        if delta is None:
            moved = shift[self.node_of]
        else:
            ordered = delta if self.run_order is None else delta[self.run_order]
            total = np.cumsum(ordered)
            before = total[self.node_lo[:-1]] - ordered[self.node_lo[:-1]]
            total -= np.repeat(before - shift, np.diff(self.node_lo))
            if self.run_order is None:
                moved = total
            else:
                moved = np.empty(self.size, dtype=np.int64)
                moved[self.run_order] = total
        end = self.end + moved
        start = end - (self.duration if duration is None else np.asarray(duration, dtype=np.int64))
        unreached = s <= NEG
        if unreached.any():  # a node nothing reaches (every activity has a floor or a trigger: never here)
            lost = unreached[self.node_of]
            start[lost] = NEG
            end[lost] = NEG
        member = np.flatnonzero(self.nodes.member_lo >= 0)
        if member.size:  # an instance member is a node of its own: its times are the node's
            start[self.first[member]] = s[member]
            end[self.first[member]] = e[member]
        return start, end


def _device_order(device: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The activities by (device, start, end, row): the rows themselves when they already are (a merged job's
    rows come by device, each device's by start), else a sort."""
    n = start.size
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    same = device[1:] == device[:-1]
    tie = same & (start[1:] == start[:-1])
    if bool(np.all((device[1:] > device[:-1]) | (same & (start[1:] >= start[:-1])))):
        # by (device, start) already: only the runs of one start on one device may need their ends sorted
        order = np.arange(n, dtype=np.int64)
        if bool(np.all(~tie | (end[1:] >= end[:-1]))):
            return order
        in_run = np.zeros(n, dtype=bool)
        in_run[1:] |= tie
        in_run[:-1] |= tie
        rows = np.flatnonzero(in_run)
        run = np.cumsum(in_run & ~np.r_[False, tie])[rows]  # the run each tied row is in (runs in row order)
        order[rows] = rows[np.lexsort((rows, end[rows], run))]
        return order
    return np.lexsort((np.arange(n), end, start, device))


def _event_order(start: np.ndarray, end: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Node events (2u start, 2u+1 end) by (time, the node's start, end, first row, start before end): the
    nodes ranked once, then a stable sort by time (one sort of the events, not five)."""
    m = start.size
    rank = np.lexsort((first, end, start))
    ev_time = np.empty(2 * m, dtype=np.int64)
    ev_time[0::2] = start[rank]
    ev_time[1::2] = end[rank]
    ev = np.empty(2 * m, dtype=np.int64)
    ev[0::2] = 2 * rank
    ev[1::2] = 2 * rank + 1
    return ev[np.argsort(ev_time, kind="stable")]


def _edges_numpy(
    order: np.ndarray, device: np.ndarray, stream: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per activity its stream predecessor and trigger (sorts and searches), and the stream order (device,
    stream, then the device order) in which every stream's activities are contiguous."""
    n = int(start.size)
    rows = np.arange(n, dtype=np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = rows

    # stream predecessor: the previous activity of the same (device, stream) in that order
    s_order = np.lexsort((rank, stream, device))
    same = np.zeros(n, dtype=bool)
    if n > 1:
        same[1:] = (device[s_order][1:] == device[s_order][:-1]) & (stream[s_order][1:] == stream[s_order][:-1])
    stream_pred = np.full(n, -1, dtype=np.int64)
    prev = np.full(n, -1, dtype=np.int64)
    prev[1:] = s_order[:-1]
    cand = np.where(same, prev, -1)
    ok = cand >= 0
    ok[ok] = end[cand[ok]] <= start[s_order[ok]]
    stream_pred[s_order[ok]] = cand[ok]

    # trigger: per device, activities sorted by (end, start, row); the last one ending by ŝ_x that comes
    # before x in the device order (zero-length activities at ŝ_x may not)
    trigger = np.full(n, -1, dtype=np.int64)
    e_order = np.lexsort((rows, start, end, device))
    dev_sorted = device[e_order]
    n_dev = int(device.max()) + 1 if n else 0
    dev_lo = np.searchsorted(dev_sorted, np.arange(n_dev + 1), side="left")
    by_device = device[order]
    for d in range(n_dev):  # per device: a few array passes each
        lo, hi = int(dev_lo[d]), int(dev_lo[d + 1])
        if hi <= lo:
            continue
        members = e_order[lo:hi]
        ends = end[members]
        mine = order[np.searchsorted(by_device, d, "left") : np.searchsorted(by_device, d, "right")]
        k = np.searchsorted(ends, start[mine], side="right") - 1
        pending = k >= 0
        pending[pending] = rank[members[k[pending]]] >= rank[mine[pending]]
        while pending.any():  # only zero-length activities at the same instant land here
            k[pending] -= 1
            still = pending & (k >= 0)
            still[still] = rank[members[k[still]]] >= rank[mine[still]]
            pending = still
        has = k >= 0
        trigger[mine[has]] = members[k[has]]
    # ties on the end: prefer the stream predecessor
    sp_ok = (stream_pred >= 0) & (trigger >= 0)
    sp_ok[sp_ok] = end[stream_pred[sp_ok]] == end[trigger[sp_ok]]
    trigger[sp_ok] = stream_pred[sp_ok]
    return stream_pred, trigger, s_order


def _edges(
    order: np.ndarray, device: np.ndarray, stream: np.ndarray, start: np.ndarray, end: np.ndarray, native: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Stream predecessors and triggers: the C pass where built (stream order None), else :func:`_edges_numpy`."""
    if native is None:
        return _edges_numpy(order, device, stream, start, end)
    n = int(start.size)
    if n and (int(stream.min()) < 0 or int(stream.max()) > 4 * n):  # the C pass indexes a table by stream code
        stream = np.unique(stream, return_inverse=True)[1].astype(np.int64).reshape(-1)
    stream_pred = np.empty(n, dtype=np.int64)
    trigger = np.empty(n, dtype=np.int64)
    native.edges(order, device, stream, start, end, stream_pred, trigger)
    return stream_pred, trigger, None


def build_graph(
    device: np.ndarray,
    stream: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    instance: np.ndarray | None = None,
    launch_ns: np.ndarray | None = None,
    launch_thread: np.ndarray | None = None,
    syncs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
    compact: bool = True,
) -> Graph:
    """The §9 graph. ``device``, ``stream``: integer codes (a stream is a (device, stream) pair);
    ``start``/``end``: aligned ns; ``instance``: complete §8 instance per activity (-1 none);
    ``launch_ns``/``launch_thread``: the launching call's time and thread (-1 unknown; thread codes unique
    per host clock); ``syncs``: host synchronizations as (thread, start, end, device code) arrays on the
    same aligned clock. ``compact``: runs as one node each (False: a node per activity, the reference the
    tests replay against)."""
    n = int(start.size)
    start = np.asarray(start, dtype=np.int64)
    end = np.maximum(np.asarray(end, dtype=np.int64), start)
    device = np.asarray(device, dtype=np.int64)
    stream = np.asarray(stream, dtype=np.int64)
    instance = np.full(n, -1, np.int64) if instance is None else np.asarray(instance, dtype=np.int64)
    native = _native()

    order = _device_order(device, start, end)  # by (device, start, end, row)
    stream_pred, trigger, s_order = _edges(order, device, stream, start, end, native)
    has_t = trigger >= 0
    t_end = end[np.maximum(trigger, 0)] if n else end
    gap = np.where(has_t, start - t_end, 0)
    floor = np.where(has_t, NEG, start)

    # launch-bound kernels
    launch_pred: np.ndarray | None = None
    launch_gap: np.ndarray | None = None
    if launch_ns is not None and launch_thread is not None:
        launch_ns = np.asarray(launch_ns, dtype=np.int64)
        launch_thread = np.asarray(launch_thread, dtype=np.int64)
        known = (launch_thread >= 0) & (launch_ns >= 0)
        bound = known & has_t & (launch_ns > np.where(has_t, t_end, NEG))
        if bound.any():
            host_fixed = bound.copy()
            if syncs is not None and len(syncs[0]):
                launch_pred = np.full(n, -1, dtype=np.int64)
                launch_gap = np.zeros(n, dtype=np.int64)
                waited = _sync_waits(device, start, end, *syncs)
                th, _s_start, s_end, s_dev, w = waited
                if th.size:
                    # the latest waiting synchronization of the launching thread that ended by the launch
                    key = np.lexsort((s_end, th))
                    th, s_end, w, s_dev = th[key], s_end[key], w[key], s_dev[key]
                    b = np.flatnonzero(bound)
                    th_lo = np.searchsorted(th, launch_thread[b], "left")
                    th_hi = np.searchsorted(th, launch_thread[b], "right")
                    # within the thread's block, the last sync ending by the launch
                    pos = np.empty(b.size, dtype=np.int64)
                    for t_code in np.unique(launch_thread[b]):  # per thread: one search
                        sel = launch_thread[b] == t_code
                        block_lo, block_hi = int(th_lo[sel][0]), int(th_hi[sel][0])
                        pos[sel] = block_lo + np.searchsorted(s_end[block_lo:block_hi], launch_ns[b][sel], "right") - 1
                        pos[sel & (pos < block_lo)] = -1
                    use = pos >= 0
                    use[use] = (s_dev[pos[use]] == device[b[use]]) & (end[w[pos[use]]] <= start[b[use]])
                    launch_pred[b[use]] = w[pos[use]]
                    launch_gap[b[use]] = start[b[use]] - end[w[pos[use]]]
                    host_fixed[b[use]] = False
            floor = np.where(host_fixed, start, floor)
    del t_end

    # instance members: sorted by (instance, ŝ, row); k = members that arrived by x's end
    member = instance >= 0
    member_rows = np.flatnonzero(member)
    member_order = member_rows[np.lexsort((member_rows, start[member_rows], instance[member_rows]))]
    m_lo = m_k = m_transfer = np.zeros(0, dtype=np.int64)
    if member_order.size:
        inst_sorted = instance[member_order]
        m_lo = np.searchsorted(inst_sorted, inst_sorted, "left")
        last = np.searchsorted(inst_sorted, inst_sorted, "right")
        # arrivals of the instance are sorted: count those with ŝ <= ê_x by a search on (instance, ŝ)
        arr = start[member_order]
        span = int(arr.max() - arr.min()) + 1 if arr.size else 1
        packed = inst_sorted * span + (arr - arr.min())
        ends_packed = inst_sorted * span + np.minimum(end[member_order], arr.max()) - arr.min()
        m_k = np.clip(np.searchsorted(packed, ends_packed, side="right") - m_lo, 1, last - m_lo)
        a = arr[m_lo + m_k - 1]
        m_transfer = end[member_order] - np.minimum(a, end[member_order])

    # runs: x joins its stream predecessor's node when that is its only edge and x its predecessor's only
    # consumer (neither an instance member)
    join = np.full(n, -1, dtype=np.int64)
    if compact and n:
        sp = stream_pred
        ok = (sp >= 0) & (trigger == sp) & (floor == NEG) & ~member
        if launch_pred is not None:
            ok &= launch_pred < 0
        cand = np.flatnonzero(ok)
        if cand.size:
            consumers = np.bincount(sp[sp >= 0], minlength=n)
            consumers += np.bincount(trigger[(trigger >= 0) & (trigger != sp)], minlength=n)
            if launch_pred is not None:
                w_only = (launch_pred >= 0) & (launch_pred != sp) & (launch_pred != trigger)
                consumers += np.bincount(launch_pred[w_only], minlength=n)
            p = sp[cand]
            cand = cand[~member[p] & (consumers[p] == 1)]
            del consumers
            join[cand] = sp[cand]
    node_of, node_lo, laid_out = _runs(order, join, device, stream, s_order, native)
    del join
    # None: the rows' own order
    run_order = None if bool(np.all(laid_out[1:] > laid_out[:-1])) else laid_out
    rows_of = np.arange(n, dtype=np.int64) if run_order is None else run_order
    first = rows_of[node_lo[:-1]]
    last_of = rows_of[node_lo[1:] - 1]
    del rows_of
    m = int(first.size)

    def to_node(pred: np.ndarray) -> np.ndarray:
        p = pred[first]
        return np.where(p >= 0, node_of[np.maximum(p, 0)], -1)

    n_start, n_end = start[first], end[last_of]
    n_member_lo = np.full(m, -1, dtype=np.int64)
    n_member_k = np.zeros(m, dtype=np.int64)
    n_instance = np.full(m, -1, dtype=np.int64)
    n_transfer = np.zeros(m, dtype=np.int64)
    member_nodes = node_of[member_order]
    n_member_lo[member_nodes] = m_lo
    n_member_k[member_nodes] = m_k
    n_instance[member_nodes] = instance[member_order]
    n_transfer[member_nodes] = m_transfer
    nodes = Nodes(
        start=n_start,
        end=n_end,
        stream_pred=to_node(stream_pred),
        trigger=to_node(trigger),
        gap=gap[first],
        launch_pred=to_node(launch_pred) if launch_pred is not None else np.full(m, -1, dtype=np.int64),
        launch_gap=launch_gap[first] if launch_gap is not None else np.zeros(m, dtype=np.int64),
        floor=floor[first],
        instance=n_instance,
        member_order=member_nodes,
        member_lo=n_member_lo,
        member_k=n_member_k,
        transfer=n_transfer,
        order=_event_order(n_start, n_end, first),
    )
    return Graph(
        start=start, end=end, device=device, nodes=nodes, node_of=node_of, node_lo=node_lo, run_order=run_order
    )


def _runs(
    order: np.ndarray,
    join: np.ndarray,
    device: np.ndarray,
    stream: np.ndarray,
    s_order: np.ndarray | None,
    native: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each activity's node (``join[x] >= 0``: the node of ``join[x]``, its stream predecessor), where each
    node's run begins, and the activities with every run contiguous."""
    n = int(order.size)
    head = join[order] < 0
    before = np.empty(n, dtype=np.int64)
    before[:1] = -1
    before[1:] = order[:-1]
    if bool(np.all(head | (join[order] == before))):
        # every run is contiguous in the device order already (a stream per device does that): no layout
        node_of = np.empty(n, dtype=np.int64)
        node_of[order] = np.cumsum(head) - 1
        return node_of, np.append(np.flatnonzero(head), n).astype(np.int64), order
    if native is not None:
        node_of = np.empty(n, dtype=np.int64)
        run_order = np.empty(n, dtype=np.int64)
        node_lo = np.empty(int(head.sum()) + 1, dtype=np.int64)
        native.runs(order, join, node_of, run_order, node_lo)
        return node_of, node_lo, run_order
    if s_order is None:
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n, dtype=np.int64)
        s_order = np.lexsort((rank, stream, device))
    # a joined activity's predecessor is the one before it in the stream order: every run is contiguous there
    head = join[s_order] < 0
    node_of = np.empty(n, dtype=np.int64)
    node_of[s_order] = np.cumsum(head) - 1
    node_lo = np.append(np.flatnonzero(head), n).astype(np.int64)
    return node_of, node_lo, s_order


def _sync_waits(
    device: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    thread: np.ndarray,
    s_start: np.ndarray,
    s_end: np.ndarray,
    s_dev: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The synchronizations that waited for their device: (thread, start, end, device, w) with ``w`` the
    device's activity with the latest end by the synchronization's end, which ended after it began."""
    thread = np.asarray(thread, dtype=np.int64)
    s_start = np.asarray(s_start, dtype=np.int64)
    s_end = np.asarray(s_end, dtype=np.int64)
    s_dev = np.asarray(s_dev, dtype=np.int64)
    w = np.full(thread.size, -1, dtype=np.int64)
    by_end = np.lexsort((start, end, device))
    dev_sorted = device[by_end]
    for d in np.unique(s_dev[s_dev >= 0]):
        lo, hi = np.searchsorted(dev_sorted, d, "left"), np.searchsorted(dev_sorted, d, "right")
        ends = end[by_end[lo:hi]]
        sel = np.flatnonzero(s_dev == d)
        k = np.searchsorted(ends, s_end[sel], "right") - 1
        ok = k >= 0
        w[sel[ok]] = by_end[lo:hi][k[ok]]
    keep = w >= 0
    keep[keep] = end[w[keep]] > s_start[keep]
    return thread[keep], s_start[keep], s_end[keep], s_dev[keep], w[keep]


# ---------------------------------------------------------------- the replay (over nodes)


def _sweep_numpy_nodes(
    g: Nodes, duration: np.ndarray, transfer: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """All edges relaxed at once, repeated until nothing moves (the same fixed point as the sweep)."""
    is_member = g.is_member
    mem = g.member_order
    inst_sorted = g.instance[mem] if mem.size else mem
    firsts = np.flatnonzero(np.r_[True, inst_sorted[1:] != inst_sorted[:-1]]) if mem.size else mem
    m_rows = np.flatnonzero(is_member)
    for _ in range(4 * g.size + 8):
        cand = g.floor.copy()
        for pred, gp in ((g.stream_pred, None), (g.trigger, g.gap), (g.launch_pred, g.launch_gap)):
            has = pred >= 0
            value = e[pred[has]] + (0 if gp is None else gp[has])
            cand[has] = np.maximum(cand[has], value)
        new_s = np.maximum(s, cand)
        new_e = np.maximum(e, np.where(is_member, NEG, new_s + duration))
        if mem.size:
            # prefix max of the members' starts in arrival order, per instance (the fallback: a pass per instance)
            run = new_s[mem]
            pm = np.empty_like(run)
            for lo, hi in zip(firsts.tolist(), np.r_[firsts[1:], mem.size].tolist()):
                pm[lo:hi] = np.maximum.accumulate(run[lo:hi])
            at = g.member_lo[m_rows] + g.member_k[m_rows] - 1
            reached = pm[at]
            value = np.where(reached > NEG, reached + transfer[m_rows], NEG)
            new_e[m_rows] = np.maximum(new_e[m_rows], value)
        if np.array_equal(new_s, s) and np.array_equal(new_e, e):
            break
        s, e = new_s, new_e
    return s, e


_EXACT_FLOAT = 2**52  # integers below this add exactly in float64 (scipy's Dijkstra keeps distances as doubles)


def _sweep_shortest_nodes(
    g: Nodes, duration: np.ndarray, transfer: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The replay as one shortest-path search (scipy's Dijkstra, C): the same fixed point as the sweep, in
    O(E log V) whatever the longest chain, where the numpy relaxation needs a pass per edge of it.

    The replay is a longest path from a source ``Z`` (edges to the floors) over the nodes start and end of
    every activity (and, per instance, a prefix-max node per member in arrival order). With the measured
    times moved by ``D(t)`` (the sum of the increases of durations and transfers placed before ``t``) as
    potential ``T'``, every edge's reduced cost ``T'_v - T'_u - w'`` is >= 0 (edges point forward in
    measured time, and the measured times satisfy every edge with its measured weight), so a shortest
    path on those costs gives ``L(v) = T'_v - dist(v)`` exactly: the costs are integers and every distance
    is below 2**52 (checked), where doubles add integers exactly. Where a cost is negative anyway (a
    zero-length activity made longer) or a distance is that large, the numpy relaxation runs instead."""
    try:
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import dijkstra
    except ImportError:  # pragma: no cover - scipy comes with jax
        return _sweep_numpy_nodes(g, duration, transfer, s, e)
    n = g.size
    rows = np.arange(n, dtype=np.int64)
    member = g.is_member
    mem = g.member_order
    m = int(mem.size)
    source = 2 * n + m
    # the potential: measured times plus the increases placed before them (non-members at their start,
    # members at their latest arrival a_x = end - tau)
    grow_d = np.where(member, 0, np.maximum(duration - g.duration, 0))
    grow_t = np.where(member, np.maximum(transfer - g.transfer, 0), 0)
    at = np.concatenate([g.start[grow_d > 0], (g.end - g.transfer)[grow_t > 0]])
    amount = np.concatenate([grow_d[grow_d > 0], grow_t[grow_t > 0]])
    key = np.argsort(at, kind="stable")
    at, cum = at[key], np.concatenate([[0], np.cumsum(amount[key])])

    def moved(t: np.ndarray) -> np.ndarray:
        return t + cum[np.searchsorted(at, t, "left")]

    t_node = np.empty(source + 1, dtype=np.int64)
    t_node[0 : 2 * n : 2] = moved(g.start)
    t_node[1 : 2 * n : 2] = moved(g.end)
    t_node[2 * n : source] = moved(g.start[mem]) if m else np.zeros(0, dtype=np.int64)
    t_node[source] = 0
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    weight: list[np.ndarray] = []

    def edges(u: np.ndarray, v: np.ndarray, w: np.ndarray) -> None:
        src.append(u)
        dst.append(v)
        weight.append(w)

    plain = ~member
    edges(2 * rows[plain], 2 * rows[plain] + 1, duration[plain])
    for pred, gp in ((g.stream_pred, None), (g.trigger, g.gap), (g.launch_pred, g.launch_gap)):
        has = pred >= 0
        edges(2 * pred[has] + 1, 2 * rows[has], np.zeros(int(has.sum()), np.int64) if gp is None else gp[has])
    floor = g.floor > NEG
    edges(np.full(int(floor.sum()), source), 2 * rows[floor], g.floor[floor])
    if m:
        aux = 2 * n + np.arange(m, dtype=np.int64)
        edges(2 * mem, aux, np.zeros(m, dtype=np.int64))
        inst = g.instance[mem]
        chained = np.flatnonzero(inst[1:] == inst[:-1])
        edges(aux[chained], aux[chained + 1], np.zeros(chained.size, dtype=np.int64))
        x = rows[member]
        edges(2 * n + g.member_lo[x] + g.member_k[x] - 1, 2 * x + 1, transfer[x])
    u, v, w = np.concatenate(src), np.concatenate(dst), np.concatenate(weight)
    cost = t_node[v] - t_node[u] - w
    if cost.size and int(cost.min()) < 0 and not grow_t.any():
        # a zero-length activity made longer: place each increase after its start in the sweep's order
        # instead (edges point forward in that order but for some between events at one instant)
        pos = np.empty(source + 1, dtype=np.int64)
        pos[g.order] = np.arange(2 * n, dtype=np.int64)
        pos[source] = -1
        if m:  # a prefix node comes after every arrival it holds: a running max per instance
            group = np.cumsum(np.r_[True, g.instance[mem][1:] != g.instance[mem][:-1]]) * (2 * n + 1)
            pos[2 * n : source] = np.maximum.accumulate(group + pos[2 * mem]) - group
        growing = rows[grow_d > 0]
        by_pos = np.argsort(pos[2 * growing], kind="stable")
        placed = pos[2 * growing][by_pos]
        before = np.concatenate([[0], np.cumsum(grow_d[growing][by_pos])])
        measured = np.empty(source + 1, dtype=np.int64)
        measured[0 : 2 * n : 2], measured[1 : 2 * n : 2] = g.start, g.end
        measured[2 * n : source] = g.start[mem]
        measured[source] = 0
        t_node = measured + before[np.searchsorted(placed, pos, "left")]  # the increases placed before
        cost = t_node[v] - t_node[u] - w
    if cost.size and (int(cost.min()) < 0 or int(cost.max()) >= _EXACT_FLOAT):
        return _sweep_numpy_nodes(g, duration, transfer, s, e)
    # parallel edges (a trigger that is also the stream predecessor): the cheapest; csr would add them
    order = np.lexsort((cost, v, u))
    u, v, cost = u[order], v[order], cost[order]
    first = np.r_[True, (u[1:] != u[:-1]) | (v[1:] != v[:-1])]
    graph = csr_matrix((cost[first].astype(np.float64), (u[first], v[first])), shape=(source + 1, source + 1))
    dist = dijkstra(graph, indices=source)
    reached = np.isfinite(dist)
    if reached.any() and float(dist[reached].max()) >= _EXACT_FLOAT:  # costs >= 0: every partial sum was below
        return _sweep_numpy_nodes(g, duration, transfer, s, e)
    value = np.where(reached, t_node - np.where(reached, dist, 0).astype(np.int64), NEG)
    return value[0 : 2 * n : 2].copy(), value[1 : 2 * n : 2].copy()


def _per_activity(
    sweep: Any, g: Graph, duration: np.ndarray, transfer: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    node_d, node_t, _, delta = g.compact(duration, transfer)
    m = g.nodes.size
    node_s, node_e = sweep(g.nodes, node_d, node_t, np.full(m, NEG, np.int64), np.full(m, NEG, np.int64))
    return g.expand(node_s, node_e, duration, delta)


def _sweep_numpy(
    g: Graph, duration: np.ndarray, transfer: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The relaxation over ``g``'s nodes, as every activity's (start, end) (``s``/``e``: unused, NEG)."""
    return _per_activity(_sweep_numpy_nodes, g, duration, transfer, s, e)


def _sweep_shortest(
    g: Graph, duration: np.ndarray, transfer: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The shortest-path search over ``g``'s nodes, as every activity's (start, end) (``s``/``e``: unused)."""
    return _per_activity(_sweep_shortest_nodes, g, duration, transfer, s, e)


def _sweep_kernel():  # pragma: no cover - compiled
    import numba as nb

    @nb.njit(cache=True)
    def sweep(
        order, floor, stream_pred, trigger, gap, launch_pred, launch_gap, member_lo, member_k, member_order,
        duration, transfer, s, e, max_passes,
    ):  # fmt: skip
        for sweep_no in range(max_passes):
            changed = False
            for i in range(order.size):
                ev = order[i]
                x = ev >> 1
                if ev & 1 == 0:
                    v = floor[x]
                    p = stream_pred[x]
                    if p >= 0 and e[p] > v:
                        v = e[p]
                    t = trigger[x]
                    if t >= 0 and e[t] + gap[x] > v:
                        v = e[t] + gap[x]
                    w = launch_pred[x]
                    if w >= 0 and e[w] + launch_gap[x] > v:
                        v = e[w] + launch_gap[x]
                    if v != s[x]:
                        s[x] = v
                        changed = True
                else:
                    lo = member_lo[x]
                    if lo < 0:
                        v = s[x] + duration[x] if s[x] > NEG else NEG
                    else:
                        best = NEG
                        for j in range(lo, lo + member_k[x]):
                            m = member_order[j]
                            if s[m] > best:
                                best = s[m]
                        v = best + transfer[x] if best > NEG else NEG
                    if v != e[x]:
                        e[x] = v
                        changed = True
            if not changed and sweep_no > 0:
                break
        return s, e

    return sweep


_KERNEL = None


# below this many nodes the numpy route replays faster than numba imports and loads its cache
# (docs/performance.md)
COMPILED_FROM = 20_000
MAX_PASSES = 64
ROUTES = ("native", "numba", "numpy")


def _native() -> Any:
    """The C loops (``_replay_native.c``, built at install where a C compiler is), or None. Imported by
    name: ``from . import`` would read as an import of the package's ``__init__`` (the way in, which imports
    this module) and make an import cycle of the package."""
    try:
        return importlib.import_module(f"{__package__}._replay_native")
    except ImportError:
        return None


# without a compiled sweep: below this many nodes the relaxation's passes cost less than importing
# scipy's graph search (docs/performance.md)
SHORTEST_FROM = 4_000


def has_compiled() -> bool:
    """A compiled sweep is there: the C one, or numba (found, not imported: its import alone outlasts a small
    replay)."""
    return routes() != ("numpy",)


def routes() -> tuple[str, ...]:
    """The replay routes this install has (the tests run them against each other); numba is found, not
    imported."""
    from importlib.util import find_spec

    have = {"native": _native() is not None, "numba": find_spec("numba") is not None, "numpy": True}
    return tuple(r for r in ROUTES if have[r])


def _route(size: int, compiled: bool | None, route: str | None) -> str:
    if route is not None:
        if route not in routes():
            raise ValueError(f"replay route {route!r} is not available (this install has {', '.join(routes())})")
        return route
    if compiled is False:
        return "numpy"
    if _native() is not None:  # loads in a millisecond: the best route at every size
        return "native"
    if compiled or (size >= COMPILED_FROM and "numba" in routes()):
        return "numba"
    return "numpy"


def _graph_args(g: Nodes) -> tuple[np.ndarray, ...]:
    return (
        g.order, g.floor, g.stream_pred, g.trigger, g.gap, g.launch_pred, g.launch_gap, g.member_lo, g.member_k,
        g.member_order,
    )  # fmt: skip


def replay_nodes(
    nodes: Nodes,
    duration: np.ndarray,
    transfer: np.ndarray,
    compiled: bool | None = None,
    route: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every node's projected (start, end) with these node durations and transfers (see :func:`replay`)."""
    global _KERNEL
    s = np.full(nodes.size, NEG, dtype=np.int64)
    e = np.full(nodes.size, NEG, dtype=np.int64)
    if not nodes.size:
        return s, e
    chosen = _route(nodes.size, compiled, route)
    if chosen == "native":
        s2, e2 = s.reshape(-1, 1), e.reshape(-1, 1)
        _native().sweep(*_graph_args(nodes), duration, transfer, None, None, s2, e2, MAX_PASSES)
    elif chosen == "numba":
        if _KERNEL is None:
            _KERNEL = _sweep_kernel()
        s, e = _KERNEL(*_graph_args(nodes), duration, transfer, s, e, MAX_PASSES)
    elif nodes.size >= SHORTEST_FROM:
        s, e = _sweep_shortest_nodes(nodes, duration, transfer, s, e)
    else:
        s, e = _sweep_numpy_nodes(nodes, duration, transfer, s, e)
    return s, e


def replay(
    g: Graph,
    duration: np.ndarray | None = None,
    transfer: np.ndarray | None = None,
    compiled: bool | None = None,
    route: str | None = None,
    gap: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Projected (start, end) of every activity, aligned; ``duration``/``transfer``/``gap`` default to
    measured.

    ``duration`` is used by activities that are no instance member, ``transfer`` (``τ``) by members;
    ``gap``: every activity's trigger gap ``g_x``. ``route``: "native" (C), "numba" or "numpy" (default:
    the C sweep where built; else numba from ``COMPILED_FROM`` nodes; else numpy: scipy's shortest-path
    search from ``SHORTEST_FROM`` nodes, the relaxation below); ``compiled`` False forces numpy, True a
    compiled one.
    """
    node_d, node_t, node_gap, delta = g.compact(duration, transfer, gap)
    nodes = g.nodes if gap is None else replace(g.nodes, gap=node_gap)
    node_s, node_e = replay_nodes(nodes, node_d, node_t, compiled, route)
    if not g.size:
        return np.full(0, NEG, dtype=np.int64), np.full(0, NEG, dtype=np.int64)
    return g.expand(node_s, node_e, duration, delta)


LANES = 8  # what-ifs per pass of latest_end_zeroed: 8 x 2 x 8 bytes of lane state per node; 16 spill the caches


def latest_end_zeroed(g: Graph, rows: Sequence[np.ndarray], among: np.ndarray, route: str | None = None) -> np.ndarray:
    """Per set of ``rows``: the latest projected end among the activities ``among`` when that set's
    activities take no time (their durations, or transfers for instance members, as 0): what
    ``replay(g, duration with those rows at 0, transfer with those rows at 0)`` gives, reduced.
    On the C route the sets go through the graph ``LANES`` at a time (one read of the graph serves
    them all); on the others, one replay each."""
    out = np.full(len(rows), NEG, dtype=np.int64)
    if not rows or not among.size:
        return out
    chosen = _route(g.nodes.size, None, route)
    if chosen != "native":
        for j, mine in enumerate(rows):
            duration, transfer = g.duration.copy(), g.transfer.copy()
            duration[mine] = 0
            transfer[mine] = 0
            _, e = replay(g, duration, transfer, route=chosen)
            out[j] = e[among].max()
        return out
    native = _native()
    nd = g.nodes
    m = nd.size
    # in a run, ends only grow: the latest end among `among` is that of its last `among` activity, the run's
    # end less what follows it (its `tail`: gaps and durations, less what a set takes away from them)
    run_rows = g._run_rows
    inside = np.zeros(g.size, dtype=bool)
    inside[among] = True
    last_pos = np.maximum.reduceat(np.where(inside[run_rows], np.arange(g.size), -1), g.node_lo[:-1])
    ends_at = np.flatnonzero(last_pos >= 0)  # the nodes holding one of `among`
    tail = g.end[g.last[ends_at]] - g.end[run_rows[last_pos[ends_at]]]
    slot = np.full(m, -1, dtype=np.int64)
    slot[ends_at] = np.arange(ends_at.size)
    del inside
    amount = np.where(g.is_member, g.transfer, g.duration)  # what a set takes off an activity's node
    position = g.position
    lanes = min(LANES, len(rows))
    s = np.empty((m, lanes), dtype=np.int64)
    e = np.empty((m, lanes), dtype=np.int64)
    for lo in range(0, len(rows), lanes):
        chunk = [_distinct(np.asarray(r, dtype=np.int64)) for r in rows[lo : lo + lanes]]
        node = [g.node_of[r] for r in chunk]
        touched = np.unique(np.concatenate(node)) if chunk else np.zeros(0, np.int64)
        cut_of = np.full(m, -1, dtype=np.int64)
        cut_of[touched] = np.arange(touched.size)
        cut = np.zeros((touched.size, lanes), dtype=np.int64)
        after = np.zeros((touched.size, lanes), dtype=np.int64)  # taken from the tail after the last `among`
        for k, (r, u) in enumerate(zip(chunk, node)):
            np.add.at(cut[:, k], cut_of[u], amount[r])
            behind = position[r] > last_pos[u]
            np.add.at(after[:, k], cut_of[u[behind]], amount[r[behind]])
        s.fill(NEG)
        e.fill(NEG)
        native.sweep(*_graph_args(nd), nd.duration, nd.transfer, cut_of, cut, s, e, MAX_PASSES)
        held = touched[slot[touched] >= 0]  # touched nodes holding one of `among`
        for k in range(len(chunk)):
            latest = e[ends_at, k] - tail
            latest[slot[held]] += after[cut_of[held], k]
            out[lo + k] = int(latest.max()) if latest.size else NEG
    return out


def _distinct(rows: np.ndarray) -> np.ndarray:
    """The rows once each (a set's time is taken away once)."""
    if rows.size > 1 and not bool(np.all(rows[1:] > rows[:-1])):
        return np.unique(rows)
    return rows


def _tight_nodes(g: Nodes, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`tight_predecessor` over nodes."""
    n = g.size
    start_by = np.full(n, -1, dtype=np.int64)
    start_how = np.zeros(n, dtype=np.int64)
    # the last matching edge wins: floor < launch < trigger < stream, so a stream edge is preferred
    for how, pred, gp in ((3, g.launch_pred, g.launch_gap), (2, g.trigger, g.gap), (1, g.stream_pred, None)):
        has = pred >= 0
        value = e[np.maximum(pred, 0)] + (0 if gp is None else gp)
        tight = has & (value == s)
        start_by[tight] = pred[tight]
        start_how[tight] = how
    end_by = np.arange(n, dtype=np.int64)
    member = np.flatnonzero(g.is_member)
    if member.size:
        lo, k = g.member_lo[member], g.member_k[member]
        # the latest projected arrival among the first k members (a short loop per instance size)
        best = np.full(member.size, NEG, dtype=np.int64)
        who = member.copy()
        for j in range(int(k.max())):
            ok = j < k
            m = g.member_order[lo[ok] + j]
            better = s[m] > best[ok]
            idx = np.flatnonzero(ok)[better]
            best[idx] = s[m[better]]
            who[idx] = m[better]
        end_by[member] = who
    return start_by, start_how, end_by


def tight_predecessor(g: Graph, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the critical path: per activity, what set its projected start (``start_by``: the activity
    whose end did, -1 a floor; ``start_how``: 0 floor, 1 stream, 2 trigger, 3 launch) and, for instance
    members, the member whose arrival set its end (``end_by``; the activity itself otherwise). ``s``,
    ``e``: a replay of ``g`` (inside a run every start is the previous end plus its gap)."""
    n = g.size
    node_by, node_how, node_end_by = _tight_nodes(g.nodes, s[g.first], e[g.last])
    start_by = np.full(n, -1, dtype=np.int64)
    start_how = np.zeros(n, dtype=np.int64)
    inner = np.flatnonzero(g.run_prev >= 0)
    if inner.size:
        prev = g.run_prev[inner]
        gap = g.start[inner] - g.end[prev]
        how = np.where(e[prev] == s[inner], 1, np.where(e[prev] + gap == s[inner], 2, 0))
        start_by[inner] = np.where(how > 0, prev, -1)
        start_how[inner] = how
    start_by[g.first] = g._head_pred(node_by)
    start_how[g.first] = node_how
    end_by = np.arange(n, dtype=np.int64)
    member = np.flatnonzero(g.nodes.member_lo >= 0)
    end_by[g.first[member]] = g.first[node_end_by[member]]
    return start_by, start_how, end_by


def walk_back(
    g: Graph, s: np.ndarray, e: np.ndarray, x: int, after: int | None = None, route: str | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chain of tight edges from activity ``x`` back to a root, in walk order: per step the activity
    visited, the one whose arrival set its end (``end_by`` of :func:`tight_predecessor`: itself unless an
    instance member) and the activity whose end set that one's start (-1: a floor, the walk's end). With
    ``after``, the walk also ends at the first step whose arrival starts at or before ``after`` or whose
    predecessor ends by it (that predecessor is still given). ``s``, ``e``: a replay of ``g``. The walk
    goes node by node; a run's activities come out of it whole. ``route``: "native" (the C loop, which
    decides each visited node's tight edges only; the default where built) or "numpy"."""
    nd = g.nodes
    is_member = nd.member_lo >= 0
    native = _native() if route != "numpy" else None
    if route == "native" and native is None:
        raise ValueError("the native walk is not built here")
    if native is not None:
        node_s, node_e = np.ascontiguousarray(s[g.first]), np.ascontiguousarray(e[g.last])
        path_out = np.empty(nd.size + 1, dtype=np.int64)
        arrival_out = np.empty(nd.size + 1, dtype=np.int64)
        count, last = native.walk(
            nd.launch_pred, nd.launch_gap, nd.trigger, nd.gap, nd.stream_pred, nd.member_lo, nd.member_k,
            nd.member_order, node_s, node_e, int(g.node_of[x]), 0 if after is None else int(after),
            after is not None, path_out, arrival_out,
        )  # fmt: skip
        return _walk_rows(g, s, e, x, after, path_out[:count], arrival_out[:count], last, is_member)
    node_by, node_how, node_end_by = _tight_nodes(nd, s[g.first], e[g.last])
    arrival = np.where(is_member, node_end_by, np.arange(nd.size))  # the node whose start ends a step
    nxt = np.where(node_how[arrival] > 0, node_by[arrival], -1)
    node_start = s[g.first[arrival]]
    node_end = e[g.last]
    path: list[int] = []
    u = int(g.node_of[x])
    while len(path) <= nd.size:
        path.append(u)
        v = int(nxt[u])
        if v < 0 or (after is not None and (int(node_start[u]) <= after or int(node_end[v]) <= after)):
            break
        u = v
    nodes = np.array(path, dtype=np.int64)
    return _walk_rows(g, s, e, x, after, nodes, arrival[nodes], int(nxt[nodes[-1]]), is_member)


def _walk_rows(
    g: Graph,
    s: np.ndarray,
    e: np.ndarray,
    x: int,
    after: int | None,
    nodes: np.ndarray,
    arrival: np.ndarray,
    last: int,
    is_member: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`walk_back`'s steps from the nodes it walked (``arrival``: the node whose start ended each; ``last``:
    what set the last one's start, -1 a floor): every node's activities from its entry back to its first."""
    # each node from its entry (x's place, then every node's last) back to its first
    entry = g.node_lo[nodes + 1] - 1
    entry[0] = g.position[x]
    length = entry - g.node_lo[nodes] + 1
    step = np.arange(int(length.sum()), dtype=np.int64) - np.repeat(np.cumsum(length) - length, length)
    visited = g._run_rows[np.repeat(entry, length) - step]
    member_step = is_member[np.repeat(nodes, length)]
    arrived = visited.copy()
    arrived[member_step] = g.first[np.repeat(arrival, length)[member_step]]
    pred = np.append(visited[1:], g.last[last] if last >= 0 else -1)
    if after is not None:
        stop = (s[arrived] <= after) | ((pred >= 0) & (e[np.maximum(pred, 0)] <= after))
        if stop.any():
            cut = int(np.argmax(stop)) + 1
            visited, arrived, pred = visited[:cut], arrived[:cut], pred[:cut]
    return visited, arrived, pred
