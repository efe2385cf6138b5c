"""Steps without step markers (spec §5's fallback): one execution of the XLA module that owns the
most device time per step, delimited by launch evidence (host launches linked by correlation id to
the host's executions of the module). The expected windows are computed here from the raw events
(jaxlib's ProfileData) or from the generator, never through moeprof's step code."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

import moeprof
from moeprof.core.trace import empty_markers
from moeprof.errors import InputError
from moeprof.options import StepOptions
from moeprof.pipeline import load, measure
from synthetic import gpu as synthetic

from .helpers import shared_trace

MI300 = "xplane/jax_conv_8xmi300.xplane.pb"
MI300_MODULE = "jit_forward_3d_conv"
MEDIAN_STEP_NS = 1_858_223  # the median step docs/metrics.md and docs/real-traces.md quote (1.858 ms)
ROUTES = ["wire", "jaxlib"]


@pytest.fixture(params=ROUTES)
def route(request, monkeypatch) -> str:
    """Both XPlane decoders: the wire decoder (default) and jaxlib's ProfileData."""
    monkeypatch.setenv("MOEPROF_XPLANE_READER", request.param)
    return request.param


def _windows(analysis) -> dict[tuple[int, int], tuple[int, int]]:
    """(GPU ordinal, step) -> (start, end) of the analysis' steps."""
    return {(int(s.device.rsplit(":", 1)[1]), s.step): (s.start_ns, s.end_ns) for s in analysis.steps}


def _mi300_by_hand(path: Path) -> dict[tuple[int, int], tuple[int, int]]:
    """Each GPU's kernels of the module (every event's own hlo_module stat), grouped by the Python call
    (PjitFunction, outermost ranges) that holds their launch: correlation id -> host launch time."""
    from jax.profiler import ProfileData

    prof = ProfileData.from_file(str(path))
    launch: dict[int, float] = {}
    calls: list[tuple[float, float]] = []
    for plane in prof.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            for ev in line.events:
                stats = dict(ev.stats)
                if "correlation_id" in stats:
                    launch[stats["correlation_id"]] = ev.start_ns
                if ev.name.startswith("PjitFunction("):
                    calls.append((ev.start_ns, ev.start_ns + ev.duration_ns))
    outer: list[tuple[float, float]] = []
    for s, e in sorted(calls):  # the trace nests each call in another of the same name
        if outer and s <= outer[-1][1]:
            outer[-1] = (outer[-1][0], max(outer[-1][1], e))
        else:
            outer.append((s, e))
    windows: dict[tuple[int, int], tuple[int, int]] = {}
    for plane in prof.planes:
        m = re.fullmatch(r"/device:GPU:(\d+)", plane.name)
        if not m:
            continue
        for line in plane.lines:
            for ev in line.events:
                stats = dict(ev.stats)
                if stats.get("hlo_module") != MI300_MODULE:
                    continue
                t = launch[stats["correlation_id"]]
                call = next(i for i, (s, e) in enumerate(outer) if s <= t <= e)
                lo, hi = windows.get((int(m.group(1)), call), (math.inf, -math.inf))
                windows[(int(m.group(1)), call)] = (
                    int(min(lo, round(ev.start_ns))),
                    int(max(hi, round(ev.start_ns + ev.duration_ns))),
                )
    assert len(outer) == 5
    return windows


@pytest.mark.slow
def test_mi300_steps_are_the_module_executions(route):
    path = shared_trace(MI300)
    analysis = moeprof.analyze_paths([path])
    expected = _mi300_by_hand(path)
    assert len(expected) == 8 * 5
    assert _windows(analysis) == expected
    assert sorted({s.step for s in analysis.steps}) == [0, 1, 2, 3, 4]
    notes = [w for w in analysis.warnings if w.startswith("steps: no step markers")]
    assert notes == [
        "steps: no step markers; 5 executions of module jit_forward_3d_conv per device (fallback of spec §5; "
        "delimited by host launches, linked by correlation id, inside the host's executions of the module)"
    ]
    # the job's step (§5): the first start to the last end over its devices (one host: one clock), and their
    # median: the figures docs/metrics.md and docs/real-traces.md quote
    spans = [
        max(e for (_, k), (_, e) in expected.items() if k == step)
        - min(s for (_, k), (s, _) in expected.items() if k == step)
        for step in range(5)
    ]
    assert [s["span_ns"] for s in analysis.to_json()["spread"]["steps"]] == spans
    assert float(np.median(spans)) == MEDIAN_STEP_NS


def test_mi300_device_figures_do_not_depend_on_steps(route):
    path = shared_trace(MI300)
    (trace,) = load(path)
    with_steps = measure(trace).to_json()
    without = measure(trace.replace(markers=empty_markers())).to_json()
    assert with_steps["steps"] and not without["steps"]
    assert with_steps["devices"] == without["devices"]
    assert with_steps["total"] == without["total"]


@pytest.mark.slow
def test_mi300_step_selection_on_fallback_steps():
    path = shared_trace(MI300)
    expected = _mi300_by_hand(path)
    sel = moeprof.analyze_paths([path], step_options=StepOptions("1:3", skip_first=1))
    assert _windows(sel) == {k: v for k, v in expected.items() if k[1] in (2, 3)}
    # the selected windows are what the devices measure: GPU:3's span is its steps 2 and 3
    gpu3 = next(d for d in sel.devices if d.device.endswith("/GPU:3"))
    assert gpu3.span_ns == sum(e - s for (g, k), (s, e) in expected.items() if g == 3 and k in (2, 3))
    with pytest.raises(
        InputError,
        match=r"--skip-first 5 matches no step: the trace has 5 steps \(numbered 0, 1, 2, 3, 4 by the trace; "
        r"--skip-first 5 leaves none\)",
    ):
        moeprof.analyze_paths([path], step_options=StepOptions(skip_first=5))
    with pytest.raises(InputError, match=r"--steps 7:9 matches no step"):
        moeprof.analyze_paths([path], step_options=StepOptions("7:9"))


def _generator_windows(scen: synthetic.Scenario) -> dict[tuple[int, int], tuple[int, int]]:
    """(GPU, step) -> [first start, last end] of the module's kernels (those with an HLO op) of that step."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for k in scen.kernels[0]:
        if not k.hlo_op:
            continue
        key = (k.device, synthetic.step_of(scen, 0, k.start))
        lo, hi = out.get(key, (math.inf, -math.inf))
        out[key] = (int(min(lo, k.start)), int(max(hi, k.start + k.dur)))
    return out


@pytest.mark.parametrize("steps", [1, 4])
def test_synthetic_xplane_without_markers(tmp_path, route, steps):
    """A generated XPlane with no Steps / XLA Modules lines, only launch evidence: K executions."""
    pytest.importorskip("jaxlib._hlo")
    scen = synthetic.build("no_markers", 1, 4, steps=steps, seed=7)
    path = tmp_path / "node0.xplane.pb"
    synthetic.write_xplane(scen, 0, path, markers=False)
    analysis = moeprof.analyze_paths([path])
    expected = _generator_windows(scen)
    assert len(expected) == 4 * steps
    assert _windows(analysis) == expected
    assert any(f"{steps} execution" in w and "fallback of spec §5" in w for w in analysis.warnings)
    # per-device figures over the whole trace: the generator's brute-force truth, to the ns
    truth = synthetic.truth(scen)
    got = {d.device: d for d in analysis.devices}
    for want in truth["devices"]:
        for key, value in want.items():
            if key != "device":
                assert getattr(got[want["device"]], key) == value, (want["device"], key)


def test_synthetic_markers_still_win(tmp_path):
    """With the Steps line written, steps are the markers (numbers and windows), with no fallback note."""
    pytest.importorskip("jaxlib._hlo")
    scen = synthetic.build("markers", 1, 2, steps=3, seed=7)
    path = tmp_path / "node0.xplane.pb"
    synthetic.write_xplane(scen, 0, path)
    analysis = moeprof.analyze_paths([path])
    assert {(s.step, s.start_ns, s.end_ns) for s in analysis.steps} == {
        (i, s, e) for i, (s, e) in enumerate(scen.steps[0])
    }
    assert not [w for w in analysis.warnings if "fallback" in w]


def test_launch_runs_follow_the_launching_thread():
    """Two host threads execute the module at overlapping times; each device's runs are the
    executions of the thread that launched its kernels, and a kernel launched outside every
    execution of that thread (a transfer) belongs to no run."""
    import pandas as pd

    from moeprof.core.steps import launch_module_runs

    executions = pd.DataFrame(
        {
            "line": [0, 0, 1, 1],
            "module": ["m"] * 4,
            "start_ns": [100, 300, 150, 320],
            "end_ns": [200, 400, 260, 420],
        }
    )
    events = pd.DataFrame(
        {
            "device": ["a", "a", "a", "a", "b", "b", "b"],
            "module": ["m", "m", "m", "m", "m", "m", "m"],
            "start_ns": [500, 520, 700, 1000, 510, 710, 900],
            "end_ns": [510, 530, 710, 1100, 600, 800, 950],
            # a: three launches in thread 0 (two in its first execution) and one outside it;
            # b: launches in thread 1's executions (150-260, 320-420), one also inside thread 0's
            "launch_ns": [110, 190, 310, 280, 160, 330, 250],
        }
    )
    runs = launch_module_runs(events, executions)
    got = sorted(zip(runs["device"], runs["start_ns"], runs["end_ns"], strict=True))
    assert got == [("a", 500, 530), ("a", 700, 710), ("b", 510, 950), ("b", 710, 800)]
    assert np.all(runs["module"] == "m")


def test_nsight_xla_module_ranges_delimit_steps(tmp_path):
    """An Nsight export of a JAX run without step ranges: XLA's XlaModule NVTX range around each
    execution's launches delimits it; a step is what one range launched on a GPU (copies included)."""
    scen = synthetic.build("nsys_modules", 1, 4, steps=3, seed=11)
    path = tmp_path / "node0.nsys.sqlite"
    synthetic.write_nsys_sqlite(scen, 0, path, xla_modules=True)
    analysis = moeprof.analyze_paths([path])
    expected: dict[tuple[int, int], tuple[int, int]] = {}
    for k in scen.kernels[0]:
        key = (k.device, synthetic.step_of(scen, 0, k.start))
        lo, hi = expected.get(key, (math.inf, -math.inf))
        expected[key] = (int(min(lo, k.start)), int(max(hi, k.start + k.dur)))
    assert len(expected) == 4 * 3
    assert _windows(analysis) == expected
    assert any("3 executions of module jit_train_step" in w for w in analysis.warnings)
    # without the module ranges there is no XLA module and no step
    plain = tmp_path / "plain.nsys.sqlite"
    synthetic.write_nsys_sqlite(scen, 0, plain)
    assert moeprof.analyze_paths([plain]).steps == ()
