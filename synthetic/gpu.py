"""Synthetic GPU traces whose true figures are known: the generator behind ``sample_traces/``.

No GPU is needed: the scenario places every kernel at chosen integer-ns times,
writes it as a real XPlane (the protobuf ``jax.profiler`` writes, with the HLO
in ``/host:metadata`` exactly as XLA stores it) and as xprof trace-viewer JSON,
and computes the truth by brute force: a boolean per nanosecond per device,
counted. That route shares no code with moeprof's interval math.

Run ``python -m synthetic sample_traces/`` to rebuild the samples.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from moeprof.readers.xspace_proto import messages

MODULE = "jit_train_step"
PROGRAM_ID = 7

# kernel name, hlo_op, bucket (truth), kind (truth)
COMPUTE_KERNELS = [
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_NTN", "gemm_fusion_dot.3", "compute", ""),
    ("loop_multiply_fusion", "loop_multiply_fusion", "compute", ""),
    ("input_reduce_fusion", "input_reduce_fusion", "compute", ""),
    (
        "void cutlass::device_kernel<flash::FlashAttnBwd<flash::CollectiveMainloopBwd<2, true>>>(Params)",
        "custom-call.5",
        "compute",
        "",
    ),
    ("triton_softmax_topk_router", "triton_softmax_fusion", "compute", ""),
]


@dataclass
class Kernel:
    device: int  # local ordinal
    stream: str
    name: str
    start: int
    dur: int
    bucket: str
    kind: str = ""
    hlo_op: str = ""
    ib_fraction: float | None = None  # truth, comm only


@dataclass
class Scenario:
    name: str
    hosts: int
    gpus_per_host: int
    hlo_text: str
    kernels: dict[int, list[Kernel]] = field(default_factory=dict)  # host -> kernels
    steps: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # host -> step windows


def _hlo_text(n_devices: int, gpus_per_host: int) -> str:
    all_ids = ",".join(str(i) for i in range(n_devices))
    per_host = ",".join(
        "{" + ",".join(str(h * gpus_per_host + g) for g in range(gpus_per_host)) + "}"
        for h in range(n_devices // gpus_per_host)
    )
    return f"""HloModule {MODULE}, entry_computation_layout={{(f32[128,64]{{1,0}})->f32[128,64]{{1,0}}}}

%add (x: f32[], y: f32[]) -> f32[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.0 = f32[] add(%x, %y)
}}

ENTRY %main (param: f32[128,64]) -> f32[128,64] {{
  %param = f32[128,64]{{1,0}} parameter(0)
  %all-to-all.1 = f32[128,64]{{1,0}} all-to-all(%param), channel_id=1, replica_groups={{{{{all_ids}}}}}, dimensions={{0}}
  %all-gather.2 = f32[{128 * n_devices},64]{{1,0}} all-gather(%all-to-all.1), channel_id=2, replica_groups=[1,{n_devices}]<=[{n_devices}], dimensions={{0}}, use_global_device_ids=true
  %reduce_scatter.3 = f32[128,64]{{1,0}} reduce-scatter(%all-gather.2), channel_id=3, replica_groups={{{{{all_ids}}}}}, use_global_device_ids=true, dimensions={{0}}, to_apply=%add
  ROOT %psum_invariant.4 = f32[128,64]{{1,0}} all-reduce(%reduce_scatter.3), channel_id=4, replica_groups={{{per_host}}}, use_global_device_ids=true, to_apply=%add
}}
"""  # noqa: E501


# comm ops: kernel name as NCCL spells it (the name alone would mislead: the all-to-all runs a SendRecv
# kernel, the all-reduce op is called psum_invariant), HLO op, kind, bytes of one call
COMM_OPS = [
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "all-to-all.1", "all-to-all"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all-gather.2", "all-gather"),
    (
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "reduce_scatter.3",
        "reduce-scatter",
    ),
    (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "psum_invariant.4",
        "all-reduce",
    ),
]


def _truth_ib(kind: str, hosts: int, gpus_per_host: int, hlo_op: str) -> float:
    """The link split as the scenario was designed (spec §3 worked by hand for these groups)."""
    if hosts == 1 or hlo_op == "psum_invariant.4":  # one host, or the per-host all-reduce group
        return 0.0
    n = hosts * gpus_per_host
    if kind == "all-to-all":
        return (n - gpus_per_host) / (n - 1)  # remote peers over all peers: 4/7 for 2 x 4
    return 1.0  # ring collectives that leave the host


def build(
    name: str,
    hosts: int,
    gpus_per_host: int,
    steps: int = 3,
    layers: int = 4,
    seed: int = 0,
    regression: float = 0.0,
) -> Scenario:
    """A MoE-like step per layer: router, dispatch all-to-all, expert GEMMs, combine, with FSDP collectives.

    Comm runs on its own stream and partly overlaps compute, by random amounts. ``regression`` > 0
    makes the same job (same draws) with that much more exposed comm in every step of every device:
    an all-reduce that no compute hides, lasting ``regression`` x the exposed comm of the device's
    step (``0.10``: +10%, up to a nanosecond of rounding), as a gradient reduction that lost its overlap.
    """
    rng = np.random.default_rng(seed)
    n = hosts * gpus_per_host
    scen = Scenario(name, hosts, gpus_per_host, _hlo_text(n, gpus_per_host))
    base = 1_000_000
    for h in range(hosts):
        kernels: list[Kernel] = []
        windows: list[tuple[int, int]] = []
        step_start = base
        for _s in range(steps):
            step_end = step_start
            for d in range(gpus_per_host):
                first = len(kernels)  # this device's kernels of this step start here
                t = step_start + int(rng.integers(0, 2_000))
                compute_stream, comm_stream, copy_stream = (
                    "Stream #13(Compute)",
                    "Stream #21(Collective)",
                    "Stream #35(MemcpyH2D)",
                )
                # host-to-device copy at the start of the step
                kernels.append(Kernel(d, copy_stream, "MemcpyH2D", t, int(rng.integers(2_000, 6_000)), "memcpy"))
                kernels.append(Kernel(d, compute_stream, "Memset", t, 800, "other"))
                t += 1_000
                for _layer in range(layers):
                    for kname, op, bucket, kind in COMPUTE_KERNELS[:2]:
                        dur = int(rng.integers(5_000, 20_000))
                        kernels.append(Kernel(d, compute_stream, kname, t, dur, bucket, kind, op))
                        t += dur + int(rng.integers(100, 1_500))
                    # dispatch all-to-all overlapping the tail of compute by a random amount
                    for kname, op, kind in COMM_OPS:
                        dur = int(rng.integers(4_000, 30_000))
                        lead = int(rng.integers(0, 6_000))
                        c_start = max(t - lead, step_start)
                        kernels.append(
                            Kernel(
                                d,
                                comm_stream,
                                kname,
                                c_start,
                                dur,
                                "comm",
                                kind,
                                op,
                                _truth_ib(kind, hosts, gpus_per_host, op),
                            )
                        )
                        # compute that may or may not cover the collective
                        cdur = int(rng.integers(1_000, dur + 5_000))
                        kname2, op2, bucket2, _ = COMPUTE_KERNELS[int(rng.integers(2, len(COMPUTE_KERNELS)))]
                        kernels.append(Kernel(d, compute_stream, kname2, max(t, c_start), cdur, bucket2, "", op2))
                        t = max(t, c_start) + max(dur, cdur) + int(rng.integers(200, 3_000))
                if regression:
                    extra = round(regression * _exposed_ns(kernels[first:]))
                    kname, op, kind = COMM_OPS[3]
                    ib = _truth_ib(kind, hosts, gpus_per_host, op)
                    kernels.append(Kernel(d, comm_stream, kname, t, extra, "comm", kind, op, ib))
                    t += extra
                kernels.append(Kernel(d, compute_stream, "xla::gpu::MultiGpuBarrierKernelImpl", t, 1_500, "other"))
                t += 1_500
                step_end = max(step_end, t)
            windows.append((step_start, step_end))
            step_start = step_end + 50_000
        scen.kernels[h] = kernels
        scen.steps[h] = windows
    return scen


def _exposed_ns(kernels: list[Kernel]) -> int:
    """Comm time no compute covers, by brute force (one boolean per nanosecond), of one device's kernels."""
    lo = min(k.start for k in kernels)
    hi = max(k.start + k.dur for k in kernels)
    comm = np.zeros(hi - lo, dtype=bool)
    compute = np.zeros(hi - lo, dtype=bool)
    for k in kernels:
        if k.bucket == "comm":
            comm[k.start - lo : k.start + k.dur - lo] = True
        elif k.bucket == "compute":
            compute[k.start - lo : k.start + k.dur - lo] = True
    return int((comm & ~compute).sum())


def host_name(scen: Scenario, h: int) -> str:
    return f"node{h}"


# ----------------------------------------------------------------------------- truth by brute force
def truth(scen: Scenario) -> dict:
    """Spec §4 figures per device by counting nanoseconds, and per-collective sums."""
    devices = []
    collectives: dict[tuple[str, str], dict] = {}
    for h in range(scen.hosts):
        for d in range(scen.gpus_per_host):
            ks = [k for k in scen.kernels[h] if k.device == d]
            lo = min(k.start for k in ks)
            hi = max(k.start + k.dur for k in ks)
            masks = {b: np.zeros(hi - lo, dtype=bool) for b in ("compute", "comm", "memcpy", "other")}
            sums = dict.fromkeys(masks, 0)
            ib_sum = 0.0
            for k in ks:
                masks[k.bucket][k.start - lo : k.start + k.dur - lo] = True
                sums[k.bucket] += k.dur
                if k.bucket == "comm":
                    ib_sum += k.dur * float(k.ib_fraction)
            any_mask = masks["compute"] | masks["comm"] | masks["memcpy"] | masks["other"]
            compute, comm = masks["compute"], masks["comm"]
            fig = {
                "device": f"{host_name(scen, h)}/GPU:{d}",
                "accumulated_ns": sum(sums.values()),
                **{f"{b}_ns": v for b, v in sums.items()},
                "span_ns": hi - lo,
                "busy_ns": int(any_mask.sum()),
                "idle_ns": int((~any_mask).sum()),
                "exposed_comm_ns": int((comm & ~compute).sum()),
                "overlapped_comm_ns": int((comm & compute).sum()),
                "comm_ib_ns": round(ib_sum),
                "comm_unknown_link_ns": 0,
            }
            fig["comm_nvlink_ns"] = fig["comm_ns"] - fig["comm_ib_ns"]
            devices.append(fig)
            for k in ks:
                if k.bucket != "comm":
                    continue
                row = collectives.setdefault(
                    (k.hlo_op, k.kind),
                    {
                        "name": k.hlo_op,
                        "kind": k.kind,
                        "count": 0,
                        "total_ns": 0,
                        "exposed_ns": 0,
                        "ib_fraction": k.ib_fraction,
                    },
                )
                row["count"] += 1
                row["total_ns"] += k.dur
                row["exposed_ns"] += int((~compute[k.start - lo : k.start + k.dur - lo]).sum())
    keys = [k for k in devices[0] if k.endswith("_ns")]
    total = {k: sum(d[k] for d in devices) for k in keys}
    return {
        "scenario": scen.name,
        "devices": devices,
        "total": total,
        "collectives": sorted(collectives.values(), key=lambda r: r["name"]),
    }


# ----------------------------------------------------------------------------- writers
def _hlo_proto_bytes(text: str) -> bytes:
    from jaxlib._hlo import hlo_module_from_text

    module = hlo_module_from_text(text).as_serialized_hlo_module_proto()
    # xla.HloProto { HloModuleProto hlo_module = 1; }
    return b"\x0a" + _varint(len(module)) + module


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


class _PlaneBuilder:
    def __init__(self, plane, name: str, plane_id: int) -> None:
        self.plane = plane
        plane.name = name
        plane.id = plane_id
        self.event_ids: dict[str, int] = {}
        self.stat_ids: dict[str, int] = {}

    def event_id(self, name: str) -> int:
        if name not in self.event_ids:
            i = len(self.event_ids) + 1
            self.event_ids[name] = i
            self.plane.event_metadata[i].id = i
            self.plane.event_metadata[i].name = name
        return self.event_ids[name]

    def stat_id(self, name: str) -> int:
        if name not in self.stat_ids:
            i = len(self.stat_ids) + 1
            self.stat_ids[name] = i
            self.plane.stat_metadata[i].id = i
            self.plane.stat_metadata[i].name = name
        return self.stat_ids[name]

    def add_line(self, line_id: int, name: str, events: list[tuple[str, int, int, dict]]) -> None:
        line = self.plane.lines.add(id=line_id, display_id=line_id, name=name, timestamp_ns=0)
        for ename, start, dur, stats in events:
            ev = line.events.add(metadata_id=self.event_id(ename), offset_ps=start * 1000, duration_ps=dur * 1000)
            for key, value in stats.items():
                st = ev.stats.add(metadata_id=self.stat_id(key))
                if key == "hlo_op":  # string stats as references, as XLA writes repeated strings
                    st.ref_value = self.stat_id(value)
                elif isinstance(value, str):
                    st.str_value = value
                else:
                    st.int64_value = int(value)


LAUNCH_LEAD_NS = 20_000  # a kernel's launch call precedes it by this much (launch evidence, markers=False)


def step_of(scen: Scenario, h: int, start: int) -> int:
    """The step whose loop issued a kernel starting at ``start`` (steps are issued in order)."""
    starts = np.array([s for s, _ in scen.steps[h]], dtype=np.int64)
    return int(np.searchsorted(starts, start, side="right")) - 1


def write_xplane(scen: Scenario, h: int, path: Path, markers: bool = True) -> None:
    """The XPlane of one host. ``markers=False`` writes what a raw GPU capture without step markers
    holds instead of the ``XLA Modules``/``Steps`` lines: per GPU a host thread with one
    ``GpuExecutable::ExecuteThunks`` range per step, the launch call of every kernel
    (``correlation_id``, on that thread for even GPUs, on a separate API thread for odd ones, as
    ROCm writes them; kernels without an HLO op are launched from a transfer thread), and the
    kernels' ``correlation_id``."""
    m = messages()
    space = m["XSpace"]()
    space.hostnames.append(host_name(scen, h))
    host = _PlaneBuilder(space.planes.add(), "/host:CPU", 1)
    # host activity that must never count as device time
    host.add_line(1, "python3", [("PjitFunction(train_step)", 1_000_000, 9_000_000, {})])
    correlation: dict[int, int] = {}  # id(kernel) -> correlation id
    transfers: list[tuple[str, int, int, dict]] = []
    for d in range(scen.gpus_per_host):
        plane = _PlaneBuilder(space.planes.add(), f"/device:GPU:{d}", 100 + d)
        ks = [k for k in scen.kernels[h] if k.device == d]
        for k in sorted(ks, key=lambda k: k.start):
            correlation[id(k)] = len(correlation) + 1
        for line_id, stream in enumerate(sorted({k.stream for k in ks}), 1):
            evs = []
            for k in sorted((k for k in ks if k.stream == stream), key=lambda k: k.start):
                stats = {"hlo_op": k.hlo_op, "hlo_module": MODULE, "program_id": PROGRAM_ID} if k.hlo_op else {}
                if not markers:
                    stats["correlation_id"] = correlation[id(k)]
                evs.append((k.name, k.start, k.dur, stats))
            plane.add_line(line_id, stream, evs)
        # derived lines re-describe the same kernels: a reader that counts them double-counts
        plane.add_line(90, "XLA Ops", [(k.hlo_op or k.name, k.start, k.dur, {}) for k in ks])
        if markers:
            plane.add_line(91, "XLA Modules", [(f"{MODULE}({PROGRAM_ID})", s, e - s, {}) for s, e in scen.steps[h]])
            plane.add_line(92, "Steps", [(str(i), s, e - s, {"step_num": i}) for i, (s, e) in enumerate(scen.steps[h])])
            continue
        launches: dict[int, list[int]] = {}  # step -> launch times of its kernels on this GPU
        calls: list[tuple[str, int, int, dict]] = []
        for k in sorted(ks, key=lambda k: k.start):
            t = k.start - LAUNCH_LEAD_NS
            call = ("cuLaunchKernel" if d % 2 == 0 else "hipModuleLaunchKernel", t, 500, {})
            call[3]["correlation_id"] = correlation[id(k)]
            if k.hlo_op:
                launches.setdefault(step_of(scen, h, k.start), []).append(t)
                calls.append(call)
            else:
                transfers.append(call)
        runs = [
            ("GpuExecutable::ExecuteThunks", min(ts) - 2_000, max(ts) - min(ts) + 3_000, {"module_name": MODULE})
            for _, ts in sorted(launches.items())
        ]
        thread = f"py_xla_execute/{d}"
        if d % 2 == 0:
            host.add_line(10 + d, thread, sorted(runs + calls, key=lambda e: e[1]))
        else:
            host.add_line(10 + d, thread, runs)
            host.add_line(600 + d, f"Host Threads/{600 + d}", calls)
    if transfers:
        host.add_line(9, "tf_pjrt_thread_pool/1", sorted(transfers, key=lambda e: e[1]))
    meta = _PlaneBuilder(space.planes.add(), "/host:metadata", 2)
    em = meta.plane.event_metadata[PROGRAM_ID]
    em.id = PROGRAM_ID
    em.name = f"{MODULE}({PROGRAM_ID})"
    stat = em.stats.add(metadata_id=meta.stat_id("Hlo Proto"))
    stat.bytes_value = _hlo_proto_bytes(scen.hlo_text)
    path.write_bytes(space.SerializeToString())


def _write_gz_json(path: Path, doc: dict) -> None:
    # mtime=0: the same scenario always gives the same bytes
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))


def write_chrome(scen: Scenario, h: int, path: Path) -> None:
    """xprof trace-viewer JSON of the same host: µs floats with ns fractions."""
    events: list[dict] = []
    for d in range(scen.gpus_per_host):
        pid = 1000 + d
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"/device:GPU:{d}"}})
        ks = [k for k in scen.kernels[h] if k.device == d]
        streams = sorted({k.stream for k in ks})
        for tid, stream in enumerate(streams, 1):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": stream}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 90, "args": {"name": "XLA Ops"}})
        for k in ks:
            args = {"hlo_op": k.hlo_op, "hlo_module": MODULE} if k.hlo_op else {}
            tid = streams.index(k.stream) + 1
            events.append(
                {
                    "ph": "X",
                    "pid": pid,
                    "tid": tid,
                    "name": k.name,
                    "ts": k.start / 1e3,
                    "dur": k.dur / 1e3,
                    "args": args,
                }
            )
            events.append(
                {"ph": "X", "pid": pid, "tid": 90, "name": k.hlo_op or k.name, "ts": k.start / 1e3, "dur": k.dur / 1e3}
            )
    _write_gz_json(path, {"displayTimeUnit": "ns", "traceEvents": events})


COLLECTIVE_NAMES = {
    "all-to-all": "all_to_all",
    "all-gather": "allgather",
    "reduce-scatter": "reduce_scatter",
    "all-reduce": "allreduce",
}


def _group_ranks(scen: Scenario, h: int, hlo_op: str) -> list[int]:
    """The ranks of a collective's process group, as the HLO groups say (per-host all-reduce)."""
    if hlo_op == "psum_invariant.4":
        return [h * scen.gpus_per_host + g for g in range(scen.gpus_per_host)]
    return list(range(scen.hosts * scen.gpus_per_host))


def write_kineto(scen: Scenario, h: int, d: int, path: Path) -> None:
    """PyTorch Kineto JSON of one rank (one GPU): kernels linked to their launches; collective metadata
    on the launching ``record_param_comms`` op for half the collectives and on the kernel for the rest."""
    rank = h * scen.gpus_per_host + d
    events: list[dict] = []
    corr = 0
    for i, (s, e) in enumerate(scen.steps[h]):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 100,
                "tid": 1,
                "ts": (s - 30_000) / 1e3,
                "dur": (e - s + 30_000) / 1e3,
            }
        )
    for k in sorted((k for k in scen.kernels[h] if k.device == d), key=lambda k: k.start):
        corr += 1
        launch = k.start - 20_000
        args: dict = {
            "device": d,
            "stream": 7 if "Compute" in k.stream else 13,
            "correlation": corr,
            "External id": corr,
        }
        cat = {"memcpy": "gpu_memcpy"}.get(k.bucket, "kernel")
        name = k.name
        if k.bucket == "memcpy":
            name = "Memcpy HtoD (Pageable -> Device)"
        elif k.name == "Memset":
            cat, name = "gpu_memset", "Memset (Device)"
        if k.bucket == "comm":
            meta = {
                "Collective name": COLLECTIVE_NAMES[k.kind],
                "Process Group Ranks": str(_group_ranks(scen, h, k.hlo_op)),
                "Group size": len(_group_ranks(scen, h, k.hlo_op)),
            }
            if corr % 2:
                args.update(meta)
            else:
                events.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "record_param_comms",
                        "pid": 100,
                        "tid": 1,
                        "ts": (launch - 500) / 1e3,
                        "dur": 2.0,
                        "args": {**meta, "External id": corr},
                    }
                )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 100,
                "tid": 1,
                "ts": launch / 1e3,
                "dur": 1.0,
                "args": {"correlation": corr, "External id": corr},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": d,
                "tid": args["stream"],
                "ts": k.start / 1e3,
                "dur": k.dur / 1e3,
                "args": args,
            }
        )
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": g, "name": "NVIDIA H100 80GB HBM3"} for g in range(scen.gpus_per_host)],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": scen.hosts * scen.gpus_per_host},
        "traceEvents": events,
    }
    _write_gz_json(path, doc)


def write_nsys_sqlite(scen: Scenario, h: int, path: Path, xla_modules: bool = False) -> None:
    """An Nsight Systems SQLite export of one host: kernels, copies and memsets with their launches,
    and the framework NVTX range (``nccl:all_to_all``) that alone says a SendRecv kernel is an all-to-all.
    ``xla_modules=True`` adds XLA's ``XlaModule:#hlo_module=...#`` range around each step's launches on
    each GPU's launch thread (one execution of the module, as XLA annotates it under nsys)."""
    import sqlite3

    path.unlink(missing_ok=True)
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    kernels, copies, memsets, launches, ranges = [], [], [], [], []
    corr = 0
    for k in sorted(scen.kernels[h], key=lambda k: (k.device, k.start)):
        corr += 1
        tid = 1000 + k.device
        launch = k.start - 20_000
        launches.append((launch, launch + 1_000, tid, corr, sid("cudaLaunchKernel")))
        stream = 7 if "Compute" in k.stream else 13
        if k.bucket == "memcpy":
            copies.append((k.start, k.start + k.dur, k.device, stream, corr, 1, 4096, 1))
        elif k.name == "Memset":
            memsets.append((k.start, k.start + k.dur, k.device, stream, corr, 1, 4096))
        else:
            kernels.append((k.start, k.start + k.dur, k.device, stream, corr, 1, sid(k.name), sid(k.name[:20])))
        if k.kind == "all-to-all":
            ranges.append((launch - 500, launch + 2_000, 59, "nccl:all_to_all", tid, 0))
    if xla_modules:
        spans: dict[tuple[int, int], tuple[int, int]] = {}  # (GPU, step) -> its launches' first and last
        for k in scen.kernels[h]:
            key = (k.device, step_of(scen, h, k.start))
            lo, hi = spans.get(key, (k.start, k.start))
            spans[key] = (min(lo, k.start), max(hi, k.start))
        text = f"XlaModule:#hlo_module={MODULE},program_id={PROGRAM_ID}#"
        ranges += [(lo - 21_000, hi - 18_000, 59, text, 1000 + d, 0) for (d, _), (lo, hi) in sorted(spans.items())]
    # the user's own step ranges, named like no built-in step pattern: found with --step-marker
    ranges += [(s, e, 59, "train_iteration", 1000, 0) for s, e in scen.steps[h]]
    con = sqlite3.connect(path)
    c = con.cursor()
    c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    c.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, t) for t, i in strings.items()])
    c.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    c.execute(
        "CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INT, devStateName TEXT, name TEXT, nameEnum INT, value TEXT)"
    )
    c.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, 'Local', 'Hostname', 619, ?)", (host_name(scen, h),))
    c.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, "end" INT, deviceId INT, streamId INT, '
        "correlationId INT, globalPid INT, demangledName INT, shortName INT)"
    )
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?)", kernels)
    c.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, "end" INT, deviceId INT, streamId INT, '
        "correlationId INT, globalPid INT, bytes INT, copyKind INT)"
    )
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, ?, ?, ?, ?, ?)", copies)
    c.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INT, "end" INT, deviceId INT, streamId INT, '
        "correlationId INT, globalPid INT, bytes INT)"
    )
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, ?, ?, ?, ?, ?)", memsets)
    c.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, "end" INT, globalTid INT, correlationId INT, nameId INT)'
    )
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)", launches)
    c.execute('CREATE TABLE NVTX_EVENTS (start INT, "end" INT, eventType INT, text TEXT, globalTid INT, domainId INT)')
    c.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?)", ranges)
    con.commit()
    con.close()


def write_samples(out: Path) -> list[Path]:
    """The synthetic samples committed under ``sample_traces/``, with their truth files."""
    written = []
    specs = [("synthetic_1host_8gpu", 1, 8), ("synthetic_2host_4gpu", 2, 4)]
    for name, hosts, gpus in specs:
        scen = build(name, hosts, gpus, seed=hosts)
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        for h in range(hosts):
            p = folder / f"{host_name(scen, h)}.xplane.pb"
            write_xplane(scen, h, p)
            written.append(p)
        (out / f"{name}.truth.json").write_text(json.dumps(truth(scen), indent=1) + "\n")
        if hosts == 1:
            p = out / f"{name}.trace.json.gz"
            write_chrome(scen, 0, p)
            written.append(p)
            p = out / f"{name}.nsys.sqlite"
            write_nsys_sqlite(scen, 0, p)
            written.append(p)
        else:
            kineto = out / f"{name}_kineto"
            kineto.mkdir(exist_ok=True)
            for h in range(hosts):
                for d in range(gpus):
                    p = kineto / f"rank{h * gpus + d}.pt.trace.json.gz"
                    write_kineto(scen, h, d, p)
                    written.append(p)
    return written
