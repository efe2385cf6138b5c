"""The synthetic 2-slice TPU job (issue 31 item 8): moeprof's figures equal the generator's brute-force truth.

Two hosts, one slice of 4 TPU v5e chips each; ICI collectives within a slice (ragged-all-to-all dispatch, async
all-to-all combine, all-gather-start/done, async reduce-scatter), the gradient all-reduce across slices over DCN
(send ... recv-done on the chip, the action graph on the Megascale plane), one slow chip, the second host's clock
ahead. The truth (``sample_traces/synthetic_tpu_2slice.truth.json``) is computed by ``synthetic.tpu_multislice``
from its own intervals; the tests here compare ``moeprof analyze`` (JSON and terminal) with it, the §9 projections
with the job simulated again with each change, and check the files hold what the job ran, decoding them with the
protobuf schema only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli.main import app
from moeprof.pipeline import Request, Result, run
from moeprof.readers.xspace_proto import messages
from synthetic import tpu_multislice as tpu

from .helpers import SAMPLES
from .truth import assert_equals_truth

SAMPLE = SAMPLES / tpu.NAME
SLOW = tpu.device_name(tpu.SLOW_CHIP)
DCN_WHAT_IF = tpu.CHANGES["half-dcn"][0]
# the projection against the job simulated again: per step within this share of the rerun's step
# (the replay is a model of the job: see docs/synthetic-tpu.md for what separates the two)
PROJECTION_TOLERANCE = 0.005
runner = CliRunner()


@pytest.fixture(scope="module")
def truth() -> dict:
    return json.loads((SAMPLES / tpu.TRUTH_NAME).read_text())


def _analyze_json(*options: str) -> dict:
    res = runner.invoke(app, ["analyze", str(SAMPLE), "--json", *options])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def result() -> dict:
    """``moeprof analyze SAMPLE --slice-size 4 --json --what-if <the DCN transfer halved>``."""
    return _analyze_json("--slice-size", str(tpu.CHIPS), "--what-if", DCN_WHAT_IF)


@pytest.fixture(scope="module")
def state() -> Result:
    return run(Request(moeprof.load(SAMPLE)))


def _space(path: Path):
    space = messages()["XSpace"]()
    space.ParseFromString(path.read_bytes())
    return space


def _stat_value(stat):
    return getattr(stat, stat.WhichOneof("value"))


# ---------------------------------------------------------------- the generator and its files


def test_generator_is_deterministic(tmp_path: Path, truth: dict) -> None:
    """The committed sample is what the generator writes today, byte for byte."""
    pytest.importorskip("jaxlib._hlo")
    written = tpu.write_samples(tmp_path)
    for path in written:
        committed = SAMPLES / path.relative_to(tmp_path)
        assert path.read_bytes() == committed.read_bytes(), committed
    assert json.loads((tmp_path / tpu.TRUTH_NAME).read_text()) == truth


def test_files_hold_what_the_job_ran() -> None:
    """Decoded with the protobuf schema alone: each chip's XLA Ops events are the simulated ops on the host's
    clock (whole HLO expressions, display names the short names), each Async XLA Ops event spans its -start's
    start to its -done's end, the Steps and XLA Modules lines are the runs, the Megascale plane has one action
    graph per chip and step."""
    job = tpu.simulate()
    for h, host in enumerate(tpu.HOSTS):
        space = _space(SAMPLE / f"{host}.xplane.pb")
        assert list(space.hostnames) == [host]
        offset = tpu.CLOCK_OFFSET_NS[h]
        planes = {p.name: p for p in space.planes}
        assert {"/host:metadata", "/host:CPU", "/device:CUSTOM:Megascale Trace", "Task Environment"} <= set(planes)
        for c in range(tpu.CHIPS):
            chip = job.chips[h * tpu.CHIPS + c]
            plane = planes[f"/device:TPU:{c}"]
            names = {v.name: k for k, v in plane.stat_metadata.items()}
            stats = {plane.stat_metadata[st.metadata_id].name: _stat_value(st) for st in plane.stats}
            assert stats["peak_teraflops_per_second"] == tpu.PEAK_TFLOPS
            assert stats["device_type_string"] == "TPU v5 Lite"
            lines = {line.name: line for line in plane.lines}
            assert [line.name for line in plane.lines] == [
                "_counters_", "Steps", "XLA Modules", "XLA Ops", "Async XLA Ops", "TC Overlay", "_counters_",
            ]  # fmt: skip
            ops = [
                (plane.event_metadata[e.metadata_id], e.offset_ps // 1000, (e.offset_ps + e.duration_ps) // 1000)
                for e in lines["XLA Ops"].events
            ]
            assert [(m.display_name, s, e) for m, s, e in ops] == [
                (ev.op.name, ev.start + offset, ev.end + offset) for ev in chip.events
            ]
            assert all(m.name.startswith(f"%{m.display_name} = ") for m, _, _ in ops)
            # the category, program id and scope ride on the event metadata
            meta = {plane.stat_metadata[st.metadata_id].name: _stat_value(st) for st in ops[0][0].stats}
            assert meta["program_id"] == tpu.PROGRAM_ID > 2**63 and meta["hlo_category"] == "copy-start"
            pairs = []
            for e in lines["Async XLA Ops"].events:
                st = {plane.stat_metadata[x.metadata_id].name: _stat_value(x) for x in e.stats}
                pairs.append((st["hlo_op"], e.offset_ps // 1000, (e.offset_ps + e.duration_ps) // 1000))
                assert (
                    st["device_offset_ps"] == e.offset_ps - tpu.HOST_SKEW_PS and st["_a"] == 1 and st["flow"] & 3 == 3
                )
            by_op = {(ev.op.name, ev.step): ev for ev in chip.events}
            expected = []
            for ev in chip.events:
                if ev.op.async_display and ev.op.role in ("start", "memcpy"):
                    done = by_op[(ev.op.pair, ev.step)]
                    expected.append((done.op.name, ev.start + offset, done.end + offset))
            assert pairs == expected
            assert "send.47" not in {p[0] for p in pairs}  # DCN sends are not async ops on the chip
            runs = [(e.offset_ps // 1000, (e.offset_ps + e.duration_ps) // 1000) for e in lines["XLA Modules"].events]
            assert runs == [(s + offset, e + offset) for s, e in chip.runs]
            steps = [(e.offset_ps // 1000, (e.offset_ps + e.duration_ps) // 1000) for e in lines["Steps"].events]
            assert steps == tpu.step_windows(job, h * tpu.CHIPS + c)
            assert "hlo_op" in names and "tf_op" in names
        mega = planes["/device:CUSTOM:Megascale Trace"]
        keys = set()
        for line in mega.lines:
            for e in line.events:
                for st in e.stats:
                    if mega.stat_metadata[st.metadata_id].name == "graph_key":
                        keys.add(st.str_value)
        assert len(keys) == tpu.CHIPS * tpu.STEPS
        assert all(re.fullmatch(r"device_\d+_gid_all-reduce\.49_47\$\d+\^i\d+", k) for k in keys)


def test_hlo_in_the_metadata_plane_names_the_groups() -> None:
    """The module's HLO (in /host:metadata) is valid XLA: async wrappers' replica groups live in the wrapped
    computation (the XLA Ops name of an async-start has none); the DCN send carries its rendezvous."""
    hlo = pytest.importorskip("jaxlib._hlo")
    text = hlo.hlo_module_from_text(tpu.hlo_text()).to_string()
    assert "all-to-all(" in tpu.hlo_text() and "replica_groups={{0,1,2,3},{4,5,6,7}}" in text
    start = tpu.expression(tpu.BY_NAME["all-to-all-start.16"])
    assert "async-start(" in start and "replica_groups" not in start
    assert '_xla_host_transfer_rendezvous="all-reduce.49_47"' in tpu.expression(tpu.BY_NAME["send.47"])


def test_truth_is_consistent(truth: dict) -> None:
    """The truth's own sums hold: buckets add up, the ledger splits comm and exposed comm, links add up; the
    slow chip is the job's top straggler by caused wait, the clock offset is found, every instance counted."""
    for dev in truth["devices"]:
        assert dev["compute_ns"] + dev["comm_ns"] + dev["memcpy_ns"] + dev["other_ns"] == dev["accumulated_ns"]
        assert dev["comm_wait_ns"] + dev["comm_transfer_ns"] + dev["comm_unmatched_ns"] == dev["comm_ns"]
        exposed = dev["exposed_wait_ns"] + dev["exposed_transfer_ns"] + dev["exposed_unmatched_ns"]
        assert exposed == dev["exposed_comm_ns"]
        assert dev["busy_ns"] + dev["idle_ns"] == dev["span_ns"]
        assert dev["comm_nvlink_ns"] + dev["comm_ib_ns"] == dev["comm_ns"] > dev["comm_ib_ns"] > 0
    slice1 = [d for d in truth["devices"] if d["device"].startswith(tpu.HOSTS[1])]
    assert max(slice1, key=lambda d: d["straggler_count"])["device"] == truth["slow_device"]
    offset = truth["ledger"]["clock_offsets_ns"][tpu.HOSTS[1]]
    assert abs(offset - tpu.CLOCK_OFFSET_NS[1]) < 2_000
    per_step = (tpu.LAYERS * 2 + 2) * len(tpu.ICI_GROUPS) + len(tpu.DCN_GROUPS)
    assert truth["ledger"]["instances"] == per_step * tpu.STEPS


# ---------------------------------------------------------------- moeprof against the truth


def test_device_figures_match_truth(result: dict, truth: dict) -> None:
    """Spec §4 and the §8 ledger per chip and in total, to the ns: busy, idle, comm, exposed comm, ICI (scale-up,
    within a slice) and DCN (scale-out, across slices), wait and transfer, stragglers and the wait they caused."""
    assert_equals_truth(result, truth)
    t = truth["total"]
    assert result["total"]["comm_share"] == pytest.approx(t["comm_ns"] / t["accumulated_ns"])
    assert {k: result["hardware"][k] for k in ("accelerator", "scale_up", "scale_out")} == {
        "accelerator": "TPU",
        "scale_up": "ICI",
        "scale_out": "DCN",
    }


def test_slice_size_from_the_option_else_one_host(result: dict, truth: dict) -> None:
    """The capture is multi-slice (its Megascale plane holds DCN traffic) and does not say a slice's size: without
    --slice-size one host's chips (4 here) are a slice and a warning asks for the option; with it, no warning.
    Either way the figures are the truth's."""
    assert not any("--slice-size" in w for w in result.get("warnings", []))
    guessed = _analyze_json()
    assert any("--slice-size" in w and "Megascale" in w for w in guessed["warnings"])
    assert_equals_truth(guessed, truth)


def test_ledger_matches_truth(result: dict, truth: dict) -> None:
    """Instances matched across the 8 chips (ICI groups of 4, DCN pairs {c, c+4}), the second host's clock found
    from the DCN all-reduces, and the slow chip first among the last to arrive."""
    want = truth["ledger"]
    got = result["ledger"]
    assert (got["instances"], got["incomplete"], got["desynchronized"]) == (
        want["instances"],
        want["incomplete"],
        want["desynchronized"],
    )
    assert got["clock_offsets_ns"] == want["clock_offsets_ns"]
    assert got["unaligned_hosts"] == []
    by_caused = max(truth["devices"], key=lambda d: d["caused_wait_ns"])
    assert by_caused["device"] == SLOW
    top = got["stragglers"][0]
    assert (top["device"], top["straggler_count"], top["caused_wait_ns"]) == (
        SLOW,
        by_caused["straggler_count"],
        by_caused["caused_wait_ns"],
    )


def test_collectives_match_truth(result: dict, truth: dict) -> None:
    """Kinds from the opcode (async wrappers resolved in the module's HLO; the DCN send ... recv-done one
    collective, its kind from the rendezvous), time, exposed time, wait and transfer per collective, ICI within a
    slice and DCN across."""
    got = {c["name"]: c for c in result["collectives"]}
    assert set(got) == {c["name"] for c in truth["collectives"]}
    for want in truth["collectives"]:
        row = got[want["name"]]
        assert {k: row[k] for k in ("kind", "count", "total_ns", "exposed_ns", "wait_ns", "transfer_ns")} == {
            k: want[k] for k in ("kind", "count", "total_ns", "exposed_ns", "wait_ns", "transfer_ns")
        }, want["name"]
        assert row["ib_fraction"] == pytest.approx(want["ib_fraction"])
        assert row["link"] == ("ib" if want["ib_fraction"] == 1 else "nvlink")


def test_steps_match_truth(result: dict, truth: dict) -> None:
    """Each chip's Steps windows (end of one run to the end of the next) and its §4 figures in each."""
    got = {(s["step"], s["device"]): s for s in result["steps"]}
    assert len(got) == len(truth["steps"])
    for want in truth["steps"]:
        step = got[(want["step"], want["device"])]
        for key, value in want.items():
            assert step[key] == value, (want["step"], want["device"], key)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def test_terminal_shows_the_truth(truth: dict) -> None:
    """The terminal's per-chip table (comm ICI, comm DCN, idle, exposed comm, in ms), the clock offset and the
    slow chip first among the last to arrive, each from the truth."""
    res = runner.invoke(app, ["analyze", str(SAMPLE), "--slice-size", str(tpu.CHIPS)], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "comm ICI" in res.output and "comm DCN" in res.output and "NVLink" not in res.output
    steps = len({s["step"] for s in truth["steps"]})  # the table's times are per step (issue 49), to the ns
    for dev in truth["devices"]:
        row = next(line for line in res.output.splitlines() if line.strip().startswith(dev["device"] + " "))
        cells = row.split()
        figures = [_ms(round(dev[k] / steps)) for k in ("comm_nvlink_ns", "comm_ib_ns", "idle_ns", "exposed_comm_ns")]
        assert [cells[3], cells[4], cells[6], cells[8]] == figures, row
    offset = truth["ledger"]["clock_offsets_ns"][tpu.HOSTS[1]]
    assert f"({tpu.HOSTS[1]} +{offset / 1e6:.2f} ms)" in " ".join(res.output.split())
    arrivals = res.output.split("Last to arrive", 1)[1].splitlines()
    first = next(line for line in arrivals if line.strip().startswith(tpu.HOSTS))
    caused = next(d for d in truth["devices"] if d["device"] == SLOW)["caused_wait_ns"]
    assert first.split()[0] == SLOW and first.split()[-1] == _ms(caused / steps)


# ---------------------------------------------------------------- the projection (spec §9)


def test_replay_reproduces_the_measured_job(state: Result, truth: dict) -> None:
    """Unchanged, the replay gives back every measured step time (the truth's, aligned by the found offset)."""
    job_state = state
    assert job_state.projector is not None
    projection = job_state.projector.project([])
    measured = [s.measured_ns for s in projection.steps]
    assert [s.projected_ns for s in projection.steps] == measured
    # the job's step spans, aligned: within the few ns the found clock offset differs from the true one
    drift = abs(truth["ledger"]["clock_offsets_ns"][tpu.HOSTS[1]] - tpu.CLOCK_OFFSET_NS[1])
    assert np.allclose(measured, truth["step_ns"], atol=drift, rtol=0)


def _rerun(change: str) -> list[int]:
    return tpu.simulate("fix-slow-chip" if change == "balance" else change).step_times()


@pytest.mark.parametrize("change", [*(c for c in tpu.CHANGES if c != "none"), "balance"])
def test_projection_equals_the_rerun_job(state: Result, change: str) -> None:
    """Each change projected from the measured TPU job (``balance``: every chip as fast as the median one; the
    others the --what-if terms of :data:`CHANGES`: the slow chip fixed, the all-to-all transfers halved, the DCN
    transfer halved or taken away) against the job simulated again with it, step by step; the change matters far
    more than the difference."""
    analysis, job_state = state.analysis, state
    assert job_state.projector is not None
    if change == "balance":
        projection = analysis.projections[0]
        assert projection.what_if == ("balance",)
    else:
        projection = job_state.projector.project(tpu.CHANGES[change])
    rerun = _rerun(change)
    projected = [s.projected_ns for s in projection.steps]
    for got, want in zip(projected, rerun, strict=True):
        assert abs(got - want) <= PROJECTION_TOLERANCE * want, (change, projected, rerun)
    base = tpu.simulate().step_times()
    assert abs(np.mean(rerun) - np.mean(base)) > 10 * PROJECTION_TOLERANCE * np.mean(base)


def test_json_projections_are_the_rerun_jobs(result: dict) -> None:
    """``analyze --json --what-if``: the balance projection first, then the one asked for, each per step against
    the job simulated again with its change."""
    balance = result["projections"][0]
    asked = next(p for p in result["projections"] if p["role"] == "asked")
    assert (balance["what_if"], asked["what_if"]) == (["balance"], [DCN_WHAT_IF])
    for projection, change in ((balance, "balance"), (asked, "half-dcn")):
        rerun = _rerun(change)
        for step, want in zip(projection["steps"], rerun, strict=True):
            assert abs(step["projected_ns"] - want) <= PROJECTION_TOLERANCE * want, (change, step, want)
        assert projection["step_ns"]["projected"] == pytest.approx(np.mean(rerun), rel=PROJECTION_TOLERANCE)


def test_the_changed_job_reads_back_as_its_truth(tmp_path: Path) -> None:
    """The generator writes the job with a change too (the DCN transfer taken away): moeprof's figures of those
    files are that job's truth, and its measured steps are the rerun's step times."""
    pytest.importorskip("jaxlib._hlo")
    _, job = tpu.write_job(tmp_path, change="no-dcn")
    want = tpu.truth(job)
    got = moeprof.analyze(moeprof.load(tmp_path)).to_json()
    assert_equals_truth(got, want)
    assert got["ledger"]["clock_offsets_ns"] == want["ledger"]["clock_offsets_ns"]


def test_mfu_counts_the_model_flops(result: dict, truth: dict) -> None:
    """XLA's ``flops`` counts the expert ragged_dots dense over all experts (above the chip's peak); the step's
    FLOPs are the ops' ``model_flops``, summed per step over the job's chips, against the plane's own peak."""
    utilization = result["utilization"]
    per_step = {row["model_flops"] for row in truth["flops_per_step"]}
    assert len(per_step) == 1 and truth["ops_above_peak"]
    assert utilization["flops_source"] == "model_flops"
    assert utilization["flops_per_step"] == per_step.pop()
    assert utilization["peak_tflops"] == truth["peak_tflops"]
