"""Link split of exposed time, bandwidth, spread, HLO dependency bounds and device signals."""

from __future__ import annotations

import numpy as np
import pytest

import moeprof
from moeprof.core.classify import classify
from moeprof.core.events import make_table
from moeprof.core.hlo import parse_hlo_text
from moeprof.core.topology import attribute_links
from moeprof.core.trace import Trace
from moeprof.errors import InputError
from moeprof.insight.bandwidth import bus_factor, link_peaks
from moeprof.insight.dependency import independent_ops
from synthetic import gpu as synthetic

from .helpers import SAMPLES


@pytest.mark.slow
def test_exposed_split_by_link_matches_brute_force():
    scen = synthetic.build("synthetic_2host_4gpu", 2, 4, seed=2)
    result = moeprof.analyze_paths([SAMPLES / "synthetic_2host_4gpu"]).to_json()
    for dev in result["devices"]:
        host, gpu = int(dev["host"][4:]), int(dev["device"].rsplit(":", 1)[1])
        ks = [k for k in scen.kernels[host] if k.device == gpu]
        lo = min(k.start for k in ks)
        compute = np.zeros(max(k.start + k.dur for k in ks) - lo, dtype=bool)
        for k in ks:
            if k.bucket == "compute":
                compute[k.start - lo : k.start + k.dur - lo] = True
        each = [
            (int((~compute[k.start - lo : k.start + k.dur - lo]).sum()), k.ib_fraction)
            for k in ks
            if k.bucket == "comm"
        ]
        weight = sum(e for e, _ in each)
        want_ib = round(sum(e * f for e, f in each) * dev["exposed_comm_ns"] / weight)
        assert dev["exposed_comm_ib_ns"] == want_ib
        assert (
            dev["exposed_comm_nvlink_ns"] + dev["exposed_comm_ib_ns"] + dev["exposed_comm_unknown_link_ns"]
            == dev["exposed_comm_ns"]
        )


@pytest.mark.slow
def test_bus_bandwidth_by_hand():
    result = moeprof.analyze_paths([SAMPLES / "synthetic_2host_4gpu"], link_peaks=link_peaks("H100", None)).to_json()
    by = {c["name"]: c for c in result["collectives"]}
    a2a = by["all-to-all.1"]
    per_call = a2a["total_ns"] / a2a["count"]
    assert a2a["group_size"] == 8 and a2a["bytes_per_call"] == 128 * 64 * 4
    assert a2a["algo_bandwidth_gbps"] == pytest.approx(128 * 64 * 4 / per_call, rel=1e-3)
    assert a2a["bus_bandwidth_gbps"] == pytest.approx(128 * 64 * 4 / per_call * 7 / 8, rel=1e-3)
    assert a2a["link_peak_gbps"] == 50.0  # mixed all-to-all: bounded by its InfiniBand share
    ar = by["psum_invariant.4"]
    assert ar["group_size"] == 4 and ar["link_peak_gbps"] == 450.0
    assert ar["bus_bandwidth_gbps"] == pytest.approx(ar["algo_bandwidth_gbps"] * 2 * 3 / 4, rel=1e-3)
    assert ar["bandwidth_verdict"] == "latency-bound"
    assert bus_factor("all-gather", 8) == 7 / 8 and bus_factor("send-recv", 2) == 1.0


def test_link_peak_options():
    assert link_peaks(None, "nvlink=900,ib=xdr") == {"nvlink": 900.0, "ib": 100.0}
    assert link_peaks("NVIDIA H200", "ib=25") == {"nvlink": 450.0, "ib": 25.0}
    with pytest.raises(InputError):
        link_peaks(None, "nvlink=fast")
    with pytest.raises(InputError):
        link_peaks("A100X", None)


HLO = """HloModule m, num_partitions=2

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.0 = f32[] add(%x, %y)
}

ENTRY %main (a: f32[8], b: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %b = f32[8]{0} parameter(1)
  %pre = f32[8]{0} fusion(%a), kind=kLoop, calls=%add
  %a2a = f32[8]{0} all-to-all(%pre), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  %shared = f32[8]{0} fusion(%b), kind=kLoop, calls=%add
  %post = f32[8]{0} fusion(%a2a), kind=kLoop, calls=%add
  ROOT %out = f32[8]{0} add(%post, %shared)
}
"""


def test_independent_ops_from_the_dataflow_graph():
    module = parse_hlo_text(HLO)
    # %pre feeds the all-to-all, %post and %out consume it: only the shared expert is independent
    assert independent_ops(module, "a2a") == frozenset({"shared"})


def analyzed(table) -> dict:
    """The JSON analysis of a hand-built event table, through the same stages as a read trace."""
    devices = {str(d) for d in table["device"].unique()}
    trace = Trace(events=table, path="hand-built", format="nsys", device_kinds=dict.fromkeys(devices, "GPU"))
    return moeprof.analyze(attribute_links(classify(trace))).to_json()


def _table(rows: list[tuple], device: str = "node0/GPU:0") -> dict:
    names, starts, ends, activity, copy_kind, nbytes = zip(*rows)
    table = make_table(
        {
            "host": "node0",
            "device": device,
            "global_id": 0,
            "gpus_per_domain": 8,
            "stream": "s",
            "name": list(names),
            "start_ns": list(starts),
            "end_ns": list(ends),
            "activity": list(activity),
            "copy_kind": list(copy_kind),
            "bytes": list(nbytes),
            "source": "nsys",
        }
    )
    return analyzed(table)


def test_launch_gaps_and_small_gemms_and_copies():
    rows, t = [], 0
    for i in range(100):  # 100 small per-expert GEMMs with 5 µs gaps: launch-bound
        rows.append((f"sm90_xmma_gemm_bf16_{i % 4}", t, t + 8_000, "kernel", "", np.nan))
        t += 13_000
    rows.append(("Memcpy DtoH", t, t + 3_000, "memcpy", "DtoH", 8.0))  # a count read back: a sync
    t += 3_000
    rows.append(("Memcpy HtoD", t, t + 500_000, "memcpy", "HtoD", 64e6))  # offload, nothing overlaps it
    result = _table(rows)
    kinds = {o["kind"]: o for o in result["opportunities"]}
    assert kinds["launch-gaps"]["saving_bound_ns"] == 100 * 5_000  # 99 between GEMMs, 1 before the copy
    assert kinds["small-gemms"]["evidence"]["count"] == 100
    assert kinds["d2h-sync"]["saving_bound_ns"] == 3_000
    assert kinds["host-copies"]["saving_bound_ns"] == 500_000
    assert all(o["remedy"] for o in result["opportunities"])


def test_straggler_and_slow_step_in_spread():
    rows = []
    for d in range(4):
        compute = 200_000 if d == 2 else 100_000
        for step in range(3):
            base = step * 1_000_000
            rows.append((d, "gemm", base, base + compute, step))
            rows.append((d, "ncclDevKernel_AllReduce_RING_LL(x)", base + compute, base + 300_000, step))
    table = make_table(
        {
            "host": "node0",
            "device": [f"node0/GPU:{r[0]}" for r in rows],
            "global_id": [r[0] for r in rows],
            "gpus_per_domain": 4,
            "stream": "s",
            "name": [r[1] for r in rows],
            "start_ns": [r[2] for r in rows],
            "end_ns": [r[3] for r in rows],
            "activity": "kernel",
            "source": "nsys",
        }
    )
    result = analyzed(table)
    assert result["spread"]["straggler"]["device"] == "node0/GPU:2"
    assert result["spread"]["straggler"]["flagged"]


@pytest.mark.slow
def test_demo_capture_names_the_expert_exchange_with_an_hlo_bound():
    result = moeprof.analyze_paths([SAMPLES / "cpu_moe_8dev"]).to_json()
    # opportunities are shown by their §9 projected saving: the exchange is not the first one here
    top = next(o for o in result["opportunities"] if o["kind"] == "expert-exchange")
    assert "all-to-all" in top["name"]
    # the op-level all-to-alls count the same time as the exchange: merged into it, with their evidence
    assert not [o for o in result["opportunities"] if o["kind"] == "all-to-all"]
    a2a = [o for o in top["evidence"]["same_time_as"] if o["kind"] == "all-to-all"]
    assert a2a and all(o["bound_from"] == "hlo" for o in a2a)
    for o in a2a:
        assert o["saving_bound_ns"] <= o["evidence"]["independent_compute_ns"]
        assert o["saving_bound_ns"] <= o["exposed_ns"]


@pytest.mark.slow
def test_throughput_from_model_and_measured_steps():
    from moeprof.insight.flops import flops_per_token, load_model_config
    from moeprof.pipeline import with_throughput

    result = moeprof.analyze_paths([SAMPLES / "synthetic_2host_4gpu"])
    scen = synthetic.build("synthetic_2host_4gpu", 2, 4, seed=2)
    # the job's step (§5): the first start to the last end over both hosts (one clock in the generator), the mean
    # over the steps as throughput takes it (step_ns, the one step time)
    windows = [[scen.steps[h][i] for h in range(2)] for i in range(3)]
    spans = [max(e for _, e in w) - min(s for s, _ in w) for w in windows]
    step = round(sum(spans) / len(spans))
    result = with_throughput(result, "deepseek-v3", tokens_per_step=8192, seq_len=4096, gpu="H100", job_devices=64)
    tp = result.throughput
    assert tp is not None
    assert tp["step_ns"] == step == result.step_ns
    assert tp["tokens_per_second"] == pytest.approx(8192 / (step / 1e9))
    per_token = flops_per_token(load_model_config("deepseek-v3"), 4096).total
    assert tp["tflops_per_device"] == pytest.approx(tp["tokens_per_second"] * per_token / 64 / 1e12)
    assert tp["mfu"] == pytest.approx(tp["tflops_per_device"] / tp["peak_tflops"])
