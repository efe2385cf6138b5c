"""Spec §9, the host side of the graph: launch-bound kernels and the host synchronizations they move across
(Nsight, Kineto, XPlane; checked against direct SQL, jaxlib and a brute force of the rule), and the numpy replay."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moeprof
from moeprof.insight.projection import ReplayJob
from moeprof.insight.projection.replay import NEG, _sweep_numpy, _sweep_shortest, build_graph, has_compiled, replay
from moeprof.readers import nsys, read_file

from .helpers import projector_of, shared_trace, timelines, to_parquetdir

ROUTES = [True, False] if has_compiled() else [False]

# hand counts on the SQLite (sqlite3 CLI, runtime names joined through StringIds): calls that wait for the
# device, one per (thread, correlation id); saxpy's old schema exports each call twice (an outer row,
# eventClass 67, named "cudaMemcpy", and an inner one named "cudaMemcpy_v3020")
NSYS_SYNCS = {
    "nsys/cloverleaf_a100.sqlite": 1591,  # 1,312 cudaDeviceSynchronize_v3020 + 279 cudaMemcpy_v3020
    "nsys/h100_2gpu_1s.sqlite": 8,  # cudaStreamSynchronize_v3020 (not its 236 cudaStreamWaitEvent)
    "nsys/saxpy_mpi_old_schema.sqlite": 15,  # cudaMemcpy
    "nsys/torch_a2a_2gpu.sqlite": 33,  # cudaStreamSynchronize_v3020 (not its 133 cudaEventQuery)
}
SYNC_NAMES = (
    "cudaDeviceSynchronize_v3020",
    "cudaStreamSynchronize_v3020",
    "cudaEventSynchronize_v3020",
    "cudaMemcpy_v3020",
    "cudaMemcpy",
)


def _sql_syncs(path: Path) -> pd.DataFrame:
    """The synchronizations by direct SQL: thread, start, end (the outer row of a call exported twice) and
    the device from the SYNCHRONIZATION row with the call's correlation id, else from its memcpy."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        by_sync = (
            "(SELECT y.deviceId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION y WHERE y.correlationId = r.correlationId "
            "AND (y.globalPid >> 24) = (r.globalTid >> 24) LIMIT 1)"
            if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables
            else "NULL"
        )
        by_copy = (
            "(SELECT m.deviceId FROM CUPTI_ACTIVITY_KIND_MEMCPY m WHERE m.correlationId = r.correlationId "
            "AND (m.globalPid >> 24) = (r.globalTid >> 24) LIMIT 1)"
        )
        marks = ", ".join("?" for _ in SYNC_NAMES)
        rows = conn.execute(
            f'SELECT r.globalTid, r.correlationId, MIN(r.start), MAX(r."end"), COALESCE({by_sync}, {by_copy}) '
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
            f"WHERE s.value IN ({marks}) GROUP BY r.globalTid, r.correlationId",
            SYNC_NAMES,
        ).fetchall()
    finally:
        conn.close()
    return pd.DataFrame(rows, columns=["thread", "corr", "start_ns", "end_ns", "gpu"])


@pytest.mark.parametrize("relative", sorted(NSYS_SYNCS))
def test_nsys_syncs_match_sql(relative: str) -> None:
    path = shared_trace(relative)
    trace = nsys.read(path)
    got = trace.host_syncs
    want = _sql_syncs(path)
    assert len(got) == len(want) == NSYS_SYNCS[relative]
    host = str(trace.events["host"].iloc[0])
    want_rows = sorted(
        (f"{host}/GPU:{int(g)}", str(int(t)), int(s), int(e))
        for t, s, e, g in zip(want["thread"], want["start_ns"], want["end_ns"], want["gpu"], strict=True)
    )
    got_rows = sorted(
        (str(d), str(t), int(s), int(e))
        for d, t, s, e in zip(got["device"], got["thread"], got["start_ns"], got["end_ns"], strict=True)
    )
    assert got_rows == want_rows
    # the thread as launch_thread writes it, so the replay finds a launching thread's synchronizations
    assert set(got["thread"]) <= set(trace.events["launch_thread"].astype(str))


def test_nsys_syncs_from_a_parquet_folder(tmp_path: Path) -> None:
    path = shared_trace("nsys/torch_a2a_2gpu.sqlite")
    folder = to_parquetdir(path, tmp_path / path.stem)
    a = nsys.read(path).host_syncs.sort_values(["thread", "start_ns"], ignore_index=True)
    b = nsys.read_parquet_dir(folder).host_syncs.sort_values(["thread", "start_ns"], ignore_index=True)
    assert len(a) == 33
    pd.testing.assert_frame_equal(a.astype(str), b.astype(str))


def _brute_launch_pred(rj: ReplayJob, syncs: pd.DataFrame) -> np.ndarray:
    """The §9 rule, one activity at a time: a call waited when the device's activity with the latest end by
    the call's end (w) ended after the call began; a launch-bound activity's launching thread's latest call
    that waited and returned by the launch binds it to that w, when w ended by x's start."""
    g = rj.graph
    table = rj.table
    launch = table["launch_ns"].to_numpy(np.int64) - rj.delta
    thread = table["launch_thread"].astype(str).to_numpy()
    device = table["device"].astype(str).to_numpy()
    # each call that waited, with the w it waited for
    waited: list[tuple[str, str, int, int]] = []  # thread, device, end, w
    for th, dev, s_start, s_end in zip(
        syncs["thread"], syncs["device"], syncs["start_ns"], syncs["end_ns"], strict=True
    ):
        on_device = np.flatnonzero((device == dev) & (g.end <= s_end))
        if on_device.size:
            w = on_device[np.lexsort((g.start[on_device], g.end[on_device]))][-1]
            if g.end[w] > s_start:
                waited.append((str(th), str(dev), int(s_end), int(w)))
    out = np.full(g.size, -1, dtype=np.int64)
    for x in range(g.size):
        t = g.trigger[x]
        if table["launch_ns"].iloc[x] < 0 or not thread[x] or t < 0 or launch[x] <= g.end[t]:
            continue  # not launch-bound
        mine = [(end, w) for th, dev, end, w in waited if th == thread[x] and dev == device[x] and end <= launch[x]]
        if mine and g.end[max(mine)[1]] <= g.start[x]:
            out[x] = max(mine)[1]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("relative", ["nsys/cloverleaf_a100.sqlite", "nsys/saxpy_mpi_old_schema.sqlite"])
def test_nsys_launch_bounds_follow_the_rule(relative: str) -> None:
    """On one-device exports: the graph's launch edges are the brute force's, and the replay is the identity."""
    rj = projector_of(moeprof.load(shared_trace(relative))).job
    g = rj.graph
    syncs = nsys.read(shared_trace(relative)).host_syncs
    device = str(rj.table["device"].iloc[0])
    assert set(syncs["device"]) == {device}
    # one device, one host clock: the syncs as the graph sees them (aligned like the activities)
    delta = int(rj.delta[0])
    aligned = syncs.assign(start_ns=syncs["start_ns"] - delta, end_ns=syncs["end_ns"] - delta)
    want = _brute_launch_pred(rj, aligned)
    assert np.array_equal(g.launch_pred, want)
    assert (g.launch_pred >= 0).sum() > 0
    for compiled in ROUTES:
        s, e = replay(g, compiled=compiled)
        assert np.array_equal(s, g.start) and np.array_equal(e, g.end)


def test_a_kernel_launched_after_a_sync_moves_with_the_work_it_waited_for() -> None:
    """CloverLeaf: every kernel is followed by cudaDeviceSynchronize. Halving one kernel moves the next one
    (launched after the sync) earlier by the time saved; without the syncs its host is fixed and it stays."""
    rj = projector_of(moeprof.load(shared_trace("nsys/cloverleaf_a100.sqlite"))).job
    g = rj.graph
    x = int(np.flatnonzero(g.launch_pred >= 0)[10])
    w = int(g.launch_pred[x])
    duration = g.duration.copy()
    duration[w] = g.duration[w] // 2
    saved = int(g.duration[w] - duration[w])
    assert saved > 0
    for compiled in ROUTES:
        s, _ = replay(g, duration, compiled=compiled)
        assert s[w] == g.start[w] and s[x] == g.start[x] - saved
    # the same graph without the host synchronizations: x is host-fixed
    table = rj.table
    launch = table["launch_ns"].to_numpy(np.int64) - rj.delta
    fixed = build_graph(
        np.zeros(g.size, dtype=np.int64),
        pd.factorize(table["stream"].astype(str))[0],
        g.start,
        g.end,
        launch_ns=np.where(table["launch_ns"].to_numpy(np.int64) >= 0, launch, -1),
        launch_thread=np.zeros(g.size, dtype=np.int64),
    )
    assert fixed.launch_pred[x] == -1 and fixed.floor[x] == g.start[x]
    s, _ = replay(fixed, duration, compiled=False)
    assert s[x] == g.start[x]


def test_cloverleaf_compute_halved_saves_the_compute_time() -> None:
    """CloverLeaf runs one kernel or copy at a time, nearly each launched after a synchronization that waited
    for the one before: halving compute saves nearly the compute time halved (half to even, summed by hand),
    never more; where a sync did not wait (the host came late) the host's time stays. Without the
    synchronizations every kernel's host was fixed and the projection saved nothing."""
    path = shared_trace("nsys/cloverleaf_a100.sqlite")
    analysis = moeprof.analyze(moeprof.load(path), what_if=["scale(bucket=compute)=0.5"])
    projection = analysis.projection("asked")
    assert projection is not None
    events = nsys.read(path).events
    compute = events["name"].astype(str).str.contains("clover::").to_numpy()
    d = (events["end_ns"] - events["start_ns"]).to_numpy(np.int64)[compute]
    saved = int((d - np.round(d * 0.5).astype(np.int64)).sum())
    assert 0.99 * saved <= projection.saving_ns <= saved


# ---------------------------------------------------------------- XPlane


def _jaxlib_host_calls(path: Path) -> tuple[dict[int, tuple[int, int, int]], list[tuple[int, int, int, int, str]]]:
    """By jaxlib, one event at a time: each correlation id's first host call (line number over the host
    planes' lines, start, end) and every host event with memcpy_details (line, start, end, corr, details)."""
    from jaxlib._profile_data import ProfileData

    calls: dict[int, tuple[int, int, int]] = {}
    copies: list[tuple[int, int, int, int, str]] = []
    profile = ProfileData.from_file(str(path))
    lines = [line for plane in profile.planes if plane.name.startswith("/host:CPU") for line in plane.lines]
    for i, line in enumerate(lines):
        for ev in line.events:
            stats = dict(ev.stats)
            corr = stats.get("correlation_id")
            start, end = round(ev.start_ns), round(ev.start_ns + ev.duration_ns)
            if isinstance(corr, int) and corr not in calls:
                calls[corr] = (i, start, end)
            if "memcpy_details" in stats:
                copies.append((i, start, end, int(corr) if isinstance(corr, int) else -1, str(stats["memcpy_details"])))
    return calls, copies


def _jaxlib_kernels(path: Path) -> list[tuple[str, int, int, int]]:
    """Every GPU stream event (device ordinal, start, end, correlation id), one at a time."""
    import re

    from jaxlib._profile_data import ProfileData

    out = []
    for plane in ProfileData.from_file(str(path)).planes:
        m = re.match(r"^/device:GPU:(\d+)$", plane.name)
        if not m:
            continue
        for line in plane.lines:
            if line.name.startswith("Stream #"):
                for ev in line.events:
                    corr = dict(ev.stats).get("correlation_id", -1)
                    out.append((m.group(1), round(ev.start_ns), round(ev.start_ns + ev.duration_ns), int(corr)))
    return out


@pytest.mark.parametrize("relative", ["xplane/jax_conv_8xmi300.xplane.pb", "xplane/tf_bert_8xv100_worker.xplane.pb"])
def test_xplane_launches_are_the_host_calls_with_the_kernels_correlation_id(relative: str) -> None:
    path = shared_trace(relative)
    trace = read_file(path)
    calls, _ = _jaxlib_host_calls(path)
    events = trace.events
    got = sorted(
        (str(d).rsplit(":", 1)[1], int(s), int(e), int(n), str(t))
        for d, s, e, n, t in zip(
            events["device"],
            events["start_ns"],
            events["end_ns"],
            events["launch_ns"],
            events["launch_thread"],
            strict=True,
        )
    )
    want = []
    for ordinal, start, end, corr in _jaxlib_kernels(path):
        line, c_start, c_end = calls.get(corr, (-1, -1, -1))
        launch = -1 if line < 0 else (c_start if c_end > end else c_end)
        want.append((ordinal, start, end, launch, str(line) if line >= 0 else ""))
    assert got == sorted(want)
    assert (events["launch_ns"] >= 0).all()  # every kernel of these captures has its launch on the host


def test_xplane_sync_copies_are_host_syncs() -> None:
    """TF BERT: the copies launched with memcpy_details async:0 (4, by jaxlib) are the host synchronizations, on
    the device of the copy each launched."""
    path = shared_trace("xplane/tf_bert_8xv100_worker.xplane.pb")
    trace = read_file(path)
    _, copies = _jaxlib_host_calls(path)
    sync = [c for c in copies if "async:0" in c[4].split()]
    assert len(sync) == 4
    device_of = {corr: d for d, _, _, corr in _jaxlib_kernels(path)}
    host = str(trace.events["host"].iloc[0])
    want = sorted((f"{host}/GPU:{device_of[corr]}", str(line), s, e) for line, s, e, corr, _ in sync)
    got = trace.host_syncs
    assert sorted(zip(got["device"], got["thread"], got["start_ns"], got["end_ns"], strict=True)) == want


@pytest.mark.parametrize("relative", ["xplane/jax_conv_8xmi300.xplane.pb", "xplane/tf_bert_8xv100_worker.xplane.pb"])
def test_xplane_graphs_have_launch_bounds_and_replay_to_the_identity(relative: str) -> None:
    rj = projector_of(moeprof.load(shared_trace(relative))).job
    g = rj.graph
    host_fixed = (g.floor == g.start) & (g.trigger >= 0)
    assert host_fixed.sum() + (g.launch_pred >= 0).sum() > 0
    if "tf_bert" in relative:
        assert (g.launch_pred >= 0).sum() > 0  # kernels launched after a synchronous copy
    for compiled in ROUTES:
        s, e = replay(g, compiled=compiled)
        assert np.array_equal(s, g.start) and np.array_equal(e, g.end)


# ---------------------------------------------------------------- the replay without numba


@st.composite
def launched_timelines(draw: st.DrawFn) -> dict:
    """test_projection's random jobs, with launch calls on two host threads and synchronizations."""
    job = draw(timelines())
    n = job["start"].size
    job["launch_thread"] = np.array(draw(st.lists(st.integers(-1, 1), min_size=n, max_size=n)), dtype=np.int64)
    back = np.array(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)), dtype=np.int64)
    job["launch_ns"] = job["start"] - back
    k = draw(st.integers(0, 6))
    s_start = np.array(draw(st.lists(st.integers(0, 300), min_size=k, max_size=k)), dtype=np.int64)
    s_len = np.array(draw(st.lists(st.integers(0, 60), min_size=k, max_size=k)), dtype=np.int64)
    s_thread = np.array(draw(st.lists(st.integers(0, 1), min_size=k, max_size=k)), dtype=np.int64)
    s_dev = np.array(draw(st.lists(st.integers(0, 2), min_size=k, max_size=k)), dtype=np.int64)
    job["syncs"] = (s_thread, s_start, s_start + s_len, s_dev)
    job["factors"] = np.array(
        draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 3.0]), min_size=n, max_size=n)), dtype=np.float64
    )
    return job


def _graph(job: dict):
    return build_graph(
        job["device"],
        job["device"] * 10 + job["stream"],
        job["start"],
        job["end"],
        job["instance"],
        job["launch_ns"],
        job["launch_thread"],
        job["syncs"],
    )


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(launched_timelines(), st.booleans())
def test_shortest_path_replay_is_the_relaxations_fixed_point(job: dict, uniform: bool) -> None:
    """The numpy route's shortest-path search gives the relaxation's (and the compiled sweep's) starts and
    ends, durations and transfers changed up or down, per activity or all alike."""
    g = _graph(job)
    f = np.full(g.size, job["factors"][0]) if uniform else job["factors"]
    duration = np.rint(g.duration * f).astype(np.int64)
    transfer = np.rint(g.transfer * f).astype(np.int64)
    empty = np.full(g.size, NEG, dtype=np.int64)
    want = _sweep_numpy(g, duration, transfer, empty.copy(), empty.copy())
    got = _sweep_shortest(g, duration, transfer, empty.copy(), empty.copy())
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    if has_compiled():
        kernel = replay(g, duration, transfer, compiled=True)
        assert np.array_equal(kernel[0], want[0]) and np.array_equal(kernel[1], want[1])


@settings(max_examples=100, deadline=None)
@given(launched_timelines())
def test_shortest_path_replay_needs_no_relaxation(job: dict) -> None:
    """Scaling down, or up anything that has a length, never falls back to the relaxation."""
    g = _graph(job)
    f = job["factors"]
    grows_from_zero = (f > 1) & (np.where(g.is_member, g.transfer, g.duration) == 0)
    f = np.where(grows_from_zero, 1.0, f)
    duration = np.rint(g.duration * f).astype(np.int64)
    transfer = np.rint(g.transfer * f).astype(np.int64)
    empty = np.full(g.size, NEG, dtype=np.int64)
    import moeprof.insight.projection.replay as replay_module

    original = replay_module._sweep_numpy

    def refuse(*args: object) -> None:
        raise AssertionError("fell back to the relaxation")

    replay_module._sweep_numpy = refuse  # type: ignore[assignment]
    try:
        got = _sweep_shortest(g, duration, transfer, empty.copy(), empty.copy())
    finally:
        replay_module._sweep_numpy = original
    want = original(g, duration, transfer, empty.copy(), empty.copy())
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.slow
def test_shortest_path_replay_on_a_real_job() -> None:
    """The real 8-rank DLRM (2,244 activities, all-to-all and all-reduce instances, launch bounds after
    synchronizations): the shortest-path search, unchanged and with each kind's transfer halved, is the
    compiled sweep's (or, without numba, the relaxation's)."""
    rj = projector_of(moeprof.load(shared_trace("kineto/dlrm_8rank_v100"))).job
    g = rj.graph
    assert g.is_member.sum() > 0 and (g.launch_pred >= 0).sum() > 0
    empty = np.full(g.size, NEG, dtype=np.int64)
    for transfer in (g.transfer, g.transfer // 2):
        got = _sweep_shortest(g, g.duration, transfer, empty.copy(), empty.copy())
        if has_compiled():
            want = replay(g, g.duration, transfer, compiled=True)
        else:
            want = _sweep_numpy(g, g.duration, transfer, empty.copy(), empty.copy())
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_zero_length_activity_made_longer_needs_no_relaxation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A, a zero-length Z and B back to back on one stream (a balance can give Z its counterparts' median):
    Z at 5 ns moves B by 5, found by the shortest path alone."""
    import moeprof.insight.projection.replay as replay_module

    g = build_graph(np.zeros(3, np.int64), np.zeros(3, np.int64), np.array([0, 10, 10]), np.array([10, 10, 20]))
    monkeypatch.setattr(replay_module, "_sweep_numpy", lambda *a: pytest.fail("fell back to the relaxation"))
    empty = np.full(3, NEG, dtype=np.int64)
    s, e = _sweep_shortest(g, np.array([10, 5, 10]), g.transfer, empty.copy(), empty.copy())
    assert s.tolist() == [0, 10, 15] and e.tolist() == [10, 15, 25]
