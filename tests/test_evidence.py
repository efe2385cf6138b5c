"""Remedies from evidence (issue 39 item 3): each remedy names what it was checked against, says what the trace
shows already done as done, and asks what no trace can show. Hand-made Kineto documents whose every kernel is
placed here, and the real DeepSeek trace where it is present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import moeprof
from moeprof.insight.stack import stack_facts

from .helpers import shared_trace

CAST = "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>(__nv_bfloat16 const*)"
BF16_COPY = "void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>(int)"
LAYOUT = "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)"
NOTIFY = "void dpsk::ep::internode::notify_dispatch<false, 2>(int const*, long*)"
DISPATCH = "void dpsk::ep::internode::dispatch<false, 2, false, 8>(int4*, float*, long*, float*)"
COMBINE = "void dpsk::ep::internode::combine<false, 2, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)"
GEMM = "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>(Params)"


def _doc(before_layout: str, host_wait_us: float = 20_000.0) -> dict:
    """One rank of a 2-node EP16 job (8 GPUs per node): ``before_layout`` ends at 110 µs on the compute stream,
    DeepEP's layout, notify and dispatch follow on stream 27 (the dispatch under a grouped GEMM), a combine
    under another GEMM; the host's dispatch(F) range lasts ``host_wait_us``."""
    kernels = [  # (name, start µs, duration µs, stream)
        (before_layout, 100.0, 10.0, 7),
        (LAYOUT, 112.0, 3.0, 27),
        (NOTIFY, 115.0, 35.0, 27),
        (DISPATCH, 150.0, 250.0, 27),
        (GEMM, 150.0, 300.0, 7),
        (GEMM, 455.0, 40.0, 7),
        (COMBINE, 500.0, 200.0, 27),
        (GEMM, 498.0, 222.0, 7),
    ]
    events: list[dict] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 800.0},
        {"ph": "X", "cat": "user_annotation", "name": "dispatch(F)", "pid": 1, "tid": 1, "ts": 10.0,
         "dur": host_wait_us},
    ]  # fmt: skip
    for i, (name, ts, dur, stream) in enumerate(kernels):
        launch = {"correlation": 100 + i, "External id": 100 + i}
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": 20.0 + i, "dur": 0.5, "args": launch})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                       "args": {"device": 0, "stream": stream, **launch}})  # fmt: skip
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, "name": "NVIDIA H800"} for i in range(8)],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 16},
        "traceEvents": events,
    }


def _analyze(tmp_path: Path, doc: dict) -> dict:
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(doc))
    return moeprof.analyze_paths([path]).to_json()


def _by_kind(out: dict) -> dict[str, dict]:
    return {o["kind"]: o for o in out["opportunities"]}


def test_an_fp8_dispatch_is_said_as_done_and_the_cpu_wait_rules_out_a_whole_step_graph(tmp_path):
    out = _analyze(tmp_path, _doc(CAST))
    found = _by_kind(out)
    exchange = found["expert-exchange"]
    # hidden: the notify (35 µs) alone is exposed of 35 + 250 + 200 µs of exchange
    assert exchange["evidence"]["hidden_share"] == pytest.approx(1 - 35 / 485, abs=1e-4)
    assert exchange["remedy_id"] == "exchange-hidden-deepep-fp8"
    assert "already dispatches FP8" in exchange["remedy"] and "dispatch in FP8" not in exchange["remedy"]
    assert "cuda::per_token_cast_to_fp8_with_channels ends right before" in exchange["remedy"]
    assert "if your routing is not node-limited" in exchange["remedy"]  # asked, never stated as a fact
    checked = {c["check"]: c for c in exchange["remedy_checked"]}
    assert checked["fp8_dispatch"]["seen"] == "in use" and "1 of the 1 dispatch" in checked["fp8_dispatch"]["evidence"]
    assert checked["hidden_share"]["seen"] == pytest.approx(1 - 35 / 485)
    gaps = found["launch-gaps"]
    assert gaps["remedy_id"] == "gaps-host-waits-counts" and "Capture the step as a CUDA graph" not in gaps["remedy"]
    wait = {c["check"]: c for c in gaps["remedy_checked"]}["cpu_waits_for_counts"]
    assert "1 notify_dispatch call:" in wait["evidence"] and "dispatch(F) lasts up to 20.0 ms" in wait["evidence"]


def test_without_an_fp8_cast_before_the_dispatch_fp8_is_proposed(tmp_path):
    exchange = _by_kind(_analyze(tmp_path, _doc(BF16_COPY)))["expert-exchange"]
    assert exchange["remedy_id"] == "exchange-hidden-deepep"
    assert "dispatch in FP8" in exchange["remedy"]
    checked = {c["check"]: c for c in exchange["remedy_checked"]}
    assert checked["fp8_dispatch"] == {"check": "fp8_dispatch", "seen": "not seen"}


def test_the_internode_kernels_split_nvlink_and_rdma_by_the_nodes_they_name(tmp_path):
    """2 RDMA ranks of 8 GPUs: of a GPU's 15 peers, 8 are on the other node: 8/15 of the time over RDMA."""
    out = _analyze(tmp_path, _doc(CAST))
    (device,) = out["devices"]
    comm = 35_000 + 250_000 + 200_000
    assert device["comm_ns"] == comm
    assert device["comm_ib_ns"] == round(comm * 8 / 15) and device["comm_nvlink_ns"] == comm - round(comm * 8 / 15)
    assert {c["link"] for c in out["collectives"]} == {"mixed"}


def test_deepseek_remedies_follow_its_evidence():
    out = moeprof.analyze_paths([shared_trace("kineto/deepseek_v3_ep64_h800_rank0.json.gz")]).to_json()
    found = _by_kind(out)
    remedies = " ".join(o["remedy"] for o in out["opportunities"])
    assert "FP8 dispatch and node-limited routing" not in remedies
    assert "Capture the step as a CUDA graph" not in remedies
    assert found["expert-exchange"]["remedy_id"] == "exchange-hidden-deepep-fp8"
    assert found["launch-gaps"]["remedy_id"] == "gaps-host-waits-counts"
    assert "dispatch(F) lasts up to 23.1 ms" in found["launch-gaps"]["remedy"]
    # EP64 = 8 nodes of 8 GPUs: 56 of a GPU's 63 peers are on other nodes
    (device,) = out["devices"]
    assert device["comm_ib_ns"] == pytest.approx(device["comm_ns"] * 56 / 63, abs=1)


def test_low_latency_kernels_say_their_fp8_and_wait_for_nothing_on_the_host(tmp_path):
    """DeepEP's low-latency mode: its dispatch's first template argument (kUseFP8) is true, it sends every token
    over RDMA (link ib), and no notify_dispatch hands counts to the host: no host wait, no graph advice against."""
    doc = _doc(BF16_COPY)
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel" and event["name"] in (LAYOUT, NOTIFY):
            event["name"] = BF16_COPY
        elif event.get("name") == DISPATCH:
            event["name"] = "void deep_ep::internode_ll::dispatch<true, false, 7168>(void*, float*)"
        elif event.get("name") == COMBINE:
            event["name"] = "void deep_ep::internode_ll::combine<false, 7168, 9, 8>(void*, void*)"
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(doc))
    trace = moeprof.load([path])[0]
    facts = stack_facts(trace)
    assert facts["in_use"]["deepep_low_latency"] and not facts["in_use"]["deepep_normal"]
    assert (
        facts["in_use"]["fp8_dispatch"] and "internode_ll::dispatch<true, ...>: 1" in facts["evidence"]["fp8_dispatch"]
    )
    assert not facts["in_use"]["cpu_waits_for_counts"]
    out = moeprof.analyze_paths([path]).to_json()
    (device,) = out["devices"]
    assert device["comm_ib_ns"] == device["comm_ns"] == 250_000 + 200_000
    gaps = _by_kind(out).get("launch-gaps")
    assert gaps is None or gaps["remedy_id"] != "gaps-host-waits-counts"
