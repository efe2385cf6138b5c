"""Spec §9, the replay's runs: the graph of one node per run replays exactly as the graph of one node per
activity (random jobs, random changes of durations, transfers and gaps, every route this install has), the
C edges and runs are numpy's, and every activity's edges read back from the nodes are the full graph's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moeprof
from moeprof.insight.projection.replay import (
    NEG,
    Graph,
    Nodes,
    _device_order,
    _edges,
    _edges_numpy,
    _native,
    _runs,
    build_graph,
    latest_end_zeroed,
    replay,
    routes,
    tight_predecessor,
    walk_back,
)
from moeprof.pipeline import analyze_state

from .helpers import shared_trace

ROUTES = routes()
SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
FACTORS = [0.0, 0.5, 1.0, 1.0, 1.0, 1.5, 3.0]
VIEWS = (
    "stream_pred", "trigger", "gap", "launch_pred", "launch_gap", "floor", "instance", "member_order", "member_lo",
    "member_k", "transfer", "is_member", "order",
)  # fmt: skip


@st.composite
def run_jobs(draw: st.DrawFn) -> dict:
    """Devices with a stream of kernels back to back or gapped (runs), a second stream that sometimes overlaps
    it (edges across streams), zero-length activities at one instant, collectives across the devices, and
    launch calls on two host threads with synchronizations."""
    n_dev = draw(st.integers(1, 3))
    cols: dict[str, list[int]] = {"device": [], "stream": [], "start": [], "end": [], "instance": []}
    t = [0] * n_dev
    n_inst = 0
    for _ in range(draw(st.integers(1, 40))):
        what = draw(st.sampled_from(["run", "run", "run", "zero", "other", "collective"]))
        if what == "collective" and n_dev > 1:
            arrive = [t[d] + draw(st.integers(0, 20)) for d in range(n_dev)]
            end = max(arrive) + draw(st.integers(0, 20))
            for d in range(n_dev):
                for key, value in zip(cols, (d, 9, arrive[d], end, n_inst)):
                    cols[key].append(value)
                t[d] = end
            n_inst += 1
            continue
        d = draw(st.integers(0, n_dev - 1))
        start = t[d] + draw(st.sampled_from([0, 0, 1, 3, 10]))
        length = 0 if what == "zero" else draw(st.integers(1, 30))
        stream = 1 if what == "other" else 0
        for key, value in zip(cols, (d, stream, start, start + length, -1)):
            cols[key].append(value)
        if what != "other" or draw(st.booleans()):
            t[d] = start + length  # the next one waits for it; otherwise the two streams overlap
    job = {k: np.array(v, dtype=np.int64) for k, v in cols.items()}
    n = job["start"].size
    job["launch_thread"] = np.array(draw(st.lists(st.integers(-1, 1), min_size=n, max_size=n)), dtype=np.int64)
    job["launch_ns"] = job["start"] - np.array(draw(st.lists(st.integers(0, 15), min_size=n, max_size=n)))
    k = draw(st.integers(0, 4))
    s_start = np.array(draw(st.lists(st.integers(0, 300), min_size=k, max_size=k)), dtype=np.int64)
    s_len = np.array(draw(st.lists(st.integers(0, 40), min_size=k, max_size=k)), dtype=np.int64)
    s_thread = np.array(draw(st.lists(st.integers(0, 1), min_size=k, max_size=k)), dtype=np.int64)
    s_dev = np.array(draw(st.lists(st.integers(0, n_dev - 1), min_size=k, max_size=k)), dtype=np.int64)
    job["syncs"] = (s_thread, s_start, s_start + s_len, s_dev) if draw(st.booleans()) else None
    job["launched"] = draw(st.booleans())
    for key in ("duration", "transfer", "gap"):
        job[key] = np.array(draw(st.lists(st.sampled_from(FACTORS), min_size=n, max_size=n)), dtype=np.float64)
    job["shuffle"] = draw(st.booleans())  # rows not in device order: the sorts' route
    return job


def _graphs(job: dict) -> tuple:
    rows = np.arange(job["start"].size)
    if job["shuffle"]:
        rows = np.random.default_rng(rows.size).permutation(rows.size)
    args = [job[k][rows] for k in ("device", "stream", "start", "end", "instance")]
    launch = (job["launch_ns"][rows], job["launch_thread"][rows], job["syncs"]) if job["launched"] else (None,) * 3
    full = build_graph(*args, *launch, compact=False)
    return build_graph(*args, *launch), full, rows


def _changes(job: dict, g, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    def scaled(values: np.ndarray, key: str) -> np.ndarray:
        return np.rint(values * job[key][rows]).astype(np.int64)

    return scaled(g.duration, "duration"), scaled(g.transfer, "transfer"), scaled(g.gap, "gap")


@settings(max_examples=300, deadline=None)
@given(run_jobs())
def test_runs_replay_as_the_full_graph(job: dict) -> None:
    """Unchanged (the identity) and with every activity's duration, transfer and trigger gap changed at random,
    on every route: the graph of runs gives every activity the full graph's start and end."""
    g, full, rows = _graphs(job)
    assert g.nodes.size <= full.nodes.size == full.size
    duration, transfer, gap = _changes(job, full, rows)
    s0, e0 = replay(full, compiled=False)
    assert np.array_equal(s0, full.start) and np.array_equal(e0, full.end)
    want = replay(full, duration, transfer, compiled=False)
    want_gap = replay(full, duration, transfer, compiled=False, gap=gap)
    for route in ROUTES:
        s, e = replay(g, route=route)
        assert np.array_equal(s, g.start) and np.array_equal(e, g.end), route
        got = replay(g, duration, transfer, route=route)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), route
        got = replay(g, duration, transfer, route=route, gap=gap)
        assert np.array_equal(got[0], want_gap[0]) and np.array_equal(got[1], want_gap[1]), route
        assert np.array_equal(replay(full, duration, transfer, route=route)[1], want[1]), route


@settings(max_examples=200, deadline=None)
@given(run_jobs())
def test_runs_read_back_every_activitys_edges(job: dict) -> None:
    """Each activity's edges, floor, instance and member arrays read back from the nodes are the full graph's;
    inside a run every activity's only edge is its stream predecessor, which is also its trigger."""
    g, full, rows = _graphs(job)
    for view in VIEWS:
        assert np.array_equal(getattr(g, view), getattr(full, view)), view
    inner = g.run_prev >= 0
    assert np.array_equal(g.stream_pred[inner], g.run_prev[inner])
    assert np.array_equal(g.trigger[inner], g.run_prev[inner])
    assert (g.floor[inner] == NEG).all() and (g.launch_pred[inner] < 0).all() and not g.is_member[inner].any()
    # a run's activities are one stream's, in start order
    first = g.first[g.node_of]
    stream = job["stream"][rows]
    assert np.array_equal(stream, stream[first]) and np.array_equal(g.device, g.device[first])


@settings(max_examples=200, deadline=None)
@given(run_jobs(), st.integers(0, 2**31))
def test_runs_walk_and_lanes_as_the_full_graph(job: dict, seed: int) -> None:
    """The tight predecessors and the walk back from any activity (with and without a time to stop at) over
    runs are the full graph's; the C sweep's lanes over runs give the latest end among any activities of
    each set made free as one replay of the full graph per set."""
    g, full, rows = _graphs(job)
    duration, transfer, _ = _changes(job, full, rows)
    s, e = replay(full, duration, transfer, compiled=False)
    for a, b in zip(tight_predecessor(g, s, e), tight_predecessor(full, s, e), strict=True):
        assert np.array_equal(a, b)
    rng = np.random.default_rng(seed)
    x = int(rng.integers(g.size))
    after = int(rng.integers(int(s.min()), int(e.max()) + 1))
    for stop in (None, after):
        for a, b in zip(walk_back(g, s, e, x, stop), walk_back(full, s, e, x, stop), strict=True):
            assert np.array_equal(a, b), stop
    sets = [np.flatnonzero(rng.random(g.size) < p) for p in (0.1, 0.3, 0.6, 1.0)]
    sets.append(np.r_[sets[0], sets[0]])  # a row named twice is made free once
    among = np.flatnonzero(rng.random(g.size) < 0.5)
    if not among.size:
        among = np.arange(g.size)
    want = []
    for chosen in sets:
        d, t = full.duration.copy(), full.transfer.copy()
        d[chosen], t[chosen] = 0, 0
        want.append(int(replay(full, d, t, compiled=False)[1][among].max()))
    for route in ROUTES:
        assert latest_end_zeroed(g, sets, among, route=route).tolist() == want, route


@pytest.mark.skipif(_native() is None, reason="the C loops were not built (no C compiler at install)")
@settings(max_examples=300, deadline=None)
@given(run_jobs())
def test_c_edges_and_runs_are_numpys(job: dict) -> None:
    """The C pass's stream predecessors and triggers (a heap) are the sorts' and searches'; its runs group the
    activities as numpy's layout does (node numbers may differ: each activity's run starts at the same one)."""
    rows = np.random.default_rng(0).permutation(job["start"].size) if job["shuffle"] else slice(None)
    device, stream, start, end = (job[k][rows] for k in ("device", "stream", "start", "end"))
    end = np.maximum(end, start)
    order = _device_order(device, start, end)
    sp, trig, s_order = _edges_numpy(order, device, stream, start, end)
    c_sp, c_trig, _ = _edges(order, device, stream * 1000 + 7, start, end, _native())  # codes far apart: densified
    assert np.array_equal(sp, c_sp) and np.array_equal(trig, c_trig)
    join = np.where((sp >= 0) & (trig == sp), sp, -1)
    for native in (None, _native()):
        node_of, node_lo, run_order = _runs(order, join, device, stream, s_order if native is None else None, native)
        first = run_order[node_lo[:-1]][node_of]
        following = np.zeros(start.size, dtype=bool)  # every run is contiguous in run_order, in start order
        following[run_order[1:]] = node_of[run_order[1:]] == node_of[run_order[:-1]]
        assert np.array_equal(join >= 0, following)
        if native is None:
            want = first
        else:
            assert np.array_equal(first, want)


def test_a_stream_of_kernels_is_one_node_per_device() -> None:
    """Three devices, each one stream of 1,000 kernels back to back or with gaps: three nodes. A kernel on a
    second stream that the next one waits for (its trigger) splits the run there: one more node for it and
    one for the rest of the run."""
    rng = np.random.default_rng(1)
    n = 1_000
    device = np.repeat(np.arange(3), n)
    length = rng.integers(1, 50, 3 * n)
    start = np.concatenate([np.cumsum(rng.integers(0, 5, n) + length[i * n : (i + 1) * n]) for i in range(3)])
    start = start - length  # each kernel starts after the previous one ended, 0-4 ns later
    g = build_graph(device, np.zeros(3 * n, dtype=np.int64), start, start + length)
    assert g.nodes.size == 3 and g.run_order is None
    # device 0's kernel 500 moves to stream 1; kernel 501 starts after it ended: its trigger is on stream 1
    stream = np.zeros(3 * n, dtype=np.int64)
    stream[500] = 1
    g = build_graph(device, stream, start, start + length)
    assert g.nodes.size == 3 + 2
    assert g.trigger[501] == 500 and g.stream_pred[501] == 499 and g.node_of[501] != g.node_of[499]
    halved = g.duration // 2
    want = replay(build_graph(device, stream, start, start + length, compact=False), halved, route="numpy")
    got = replay(g, halved)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("path", ["sample:synthetic_2host_4gpu_kineto", "kineto/dlrm_8rank_v100"])
def test_real_jobs_replay_over_runs_as_over_activities(path: str) -> None:
    """Real jobs' graphs (the 2-host Kineto sample: instances across hosts, several streams; DLRM's 8 ranks:
    launch bounds after synchronizations) and the same edges with one node per activity: halving compute,
    or removing every transfer, moves every activity alike."""
    source = SAMPLES / path.split(":")[1] if path.startswith("sample:") else shared_trace(path)
    _, state = analyze_state(moeprof.load(source))
    assert state.projector is not None
    job = state.projector.job
    g = job.graph
    full = _one_node_each(g)
    assert g.nodes.size < g.size and g.is_member.any()
    compute = job.bucket == 0
    for duration, transfer in ((np.where(compute, g.duration // 2, g.duration), g.transfer), (None, g.transfer * 0)):
        s, e = replay(g, duration, transfer)
        s_full, e_full = replay(full, duration, transfer, route="numpy")
        assert np.array_equal(s, s_full) and np.array_equal(e, e_full)


def _one_node_each(g: Graph) -> Graph:
    """``g``'s edges as read back for every activity, as a graph of one node per activity."""
    rows = np.arange(g.size, dtype=np.int64)
    nodes = Nodes(
        start=g.start, end=g.end, stream_pred=g.stream_pred, trigger=g.trigger, gap=g.gap, launch_pred=g.launch_pred,
        launch_gap=g.launch_gap, floor=g.floor, instance=g.instance, member_order=g.member_order,
        member_lo=g.member_lo, member_k=g.member_k, transfer=g.transfer, order=g.order,
    )  # fmt: skip
    return Graph(g.start, g.end, g.device, nodes, rows, np.append(rows, g.size), None)
