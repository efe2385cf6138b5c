"""What the tests share: where the samples and the real traces are, the bad-input contract as one assertion,
a fuzz result as a test's verdict, whether CI requires the native kernels, and the builders several test modules
use (an Nsight export with known truth, its parquet folder, random replay jobs, a headless browser)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import struct
import subprocess
import traceback
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import strategies as st

from moeprof.errors import UNFORESEEN

if TYPE_CHECKING:
    from moeprof.insight.projection import Projector

    from .fuzz.engine import Result

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"

# XLA:CPU compiles with LLVM at -O0 in the tests' JAX processes (the demo's checks, README's and capture's demo
# runs): they check what the programs compute and which ops they hold, not how fast; it halves their compile
# time, most of their CPU time (the demo model's checks: 146 -> 72 s)
CPU_COMPILE_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"

# the public real traces (PROVENANCE.md there): $MOEPROF_SHARED_TRACES, else ../shared/traces beside the checkout
SHARED_TRACES_ENV = "MOEPROF_SHARED_TRACES"
SHARED_TRACES = Path(os.environ.get(SHARED_TRACES_ENV) or ROOT.parent / "shared" / "traces")


def shared_trace(relative: str) -> Path:
    """A file under the shared traces, or skip: a fresh clone has none."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"{path} not present (set {SHARED_TRACES_ENV} to the folder of the shared real traces)")
    return path


def assert_refused(path: Path, *said: str, listing: Iterable[str] | None = None) -> None:
    """``moeprof analyze PATH`` keeps the bad-input contract: exit 2, one line on stderr naming PATH and each of
    ``said``, no traceback; the file unchanged, its folder holding ``listing`` (default: what it holds now).
    Run in this process (``moeprof_here``: a warning or an escaped exception reads as more lines on stderr);
    tests/test_cli.py checks the contract on the ``python -m moeprof`` process itself."""
    before = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    names = sorted(p.name for p in path.parent.iterdir()) if listing is None else sorted(listing)
    res = moeprof_here(["analyze", str(path)], env={"MOEPROF_DEBUG": None})
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr and UNFORESEEN not in res.stderr, res.stderr
    assert str(path) in lines[0], lines[0]
    for s in said:
        assert s in lines[0], lines[0]
    if before is not None:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in path.parent.iterdir()) == names


# the warnings Python prints by default (its default filters ignore these, outside __main__)
QUIET_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def moeprof_here(
    args: list[str], cwd: Path | None = None, env: dict[str, str | None] | None = None
) -> subprocess.CompletedProcess:
    """``moeprof ARGS`` run in this process through the CLI's app, in ``cwd`` with ``env``'s variables set (None:
    unset), its result as a finished ``python -m moeprof`` process's: an exception the CLI let through reads on
    stderr as the traceback the interpreter would print, and so does each warning Python would print (pytest
    would otherwise keep them from stderr). For the commands whose process adds nothing to what a test checks:
    an interpreter start with moeprof's imports is ~1 s of CPU; the tests of the process itself (the entry
    point's exit codes, signals, pipes, resource limits) keep one."""
    from typer.testing import CliRunner

    from moeprof.cli import app

    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        if cwd is not None:
            mp.chdir(cwd)
        for name, value in (env or {}).items():
            if value is None:
                mp.delenv(name, raising=False)
            else:
                mp.setenv(name, value)
        res = CliRunner().invoke(app, [str(a) for a in args])
    stderr = res.stderr
    for w in said:
        if not issubclass(w.category, QUIET_WARNINGS):
            stderr += warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        stderr += "Traceback (in process):\n" + "".join(traceback.format_exception(res.exception))
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, stderr)


def judge_fuzz_result(result: Result) -> None:
    """A fuzz case's verdict: passes, xfails where known classes explain every violation, else fails with its
    report (the replay command in it)."""
    if result.ok:
        return
    if result.known and not result.unexplained:
        pytest.xfail(f"known: {', '.join(k.id for k in result.known)} (case {result.case.key})")
    pytest.fail(result.report(), pytrace=False)


# CI builds the native kernels (a C compiler is there) and sets this, so that a failed build fails the tests
# that run them instead of dropping their route
NATIVE_REQUIRED = os.environ.get("MOEPROF_REQUIRE_NATIVE") == "1"


# ---- builders ------------------------------------------------------------------------------------------


def to_parquetdir(db: Path, folder: Path) -> Path:
    """What ``nsys export --type parquetdir`` writes: one parquet file per table."""
    folder.mkdir()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for name in names:
            cur = conn.execute(f'SELECT * FROM "{name}"')
            cols = [d[0] for d in cur.description]
            rows = cur.fetchall()
            # arrow infers each column (nullable ints, strings, binary blobs) like nsys's own writer
            data = {c: pa.array([r[i] for r in rows]) for i, c in enumerate(cols)}
            pq.write_table(pa.table(data), folder / f"{name}.parquet")
    finally:
        conn.close()
    return folder


def fake_nsys(folder: Path, body: str) -> Path:
    """An ``nsys`` executable for tests: a shell script that runs ``body`` ($out = the --output path, $report =
    the last argument: the report ``nsys export`` is asked to export)."""
    folder.mkdir()
    script = folder / "nsys"
    script.write_text(
        '#!/bin/sh\nout=""\nreport=""\nwhile [ $# -gt 0 ]; do\n  if [ "$1" = "--output" ]; then out="$2"; fi\n'
        f'  report="$1"\n  shift\ndone\n{body}\n'
    )
    script.chmod(0o755)
    return folder


def process_gone(pid: int) -> bool:
    """No such process, or a zombie waiting for a parent that is not us to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def tiny_xplane(path: Path, kernel: str, start_ns: int, duration_ps: int, host_lines: Iterable[str] = ()) -> Path:
    """An XPlane written field by field (synthetic/xplane_encode.py's varints): one GPU plane whose one stream
    line holds one kernel, and a ``/host:CPU`` plane whose lines (named ``host_lines``) hold no event."""
    from synthetic.xplane_encode import varint_bytes as varint

    def number(field: int, value: int) -> bytes:
        return varint(field << 3) + varint(value)

    def nested(field: int, payload: bytes) -> bytes:
        return varint(field << 3 | 2) + varint(len(payload)) + payload

    event = number(1, 1) + number(2, 0) + number(3, duration_ps)  # metadata id, offset_ps, duration_ps
    line = number(1, 1) + nested(2, b"Stream #7(Compute)") + number(3, start_ns) + nested(4, event)
    metadata = nested(2, number(1, 1) + nested(2, kernel.encode()))  # the map entry 1 -> XEventMetadata
    gpu = number(1, 1) + nested(2, b"/device:GPU:0") + nested(3, line) + nested(4, number(1, 1) + metadata)
    lines = b"".join(nested(3, number(1, 10 + i) + nested(2, name.encode())) for i, name in enumerate(host_lines))
    host = number(1, 2) + nested(2, b"/host:CPU") + lines
    path.write_bytes(nested(1, gpu) + nested(1, host))
    return path


def damaged_sqlite(src: Path, dst: Path, table: str, whole_page: bool = True) -> Path:
    """A copy of an SQLite file with the first page of ``table`` overwritten with 0xff: what a disk error or an
    interrupted copy leaves. ``whole_page=False`` keeps the page's 8-byte header and overwrites its cell pointers."""
    conn = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    finally:
        conn.close()
    data = bytearray(src.read_bytes())
    start, end = (root - 1) * page_size, root * page_size
    if not whole_page:
        start, end = start + 8, start + 200
    data[start:end] = b"\xff" * (end - start)
    dst.write_bytes(bytes(data))
    return dst


# ---- a hand-made export with known truth -----------------------------------------------------

P0, P1 = 100 << 24, 200 << 24  # globalPid: the pid above the low 24 bits
T0, T1 = P0 + 5, P1 + 7  # globalTid
NCCL_DOMAIN = 1
COMM = 0xABC
SCHEMA_INIT, SCHEMA_COLL, SCHEMA_P2P = 1001, 1002, 1003
STRINGS = {
    1: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)",
    2: "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    3: "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)",
    4: "ncclDevKernel_SendRecv",
    5: "loop_add_fusion",
    6: "gemm_kernel",
    10: "ncclAllReduce",
    11: "ncclGroupStart",
    12: "ncclSend",
    13: "ncclRecv",
    14: "ncclGroupEnd",
    15: "ncclCommInitRank",
    16: "NCCL",
    17: "cuLaunchKernel",
}


def blob(schema: int, payload: bytes) -> bytes:
    return struct.pack("<QQQQ", NCCL_DOMAIN, schema, len(payload), 32) + payload


def init_payload(rank: int, dev: int) -> bytes:
    return struct.pack("<Qiii4x", COMM, 2, rank, dev)


def p2p_payload(size: int, peer: int) -> bytes:
    return struct.pack("<QQi4x", COMM, size, peer)


def make_export(path: Path, payload: str = "blob") -> Path:
    """Two processes, one GPU each. Process 0 (GPU 0): an all-reduce, a grouped all-to-all, a lone
    send, an XLA thunk and three copies; process 1 (GPU 1): a GEMM whose correlation id collides
    with process 0's all-reduce launch."""
    conn = sqlite3.connect(path)
    c = conn.cursor()
    c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    c.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS.items())
    c.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    c.execute(
        "CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INT, devStateName TEXT, name TEXT, nameEnum INT, value TEXT)"
    )
    c.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, 'Local', 'Hostname', 619, 'node7')")
    c.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, "end" INT, deviceId INT, contextId INT, '
        "streamId INT, correlationId INT, globalPid INT, demangledName INT, shortName INT, mangledName INT)"
    )
    c.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, NULL)",
        [
            (5000, 6000, 0, 20, 1, P0, 1, 2),  # all-reduce
            (6000, 7000, 0, 7, 2, P0, 3, 4),  # grouped send/recv: all-to-all
            (7000, 7500, 0, 7, 3, P0, None, 5),  # XLA fusion (short name only)
            (9000, 9100, 0, 7, 7, P0, 3, 4),  # lone ncclSend
            (5000, 5500, 1, 14, 1, P1, 6, 6),  # GEMM on GPU 1, correlation id 1 like the all-reduce
        ],
    )
    c.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, "end" INT, deviceId INT, streamId INT, '
        "correlationId INT, globalPid INT, bytes INT, copyKind INT, srcDeviceId INT, dstDeviceId INT)"
    )
    c.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 30, ?, ?, ?, ?, ?, ?)",
        [
            (8000, 8100, 4, P0, 1 << 20, 10, 0, 1),  # cudaMemcpyPeer
            (8100, 8200, 5, P0, 2048, 8, 0, 1),  # DtoD between two GPUs: a peer copy too
            (8200, 8300, 6, P0, 4096, 1, None, None),
        ],
    )
    c.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, "end" INT, eventClass INT, globalTid INT, '
        "correlationId INT, nameId INT)"
    )
    c.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 17)",
        [
            (1200, 1300, T0, 1),
            (2300, 2400, T0, 2),
            (3150, 3160, T0, 3),
            (3500, 3510, T0, 4),
            (3520, 3530, T0, 5),
            (3540, 3550, T0, 6),
            (4150, 4160, T0, 7),
            (1250, 1260, T1, 1),
        ],
    )
    c.execute(
        'CREATE TABLE NVTX_EVENTS (start INT, "end" INT, eventType INT, rangeId INT, category INT, '
        "color INT, text TEXT, globalTid INT, endGlobalTid INT, textId INT, domainId INT, "
        "jsonText TEXT, jsonTextId INT, binaryData BLOB)"
    )
    ranges = [
        # (start, end, eventType, text, tid, textId, domain, binary payload, json payload)
        (0, None, 75, None, T0, 16, NCCL_DOMAIN, None, None),
        (
            50,
            90,
            59,
            None,
            T0,
            15,
            NCCL_DOMAIN,
            blob(SCHEMA_INIT, init_payload(0, 0)),
            '{"NCCL communicator ID": 2748, "No. of ranks": 2, "Rank": 0, "CUDA device": 0}',
        ),
        (
            60,
            95,
            59,
            None,
            T1,
            15,
            NCCL_DOMAIN,
            blob(SCHEMA_INIT, init_payload(1, 1)),
            '{"NCCL communicator ID": 2748, "No. of ranks": 2, "Rank": 1, "CUDA device": 1}',
        ),
        (100, 10000, 59, "ProfilerStep#7", T0, None, 0, None, None),
        (1000, 2000, 59, "nccl:all_reduce, op_id = 5", T0, None, 0, None, None),
        (
            1100,
            1900,
            59,
            None,
            T0,
            10,
            NCCL_DOMAIN,
            blob(SCHEMA_COLL, struct.pack("<QQi4x", COMM, 4096, 0)),
            '{"NCCL communicator ID": 2748, "Message size [bytes]": 4096}',
        ),
        (2000, 3000, 59, "nccl:all_to_all", T0, None, 0, None, None),
        (2100, 2110, 59, None, T0, 11, NCCL_DOMAIN, None, None),
        (
            2120,
            2130,
            59,
            None,
            T0,
            12,
            NCCL_DOMAIN,
            blob(SCHEMA_P2P, p2p_payload(100, 0)),
            '{"NCCL communicator ID": 2748, "Message size [bytes]": 100, "Peer rank": 0}',
        ),
        (
            2140,
            2150,
            59,
            None,
            T0,
            13,
            NCCL_DOMAIN,
            blob(SCHEMA_P2P, p2p_payload(100, 0)),
            '{"NCCL communicator ID": 2748, "Message size [bytes]": 100, "Peer rank": 0}',
        ),
        (
            2160,
            2170,
            59,
            None,
            T0,
            12,
            NCCL_DOMAIN,
            blob(SCHEMA_P2P, p2p_payload(200, 1)),
            '{"NCCL communicator ID": 2748, "Message size [bytes]": 200, "Peer rank": 1}',
        ),
        (
            2180,
            2190,
            59,
            None,
            T0,
            13,
            NCCL_DOMAIN,
            blob(SCHEMA_P2P, p2p_payload(200, 1)),
            '{"NCCL communicator ID": 2748, "Message size [bytes]": 200, "Peer rank": 1}',
        ),
        (2200, 2900, 59, None, T0, 14, NCCL_DOMAIN, None, None),
        (3000, 4000, 59, "XlaModule:#hlo_module=jit_step,program_id=3#", T0, None, 2, None, None),
        (3100, 3200, 59, "Thunk:#hlo_op=fusion.12#", T0, None, 2, None, None),
        (
            4100,
            4200,
            59,
            None,
            T0,
            12,
            NCCL_DOMAIN,
            blob(SCHEMA_P2P, p2p_payload(64, 1)),
            '{"NCCL communicator ID": 2748, "Message size [bytes]": 64, "Peer rank": 1}',
        ),
        (0, 5000, 60, "train_step", T1, None, 0, None, None),
        (5000, 9000, 60, "train_step", T1, None, 0, None, None),
        (300, 400, 59, "aten::broadcast_tensors", T0, None, 0, None, None),
    ]
    for start, end, etype, text, tid, text_id, dom, binary, js in ranges:
        c.execute(
            "INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, NULL, NULL, NULL, ?, ?, NULL, ?, ?, ?, NULL, ?)",
            (
                start,
                end,
                etype,
                text,
                tid,
                text_id,
                dom,
                js if payload == "json" else None,
                binary if payload == "blob" else None,
            ),
        )
    c.execute(
        "CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INT, schemaId INT, name TEXT, type INT, flags INT, "
        "numEntries INT, payloadSize INT, alignTo INT)"
    )
    c.execute(
        "CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INT, schemaId INT, idx INT, flags INT, type INT, "
        "name TEXT, description TEXT, arrayOrUnionDetail INT, offset INT)"
    )
    entries = {
        SCHEMA_INIT: [
            (18, "NCCL communicator ID", None),
            (5, "No. of ranks", 8),
            (5, "Rank", 12),
            (5, "CUDA device", 16),
        ],
        SCHEMA_COLL: [
            (18, "NCCL communicator ID", None),
            (22, "Message size [bytes]", 8),
            (16777232, "Reduction operation", 16),
        ],
        SCHEMA_P2P: [(18, "NCCL communicator ID", None), (22, "Message size [bytes]", 8), (5, "Peer rank", 16)],
    }
    for schema, rows in entries.items():
        c.execute(
            "INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (?, ?, '', 1, NULL, ?, 24, NULL)", (NCCL_DOMAIN, schema, len(rows))
        )
        for idx, (typ, name, off) in enumerate(rows):
            c.execute(
                "INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (?, ?, ?, NULL, ?, ?, NULL, NULL, ?)",
                (NCCL_DOMAIN, schema, idx, typ, name, off),
            )
    conn.commit()
    conn.close()
    return path


CHROMIUM = next(
    (
        p
        for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
        if p and Path(p).exists()
    ),
    None,
)


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        f"--user-data-dir={tmp / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")


@st.composite
def timelines(draw: st.DrawFn) -> dict:
    """A random job: devices with streams of back-to-back or gapped activities, and collectives."""
    n_dev = draw(st.integers(1, 3))
    rows: dict[str, list] = {"device": [], "stream": [], "start": [], "end": [], "instance": []}
    t = np.zeros(n_dev, dtype=np.int64)
    n_inst = 0
    for _ in range(draw(st.integers(1, 12))):
        if n_dev > 1 and draw(st.booleans()):
            # a collective: every device a member, ending together at the last arrival plus a transfer
            arrive = [int(t[d]) + draw(st.integers(0, 50)) for d in range(n_dev)]
            end = max(arrive) + draw(st.integers(0, 40))
            for d in range(n_dev):
                rows["device"].append(d)
                rows["stream"].append(9)
                rows["start"].append(arrive[d])
                rows["end"].append(end)
                rows["instance"].append(n_inst)
                t[d] = end
            n_inst += 1
        else:
            d = draw(st.integers(0, n_dev - 1))
            start = int(t[d]) + draw(st.integers(0, 30))
            end = start + draw(st.integers(0, 60))
            rows["device"].append(d)
            rows["stream"].append(draw(st.integers(0, 1)))
            rows["start"].append(start)
            rows["end"].append(end)
            rows["instance"].append(-1)
            if draw(st.booleans()):
                t[d] = end  # the next one waits for it; otherwise it overlaps
    out = {k: np.array(v, dtype=np.int64) for k, v in rows.items()}
    out["mask"] = np.array(draw(st.lists(st.booleans(), min_size=out["start"].size, max_size=out["start"].size)))
    return out


def projector_of(traces: list) -> Projector:
    """The projector the analysis of ``traces`` made (its replay columns and graph: ``.job``)."""
    from moeprof.pipeline import Request, run

    projector = run(Request(traces)).projector
    assert projector is not None
    return projector
