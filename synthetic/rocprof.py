"""A synthetic rocprofv3 capture of a MoE training job on one 8x MI300X node, and its true figures.

PyTorch style: one process per GPU, each writing rocprofv3's CSV output set under the default
``%hostname%/%pid%`` names (rocprofiler-sdk ``source/bin/rocprofv3.py``, ``-o``), field by field as
``source/lib/output/generateCSV.cpp`` writes them (see ../shared/notes/rocprof-nccl-inspector.md):

- ``<pid>_agent_info.csv``: every agent of the node, CPUs included (2 CPUs, then 8 GPUs ``gfx942``
  "AMD Instinct MI300X"), ``Node_Id`` = ``Logical_Node_Id`` 0..9.
- ``<pid>_kernel_trace.csv``: the 22 columns, ``Agent_Id`` the label ``"Agent <n>"`` (relative index),
  ``Correlation_Id`` the internal id, rows **not** in start order (written as buffers flush).
- ``<pid>_memory_copy_trace.csv``: ``Kind, Direction, Stream_Id, Source_Agent_Id, Destination_Agent_Id,
  Correlation_Id, Start_Timestamp, End_Timestamp`` (no byte count).
- ``<pid>_rccl_api_trace.csv``, ``<pid>_hip_api_trace.csv`` (``--rccl-trace --hip-trace``): ``Domain,
  Function, Process_Id, Thread_Id, Correlation_Id, Start_Timestamp, End_Timestamp``.
- ``<pid>_marker_api_trace.csv`` (``--marker-trace``): the same columns, one row per ROCTx range as the tool
  writes it when the range is popped (rocprofiler-sdk ``source/lib/rocprofiler-sdk-tool/tool.cpp``,
  ``callback_tracing_callback``: a push/pop pair is one record, start at the push, end at the pop, the push's
  correlation id), ``Function`` the range's message (``generateCSV.cpp``): a ``step N`` range per step and a
  ``forward`` range nested in it (no step).

The job: per step, an input copy (HtoD), attention and expert GEMMs, two expert all-to-alls (dispatch,
combine) as RCCL's generic kernel ``ncclDevKernel_Generic_1`` on a communication stream partly under
compute, ROCclr blit copies and fills, one GPU-to-GPU peer copy, the gradient all-reduce, and a DtoH of
the loss. The RCCL API call that launched each generic kernel is kept (``Activity.rccl``) for the formats that carry it.

The truth (:func:`truth`) is computed here from the intervals the generator laid out, with its own interval
union: no moeprof code. Its ``steps`` are the §4 figures of each step's window (what started inside the
``step N`` ROCTx range, from its first start to its last end: spec §5's host marker without launch evidence).
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

HOST = "mi300x-node0"
N_GPUS = 8
N_CPUS = 2
PRODUCT = "AMD Instinct MI300X"
GFX = "gfx942"
FIRST_PID = 41200
BOOT_NS = 1_870_000_000_000_000  # CLOCK_BOOTTIME of the capture's start: a node up ~3 weeks
STEPS = 3

KERNEL_HEADER = [
    "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
    "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size", "VGPR_Count",
    "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
    "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z",
]  # fmt: skip
COPY_HEADER = [
    "Kind", "Direction", "Stream_Id", "Source_Agent_Id", "Destination_Agent_Id", "Correlation_Id",
    "Start_Timestamp", "End_Timestamp",
]  # fmt: skip
AGENT_HEADER = [
    "Node_Id", "Logical_Node_Id", "Agent_Type", "Cpu_Cores_Count", "Simd_Count", "Cu_Count", "Wave_Front_Size",
    "Num_Xcc", "Gfx_Target_Version", "Vendor_Id", "Device_Id", "Location_Id", "Gpu_Id", "Name", "Vendor_Name",
    "Product_Name", "Model_Name",
]  # fmt: skip

COMPUTE = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul> >"
    "(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)",
    "Cijk_Alik_Bljk_BBS_BH_MT256x256x64_MI32x32x8x1_SN_1LDSB1_GRVW8",
    "_ZN5aiter17fmha_fwd_hd128_bf16_causalE",
    "moe_gemm1_0",
    "moe_gemm2_0",
    "aiter::opus_moe_sorting_entry",
]
RCCL_GENERIC = "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"
COPY_KERNEL = "__amd_rocclr_copyBuffer"
FILL_KERNEL = "__amd_rocclr_fillBufferAligned"

# the RCCL API call that launched each generic kernel (host side: its kind)
RCCL_CALLS = {"dispatch": "ncclAllToAll", "combine": "ncclAllToAll", "grads": "ncclAllReduce"}


@dataclass
class Activity:
    gpu: int  # index among the node's GPUs
    kind: str  # kernel | copy
    name: str  # kernel name, or the copy's direction (MEMORY_COPY_*)
    bucket: str  # spec §2, as the generator means it
    start: int
    end: int
    stream: int
    correlation: int
    peer: int = -1  # the other GPU of a peer copy
    rccl: str = ""  # the RCCL API call that launched it


@dataclass
class Job:
    activities: list[Activity] = field(default_factory=list)

    def of(self, gpu: int) -> list[Activity]:
        return [a for a in self.activities if a.gpu == gpu]


def agent_label(gpu: int) -> str:
    """rocprofv3's default label: the relative index (CPUs first)."""
    return f"Agent {N_CPUS + gpu}"


def build(seed: int = 27) -> Job:
    rng = random.Random(seed)
    job = Job()
    corr = 0
    for gpu in range(N_GPUS):
        t = BOOT_NS + 50_000 + gpu * 700
        for _step in range(STEPS):
            corr += 1
            d = rng.randint(9_000, 14_000)
            job.activities.append(Activity(gpu, "copy", "MEMORY_COPY_HOST_TO_DEVICE", "memcpy", t, t + d, 1, corr))
            t += d + rng.randint(800, 2_000)
            for phase in ("dispatch", "combine"):
                # compute on stream 1, an all-to-all on stream 2 starting mid-way (partly hidden)
                c0 = t
                for name in rng.sample(COMPUTE, 4):
                    corr += 1
                    d = rng.randint(20_000, 60_000)
                    job.activities.append(Activity(gpu, "kernel", name, "compute", t, t + d, 1, corr))
                    t += d + rng.randint(1_000, 4_000)
                corr += 1
                a0 = c0 + (t - c0) // 2 + rng.randint(-5_000, 5_000)
                d = rng.randint(60_000, 140_000)
                job.activities.append(
                    Activity(gpu, "kernel", RCCL_GENERIC, "comm", a0, a0 + d, 2, corr, rccl=RCCL_CALLS[phase])
                )
                t = max(t, a0 + d) + rng.randint(1_000, 3_000)
            # ROCclr blits: a device copy and a fill, back to back on the compute stream
            for name, bucket in ((COPY_KERNEL, "memcpy"), (FILL_KERNEL, "other")):
                corr += 1
                d = rng.randint(3_000, 9_000)
                job.activities.append(Activity(gpu, "kernel", name, bucket, t, t + d, 1, corr))
                t += d + rng.randint(500, 1_500)
            # a peer copy to the neighbour GPU (comm), overlapping the next kernel
            corr += 1
            d = rng.randint(15_000, 25_000)
            job.activities.append(
                Activity(gpu, "copy", "MEMORY_COPY_DEVICE_TO_DEVICE", "comm", t, t + d, 2, corr, peer=gpu ^ 1)
            )
            corr += 1
            d2 = rng.randint(30_000, 50_000)
            job.activities.append(Activity(gpu, "kernel", COMPUTE[1], "compute", t + 4_000, t + 4_000 + d2, 1, corr))
            t += max(d, 4_000 + d2) + rng.randint(1_000, 3_000)
            # gradient all-reduce, exposed
            corr += 1
            d = rng.randint(150_000, 250_000)
            job.activities.append(
                Activity(gpu, "kernel", RCCL_GENERIC, "comm", t, t + d, 2, corr, rccl="ncclAllReduce")
            )
            t += d + rng.randint(1_000, 3_000)
            corr += 1
            d = rng.randint(4_000, 8_000)
            job.activities.append(Activity(gpu, "copy", "MEMORY_COPY_DEVICE_TO_HOST", "memcpy", t, t + d, 1, corr))
            t += d + rng.randint(40_000, 90_000)  # the host's gap before the next step
    return job


# ---- the truth, by brute force ---------------------------------------------------------------------------------


def _union(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, -1, -1
    for s, e in sorted(intervals):
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + cur_e - cur_s


def step_ranges(acts: list[Activity]) -> list[tuple[int, int]]:
    """Each step's ROCTx range: from just before its input copy to just after its loss copy."""
    starts = sorted(a.start for a in acts if a.name == "MEMORY_COPY_HOST_TO_DEVICE")
    ends = sorted(a.end for a in acts if a.name == "MEMORY_COPY_DEVICE_TO_HOST")
    return [(s - 2_000, e + 1_000) for s, e in zip(starts, ends)]


def _figures(acts: list[Activity], span: int) -> dict[str, int]:
    """§4's figures of some activities over a window of ``span`` ns that holds them whole."""
    by = {b: [(a.start, a.end) for a in acts if a.bucket == b] for b in ("compute", "comm", "memcpy", "other")}
    busy = _union([(a.start, a.end) for a in acts])
    comm_u, compute_u = _union(by["comm"]), _union(by["compute"])
    both = _union(by["comm"] + by["compute"])
    comm_ns = sum(e - s for s, e in by["comm"])
    return {
        "accumulated_ns": sum(a.end - a.start for a in acts),
        **{f"{b}_ns": sum(e - s for s, e in v) for b, v in by.items()},
        "span_ns": span,
        "busy_ns": busy,
        "idle_ns": span - busy,
        "exposed_comm_ns": both - compute_u,
        "overlapped_comm_ns": comm_u + compute_u - both,
        # one node, every peer local: all communication on xGMI (spec §3, remote == 0)
        "comm_nvlink_ns": comm_ns,
        "comm_ib_ns": 0,
        "comm_unknown_link_ns": 0,
    }


def truth(job: Job) -> dict:
    devices, steps = [], []
    for gpu in range(N_GPUS):
        acts = job.of(gpu)
        span = max(a.end for a in acts) - min(a.start for a in acts)
        windows = step_ranges(acts)
        devices.append({"device": f"{HOST}/GPU:{gpu}", **_figures(acts, span), "steps": [list(w) for w in windows]})
        for i, (lo, hi) in enumerate(windows):
            # a ROCTx range times the host (spec §5): the step is what it launched, and rocprofv3's kernel trace
            # links no launch, so what started inside it; its window from the first start to the last end
            inside = [a for a in acts if lo <= a.start < hi]
            first, last = min(a.start for a in inside), max(a.end for a in inside)
            steps.append({"step": i, "device": f"{HOST}/GPU:{gpu}", "start_ns": first, "end_ns": last,
                          **_figures(inside, last - first)})  # fmt: skip
    if sum(len(d["steps"]) for d in devices) and sum(s["accumulated_ns"] for s in steps) != sum(
        d["accumulated_ns"] for d in devices
    ):
        raise AssertionError("an activity lies outside every step window")  # the windows must hold the job
    total = {k: sum(int(d[k]) for d in devices) for k in devices[0] if k not in ("device", "steps")}  # type: ignore[call-overload]
    kinds: dict[str, int] = {}
    for a in job.activities:
        if a.rccl:
            kind = "all-to-all" if a.rccl == "ncclAllToAll" else "all-reduce"
            kinds[kind] = kinds.get(kind, 0) + a.end - a.start
        elif a.bucket == "comm":
            kinds["send-recv"] = kinds.get("send-recv", 0) + a.end - a.start
    return {"scenario": "synthetic_rocprof_mi300x", "devices": devices, "total": total, "comm_kind_ns": kinds,
            "steps": steps}  # fmt: skip


# ---- the CSV writer ------------------------------------------------------------------------------------------------


def write_csv_rows(out: TextIO, header: list[str], rows: Iterable[list[object]]) -> None:
    """As generateCSV.cpp writes: every header field quoted, strings quoted, numbers bare."""
    out.write(",".join(f'"{h}"' for h in header) + "\n")
    csv.writer(out, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n").writerows(rows)


def _csv(header: list[str], rows: list[list[object]]) -> str:
    out = io.StringIO()
    write_csv_rows(out, header, rows)
    return out.getvalue()


def agent_rows() -> list[list[object]]:
    rows: list[list[object]] = []
    for n in range(N_CPUS):
        cpu = "AMD EPYC 9654 96-Core Processor"
        rows.append([n, n, "CPU", 96, 0, 96, 0, 1, 0, 0, 0, 0, 0, cpu, "CPU", cpu, ""])
    for g in range(N_GPUS):
        n = N_CPUS + g
        loc = 0x0C00 + g * 0x1000
        rows.append(
            [n, n, "GPU", 0, 1216, 304, 64, 8, 90402, 4098, 29857, loc, 11000 + g, GFX, "AMD", PRODUCT, "ip discovery"]
        )
    return rows


def pid_of(gpu: int) -> int:
    return FIRST_PID + gpu


API_HEADER = ["Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp"]


def api_rows(job: Job, gpu: int) -> tuple[list[list[object]], list[list[object]]]:
    """``--rccl-trace`` and ``--hip-trace`` rows (rocprofiler-sdk source/docs/data/rccl_trace.csv's header):
    every kernel's HIP launch carries its Correlation_Id; an all-to-all is grouped (ncclGroupStart,
    ncclAllToAll, ncclGroupEnd, the launch inside ncclGroupEnd), an all-reduce launches inside its call."""
    pid = pid_of(gpu)
    rccl: list[list[object]] = []
    hip: list[list[object]] = []
    next_id = 10_000_000 + gpu * 100_000  # the RCCL calls' ids, apart from the launches'
    for a in job.of(gpu):
        if a.kind != "kernel":
            continue
        if a.rccl == "ncclAllToAll":
            t = a.start - 9_000
            for op in ("ncclGroupStart", "ncclAllToAll", "ncclGroupEnd"):
                next_id += 1
                rccl.append(["RCCL_API", op, pid, pid, next_id, t, t + 2_000])
                t += 2_500
            hip.append(["HIP_RUNTIME_API", "hipExtLaunchKernel", pid, pid, a.correlation, t - 2_300, t - 1_000])
        elif a.rccl == "ncclAllReduce":
            next_id += 1
            rccl.append(["RCCL_API", "ncclAllReduce", pid, pid, next_id, a.start - 6_000, a.start - 1_000])
            hip.append(
                ["HIP_RUNTIME_API", "hipExtLaunchKernel", pid, pid, a.correlation, a.start - 4_000, a.start - 2_000]
            )
        else:
            hip.append(
                ["HIP_RUNTIME_API", "hipLaunchKernel", pid, pid, a.correlation, a.start - 5_000, a.start - 3_000]
            )
    return rccl, hip


MARKER_KIND = "MARKER_CORE_RANGE_API"  # the buffer kind of ROCTx ranges (fwd.h; MARKER_CORE_API before it)


def marker_ranges(job: Job, gpu: int) -> list[tuple[int, str, int, int]]:
    """The process's ROCTx ranges as the tool records them, in the order they are popped (written):
    (correlation id of the push, message, start, end). Per step ``step N`` and, nested in it, ``forward``."""
    out = []
    corr = 20_000_000 + gpu * 1_000  # ids of the marker calls, apart from the launches'
    for i, (lo, hi) in enumerate(step_ranges(job.of(gpu))):
        out.append((corr + 2 * i + 2, "forward", lo + 3_000, (lo + hi) // 2))
        out.append((corr + 2 * i + 1, f"step {i}", lo, hi))
    return out


def csv_files(job: Job) -> dict[str, str]:
    """``<host>/<pid>_{agent_info,kernel_trace,memory_copy_trace}.csv`` of every process."""
    files: dict[str, str] = {}
    agents = _csv(AGENT_HEADER, agent_rows())
    for gpu in range(N_GPUS):
        pid = pid_of(gpu)
        kernels = [a for a in job.of(gpu) if a.kind == "kernel"]
        copies = [a for a in job.of(gpu) if a.kind == "copy"]
        k_rows: list[list[object]] = []
        kernel_ids = {name: i + 1 for i, name in enumerate(sorted({a.name for a in job.activities}))}
        for i, a in enumerate(kernels):
            k_rows.append(
                ["KERNEL_DISPATCH", agent_label(gpu), 1 + (a.stream - 1), a.stream * 0x7F3A0000 if a.stream > 1 else 0,
                 pid, i + 1, kernel_ids[a.name], a.name, a.correlation, a.start, a.end, 0, 0, 64, 0, 32,
                 256, 1, 1, 262144, 1, 1]
            )  # fmt: skip
        # rocprofv3 writes records as its buffers flush, not in start order: the comm stream's buffer after
        k_rows.sort(key=lambda r: (r[2], r[9]))
        c_rows: list[list[object]] = []
        for a in copies:
            src, dst = {
                "MEMORY_COPY_HOST_TO_DEVICE": (0, N_CPUS + gpu),
                "MEMORY_COPY_DEVICE_TO_HOST": (N_CPUS + gpu, 0),
                "MEMORY_COPY_DEVICE_TO_DEVICE": (N_CPUS + gpu, N_CPUS + a.peer),
            }[a.name]
            c_rows.append(["MEMORY_COPY", a.name, a.stream * 0x7F3A0000 if a.stream > 1 else 0,
                           f"Agent {src}", f"Agent {dst}", a.correlation, a.start, a.end])  # fmt: skip
        rccl_rows, hip_rows = api_rows(job, gpu)
        base = f"{HOST}/{pid}_"
        files[base + "rccl_api_trace.csv"] = _csv(API_HEADER, rccl_rows)
        files[base + "hip_api_trace.csv"] = _csv(API_HEADER, hip_rows)
        markers = [[MARKER_KIND, text, pid, pid, c, s, e] for c, text, s, e in marker_ranges(job, gpu)]
        files[base + "marker_api_trace.csv"] = _csv(API_HEADER, markers)
        files[base + "agent_info.csv"] = agents
        files[base + "kernel_trace.csv"] = _csv(KERNEL_HEADER, k_rows)
        files[base + "memory_copy_trace.csv"] = _csv(COPY_HEADER, c_rows)
    return files


def write_csv(job: Job, out: Path) -> list[Path]:
    written = []
    for rel, text in csv_files(job).items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


# ---- the JSON writer -------------------------------------------------------------------------------------------

# strings.buffer_records: index = the kind enum of a ROCm 7.2 build (the values move between versions;
# a reader resolves them by name)
BUFFER_KINDS = {
    10: ("MEMORY_COPY", ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE",
                         "MEMORY_COPY_DEVICE_TO_HOST", "MEMORY_COPY_DEVICE_TO_DEVICE"]),
    11: ("KERNEL_DISPATCH", ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"]),
    3: ("HIP_RUNTIME_API", ["hipNone", "hipLaunchKernel", "hipExtLaunchKernel", "hipMemcpyAsync"]),
    14: ("RCCL_API", ["ncclNone", "ncclAllReduce", "ncclAllToAll", "ncclGroupStart", "ncclGroupEnd"]),
    # rocprofiler_marker_core_api_id_t's operations (marker/api_id.h)
    32: (MARKER_KIND, ["roctxMarkA", "roctxRangePushA", "roctxRangePop", "roctxRangeStartA", "roctxRangeStop",
                       "roctxGetThreadId"]),
}  # fmt: skip
AGENT_HANDLE = 34674  # an opaque handle as in a real file; agents get consecutive ones


def _kind(name: str) -> int:
    return next(k for k, (n, _) in BUFFER_KINDS.items() if n == name)


def _op(kind: str, op: str) -> int:
    return BUFFER_KINDS[_kind(kind)][1].index(op)


def json_doc(job: Job, gpu: int) -> dict:
    """One process's ``{"rocprofiler-sdk-tool": [...]}`` (generateJSON.cpp; fields of save.hpp)."""
    pid = pid_of(gpu)
    handle = {n: AGENT_HANDLE + n for n in range(N_CPUS + N_GPUS)}
    agents = [
        {"id": {"handle": handle[n]}, "type": 1, "node_id": n, "logical_node_id": n, "logical_node_type_id": n,
         "name": "AMD EPYC 9654 96-Core Processor", "product_name": "AMD EPYC 9654 96-Core Processor"}
        for n in range(N_CPUS)
    ] + [
        {"id": {"handle": handle[N_CPUS + g]}, "type": 2, "node_id": N_CPUS + g, "logical_node_id": N_CPUS + g,
         "logical_node_type_id": g, "name": GFX, "product_name": PRODUCT, "cu_count": 304, "wave_front_size": 64}
        for g in range(N_GPUS)
    ]  # fmt: skip
    names = sorted({a.name for a in job.activities if a.kind == "kernel"})
    symbols = [{"kernel_id": 0, "kernel_name": "", "formatted_kernel_name": ""}] + [
        {"kernel_id": i + 1, "kernel_name": f"{n}.kd", "formatted_kernel_name": n, "truncated_kernel_name": n}
        for i, n in enumerate(names)
    ]
    kid = {n: i + 1 for i, n in enumerate(names)}
    kernels, copies, hip, rccl = [], [], [], []
    next_id = 10_000_000  # internal ids of the RCCL calls, apart from the launches'
    for a in job.of(gpu):
        corr = {"internal": a.correlation, "external": 0}
        if a.kind == "kernel":
            kernels.append({
                "kind": _kind("KERNEL_DISPATCH"), "operation": _op("KERNEL_DISPATCH", "KERNEL_DISPATCH_COMPLETE"),
                "thread_id": pid, "correlation_id": corr, "start_timestamp": a.start, "end_timestamp": a.end,
                "dispatch_info": {"agent_id": {"handle": handle[N_CPUS + gpu]}, "queue_id": {"handle": a.stream},
                                  "kernel_id": kid[a.name], "dispatch_id": a.correlation,
                                  "workgroup_size": {"x": 256, "y": 1, "z": 1},
                                  "grid_size": {"x": 262144, "y": 1, "z": 1}},
                "stream_id": {"handle": 0 if a.stream == 1 else a.stream * 0x7F3A0000},
            })  # fmt: skip
            if a.rccl == "ncclAllToAll":
                # grouped: ncclGroupStart, ncclAllToAll, ncclGroupEnd; the launch happens inside ncclGroupEnd
                t = a.start - 9_000
                ids = []
                for op in ("ncclGroupStart", "ncclAllToAll", "ncclGroupEnd"):
                    next_id += 1
                    ids.append(next_id)
                    rccl.append({"kind": _kind("RCCL_API"), "operation": _op("RCCL_API", op), "thread_id": pid,
                                 "correlation_id": {"internal": next_id, "external": 0, "ancestor": 0},
                                 "start_timestamp": t, "end_timestamp": t + 2_000})  # fmt: skip
                    t += 2_500
                hip.append({"kind": _kind("HIP_RUNTIME_API"), "operation": _op("HIP_RUNTIME_API", "hipExtLaunchKernel"),
                            "thread_id": pid, "correlation_id": {**corr, "ancestor": ids[2]},
                            "start_timestamp": t - 2_300, "end_timestamp": t - 1_000})  # fmt: skip
            elif a.rccl == "ncclAllReduce":
                # HIP not traced for this one: the kernel carries the RCCL call's own id
                rccl.append({"kind": _kind("RCCL_API"), "operation": _op("RCCL_API", "ncclAllReduce"),
                             "thread_id": pid, "correlation_id": {**corr, "ancestor": 0},
                             "start_timestamp": a.start - 6_000, "end_timestamp": a.start - 1_000})  # fmt: skip
            else:
                hip.append({"kind": _kind("HIP_RUNTIME_API"), "operation": _op("HIP_RUNTIME_API", "hipLaunchKernel"),
                            "thread_id": pid, "correlation_id": {**corr, "ancestor": 0},
                            "start_timestamp": a.start - 5_000, "end_timestamp": a.start - 3_000})  # fmt: skip
        else:
            src, dst = {
                "MEMORY_COPY_HOST_TO_DEVICE": (0, N_CPUS + gpu),
                "MEMORY_COPY_DEVICE_TO_HOST": (N_CPUS + gpu, 0),
                "MEMORY_COPY_DEVICE_TO_DEVICE": (N_CPUS + gpu, N_CPUS + a.peer),
            }[a.name]
            copies.append({
                "kind": _kind("MEMORY_COPY"), "operation": _op("MEMORY_COPY", a.name), "thread_id": pid,
                "correlation_id": corr, "start_timestamp": a.start, "end_timestamp": a.end,
                "src_agent_id": {"handle": handle[src]}, "dst_agent_id": {"handle": handle[dst]},
                "bytes": (a.end - a.start) * 50, "stream_id": {"handle": 0 if a.stream == 1 else a.stream * 0x7F3A0000},
            })  # fmt: skip
    # ROCTx: a push/pop pair is one record with the push's operation and id; its message is in
    # strings.marker_api, a {key: internal correlation id, value: message} list (tool.cpp, generateJSON.cpp)
    ranges = marker_ranges(job, gpu)
    markers = [{"size": 48, "kind": _kind(MARKER_KIND), "operation": _op(MARKER_KIND, "roctxRangePushA"),
                "thread_id": pid, "correlation_id": {"internal": c, "external": 0, "ancestor": 0},
                "start_timestamp": s, "end_timestamp": e} for c, _, s, e in ranges]  # fmt: skip
    messages = [{"key": c, "value": text} for c, text, _, _ in sorted(ranges)]
    strings = [{"kind": "NONE", "operations": []}] * (max(BUFFER_KINDS) + 1)
    for k, (n, o) in BUFFER_KINDS.items():
        strings[k] = {"kind": n, "operations": o}
    return {
        "rocprofiler-sdk-tool": [
            {
                "metadata": {"pid": pid, "init_time": BOOT_NS, "fini_time": BOOT_NS + 10**9,
                             "command": ["python", "train_moe.py"], "node": {"hostname": HOST, "machine_id": "f00d"}},
                "agents": agents,
                "kernel_symbols": symbols,
                "strings": {"buffer_records": strings, "marker_api": messages},
                "buffer_records": {"kernel_dispatch": kernels, "memory_copy": copies, "hip_api": hip,
                                   "marker_api": markers, "rccl_api": rccl},
            }
        ]
    }  # fmt: skip


def write_json(job: Job, out: Path) -> list[Path]:
    """``<host>/<pid>_results.json`` of every process."""
    written = []
    for gpu in range(N_GPUS):
        path = out / HOST / f"{pid_of(gpu)}_results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(json_doc(job, gpu), separators=(",", ":")) + "\n")
        written.append(path)
    return written


def write_samples(out: Path) -> list[Path]:
    """The committed samples: the CSV folder, the same job as JSON, and the truth."""
    job = build()
    folder = out / "synthetic_rocprof_mi300x"
    written = write_csv(job, folder)
    written.extend(write_json(job, out / "synthetic_rocprof_mi300x_json"))
    t = out / "synthetic_rocprof_mi300x.truth.json"
    t.write_text(json.dumps(truth(job), indent=1) + "\n")
    written.append(t)
    return written


if __name__ == "__main__":
    import sys

    for p in write_samples(Path(sys.argv[1] if len(sys.argv) > 1 else "sample_traces")):
        print(p)
