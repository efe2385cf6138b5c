"""Seed inputs for the fuzzer: the committed samples, cut down so that one run takes a fraction of a second,
and a few small hand-built traces.

Every seed is plain bytes per file (a parquet folder is built from its SQLite at case time), so a case is
reproducible from (seed name, mutation log) alone and nothing here depends on moeprof's readers.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from . import protowire as pw

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"

# formats the mutators know
XPLANE, XPROF_JSON, KINETO, NSYS_SQLITE, NSYS_PARQUET = "xplane", "xprof-json", "kineto", "nsys-sqlite", "nsys-parquet"
ROCPROF_CSV, ROCPROF_JSON = "rocprof-csv", "rocprof-json"


@dataclass(frozen=True)
class Seed:
    """A valid input: files (relative path -> bytes), the path given on the command line, and the
    files a mutation may target (for a folder of several traces: any one of them)."""

    name: str
    fmt: str
    files: dict[str, bytes]
    arg: str
    targets: tuple[str, ...]
    notes: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _dumps(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


# ---- XPlane ---------------------------------------------------------------------------------------------------


def _plane_name(plane: pw.Field) -> str:
    names = pw.get(plane.value, "name") if isinstance(plane.value, list) else []
    return pw.text(names[0]) if names else ""


def _line_name(line: pw.Field) -> str:
    names = pw.get(line.value, "name") if isinstance(line.value, list) else []
    return pw.text(names[0]) if names else ""


def shrink_xplane(data: bytes, keep_planes: int, keep_fraction: float) -> bytes:
    """Keep the first ``keep_planes`` device planes (all host planes) and the first part of every line."""
    space = pw.decode(data)
    kept: list[pw.Field] = []
    devices = 0
    for f in space:
        if f.name == "planes" and _plane_name(f).startswith("/device:"):
            devices += 1
            if devices > keep_planes:
                continue
        if f.name == "planes" and isinstance(f.value, list):
            for line in pw.get(f.value, "lines"):
                assert isinstance(line.value, list)
                events = [e for e in line.value if e.name == "events"]
                cut = max(1, int(len(events) * keep_fraction))
                drop = {id(e) for e in events[cut:]}
                line.value = [e for e in line.value if id(e) not in drop]
        kept.append(f)
    return pw.encode(kept)


# ---- JSON ------------------------------------------------------------------------------------------------------


def _load_json(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _until_first_step_end(doc: dict, is_step) -> dict:
    """Keep events that start before the end of the first step (and all metadata events)."""
    steps = [e for e in doc["traceEvents"] if is_step(e)]
    end = min(e["ts"] + e["dur"] for e in steps) if steps else float("inf")
    out = dict(doc)
    out["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M" or e.get("ts", 0) <= end]
    return out


def _xprof_small() -> bytes:
    doc = _load_json(SAMPLES / "synthetic_1host_8gpu.trace.json.gz")
    keep = {
        e["pid"]
        for e in doc["traceEvents"]
        if e.get("name") == "process_name" and e["args"]["name"] in ("/device:GPU:0", "/device:GPU:1")
    }
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("pid") in keep]
    # the first third of the events: about one step's worth
    events = doc["traceEvents"]
    xs = sorted(e["ts"] for e in events if e.get("ph") == "X")
    cut = xs[len(xs) // 3]
    doc["traceEvents"] = [e for e in events if e.get("ph") == "M" or e["ts"] <= cut]
    return _gz(_dumps(doc))


def _kineto_small(rank: int) -> bytes:
    doc = _load_json(SAMPLES / "synthetic_2host_4gpu_kineto" / f"rank{rank}.pt.trace.json.gz")
    doc = _until_first_step_end(doc, lambda e: str(e.get("name", "")).startswith("ProfilerStep#"))
    return _gz(_dumps(doc))


def _kineto_tiny() -> bytes:
    """A hand-built Kineto trace: every kind of event the format has, a few of each, two steps."""
    ev: list[dict] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 10, "tid": 10, "ts": 100.0, "dur": 60.0},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#8", "pid": 10, "tid": 10, "ts": 160.0, "dur": 60.0},
        {"ph": "X", "cat": "cpu_op", "name": "nccl:all_to_all", "pid": 10, "tid": 10, "ts": 101.0, "dur": 5.0},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 10,
            "tid": 10,
            "ts": 102.0,
            "dur": 3.0,
            "args": {
                "Collective name": "all_to_all",
                "Process Group Ranks": "[0, 1, 2, 3]",
                "Group size": 4,
                "In msg nelems": 1024,
                "Out msg nelems": 1024,
                "dtype": "BFloat16",
                "External id": 2,  # the SendRecv kernel's: §8 rule 1 links a call to its kernel by External id
            },
        },
    ]
    kernels = [
        ("sm90_xmma_gemm_bf16bf16_bf16f32", 110.0, 20.0, 7),
        ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", 112.0, 15.0, 13),
        ("triton_poi_fused_add_0", 131.0, 4.0, 7),
        ("sm90_xmma_gemm_bf16bf16_bf16f32", 170.0, 20.0, 7),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 175.0, 25.0, 13),
    ]
    for i, (name, ts, dur, stream) in enumerate(kernels, start=1):
        corr = 100 + i
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 10,
                "tid": 10,
                "ts": ts - 8.0,
                "dur": 2.0,
                "args": {"correlation": corr, "External id": i},
            }
        )
        args: dict = {"device": 0, "stream": stream, "correlation": corr, "External id": i}
        if name.startswith("nccl") and i == 5:
            args |= {"Collective name": "allreduce", "Process Group Ranks": "[0, 1, 2, 3]", "Group size": 4}
        ev.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}
        )
        ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 10, "tid": 10, "ts": ts - 8.0})
        ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": stream, "ts": ts, "bp": "e"})
    ev.append(
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy DtoD (Device -> Device)",
            "pid": 0,
            "tid": 7,
            "ts": 150.0,
            "dur": 3.0,
            "args": {"device": 0, "stream": 7, "correlation": 200, "bytes": 4096},
        }
    )
    ev.append(
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": 7,
            "ts": 154.0,
            "dur": 1.0,
            "args": {"device": 0, "stream": 7, "correlation": 201},
        }
    )
    ev.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python 0"}})
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}, {"id": 1, "name": "NVIDIA H100 80GB HBM3"}],
        "distributedInfo": {"backend": "nccl", "rank": 2, "world_size": 4},
        "traceEvents": ev,
    }
    return _dumps(doc)


# ---- Nsight SQLite ------------------------------------------------------------------------------------------------


def shrink_nsys(data: bytes, devices: int, keep_fraction: float, rich: bool) -> bytes:
    """Keep ``devices`` GPUs and the first part of the time range; ``rich`` adds optional tables a real export has."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "x.sqlite"
        db.write_bytes(data)
        conn = sqlite3.connect(db)
        try:
            lo, hi = conn.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
            cut = lo + (hi - lo) * keep_fraction
            for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
                conn.execute(f'DELETE FROM "{table}" WHERE deviceId >= ? OR start > ?', (devices, cut))
            conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start > ?", (cut,))
            conn.execute("DELETE FROM NVTX_EVENTS WHERE start > ?", (cut,))
            if rich:
                conn.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
                conn.executemany(
                    "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
                    [(0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
                     (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
                     (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer")],
                )  # fmt: skip
                conn.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, busLocation TEXT)")
                conn.executemany(
                    "INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?)",
                    [(i, "NVIDIA H100 80GB HBM3", f"0000:{i:02x}:00.0") for i in range(devices)],
                )
            conn.commit()
            conn.execute("VACUUM")
        finally:
            conn.close()
        return db.read_bytes()


# ---- the seed set ---------------------------------------------------------------------------------------------------


@cache
def all_seeds() -> dict[str, Seed]:
    xplane_8 = (SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb").read_bytes()
    cpu_run = next((SAMPLES / "cpu_moe_8dev" / "trace" / "plugins" / "profile").iterdir())
    cpu_file = f"logdir/plugins/profile/{cpu_run.name}/vm.xplane.pb"
    nsys = (SAMPLES / "synthetic_1host_8gpu.nsys.sqlite").read_bytes()
    xprof = (SAMPLES / "synthetic_1host_8gpu.trace.json.gz").read_bytes()
    nsys_small = shrink_nsys(nsys, devices=2, keep_fraction=0.4, rich=False)
    nsys_rich = shrink_nsys(nsys, devices=2, keep_fraction=0.4, rich=True)
    two_host = {
        f"job/{h}.xplane.pb": shrink_xplane((SAMPLES / "synthetic_2host_4gpu" / f"{h}.xplane.pb").read_bytes(), 2, 0.4)
        for h in ("node0", "node1")
    }
    seeds = [
        Seed("xplane-8gpu", XPLANE, {"node0.xplane.pb": xplane_8}, "node0.xplane.pb", ("node0.xplane.pb",),
             "sample_traces/synthetic_1host_8gpu, whole"),
        Seed("xplane-small", XPLANE, {"node0.xplane.pb": shrink_xplane(xplane_8, 2, 0.35)}, "node0.xplane.pb",
             ("node0.xplane.pb",), "synthetic_1host_8gpu cut to 2 GPUs and its first step"),
        Seed("xplane-2host", XPLANE, two_host, "job", tuple(two_host), "synthetic_2host_4gpu, 2 GPUs per host, cut"),
        Seed("xplane-tpu", XPLANE, {"runsc.xplane.pb": shrink_xplane((SAMPLES / "tpu_v5e_demo" / "runsc.xplane.pb")
             .read_bytes(), 1, 0.2)}, "runsc.xplane.pb", ("runsc.xplane.pb",),
             "tpu_v5e_demo (a real TPU v5e capture), first fifth of every line"),
        Seed("xplane-cpu-logdir", XPLANE, {cpu_file: shrink_xplane((cpu_run / "vm.xplane.pb").read_bytes(), 8, 0.1)},
             "logdir", (cpu_file,), "cpu_moe_8dev TensorBoard log dir (XLA:CPU), first tenth of every line"),
        Seed("xprof-json", XPROF_JSON, {"node0.trace.json.gz": xprof},
             "node0.trace.json.gz", ("node0.trace.json.gz",), "sample xprof trace-viewer JSON, whole"),
        Seed("xprof-json-small", XPROF_JSON, {"node0.trace.json.gz": _xprof_small()}, "node0.trace.json.gz",
             ("node0.trace.json.gz",), "xprof JSON cut to 2 GPUs, first third"),
        Seed("kineto-rank", KINETO, {"rank1.pt.trace.json.gz": _kineto_small(1)}, "rank1.pt.trace.json.gz",
             ("rank1.pt.trace.json.gz",), "synthetic_2host_4gpu_kineto rank 1, first step"),
        Seed("kineto-2ranks", KINETO, {f"job/rank{r}.pt.trace.json.gz": _kineto_small(r) for r in (0, 4)}, "job",
             ("job/rank0.pt.trace.json.gz", "job/rank4.pt.trace.json.gz"), "ranks 0 and 4 (two hosts), first step"),
        Seed("kineto-tiny", KINETO, {"worker2.pt.trace.json": _kineto_tiny()}, "worker2.pt.trace.json",
             ("worker2.pt.trace.json",), "hand-built: launches, flows, record_param_comms, two steps"),
        Seed("nsys-sqlite", NSYS_SQLITE, {"node0.sqlite": nsys}, "node0.sqlite", ("node0.sqlite",),
             "sample Nsight SQLite export, whole"),
        Seed("nsys-small", NSYS_SQLITE, {"node0.sqlite": nsys_small}, "node0.sqlite", ("node0.sqlite",),
             "Nsight export cut to 2 GPUs, first 40%"),
        Seed("nsys-rich", NSYS_SQLITE, {"node0.sqlite": nsys_rich}, "node0.sqlite", ("node0.sqlite",),
             "nsys-small plus ENUM_CUDA_MEMCPY_OPER and TARGET_INFO_GPU"),
        # parquet folders are written from their SQLite at case time (see mutators.parquet_files)
        Seed("nsys-parquet", NSYS_PARQUET, {"node0.sqlite": nsys_rich}, "node0", ("node0",),
             "nsys-rich as an nsys parquetdir export"),
    ]  # fmt: skip
    seeds.extend(_rocprof_seeds())
    return {s.name: s for s in seeds}


def _rocprof_seeds() -> list[Seed]:
    """Two processes of the synthetic MI300X rocprofv3 capture (a host folder), and one as a gzipped kernel trace."""
    host = SAMPLES / "synthetic_rocprof_mi300x" / "mi300x-node0"
    two = {
        f"job/mi300x-node0/{p.name}": p.read_bytes()
        for pid in ("41200", "41201")
        for p in sorted(host.glob(f"{pid}_*.csv"))
    }
    one = {f"{p.name}": p.read_bytes() for p in sorted(host.glob("41203_*.csv"))}
    one["41203_kernel_trace.csv.gz"] = _gz(one.pop("41203_kernel_trace.csv"))
    doc = json.loads((SAMPLES / "synthetic_rocprof_mi300x_json" / "mi300x-node0" / "41202_results.json").read_bytes())
    proc = doc["rocprofiler-sdk-tool"][0]
    for key in ("kernel_dispatch", "memory_copy", "hip_api", "rccl_api"):
        proc["buffer_records"][key] = proc["buffer_records"][key][:40]  # the first step, about
    return [
        Seed("rocprof-json", ROCPROF_JSON, {"mi300x-node0/41202_results.json": _dumps(doc)}, "mi300x-node0",
             ("mi300x-node0/41202_results.json",), "synthetic_rocprof_mi300x_json, GPU 2's process, first records"),
        Seed("rocprof-2proc", ROCPROF_CSV, two, "job", tuple(sorted(two)),
             "synthetic_rocprof_mi300x, processes of GPUs 0 and 1 (kernel trace, copies, agent list each)"),
        Seed("rocprof-gz", ROCPROF_CSV, one, "41203_kernel_trace.csv.gz", tuple(sorted(one)),
             "synthetic_rocprof_mi300x, GPU 3's process, kernel trace gzipped, given as a file"),
    ]  # fmt: skip
