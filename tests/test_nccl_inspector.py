"""NCCL Inspector logs: the reader, the analysis against the generator's own numbers, the commands, and the
bad-input contract."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.insight.bandwidth import link_peaks
from moeprof.pipeline import analyze_paths
from moeprof.readers import sniff
from moeprof.readers.nccl_inspector import read
from synthetic import nccl_inspector as gen

from .helpers import SAMPLES

runner = CliRunner()
SAMPLE = SAMPLES / "nccl_inspector_8rank"


@pytest.fixture(scope="module", params=["v4.0", "v4.3"])
def job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, gen.Job]:
    folder = tmp_path_factory.mktemp("insp") / f"nccl-inspector-{request.param}"
    return folder, gen.write(folder, steps=12, seed=3, version=request.param)


def test_sniffed_by_content(job):
    folder, _ = job
    logs = sorted(folder.iterdir())
    assert len(logs) == 8
    assert all(sniff(p) == "nccl-inspector" for p in logs)
    rows = read(logs[0]).rows
    assert set(rows["kind"].unique()) == {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"}


def test_last_to_arrive_and_time_beyond_it(job):
    folder, made = job
    truth = made.truth
    section = analyze_paths([folder], jobs=1).inspector
    assert section is not None
    assert section["instances"] == truth["instances"]
    assert section["incomplete_instances"] == 0
    assert section["beyond_shortest_us"] == pytest.approx(truth["beyond_shortest_us"])
    got = {r["process"]: r for r in section["last_to_arrive"]}
    for process, want in truth["shortest"].items():
        assert got[process]["shortest"] == want["count"]
        assert got[process]["caused_us"] == pytest.approx(want["caused_us"])
    flagged = [r["process"] for r in section["last_to_arrive"] if r["flagged"]]
    assert flagged == [truth["slow_process"]]
    assert section["last_to_arrive"][0]["process"] == truth["slow_process"]


def test_bus_bandwidth_per_kind_and_size_against_peaks(job):
    folder, made = job
    peaks = link_peaks("H100", None)
    section = analyze_paths([folder], jobs=1, link_peaks=peaks).inspector
    assert section is not None
    got = {(r["kind"], r["size_bucket_bytes"]): r for r in section["bandwidth"]}
    assert len(got) == len(made.truth["bandwidth"])
    for want in made.truth["bandwidth"]:
        row = got[(want["kind"], want["size_bucket"])]
        if want["bus_bandwidth_gbps"] is None:
            assert row["bus_bandwidth_gbps"] is None and row["peak_share"] is None
            continue
        assert row["bus_bandwidth_gbps"] == pytest.approx(want["bus_bandwidth_gbps"], rel=1e-9)
        assert row["transfer_bus_bandwidth_gbps"] == pytest.approx(want["transfer_bus_bandwidth_gbps"], rel=1e-9)
        peak = peaks[row["link"]]
        assert row["link_peak_gbps"] == peak
        assert row["peak_share"] == pytest.approx(want["bus_bandwidth_gbps"] / peak)
    # world (2 nodes) runs on IB, the host communicators on NVLink
    assert {r["link"] for r in section["bandwidth"] if r["size_bucket_bytes"] == 64 << 20} == {"ib"}
    assert {r["link"] for r in section["bandwidth"] if r["kind"] == "all-to-all"} == {"nvlink"}


def test_analyze_json_keeps_the_contract_with_null_section4():
    res = runner.invoke(app, ["analyze", str(SAMPLE), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == "moeprof.analysis/1"
    assert doc["devices"] == [] and doc["collectives"] == [] and doc["steps"] == []
    assert doc["total"] and all(v is None for v in doc["total"].values())
    assert doc["inspector"]["processes"] == 8
    assert any("pass --gpu" in w for w in doc["warnings"])
    assert all(r["link_peak_gbps"] is None for r in doc["inspector"]["bandwidth"])


def test_analyze_terminal_names_the_slow_rank_and_what_it_cannot_tell():
    truth = json.loads((SAMPLES / "nccl_inspector_8rank.truth.json").read_text())
    res = runner.invoke(app, ["analyze", str(SAMPLE), "--gpu", "H100"])
    assert res.exit_code == 0, res.output
    assert f"{truth['slow_process']} (host1:1, world:5) is the last to arrive" in res.stdout
    assert "cannot tell" in res.stdout and "exposed communication" in res.stdout


def test_dask_path(dask_scheduler, tmp_path):
    made = gen.write(tmp_path / "logs", steps=4, seed=5)
    section = analyze_paths([tmp_path / "logs"], scheduler=dask_scheduler).inspector
    assert section is not None
    assert section["beyond_shortest_us"] == pytest.approx(made.truth["beyond_shortest_us"])


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _one_log(tmp_path: Path) -> tuple[Path, list[str]]:
    made = gen.build(steps=2, seed=1)
    name, lines = next(iter(made.lines.items()))
    return tmp_path / name, lines


def _wrong_type(lines: list[str]) -> str:
    obj = json.loads(lines[3])
    obj["coll_perf"]["coll_exec_time_us"] = "slow"
    return "\n".join([*lines[:3], json.dumps(obj), *lines[4:]]) + "\n"


def _missing_key(lines: list[str]) -> str:
    obj = json.loads(lines[2])
    del obj["coll_perf"]["coll_sn"]
    return "\n".join([*lines[:2], json.dumps(obj), *lines[3:]]) + "\n"


BAD = {
    "truncated": (
        lambda lines: "\n".join(lines)[:-40],
        "not a complete JSON object (truncated: the file ends inside it)",
    ),
    "wrong type": (_wrong_type, "line 4: coll_perf.coll_exec_time_us is a string"),
    "missing key": (_missing_key, "record 3: the sequence number"),
    "empty": (lambda lines: "", "empty file"),
    "not a log": (lambda lines: "step 1 loss 2.3\nstep 2 loss 2.1\n", "unrecognized format"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_input_one_line_exit_2_untouched(tmp_path, case):
    path, lines = _one_log(tmp_path)
    make, said = BAD[case]
    path.write_text(make(lines))
    before = _digest(tmp_path)
    res = runner.invoke(app, ["analyze", str(path)])
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and said in err, err
    assert "Traceback" not in res.output
    assert _digest(tmp_path) == before


def test_stray_file_in_the_folder_is_skipped_with_a_note(tmp_path):
    folder = tmp_path / "nccl-inspector-1234"
    gen.write(folder, steps=2, seed=2)
    (folder / "README.txt").write_text("job notes\n")
    (folder / "launcher.log").write_text("srun: starting 8 tasks\n")
    res = runner.invoke(app, ["analyze", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    warnings = json.loads(res.stdout)["warnings"]
    assert any("skipped README.txt: not an NCCL Inspector log" in w for w in warnings)
    assert any("skipped launcher.log: not an NCCL Inspector log" in w for w in warnings)


def test_a_timeline_trace_with_inspector_logs_is_refused(tmp_path):
    folder = tmp_path / "logs"
    gen.write(folder, steps=2, seed=2)
    trace = SAMPLES / "synthetic_1host_8gpu.trace.json.gz"
    res = runner.invoke(app, ["analyze", str(folder), str(trace)])
    assert res.exit_code == 2
    assert "analyze them apart" in res.stderr and str(trace) in res.stderr


def test_incomplete_instances_are_left_out_and_said(tmp_path):
    folder = tmp_path / "logs"
    made = gen.write(folder, steps=3, seed=4)
    (folder / "node0-pid41000.log").unlink()  # rank 0's log missing: every instance lacks it
    res = runner.invoke(app, ["analyze", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    lost = 3 * len(gen.WORLD_OPS) + 3 * len(gen.HOST_OPS)  # the world's and host0's instances
    assert doc["inspector"]["instances"] == made.truth["instances"] - lost
    assert doc["inspector"]["incomplete_instances"] == lost
    assert any("lack some member's record" in w for w in doc["warnings"])


@pytest.mark.slow
def test_check_gates_the_time_beyond_the_shortest_member_and_refuses_section4(tmp_path):
    truth = json.loads((SAMPLES / "nccl_inspector_8rank.truth.json").read_text())
    doc = json.loads(runner.invoke(app, ["analyze", str(SAMPLE), "--json"]).stdout)
    share = truth["shortest"][truth["slow_process"]]["caused_us"] / doc["inspector"]["exec_us"]
    res = runner.invoke(app, ["check", str(SAMPLE), "--max-last-to-arrive-fraction", f"{share * 0.99}", "--json"])
    assert res.exit_code == 1, res.output
    gate = json.loads(res.stdout)["gates"][0]
    assert gate["value"] == pytest.approx(share) and gate["device"] == truth["slow_process"]
    res = runner.invoke(app, ["check", str(SAMPLE), "--max-last-to-arrive-fraction", f"{share * 1.01}"])
    assert res.exit_code == 0, res.output
    beyond = truth["beyond_shortest_us"] / doc["inspector"]["exec_us"]
    res = runner.invoke(app, ["check", str(SAMPLE), "--max-beyond-shortest-fraction", f"{beyond * 0.99}"])
    assert res.exit_code == 1
    res = runner.invoke(app, ["check", str(SAMPLE), "--max-exposed-comm-fraction", "0.5"])
    assert res.exit_code == 2 and "no timeline" in res.stderr
    # a saved analysis of the logs is a baseline for the next run's logs
    saved = tmp_path / "base.json"
    saved.write_text(runner.invoke(app, ["analyze", str(SAMPLE), "--json"]).stdout)
    res = runner.invoke(app, ["check", str(SAMPLE), "--baseline", str(saved), "--json"])
    assert res.exit_code == 0, res.output
    names = {g["name"] for g in json.loads(res.stdout)["gates"]}
    assert names == {"beyond-shortest-fraction-vs-baseline", "last-to-arrive-fraction-vs-baseline"}


@pytest.mark.slow
def test_diff_compares_bus_bandwidth_and_names_the_last_to_arrive(tmp_path):
    other = tmp_path / "logs"
    gen.write(other, steps=20, seed=9, slow_share=0.0)  # nobody consistently last
    res = runner.invoke(app, ["diff", str(SAMPLE), str(other), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    truth = json.loads((SAMPLES / "nccl_inspector_8rank.truth.json").read_text())
    assert doc["runs"][0]["last_to_arrive"] == [truth["slow_process"]]
    assert doc["runs"][1]["last_to_arrive"] == []
    rows = {r["name"]: r for r in doc["rows"]}
    want = next(b for b in truth["bandwidth"] if b["kind"] == "all-reduce" and b["size_bucket"] == 64 << 20)
    assert rows["AllReduce ib 64 MiB+ bus GB/s"]["values"][0] == pytest.approx(want["bus_bandwidth_gbps"])
    res = runner.invoke(app, ["diff", str(SAMPLE), str(SAMPLES / "synthetic_1host_8gpu.trace.json.gz")])
    assert res.exit_code == 2 and "share no figure" in res.stderr


def test_events_writes_one_row_per_collective_per_rank(tmp_path):
    out = tmp_path / "rows.csv"
    res = runner.invoke(app, ["events", str(SAMPLE), "-o", str(out)])
    assert res.exit_code == 0, res.output
    import pandas as pd

    rows = pd.read_csv(out)
    per_file = sum(len(p.read_text().splitlines()) for p in SAMPLE.iterdir())
    assert len(rows) == per_file
    assert set(rows["kind"]) == {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"}
    assert {"rank", "comm", "seq", "bytes", "exec_us", "busbw_gbs", "algo", "proto"} <= set(rows.columns)


def test_report_shows_the_inspector_view(tmp_path):
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(SAMPLE), "-o", str(out), "--gpu", "H100"])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    truth = json.loads((SAMPLES / "nccl_inspector_8rank.truth.json").read_text())
    assert "Bus bandwidth per collective and message size" in html
    assert f"{truth['slow_process']} (host1:1, world:5) is the last to arrive" in html
    assert "What a log without timestamps cannot tell" in html


def test_history_and_annotate_refuse_logs_without_a_timeline(tmp_path):
    db = tmp_path / "runs.db"
    res = runner.invoke(app, ["analyze", str(SAMPLE), "--history", str(db), "--json"])
    assert res.exit_code == 2 and "no timeline" in res.stderr and not db.exists()
    out = tmp_path / "a.trace.json.gz"
    res = runner.invoke(app, ["annotate", str(SAMPLE), "-o", str(out)])
    assert res.exit_code == 2 and "no timeline" in res.stderr and not out.exists()


def test_skip_bad_leaves_a_broken_log_out(tmp_path):
    folder = tmp_path / "logs"
    made = gen.write(folder, steps=2, seed=6)
    broken = folder / "node1-pid41119.log"
    broken.write_bytes(broken.read_bytes()[:-30])  # the job was killed while the plugin wrote
    res = runner.invoke(app, ["analyze", str(folder), "--json", "--jobs", "1"])
    assert res.exit_code == 2 and str(broken) in res.stderr
    res = runner.invoke(app, ["analyze", str(folder), "--json", "--jobs", "1", "--skip-bad"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [s["file"] for s in doc["skipped"]] == [str(broken)]
    assert doc["inspector"]["processes"] == 7
    # every instance of the world and of host1 lacks node1:41119; host0's 2 steps x HOST_OPS are complete
    assert doc["inspector"]["incomplete_instances"] == made.truth["instances"] - 2 * len(gen.HOST_OPS)


def test_p2p_record_without_its_peer_log_stays_unmatched(tmp_path):
    """NCCL 2.30 P2P records (p2p_perf): rows of kind send-recv with their peer; bus bandwidth = size / time
    (factor 1); a Send whose receiver's log is not given is counted, not matched."""
    head = {"id": "0xabc", "comm_name": "pp", "rank": 0, "n_ranks": 2, "nnodes": 2}
    meta = {"inspector_output_format_version": "v4.0", "git_rev": "x", "rec_mechanism": "nccl_profiler_interface",
            "dump_timestamp_us": 1, "hostname": "h0", "pid": 7}  # fmt: skip
    lines = [
        {"header": head, "metadata": meta, "p2p_perf": {"p2p": "Send", "p2p_sn": 1, "p2p_peer": 1,
         "p2p_msg_size_bytes": 4 << 20, "p2p_exec_time_us": 200, "p2p_timing_source": "kernel_gpu",
         "p2p_algobw_gbs": 20.97, "p2p_busbw_gbs": 20.97}},
        {"header": head, "metadata": meta, "coll_perf": {"coll": "AllReduce", "coll_sn": 1,
         "coll_msg_size_bytes": 1 << 20, "coll_exec_time_us": 100, "coll_timing_source": "kernel_gpu",
         "coll_algobw_gbs": 10.0, "coll_busbw_gbs": 10.0}},
    ]  # fmt: skip
    path = tmp_path / "h0-pid7.log"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = read(path).rows
    send = rows[rows["op"] == "Send"].iloc[0]
    assert send["kind"] == "send-recv" and send["peer"] == 1 and send["seq"] == 1
    section = analyze_paths([path], jobs=1).inspector
    assert section is not None
    assert section["p2p_records"] == 1 and section["collective_records"] == 1
    assert section["incomplete_instances"] == 1 and section["instances"] == 0  # rank 1's log not given
    p2p = section["p2p"]
    assert (p2p["records"], p2p["matched_records"], p2p["instances"], p2p["incomplete_instances"]) == (1, 0, 0, 1)
    (row,) = [r for r in section["bandwidth"] if r["kind"] == "send-recv"]
    # an unmatched record of a 2-node communicator: its peer's host unknown, so its link too
    assert row["link"] == "unknown" and row["bus_bandwidth_gbps"] == pytest.approx((4 << 20) / 200e3)


@pytest.fixture(scope="module", params=[("v4.0", False), ("v4.3", False), ("v4.0", True)], ids=str)
def p2p_job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, gen.Job]:
    version, drop = request.param
    folder = tmp_path_factory.mktemp("p2p") / "nccl-inspector-p2p"
    return folder, gen.write(folder, steps=12, seed=3, version=version, p2p=True, p2p_drop=drop)


def test_p2p_pairs_match_across_ranks_without_their_sequence_numbers(p2p_job):
    """Send and Recv pair by (communicator, sender, receiver, k-th in p2p_sn order): the generator numbers
    each rank's calls on its own (unwritten small calls advance it), so a pair's p2p_sn differ;
    the pairs, the time beyond the shorter member and who it was come out as the generator made them."""
    folder, made = p2p_job
    want = made.truth["p2p"]
    rows = pd.concat([read(p).rows for p in sorted(folder.iterdir())], ignore_index=True)
    p2p_rows = rows[rows["kind"] == "send-recv"]
    send_sn = p2p_rows[(p2p_rows["op"] == "Send") & (p2p_rows["rank"] == 0)]["seq"].iloc[0]
    recv_sn = p2p_rows[(p2p_rows["op"] == "Recv") & (p2p_rows["rank"] == 1)]["seq"].iloc[0]
    assert send_sn != recv_sn  # rank 0's first Send and rank 1's first Recv are one pair
    analysis = analyze_paths([folder], jobs=1)
    section = analysis.inspector
    assert section is not None
    got = section["p2p"]
    said = [w for w in analysis.warnings if "P2P records unmatched" in w]
    assert len(said) == (1 if want["unmatched_records"] else 0)
    for key in ("records", "matched_records", "unmatched_records", "instances", "incomplete_instances",
                "tied_instances"):  # fmt: skip
        assert got[key] == want[key], key
    assert got["beyond_shortest_us"] == pytest.approx(want["beyond_shortest_us"])
    by_process = {r["process"]: r for r in got["last_to_arrive"]}
    for process, w in want["shortest"].items():
        assert by_process[process]["shortest"] == w["count"], process
        assert by_process[process]["caused_us"] == pytest.approx(w["caused_us"]), process
    assert got["last_to_arrive"][0]["process"] == want["slow_process"]
    assert [r["process"] for r in got["last_to_arrive"] if r["flagged"]] == [want["slow_process"]]
    # the collectives read as without P2P
    assert section["instances"] == made.truth["instances"]
    assert section["beyond_shortest_us"] == pytest.approx(made.truth["beyond_shortest_us"])
    if made.truth["p2p"]["unmatched_records"]:
        assert got["incomplete_instances"] == 12  # the 7 -> 0 direction: counts differ, so none is guessed


def test_p2p_bus_bandwidth_per_op_and_link(p2p_job):
    """Send and Recv rows: bus bytes = size (P2P factor 1) over every record's time, and over each pair's
    shorter call; a matched pair's link from its two processes' hosts (3->4 and 7->0 cross hosts)."""
    folder, made = p2p_job
    peaks = link_peaks("H100", None)
    section = analyze_paths([folder], jobs=1, link_peaks=peaks).inspector
    assert section is not None
    got = {(r["op"], r["link"], r["size_bucket_bytes"]): r for r in section["bandwidth"] if r["kind"] == "send-recv"}
    want = made.truth["p2p"]["bandwidth"]
    assert sorted(got) == sorted((w["op"], w["link"], w["size_bucket"]) for w in want)
    for w in want:
        row = got[(w["op"], w["link"], w["size_bucket"])]
        assert row["bus_bandwidth_gbps"] == pytest.approx(w["bus_bandwidth_gbps"], rel=1e-9)
        assert row["transfer_bus_bandwidth_gbps"] == pytest.approx(w["transfer_bus_bandwidth_gbps"], rel=1e-9)
        assert row["link_peak_gbps"] == peaks.get(w["link"])


def test_gzipped_and_jsonl_logs_read_the_same(tmp_path):
    import gzip
    import shutil

    folder = tmp_path / "logs"
    shutil.copytree(SAMPLE, folder)
    first = folder / "node0-pid41000.log"
    (folder / "node0-pid41000.log.gz").write_bytes(gzip.compress(first.read_bytes()))
    first.unlink()
    (folder / "node0-pid41017.log").rename(folder / "node0-pid41017.jsonl")
    want = analyze_paths([SAMPLE], jobs=1).inspector
    got = analyze_paths([folder], jobs=1).inspector
    assert want is not None and got is not None
    for key in ("instances", "beyond_shortest_us", "bandwidth", "last_to_arrive"):
        assert got[key] == want[key]
