"""The report's first lines (issue 39 item 2): the biggest lever, stated as an action; what is already done said
as done; the largest bucket named whatever it is; exposure at a capture's edges named as such; a trace that
cannot time its step says so. Hand-made Kineto documents whose every event is placed here, and the real
shared traces where they are present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli.main import app
from moeprof.core.names import said
from moeprof.core.summary import verdict
from moeprof.reports.text import duration, pct, verdict_lines

from .helpers import assert_refused, shared_trace

runner = CliRunner()
CAPTURED = 546  # as in a peer's sglang decode trace on ROCm: the graph's launches, recorded, never run


def _call(name: str, ts: float, corr: int, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 0.5,
            "args": {"correlation": corr, "External id": corr}}  # fmt: skip


def _kernel(name: str, ts: float, dur: float, corr: int) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr, "External id": corr}}  # fmt: skip


def graph_capture_doc(kernels: int = 2) -> dict:
    """A decode step's HIP graph capture: hipStreamBeginCapture, CAPTURED launches (they record the graph: no
    kernel runs for them), hipStreamEndCapture; then ``kernels`` launches that ran, 5 µs each."""
    events: list[dict] = [_call("hipStreamBeginCapture", 100.0, 1)]
    events += [_call("hipLaunchKernel", 101.0 + i, 1000 + i) for i in range(CAPTURED)]
    events.append(_call("hipStreamEndCapture", 700.0, 2))
    events.append(_call("hipGraphInstantiate", 701.0, 3))
    for i in range(kernels):
        events.append(_call("hipLaunchKernel", 710.0 + i, 5000 + i))
        events.append(_kernel(f"void rms_norm_kernel<{i}>(float*)", 720.0 + 6 * i, 5.0, 5000 + i))
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X"}], "traceEvents": events}


def _write(tmp: Path, doc: dict, name: str = "decode.pt.trace.json") -> Path:
    path = tmp / name
    path.write_text(json.dumps(doc))
    return path


def test_a_graph_capture_says_it_cannot_time_the_step(tmp_path):
    path = _write(tmp_path, graph_capture_doc())
    result = moeprof.analyze_paths([path])
    launches = result.to_json()["launches"]
    assert launches == {
        "kernel_launches": CAPTURED + 2,
        "without_activity": CAPTURED,
        "captured": CAPTURED,
        "captured_without_activity": CAPTURED,
        "capture_api": "hipStreamBeginCapture",
    }
    v = verdict(result)
    (line,) = verdict_lines(v)
    assert line.startswith("This trace cannot time a step: it recorded a graph capture.")
    assert f"{CAPTURED} kernel launches lie inside hipStreamBeginCapture … hipStreamEndCapture" in line
    assert "and 2 kernels ran" in line and "hipGraphLaunch" in line
    res = runner.invoke(app, ["analyze", str(path)], terminal_width=200)
    assert res.exit_code == 0, res.output
    head = "\n".join(res.output.splitlines()[:4])
    assert "cannot time a step" in head and "compute 100" not in head and "step 11" not in head
    assert "step: not timed" in head


def test_launches_that_ran_are_answered_as_before(tmp_path):
    """More kernels ran than launches lost: the trace answers (the capture is a warning-free detail)."""
    result = moeprof.analyze_paths([_write(tmp_path, graph_capture_doc(kernels=CAPTURED + 10))])
    assert verdict(result).cannot_answer is None
    assert not verdict_lines(verdict(result))[0].startswith("This trace cannot")


def test_a_capture_with_no_kernel_at_all_is_refused_naming_it(tmp_path):
    path = _write(tmp_path, graph_capture_doc(kernels=0))
    assert_refused(path, "recorded a graph capture", f"{CAPTURED:,} kernel launches", "hipStreamBeginCapture")


@pytest.mark.parametrize(
    ("name", "spoken"),
    [
        ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>(Params)",
         "m_grouped_fp8_ptp128c::GemmKernel"),
        ("void cutlass::device_kernel<flash::FlashAttnBwd<flash::Mainloop<2>, 1> >(flash::FlashAttnBwd<2>::Params)",
         "flash::FlashAttnBwd"),
        ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8>(int4*, float*)", "internode::combine"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_SendRecv"),
        ("fusion.12", "fusion.12"),
        ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
         "multimem_all_reduce_kernel"),
    ],
)  # fmt: skip
def test_kernel_labels(name, spoken):
    assert said(name) == spoken


# ---------------------------------------------------------------- the shared traces


def _lines(relative: str) -> tuple[list[str], object]:
    result = moeprof.analyze_paths([shared_trace(relative)])
    return verdict_lines(verdict(result)), result


def test_deepseek_says_the_exchange_is_hidden_names_the_edges_and_what_bounds_the_step():
    lines, result = _lines("kineto/deepseek_v3_ep64_h800_rank0.json.gz")
    where, first = lines
    hidden = 1 - sum(c.exposed_ns for c in result.collectives) / sum(c.total_ns for c in result.collectives)
    assert f"{pct(hidden)} of it already under compute" in where and pct(hidden) == "96.3%"
    edges = result.edges
    assert f"{duration(edges['exposed_ns'])} of it" in where and "at the capture's edges" in where
    assert "the first internode::cached_notify and the last internode::combine" in where
    b = result.step_bound
    assert b.cause == "compute" and {op.stream for op in b.ops} == {"stream 7"}
    assert first.startswith("First try: speed up the compute that bounds the step")
    assert f"{pct(b.share)} of its critical path is compute on rank0/GPU:0 stream 7" in first
    assert said(b.ops[0].name) in first and "m_grouped_fp8_ptp128c::GemmKernel" in first
    assert "opportunity 1 (expert dispatch/combine exchange dominates communication) is already 96.3% hidden" in first


def test_memcpy_is_named_where_it_is_the_time():
    lines, result = _lines("nsys/h100_2gpu_1s.sqlite")
    t = result.total
    memcpy = pct(t.memcpy_ns / t.accumulated_ns)
    assert lines[0].startswith(f"No communication between devices in this trace: memcpy is {memcpy}")
    # the copies outweigh the compute beside them (issue 49): fewer bytes, what the projection takes away
    assert lines[1].startswith("First try: move fewer bytes between host and device — projected to save")


def test_host_idle_on_one_chip_comes_before_a_local_copy():
    """The one-chip demo: 63.5% of the chip's span idle between its programs comes first, not the 14.8 µs
    one-chip all-to-all (a copy inside the chip now)."""
    lines, result = _lines("tpu/demo_v5e_1chip.xplane.pb")
    assert lines[0].startswith("No communication between chips in this trace: the chip is idle 63.5% of its span")
    assert lines[1].startswith("First try: let the host dispatch the next step ahead of the device")
    kinds = [o.kind for o in result.opportunities]
    assert kinds[0] == "host-gaps" and kinds.index("host-gaps") < kinds.index("local-collectives")
    # weighed like the rest (issue 46): its saving is the replay with the gaps between programs closed, here all
    # of them (the steps' end moves by the idle between the 5 programs, 4 gaps of it), not its §6 bound
    host = result.opportunities[0]
    assert host.projected_saving_ns == round(host.exposed_ns / len({s.step for s in result.steps}))
    assert f"projected to save {duration(host.projected_saving_ns)} of the" in lines[1]
