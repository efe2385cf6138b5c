"""PyTorch Kineto reader: synthetic documents for the rules, real public traces for the facts.

Expected values on real traces are computed here by a direct scan of the JSON,
independently of the parser.
"""

from __future__ import annotations

import gzip
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from moeprof.core.classify import classify
from moeprof.core.events import COLUMNS, DEVICE_ACTIVITIES
from moeprof.core.trace import Trace
from moeprof.errors import InputError
from moeprof.options import LoadOptions
from moeprof.readers.base import ReadContext
from moeprof.readers.kineto import _comm_fields, _innermost, _rank, is_kineto, read_kineto, us_pair_to_ns

from .helpers import SHARED_TRACES

TRACES = SHARED_TRACES / "kineto"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def load(rel: str) -> dict:
    path = TRACES / rel
    if not path.exists():
        pytest.skip(f"real trace {path} not present (set MOEPROF_SHARED_TRACES to the shared real traces)")
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return orjson.loads(fh.read())


def kineto_trace(doc: dict, path: Path, options: LoadOptions | None = None) -> Trace:
    return read_kineto(doc, path, ReadContext(options or LoadOptions()))


def parsed(rel: str, **kw) -> tuple[dict, Trace]:
    doc = load(rel)
    return doc, classify(kineto_trace(doc, TRACES / rel, **kw))


def device_rows(trace: Trace) -> pd.DataFrame:
    assert trace.events["activity"].isin(DEVICE_ACTIVITIES).all()  # markers never travel as rows
    return trace.events


def exact_ns(us: float) -> int:
    """Nearest ns of a float µs value, in exact rational arithmetic (half to even, like np.rint)."""
    return round(Fraction(us) * 1000)


# ---- synthetic documents --------------------------------------------------------------


def ev(cat: str, name: str, ts: float, dur: float, pid: object = 1, tid: object = 1, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kernel(name: str, ts: float, dur: float, corr: int, ext: int = -5, stream: int = 7, **args: object) -> dict:
    return ev(
        "kernel",
        name,
        ts,
        dur,
        pid=0,
        tid=stream,
        device=0,
        stream=stream,
        correlation=corr,
        **{"External id": ext},
        **args,
    )


def synthetic() -> dict:
    nccl = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
    return {
        "schemaVersion": 1,
        "traceEvents": [
            ev("user_annotation", "ProfilerStep#5", 0.0, 1000.0),
            # all-to-all: record_param_comms > nccl:all_to_all > launch, with an earlier sibling op
            ev("cpu_op", "c10d::alltoall_base_", 100.0, 100.0),
            ev(
                "cpu_op",
                "record_param_comms",
                101.0,
                90.0,
                **{
                    "Collective name": "all_to_all",
                    "Process Group Ranks": "[0, 8]",
                    "Group size": 2,
                    "In msg nelems": 1024,
                    "Out msg nelems": 1024,
                    "dtype": "BFloat16",
                    "External id": 70,
                },
            ),
            ev("cpu_op", "aten::empty", 102.0, 2.0),  # sibling that ended before the launch
            ev("user_annotation", "nccl:all_to_all", 105.0, 50.0),
            ev("cuda_runtime", "cudaLaunchKernel", 110.0, 5.0, correlation=7, **{"External id": 70}),
            kernel(nccl, 300.0, 20.0, corr=7, ext=70),  # the call's kernel carries its External id (§8 rule 1)
            # DeepEP-style range, launch known only from the ac2g flow start
            ev("user_annotation", "dispatch(F)", 400.0, 50.0, tid=2),
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 8, "pid": 1, "tid": 2, "ts": 410.0},
            kernel("void dpsk::ep::internode::dispatch<false>(int4*)", 500.0, 10.0, corr=8),
            # no launch and no flow: the CPU op named by External id anchors the kernel
            ev("cpu_op", "c10d::allreduce_", 600.0, 30.0, tid=3, **{"External id": 55}),
            kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 700.0, 10.0, corr=9, ext=55),
            # a compute kernel launched outside any comm range
            ev("cuda_runtime", "cudaLaunchKernel", 210.0, 5.0, correlation=10),
            kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 800.0, 5.0, corr=10),
            ev(
                "gpu_memcpy",
                "Memcpy PtoP (Device -> Device)",
                820.0,
                3.0,
                pid=0,
                tid=9,
                device=0,
                stream=9,
                correlation=11,
                bytes=4096,
            ),
            ev(
                "gpu_memcpy",
                "Memcpy HtoD (Pageable -> Device)",
                830.0,
                3.0,
                pid=0,
                tid=9,
                device=0,
                stream=9,
                correlation=12,
                bytes=64,
            ),
            ev("gpu_memset", "Memset (Device)", 840.0, 1.0, pid=0, tid=9, device=0, stream=9, correlation=13),
            ev("gpu_user_annotation", "## forward ##", 300.0, 600.0, pid=0, tid=7),  # not activity
            ev("python_function", "train.py(10): step", 0.0, 1000.0),
        ],
    }


def test_rounding_to_nearest_ns_never_inward() -> None:
    doc = {"schemaVersion": 1, "traceEvents": [kernel("k", 1.0004, 0.0003, corr=1)]}
    row = kineto_trace(doc, Path("t.json")).events
    assert (row["start_ns"].iloc[0], row["end_ns"].iloc[0]) == (1000, 1001)
    # epoch-sized µs: products exceed 2**53 ns, yet the ns must be exact
    start, end = us_pair_to_ns(np.array([1740461679471346.25]), np.array([0.5]))
    assert (int(start[0]), int(end[0])) == (1740461679471346250, 1740461679471346750)
    start, end = us_pair_to_ns(np.array([4458676983543.183, 2.0006]), np.array([41.407, 0.0]))
    assert start.tolist() == [4458676983543183, 2001]
    assert end.tolist() == [4458676983584590, 2001]


def test_synthetic_columns_and_linking() -> None:
    table = classify(kineto_trace(synthetic(), Path("/x/rank-3.json")))
    assert list(table.events.columns[: len(COLUMNS)]) == list(COLUMNS)
    dev = device_rows(table).set_index("name")
    assert len(dev) == 7  # 4 kernels, 2 memcpys, 1 memset; annotation ranges are not activity
    assert set(dev["device"]) == {"rank3/GPU:0"} and set(dev["host"]) == {"rank3"}
    assert set(dev["global_id"]) == {3} and set(dev["gpus_per_domain"]) == {8} and set(dev["source"]) == {"kineto"}

    a2a = dev.loc["ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"]
    assert (a2a["collective"], a2a["group"], a2a["annotation"]) == ("all_to_all", "0,8", "nccl:all_to_all")
    assert a2a["bytes"] == 1024 * 2 and a2a["stream"] == "stream 7"
    assert (a2a["bucket"], a2a["kind"]) == ("comm", "all-to-all")
    assert (a2a["start_ns"], a2a["end_ns"]) == (300_000, 320_000)

    ep = dev.loc["void dpsk::ep::internode::dispatch<false>(int4*)"]
    assert (ep["annotation"], ep["kind"], ep["link_hint"]) == ("dispatch(F)", "ep-dispatch", "internode")

    ar = dev.loc["ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)"]
    assert (ar["annotation"], ar["kind"], ar["collective"]) == ("c10d::allreduce_", "all-reduce", "")

    gemm = dev.loc["sm90_xmma_gemm_bf16bf16_bf16f32"]
    assert (gemm["annotation"], gemm["collective"], gemm["bucket"]) == ("", "", "compute")

    ptop = dev.loc["Memcpy PtoP (Device -> Device)"]
    assert (ptop["activity"], ptop["copy_kind"], ptop["bucket"], ptop["bytes"]) == ("memcpy", "PtoP", "comm", 4096)
    assert dev.loc["Memcpy HtoD (Pageable -> Device)", "copy_kind"] == "HtoD"
    assert dev.loc["Memset (Device)", "activity"] == "memset"

    steps = table.markers[table.markers["kind"] == "step"]
    assert steps[["name", "device", "host", "number", "start_ns", "end_ns"]].values.tolist() == [
        ["ProfilerStep#5", "", "rank3", 5, 0, 1_000_000]
    ]


def test_gpus_per_domain_from_options_and_device_properties() -> None:
    doc = synthetic()
    assert set(kineto_trace(doc, Path("t.json"), LoadOptions(gpus_per_node=4)).events["gpus_per_domain"]) == {4}
    doc["deviceProperties"] = [{"id": i} for i in range(2)]
    assert set(kineto_trace(doc, Path("t.json")).events["gpus_per_domain"]) == {2}


def test_rank_sources() -> None:
    assert _rank({"distributedInfo": {"rank": 5}}, Path("worker3.pt.trace.json.gz"), 1) == 5
    assert _rank({}, Path("worker3.pt.trace.json.gz"), 1) == 3
    assert _rank({}, Path("rank-1.json.gz"), 0) == 1
    assert _rank({}, Path("trace_12.json"), 0) == 12
    # Kineto's default "<host>_<pid>.<time>" names carry numbers that are not ranks
    assert _rank({}, Path("node7_2910249.1700000000123.pt.trace.json"), 4) == 4
    assert _rank({}, Path("trace.json"), 2) == 2


def test_group_and_bytes_from_comm_args() -> None:
    # full list as PyTorch writes it
    assert _comm_fields(
        {
            "Collective name": "allgather",
            "Process Group Ranks": "[0, 8, 16]",
            "dtype": "Half",
            "In msg nelems": 10,
            "Out msg nelems": 30,
        },
        {},
        None,
    ) == ("allgather", "0,8,16", 60.0)
    # more than 30 ranks are written "[0, 1, ..., ...]": rebuild from start/stride/size instead
    truncated = "[" + ", ".join(str(r) for r in range(0, 60, 2)) + ", ...]"
    fields = _comm_fields(
        {"Process Group Ranks": truncated, "Group size": 64, "Global rank start": 0, "Global rank stride": 2}, {}, 128
    )
    assert fields[1] == ",".join(str(r) for r in range(0, 128, 2))
    # only the process group's name: distributedInfo.pg_config knows its ranks
    assert _comm_fields({"Process Group Name": "5"}, {"5": [0, 16]}, 32)[1] == "0,16"
    # a group as large as the world is the world
    assert _comm_fields({"Group size": 4}, {}, 4)[1] == "0,1,2,3"
    assert _comm_fields({"Group size": 2}, {}, 4)[1] == ""
    # reduce-scatter: the input is the larger buffer; unknown dtype gives no size
    assert _comm_fields({"In msg nelems": 64, "Out msg nelems": 8, "dtype": "Float"}, {}, None)[2] == 256.0
    assert np.isnan(_comm_fields({"In msg nelems": 64, "dtype": "Mystery"}, {}, None)[2])


def test_bad_input_and_empty() -> None:
    with pytest.raises(InputError, match="traceEvents"):
        kineto_trace({"schemaVersion": 1}, Path("bad.json"))
    with pytest.raises(InputError, match="not an event object"):
        kineto_trace({"traceEvents": [1, 2]}, Path("bad.json"))
    with pytest.raises(InputError, match="not a number"):
        kineto_trace({"traceEvents": [kernel("k", "soon", 1.0, corr=1)]}, Path("bad.json"))  # type: ignore[arg-type]
    no_gpu = {"schemaVersion": 1, "traceEvents": [ev("cpu_op", "aten::mm", 0.0, 5.0)]}
    empty = kineto_trace(no_gpu, Path("cpu.json")).events
    assert len(empty) == 0 and list(empty.columns) == list(COLUMNS)


def test_is_kineto() -> None:
    assert is_kineto(synthetic())
    assert is_kineto({"traceEvents": [kernel("k", 1.0, 1.0, corr=1)]})
    assert not is_kineto({"traceEvents": [ev("cpu_op", "x", 0.0, 1.0)]})
    assert not is_kineto({"displayTimeUnit": "ns"})
    assert not is_kineto([])


def test_innermost_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    # random properly nested ranges on 3 threads (children cut inside parents), random queries
    starts, ends, threads = [], [], []
    for th in range(3):
        stack = [(0, 10_000)]
        while stack and len(starts) < 400 * (th + 1):
            lo, hi = stack.pop()
            if hi - lo < 4:
                continue
            s = int(rng.integers(lo, hi - 2))
            e = int(rng.integers(s + 1, hi))
            starts.append(s), ends.append(e), threads.append(th)
            stack.extend([(lo, s), (s, e), (e, hi)])
    r_start, r_end, r_thread = (np.array(x, dtype=np.int64) for x in (starts, ends, threads))
    q_t = rng.integers(-5, 10_005, size=2000)
    q_thread = rng.integers(-1, 4, size=2000)
    got = _innermost(r_thread, r_start, r_end, q_thread, q_t)
    for q in range(len(q_t)):
        inside = np.flatnonzero((r_thread == q_thread[q]) & (r_start <= q_t[q]) & (r_end >= q_t[q]))
        if q_thread[q] < 0 or not inside.size:
            assert got[q] == -1
        else:
            # innermost = latest start, shortest on a tie
            best = inside[np.lexsort((r_end[inside], -r_start[inside]))[0]]
            assert (r_start[got[q]], r_end[got[q]]) == (r_start[best], r_end[best])


# ---- real traces ----------------------------------------------------------------------

REAL = [
    "deepseek_v3_ep64_h800_rank0.json.gz",
    "ddp_2rank_a100_rank0.json.gz",
    "vllm_tp8_b200_rank0.json.gz",
    "torchrec_128rank_sampled/rank-0.json.gz",
    "torchrec_128rank_sampled/rank-1.json.gz",
    *(f"dlrm_8rank_v100/worker{i}.pt.trace.json.gz" for i in range(8)),
]


@pytest.mark.slow
@pytest.mark.parametrize("rel", REAL)
def test_real_counts_times_and_ranks(rel: str) -> None:
    doc, table = parsed(rel)
    scanned = [e for e in doc["traceEvents"] if e.get("cat") in DEVICE_CATS and e.get("ph") == "X"]
    dev = device_rows(table)
    assert len(dev) == len(scanned)
    assert (dev["activity"] == "kernel").sum() == sum(e["cat"] == "kernel" for e in scanned)
    assert (dev["activity"] == "memcpy").sum() == sum(e["cat"] == "gpu_memcpy" for e in scanned)
    assert int(dev["start_ns"].min()) == min(exact_ns(e["ts"]) for e in scanned)
    total = sum(round(Fraction(e["ts"]) * 1000 + Fraction(e["dur"]) * 1000) - exact_ns(e["ts"]) for e in scanned)
    assert int((dev["end_ns"] - dev["start_ns"]).sum()) == total
    rank = doc["distributedInfo"]["rank"]
    gpus = {e["args"]["device"] for e in scanned}
    assert set(dev["device"]) == {f"rank{rank}/GPU:{g}" for g in gpus}
    assert set(dev["host"]) == {f"rank{rank}"} and set(dev["global_id"]) == {rank}
    assert set(dev["gpus_per_domain"]) == {len(doc.get("deviceProperties") or [None] * 8)}
    assert set(dev["bucket"]) <= {"compute", "comm", "memcpy", "other"}
    step_names = sorted(e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    steps = table.markers[table.markers["kind"] == "step"]
    assert sorted(steps["name"]) == step_names
    assert sorted(steps["number"]) == sorted(int(n.split("#")[1]) for n in step_names)
    assert (steps["device"] == "").all()


def test_deepseek_ep64_dispatch_combine_and_compute() -> None:
    _, table = parsed("deepseek_v3_ep64_h800_rank0.json.gz")
    dev = device_rows(table)
    ep = dev[dev["name"].str.contains(r"dpsk::ep::internode::", regex=True)]
    assert len(ep) == 32
    assert (ep["bucket"] == "comm").all() and (ep["link_hint"] == "internode").all()
    stem = ep["name"].str.extract(r"internode::(\w+)<", expand=False)
    expected = stem.map({"dispatch": "ep-dispatch", "notify_dispatch": "ep-dispatch", "combine": "ep-combine"})
    # cached_notify precedes a cached dispatch (forward of dispatch, backward of combine) or a combine
    cached = stem == "cached_notify"
    expected[cached] = ep.loc[cached, "annotation"].map(
        {
            "dispatch(F)": "ep-dispatch",
            "combine(B)": "ep-dispatch",
            "combine(F)": "ep-combine",
            "dispatch(B)": "ep-combine",
        }
    )
    assert expected.notna().all()
    assert (ep["kind"] == expected).all()
    # the launches sit inside DeepSeek's user annotations
    assert set(ep["annotation"]) <= {"dispatch(F)", "combine(F)", "dispatch(B)", "combine(B)"}
    assert "dispatch(F)" in set(ep["annotation"])
    # no NCCL in this trace: every other kernel is compute (memcpy/memset aside)
    assert set(dev.loc[dev["bucket"] == "comm", "name"]) == set(ep["name"])
    fa = dev[dev["name"].str.contains("CollectiveMainloopBwd", regex=False)]
    gg = dev[dev["name"].str.contains("dpsk::grouped_gemm", regex=False) & dev["name"].str.contains("GemmKernel")]
    assert len(fa) == 4 and len(gg) == 140
    assert (fa["bucket"] == "compute").all() and (gg["bucket"] == "compute").all()


@pytest.mark.slow
@pytest.mark.parametrize("worker", range(8))
def test_dlrm_sendrecv_is_all_to_all(worker: int) -> None:
    doc, table = parsed(f"dlrm_8rank_v100/worker{worker}.pt.trace.json.gz")
    assert doc["distributedInfo"]["rank"] == worker
    dev = device_rows(table)
    sr = dev[dev["name"].str.startswith("ncclKernel_SendRecv_")]
    ar = dev[dev["name"].str.startswith("ncclKernel_AllReduce_")]
    assert len(sr) == 5 and len(ar) == 3
    assert (sr["annotation"] == "nccl:all_to_all").all()
    assert (sr["bucket"] == "comm").all() and (sr["kind"] == "all-to-all").all()
    assert (ar["bucket"] == "comm").all() and (ar["kind"] == "all-reduce").all()
    assert set(dev["device"]) == {f"rank{worker}/GPU:{worker}"}
    # 8 ranks, 8 GPUs a node: every peer is in this rank's domain
    assert set(sr["group"]) == {"0,1,2,3,4,5,6,7"}


@pytest.mark.slow
def test_vllm_multimem_all_reduce() -> None:
    _, table = parsed("vllm_tp8_b200_rank0.json.gz")
    dev = device_rows(table)
    mm = dev[dev["name"].str.contains("multimem_all_reduce_kernel", regex=False)]
    assert len(mm) == 73
    assert (mm["bucket"] == "comm").all() and (mm["kind"] == "all-reduce").all()
    ag = dev[dev["name"].str.startswith("ncclDevKernel_AllGather")]
    assert len(ag) == 1 and ag["kind"].iloc[0] == "all-gather"
    # record_param_comms: _allgather_base, 25136 -> 201088 BFloat16 elements over ranks 0..7
    assert (ag["collective"].iloc[0], ag["group"].iloc[0]) == ("_allgather_base", "0,1,2,3,4,5,6,7")
    assert ag["bytes"].iloc[0] == 201088 * 2
    assert set(dev.loc[dev["bucket"] == "comm", "name"]) == set(mm["name"]) | set(ag["name"])


def test_ddp_kernels_carry_collective_name() -> None:
    doc, table = parsed("ddp_2rank_a100_rank0.json.gz")
    carriers = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})]
    assert carriers
    dev = device_rows(table)
    by_key = dev.set_index(["start_ns", "name"])
    for e in carriers:
        row = by_key.loc[(exact_ns(e["ts"]), e["name"])]
        assert row["collective"] == e["args"]["Collective name"]
        assert row["group"] == ",".join(re.findall(r"\d+", e["args"]["Process Group Ranks"]))
        item = {"Float": 4, "Long": 8}[e["args"]["dtype"]]
        assert row["bytes"] == max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) * item
        assert row["bucket"] == "comm"
    kinds = dev.loc[dev["bucket"] == "comm", "kind"].astype(str).value_counts().to_dict()
    assert kinds == {
        "all-reduce": sum(e["args"]["Collective name"] == "allreduce" for e in carriers),
        "broadcast": sum(e["args"]["Collective name"] == "broadcast" for e in carriers),
    }


def test_torchrec_without_kernel_metadata_uses_cpu_side() -> None:
    _, table = parsed("torchrec_128rank_sampled/rank-0.json.gz")
    sr = device_rows(table)
    sr = sr[sr["name"].str.startswith("ncclKernel_SendRecv_")]
    assert len(sr) == 10 and (sr["bucket"] == "comm").all()
    assert sr["annotation"].str.startswith("nccl:").all()
    # 128 ranks span many nodes and no group is named: left unknown, not guessed
    assert (sr["group"] == "").all()
