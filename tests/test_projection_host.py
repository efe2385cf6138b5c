"""Spec §9, the host side of the graph: launch-bound kernels and the host synchronizations they move across,
from Nsight exports (checked against direct SQL on the real exports and against a brute force of the rule)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import moeprof
from moeprof.core.projection import ReplayJob
from moeprof.core.replay import build_graph, has_compiled, replay
from moeprof.readers import nsys, read_file

from .conftest import shared_trace
from .test_nsys import to_parquetdir

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


@pytest.mark.parametrize("relative", ["nsys/cloverleaf_a100.sqlite", "nsys/saxpy_mpi_old_schema.sqlite"])
def test_nsys_launch_bounds_follow_the_rule(relative: str) -> None:
    """On one-device exports: the graph's launch edges are the brute force's, and the replay is the identity."""
    analysis = moeprof.analyze(moeprof.load(shared_trace(relative)))
    rj = analysis.replay
    assert rj is not None
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
    analysis = moeprof.analyze(moeprof.load(shared_trace("nsys/cloverleaf_a100.sqlite")))
    rj = analysis.replay
    assert rj is not None
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
    projection = analysis.projections[-1]
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
    analysis = moeprof.analyze(moeprof.load(shared_trace(relative)))
    rj = analysis.replay
    assert rj is not None
    g = rj.graph
    host_fixed = (g.floor == g.start) & (g.trigger >= 0)
    assert host_fixed.sum() + (g.launch_pred >= 0).sum() > 0
    if "tf_bert" in relative:
        assert (g.launch_pred >= 0).sum() > 0  # kernels launched after a synchronous copy
    for compiled in ROUTES:
        s, e = replay(g, compiled=compiled)
        assert np.array_equal(s, g.start) and np.array_equal(e, g.end)
