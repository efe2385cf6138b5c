"""Spec §11: the expert load (a run's manifest, ``--expert-load FILE``) and the per-pair all-to-all traffic (Kineto
split sizes), held against what the run recorded and what the capture script sent, each computed here apart
from moeprof's code; ``balance-router`` on the measured load."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import moeprof
from moeprof.core.analysis import Analysis
from moeprof.core.expert_load import RoutedLoad, expert_load_figures, manifest_load
from moeprof.errors import UNFORESEEN, InputError
from moeprof.pipeline import Request, run
from moeprof.readers.expert_load import read_expert_load
from moeprof.readers.kineto_splits import parse_splits
from moeprof.reports.routing import heatmaps, load_line
from synthetic.counterfactual import ROUTER_CHANGE, router_loads, simulate, write_job

from .helpers import SAMPLES, moeprof_here, needs_chromium, shared_trace

LOAD = SAMPLES / "tpu_v5e_load"
# the terminal report as a plain environment gives it (the CLI run in this process: tests/helpers.py moeprof_here)
TERMINAL: dict[str, str | None] = dict.fromkeys(
    ("MOEPROF_DEBUG", "FORCE_COLOR", "NO_COLOR", "TERM", "COLUMNS", "LINES")
)
W4 = SAMPLES / "kineto_alltoall_gloo_w4"
W33 = SAMPLES / "kineto_alltoall_gloo_w33"


def _manifest(name: str) -> dict:
    path = LOAD / name / "manifest.json" if (LOAD / name).is_dir() else LOAD / f"{name}.manifest.json"
    return json.loads(path.read_text())


# ---------------------------------------------------------------- expert load from the manifest


@pytest.mark.parametrize("name", ["skew8", "cap2", "cap1", "cap125"])
def test_manifest_load_figures_are_the_records(name: str) -> None:
    """Per layer and expert, by hand from the manifest's per-step records: the mean tokens per step, share,
    max/mean, hot (>= 2x the mean) and dead (0 in every step) experts, numpy's percentiles; the drops per layer
    (routed less kept) and per step (the records' tokens_dropped)."""
    manifest = _manifest(name)
    records = manifest["demo"]["records"]
    load = np.array([r["expert_load"] for r in records], dtype=float)  # [step, layer, expert]
    figures = expert_load_figures(manifest_load(manifest))  # type: ignore[arg-type]
    mean = load.mean(axis=0)
    assert figures["steps"] == len(records) and figures["experts"] == manifest["model"]["experts"]
    for layer, entry in enumerate(figures["layers"]):
        row = mean[layer]
        assert entry["tokens_per_expert"] == pytest.approx(row.tolist(), abs=1e-3)
        assert entry["share"] == pytest.approx((row / row.sum()).tolist(), abs=1e-6)
        assert entry["max_over_mean"] == pytest.approx(row.max() / row.mean(), abs=1e-4)
        assert entry["hot"] == [e for e in range(row.size) if row[e] >= 2 * row.mean()]
        assert entry["dead"] == [e for e in range(row.size) if (load[:, layer, e] == 0).all()]
        for q in (50, 90, 99):
            assert entry[f"p{q}"] == pytest.approx(np.percentile(row, q), abs=1e-3)
    if manifest["model"]["capacity_factor"] is None:
        assert "dropped" not in figures and all(entry["dropped"] is None for entry in figures["layers"])
        return
    kept = np.array([r["device_load"] for r in records], dtype=float).sum(axis=2)  # [step, layer]
    per_layer = (load.sum(axis=2) - kept).mean(axis=0)
    assert [entry["dropped"] for entry in figures["layers"]] == pytest.approx(per_layer.tolist())
    assert figures["dropped_per_step"] == [r["tokens_dropped"] for r in records]
    dropped = np.mean([r["tokens_dropped"] for r in records]) / load[0].sum()
    assert figures["dropped_share"] == pytest.approx(dropped, abs=1e-6)


@pytest.mark.parametrize("name", ["cap2", "cap1", "cap125"])
def test_drops_are_what_the_capacity_leaves(name: str) -> None:
    """One source device: an expert keeps at most C = ceil(cf · T · K / E) rows per step, so its drops are
    max(0, tokens − C) (earlier tokens win); summed they are the manifest's per-layer drops, step by step."""
    manifest = _manifest(name)
    model = manifest["model"]
    capacity = math.ceil(model["capacity_factor"] * model["tokens_per_device"] * model["top_k"] / model["experts"])
    figures = expert_load_figures(manifest_load(manifest))  # type: ignore[arg-type]
    assert figures["capacity"] == capacity
    load = np.array([r["expert_load"] for r in manifest["demo"]["records"]], dtype=float)
    per_expert = np.maximum(load - capacity, 0)
    for layer, entry in enumerate(figures["layers"]):
        assert entry["dropped_per_expert"] == pytest.approx(per_expert[:, layer, :].mean(axis=0).tolist(), abs=1e-3)
        assert entry["dropped"] == pytest.approx(per_expert[:, layer, :].sum(axis=1).mean())


def test_a_larger_capacity_factor_drops_less() -> None:
    """The session's three capacity runs (their own records): 1.0 drops most, 2.0 least, all of it in layers 1
    and 2 once the router concentrates (the runs diverge: sample_traces/tpu_v5e_load/PROVENANCE.md)."""
    share = {n: expert_load_figures(manifest_load(_manifest(n)))["dropped_share"] for n in ("cap1", "cap125", "cap2")}  # type: ignore[arg-type]
    assert share["cap1"] > share["cap125"] > share["cap2"] > 0.2
    assert round(share["cap2"], 3) == 0.216


def test_skew8_first_lines_name_the_hot_and_dead_experts() -> None:
    analysis = moeprof.analyze_paths([LOAD / "skew8"], jobs=1)
    line = load_line(analysis.expert_load)
    assert line is not None
    assert "layer 0 routes 13,561 of its 32,768 (token, k) assignments per step to expert 0 (6.6x" in line
    assert "none to 9 of its 16 experts" in line
    res = moeprof_here(["analyze", LOAD / "skew8", "--no-projection"], env=TERMINAL | {"COLUMNS": "400"})
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[:4]
    assert any(line.startswith("Expert load (the run's manifest, 5 steps): layer 0 routes 13,561") for line in first)


def test_capacity_first_line_says_the_drops() -> None:
    analysis = moeprof.analyze_paths([LOAD / "cap2"], jobs=1, what_if=())
    line = load_line(analysis.expert_load)
    assert line is not None and line.startswith("Capacity drops (the run's manifest; capacity factor 2, 4,096 rows")
    assert "21,195 of the 98,304 (token, k) assignments per step are dropped (21.6%)" in line
    assert "layer 0 none" in line


# ---------------------------------------------------------------- --expert-load FILE


def _truth_load() -> np.ndarray:
    """[step, layer, expert] counts with a dead expert and a hot one."""
    rng = np.random.default_rng(3)
    out = rng.integers(0, 500, (3, 2, 8)).astype(float)
    out[:, 1, 5] = 0
    out[:, 0, 2] = 2_000
    return out


def _write_forms(folder: Path, counts: np.ndarray) -> dict[str, Path]:
    steps, layers, experts = counts.shape
    records = [
        {
            "iteration": s,
            "layer_idx": f"model.layers.{layer}.mlp",
            "Expert ID": e,
            "num_tokens": int(counts[s, layer, e]),
        }
        for s in range(steps)
        for layer in range(layers)
        for e in range(experts)
    ]
    forms = {
        "records.json": json.dumps(records),
        "wrapped.json": json.dumps({"meta": {"framework": "x"}, "expert_load": records}),
        "lines.jsonl": "\n".join(json.dumps(r) for r in records),
        "nested.json": json.dumps({"tokens_per_expert": counts.astype(int).tolist()}),
        "per_step.json": json.dumps([{"step": s, "expert_load": counts[s].astype(int).tolist()} for s in range(steps)]),
        "table.csv": "step,layer,expert,tokens\n"
        + "\n".join(
            f"{r['iteration']},{r['layer_idx'].split('.')[2]},{r['Expert ID']},{r['num_tokens']}" for r in records
        ),
        "table.tsv": "Step\tLayer\tExpert\tCount\n"
        + "\n".join(f"{r['iteration']}\t{r['layer_idx']}\t{r['Expert ID']}\t{r['num_tokens']}" for r in records),
    }
    out = {}
    for name, text in forms.items():
        out[name] = folder / name
        out[name].write_text(text)
    out["table.csv.gz"] = folder / "table.csv.gz"
    out["table.csv.gz"].write_bytes(gzip.compress(forms["table.csv"].encode()))
    return out


def test_every_form_of_an_expert_load_log_reads_the_same(tmp_path: Path) -> None:
    counts = _truth_load()
    for name, path in _write_forms(tmp_path, counts).items():
        load = read_expert_load(path)
        assert load.source == "file" and load.experts == counts.shape[2], name
        per_step, steps = load.per_step_layer_expert()
        assert steps.tolist() == [0, 1, 2] and np.array_equal(per_step, counts), name
        figures = expert_load_figures(load)
        mean = counts.mean(axis=0)
        assert figures["layers"][1]["dead"] == [5], name
        assert figures["layers"][0]["hot"] == [e for e in range(8) if mean[0, e] >= 2 * mean[0].mean()] == [2], name


def test_analyze_takes_the_load_of_the_file_over_the_manifests(tmp_path: Path) -> None:
    counts = _truth_load()
    path = _write_forms(tmp_path, counts)["table.csv"]
    res = moeprof_here(["analyze", SAMPLES / "cpu_moe_8dev", "--expert-load", path, "--json", "--no-projection"])
    assert res.returncode == 0, res.stderr
    section = json.loads(res.stdout)["expert_load"]
    assert section["source"] == "file" and section["origin"] == str(path)
    for entry, want in zip(section["layers"], counts.mean(axis=0), strict=True):
        assert entry["tokens_per_expert"] == pytest.approx(want.tolist(), abs=1e-3)


@pytest.mark.parametrize(
    "text, said",
    [
        ("", "empty"),
        ("step,layer,tokens\n0,0,3\n", "names no expert"),
        ("expert,tokens\n0,3\n1,-2\n", "line 3: tokens '-2' is not a count"),
        ("expert,tokens\n0,3\n0.5,2\n", "line 3: expert '0.5' is not an integer"),
        ("expert,tokens\n0,3\n0,4\n", "line 3 repeats step 0, layer 0, expert 0 (line 2 gave it first)"),
        ("expert,tokens\n0,nan\n", "not a count"),
        ('[{"expert": 0, "tokens": 1}, {"expert": 1}]', "record 1 has no tokens"),
        ('{"expert_load": [[1, 2], [3]', "not valid JSON"),
        ('{"config": {"lr": 1}}', "JSON without expert load"),
        ("expert,tokens\n99999999,1\n", "beyond any MoE model"),
        ('{"tokens_per_expert": [[[[1]]]]}', "expected counts as [layer][expert]"),
        ("expert,tokens,device\n0,1,0\n1,2,\n", "some records name a device and some do not"),
    ],
)
def test_a_bad_expert_load_is_refused_naming_the_file(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / ("load.json" if text.startswith(("[", "{")) else "load.csv")
    path.write_text(text)
    with pytest.raises(InputError) as refused:
        read_expert_load(path)
    message = str(refused.value)
    assert message.startswith(str(path)) and said in message and UNFORESEEN not in message, message


def test_a_bad_expert_load_stops_analyze_before_any_trace_is_read(tmp_path: Path) -> None:
    """The bad-input contract: exit 2, one line naming the file, the file untouched and nothing left behind."""
    path = tmp_path / "load.csv"
    path.write_text("expert,tokens\n0,-1\n")
    for args in ([str(path)], [str(tmp_path / "missing.csv")]):
        res = moeprof_here(["analyze", W4, "--expert-load", *args], env={"MOEPROF_DEBUG": None})
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and args[0] in lines[0], res.stderr
        assert "Traceback" not in res.stderr and UNFORESEEN not in res.stderr
    assert path.read_text() == "expert,tokens\n0,-1\n" and sorted(p.name for p in tmp_path.iterdir()) == ["load.csv"]


# ---------------------------------------------------------------- per-pair traffic from Kineto split sizes


def _truth(folder: Path) -> dict:
    return json.loads(Path(f"{folder}.truth.json").read_text())


@pytest.fixture(scope="module")
def w4() -> Analysis:
    return moeprof.analyze_paths([W4], jobs=1)


@pytest.fixture(scope="module")
def w33() -> Analysis:
    return moeprof.analyze_paths([W33], jobs=1)


def test_the_matrix_is_the_splits_the_script_sent(w4: Analysis) -> None:
    """A real CPU PyTorch capture (gloo, record_shapes): each instance's matrix, cell by cell, is the rows the
    script passed as input_split_sizes times the bytes of a row; its sums are the tensors' sizes."""
    truth = _truth(W4)
    assert len(w4.traffic) == len(truth["calls"]) == 4 and not w4.devices
    for entry, call in zip(w4.traffic, truth["calls"], strict=True):
        sent = np.array(call["rows"]) * call["bytes_per_row"]
        assert entry["matrix_bytes"] == sent.tolist()
        assert entry["row_bytes"] == sent.sum(axis=1).tolist() and entry["col_bytes"] == sent.sum(axis=0).tolist()
        assert entry["step"] == call["step"] and entry["ranks"] == [0, 1, 2, 3] and not entry["partial"]
        assert entry["dtype"] == call["dtype"]
        rows, cols = sent.sum(axis=1), sent.sum(axis=0)
        assert entry["row_max_over_mean"] == pytest.approx(rows.max() / rows.mean(), abs=1e-4)
        assert entry["col_max_over_mean"] == pytest.approx(cols.max() / cols.mean(), abs=1e-4)
        want = [("sender", r) for r in range(4) if rows[r] > 3 * rows.mean()]
        want += [("receiver", r) for r in range(4) if cols[r] > 3 * cols.mean()]
        want += [("pair", (s, d)) for s in range(4) for d in range(4) if sent[s, d] > 5 * sent.mean()]
        got = [(f["kind"], f["rank"] if f["kind"] != "pair" else (f["src"], f["dst"])) for f in entry["flagged"]]
        assert got == want
        assert entry["timeline"].startswith("needs device activity")
    assert w4.traffic[0]["flagged"] == [{"kind": "receiver", "rank": 2, "bytes": 1792, "over_mean": 3.1111}]


def test_dropped_lists_leave_the_cells_unknown_and_the_sums_exact(w33: Analysis) -> None:
    """33 ranks: PyTorch drops the lists (""). No cell is guessed; each row and column sum is still the
    tensor's size, which the truth gives as the sum of the splits."""
    truth = _truth(W33)
    assert len(w33.traffic) == 4
    for entry, call in zip(w33.traffic, truth["calls"], strict=True):
        sent = np.array(call["rows"]) * call["bytes_per_row"]
        assert entry["partial"] and entry["lists"] == {"sent": ["dropped"], "received": ["dropped"]}
        assert all(v is None for row in entry["matrix_bytes"] for v in row)
        assert entry["row_bytes"] == sent.sum(axis=1).tolist() and entry["col_bytes"] == sent.sum(axis=0).tolist()
    assert any("cut, dropped" in w for w in w33.warnings)


def test_a_host_only_capture_says_its_timeline_figures_need_device_activity(w4: Analysis) -> None:
    doc = w4.to_json()
    assert doc["devices"] == [] and all(v is None for v in doc["total"].values())
    assert Analysis.from_json(doc).traffic == w4.traffic  # a saved analysis keeps it
    res = moeprof_here(["analyze", W4], env=TERMINAL | {"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("No device timeline in these traces (4 files")
    assert "need device activity" in res.stdout and "receiver rank 2 gets 1.8 KiB (3.1x" in res.stdout


@pytest.mark.parametrize(
    "text, state, counts",
    [
        ("[2, 4, 6, 8]", "listed", (2, 4, 6, 8)),
        ("[]", "even", ()),
        ("[1, 2, ...]", "cut", (1, 2)),
        ("", "dropped", ()),
        (None, "unrecorded", ()),
        ("[1, x]", "dropped", ()),
        ([3, 0, 1], "listed", (3, 0, 1)),
    ],
)
def test_split_lists_as_pytorch_writes_them(text: object, state: str, counts: tuple) -> None:
    assert parse_splits(text) == (state, counts)


def _nccl_rank(rank: int, sends: list[list[int]], row_elems: int, cut_from: int | None) -> dict:
    """One rank of an NCCL job as PyTorch >= 2.11 writes it: record_param_comms with In/Out split size, Seq and
    the group, launching a SendRecv kernel; ``cut_from``: lists longer than this end in "..."."""
    n = len(sends)
    events = []
    for seq, (start, dur) in enumerate(((1_000.0, 80.0), (2_000.0, 120.0))):
        send = [sends[rank][d] * (seq + 1) for d in range(n)]
        recv = [sends[s][rank] * (seq + 1) for s in range(n)]

        def listed(values: list[int]) -> str:
            if cut_from is not None and len(values) > cut_from:
                return "[" + ", ".join(map(str, values[:cut_from])) + ", ...]"
            return "[" + ", ".join(map(str, values)) + "]"

        ext = 100 + seq
        args = {"External id": ext, "Collective name": "all_to_allv", "Process Group Name": "0",
                "Process Group Ranks": str(list(range(n))), "Group size": n, "Seq": seq, "dtype": "BFloat16",
                "In msg nelems": sum(send) * row_elems, "Out msg nelems": sum(recv) * row_elems,
                "In split size": listed(send), "Out split size": listed(recv)}  # fmt: skip
        events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
                       "ts": start + rank, "dur": 20.0, "args": args})  # fmt: skip
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": start + rank + 5, "dur": 5.0,
                       "args": {"correlation": ext, "External id": ext}})  # fmt: skip
        # rank 3 arrives last in the second call: the others wait for it
        late = 60.0 if (seq == 1 and rank == 3) else 0.0
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgs)", "pid": 0,
                       "tid": 7, "ts": start + 10 + late, "dur": dur - late,
                       "args": {"device": 0, "stream": 7, "correlation": ext, "External id": ext}})  # fmt: skip
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": n}, "traceEvents": events}  # fmt: skip


def _nccl_job(folder: Path, cut_from: int | None = None) -> list[list[int]]:
    sends = [[(3 * s + 5 * d) % 7 + (10 if d == 2 else 0) for d in range(4)] for s in range(4)]
    folder.mkdir()
    for r in range(4):
        (folder / f"rank{r}.pt.trace.json").write_text(json.dumps(_nccl_rank(r, sends, 16, cut_from)))
    return sends


def test_nccl_split_sizes_and_the_ledger_join(tmp_path: Path) -> None:
    """record_param_comms' In/Out split size with In msg nelems and the dtype give the bytes; each instance joins
    the §8 ledger: per receiver its wait (for the last sender) and transfer, per pair the receiver's."""
    sends = _nccl_job(tmp_path / "job")
    analysis = moeprof.analyze_paths([tmp_path / "job"], jobs=1)
    assert len(analysis.traffic) == 2
    for seq, entry in enumerate(analysis.traffic):
        want = np.array(sends) * (seq + 1) * 16 * 2  # rows x 16 bf16 elements
        assert entry["matrix_bytes"] == want.tolist() and entry["matched_by"] == "seq"
        receivers = {r["rank"]: r for r in entry["receivers"]}
        assert [r["bytes"] for r in entry["receivers"]] == want.sum(axis=0).tolist()
        # by hand from the kernels: every member starts at 10 µs past the call, rank 3 in the second 60 µs late
        for rank, r in receivers.items():
            late = seq == 1 and rank == 3
            wait = 0 if late or seq == 0 else 60_000
            assert (r["wait_ns"], r["wait_ns"] + r["transfer_ns"]) == (
                wait,
                (60_000 if late else 120_000) if seq else 80_000,
            )
        pair = next(p for p in entry["pairs"] if (p["src"], p["dst"]) == (0, 2))
        assert pair["bytes"] == want[0, 2] and pair["wait_ns"] == receivers[2]["wait_ns"]


def test_cut_lists_keep_their_recorded_prefix_and_nothing_more(tmp_path: Path) -> None:
    """NCCL's record_param_comms: a cut list leaves the rows of a row unknown (nelems / Σ splits needs the whole
    list): every cell unknown. alltoall_base_ with shapes: the row's bytes come from the tensor's dims, so the
    recorded prefix of a cut list gives its cells, the rest unknown; the sums are the tensors' either way."""
    sends = _nccl_job(tmp_path / "job", cut_from=2)
    entry = moeprof.analyze_paths([tmp_path / "job"], jobs=1).traffic[0]
    want = np.array(sends) * 16 * 2
    assert entry["partial"] and entry["lists"]["sent"] == ["cut"]
    assert all(v is None for row in entry["matrix_bytes"] for v in row)
    assert entry["row_bytes"] == want.sum(axis=1).tolist() and entry["col_bytes"] == want.sum(axis=0).tolist()
    folder = tmp_path / "gloo"
    folder.mkdir()
    for r in range(4):
        send, recv = sends[r], [sends[s][r] for s in range(4)]
        args = {"External id": 1, "Concrete Inputs": ["", "", "", f"[{recv[0]}, ...]", f"[{send[0]}, {send[1]}, ...]",
                                                      "False", "-1"],
                "Input type": ["float", "float", "", "ScalarList", "ScalarList", "Scalar", "Scalar"],
                "Input Dims": [[sum(recv), 4], [sum(send), 4], [], [], [], [], []]}  # fmt: skip
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": r, "world_size": 4},
               "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "c10d::alltoall_base_", "pid": 1, "tid": 1,
                                "ts": 100.0, "dur": 10.0, "args": args}]}  # fmt: skip
        (folder / f"rank{r}.pt.trace.json").write_text(json.dumps(doc))
    entry = moeprof.analyze_paths([folder], jobs=1).traffic[0]
    rows = np.array(sends) * 4 * 4  # rows x 4 fp32
    # a cell is known where the sender's list names it (its first two receivers) or the receiver's does (sender 0)
    known = [[d < 2 or s == 0 for d in range(4)] for s in range(4)]
    assert entry["matrix_bytes"] == [[int(rows[s, d]) if known[s][d] else None for d in range(4)] for s in range(4)]
    assert entry["row_bytes"] == rows.sum(axis=1).tolist() and entry["col_bytes"] == rows.sum(axis=0).tolist()


def test_dlrm_records_no_lists_but_its_tensors_give_the_sums() -> None:
    """The shared DLRM job (8 x V100, NCCL, 2023's PyTorch): its alltoall_base_ ops record Input Dims but no
    Concrete Inputs; each of its 5 all-to-alls has unknown cells, exact row and column sums, and its ranks'
    waits from the §8 ledger. The fourth's receivers differ: rank 3 gets 53,248 bytes (3.9x the mean)."""
    folder = shared_trace("kineto/dlrm_8rank_v100")
    analysis = moeprof.analyze_paths([folder], jobs=1)
    assert len(analysis.traffic) == 5
    for entry in analysis.traffic:
        assert entry["partial"] and entry["lists"] == {"sent": ["unrecorded"], "received": ["unrecorded"]}
        assert len(entry["receivers"]) == 8
    hot = next(t for t in analysis.traffic if t["flagged"])
    cols = np.array(hot["col_bytes"], dtype=float)
    over = round(float(cols.max() / cols.mean()), 4)
    assert hot["flagged"] == [{"kind": "receiver", "rank": 3, "bytes": 53_248, "over_mean": over}] and over > 3
    dims = {}
    for r in range(8):  # the output tensor's dims of rank r's fourth call, read here from the JSON
        doc = json.loads(gzip.decompress((folder / f"worker{r}.pt.trace.json.gz").read_bytes()))
        ops = sorted((e for e in doc["traceEvents"] if e.get("name") == "c10d::alltoall_base_"), key=lambda e: e["ts"])
        dims[r] = ops[3]["args"]["Input Dims"][0][0] * 4  # int32 lengths
    assert hot["col_bytes"] == [dims[r] for r in range(8)]


# ---------------------------------------------------------------- the projection on the measured load


def test_balance_router_on_one_chip_says_why_nothing_moves() -> None:
    analysis = moeprof.analyze_paths([LOAD / "skew8"], jobs=1, what_if=["balance-router"])
    asked = analysis.projection("asked")
    assert asked is not None and asked.saving_ns == 0
    assert asked.note.startswith("one chip, runsc/TPU:0, runs every expert: a balanced router moves no work")
    assert "layer 0's 32,768 (token, k) assignments per step, its hottest expert 6.6x the mean" in asked.note
    capacity = moeprof.analyze_paths([LOAD / "cap2"], jobs=1, what_if=["balance-router"]).projection("asked")
    assert capacity is not None and "would keep the 21,195 assignments per step the capacity drops" in capacity.note


@pytest.mark.parametrize("ragged", [False, True], ids=["fixed-shape", "ragged"])
def test_balance_router_spreads_the_measured_rows_not_a_slow_ranks_time(tmp_path: Path, ragged: bool) -> None:
    """A skewed router and a slow rank (1.5x slower GEMMs) together: the router balanced leaves the slow rank
    slow. With the routed rows per rank known (an --expert-load log of the generator's loads), balance-router
    lands within 1% of the job run again with every load 1; spreading the measured durations instead also
    "fixes" the slow rank and misses by more than 5%."""
    kw = {"ranks": 8, "steps": 3, "layers": 3, "seed": 4, "router_skew": 1.0, "ragged": ragged, "slow_factor": 1.5}
    write_job(tmp_path, **kw)  # type: ignore[arg-type]
    truth = float(np.mean(simulate(change=ROUTER_CHANGE, **kw).step_times()))  # type: ignore[arg-type]
    loads = router_loads(8, 1.0)
    rows = [(s, layer, e, -1, float(loads[e] * 1000)) for s in range(3) for layer in range(3) for e in range(8)]
    routed = RoutedLoad(pd.DataFrame(rows, columns=["step", "layer", "expert", "device", "tokens"]), "file", "log", 8)
    traces = moeprof.load(tmp_path)
    rows_based = run(Request(traces, what_if=["balance-router"], expert_load=routed)).analysis.projection("asked")
    time_based = run(Request(traces, what_if=["balance-router"])).analysis.projection("asked")
    assert rows_based is not None and time_based is not None
    assert abs(rows_based.projected_step_ns - truth) <= 0.01 * truth
    assert abs(time_based.projected_step_ns - truth) > 0.05 * truth
    assert "follows the run's routed rows" in rows_based.note


# ---------------------------------------------------------------- the HTML heatmaps


def test_heatmaps_carry_the_analysis_figures(w33: Analysis) -> None:
    analysis = moeprof.analyze_paths([LOAD / "cap2"], jobs=1, what_if=())
    maps = heatmaps(analysis)
    assert [m["kind"] for m in maps] == ["load", "drops"]
    layers = analysis.expert_load["layers"]  # type: ignore[index]
    assert maps[0]["values"] == [entry["tokens_per_expert"] for entry in layers]
    assert maps[1]["values"] == [entry["dropped_per_expert"] for entry in layers]
    traffic = heatmaps(w33)
    assert len(traffic) == 4 and all(m["kind"] == "traffic" for m in traffic)
    assert traffic[0]["values"] == w33.traffic[0]["matrix_bytes"] and traffic[0]["flag_cols"] == [2]


@needs_chromium
@pytest.mark.slow  # chromium in a subprocess
def test_the_browser_draws_the_heatmaps(tmp_path: Path) -> None:
    """What the page's script drew, read back from the DOM: every known cell painted, every unknown one
    hatched, the hover text of the largest cell its figure."""
    import html
    import re

    from .helpers import chromium

    for folder, want in ((LOAD / "skew8", [("load", 48, 0, 13561.0)]), (W33, [("traffic", 0, 33 * 33, 0.0)] * 4)):
        out = tmp_path / f"{folder.name}.html"
        res = moeprof_here(["report", folder, "-o", out, "--no-projection"])
        assert res.returncode == 0, res.stderr
        dom = chromium(tmp_path, "--dump-dom", out.as_uri()).stdout
        status = re.search(r'<span id="moeprof-status"([^>]*)>', dom)
        assert status is not None
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', status.group(1)))
        assert attrs["data-ok"] == "1", dom[-3000:]
        drawn = json.loads(html.unescape(attrs["data-heatmaps"]))
        assert [(d["kind"], d["painted"], d["unknown"], d["max"]) for d in drawn] == want
        hover = drawn[0]["hover"]
        if folder == W33:
            assert hover == ""  # nothing known to hover in the world-33 matrices
        else:
            assert hover == "layer 0, expert 0: 13,561 tokens (6.62x the layer's mean)"


def test_gates_refuse_host_only_traces_rather_than_pass_on_nothing(w4: Analysis) -> None:
    """check, diff and --history have no figure of a host-only job: each refuses it in one line (exit 2),
    where before a trace without device activity was refused at reading."""
    from moeprof.gate.check import Source, checkable
    from moeprof.gate.diff import compare
    from moeprof.gate.history import record_run

    source = Source(W4, "trace", w4)
    with pytest.raises(InputError, match=r"host-only traces .* no figure to gate"):
        checkable(source, ("comm_share",))
    with pytest.raises(InputError, match="no figure diff compares"):
        compare([source, source])
    with pytest.raises(InputError, match="--history records the §4 figures; host-only traces"):
        record_run(Path("unused.db"), "analyze", w4)
