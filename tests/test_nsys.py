"""Nsight Systems reader: real exports checked against direct SQL, and a hand-made export whose truth is known."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from moeprof.core.classify import classify
from moeprof.core.trace import Trace
from moeprof.core.vocabulary import vocabulary
from moeprof.errors import InputError
from moeprof.options import LoadOptions
from moeprof.readers import Placement, ReadContext, nsys, read_file
from moeprof.readers.nsys import export as nsys_export
from moeprof.readers.nsys import nvtx

from .helpers import P1, SHARED_TRACES, STRINGS, fake_nsys, make_export, process_gone, to_parquetdir

STEP_RANGE = vocabulary().step_range


def parse(path: Path, host_index: int = 0, options: LoadOptions | None = None) -> Trace:
    return nsys.read(path, ReadContext(options or LoadOptions(), Placement(host_index)))


def parse_parquet_dir(folder: Path) -> Trace:
    return nsys.read_parquet_dir(folder)


def parse_file(path: Path) -> Trace:
    return read_file(path)


TRACES = SHARED_TRACES
NSYS = TRACES / "nsys"
DEVICE = ("kernel", "memcpy", "memset")


def real(name: str) -> Path:
    path = NSYS / name
    if not path.exists():
        pytest.skip(f"{path} not present (set MOEPROF_SHARED_TRACES to the shared real traces)")
    return path


def sql(path: Path, query: str, *args: object) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return conn.execute(query, args).fetchall()
    finally:
        conn.close()


def has_table(path: Path, table: str) -> bool:
    return bool(sql(path, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", table))


def device_rows(trace: Trace) -> pd.DataFrame:
    assert trace.events["activity"].astype(str).isin(DEVICE).all()  # markers never travel as rows
    return trace.events


# ---- real exports -----------------------------------------------------------------------------

REAL = ["torch_a2a_2gpu.sqlite", "h100_2gpu_1s.sqlite", "cloverleaf_a100.sqlite", "saxpy_mpi_old_schema.sqlite"]


@pytest.mark.parametrize("name", REAL)
def test_counts_and_time_match_sql(name: str) -> None:
    path = real(name)
    table = parse(path)
    dev = device_rows(table)
    act = dev["activity"].astype(str)
    assert (act == "kernel").sum() == sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert (act == "memcpy").sum() == sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]
    memsets = (
        sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET")[0][0]
        if has_table(path, "CUPTI_ACTIVITY_KIND_MEMSET")
        else 0
    )
    assert (act == "memset").sum() == memsets

    # kernel time per GPU, summed by SQLite
    host = sql(path, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")[0][0]
    want = {
        f"{host}/GPU:{d}": s
        for d, s in sql(path, 'SELECT deviceId, SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY deviceId')
    }
    k = dev[act == "kernel"]
    got = (k["end_ns"] - k["start_ns"]).groupby(k["device"].astype(str)).sum().to_dict()
    assert got == want
    # every interval is a row of the table, unchanged
    rows = sql(path, 'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start, "end"')
    mine = k.sort_values(["start_ns", "end_ns"])[["start_ns", "end_ns"]].to_numpy()
    assert np.array_equal(mine, np.array(rows, dtype=np.int64))

    # copy kinds from the CUPTI enum
    kinds = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}
    counted = sql(path, "SELECT copyKind, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1")
    want_copies = {kinds[c]: n for c, n in counted}
    m = dev[act == "memcpy"]
    assert m["copy_kind"].astype(str).value_counts().to_dict() == want_copies
    assert set(m["name"].astype(str)) == {f"Memcpy {k}" for k in want_copies}

    n_gpus = sql(
        path,
        "SELECT count(DISTINCT deviceId) FROM (SELECT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "UNION SELECT deviceId FROM CUPTI_ACTIVITY_KIND_MEMCPY)",
    )[0][0]
    assert set(dev["gpus_per_domain"]) == {n_gpus}
    assert sorted(dev["global_id"].unique()) == list(range(n_gpus))
    assert set(dev["source"].astype(str)) == {"nsys"}
    assert set(dev["host"].astype(str)) == {host}


@pytest.mark.parametrize("name", ["cloverleaf_a100.sqlite", "h100_2gpu_1s.sqlite", "saxpy_mpi_old_schema.sqlite"])
def test_compute_only_exports_have_no_comm(name: str) -> None:
    table = classify(parse(real(name)))
    dev = device_rows(table)
    assert len(dev) > 0
    assert (dev["bucket"].astype(str) == "comm").sum() == 0
    assert (dev["collective"].astype(str) != "").sum() == 0


def test_old_schema_parses() -> None:
    path = real("saxpy_mpi_old_schema.sqlite")
    assert has_table(path, "EXPORT_META_DATA") and not has_table(path, "META_DATA_EXPORT")
    assert not has_table(path, "ENUM_CUDA_MEMCPY_OPER")  # the copy kinds come from the built-in enum
    table = classify(parse(path))
    dev = device_rows(table)
    assert set(dev["device"].astype(str)) == {"nid001608/GPU:0"}
    assert set(dev.loc[dev["activity"].astype(str) == "kernel", "name"].astype(str)) == {
        "saxpy(double *, double *, double *, double, int)"
    }
    assert dev["bucket"].astype(str).value_counts().to_dict() == {"memcpy": 15, "compute": 5}


SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"


@pytest.mark.slow
def test_torch_all_to_all_sendrecv_kernels() -> None:
    path = real("torch_a2a_2gpu.sqlite")
    table = classify(parse(path))
    dev = device_rows(table)
    sr = dev[dev["name"].astype(str) == SENDRECV]
    n_sql = sql(
        path,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
        "WHERE s.value = ?",
        SENDRECV,
    )[0][0]
    assert len(sr) == n_sql == 66
    assert set(sr["bucket"].astype(str)) == {"comm"}
    assert set(sr["kind"].astype(str)) == {"all-to-all"}
    # only these kernels are communication
    assert (dev["bucket"].astype(str) == "comm").sum() == 66

    # independent route: launches (same process) inside an NCCL-domain ncclGroupEnd that sits in nccl:all_to_all
    enclosed = sql(
        path,
        """
        SELECT k.start, k.deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds s ON s.id = k.demangledName AND s.value = ?
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)
        WHERE EXISTS (SELECT 1 FROM NVTX_EVENTS n JOIN StringIds t ON t.id = n.textId
                      WHERE n.globalTid = r.globalTid AND n.start <= r.start AND n."end" >= r."end"
                        AND t.value = 'ncclGroupEnd' AND n.domainId = 1)
          AND EXISTS (SELECT 1 FROM NVTX_EVENTS n
                      WHERE n.globalTid = r.globalTid AND n.start <= r.start AND n."end" >= r."end"
                        AND n.text LIKE 'nccl:all_to_all%')""",
        SENDRECV,
    )
    assert len(enclosed) == 64  # two launches fell before the capture window
    from_nvtx = sr[sr["start_ns"].isin([s for s, _ in enclosed])]
    assert len(from_nvtx) == 64
    assert set(from_nvtx["collective"].astype(str)) == {"all_to_all"}
    assert set(from_nvtx["annotation"].astype(str)) == {"nccl:all_to_all"}
    # the other two inherit what every enclosed launch of the same kernel/stream agrees on
    assert set(sr["collective"].astype(str)) == {"all_to_all"}

    # they run on each GPU's compute stream: the one with the most kernel time
    busiest = {
        d: s
        for d, s, _ in sql(
            path,
            """
        SELECT deviceId, streamId, MAX(t) FROM (SELECT deviceId, streamId, SUM("end" - start) t
        FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1, 2) GROUP BY deviceId""",
        )
    }
    for device, streams in sr.groupby(sr["device"].astype(str))["stream"]:
        gpu = int(device.rsplit(":", 1)[1])
        assert set(streams.astype(str)) == {f"stream {busiest[gpu]}"}
    assert set(sr["device"].astype(str)) == {"modal/GPU:0", "modal/GPU:1"}


def test_torch_nccl_runs_on_one_host_nvlink() -> None:
    from moeprof.core.topology import attribute_links

    table = attribute_links(classify(parse(real("torch_a2a_2gpu.sqlite")))).events
    comm = table[table["bucket"].astype(str) == "comm"]
    assert (comm["ib_fraction"] == 0).all()


def test_host_index_offsets_global_ids() -> None:
    table = parse(real("torch_a2a_2gpu.sqlite"), host_index=3)
    dev = device_rows(table)
    assert sorted(dev["global_id"].unique()) == [6, 7]
    assert set(dev["gpus_per_domain"]) == {2}


def test_read_only_nothing_written_beside(tmp_path: Path) -> None:
    src = real("cloverleaf_a100.sqlite")
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(src, copy)
    copy.chmod(0o444)
    before = sorted(p.name for p in tmp_path.iterdir())
    table = parse(copy)
    assert len(table.events) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert copy.read_bytes() == src.read_bytes()


def test_nsys_rep_without_nsys(monkeypatch: pytest.MonkeyPatch) -> None:
    path = real("alpa_rtx3090.nsys-rep")
    monkeypatch.setattr(nsys_export.shutil, "which", lambda name: None)
    with pytest.raises(InputError) as err:
        parse_file(path)
    message = str(err.value)
    assert "\n" not in message
    assert "nsys is not on PATH" in message
    assert f"nsys export --type sqlite --output alpa_rtx3090.sqlite {path}" in message


def test_nsys_rep_exported_in_a_private_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_export(tmp_path / "made.sqlite")
    reports = tmp_path / "reports"
    reports.mkdir()
    report = reports / "run1.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report 1.0 (fake)")
    bin_dir = fake_nsys(tmp_path / "bin", f'cp "{src}" "$out"')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    table = parse_file(report)
    assert len(device_rows(table)) == 8
    assert set(table.events["host"].astype(str)) == {"node7"}
    assert sorted(p.name for p in reports.iterdir()) == ["run1.nsys-rep"]  # nothing written beside it


def test_nsys_export_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = tmp_path / "broken.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report 1.0 (truncated)")
    bin_dir = fake_nsys(tmp_path / "bin", 'echo "first line" >&2; echo "Importer error: report is corrupt" >&2; exit 1')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    with pytest.raises(InputError, match="nsys export failed: Importer error: report is corrupt"):
        parse(report)


@pytest.mark.slow
def test_nsys_export_that_never_returns_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung export is killed after the timeout, with the process it started, and named in one line."""
    report = tmp_path / "hangs.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report 1.0 (hangs)")
    pid_file = tmp_path / "child.pid"
    # the export starts a child of its own (as nsys does) and both block
    bin_dir = fake_nsys(tmp_path / "bin", f'sleep 300 & echo $! > "{pid_file}"; sleep 300')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("MOEPROF_NSYS_EXPORT_TIMEOUT", "1.5")
    t0 = time.monotonic()
    with pytest.raises(InputError) as err:
        parse(report)
    assert time.monotonic() - t0 < 30
    message = str(err.value)
    assert "\n" not in message and "hangs.nsys-rep" in message
    assert "nsys export did not finish in 1.5 s" in message and "MOEPROF_NSYS_EXPORT_TIMEOUT" in message
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while not process_gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(child), "the export's own child outlived the timeout"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "child.pid", "hangs.nsys-rep"]


@pytest.mark.slow
def test_ctrl_c_during_nsys_export_says_interrupted(tmp_path: Path) -> None:
    """Ctrl-C while the export runs: "interrupted during nsys export of <report>", exit 130, the export stopped.

    Not "did not finish in N s": the wait ended because of the user, not the clock. A subprocess, so
    that a real SIGINT reaches a real moeprof process.
    """
    report = tmp_path / "long.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report 1.0 (long)")
    pid_file = tmp_path / "child.pid"
    bin_dir = fake_nsys(tmp_path / "bin", f'sleep 300 & echo $! > "{pid_file}"; sleep 300')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(Path(__file__).parents[1])}
    env.pop("MOEPROF_DEBUG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "moeprof", "analyze", str(report)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:  # the export has started
        time.sleep(0.05)
    assert pid_file.exists(), "the stand-in export never started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and out == ""
    assert err.strip().splitlines() == [f"moeprof: interrupted during nsys export of {report}; the export was stopped"]
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while not process_gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(child), "the export's own child outlived the interrupt"


@pytest.mark.slow
def test_nsys_export_stopped_by_a_signal_says_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An export that a signal stops (its own Ctrl-C, a kill) was interrupted: not "failed: exit code -2"."""
    report = tmp_path / "cut.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report 1.0 (cut)")
    bin_dir = fake_nsys(tmp_path / "bin", "kill -INT $$; sleep 5")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    with pytest.raises(InputError) as err:
        parse(report)
    message = str(err.value)
    assert "nsys export was interrupted (SIGINT) before it finished" in message and "cut.nsys-rep" in message


@pytest.mark.parametrize(
    ("code", "name"), [(-2, "SIGINT"), (-9, "SIGKILL"), (130, "SIGINT"), (143, "SIGTERM"), (1, None), (0, None)]
)
def test_signal_of_exit_codes(code: int, name: str | None) -> None:
    assert nsys.signal_of(code) == name
    assert nsys.signal_of(137) is None  # a shell's 128+9 may be the program's own exit code: only stop signals


def test_nsys_export_timeout_follows_the_report_size(tmp_path: Path) -> None:
    report = tmp_path / "big.nsys-rep"
    with report.open("wb") as f:
        f.truncate(512 * 2**20)  # sparse: 512 MiB without writing them
    assert nsys.export_timeout(report, {}) == 300 + 512
    assert nsys.export_timeout(tmp_path / "missing.nsys-rep", {}) == 300
    assert nsys.export_timeout(report, {"MOEPROF_NSYS_EXPORT_TIMEOUT": "42"}) == 42
    for bad in ("soon", "0", "-5", "inf", "nan"):
        with pytest.raises(InputError, match="MOEPROF_NSYS_EXPORT_TIMEOUT must be a positive number"):
            nsys.export_timeout(report, {"MOEPROF_NSYS_EXPORT_TIMEOUT": bad})


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "ro"
    folder.mkdir()
    yield folder
    folder.chmod(0o755)  # let pytest clean up


def seal(folder: Path) -> None:
    """Make ``folder`` and its files read-only (root still may write: the snapshot is what tells)."""
    for p in folder.iterdir():
        p.chmod(0o444)
    folder.chmod(0o555)


def test_wal_mode_export_is_read_without_writing_beside_it(tmp_path: Path, read_only_folder: Path) -> None:
    """mode=ro alone leaves -shm and -wal files beside a WAL-mode database; nothing may appear."""
    plain = make_export(tmp_path / "export.sqlite")
    wal = read_only_folder / "export.sqlite"
    shutil.copyfile(plain, wal)
    with sqlite3.connect(wal) as conn:
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    assert sorted(p.name for p in read_only_folder.iterdir()) == ["export.sqlite"]  # a clean close checkpoints
    seal(read_only_folder)
    before = snapshot(read_only_folder)
    expected, got = parse(plain), parse(wal)
    assert snapshot(read_only_folder) == before
    pd.testing.assert_frame_equal(got.events, expected.events)
    pd.testing.assert_frame_equal(got.markers, expected.markers)
    assert len(device_rows(got)) == 8


def test_wal_with_pending_transactions_is_read_whole(tmp_path: Path, read_only_folder: Path) -> None:
    """A -wal file whose transactions are not yet in the database: immutable=1 alone would miss them."""
    db = make_export(tmp_path / "live.sqlite")
    writer = sqlite3.connect(db)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")  # keep what follows in the -wal file
        writer.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (12000, 12500, 1, 1, 14, 99, ?, 6, 6, NULL)", (P1,)
        )
        writer.commit()
        assert (tmp_path / "live.sqlite-wal").stat().st_size > 0
        for name in ("live.sqlite", "live.sqlite-wal"):  # as a crashed or still-running writer leaves them
            shutil.copyfile(tmp_path / name, read_only_folder / name)
    finally:
        writer.close()
    seal(read_only_folder)
    before = snapshot(read_only_folder)
    got = parse(read_only_folder / "live.sqlite")
    assert snapshot(read_only_folder) == before
    rows = device_rows(got)
    assert len(rows) == 9  # make_export's 8 and the kernel only the -wal holds
    assert ((rows["start_ns"] == 12000) & (rows["end_ns"] == 12500)).sum() == 1


def test_empty_activity_tables(tmp_path: Path) -> None:
    db = tmp_path / "idle.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute(
            'CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, "end" INT, deviceId INT, streamId INT, '
            "correlationId INT, globalPid INT, shortName INT)"
        )
        conn.execute('CREATE TABLE NVTX_EVENTS (start INT, "end" INT, eventType INT, text TEXT, globalTid INT)')
        conn.execute("INSERT INTO NVTX_EVENTS VALUES (0, 100, 59, 'ProfilerStep#3', 1)")
    conn.close()
    table = parse(db)
    assert len(device_rows(table)) == 0
    assert table.markers[["kind", "number", "host"]].astype(str).values.tolist() == [["step", "3", "idle"]]


def test_kernels_without_string_table(tmp_path: Path) -> None:
    # the least an export can hold: kernels with no names, no launches, no NVTX
    db = tmp_path / "bare.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, "end" INT, deviceId INT)')
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?)", [(10, 20, 3), (5, 8, 1)])
    conn.close()
    table = classify(parse(db, host_index=2)).events
    assert table[["device", "start_ns", "end_ns", "global_id", "stream", "bucket"]].astype(str).values.tolist() == [
        ["bare/GPU:1", "5", "8", "4", "", "compute"],
        ["bare/GPU:3", "10", "20", "5", "", "compute"],
    ]


def test_dispatch_through_parse_file() -> None:
    path = real("saxpy_mpi_old_schema.sqlite")
    assert len(device_rows(parse_file(path))) == 20


# ---- parquet folders ---------------------------------------------------------------------------


def same_events(ta: Trace, tb: Trace) -> None:
    a, b = ta.events, tb.events
    cols = ["device", "stream", "start_ns", "end_ns", "name", "activity"]
    a = a.astype({c: str for c in cols if a[c].dtype != np.int64}).sort_values(cols, ignore_index=True)
    b = b.astype({c: str for c in cols if b[c].dtype != np.int64}).sort_values(cols, ignore_index=True)
    for col in a.columns:
        left, right = a[col], b[col]
        if left.dtype.kind in "if" or right.dtype.kind in "if":
            assert np.array_equal(left.to_numpy(dtype=float), right.to_numpy(dtype=float), equal_nan=True), col
        else:
            assert left.astype(str).tolist() == right.astype(str).tolist(), col


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torch_a2a_2gpu.sqlite", "saxpy_mpi_old_schema.sqlite"])
def test_parquet_dir_reads_like_sqlite(name: str, tmp_path: Path) -> None:
    path = real(name)
    folder = to_parquetdir(path, tmp_path / path.stem)
    same_events(parse_parquet_dir(folder), parse(path))
    assert len(device_rows(parse(folder))) == len(device_rows(parse(path)))


def test_parquet_dir_without_activity(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    pd.DataFrame({"id": [1], "value": ["x"]}).to_parquet(folder / "StringIds.parquet")
    with pytest.raises(InputError, match="no CUPTI activity tables"):
        parse_parquet_dir(folder)


# ---- bad input ------------------------------------------------------------------------------------


def test_sqlite_that_is_not_nsys(tmp_path: Path) -> None:
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    conn.close()
    with pytest.raises(InputError, match="no CUPTI activity tables"):
        parse(db)


def test_truncated_sqlite(tmp_path: Path) -> None:
    src = real("cloverleaf_a100.sqlite")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(src.read_bytes()[:4096])
    with pytest.raises(InputError) as err:
        parse(bad)
    assert "\n" not in str(err.value)


def test_empty_and_unknown_files(tmp_path: Path) -> None:
    empty = tmp_path / "e.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        parse(empty)
    junk = tmp_path / "j.sqlite"
    junk.write_bytes(b"hello world, not a database")
    with pytest.raises(InputError, match="not an Nsight Systems"):
        parse(junk)


def by_start(trace: Trace, device: str) -> pd.DataFrame:
    dev = device_rows(trace)
    return dev[dev["device"].astype(str) == device].set_index("start_ns")


@pytest.mark.parametrize("payload", ["blob", "json"])
def test_synthetic_export(tmp_path: Path, payload: str) -> None:
    table = classify(parse(make_export(tmp_path / "synthetic.sqlite", payload)))
    assert set(table.events["host"].astype(str)) == {"node7"}
    g0 = by_start(table, "node7/GPU:0")
    g1 = by_start(table, "node7/GPU:1")
    assert len(g0) == 7 and len(g1) == 1

    ar = g0.loc[5000]
    assert (ar["end_ns"], ar["stream"], ar["name"]) == (6000, "stream 20", STRINGS[1])
    assert (ar["collective"], ar["annotation"], ar["kind"], ar["bytes"]) == (
        "allreduce",
        "nccl:all_reduce",
        "all-reduce",
        4096,
    )
    assert ar["group"] == "0,1"

    a2a = g0.loc[6000]
    assert (a2a["end_ns"], a2a["stream"], a2a["collective"], a2a["kind"]) == (
        7000,
        "stream 7",
        "all_to_all",
        "all-to-all",
    )
    assert a2a["bytes"] == 300  # what this rank sends: 100 to rank 0, 200 to rank 1
    assert a2a["group"] == "0,1"

    lone = g0.loc[9000]
    assert (lone["end_ns"], lone["collective"], lone["kind"], lone["bytes"], lone["group"]) == (
        9100,
        "send",
        "send-recv",
        64,
        "0,1",
    )

    fusion = g0.loc[7000]
    assert (fusion["end_ns"], fusion["name"], fusion["bucket"]) == (7500, "loop_add_fusion", "compute")
    assert (fusion["hlo_op"], fusion["hlo_module"], fusion["program_id"]) == ("fusion.12", "jit_step", 3)

    copies = {
        s: (r["end_ns"], r["activity"], r["copy_kind"], r["name"], r["bucket"], r["kind"], r["bytes"])
        for s, r in g0.iterrows()
        if r["activity"] == "memcpy"
    }
    assert copies == {
        8000: (8100, "memcpy", "PtoP", "Memcpy PtoP", "comm", "send-recv", 1 << 20),
        8100: (8200, "memcpy", "PtoP", "Memcpy PtoP", "comm", "send-recv", 2048),
        8200: (8300, "memcpy", "HtoD", "Memcpy HtoD", "memcpy", "", 4096),
    }
    assert g0.loc[8000, "hlo_module"] == "jit_step"  # launched inside the XLA module range

    # GPU 1's GEMM shares correlation id 1 with GPU 0's all-reduce launch, in another process
    gemm = g1.loc[5000]
    assert (gemm["end_ns"], gemm["name"], gemm["bucket"], gemm["collective"], gemm["annotation"]) == (
        5500,
        "gemm_kernel",
        "compute",
        "",
        "",
    )
    assert (gemm["global_id"], g0["global_id"].unique().tolist()) == (1, [0])
    assert set(device_rows(table)["gpus_per_domain"]) == {2}

    steps = table.markers[table.markers["kind"].astype(str) == "step"].sort_values("start_ns")
    assert steps[["name", "start_ns", "end_ns", "number"]].values.tolist() == [
        ["train_step", 0, 5000, 0],
        ["ProfilerStep#7", 100, 10000, 7],
        ["train_step", 5000, 9000, 1],
    ]
    assert set(steps["device"].astype(str)) == {""}


def test_synthetic_export_without_payloads(tmp_path: Path) -> None:
    table = classify(parse(make_export(tmp_path / "plain.sqlite", payload="none")))
    g0 = by_start(table, "node7/GPU:0")
    # two sends and two receives in one group: all-to-all by pattern; no sizes, no group
    assert (g0.loc[6000, "collective"], g0.loc[6000, "kind"], g0.loc[6000, "group"]) == ("all_to_all", "all-to-all", "")
    assert np.isnan(g0.loc[6000, "bytes"]) and np.isnan(g0.loc[5000, "bytes"])
    assert (g0.loc[9000, "collective"], g0.loc[9000, "kind"]) == ("send", "send-recv")


def test_synthetic_parquet_dir(tmp_path: Path) -> None:
    db = make_export(tmp_path / "synthetic.sqlite")
    folder = to_parquetdir(db, tmp_path / "synthetic")
    same_events(parse_parquet_dir(folder), parse(db))


def test_p2p_annotation_overrides_the_all_to_all_guess(tmp_path: Path) -> None:
    db = make_export(tmp_path / "pp.sqlite", payload="none")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE NVTX_EVENTS SET text = 'nccl:batch_isend_irecv' WHERE text = 'nccl:all_to_all'")
    conn.close()
    g0 = by_start(classify(parse(db)), "node7/GPU:0")
    assert (g0.loc[6000, "collective"], g0.loc[6000, "kind"]) == ("send_recv", "send-recv")


# ---- pieces ----------------------------------------------------------------------------------------


def test_innermost_matches_brute_force() -> None:
    rng = np.random.default_rng(7)
    n, m = 400, 3000
    tid = rng.integers(0, 4, n)
    start = rng.integers(0, 10_000, n)
    end = start + rng.integers(0, 3_000, n)
    q_tid = rng.integers(0, 5, m)
    q_t = rng.integers(0, 13_000, m)
    got = nvtx.innermost(tid, start, end, q_tid, q_t)
    for i in range(m):
        inside = np.flatnonzero((tid == q_tid[i]) & (start <= q_t[i]) & (end > q_t[i]))
        if not len(inside):
            assert got[i] == -1
        else:
            # the latest start wins; among equal starts, the shortest range (the inner one)
            best = inside[np.lexsort((end[inside], start[inside]))]
            latest = best[start[best] == start[best].max()]
            assert got[i] in latest and end[got[i]] == end[latest].min()


@pytest.mark.parametrize(
    ("text", "is_step"),
    [
        ("ProfilerStep#12", True),
        ("step 3", True),
        ("step_3", True),
        ("Step3", True),
        ("train_step", True),
        ("TrainStep 4", True),
        ("train step", True),
        ("stepper", False),
        ("seq = 4", False),
        ("my_step_fn", False),
    ],
)
def test_step_pattern(text: str, is_step: bool) -> None:
    assert bool(STEP_RANGE.match(text)) is is_step


FAMILY_TEXTS = [
    "ncclAllReduce",
    "ncclGroupEnd",
    "nccl:all_to_all",
    "gloo:broadcast",
    "c10d::alltoall_base_",
    "_c10d_functional::all_gather_into_tensor",
    "symm_mem::one_shot_all_reduce",
    "all_2_all",
    "AllToAll4D",
    "reduce_scatter_tensor",
    "isend",
    "dispatch(F)",
    "ep_combine",
    "Thunk:#hlo_op=fusion.1#",
    "TSL:Thunk:#hlo_op=all-to-all.3,hlo_module=jit_f#",
    "XlaModule:#hlo_module=jit_f,program_id=2#",
    "ProfilerStep#3",
    "Step 5",
    "train_step",
]


@pytest.mark.parametrize("text", FAMILY_TEXTS)
def test_prefilters_keep_every_family(text: str) -> None:
    """The SQL LIKE pre-filter and its regex twin are supersets of the exact family patterns."""
    clean = nvtx.TORCH_SUFFIX.sub("", text)
    assert (
        nvtx.NCCL_CALL.match(clean)
        or vocabulary().comm_range.search(clean)
        or nvtx.THUNK.search(clean)
        or nvtx.XLA_MODULE.search(clean)
        or STEP_RANGE.match(clean)
    )
    conn = sqlite3.connect(":memory:")
    like = " OR ".join("? LIKE ?" for _ in nvtx.NVTX_LIKE)
    args = [v for p in nvtx.NVTX_LIKE for v in (text, p)]
    assert conn.execute(f"SELECT {like}", args).fetchone()[0] == 1
    conn.close()
    import pyarrow.compute as pc

    assert pc.match_substring_regex(pa.array([text]), nvtx.LIKE_REGEX, ignore_case=True).to_pylist() == [True]


def test_parquet_dir_through_the_pipeline(tmp_path: Path) -> None:
    """``moeprof analyze FOLDER`` recognizes an ``nsys export --type parquetdir`` folder."""
    import moeprof

    path = real("torch_a2a_2gpu.sqlite")
    folder = to_parquetdir(path, tmp_path / path.stem)
    from_parquet = moeprof.analyze_paths([folder]).to_json()["total"]
    from_sqlite = moeprof.analyze_paths([path]).to_json()["total"]
    assert from_parquet == from_sqlite
