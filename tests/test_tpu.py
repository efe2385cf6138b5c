"""Google TPU traces: hand-made TPU-shaped XPlanes and trace JSON whose figures are computed here by hand,
and the real v5e captures against xprof's own figures on the same file."""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli.main import app
from moeprof.options import LoadOptions
from moeprof.readers.base import Placement, ReadContext
from moeprof.readers.registry import read_file
from synthetic.tpu import AsyncOp, Chip, Op, write_trace_json, write_xplane

from .helpers import SAMPLES, shared_trace

runner = CliRunner()

# a chip of a 2-chip job (ids 0 and 1): an async all-gather from `ag` to 8015 over compute, an async copy,
# a synchronous ragged all-to-all, and an idle gap
AG_START = "%all-gather-start.1 = (f32[256]{0}, f32[512]{0}) all-gather-start(f32[256]{0} %p.1), channel_id=1, replica_groups={{0,1}}, dimensions={0}"  # noqa: E501
AG_DONE = "%all-gather-done.1 = f32[512]{0} all-gather-done((f32[256]{0}, f32[512]{0}) %all-gather-start.1)"
RAGGED = (
    "%ragged_all_to_all.0 = f32[128,64]{1,0} ragged-all-to-all(f32[128,64]{1,0} %a, f32[128,64]{1,0} %b, "
    "s32[2]{0} %c, s32[2]{0} %d, s32[2]{0} %e, s32[2]{0} %f), channel_id=2, replica_groups={{0,1}}"
)
COPY_START = "%copy-start.1 = (f32[64]{0}, f32[64]{0:S(1)}, u32[]) copy-start(f32[64]{0} %w)"
COPY_DONE = "%copy-done.1 = f32[64]{0:S(1)} copy-done((f32[64]{0}, f32[64]{0:S(1)}, u32[]) %copy-start.1)"


def fusion(n: int) -> str:
    return f"%fusion.{n} = f32[128]{{0}} fusion(f32[128]{{0}} %x), kind=kLoop, calls=%fused.{n}"


def two_chip_job(ag_start_1: int = 3500) -> list[Chip]:
    """Chip 0 issues the all-gather at 3000, chip 1 at ``ag_start_1``; both finish it at 8015."""
    chips = []
    for ordinal, ag in ((0, 3000), (1, ag_start_1)):
        ops = [
            Op(
                fusion(1), 1000, ag - 1000, "loop fusion", flops=2_000, model_flops=1_000, tf_op="jit(step)/moe/router:"
            ),
            Op(AG_START, ag, 10, "all-gather-start", bytes_accessed=1024),
            Op(fusion(2), ag + 10, 6010 - ag - 10, "convolution fusion", flops=9_000, tf_op="jit(step)/moe/experts:"),
            Op(COPY_START, 6010, 5, "copy-start"),
            Op(AG_DONE, 6015, 2000, "all-gather-done"),
            Op(COPY_DONE, 8015, 85, "copy-done"),
            Op(RAGGED, 8100, 1000, "ragged-all-to-all", tf_op="jit(step)/moe/ragged_all_to_all:"),
            Op(fusion(3), 9200, 800, "loop fusion"),
        ]
        asyncs = [AsyncOp(ops[1], "all-gather-done.1", ag, 8015), AsyncOp(ops[3], "copy-done.1", 6010, 8100)]
        chips.append(Chip(ordinal, ops, asyncs, modules=[(1000, 10_000)]))
    return chips


@pytest.fixture
def job(tmp_path: Path) -> dict[str, Path]:
    chips = two_chip_job()
    xplane = tmp_path / "xplane" / "tpuhost.xplane.pb"
    xplane.parent.mkdir()
    write_xplane(xplane, "tpuhost", chips)
    trace = tmp_path / "json" / "tpuhost.trace.json.gz"
    trace.parent.mkdir()
    write_trace_json(trace, chips)
    return {"xplane": xplane, "json": trace}


def device_rows(analysis_json: dict) -> dict[str, dict]:
    return {d["device"]: d for d in analysis_json["devices"]}


# chip 0 by hand (window: first op start 1000 to last op end 10000). Activities: fusion.1 [1000,3000),
# fusion.2 [3010,6010), fusion.3 [9200,10000) compute; copy-start [6010,6015) and copy-done [8015,8100) memcpy;
# the all-gather's async interval [3000,8015) and the ragged all-to-all [8100,9100) comm. The all-gather's
# -start [3000,3010) and -done [6015,8015) ops lie inside its interval and are not counted again.
CHIP0 = {
    "compute_ns": 2000 + 3000 + 800,
    "comm_ns": 5015 + 1000,
    "memcpy_ns": 5 + 85,
    "accumulated_ns": 5800 + 6015 + 90,
    "span_ns": 9000,
    # union: [1000,9100) and [9200,10000) -- the same as the sum of the XLA Ops ops (xprof's busy)
    "busy_ns": 8100 + 800,
    "idle_ns": 100,
    # comm not under compute: the all-gather's -start [3000,3010), its wait [6010,8015), the ragged [8100,9100)
    "exposed_comm_ns": 10 + 2005 + 1000,
    "overlapped_comm_ns": 3000,
    "comm_nvlink_ns": 6015,  # both chips on one host, one slice: ICI
    "comm_ib_ns": 0,
}
XPROF_BUSY_CHIP0 = 2000 + 10 + 3000 + 5 + 2000 + 85 + 1000 + 800  # every XLA Ops op, as op_profile sums them


def test_hand_made_tpu_xplane_figures(job):
    got = device_rows(moeprof.analyze_paths([job["xplane"]]).to_json())
    assert set(got) == {"tpuhost/TPU:0", "tpuhost/TPU:1"}
    chip0 = got["tpuhost/TPU:0"]
    assert {k: chip0[k] for k in CHIP0} == CHIP0
    assert chip0["busy_ns"] == XPROF_BUSY_CHIP0
    # chip 1 issues the all-gather 500 ns later: its interval is [3500, 8015)
    assert got["tpuhost/TPU:1"]["comm_ns"] == 4515 + 1000
    assert got["tpuhost/TPU:1"]["compute_ns"] == 2500 + 2500 + 800


def test_the_ledger_matches_the_async_collective_across_chips(job):
    """Instance of all-gather-start.1 on chips 0 and 1: chip 1 arrives last (3500); chip 0 waits 500 ns of its
    5015, then moves bytes for 4515; the ragged all-to-all starts together on both (no wait)."""
    out = moeprof.analyze_paths([job["xplane"]]).to_json()
    rows = device_rows(out)
    assert rows["tpuhost/TPU:0"]["comm_wait_ns"] == 500
    assert rows["tpuhost/TPU:0"]["comm_transfer_ns"] == 4515 + 1000
    assert rows["tpuhost/TPU:1"]["comm_wait_ns"] == 0
    assert rows["tpuhost/TPU:1"]["straggler_count"] == 1
    assert out["ledger"]["instances"] == 2


def test_a_collective_of_one_chip_is_a_copy_inside_it(tmp_path):
    """One chip whose all-gather and ragged all-to-all name the group {0} (an expert-parallel program run on one
    chip): no byte crosses a link, so both are memcpy (spec §2: copies inside one device) and keep their kind;
    no collective row, no ledger, no ICI time. Chip 0 by hand (CHIP0): memcpy = the copies 5 + 85 and the two
    collectives 5015 + 1000; the one-chip signal counts the collectives' 6015 ns, of which no compute hides
    [3000,3010) + [6010,8015) + [8100,9100) = 3015 ns."""
    chip = two_chip_job()[0]
    alone = "replica_groups={{0}}"
    ops = [replace(o, expression=o.expression.replace("replica_groups={{0,1}}", alone)) for o in chip.ops]
    asyncs = [replace(a, start_op=ops[chip.ops.index(a.start_op)]) for a in chip.asyncs]
    path = tmp_path / "one" / "tpuhost.xplane.pb"
    path.parent.mkdir()
    write_xplane(path, "tpuhost", [replace(chip, ops=ops, asyncs=asyncs)])
    trace = moeprof.load([path])[0]
    ev = trace.events
    local = ev[ev["kind"].astype(str) != ""]
    assert sorted(local["kind"].astype(str)) == ["all-gather", "all-to-all"]
    assert set(local["bucket"].astype(str)) == {"memcpy"}
    assert local["ib_fraction"].isna().all()
    out = moeprof.analyze_paths([path]).to_json()
    row = device_rows(out)["tpuhost/TPU:0"]
    assert (row["comm_ns"], row["comm_nvlink_ns"], row["exposed_comm_ns"]) == (0, 0, 0)
    assert row["memcpy_ns"] == 5 + 85 + 5015 + 1000
    assert out["collectives"] == [] and "ledger" not in out
    (signal,) = [o for o in out["opportunities"] if o["kind"] == "local-collectives"]
    assert (signal["evidence"]["total_ns"], signal["exposed_ns"], signal["evidence"]["count"]) == (6015, 3015, 2)
    assert signal["title"].startswith("collectives over a group of one chip")
    assert "ICI" not in signal["remedy"] and not any("ici" in str(o.get("link")) for o in out["opportunities"])


def test_collectives_by_opcode_with_bytes_and_groups_from_the_expression(job):
    trace = read_file(job["xplane"])
    ev = trace.events
    from moeprof.core.classify import classify

    ev = classify(trace).events
    by_name = ev[ev["device"] == "tpuhost/TPU:0"].set_index("name")
    ag = by_name.loc["all-gather-start.1"]
    assert (ag["bucket"], ag["kind"], ag["stream"]) == ("comm", "all-gather", "Async XLA Ops")
    assert (ag["start_ns"], ag["end_ns"]) == (3000, 8015)
    assert ag["bytes"] == 2048  # the gathered f32[512]: the larger of input (1024) and output
    assert ag["group"] == "0,1"
    assert "all-gather-done.1" not in by_name.index  # inside the interval
    ragged = by_name.loc["ragged_all_to_all.0"]  # the op's name says nothing; its opcode does
    assert (ragged["bucket"], ragged["kind"], ragged["opcode"]) == ("comm", "all-to-all", "ragged-all-to-all")
    assert ragged["bytes"] == 2 * 128 * 64 * 4 + 4 * 2 * 4  # operands: two f32[128,64] and four s32[2]
    for copy in ("copy-start.1", "copy-done.1"):  # DMAs within the chip: memcpy, their interval not counted
        assert (by_name.loc[copy, "bucket"], by_name.loc[copy, "copy_kind"]) == ("memcpy", "DtoD")
    f1 = by_name.loc["fusion.1"]
    assert (f1["bucket"], f1["category"], f1["flops"], f1["model_flops"]) == ("compute", "loop fusion", 2000, 1000)
    assert f1["scope"] == "jit(step)/moe/router"
    assert f1["hlo_module"] == "jit_step"


def test_times_are_the_device_clock_xprof_reads(job):
    """The events' own offset_ps lie HOST_SKEW_PS (378 ps) after device_offset_ps: taken, fusion.1 would start
    at 1000.378 ns, rounded to 1000, but end at 3000.378 -> 3000 too; the skew only shows where it rounds
    across a nanosecond, so check the decoded device times themselves."""
    ev = read_file(job["xplane"]).events
    assert ev["start_ns"].min() == 1000 and ev["end_ns"].max() == 10_000
    assert set(ev["start_ns"].tolist()) <= {1000, 3000, 3010, 3500, 3510, 6010, 8015, 8100, 9200}


def test_xplane_and_trace_json_give_the_same_table(job):
    """JAX's trace JSON has no Async XLA Ops events: pairing each -done op with the -start its operand names
    gives the same intervals, so the same table and figures."""
    xplane = moeprof.analyze_paths([job["xplane"]]).to_json()
    chrome = moeprof.analyze_paths([job["json"]]).to_json()
    keys = [k for k in CHIP0] + ["comm_wait_ns", "comm_transfer_ns"]
    assert [{k: d[k] for k in keys} for d in xplane["devices"]] == [{k: d[k] for k in keys} for d in chrome["devices"]]
    a = read_file(job["xplane"]).events
    b = read_file(job["json"]).events
    cols = ["device", "stream", "name", "start_ns", "end_ns", "activity", "copy_kind", "opcode", "group", "category"]
    assert a[cols].astype(str).values.tolist() == b[cols].astype(str).values.tolist()


def test_both_xplane_routes_read_tpu_planes_alike(job, monkeypatch):
    wire = read_file(job["xplane"])
    monkeypatch.setenv("MOEPROF_XPLANE_READER", "jaxlib")
    jaxlib = read_file(job["xplane"])
    assert wire.events.astype(str).values.tolist() == jaxlib.events.astype(str).values.tolist()
    assert wire.markers.astype(str).values.tolist() == jaxlib.markers.astype(str).values.tolist()


def test_steps_are_the_chips_steps_line(job):
    """One module execution [1000, 10000): step 0 is it. The host's `train` annotation (50 µs earlier and
    60 µs longer) is not taken: on a TPU the chip's Steps line is xprof's step."""
    out = moeprof.analyze_paths([job["xplane"]]).to_json()
    spans = {(s["device"], s["step"]): s["span_ns"] for s in out["steps"]}
    assert spans == {("tpuhost/TPU:0", 0): 9000, ("tpuhost/TPU:1", 0): 9000}


def test_steps_tile_time_as_xprof_gives_them(tmp_path):
    """Two executions [1000, 4000) and [6000, 9000): step 1 runs from step 0's end (4000) to 9000, 5000 ns,
    of which 2000 idle before the module starts."""
    ops = [Op(fusion(1), 1000, 3000, "loop fusion"), Op(fusion(1), 6000, 3000, "loop fusion")]
    path = tmp_path / "h.xplane.pb"
    write_xplane(path, "h", [Chip(0, ops, [], modules=[(1000, 4000), (6000, 9000)])])
    steps = {s["step"]: s for s in moeprof.analyze_paths([path]).to_json()["steps"]}
    assert (steps[0]["span_ns"], steps[1]["span_ns"]) == (3000, 5000)
    assert (steps[1]["busy_ns"], steps[1]["idle_ns"]) == (3000, 2000)


HOST_SEND = (
    "%send.1 = (f32[16]{0}, u32[], token[]) send(f32[16]{0} %v, token[] %t), channel_id=3, "
    'is_host_transfer=true, frontend_attributes={_xla_host_transfer_rendezvous="cb"}'
)
DCN_SEND = (
    "%send.2 = (f32[1024]{0}, u32[], token[]) send(f32[1024]{0} %g, token[] %t), channel_id=4, "
    'is_host_transfer=true, frontend_attributes={_xla_dcn_recv_channel="5"}'
)
AR_FUSION = "%all-reduce-fusion.1 = f32[256]{0} fusion(f32[256]{0} %y), kind=kOutput, calls=%fused_ar.1"


def test_host_transfers_dcn_sends_and_collective_fusions(tmp_path):
    ops = [
        Op(fusion(1), 1000, 100, "loop fusion"),
        Op(HOST_SEND, 1100, 50, "host send"),
        Op(DCN_SEND, 1150, 200, "host send"),
        Op(AR_FUSION, 1350, 300, "all-reduce fusion"),
    ]
    path = tmp_path / "h.xplane.pb"
    write_xplane(path, "h", [Chip(0, ops, [], modules=[(1000, 1650)])])
    from moeprof.core.classify import classify

    ev = classify(read_file(path)).events.set_index("name")
    assert (ev.loc["send.1", "bucket"], ev.loc["send.1", "copy_kind"]) == ("memcpy", "DtoH")  # to its own host
    assert (ev.loc["send.2", "bucket"], ev.loc["send.2", "kind"], ev.loc["send.2", "link_hint"]) == (
        "comm",
        "send-recv",
        "ib",
    )
    assert ev.loc["send.2", "bytes"] == 4096
    assert (ev.loc["all-reduce-fusion.1", "bucket"], ev.loc["all-reduce-fusion.1", "kind"]) == ("comm", "all-reduce")
    fig = moeprof.analyze_paths([path]).to_json()["devices"][0]
    assert (fig["comm_ib_ns"], fig["comm_nvlink_ns"], fig["memcpy_ns"]) == (200, 300, 50)


ALL_REDUCE = (
    "%all-reduce.1 = f32[1024]{0} all-reduce(f32[1024]{0} %g), channel_id=1, replica_groups={{0,1,2,3}}, "
    "use_global_device_ids=true, to_apply=%add"
)


def two_hosts(tmp_path: Path, megascale: bool = False) -> Path:
    """Two hosts of two chips each, one all-reduce over all four chips (global ids 0-3)."""
    folder = tmp_path / "job"
    folder.mkdir()
    for h in range(2):
        chips = [
            Chip(
                c,
                [Op(fusion(1), 1000, 500, "loop fusion"), Op(ALL_REDUCE, 1500, 400, "all-reduce")],
                [],
                [(1000, 1900)],
            )
            for c in range(2)
        ]
        keys = ("device_200000_gid_rendezvous1$1^i0",) if megascale else ()
        write_xplane(folder / f"host{h}.xplane.pb", f"host{h}", chips, megascale_graph_keys=keys)
    return folder


SHARD = "(f32[256]{0}, u32[], token[])"
DCN_OPS = {
    "send": (
        f"%send.3 = {SHARD} send(f32[256]{{0}} %g, token[] %t), channel_id=3, is_host_transfer=true, "
        'frontend_attributes={_xla_dcn_recv_channel="4",_xla_host_transfer_rendezvous="all-reduce.9_3"}'
    ),
    "recv": (
        f"%recv.4 = {SHARD} recv(token[] %t), channel_id=4, is_host_transfer=true, "
        'frontend_attributes={_xla_host_transfer_rendezvous="all-reduce.9_3"}'
    ),
    "send-done": f"%send-done.3 = token[] send-done({SHARD} %send.3), channel_id=3, is_host_transfer=true",
    "recv-done": f"%recv-done.4 = (f32[256]{{0}}, token[]) recv-done({SHARD} %recv.4), channel_id=4, "
    "is_host_transfer=true",
}
ICI_PAIRS = (
    "%all-reduce.2 = f32[64]{0} all-reduce(f32[64]{0} %x), channel_id=2, replica_groups={{0,1},{2,3}}, to_apply=%add"
)


def test_a_dcn_collective_is_its_send_to_its_recv_done(tmp_path):
    """Two slices of two chips (one host each). Each chip: fusion [1000,1100), an ICI all-reduce within its slice
    [1100,1300), then the DCN all-reduce: send at 1300 (slice 0) or 1400 (slice 1), recv 50 later, a fusion of 500
    under it, send-done, and recv-done ending at 3000 on every chip, then a fusion [3000,3100). By hand: the DCN
    collective is one comm activity [send start, 3000) of kind all-reduce (its rendezvous) on DCN, the four ops
    inside it not counted again (no memcpy); its group is the chip at the same position in the other slice
    ({c, c+2}, the program's 4 chips in slices of 2); in the ledger slice 0's chips wait 100 ns for slice 1's."""
    folder = tmp_path / "job"
    folder.mkdir()
    for h in range(2):
        send = 1300 + 100 * h
        chips = []
        for c in range(2):
            ops = [
                Op(fusion(1), 1000, 100, "loop fusion"),
                Op(ICI_PAIRS, 1100, 200, "all-reduce"),
                Op(DCN_OPS["send"], send, 50, "send"),
                Op(DCN_OPS["recv"], send + 50, 20, "recv"),
                Op(fusion(2), send + 70, 500, "loop fusion"),
                Op(DCN_OPS["send-done"], send + 570, 10, "send-done"),
                Op(DCN_OPS["recv-done"], send + 580, 3000 - send - 580, "recv-done"),
                Op(fusion(3), 3000, 100, "loop fusion"),
            ]
            chips.append(Chip(c, ops, [], [(1000, 3100)]))
        keys = (f"device_{100_000 * (h + 1)}_gid_all-reduce.9_3$1^i0",)
        write_xplane(folder / f"slice{h}.xplane.pb", f"slice{h}", chips, megascale_graph_keys=keys)
    out = moeprof.analyze_paths([folder], LoadOptions(nvlink_domain_size=2)).to_json()
    assert not out.get("warnings")  # --slice-size given: nothing to ask
    for dev in out["devices"]:
        send = 1300 if dev["host"] == "slice0" else 1400
        dcn = 3000 - send
        assert (dev["comm_ib_ns"], dev["comm_nvlink_ns"], dev["memcpy_ns"]) == (dcn, 200, 0), dev["device"]
        assert dev["exposed_comm_ns"] == 200 + dcn - 500
        wait = 100 if dev["host"] == "slice0" else 0
        assert (dev["comm_wait_ns"], dev["comm_transfer_ns"]) == (wait, 200 + dcn - wait), dev["device"]
    rows = {c["name"]: c for c in out["collectives"]}
    assert (rows["send.3"]["kind"], rows["send.3"]["link"], rows["send.3"]["count"]) == ("all-reduce", "ib", 4)
    assert out["ledger"]["instances"] == 2 + 2  # the ICI pairs of each slice, the DCN pairs {0,2} and {1,3}
    table = read_file(folder / "slice1.xplane.pb", ReadContext(LoadOptions(nvlink_domain_size=2), Placement(1))).events
    assert sorted(table.loc[table["name"] == "send.3", "group"].astype(str)) == ["0,2", "1,3"]


def test_one_slice_over_two_hosts_is_ici_and_slice_size_splits_it(tmp_path):
    """Without traffic between slices the slice is every chip the collectives name (4): ICI on both hosts.
    --slice-size 2 makes each host a slice: the ring crosses slices, so all of it counts as DCN (spec §3)."""
    folder = two_hosts(tmp_path)
    one = moeprof.analyze_paths([folder]).to_json()["total"]
    assert (one["comm_nvlink_ns"], one["comm_ib_ns"]) == (4 * 400, 0)
    res = runner.invoke(app, ["analyze", str(folder), "--slice-size", "2", "--json"])
    assert res.exit_code == 0, res.output
    total = json.loads(res.stdout)["total"]
    assert (total["comm_nvlink_ns"], total["comm_ib_ns"]) == (0, 4 * 400)
    res = runner.invoke(app, ["analyze", str(folder), "--slice-size", "3"])
    assert res.exit_code == 2 and "--slice-size 3 does not fit hosts of 2 chips" in res.output


def test_a_multi_slice_capture_asks_for_the_slice_size(tmp_path):
    folder = two_hosts(tmp_path, megascale=True)
    out = moeprof.analyze_paths([folder]).to_json()
    assert any("--slice-size" in w and "Megascale" in w for w in out["warnings"])
    # one host's chips are taken as a slice: the all-reduce leaves it
    assert (out["total"]["comm_nvlink_ns"], out["total"]["comm_ib_ns"]) == (0, 4 * 400)


def test_ici_and_dcn_are_named_on_screen_in_json_and_html(tmp_path):
    folder = two_hosts(tmp_path)
    res = runner.invoke(app, ["analyze", str(folder), "--slice-size", "2"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "comm DCN" in res.output and "NVLink" not in res.output and "InfiniBand" not in res.output
    assert "TPUs: 4 x TPU v5 Lite" in res.output
    out = json.loads(runner.invoke(app, ["analyze", str(folder), "--json"]).stdout)
    assert {k: out["hardware"][k] for k in ("accelerator", "scale_up", "scale_out")} == {
        "accelerator": "TPU",
        "scale_up": "ICI",
        "scale_out": "DCN",
    }
    assert "comm_nvlink_ns" in out["total"]  # spec §7's keys stay: nvlink is the scale-up fabric (ICI)
    html = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(folder), "--slice-size", "2", "-o", str(html)])
    assert res.exit_code == 0, res.output
    text = html.read_text()
    assert "comm DCN" in text and "comm ICI" in text and "comm NVLink" not in text


# ---------------------------------------------------------------- the real captures against xprof


XPROF_FILES = ["tpu/demo_v5e_1chip.xplane.pb", "tpu/moe_ragged_dot_v5e_1chip.xplane.pb"]
SAMPLE = SAMPLES / "tpu_v5e_demo" / "runsc.xplane.pb"


def xprof_figures(path: Path, tmp_path: Path) -> dict:
    """xprof's own figures on a copy of ``path`` (xprof caches its results beside the file it reads)."""
    from xprof.convert import raw_to_tool_data

    copy = tmp_path / "xprof" / path.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copy(path, copy)
    overview = json.loads(raw_to_tool_data.xspace_to_tool_data([str(copy)], "overview_page", {})[0])
    profile = json.loads(raw_to_tool_data.xspace_to_tool_data([str(copy)], "op_profile", {})[0])
    table = next(t for t in overview if t.get("cols") and t["cols"][0]["id"] == "stepnum")
    ids = [c["id"] for c in table["cols"]]
    steps = [{i: c.get("v") for i, c in zip(ids, row["c"], strict=False)} for row in table["rows"]]
    programs = profile["byProgram"]
    idle = next(c for c in programs["children"] if c["name"] == "IDLE")["metrics"]["rawTime"]
    categories: dict[str, float] = {}
    for program in programs["children"]:
        for category in program.get("children", []) if program["name"] != "IDLE" else []:
            categories[category["name"]] = categories.get(category["name"], 0) + category["metrics"]["rawTime"]
    return {
        "busy_ns": (programs["metrics"]["rawTime"] - idle) / 1e3,
        "idle_ns": idle / 1e3,
        # a step's time: TensorCore compute + idle (+ the input/output/transfer columns, 0 on these captures)
        "step_ns": [
            1e6 * sum(float(s[k] or 0) for k in ids if k.endswith("TimeMs") and not k.startswith("scv0")) for s in steps
        ],
        "categories_ns": {k: v / 1e3 for k, v in categories.items()},
    }


def assert_like_xprof(path: Path, tmp_path: Path) -> None:
    want = xprof_figures(path, tmp_path)
    out = moeprof.analyze_paths([path]).to_json()
    device = out["devices"][0]
    steps = sorted((s for s in out["steps"]), key=lambda s: s["step"])
    assert device["busy_ns"] == pytest.approx(want["busy_ns"], rel=1e-3)
    # xprof's idle is over its steps (the Steps line tiles the capture); moeprof's steps are those steps
    assert sum(s["idle_ns"] for s in steps) == pytest.approx(want["idle_ns"], rel=1e-3)
    assert [s["span_ns"] for s in steps] == pytest.approx(want["step_ns"], rel=1e-3)
    # per XLA category: xprof sums picoseconds, moeprof rounds each op's ends to the ns, so a category of n ops
    # may differ by up to n ns beside the 0.1% (25 add-dependency ops of 0.6 ns each: 15 ns against xprof's 15.0)
    ev = read_file(path).events
    grouped = (ev["end_ns"] - ev["start_ns"]).groupby(ev["category"].astype(str))
    per_category, counts = grouped.sum().to_dict(), grouped.size().to_dict()
    assert set(per_category) == set(want["categories_ns"])
    for category, ns in per_category.items():
        assert abs(ns - want["categories_ns"][category]) <= max(1e-3 * ns, counts[category]), category


@pytest.mark.parametrize("rel", XPROF_FILES)
def test_real_tpu_captures_match_xprof(rel, tmp_path):
    assert_like_xprof(shared_trace(rel), tmp_path)


def test_the_sample_tpu_capture_matches_xprof(tmp_path):
    assert_like_xprof(SAMPLE, tmp_path)


def test_the_sample_tpu_capture_by_hand():
    """The committed capture's figures from its own bytes, read with the protobuf runtime (no moeprof reader):
    busy is the sum of the XLA Ops ops' device durations (they never overlap), steps the Steps line."""
    from moeprof.readers.xspace_proto import messages

    space = messages()["XSpace"]()
    space.ParseFromString(SAMPLE.read_bytes())
    plane = next(p for p in space.planes if p.name == "/device:TPU:0")
    stat = {k: v.name for k, v in plane.stat_metadata.items()}

    def times(line_name: str) -> list[tuple[int, int]]:
        line = next(ln for ln in plane.lines if ln.name == line_name)
        out = []
        for ev in line.events:
            s = {stat[x.metadata_id]: getattr(x, x.WhichOneof("value")) for x in ev.stats}
            off, dur = s["device_offset_ps"], s["device_duration_ps"]
            out.append((round(off / 1000), round((off + dur) / 1000)))  # round() ties to even, as moeprof
        return out

    ops = sorted(times("XLA Ops"))
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ops))  # one op at a time
    out = moeprof.analyze_paths([SAMPLE]).to_json()
    assert out["devices"][0]["busy_ns"] == sum(e - s for s, e in ops)
    assert [s["span_ns"] for s in sorted(out["steps"], key=lambda s: s["step"])] == [e - s for s, e in times("Steps")]
    assert out["devices"][0]["device"] == "runsc/TPU:0"


def test_the_sample_reads_the_same_from_both_xplane_routes(monkeypatch):
    wire = read_file(SAMPLE).events
    monkeypatch.setenv("MOEPROF_XPLANE_READER", "jaxlib")
    jaxlib = read_file(SAMPLE).events
    assert wire.astype(str).values.tolist() == jaxlib.astype(str).values.tolist()
    assert np.array_equal(wire["start_ns"].to_numpy(), jaxlib["start_ns"].to_numpy())


def test_a_gzipped_xplane_reads_as_the_xplane(tmp_path):
    """``.xplane.pb.gz`` (how captures are kept): found in a folder, read as the raw file, the input untouched;
    a cut gzip is one line naming the file."""
    import gzip

    from .helpers import assert_refused

    packed = tmp_path / "run" / "runsc.xplane.pb.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    before = packed.read_bytes()
    raw, gz = moeprof.analyze_paths([SAMPLE]).to_json(), moeprof.analyze_paths([packed.parent]).to_json()
    assert gz["devices"] == raw["devices"] and gz["steps"] == raw["steps"] and gz["inputs"] == [str(packed)]
    assert packed.read_bytes() == before and [p.name for p in packed.parent.iterdir()] == [packed.name]
    cut = tmp_path / "cut" / "runsc.xplane.pb.gz"
    cut.parent.mkdir()
    cut.write_bytes(before[: len(before) // 2])
    assert_refused(cut, "corrupt gzip data")


def test_xprof_trace_viewer_json_reads_as_the_xplane(tmp_path):
    """xprof's trace-viewer JSON of the sample (made here by xprof's own converter) is the XPlane's table."""
    from xprof.convert import raw_to_tool_data

    copy = tmp_path / "runsc.xplane.pb"
    shutil.copy(SAMPLE, copy)
    data = raw_to_tool_data.xspace_to_tool_data([str(copy)], "trace_viewer", {})[0]
    viewer = tmp_path / "json" / "runsc.trace.json"
    viewer.parent.mkdir()
    viewer.write_bytes(data if isinstance(data, bytes) else data.encode())
    xplane = moeprof.analyze_paths([SAMPLE]).to_json()
    chrome = moeprof.analyze_paths([viewer]).to_json()
    assert chrome["devices"] == xplane["devices"]
    assert chrome["steps"] == xplane["steps"]
    a, b = read_file(SAMPLE).events, read_file(viewer).events
    cols = ["name", "start_ns", "end_ns", "opcode", "category", "scope", "model_flops", "bytes_accessed"]
    assert a[cols].astype(str).values.tolist() == b[cols].astype(str).values.tolist()


# ---------------------------------------------------------------- a loop holds the ops it runs

WHILE = "%while.3 = (s32[], f32[128]{0}) while((s32[], f32[128]{0}) %tuple.1), condition=%cond.3, body=%body.3"


def loop_chip() -> Chip:
    """A while loop [1000, 9000) holding three iterations of its body's fusion, [1500, 3500), [4000, 6000),
    [6500, 8500): the line lists the loop and its ops, as a TPU writes a jax.lax.scan or fori_loop; then one
    fusion after the loop, [9000, 10000)."""
    ops = [
        Op(WHILE, 1000, 8000, "while", flops=600, bytes_accessed=4096),
        *(Op(fusion(5), t, 2000, "convolution fusion", flops=1_000, bytes_accessed=512) for t in (1500, 4000, 6500)),
        Op(fusion(6), 9000, 1000, "loop fusion", flops=10),
    ]
    return Chip(0, ops, [], modules=[(1000, 10_000)])


def test_a_loop_is_its_own_time_beside_the_ops_it_runs(tmp_path):
    """The loop's own time is what none of its ops covers: [1000,1500), [3500,4000), [6000,6500), [8500,9000),
    2000 ns; with its ops (6000) and the last fusion (1000) the chip's accumulated time is 9000, its busy time
    too (nothing counted twice). Its counts stay once."""
    path = tmp_path / "h.xplane.pb"
    write_xplane(path, "h", [loop_chip()])
    ev = read_file(path).events
    loop = ev[ev["name"] == "while.3"]
    assert list(zip(loop["start_ns"], loop["end_ns"], strict=True)) == [
        (1000, 1500),
        (3500, 4000),
        (6000, 6500),
        (8500, 9000),
    ]
    assert loop["flops"].sum() == 600 and loop["bytes_accessed"].sum() == 4096
    device = moeprof.analyze_paths([path]).to_json()["devices"][0]
    assert (device["accumulated_ns"], device["busy_ns"], device["idle_ns"]) == (9000, 9000, 0)
