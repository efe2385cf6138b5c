"""Figures on the shared real traces, checked by an independent route: a direct scan of the file
(JSON or SQL) and a plain-Python interval merge, sharing no code with moeprof's readers or math."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3

import pytest

import moeprof

from .helpers import shared_trace
from .truth import union_length

COMM = re.compile(r"nccl|dpsk::ep::internode::|multimem_all_reduce")


def figures(rows: list[tuple[str, str, int, int]]) -> dict:
    """rows: (bucket, name, start, end) of one device."""
    comm = [(s, e) for b, _, s, e in rows if b == "comm"]
    compute = [(s, e) for b, _, s, e in rows if b == "compute"]
    accumulated = sum(e - s for _, _, s, e in rows)
    span = max(e for *_, e in rows) - min(s for _, _, s, _ in rows)
    return {
        "comm_share": sum(e - s for s, e in comm) / accumulated,
        "exposed_comm_ns": union_length(comm + compute) - union_length(compute),
        "idle_ns": span - union_length([(s, e) for *_, s, e in rows]),
    }


def kineto_rows(path) -> list[tuple[str, str, int, int]]:
    doc = json.load(gzip.open(path))
    rows = []
    for ev in doc["traceEvents"]:
        cat = ev.get("cat")
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        start = round(ev["ts"] * 1000)
        end = round(ev["ts"] * 1000 + ev["dur"] * 1000)
        name = ev["name"]
        if cat == "kernel":
            bucket = "comm" if COMM.search(name) else "compute"
        else:
            bucket = "memcpy" if cat == "gpu_memcpy" else "other"
        rows.append((bucket, name, start, end))
    return rows


@pytest.mark.slow
@pytest.mark.parametrize(
    "rel",
    [
        "kineto/deepseek_v3_ep64_h800_rank0.json.gz",
        "kineto/vllm_tp8_b200_rank0.json.gz",
        "kineto/dlrm_8rank_v100/worker0.pt.trace.json.gz",
    ],
)
def test_kineto_figures_by_a_direct_scan(rel):
    path = shared_trace(rel)
    want = figures(kineto_rows(path))
    got = moeprof.analyze_paths([path]).to_json()["total"]
    assert got["comm_share"] == pytest.approx(want["comm_share"], abs=1e-6)
    # float µs -> ns: Python's round() of a double can differ by 1 ns per end point from the exact rule
    assert got["exposed_comm_ns"] == pytest.approx(want["exposed_comm_ns"], abs=2_000)
    assert got["idle_ns"] == pytest.approx(want["idle_ns"], abs=2_000)


def sqlite_rows(path, device: int) -> list[tuple[str, str, int, int]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = [
        ("comm" if COMM.search(name) else "compute", name, s, e)
        for name, s, e in con.execute(
            "SELECT s.value, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
            "ON s.id = k.demangledName WHERE k.deviceId = ?",
            (device,),
        )
    ]
    rows += [
        ("memcpy", "memcpy", s, e)
        for s, e in con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE deviceId = ?", (device,))
    ]
    rows += [
        ("other", "memset", s, e)
        for s, e in con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE deviceId = ?", (device,))
    ]
    return rows


@pytest.mark.slow
def test_nsight_all_to_all_by_sql():
    path = shared_trace("nsys/torch_a2a_2gpu.sqlite")
    result = moeprof.analyze_paths([path]).to_json()
    for dev in result["devices"]:
        device_id = int(dev["device"].rsplit(":", 1)[1])
        want = figures(sqlite_rows(path, device_id))
        assert dev["comm_share"] == pytest.approx(want["comm_share"], abs=1e-9)
        assert dev["exposed_comm_ns"] == want["exposed_comm_ns"]
        assert dev["idle_ns"] == want["idle_ns"]
    # SendRecv on the compute stream: nearly all of it is exposed
    t = result["total"]
    assert t["exposed_comm_ns"] > 0.95 * t["comm_ns"]


@pytest.mark.parametrize("rel", ["nsys/cloverleaf_a100.sqlite", "nsys/h100_2gpu_1s.sqlite"])
def test_compute_only_exports_report_no_comm(rel):
    total = moeprof.analyze_paths([shared_trace(rel)]).to_json()["total"]
    assert total["comm_ns"] == 0 and total["accumulated_ns"] > 0
