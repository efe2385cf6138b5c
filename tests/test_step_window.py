"""The step on the device (spec §5): a host marker's step is what it launched, its window the first start to the
last end of that on each device; a device-side marker (a TPU's Steps line) is the step as it is, idle between
programs included. One step time on every screen (the headline, JSON ``steps[]``/``spread``/``step_ns``, the
HTML step panel, every projection), and a replayed step keeps the idle its window holds at its edges."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli.main import app
from moeprof.core.steps import find_steps, job_step_windows, launched_windows
from moeprof.core.trace import make_markers
from moeprof.pipeline import Request, run
from moeprof.reports.text import duration
from synthetic.tpu import Chip, Op, write_xplane

from .helpers import shared_trace

runner = CliRunner()


def flat(text: str) -> str:
    """Text with every run of white space (the non-breaking one between a figure and its unit too) as one space."""
    return " ".join(text.split())


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def _launched(name: str, launch_us: float, ts_us: float, dur_us: float, corr: int, stream: int = 7) -> list[dict]:
    """A kernel and the cudaLaunchKernel call that shares its correlation id (launch on host thread 1)."""
    call = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch_us,
            "dur": 1.0, "args": {"correlation": corr}}  # fmt: skip
    return [call, _kernel(name, ts_us, dur_us, corr, stream)]


def _kernel(name: str, ts_us: float, dur_us: float, corr: int, stream: int = 7) -> dict:
    args = {"device": 0, "stream": stream, "correlation": corr}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts_us, "dur": dur_us, "args": args}


# ProfilerStep#1 on the host [0, 100) µs, #2 [100, 200); the GPU runs behind: A (launched at 10) [50, 90), B
# (launched at 60, in step 1) [120, 170) inside #2's range, C (launched at 150) [180, 260) past #2's end, D with no
# launch call (its correlation id matches none) [195, 205) on another stream, placed by its start: step 2
A, B, C, D = (50, 90), (120, 170), (180, 260), (195, 205)
STEP_1 = (A[0], B[1])  # 120 µs: what #1 launched
STEP_2 = (C[0], C[1])  # 80 µs: C, and D inside it


@pytest.fixture(scope="module")
def behind(tmp_path_factory: pytest.TempPathFactory) -> Path:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": s, "dur": 100.0}
        for n, s in ((1, 0.0), (2, 100.0))
    ]
    events += _launched(GEMM, 10.0, A[0], A[1] - A[0], 1)
    events += _launched(GEMM, 60.0, B[0], B[1] - B[0], 2)
    events += _launched(GEMM, 150.0, C[0], C[1] - C[0], 3)
    events.append(_kernel("void elementwise_kernel<128, 4>(int)", D[0], D[1] - D[0], 99, stream=9))
    path = tmp_path_factory.mktemp("behind") / "behind.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def test_a_host_step_is_what_it_launched_on_the_device(behind: Path) -> None:
    (trace,) = moeprof.load(behind)
    steps = find_steps(trace)
    got = [(int(s), int(lo), int(hi)) for s, lo, hi in zip(steps["step"], steps["start_ns"], steps["end_ns"])]
    assert got == [(1, STEP_1[0] * 1000, STEP_1[1] * 1000), (2, STEP_2[0] * 1000, STEP_2[1] * 1000)]


def test_one_step_time_on_every_screen(behind: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["analyze", str(behind), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    spans = [(STEP_1[1] - STEP_1[0]) * 1000, (STEP_2[1] - STEP_2[0]) * 1000]
    mean = round(float(np.mean(spans)))
    assert [s["span_ns"] for s in doc["steps"]] == spans
    assert [s["span_ns"] for s in doc["spread"]["steps"]] == spans
    assert doc["step_ns"] == mean
    # §4 per step over its window: step 1's holds A and B (90 µs of work), step 2's C and D
    assert [s["accumulated_ns"] for s in doc["steps"]] == [
        (A[1] - A[0] + B[1] - B[0]) * 1000,
        (C[1] - C[0] + D[1] - D[0]) * 1000,
    ]
    for p in doc["projections"]:
        assert p["step_ns"]["measured"] == mean
        assert [s["measured_ns"] for s in p["steps"]] in ([], spans)
    text = runner.invoke(app, ["analyze", str(behind)], env={"COLUMNS": "200"}).stdout
    assert flat(f"step {duration(mean)} (the job's, mean over steps)") in flat(text)
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(behind), "-o", str(out)])
    assert res.exit_code == 0, res.output
    body = html.unescape(out.read_text(encoding="utf-8").split('<script type="application/json"')[0])
    assert flat(f"step {duration(mean)} (the job's, mean over steps)") in flat(body)
    for n, span in zip((1, 2), spans, strict=True):
        assert f"step {n} · {span / 1e6:,.3f} ms" in body


def test_the_headline_puts_exposed_comm_per_step_beside_the_step(tmp_path: Path) -> None:
    """Two steps, each with one exposed all-reduce of 30 µs: the headline line says 30 µs per step, not the
    60 µs of the window, beside the step time."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": s, "dur": 100.0}
        for n, s in ((1, 0.0), (2, 100.0))
    ]
    for i, base in enumerate((0.0, 100.0)):
        events += _launched(GEMM, base + 1.0, base + 10.0, 40.0, 10 * i + 1)
        events += _launched("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", base + 2.0, base + 50.0, 30.0,
                            10 * i + 2)  # fmt: skip
    path = tmp_path / "two.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    text = flat(runner.invoke(app, ["analyze", str(path)], env={"COLUMNS": "200"}).stdout)
    said = (
        f"step {duration(70_000)} (the job's, mean over steps) · per device and step: exposed comm {duration(30_000)}"
    )
    assert flat(said) in text


def test_an_activity_belongs_to_one_step_and_one_number_is_one_step() -> None:
    """Host h: two processes' ranges of step 3 ([0, 100) and [10, 90)) are one step, then step 4 [100, 200). A
    kernel launched at 95 (inside step 3's first range only) belongs to step 3 though it runs at 205, inside
    #4's time; a kernel without a launch is placed by its start. Host g: a user's range numbered 6 nested in
    one numbered 5: a launch inside both belongs to 6, the one that started last; one after 6 ended, to 5."""
    markers = make_markers(
        host=["h", "h", "h", "g", "g"],
        device="",
        kind="step",
        name=["s3", "s3", "s4", "outer", "inner"],
        start_ns=[0, 10, 100, 0, 50],
        end_ns=[100, 90, 200, 300, 100],
        number=[3, 3, 4, 5, 6],
    )
    activity = pd.DataFrame(
        {
            "host": ["h"] * 5 + ["g"] * 2,
            "device": ["h/GPU:0", "h/GPU:0", "h/GPU:1", "h/GPU:1", "h/GPU:1", "g/GPU:0", "g/GPU:0"],
            "start_ns": [150, 300, 20, 205, 120, 400, 500],
            "end_ns": [160, 310, 30, 215, 125, 410, 510],
            "launch_ns": [50, 150, 5, 95, -1, 60, 200],
        }
    )
    got = launched_windows(markers, activity)
    rows = sorted(zip(got["device"], got["number"].tolist(), got["start_ns"].tolist(), got["end_ns"].tolist()))
    assert rows == [
        ("g/GPU:0", 5, 500, 510),
        ("g/GPU:0", 6, 400, 410),
        ("h/GPU:0", 3, 150, 160),
        ("h/GPU:0", 4, 300, 310),
        ("h/GPU:1", 3, 20, 215),
        ("h/GPU:1", 4, 120, 125),
    ]


def test_the_job_step_is_the_aligned_hull_of_its_devices_windows() -> None:
    steps = pd.DataFrame({"step": [0, 0, 1, 1], "device": ["a/X:0", "b/X:0", "a/X:0", "b/X:0"],
                          "start_ns": [100, 1_150, 300, 1_290], "end_ns": [200, 1_260, 400, 1_420]})  # fmt: skip
    got = job_step_windows(steps, {"b/X:0": 1_000})  # host b's clock is 1,000 ns ahead
    assert got.to_dict("list") == {"step": [0, 1], "start_ns": [100, 290], "end_ns": [260, 420]}


# ---------------------------------------------------------------- a TPU: the Steps line as it is

PERIOD, OPS, DUR, GAP, STEPS = 10_000, 4, 600, 100, 3
WORK = OPS * DUR + (OPS - 1) * GAP  # one program: 2,700 ns, then the chip idles until the next


@pytest.fixture(scope="module")
def host_bound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One chip, 3 programs a period apart (the host dispatches late): the Steps line tiles time, so steps 1
    and 2 hold the 7,300 ns the chip idles before them."""
    ops, modules = [], []
    for k in range(STEPS):
        t = 1_000 + k * PERIOD
        for i in range(OPS):
            n = 100 * k + i
            ops.append(Op(f"%fusion.{n} = f32[128]{{0}} fusion(f32[128]{{0}} %x)", t, DUR, "loop fusion"))
            t += DUR + GAP
        modules.append((1_000 + k * PERIOD, t - GAP))
    path = tmp_path_factory.mktemp("host_bound") / "tpuhost.xplane.pb"
    write_xplane(path, "tpuhost", [Chip(0, ops, [], modules)])
    return path


def test_a_tpu_step_holds_the_idle_between_programs(host_bound: Path) -> None:
    res = runner.invoke(app, ["analyze", str(host_bound), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    spans = [WORK] + [PERIOD] * (STEPS - 1)  # step 0 from program 0's start; each later from the previous end
    assert [s["span_ns"] for s in doc["steps"]] == spans
    assert doc["step_ns"] == round(float(np.mean(spans)))
    text = flat(runner.invoke(app, ["analyze", str(host_bound)], env={"COLUMNS": "200"}).stdout)
    assert flat(f"step {duration(doc['step_ns'])} (the job's, mean over steps)") in text


def test_a_replayed_tpu_step_keeps_its_idle(host_bound: Path) -> None:
    """Every op at half its length: each program shrinks by 1,200 ns; the idle between programs (launch gaps
    the replay keeps) stays, so steps 1 and 2 end 1,200 ns sooner than a period after the previous end; the
    unchanged replay gives back the Steps line."""
    state = run(Request(moeprof.load(host_bound)))
    assert state.projector is not None
    same = state.projector.project([])
    spans = [WORK] + [PERIOD] * (STEPS - 1)
    assert [s.measured_ns for s in same.steps] == spans and [s.projected_ns for s in same.steps] == spans
    half = state.projector.project(["scale()=0.5"])
    shrink = OPS * DUR // 2
    assert [s.projected_ns for s in half.steps] == [WORK - shrink] + [PERIOD - shrink] * (STEPS - 1)
    assert half.measured_step_ns == round(float(np.mean(spans)))
    # the projected timeline's steps are those windows too (what the HTML draws and measures)
    windows = state.projector.step_windows(["scale()=0.5"])
    assert (windows["end_ns"] - windows["start_ns"]).tolist() == [s.projected_ns for s in half.steps]


def test_deepseeks_step_is_its_kernels_first_start_to_last_end() -> None:
    """DeepSeek's published V3 rank: every kernel is launched inside ProfilerStep#1, the GPU runs up to ~17 ms
    behind: the step is its kernels' first start to last end, the same in steps[], spread, step_ns and on
    screen (it was the CPU range, 112.2 ms, in the step panel and 116.9 ms in the headline)."""
    path = shared_trace("kineto/deepseek_v3_ep64_h800_rank0.json.gz")
    (trace,) = moeprof.load(path)
    ev = trace.events
    want = int(ev["end_ns"].max() - ev["start_ns"].min())
    res = runner.invoke(app, ["analyze", str(path), "--json"])
    doc = json.loads(res.stdout)
    assert [s["span_ns"] for s in doc["steps"]] == [want] == [s["span_ns"] for s in doc["spread"]["steps"]]
    assert doc["step_ns"] == want
    text = flat(runner.invoke(app, ["analyze", str(path)], env={"COLUMNS": "200"}).stdout)
    assert flat(f"step {duration(want)} (the job's)") in text
