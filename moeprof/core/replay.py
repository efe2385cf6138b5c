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

The replay is a Gauss-Seidel sweep over the start and end events in measured-time
order (ties: the activity's (start, end, row) order, start before end), repeated
until nothing moves: one sweep settles every edge that points forward in that
order, a second confirms it (edges between events at the same instant may point
back; each extra sweep settles one more of those). The sweep is compiled with
numba where it is installed; without numba (and below ``COMPILED_FROM`` activities) the
replay is one shortest-path search on reduced costs (:func:`_sweep_shortest`, scipy's
Dijkstra) from ``SHORTEST_FROM`` activities, and below that, or where the search cannot be
made exact, a relaxation of every edge at once until nothing moves (the same fixed point,
one pass per edge of the longest chain).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NEG = np.iinfo(np.int64).min // 4  # "no value yet": far below any time, never overflows when a gap is added


@dataclass(frozen=True)
class Graph:
    """The inferred dependency graph of one job (arrays over activities, same order as the input)."""

    start: np.ndarray  # aligned measured start ŝ
    end: np.ndarray  # aligned measured end ê (>= start)
    device: np.ndarray  # device code
    stream_pred: np.ndarray  # p(x), -1 none
    trigger: np.ndarray  # t(x), -1: a root
    gap: np.ndarray  # g_x = ŝ_x − ê_t(x) (0 for roots)
    launch_pred: np.ndarray  # w: the device work the launching host waited for, -1 none
    launch_gap: np.ndarray  # ŝ_x − ê_w
    floor: np.ndarray  # lowest projected start (NEG: none): a root's or a host-bound kernel's measured start
    instance: np.ndarray  # complete §8 instance id, -1 none
    member_order: np.ndarray  # members sorted by (instance, ŝ, row)
    member_lo: np.ndarray  # per member row: where its instance begins in member_order (-1 for non-members)
    member_k: np.ndarray  # per member row: members of its instance that arrived by its end
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


def _device_order(device: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    return np.lexsort((np.arange(start.size), end, start, device))


def build_graph(
    device: np.ndarray,
    stream: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    instance: np.ndarray | None = None,
    launch_ns: np.ndarray | None = None,
    launch_thread: np.ndarray | None = None,
    syncs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> Graph:
    """The §9 graph. ``device``, ``stream``: integer codes (a stream code is unique across devices
    or is combined with the device here); ``start``/``end``: aligned ns; ``instance``: complete §8
    instance per activity (-1 none); ``launch_ns``/``launch_thread``: the launching call's time and
    thread (-1 unknown; thread codes unique per host clock); ``syncs``: host synchronizations as
    (thread, start, end, device code) arrays on the same aligned clock."""
    n = int(start.size)
    start = np.asarray(start, dtype=np.int64)
    end = np.maximum(np.asarray(end, dtype=np.int64), start)
    device = np.asarray(device, dtype=np.int64)
    stream = np.asarray(stream, dtype=np.int64)
    instance = np.full(n, -1, np.int64) if instance is None else np.asarray(instance, dtype=np.int64)
    rows = np.arange(n, dtype=np.int64)

    # device order (start, end, row); rank = position in it
    order = _device_order(device, start, end)
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
    # a combined sort key (device, end) as two searches: positions where each device's rows begin
    n_dev = int(device.max()) + 1 if n else 0
    dev_lo = np.searchsorted(dev_sorted, np.arange(n_dev + 1), side="left")
    for d in range(n_dev):  # per device: a few array passes each
        lo, hi = int(dev_lo[d]), int(dev_lo[d + 1])
        if hi <= lo:
            continue
        members = e_order[lo:hi]
        ends = end[members]
        mine = order[np.searchsorted(device[order], d, "left") : np.searchsorted(device[order], d, "right")]
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
    has_t = trigger >= 0
    gap = np.zeros(n, dtype=np.int64)
    gap[has_t] = start[has_t] - end[trigger[has_t]]
    floor = np.where(has_t, NEG, start)

    # launch-bound kernels
    launch_pred = np.full(n, -1, dtype=np.int64)
    launch_gap = np.zeros(n, dtype=np.int64)
    if launch_ns is not None and launch_thread is not None:
        launch_ns = np.asarray(launch_ns, dtype=np.int64)
        launch_thread = np.asarray(launch_thread, dtype=np.int64)
        known = (launch_thread >= 0) & (launch_ns >= 0)
        t_end = np.where(has_t, end[np.maximum(trigger, 0)], NEG)
        bound = known & has_t & (launch_ns > t_end)
        host_fixed = bound.copy()
        if syncs is not None and len(syncs[0]) and bound.any():
            waited = _sync_waits(device, start, end, order, *syncs)
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

    # instance members: sorted by (instance, ŝ, row); k = members that arrived by x's end
    member = np.flatnonzero(instance >= 0)
    member_order = member[np.lexsort((member, start[member], instance[member]))]
    member_lo = np.full(n, -1, dtype=np.int64)
    member_k = np.zeros(n, dtype=np.int64)
    transfer = np.zeros(n, dtype=np.int64)
    if member_order.size:
        inst_sorted = instance[member_order]
        first = np.searchsorted(inst_sorted, inst_sorted, "left")
        last = np.searchsorted(inst_sorted, inst_sorted, "right")
        member_lo[member_order] = first
        # arrivals of the instance are sorted: count those with ŝ <= ê_x by a search on (instance, ŝ)
        arr = start[member_order]
        span = int(arr.max() - arr.min()) + 1 if arr.size else 1
        packed = inst_sorted * span + (arr - arr.min())
        ends_packed = inst_sorted * span + np.minimum(end[member_order], arr.max()) - arr.min()
        k = np.searchsorted(packed, ends_packed, side="right") - first
        k = np.clip(k, 1, last - first)
        member_k[member_order] = k
        a = arr[first + k - 1]
        transfer[member_order] = end[member_order] - np.minimum(a, end[member_order])

    # sweep order: events by (time, the activity's start, end, row, start before end)
    ev_time = np.empty(2 * n, dtype=np.int64)
    ev_time[0::2] = start
    ev_time[1::2] = end
    node = np.repeat(rows, 2)
    phase = np.tile(np.array([0, 1], dtype=np.int64), n)
    ev_order = np.lexsort((phase, node, end[node], start[node], ev_time))
    return Graph(
        start=start,
        end=end,
        device=device,
        stream_pred=stream_pred,
        trigger=trigger,
        gap=gap,
        launch_pred=launch_pred,
        launch_gap=launch_gap,
        floor=floor,
        instance=instance,
        member_order=member_order,
        member_lo=member_lo,
        member_k=member_k,
        transfer=transfer,
        order=ev_order.astype(np.int64),
    )


def _sync_waits(
    device: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    order: np.ndarray,
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


# ---------------------------------------------------------------- the replay


def _sweep_numpy(
    g: Graph, duration: np.ndarray, transfer: np.ndarray, s: np.ndarray, e: np.ndarray
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


def _sweep_shortest(
    g: Graph, duration: np.ndarray, transfer: np.ndarray, s: np.ndarray, e: np.ndarray
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
        return _sweep_numpy(g, duration, transfer, s, e)
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
        return _sweep_numpy(g, duration, transfer, s, e)
    # parallel edges (a trigger that is also the stream predecessor): the cheapest; csr would add them
    order = np.lexsort((cost, v, u))
    u, v, cost = u[order], v[order], cost[order]
    first = np.r_[True, (u[1:] != u[:-1]) | (v[1:] != v[:-1])]
    graph = csr_matrix((cost[first].astype(np.float64), (u[first], v[first])), shape=(source + 1, source + 1))
    dist = dijkstra(graph, indices=source)
    reached = np.isfinite(dist)
    if reached.any() and float(dist[reached].max()) >= _EXACT_FLOAT:  # costs >= 0: every partial sum was below
        return _sweep_numpy(g, duration, transfer, s, e)
    value = np.where(reached, t_node - np.where(reached, dist, 0).astype(np.int64), NEG)
    return value[0 : 2 * n : 2].copy(), value[1 : 2 * n : 2].copy()


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


# below this many activities the numpy route replays faster than numba imports and loads its cache
# (docs/performance.md)
COMPILED_FROM = 20_000
MAX_PASSES = 64
ROUTES = ("native", "numba", "numpy")


def _native() -> Any:
    """The C sweep (``_replay_native.c``, built at install where a C compiler is), or None."""
    try:
        from . import _replay_native
    except ImportError:
        return None
    return _replay_native


# without a compiled sweep: below this many activities the relaxation's passes cost less than importing
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


def _graph_args(g: Graph) -> tuple[np.ndarray, ...]:
    return (
        g.order, g.floor, g.stream_pred, g.trigger, g.gap, g.launch_pred, g.launch_gap, g.member_lo, g.member_k,
        g.member_order,
    )  # fmt: skip


def replay(
    g: Graph,
    duration: np.ndarray | None = None,
    transfer: np.ndarray | None = None,
    compiled: bool | None = None,
    route: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Projected (start, end) of every activity, aligned; ``duration``/``transfer`` default to measured.

    ``duration`` is used by activities that are no instance member, ``transfer`` (``τ``) by members.
    ``route``: "native" (C), "numba" or "numpy" (default: the C sweep where built; else numba from
    ``COMPILED_FROM`` activities; else numpy: scipy's shortest-path search from ``SHORTEST_FROM``
    activities, the relaxation below); ``compiled`` False forces numpy, True a compiled one.
    """
    global _KERNEL
    duration = g.duration if duration is None else np.asarray(duration, dtype=np.int64)
    transfer = g.transfer if transfer is None else np.asarray(transfer, dtype=np.int64)
    s = np.full(g.size, NEG, dtype=np.int64)
    e = np.full(g.size, NEG, dtype=np.int64)
    if not g.size:
        return s, e
    chosen = _route(g.size, compiled, route)
    if chosen == "native":
        s2, e2 = s.reshape(-1, 1), e.reshape(-1, 1)
        _native().sweep(*_graph_args(g), duration, transfer, None, s2, e2, MAX_PASSES)
    elif chosen == "numba":
        if _KERNEL is None:
            _KERNEL = _sweep_kernel()
        s, e = _KERNEL(*_graph_args(g), duration, transfer, s, e, MAX_PASSES)
    elif g.size >= SHORTEST_FROM:
        s, e = _sweep_shortest(g, duration, transfer, s, e)
    else:
        s, e = _sweep_numpy(g, duration, transfer, s, e)
    return s, e


LANES = 8  # what-ifs per pass of latest_end_zeroed: 8 x 2 x 8 bytes of lane state per activity; 16 spill the caches


def latest_end_zeroed(g: Graph, rows: Sequence[np.ndarray], among: np.ndarray, route: str | None = None) -> np.ndarray:
    """Per set of ``rows``: the latest projected end among the activities ``among`` when that set's
    activities take no time (their durations, or transfers for instance members, as 0): what
    ``replay(g, duration with those rows at 0, transfer with those rows at 0)`` gives, reduced.
    On the C route the sets go through the graph ``LANES`` at a time (one read of the graph serves
    them all); on the others, one replay each."""
    out = np.full(len(rows), NEG, dtype=np.int64)
    if not rows or not among.size:
        return out
    chosen = _route(g.size, None, route)
    if chosen != "native":
        for j, mine in enumerate(rows):
            duration, transfer = g.duration.copy(), g.transfer.copy()
            duration[mine] = 0
            transfer[mine] = 0
            _, e = replay(g, duration, transfer, route=chosen)
            out[j] = e[among].max()
        return out
    native = _native()
    inside = np.zeros((g.size, 1), dtype=bool)
    inside[among, 0] = True
    lanes = min(LANES, len(rows))
    s = np.empty((g.size, lanes), dtype=np.int64)
    e = np.empty((g.size, lanes), dtype=np.int64)
    zero = np.empty(g.size, dtype=np.uint64)
    for lo in range(0, len(rows), lanes):
        chunk = rows[lo : lo + lanes]
        zero.fill(0)
        for k, mine in enumerate(chunk):
            zero[mine] |= np.uint64(1) << np.uint64(k)
        s.fill(NEG)
        e.fill(NEG)
        native.sweep(*_graph_args(g), g.duration, g.transfer, zero, s, e, MAX_PASSES)
        out[lo : lo + len(chunk)] = np.max(e, axis=0, where=inside, initial=NEG)[: len(chunk)]
    return out


def tight_predecessor(g: Graph, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the critical path: per activity, what set its projected start (``start_by``: the activity
    whose end did, -1 a floor; ``start_how``: 0 floor, 1 stream, 2 trigger, 3 launch) and, for instance
    members, the member whose arrival set its end (``end_by``; the activity itself otherwise)."""
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
