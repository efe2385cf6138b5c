"""moeprof's figures on the synthetic GPU samples equal the generator's brute-force truth, to the ns."""

from __future__ import annotations

import json

import numpy as np
import pytest

import moeprof
from moeprof.core.analysis import JSON_RATIOS, NS_KEYS
from moeprof.options import StepOptions
from synthetic import gpu as synthetic

from .helpers import SAMPLES
from .truth import assert_equals_truth

SCENARIOS = ["synthetic_1host_8gpu", "synthetic_2host_4gpu"]


def truth(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.truth.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", SCENARIOS)
def test_device_figures_match_truth(name):
    result = moeprof.analyze_paths([SAMPLES / name]).to_json()
    expected = truth(name)
    assert_equals_truth(result, expected)
    # ratios recomputed from the sums, never averaged
    t = expected["total"]
    assert result["total"]["comm_share"] == pytest.approx(t["comm_ns"] / t["accumulated_ns"])
    assert result["total"]["exposed_comm_fraction"] == pytest.approx(t["exposed_comm_ns"] / t["span_ns"])


@pytest.mark.slow
@pytest.mark.parametrize("name", SCENARIOS)
def test_collectives_match_truth(name):
    result = moeprof.analyze_paths([SAMPLES / name]).to_json()
    got = {c["name"]: c for c in result["collectives"]}
    for want in truth(name)["collectives"]:
        row = got[want["name"]]
        assert row["kind"] == want["kind"]  # from the HLO opcode, not the NCCL kernel name
        assert (row["count"], row["total_ns"], row["exposed_ns"]) == (
            want["count"],
            want["total_ns"],
            want["exposed_ns"],
        )
        assert row["ib_fraction"] == pytest.approx(want["ib_fraction"])


@pytest.mark.slow
def test_two_host_link_split():
    by_name = {c["name"]: c for c in moeprof.analyze_paths([SAMPLES / "synthetic_2host_4gpu"]).to_json()["collectives"]}
    assert by_name["all-to-all.1"]["ib_fraction"] == pytest.approx(4 / 7)
    assert by_name["all-to-all.1"]["link"] == "mixed"
    assert by_name["all-gather.2"]["link"] == "ib"
    assert by_name["psum_invariant.4"]["link"] == "nvlink"
    assert by_name["psum_invariant.4"]["kind"] == "all-reduce"


@pytest.mark.slow
def test_chrome_json_matches_truth():
    """The xprof trace-viewer JSON of the same host: µs floats rounded to the nearest ns."""
    result = moeprof.analyze_paths([SAMPLES / "synthetic_1host_8gpu.trace.json.gz"]).to_json()
    expected = truth("synthetic_1host_8gpu")
    for key, value in expected["total"].items():
        assert abs(result["total"][key] - value) <= 1_000, key  # ±1 µs where JSON rounding applies
    assert result["total"]["accumulated_ns"] == expected["total"]["accumulated_ns"]


def _brute_force_step(scen, host: int, device: int, window: tuple[int, int]) -> dict:
    lo, hi = window
    compute = np.zeros(hi - lo, dtype=bool)
    comm = np.zeros(hi - lo, dtype=bool)
    accumulated = 0
    for k in scen.kernels[host]:
        if k.device != device:
            continue
        a, b = max(k.start, lo), min(k.start + k.dur, hi)
        if b <= a:
            continue
        accumulated += b - a
        if k.bucket == "compute":
            compute[a - lo : b - lo] = True
        elif k.bucket == "comm":
            comm[a - lo : b - lo] = True
    return {"accumulated_ns": accumulated, "exposed_comm_ns": int((comm & ~compute).sum()), "span_ns": hi - lo}


@pytest.mark.slow
def test_steps_and_step_selection():
    scen = synthetic.build("synthetic_2host_4gpu", 2, 4, seed=2)
    result = moeprof.analyze_paths([SAMPLES / "synthetic_2host_4gpu"]).to_json()
    assert sorted({s["step"] for s in result["steps"]}) == [0, 1, 2]
    for s in result["steps"]:
        host = int(s["host"][len("node") :])
        device = int(s["device"].rsplit(":", 1)[1])
        want = _brute_force_step(scen, host, device, scen.steps[host][s["step"]])
        assert {k: s[k] for k in want} == want
    # --steps 1:3 measures the union of steps 1 and 2 only
    sel = moeprof.analyze_paths([SAMPLES / "synthetic_2host_4gpu"], step_options=StepOptions("1:3")).to_json()
    dev = sel["devices"][0]
    w1 = _brute_force_step(scen, 0, 0, scen.steps[0][1])
    w2 = _brute_force_step(scen, 0, 0, scen.steps[0][2])
    assert dev["accumulated_ns"] == w1["accumulated_ns"] + w2["accumulated_ns"]
    assert dev["span_ns"] == w1["span_ns"] + w2["span_ns"]
    assert dev["exposed_comm_ns"] == w1["exposed_comm_ns"] + w2["exposed_comm_ns"]
    skip = moeprof.analyze_paths([SAMPLES / "synthetic_2host_4gpu"], step_options=StepOptions(skip_first=1)).to_json()
    assert skip["devices"][0]["accumulated_ns"] == dev["accumulated_ns"]


def test_figures_have_every_spec_key():
    result = moeprof.analyze_paths([SAMPLES / "synthetic_1host_8gpu"]).to_json()
    for dev in result["devices"]:
        assert set(NS_KEYS) | set(JSON_RATIOS) | {"device", "host"} <= set(dev)
        assert dev["compute_ns"] + dev["comm_ns"] + dev["memcpy_ns"] + dev["other_ns"] == dev["accumulated_ns"]
        assert dev["comm_nvlink_ns"] + dev["comm_ib_ns"] + dev["comm_unknown_link_ns"] == dev["comm_ns"]


def test_generator_is_deterministic(tmp_path):
    """The committed samples are what the generator writes today (same truth)."""
    pytest.importorskip("jaxlib._hlo")
    synthetic.write_samples(tmp_path)
    for name in SCENARIOS:
        assert json.loads((tmp_path / f"{name}.truth.json").read_text()) == truth(name)


def _by_position(devices: list[dict]) -> list[dict]:
    return sorted(devices, key=lambda d: d["device"])


def test_nsight_sqlite_version_matches_truth():
    """The same host as an Nsight Systems export: integer ns, kinds from NVTX and names."""
    result = moeprof.analyze_paths([SAMPLES / "synthetic_1host_8gpu.nsys.sqlite"]).to_json()
    expected = truth("synthetic_1host_8gpu")
    for got, want in zip(_by_position(result["devices"]), expected["devices"]):
        assert got["device"] == want["device"]
        assert {k: got[k] for k in want if k != "device"} == {k: v for k, v in want.items() if k != "device"}
    kinds = {c["kind"]: c["count"] for c in result["collectives"]}
    assert kinds == {"all-to-all": 96, "all-gather": 96, "reduce-scatter": 96, "all-reduce": 96}


@pytest.mark.slow
def test_kineto_version_matches_truth():
    """The 2-host job as 8 Kineto rank files: µs floats, collective metadata on kernels or on the
    launching record_param_comms, process-group ranks for the link split, ProfilerStep#N steps."""
    result = moeprof.analyze_paths([SAMPLES / "synthetic_2host_4gpu_kineto"]).to_json()
    expected = truth("synthetic_2host_4gpu")
    by_rank = {d["device"]: d for d in result["devices"]}
    for want in expected["devices"]:
        host, gpu = int(want["device"][4]), int(want["device"].rsplit(":", 1)[1])
        got = by_rank[f"rank{host * 4 + gpu}/GPU:{gpu}"]
        for key, value in want.items():
            if key != "device":
                assert got[key] == value, (got["device"], key)
    ib = {c["kind"]: c["ib_fraction"] for c in result["collectives"]}
    assert ib["all-to-all"] == pytest.approx(4 / 7) and ib["all-gather"] == 1.0 and ib["all-reduce"] == 0.0
    assert sorted({s["step"] for s in result["steps"]}) == [0, 1, 2]


@pytest.mark.slow
def test_step_marker_finds_user_named_nvtx_ranges():
    """The Nsight sample's own ranges ("train_iteration") match no built-in step pattern; named with
    --step-marker they become the steps: on each GPU, what each range launched (spec §5: a launch call
    returns 19 µs before its kernel starts, in the generator), from its first start to its last end."""
    from moeprof.options import LoadOptions

    path = SAMPLES / "synthetic_1host_8gpu.nsys.sqlite"
    assert moeprof.analyze_paths([path]).to_json()["steps"] == []
    marked = moeprof.analyze_paths(
        [path], LoadOptions(step_marker="train_iteration"), StepOptions(marker="train_iteration")
    ).to_json()
    scen = synthetic.build("synthetic_1host_8gpu", 1, 8, seed=1)
    want = set()
    for lo, hi in scen.steps[0]:
        for gpu in range(8):
            mine = [k for k in scen.kernels[0] if k.device == gpu and lo <= k.start - 19_000 < hi]
            want.add((f"{synthetic.host_name(scen, 0)}/GPU:{gpu}", min(k.start for k in mine),
                      max(k.start + k.dur for k in mine)))  # fmt: skip
    assert {(s["device"], s["start_ns"], s["end_ns"]) for s in marked["steps"]} == want
