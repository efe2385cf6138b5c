"""Spec §8 match keys of PyTorch rank files, on hand-built Kineto JSON with every figure worked out by hand.

* A group the trace does not name is no key: alone, a rank's calls are unmatched (not incomplete keys);
  with every rank of the world present, rule 4 keys them by (kind, kernel name, n).
* Rule 1 links a kernel to its ``record_param_comms`` by the External id the kernel carries: a kernel
  launched by an op nested inside the call's range is not the call's.
* ``Src Rank``/``Dst Rank`` are global ranks (``Dst Rank`` on a send, ``Src Rank`` on a recv).
"""

from __future__ import annotations

import gzip
import html
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core.classify import classify
from moeprof.readers import read_file as load_trace

from .ledger_brute import comm_instances

runner = CliRunner()

RING = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
TREE = "ncclDevKernel_AllReduce_Sum_f32_TREE_LL(ncclDevKernelArgsStorage<4096ul>)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"
CAT = "void at::native::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(float*, unsigned int)"


def _rank_file(folder: Path, rank: int, world: int, kernels: list[dict], cpu: list[dict] | None = None) -> Path:
    """A rank file: kernels ``{"name", "ts", "dur", "ext"?, **args}`` (µs) launched from one thread."""
    events: list[dict] = []
    for corr, k in enumerate(kernels, 1):
        k = dict(k)
        name, ts, dur = k.pop("name"), k.pop("ts"), k.pop("dur")
        ext = k.pop("ext", corr)
        launch = k.pop("launch", ts - 5.0)
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch,
             "dur": 1.0, "args": {"correlation": corr, "External id": ext}}
        )  # fmt: skip
        args = {"device": 0, "stream": 7, "correlation": corr, "External id": ext, **k}
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                       "args": args})  # fmt: skip
    events += cpu or []
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}] * 8,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "traceEvents": events,
    }
    path = folder / f"rank{rank}.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _analyze(*args: Path | str) -> dict:
    res = runner.invoke(app, ["analyze", *map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _by_device(doc: dict) -> dict[str, dict]:
    return {d["device"]: d for d in doc["devices"]}


def test_a_rank_alone_without_a_named_group_is_unmatched_not_incomplete(tmp_path: Path) -> None:
    """World 2 on one node: the reader assumes the whole world as the group (for the link), but §8 has no
    key for a group the trace does not name and rule 4 needs every rank: 3 calls unmatched, 0 keys."""
    path = _rank_file(
        tmp_path,
        0,
        2,
        [
            {"name": RING, "ts": 10.0, "dur": 4.0, "Collective name": "allreduce"},
            {"name": GEMM, "ts": 20.0, "dur": 4.0},
            {"name": RING, "ts": 30.0, "dur": 2.0, "Collective name": "allreduce"},
            {"name": TREE, "ts": 40.0, "dur": 3.0, "Collective name": "allreduce"},
        ],
    )
    doc = _analyze(path)
    (dev,) = doc["devices"]
    assert (doc["ledger"]["instances"], doc["ledger"]["incomplete"], doc["ledger"]["desynchronized"]) == (0, 0, 0)
    assert (dev["comm_ns"], dev["comm_unmatched_ns"], dev["comm_wait_ns"]) == (9_000, 9_000, 0)
    # the link keeps its convenience: every peer of a one-node job is local
    assert (dev["comm_nvlink_ns"], dev["comm_unknown_link_ns"]) == (9_000, 0)


def _two_ranks_swapped_algorithms(folder: Path) -> list[Path]:
    """Rank 0 runs RING then TREE, rank 1 TREE then RING: (kind, n) pairs RING with TREE, (kind, name, n) does not."""
    r0 = [
        {"name": RING, "ts": 10.0, "dur": 5.0, "Collective name": "allreduce"},
        {"name": TREE, "ts": 30.0, "dur": 4.0, "Collective name": "allreduce"},
    ]
    r1 = [
        {"name": TREE, "ts": 12.0, "dur": 6.0, "Collective name": "allreduce"},
        {"name": RING, "ts": 31.0, "dur": 3.0, "Collective name": "allreduce"},
    ]
    return [_rank_file(folder, 0, 2, r0), _rank_file(folder, 1, 2, r1)]


@pytest.mark.slow
def test_every_rank_present_rule_4_keys_by_kernel_name(tmp_path: Path) -> None:
    """Rule 4, key (kind, kernel name, n). RING: rank 0 [10, 15) µs, rank 1 [31, 34): last arrival 31,
    rank 0 waits min(31 − 10, 5) = 5 µs, transfer 0; rank 1 waits 0, transfer 3. TREE: rank 0 [30, 34),
    rank 1 [12, 18): last arrival 30, rank 1 waits min(18, 6) = 6, transfer 0; rank 0 transfer 4."""
    paths = _two_ranks_swapped_algorithms(tmp_path)
    doc = _analyze(*paths)
    assert (doc["ledger"]["instances"], doc["ledger"]["incomplete"]) == (2, 0)
    got = {d: (r["comm_wait_ns"], r["comm_transfer_ns"], r["comm_unmatched_ns"]) for d, r in _by_device(doc).items()}
    assert got == {"rank0/GPU:0": (5_000, 4_000, 0), "rank1/GPU:0": (6_000, 3_000, 0)}
    stragglers = {r["device"]: (r["straggler_count"], r["caused_wait_ns"]) for r in doc["ledger"]["stragglers"]}
    assert stragglers == {"rank1/GPU:0": (1, 5_000), "rank0/GPU:0": (1, 6_000)}

    # the brute force matches the n-th activity of each kernel name across devices: the same answer
    events = pd.concat([classify(load_trace(p)).events for p in paths], ignore_index=True)
    brute = comm_instances(events, "name")
    wait = brute.groupby("device")["wait_ns"].sum().to_dict()
    transfer = (brute["end_ns"] - brute["start_ns"] - brute["wait_ns"]).groupby(brute["device"]).sum().to_dict()
    assert {d: (wait[d], transfer[d], 0) for d in wait} == got


def test_record_param_comms_is_linked_by_external_id(tmp_path: Path) -> None:
    """An all-to-all call (External id 50, group [0, 1], 4096 BFloat16 elements = 8192 bytes) whose range
    also holds an aten::cat (External id 60) launching a copy kernel: only the NCCL kernel, which carries
    External id 50, takes the call's group, bytes and collective."""
    rpc = {
        "ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 0.0, "dur": 40.0,
        "args": {"External id": 50, "Collective name": "all_to_all", "Process Group Name": "7",
                 "Process Group Ranks": "[0, 1]", "Group size": 2, "In msg nelems": 4096,
                 "Out msg nelems": 4096, "dtype": "BFloat16", "Seq": 3},
    }  # fmt: skip
    cat_op = {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 1, "ts": 2.0, "dur": 10.0,
              "args": {"External id": 60}}  # fmt: skip
    kernels = [
        {"name": CAT, "ts": 50.0, "dur": 2.0, "ext": 60, "launch": 5.0},
        {"name": SENDRECV, "ts": 60.0, "dur": 8.0, "ext": 50, "launch": 20.0},
    ]
    trace = load_trace(_rank_file(tmp_path, 0, 16, kernels, [rpc, cat_op]))
    rows = trace.events.set_index("name")
    nested, call = rows.loc[CAT], rows.loc[SENDRECV]
    assert (nested["group"], nested["collective"], nested["pg"], nested["seq"]) == ("", "", "", -1)
    assert pd.isna(nested["bytes"])
    assert (call["group"], call["collective"], call["pg"], call["seq"], call["bytes"]) == (
        "0,1",
        "all_to_all",
        "7",
        3,
        8192.0,
    )


def _p2p_rank_file(folder: Path, rank: int, collective: str, peer_field: str, peer: int, ts: float, dur: float) -> Path:
    """One send or recv on the process group of global ranks [0, 2, 4, 6] (name "5"), Seq 0."""
    rpc = {
        "ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": ts - 20.0, "dur": 30.0,
        "args": {"External id": 1, "Collective name": collective, "Process Group Name": "5",
                 "Process Group Ranks": "[0, 2, 4, 6]", "Group size": 4, "Seq": 0, peer_field: peer,
                 "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float"},
    }  # fmt: skip
    return _rank_file(folder, rank, 8, [{"name": SENDRECV, "ts": ts, "dur": dur, "ext": 1}], [rpc])


@pytest.mark.slow
def test_src_and_dst_rank_are_global_ranks(tmp_path: Path) -> None:
    """Rank 0 sends to global rank 2 (Dst Rank 2; as a group index, 2 would be global rank 4), rank 2
    receives from global rank 0 (Src Rank 0). One instance of members {0, 2}: send [1000, 1500) ns, recv
    [1200, 1600): last arrival 1200, the sender waits 200 ns and moves bytes 300, the receiver 0 and 400."""
    send = _p2p_rank_file(tmp_path, 0, "send", "Dst Rank", 2, 1.0, 0.5)
    recv = _p2p_rank_file(tmp_path, 2, "recv", "Src Rank", 0, 1.2, 0.4)
    for path in (send, recv):
        (group,) = set(load_trace(path).events["group"])
        assert group == "0,2"
    doc = _analyze(send, recv)
    assert (doc["ledger"]["instances"], doc["ledger"]["incomplete"]) == (1, 0)
    got = {d: (r["comm_wait_ns"], r["comm_transfer_ns"]) for d, r in _by_device(doc).items()}
    assert got == {"rank0/GPU:0": (200, 300), "rank2/GPU:0": (0, 400)}
    (straggler,) = doc["ledger"]["stragglers"][:1]
    assert (straggler["device"], straggler["straggler_count"], straggler["caused_wait_ns"]) == ("rank2/GPU:0", 1, 200)


def test_a_rank_alone_says_the_other_members_traces_are_missing(tmp_path: Path) -> None:
    """Rank 0 of a 2-rank job whose 2 all-reduces name the group [0, 1]: 2 incomplete keys in the JSON; on
    screen and in the HTML, in words, that rank 1's trace is missing."""
    calls = [
        {"name": RING, "ts": t, "dur": 4.0, "Collective name": "allreduce", "Process Group Name": "0",
         "Process Group Ranks": "[0, 1]", "Group size": 2}
        for t in (10.0, 30.0)
    ]  # fmt: skip
    path = _rank_file(tmp_path, 0, 2, calls)
    assert _analyze(path)["ledger"]["incomplete"] == 2
    said = "the traces of the other members are missing for 2 calls (2 incomplete keys"
    res = runner.invoke(app, ["analyze", str(path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert said in " ".join(res.stdout.split())
    out = tmp_path / "one.html"
    res = runner.invoke(app, ["report", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    body = html.unescape(out.read_text(encoding="utf-8").split('<script type="application/json"')[0])
    assert said in " ".join(body.split())


def _profiler_steps_file(folder: Path) -> Path:
    """ProfilerStep#4..#6 (a torch.profiler schedule records from step 4): each launches one kernel that runs
    5 µs after its range began, as long as the range (the GPU behind the host, each kernel ending inside the
    next range): steps of 100, 130 and 110 µs (spec §5: what each range launched)."""
    bounds = [(0.0, 100.0), (100.0, 230.0), (230.0, 340.0)]
    steps = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{4 + i}", "pid": 1, "tid": 1, "ts": s,
         "dur": e - s - 3.0}
        for i, (s, e) in enumerate(bounds)
    ]  # fmt: skip
    kernels = [{"name": GEMM, "ts": s + 5.0, "dur": e - s, "launch": s + 0.5} for s, e in bounds]
    return _rank_file(folder, 0, 1, kernels, steps)


def test_the_slowest_step_is_named_as_the_trace_numbers_it_with_its_steps_position(tmp_path: Path) -> None:
    """Step numbers are the trace's (ProfilerStep#5 is step 5, in the JSON and on screen); --steps counts
    positions (step 5 is --steps 1): the terminal says both, and --steps 1 measures exactly that step."""
    path = _profiler_steps_file(tmp_path)
    doc = _analyze(path)
    assert [s["step"] for s in doc["steps"]] == [4, 5, 6]
    assert (doc["spread"]["slowest_step"]["step"], doc["spread"]["slowest_step"]["position"]) == (5, 1)
    res = runner.invoke(app, ["analyze", str(path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "3 steps, slowest step 5 (--steps 1) at 1.18x the median span" in " ".join(res.stdout.split())
    (one,) = _analyze(path, "--steps", "1")["steps"]
    assert (one["step"], one["span_ns"]) == (5, 130_000)  # ProfilerStep#5's kernel, [105, 235) µs
    res = runner.invoke(app, ["analyze", str(path), "--steps", "7", "--json"])
    assert res.exit_code == 2
    assert "the trace has 3 steps (numbered 4, 5, 6 by the trace; --steps takes positions 0 to 2)" in res.stderr
