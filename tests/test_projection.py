"""Spec §9: the replay's identity, monotonicity, the counterfactual accuracy, the what-if grammar."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moeprof
from moeprof.errors import InputError
from moeprof.insight.projection import Projector, ReplayJob, parse_terms
from moeprof.insight.projection.replay import LANES, build_graph, latest_end_zeroed, replay, routes
from moeprof.insight.projection.savings import opportunity_savings
from moeprof.insight.projection.selection import opportunity_mask
from moeprof.pipeline import JobState, analyze_state, load
from synthetic.counterfactual import A2A_RAGGED, CHANGES, ROUTER_CHANGE, simulate, write_job
from synthetic.counterfactual import EXPERT as EXPERT_KERNEL

from .helpers import NATIVE_REQUIRED, projector_of, shared_trace, timelines

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
SAMPLE_INPUTS = [
    "synthetic_1host_8gpu",
    "synthetic_1host_8gpu.nsys.sqlite",
    "synthetic_1host_8gpu.trace.json.gz",
    "synthetic_2host_4gpu",
    "synthetic_2host_4gpu_kineto",
    "cpu_moe_8dev",
]
SHARED_INPUTS = [
    "kineto/dlrm_8rank_v100",  # one 8-rank job
    "kineto/ddp_2rank_a100_rank0.json.gz",
    "kineto/deepseek_v3_ep64_h800_rank0.json.gz",
    "kineto/torchrec_128rank_sampled",
    "kineto/vllm_tp8_b200_rank0.json.gz",
    "xplane/jax_conv_8xmi300.xplane.pb",
    "xplane/tf_bert_8xv100_worker.xplane.pb",
    "nsys/cloverleaf_a100.sqlite",
    "nsys/h100_2gpu_1s.sqlite",
    "nsys/saxpy_mpi_old_schema.sqlite",
    "nsys/torch_a2a_2gpu.sqlite",
]
# native (C), numba, numpy: those this install has, and native wherever CI requires it (a C sweep that did
# not build then fails every test that runs it, instead of dropping its route)
ROUTES = routes() if "native" in routes() or not NATIVE_REQUIRED else ("native", *routes())


def _assert_identity(path: Path) -> None:
    job = projector_of(moeprof.load(path)).job
    g = job.graph
    for route in ROUTES:
        if route == "numpy" and g.size > 5_000:
            continue  # the numpy route relaxes once per edge of the longest chain: small jobs only
        s, e = replay(g, route=route)
        assert np.array_equal(s, g.start), f"{path}: starts differ on {int(np.sum(s != g.start))} activities"
        assert np.array_equal(e, g.end), f"{path}: ends differ on {int(np.sum(e != g.end))} activities"
    # and on each device's own clock, the table's measured times
    assert np.array_equal(g.start + job.delta, job.table["start_ns"].to_numpy(np.int64))


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLE_INPUTS)
def test_identity_on_samples(name: str) -> None:
    _assert_identity(SAMPLES / name)


@pytest.mark.slow
@pytest.mark.parametrize("relative", SHARED_INPUTS)
def test_identity_on_shared_traces(relative: str) -> None:
    _assert_identity(shared_trace(relative))


# ---------------------------------------------------------------- random graphs


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(timelines(), st.sampled_from([0.0, 0.25, 0.5, 0.9, 1.1, 2.0, 3.0]))
def test_replay_is_monotonic(job: dict, factor: float) -> None:
    """Scaling activities down never makes anything end later, up never earlier; unchanged is the identity;
    the compiled sweeps (C, numba) and the numpy relaxation agree, and the C sweep's lanes (a what-if
    each, the activities of a set taking no time) agree with one replay per set."""
    g = build_graph(job["device"], job["device"] * 10 + job["stream"], job["start"], job["end"], job["instance"])
    s0, e0 = replay(g, compiled=False)
    assert np.array_equal(s0, g.start) and np.array_equal(e0, g.end)
    mask = job["mask"]
    duration = np.where(mask, np.rint(g.duration * factor).astype(np.int64), g.duration)
    transfer = np.where(mask, np.rint(g.transfer * factor).astype(np.int64), g.transfer)
    s, e = replay(g, duration, transfer, compiled=False)
    for route in ROUTES:
        sc, ec = replay(g, duration, transfer, route=route)
        assert np.array_equal(s, sc) and np.array_equal(e, ec), route
    # zeroed sets (more than one pass of lanes): the latest end among the first half of the activities
    rng = np.random.default_rng(g.size)
    sets = [np.flatnonzero(rng.random(g.size) < 0.3) for _ in range(LANES + 3)]
    among = np.arange((g.size + 1) // 2)
    want = []
    for rows in sets:
        d, t = g.duration.copy(), g.transfer.copy()
        d[rows], t[rows] = 0, 0
        want.append(int(replay(g, d, t, compiled=False)[1][among].max()))
    for route in ROUTES:
        assert latest_end_zeroed(g, sets, among, route=route).tolist() == want, route
    span0 = int(e0.max() - s0.min())
    span = int(e.max() - s.min())
    if factor <= 1:
        assert np.all(e <= e0) and np.all(s <= s0) and span <= span0
    else:
        assert np.all(e >= e0) and np.all(s >= s0) and span >= span0


def test_member_ends_at_last_arrival_plus_transfer() -> None:
    """Two devices, one all-reduce: device 1 arrives late; halving its first kernel moves both members' ends."""
    device = np.array([0, 0, 1, 1])
    start = np.array([0, 100, 0, 300])
    end = np.array([100, 400, 300, 400])  # the collective: [100, 400) on 0, [300, 400) on 1: τ = 100
    g = build_graph(device, device, start, end, np.array([-1, 0, -1, 0]))
    assert g.transfer.tolist() == [0, 100, 0, 100]
    duration = g.duration.copy()
    duration[2] = 150  # device 1's kernel halved: it arrives at 150, both end at 250
    s, e = replay(g, duration)
    assert s.tolist() == [0, 100, 0, 150] and e.tolist() == [100, 250, 150, 250]


# ---------------------------------------------------------------- the counterfactual job


@pytest.fixture(scope="module")
def counterfactual_state(tmp_path_factory: pytest.TempPathFactory) -> tuple[moeprof.Analysis, JobState]:
    out = tmp_path_factory.mktemp("counterfactual")
    write_job(out, ranks=8, steps=3, layers=3, seed=4)
    return analyze_state(moeprof.load(out))


@pytest.fixture(scope="module")
def counterfactual(counterfactual_state: tuple[moeprof.Analysis, JobState]) -> moeprof.Analysis:
    return counterfactual_state[0]


@pytest.fixture(scope="module")
def counterfactual_projector(counterfactual_state: tuple[moeprof.Analysis, JobState]) -> Projector:
    projector = counterfactual_state[1].projector
    assert projector is not None
    return projector


@pytest.mark.parametrize("change", [c for c in CHANGES if c != "none"])
def test_projection_matches_the_rerun_job(counterfactual_projector: Projector, change: str) -> None:
    """Each change projected from the measured job is within 5% of the job simulated again with it."""
    truth = simulate(ranks=8, steps=3, layers=3, seed=4, change=change).step_times()
    base = simulate(ranks=8, steps=3, layers=3, seed=4).step_times()
    projection = counterfactual_projector.project(CHANGES[change])
    assert [s.measured_ns for s in projection.steps] == base
    for step, expected in zip(projection.steps, truth, strict=True):
        assert abs(step.projected_ns - expected) <= 0.05 * expected, (change, step, expected)
    # the change matters: the rerun's step differs from the measured one by more than the tolerance
    assert abs(np.mean(truth) - np.mean(base)) > 0.05 * np.mean(base)


def test_balance_is_the_slow_rank_fixed(counterfactual: moeprof.Analysis) -> None:
    """The balance projection (every rank as fast as the median rank) ~ the job with its slow rank fixed."""
    truth = np.mean(simulate(ranks=8, steps=3, layers=3, seed=4, change="fix-slow-rank").step_times())
    balance = counterfactual.projections[0]
    assert balance.what_if == ("balance",)
    assert abs(balance.projected_step_ns - truth) <= 0.05 * truth
    assert balance.saving_ns > 0.1 * balance.measured_step_ns


def test_balance_takes_the_median_of_counterparts(counterfactual_projector: Projector) -> None:
    """By brute force: each compute activity's new duration is the median over ranks of the same
    (step, name, occurrence) durations (even counts: mean of the two middle, half to even)."""
    job = counterfactual_projector.job
    duration = counterfactual_projector.change(["balance"]).duration
    names = job.table["name"].astype(str).to_numpy()
    devices = job.table["device"].astype(str).to_numpy()
    buckets = job.table["bucket"].astype(str).to_numpy()
    measured = job.graph.duration
    order = np.lexsort((job.graph.start, names, job.step, devices))
    seen: dict[tuple, int] = {}
    key_of = {}
    for i in order.tolist():
        k = (devices[i], int(job.step[i]), names[i])
        key_of[i] = (int(job.step[i]), names[i], seen.get(k, 0))
        seen[k] = seen.get(k, 0) + 1
    groups: dict[tuple, list[int]] = {}
    for i, key in key_of.items():
        groups.setdefault(key, []).append(int(measured[i]))
    for i, key in key_of.items():
        if buckets[i] != "compute":
            assert duration[i] == measured[i]
            continue
        values = sorted(groups[key])
        m = len(values)
        expected = values[m // 2] if m % 2 else round((values[m // 2 - 1] + values[m // 2]) / 2)
        assert duration[i] == expected


def test_critical_path_is_a_chain(counterfactual: moeprof.Analysis) -> None:
    projection = counterfactual.projections[0]
    path = projection.critical_path
    assert path
    for a, b in itertools.pairwise(path):
        assert a.end_ns <= b.start_ns or a.end_ns == b.start_ns
    total = sum(p.end_ns - p.start_ns for p in path)
    worst = max(s.projected_ns for s in projection.steps)
    assert total <= worst and total > 0.9 * worst
    assert sum(projection.path_by_cause.values()) == total
    assert projection.path_by_cause["compute"] > 0 and projection.path_by_cause["transfer"] > 0


def test_opportunities_carry_projected_savings(counterfactual: moeprof.Analysis) -> None:
    projected = [o.projected_saving_ns for o in counterfactual.opportunities]
    assert any(p is not None and p > 0 for p in projected)
    ranked = [p or 0 for p in projected]
    assert ranked == sorted(ranked, reverse=True)


def _saving_by_replay(job: ReplayJob, mask: np.ndarray) -> int:
    """One opportunity's saving the plain way: its activities at 0, one numpy replay, end to end."""
    g = job.graph
    s, e = replay(g, np.where(mask & ~g.is_member, 0, g.duration), np.where(mask & g.is_member, 0, g.transfer))
    return job.steps_end_saving(s, e)


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["counterfactual", "cpu_moe_8dev", "synthetic_2host_4gpu_kineto"])
def test_opportunity_savings_agree_with_one_replay_each(
    sample: str, counterfactual_state: tuple[moeprof.Analysis, JobState]
) -> None:
    """Every exact saving equals a replay of its own; every bound holds; an opportunity with no work on
    the measured chain saves exactly 0; past the significant ones and the spare replays, only the bound."""
    analysis, state = counterfactual_state if sample == "counterfactual" else analyze_state(load(SAMPLES / sample))
    assert state.projector is not None
    job = state.projector.job
    opps = analysis.opportunities
    truth = [
        None if (m := opportunity_mask(job, o)) is None else _saving_by_replay(job, m) for o in opps
    ]  # fmt: skip
    assert any(t for t in truth), "a sample where some opportunity saves time"
    every = opportunity_savings(job, opps, significant_ns=0.0)  # everything could matter: all replayed
    assert [s.ns for s in every] == truth
    for s, t in zip(every, truth, strict=True):
        assert (s.max_ns is None) == (t is None) and (t is None or 0 <= t <= s.max_ns)
    # nothing significant and no spare: only the proven zeros are exact
    bounded = opportunity_savings(job, opps, significant_ns=float("inf"), spare=0)
    for s, full in zip(bounded, every, strict=True):
        assert s.max_ns == full.max_ns
        assert s.ns == (0 if full.max_ns == 0 else None)
    # the analysis itself: exact where replayed, else the bound; ranked by the significant ones
    for o, t in zip(opps, truth, strict=True):
        if o.kind == "launch-gaps":  # not activities: the gaps closed, one replay of its own
            assert o.projected_saving_ns == _gaps_closed_by_replay(job)
            continue
        assert o.projected_saving_ns in (t, None)
        assert o.projected_saving_ns is not None or o.projected_saving_max_ns is None or t <= o.projected_saving_max_ns


def _gaps_closed_by_replay(job: ReplayJob) -> int:
    """The launch-gaps opportunity the plain way: every gap under 20 µs before an activity of a GPU device
    (after the activity that triggered it) closed, one replay, the steps' latest end compared."""
    g = job.graph
    devices = job.table["device"].astype(str).to_numpy()
    gap = g.gap.copy()
    for x in range(g.size):
        if g.trigger[x] >= 0 and "GPU" in devices[x] and 0 < gap[x] < 20_000:
            gap[x] = 0
    _, e = replay(g, gap=gap)
    return job.steps_end_saving(g.start, e)


def test_projection_json(counterfactual: moeprof.Analysis) -> None:
    doc = counterfactual.to_json()
    first = doc["projections"][0]
    assert first["what_if"] == ["balance"]
    assert set(first) >= {"what_if", "step_ns", "saving_ns", "steps", "critical_path", "devices"}
    assert first["saving_ns"] == first["step_ns"]["measured"] - first["step_ns"]["projected"]
    back = moeprof.Analysis.from_json(json.loads(json.dumps(doc)))
    assert back.projections[0].projected_step_ns == counterfactual.projections[0].projected_step_ns


# ---------------------------------------------------------------- the grammar


@pytest.mark.parametrize(
    "term",
    [
        "scale(bucket=compute)=0.5",
        "scale()=0",
        "balance",
        "balance(name~expert)",
        "scale(kind=all-to-all,link=ib)=0.5",
        "scale(device=rank5/GPU:1,host=rank5)=2",
        "scale(name~^nccl.*(a|b){1,2},opportunity=2)=0",
    ],
)
def test_terms_parse(term: str) -> None:
    (parsed,) = parse_terms([term])
    assert parsed.action in ("scale", "balance")


@pytest.mark.parametrize(
    "term",
    [
        "scale(bucket=gpu)=0.5",
        "scale(kind=alltoall)=0.5",
        "scale(bucket=compute)",
        "scale(bucket=compute)=-1",
        "scale(bucket=compute)=x",
        "balance=2",
        "shrink(bucket=compute)=0.5",
        "scale(name=foo)=0.5",
        "scale(name~[)=0.5",
        "scale(opportunity=0)=0",
        "scale(colour=red)=1",
    ],
)
def test_bad_terms_are_one_line_errors(term: str) -> None:
    with pytest.raises(InputError) as info:
        parse_terms([term])
    assert term in str(info.value) and "\n" not in str(info.value)


@pytest.mark.slow
def test_cli_what_if(tmp_path: Path) -> None:
    sample = str(SAMPLES / "synthetic_2host_4gpu_kineto")
    bad = subprocess.run(
        [sys.executable, "-m", "moeprof", "analyze", sample, "--what-if", "scale(bucket=gpu)=1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "scale(bucket=gpu)=1" in bad.stderr
    good = subprocess.run(
        [sys.executable, "-m", "moeprof", "analyze", sample, "--json",
         "--what-if", "scale(kind=all-gather)=0.5", "--what-if", "scale(bucket=compute)=0.5"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )  # fmt: skip
    assert good.returncode == 0, good.stderr
    projections = json.loads(good.stdout)["projections"]
    # spec §9: the balance projection first, then the one asked for; then the rest of "what would it buy"
    assert [p["what_if"] for p in projections][:2] == [
        ["balance"],
        ["scale(kind=all-gather)=0.5", "scale(bucket=compute)=0.5"],
    ]
    assert [p["role"] for p in projections][:2] == ["straggler", "asked"]
    assert projections[1]["saving_ns"] > 0


@pytest.mark.slow
def test_large_jobs_without_numba_are_not_projected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the compiled replay a big job gets a warning instead of an hours-long relaxation."""
    projector = sys.modules["moeprof.insight.projection.projector"]
    monkeypatch.setattr(projector, "has_compiled", lambda: False)
    monkeypatch.setattr(projector, "NUMPY_REPLAY_LIMIT", 10)
    traces = moeprof.load(SAMPLES / "synthetic_2host_4gpu_kineto")
    analysis = moeprof.analyze(traces)
    assert analysis.projections == () and "pip install 'moeprof[fast]'" in analysis.warnings[-1]
    with pytest.raises(InputError, match="scale"):
        moeprof.analyze(traces, what_if=["scale()=0.5"])


@pytest.mark.skipif("native" not in ROUTES, reason="the C sweep was not built (no C compiler at install)")
def test_c_sweep_refuses_a_graph_whose_indices_leave_their_arrays() -> None:
    """The C sweep checks every index before its loop: a wrong graph raises instead of reading out of bounds."""
    from dataclasses import replace as with_field

    from moeprof.insight.projection import _replay_native  # type: ignore[attr-defined]

    g = build_graph(np.array([0, 0]), np.array([0, 0]), np.array([0, 10]), np.array([5, 20]), compact=False)
    assert replay(g, route="native")[1].tolist() == [5, 20]
    nodes = g.nodes
    for broken in (
        with_field(nodes, trigger=np.array([-1, 7])),
        with_field(nodes, order=np.array([0, 1, 2, 9])),
        with_field(nodes, member_lo=np.array([0, -1]), member_k=np.array([3, 0])),
    ):
        with pytest.raises(ValueError, match="outside its array"):
            replay(with_field(g, nodes=broken), route="native")
    with pytest.raises(ValueError, match="outside its array"):  # a lane's cut names a row the cuts lack
        _replay_native.sweep(*(getattr(nodes, f) for f in ("order", "floor", "stream_pred", "trigger", "gap")),
                             nodes.launch_pred, nodes.launch_gap, nodes.member_lo, nodes.member_k, nodes.member_order,
                             nodes.duration, nodes.transfer, np.array([0, 1]), np.zeros((1, 1), dtype=np.int64),
                             np.zeros((2, 1), dtype=np.int64), np.zeros((2, 1), dtype=np.int64), 4)  # fmt: skip
    s = np.zeros((2, 65), dtype=np.int64)
    with pytest.raises(ValueError, match="64 lanes"):
        _replay_native.sweep(*(getattr(nodes, f) for f in ("order", "floor", "stream_pred", "trigger", "gap")),
                             nodes.launch_pred, nodes.launch_gap, nodes.member_lo, nodes.member_k, nodes.member_order,
                             nodes.duration, nodes.transfer, None, None, s, s.copy(), 4)  # fmt: skip


# ---------------------------------------------------------------- balance-router: what a balanced router does


def _router_job(tmp: Path, ragged: bool, change: str = "none") -> tuple[list[int], Path]:
    """The counterfactual job with a skewed router (rank 0 hottest), no slow rank: its steps and folder."""
    _, job = write_job(tmp, ranks=8, steps=3, layers=3, seed=4, change=change, router_skew=1.0, ragged=ragged,
                       slow_factor=1.0)  # fmt: skip
    return job.step_times(), tmp


@pytest.mark.parametrize("ragged", [False, True], ids=["fixed-shape", "ragged"])
def test_balance_router_is_the_job_run_again_with_the_router_balanced(tmp_path: Path, ragged: bool) -> None:
    """The skewed job projected with balance-router is within 2% of the same generator run again with every
    rank's load 1 (work conserved); the straggler fix (balance: every rank as fast as the median rank)
    answers another question and misses it by more."""
    measured, folder = _router_job(tmp_path / "skewed", ragged)
    rerun, _ = _router_job(tmp_path / "balanced", ragged, ROUTER_CHANGE)
    truth = float(np.mean(rerun))
    analysis = moeprof.analyze(moeprof.load(folder))
    router = analysis.projection("router")
    assert router is not None and router.what_if == ("balance-router",) and router.selected
    assert [s.measured_ns for s in router.steps] == measured
    assert abs(router.projected_step_ns - truth) <= 0.02 * truth
    assert np.mean(measured) - truth > 0.2 * truth  # the skew matters
    straggler = analysis.projection("straggler")
    assert straggler is not None and abs(straggler.projected_step_ns - truth) > 0.05 * truth


def test_balance_router_spreads_each_layers_expert_work_evenly(tmp_path: Path) -> None:
    """By hand: per (step, layer) every rank's expert GEMM takes the mean of the ranks' measured GEMMs (the
    work conserved), and a fixed-shape all-to-all keeps its transfer."""
    _, folder = _router_job(tmp_path, ragged=False)
    projector = projector_of(moeprof.load(folder))
    job = projector.job
    change = projector.change(["balance-router"])
    names = job.table["name"].astype(str).to_numpy()
    devices = job.table["device"].astype(str).to_numpy()
    cells: dict[tuple[int, int], list[int]] = {}
    seen: dict[tuple[int, str], int] = {}
    for x in np.lexsort((job.graph.start, job.step)):  # each rank's GEMMs in start order: layer by layer
        if names[x] != EXPERT_KERNEL:
            continue
        layer = seen.get((int(job.step[x]), devices[x]), 0)
        seen[(int(job.step[x]), devices[x])] = layer + 1
        cells.setdefault((int(job.step[x]), layer), []).append(int(x))
    assert len(cells) == 9 and all(len(rows) == 8 for rows in cells.values())
    for rows in cells.values():
        mean = sum(int(job.graph.duration[x]) for x in rows) / len(rows)
        for x in rows:
            assert abs(int(change.duration[x]) - mean) <= 1  # rounded half to even
    member = job.graph.is_member
    assert np.array_equal(change.transfer[member], job.graph.transfer[member])


def test_balance_router_moves_a_ragged_exchange_with_its_busiest_member(tmp_path: Path) -> None:
    """By hand: each ragged all-to-all's members take the transfer the balanced bytes need, 2 / (1 + W_max / W̄)
    of the measured one (W the expert work of the layer it feeds or drains, W_max its busiest rank)."""
    _, folder = _router_job(tmp_path, ragged=True)
    projector = projector_of(moeprof.load(folder))
    job = projector.job
    change = projector.change(["balance-router"])
    names = job.table["name"].astype(str).to_numpy()
    g = job.graph
    checked = 0
    for step in job.step_numbers.tolist():
        rows = np.flatnonzero(job.step == step)
        experts = rows[names[rows] == EXPERT_KERNEL]
        experts = experts[np.argsort(g.start[experts], kind="stable")]
        exchanges = rows[names[rows] == A2A_RAGGED]
        # the step's all-to-all instances in the order they begin: dispatch, combine of layer 0, then layer 1...
        instances = sorted(set(g.instance[exchanges].tolist()), key=lambda i: g.start[g.instance == i].min())
        assert len(instances) == 6
        for layer in range(3):
            work = np.array([g.duration[x] for x in experts[layer * 8 : layer * 8 + 8]], dtype=np.float64)
            factor = 2 / (1 + work.max() / work.mean())
            for instance in instances[2 * layer : 2 * layer + 2]:
                for x in np.flatnonzero(g.instance == instance):
                    assert abs(int(change.transfer[x]) - g.transfer[x] * factor) <= 1
                    checked += 1
    assert checked == 3 * 3 * 16


def test_balance_router_without_expert_work_says_so() -> None:
    """A job whose kernels name no routed expert (no experts scope, grouped GEMM, megablox or fused-MoE kernel):
    the router term selects nothing, has no row, and asked for says why."""
    traces = moeprof.load(SAMPLES / "synthetic_2host_4gpu")
    plain = moeprof.analyze(traces)
    assert plain.projection("router") is None
    asked = moeprof.analyze(traces, what_if=["balance-router"]).projection("asked")
    assert asked is not None and asked.selected == 0 and asked.saving_ns == 0
    assert "no routed-expert work found" in asked.note


def test_expert_work_is_found_by_scope_and_by_kernel_name() -> None:
    """The demo's XLA:CPU capture names its experts in the HLO op_name scope (moe_experts, forward and
    backward); the counterfactual's Kineto kernel is a grouped GEMM by name. Each found row is one of those."""
    job = projector_of(moeprof.load(SAMPLES / "cpu_moe_8dev")).job
    roles = job.table["moe_role"].astype(str).to_numpy()
    assert (roles == "expert").sum() > 0
    assert set(job.table["bucket"].astype(str).to_numpy()[roles == "expert"]) == {"compute"}
    exchange = roles == "exchange"
    assert exchange.any() and set(job.table["kind"].astype(str).to_numpy()[exchange]) == {"all-to-all"}


def test_the_balance_router_term_takes_no_filters_or_factor() -> None:
    for bad in ("balance-router(device=x)", "balance-router=2"):
        with pytest.raises(InputError, match="balance-router"):
            parse_terms([bad])
