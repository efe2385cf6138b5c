"""The synthetic 8x MI300X MoE job of :mod:`synthetic.rocprof` as rocprofv3's rocpd output: one SQLite database
per process, ``<hostname>/<pid>_results.db``, written table by table as rocprofiler-sdk's
``source/lib/output/generateRocpd.cpp`` writes them, in the schema of ``source/share/rocprofiler-sdk-rocpd/
rocpd_tables.sql`` 3.0.0 (tables suffixed with the file's uuid, unsuffixed views over them:
``rocpd_views.sql``). See ../shared/notes/rocprof-nccl-inspector.md, "rocpd".

What each process's database holds, as the writer does:

- ``rocpd_metadata`` (schema_version, uuid, guid), ``rocpd_string`` (every name, category and direction),
  ``rocpd_info_node`` (hostname), ``rocpd_info_process`` (id = pid, ``environment`` with the launcher's
  ``RANK``/``LOCAL_RANK``), ``rocpd_info_thread``, ``rocpd_info_agent`` (all 10 agents of the node, 2 CPUs then
  8 GPUs; ``id`` = ``absolute_index`` = node id, ``type_index`` among GPUs, ``product_name``),
  ``rocpd_info_queue``/``rocpd_info_stream`` ("Default Queue", "Default Stream", "Stream 0"),
  ``rocpd_info_code_object``, ``rocpd_info_kernel_symbol`` (``display_name`` the formatted name).
- Per kernel: the launching HIP call (``rocpd_event`` category ``HIP_RUNTIME_API_EXT``, ``stack_id`` its internal
  correlation id, ``parent_stack_id`` the RCCL call it ran inside, else 0; a ``rocpd_region`` with ``id`` = that
  id), the dispatch's own event (category ``KERNEL_DISPATCH``, ``stack_id`` = ``parent_stack_id`` = the launch's
  id) and its ``rocpd_kernel_dispatch`` row.
- RCCL calls (category ``RCCL_API``) with their arguments in ``rocpd_arg``: the gradient all-reduce as
  ``ncclAllReduce``; of the two expert all-to-alls of a step the first as ``ncclAllToAll``, the second as PyTorch
  issues it, ``ncclGroupStart``, an ``ncclSend`` and ``ncclRecv`` per peer, ``ncclGroupEnd`` (the kernel launches
  inside ``ncclGroupEnd``). Every RCCL kernel is ``ncclDevKernel_Generic_1``: only the host side tells its kind.
- Per copy: the ``hipMemcpyAsync`` call, a ``MEMORY_COPY`` event and the ``rocpd_memory_copy`` row (direction in
  ``name_id``, agents, ``size`` in bytes).
- A ROCTx range per step (category ``MARKER_CORE_RANGE_API``, ``roctxRangePushA``, the text in the event's
  ``extdata`` ``{"message": "step N"}``).

The true figures are :func:`synthetic.rocprof.truth` of the same job, plus the copy bytes and steps written here.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from . import rocprof as job_of
from .rocprof import HOST, N_CPUS, N_GPUS, Activity, Job, build

SCHEMA_VERSION = "3"
STREAM_HANDLE = 0x7F3A0000  # the CSV sample's Stream_Id of the communication stream, divided by 2
COPY_BYTES = {"MEMORY_COPY_HOST_TO_DEVICE": 8 << 20, "MEMORY_COPY_DEVICE_TO_HOST": 4 << 10,
              "MEMORY_COPY_DEVICE_TO_DEVICE": 32 << 20}  # fmt: skip

# rocpd_tables.sql 3.0.0: the tables this writer fills, their columns in the schema's order
TABLES = {
    "rocpd_metadata": "id INTEGER PRIMARY KEY AUTOINCREMENT, tag TEXT NOT NULL, value TEXT NOT NULL",
    "rocpd_string": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, string TEXT NOT NULL UNIQUE",
    "rocpd_info_node": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, hash BIGINT NOT NULL UNIQUE, "
    "machine_id TEXT NOT NULL UNIQUE, system_name TEXT, hostname TEXT, release TEXT, version TEXT, "
    "hardware_name TEXT, domain_name TEXT",
    "rocpd_info_process": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "ppid INTEGER, pid INTEGER NOT NULL, init BIGINT, fini BIGINT, start BIGINT, end BIGINT, command TEXT, "
    "environment JSONB DEFAULT '{}' NOT NULL, extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_info_thread": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "ppid INTEGER, pid INTEGER NOT NULL, tid INTEGER NOT NULL, name TEXT, start BIGINT, end BIGINT, "
    "extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_info_agent": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "pid INTEGER NOT NULL, type TEXT CHECK (type IN ('CPU', 'GPU')), absolute_index INTEGER, "
    "logical_index INTEGER, type_index INTEGER, uuid INTEGER, name TEXT, model_name TEXT, vendor_name TEXT, "
    "product_name TEXT, user_name TEXT, extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_info_queue": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "pid INTEGER NOT NULL, name TEXT, extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_info_stream": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "pid INTEGER NOT NULL, name TEXT, extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_info_code_object": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "pid INTEGER NOT NULL, agent_id INTEGER, uri TEXT, load_base BIGINT, load_size BIGINT, load_delta BIGINT, "
    "storage_type TEXT, extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_info_kernel_symbol": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "pid INTEGER NOT NULL, code_object_id INTEGER NOT NULL, kernel_name TEXT, display_name TEXT, "
    "kernel_object INTEGER, kernarg_segment_size INTEGER, kernarg_segment_alignment INTEGER, "
    "group_segment_size INTEGER, private_segment_size INTEGER, sgpr_count INTEGER, arch_vgpr_count INTEGER, "
    "accum_vgpr_count INTEGER, extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_event": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, category_id INTEGER, "
    "stack_id INTEGER, parent_stack_id INTEGER, correlation_id INTEGER, call_stack JSONB DEFAULT '{}' NOT NULL, "
    "line_info JSONB DEFAULT '{}' NOT NULL, extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_arg": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, event_id INTEGER NOT NULL, "
    "position INTEGER NOT NULL, type TEXT NOT NULL, name TEXT NOT NULL, value TEXT, "
    "extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_region": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "pid INTEGER NOT NULL, tid INTEGER NOT NULL, start BIGINT NOT NULL, end BIGINT NOT NULL, "
    "name_id INTEGER NOT NULL, event_id INTEGER, extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_kernel_dispatch": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "pid INTEGER NOT NULL, tid INTEGER, agent_id INTEGER NOT NULL, kernel_id INTEGER NOT NULL, "
    "dispatch_id INTEGER NOT NULL, queue_id INTEGER NOT NULL, stream_id INTEGER NOT NULL, start BIGINT NOT NULL, "
    "end BIGINT NOT NULL, private_segment_size INTEGER, group_segment_size INTEGER, "
    "workgroup_size_x INTEGER NOT NULL, workgroup_size_y INTEGER NOT NULL, workgroup_size_z INTEGER NOT NULL, "
    "grid_size_x INTEGER NOT NULL, grid_size_y INTEGER NOT NULL, grid_size_z INTEGER NOT NULL, "
    "region_name_id INTEGER, event_id INTEGER, extdata JSONB DEFAULT '{}' NOT NULL",
    "rocpd_memory_copy": "id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, "
    "pid INTEGER NOT NULL, tid INTEGER, start BIGINT NOT NULL, end BIGINT NOT NULL, name_id INTEGER NOT NULL, "
    "dst_agent_id INTEGER, dst_address INTEGER, src_agent_id INTEGER, src_address INTEGER, size INTEGER NOT NULL, "
    "queue_id INTEGER, stream_id INTEGER, region_name_id INTEGER, event_id INTEGER, "
    "extdata JSONB DEFAULT '{}' NOT NULL",
}


def uuid_of(gpu: int) -> str:
    """A uuid v7 as generateRocpd.cpp spells it in table names (dashes as underscores)."""
    return f"0193a4c2_7e10_7000_8000_{0x3000A0 + gpu:012x}"


def guid_of(gpu: int) -> str:
    return uuid_of(gpu).replace("_", "-")


class _Db:
    """One process's database, filled in the writer's order with its ids."""

    def __init__(self, path: Path, gpu: int) -> None:
        self.conn = sqlite3.connect(path)
        self.conn.execute("PRAGMA page_size = 1024")
        self.suffix, self.guid = "_" + uuid_of(gpu), guid_of(gpu)
        for table, columns in TABLES.items():
            self.conn.execute(f"CREATE TABLE `{table}{self.suffix}` ({columns})")
            self.conn.execute(f"CREATE VIEW `{table}` AS SELECT * FROM `{table}{self.suffix}`")
        self.strings: dict[str, int] = {}
        self.event_id = 0

    def insert(self, table: str, **values: object) -> None:
        if table != "rocpd_metadata":
            values.setdefault("guid", self.guid)
        cols = ", ".join(f'"{c}"' for c in values)
        marks = ", ".join("?" for _ in values)
        self.conn.execute(f"INSERT INTO `{table}{self.suffix}` ({cols}) VALUES ({marks})", list(values.values()))

    def string(self, text: str) -> int:
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
            self.insert("rocpd_string", id=self.strings[text], string=text)
        return self.strings[text]

    def event(self, category: str, stack: int, parent: int, extdata: str = "{}") -> int:
        self.event_id += 1
        self.insert("rocpd_event", id=self.event_id, category_id=self.string(category), stack_id=stack,
                    parent_stack_id=parent, correlation_id=0, extdata=extdata)  # fmt: skip
        return self.event_id


def _node_id() -> int:
    return 2_914_305_511  # get_hash_id(machine_id) % 2**32: any stable number


def write_process(job: Job, gpu: int, path: Path) -> dict[str, object]:
    """The database of the process that drove ``gpu``; returns what it wrote that the truth adds (bytes, steps)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    db = _Db(path, gpu)
    pid, nid = job_of.pid_of(gpu), _node_id()
    tid = pid
    acts = sorted(job.of(gpu), key=lambda a: a.correlation)
    for tag, value in (("schema_version", SCHEMA_VERSION), ("uuid", db.suffix[1:]), ("guid", db.guid)):
        db.insert("rocpd_metadata", tag=tag, value=value)
    db.string("")
    db.insert("rocpd_info_node", id=nid, hash=nid, machine_id="5f0c1e2a9b7d4c63a1e8f0d2c4b6a8e0",
              system_name="Linux", hostname=HOST, release="6.8.0-49-generic", version="#49-Ubuntu SMP",
              hardware_name="x86_64", domain_name="(none)")  # fmt: skip
    env = {"RANK": str(gpu), "LOCAL_RANK": str(gpu), "WORLD_SIZE": str(N_GPUS), "HIP_VISIBLE_DEVICES": str(gpu)}
    first, last = min(a.start for a in acts) - 5_000_000, max(a.end for a in acts) + 5_000_000
    db.insert("rocpd_info_process", id=pid, nid=nid, ppid=41100, pid=pid, init=first, fini=last, start=first,
              end=last, command="python train_moe.py --experts 64", environment=json.dumps(env))  # fmt: skip
    db.insert("rocpd_info_thread", id=tid, nid=nid, ppid=41100, pid=pid, tid=tid, name="python", start=first, end=last)
    # every agent of the node, CPUs first (node ids 0-1), then the GPUs (2-9, type_index 0-7)
    for n in range(N_CPUS + N_GPUS):
        is_gpu = n >= N_CPUS
        db.insert("rocpd_info_agent", id=n, nid=nid, pid=pid, type="GPU" if is_gpu else "CPU", absolute_index=n,
                  logical_index=n, type_index=n - N_CPUS if is_gpu else n, uuid=0,
                  name=job_of.GFX if is_gpu else "AMD EPYC 9654 96-Core Processor",
                  model_name="ip discovery" if is_gpu else "", vendor_name="AMD" if is_gpu else "CPU",
                  product_name=job_of.PRODUCT if is_gpu else "AMD EPYC 9654 96-Core Processor",
                  user_name=job_of.PRODUCT if is_gpu else "")  # fmt: skip
    # get_queue_id / get_stream_id: the default ones first, then "Queue k"/"Stream k" in order of first use
    db.insert("rocpd_info_queue", id=0, nid=nid, pid=pid, name="Default Queue")
    db.insert("rocpd_info_stream", id=0, nid=nid, pid=pid, name="Default Stream")
    db.insert("rocpd_info_queue", id=STREAM_HANDLE, nid=nid, pid=pid, name="Queue 0")
    db.insert("rocpd_info_stream", id=2 * STREAM_HANDLE, nid=nid, pid=pid, name="Stream 0")
    db.insert("rocpd_info_code_object", id=1, nid=nid, pid=pid, agent_id=N_CPUS + gpu, uri="file:///opt/moe.so",
              load_base=0x7F00_0000_0000, load_size=1 << 20, load_delta=0, storage_type="FILE")  # fmt: skip
    symbols: dict[str, int] = {}
    for a in acts:
        if a.kind == "kernel" and a.name not in symbols:
            symbols[a.name] = len(symbols) + 1
            db.string(a.name)
            db.insert("rocpd_info_kernel_symbol", id=symbols[a.name], nid=nid, pid=pid, code_object_id=1,
                      kernel_name=a.name.split("(")[0] + ".kd", display_name=a.name, kernel_object=0,
                      kernarg_segment_size=64, kernarg_segment_alignment=8, group_segment_size=0,
                      private_segment_size=0, sgpr_count=32, arch_vgpr_count=64, accum_vgpr_count=0)  # fmt: skip

    def region(name: str, category: str, stack: int, parent: int, start: int, end: int, extdata: str = "{}") -> int:
        evt = db.event(category, stack, parent, extdata)
        db.insert("rocpd_region", id=stack, nid=nid, pid=pid, tid=tid, start=start, end=end,
                  name_id=db.string(name), event_id=evt)  # fmt: skip
        return evt

    def args(evt: int, values: list[tuple[str, str, object]]) -> None:
        for i, (type_, name, value) in enumerate(values):
            db.insert("rocpd_arg", event_id=evt, position=i, type=type_, name=name, value=str(value))

    rccl_id = 10_000_000  # internal ids of the RCCL calls, apart from the launches'
    comm = "0x55d0c3a41e00"
    all_to_alls = 0
    dispatch = 0
    copy_bytes = 0
    for a in acts:
        stream = 2 * STREAM_HANDLE if a.stream == 2 else 0
        queue = STREAM_HANDLE if a.stream == 2 else 0
        host = a.start - 30_000  # the host issues each operation ahead of the GPU
        parent = 0
        if a.rccl:
            stream_arg = ("hipStream_t", "stream", hex(stream))
            if a.rccl == "ncclAllToAll":
                all_to_alls += 1
            grouped = a.rccl == "ncclAllToAll" and all_to_alls % 2 == 0
            if grouped:
                rccl_id += 1
                region("ncclGroupStart", "RCCL_API", rccl_id, 0, host - 9_000, host - 8_800)
                t = host - 8_000
                for peer in range(N_GPUS):
                    if peer == gpu:
                        continue
                    for call in ("ncclSend", "ncclRecv"):
                        rccl_id += 1
                        evt = region(call, "RCCL_API", rccl_id, 0, t, t + 300)
                        buf = "sendbuff" if call == "ncclSend" else "recvbuff"
                        args(evt, [("void*", buf, "0x7f2a00000000"), ("size_t", "count", 262144),
                                   ("ncclDataType_t", "datatype", 9), ("int", "peer", peer),
                                   ("ncclComm_t", "comm", comm), stream_arg])  # fmt: skip
                        t += 400
                rccl_id += 1
                parent = rccl_id
                region("ncclGroupEnd", "RCCL_API", rccl_id, 0, host - 1_000, host + 6_000)
            else:
                rccl_id += 1
                parent = rccl_id
                evt = region(a.rccl, "RCCL_API", rccl_id, 0, host - 1_000, host + 6_000)
                values: list[tuple[str, str, object]] = [
                    ("const void*", "sendbuff", "0x7f2a00000000"),
                    ("void*", "recvbuff", "0x7f2b00000000"),
                    ("size_t", "count", 1 << 22),
                    ("ncclDataType_t", "datatype", 9),
                ]
                if a.rccl == "ncclAllReduce":
                    values.append(("ncclRedOp_t", "op", 0))
                args(evt, [*values, ("ncclComm_t", "comm", comm), stream_arg])
        if a.kind == "kernel":
            api = {job_of.COPY_KERNEL: "hipMemcpyAsync", job_of.FILL_KERNEL: "hipMemsetAsync"}.get(
                a.name, "hipExtLaunchKernel" if a.rccl else "hipLaunchKernel"
            )
            region(api, "HIP_RUNTIME_API_EXT", a.correlation, parent, host, host + 4_000)
            evt = db.event("KERNEL_DISPATCH", a.correlation, a.correlation)
            dispatch += 1
            db.insert("rocpd_kernel_dispatch", id=dispatch, nid=nid, pid=pid, tid=tid, agent_id=N_CPUS + gpu,
                      kernel_id=symbols[a.name], dispatch_id=dispatch, queue_id=queue, stream_id=stream,
                      start=a.start, end=a.end, private_segment_size=0, group_segment_size=0,
                      workgroup_size_x=256, workgroup_size_y=1, workgroup_size_z=1, grid_size_x=262144,
                      grid_size_y=1, grid_size_z=1, region_name_id=db.string(""), event_id=evt)  # fmt: skip
        else:
            region("hipMemcpyAsync", "HIP_RUNTIME_API_EXT", a.correlation, 0, host, host + 4_000)
            evt = db.event("MEMORY_COPY", a.correlation, a.correlation)
            src, dst = _copy_agents(a, gpu)
            size = COPY_BYTES[a.name]
            copy_bytes += size
            db.insert("rocpd_memory_copy", id=a.correlation, nid=nid, pid=pid, tid=tid, start=a.start, end=a.end,
                      name_id=db.string(a.name), dst_agent_id=dst, dst_address=0x7F2C00000000, src_agent_id=src,
                      src_address=0x7F2D00000000, size=size, stream_id=stream, event_id=evt)  # fmt: skip
    steps = job_of.step_ranges(acts)
    for i, (s, e) in enumerate(steps):
        rccl_id += 1
        region("roctxRangePushA", "MARKER_CORE_RANGE_API", rccl_id, 0, s, e, json.dumps({"message": f"step {i}"}))
    db.conn.commit()
    db.conn.execute("VACUUM")
    db.conn.close()
    return {"copy_bytes": copy_bytes, "steps": steps}


def _copy_agents(a: Activity, gpu: int) -> tuple[int, int]:
    """(src, dst) agent node ids of a copy: host memory is the first CPU's."""
    me = N_CPUS + gpu
    return {
        "MEMORY_COPY_HOST_TO_DEVICE": (0, me),
        "MEMORY_COPY_DEVICE_TO_HOST": (me, 0),
        "MEMORY_COPY_DEVICE_TO_DEVICE": (me, N_CPUS + a.peer),
    }[a.name]


def write(job: Job, out: Path) -> tuple[list[Path], dict]:
    """``<out>/<HOST>/<pid>_results.db`` per process, and the truth of the job."""
    from .rocprof import truth

    written, extra = [], {}
    for gpu in range(N_GPUS):
        path = out / HOST / f"{job_of.pid_of(gpu)}_results.db"
        extra[f"{HOST}/GPU:{gpu}"] = write_process(job, gpu, path)
        written.append(path)
    t = truth(job)
    t["scenario"] = "synthetic_rocpd_mi300x"
    for d in t["devices"]:
        d["copy_bytes"] = extra[d["device"]]["copy_bytes"]
        d["steps"] = [list(s) for s in extra[d["device"]]["steps"]]
    return written, t


def write_samples(out: Path) -> list[Path]:
    """The committed sample: the 8 databases and the truth."""
    written, t = write(build(), out / "synthetic_rocpd_mi300x")
    truth_path = out / "synthetic_rocpd_mi300x.truth.json"
    truth_path.write_text(json.dumps(t, indent=1) + "\n")
    return [*written, truth_path]


if __name__ == "__main__":
    import sys

    for p in write_samples(Path(sys.argv[1] if len(sys.argv) > 1 else "sample_traces")):
        print(p)
