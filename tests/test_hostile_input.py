"""Hostile and broken input (issue 10): every reader keeps the bad-input contract.

Bad input: exit 2 and one line ``moeprof: <file>: <problem>``. Times that no int64 nanosecond can
place are dropped, with one warning, by the check every reader's table passes through
(``readers.screen_times``); the figures are those of the trace without them, computed here by hand.
Each test reproduces one class of the fuzz campaign's catalog (tests/fuzz/KNOWN_FAILURES.md), which
failed before the fix.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli import app
from moeprof.core import events
from moeprof.errors import UNFORESEEN, InputError, unforeseen
from moeprof.readers import ReadContext, read_file
from tests.fuzz import protowire as pw

from .helpers import SAMPLES, damaged_sqlite, tiny_xplane, to_parquetdir

SQLITE = SAMPLES / "synthetic_1host_8gpu.nsys.sqlite"
XPLANE = SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb"
XPROF_JSON = SAMPLES / "synthetic_1host_8gpu.trace.json.gz"
ROCPD = SAMPLES / "synthetic_rocpd_mi300x" / "mi300x-node0" / "41200_results.db"
INT64_MAX = 2**63 - 1


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def refused(path: Path, *more: str) -> str:
    """The one error line of ``moeprof analyze PATH``; it names the file."""
    rc, _, err = run("analyze", path, "--json", *more)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("moeprof: "), (rc, err)
    assert path.name in lines[0] and UNFORESEEN not in lines[0], lines[0]
    return lines[0]


def accepted(path: Path) -> dict:
    rc, out, err = run("analyze", path, "--json")
    assert rc == 0 and err == "", (rc, err)
    return json.loads(out)


def kernel(ts: object, dur: object, corr: int, name: str = "sm90_xmma_gemm", **args: object) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr, **args}}  # fmt: skip


def kineto(path: Path, events: list, **top: object) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, **top, "traceEvents": events}))
    return path


def xprof(path: Path, events: list) -> Path:
    meta = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "Stream #1"}},
    ]
    path.write_text(json.dumps({"traceEvents": meta + events}))
    return path


def gpu_event(ts: object, dur: object, **more: object) -> dict:
    return {"ph": "X", "pid": 1, "tid": 1, "name": "fusion", "ts": ts, "dur": dur, **more}


def sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(query).fetchall()


def edited_sqlite(tmp_path: Path, *statements: str, name: str = "x.sqlite") -> Path:
    db = tmp_path / name
    shutil.copyfile(SQLITE, db)
    with sqlite3.connect(db) as conn:
        for statement in statements:
            conn.execute(statement)
    return db


# ---- times no int64 nanosecond can place: dropped with one warning (the shared window) --------------------------


def test_conversions_put_unplaceable_times_outside_the_window_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts, dur = np.array([1.5, 1e300, np.nan, 1.7e15, -1e300]), np.array([2.0, 1.0, 1.0, 1.0, 0])
        start, end = events.us_interval_to_ns(ts, dur)
        ns = events.floats_to_ns(np.array([np.inf, 2.6, -(2.0**62), 1e19]))
    UNPLACEABLE_NS = events.UNPLACEABLE_NS
    assert start.tolist() == [1500, UNPLACEABLE_NS, UNPLACEABLE_NS, 1_700_000_000_000_000_000, UNPLACEABLE_NS]
    assert end.tolist() == [3500, UNPLACEABLE_NS, UNPLACEABLE_NS, 1_700_000_000_000_001_000, UNPLACEABLE_NS]
    assert ns.tolist() == [UNPLACEABLE_NS, 3, UNPLACEABLE_NS, UNPLACEABLE_NS]


def test_kineto_time_beyond_int64_is_dropped_with_a_warning(tmp_path: Path) -> None:
    """time-beyond-int64-accepted: ts 1e300 µs was cast to a garbage start (and a RuntimeWarning)."""
    doc = accepted(kineto(tmp_path / "t.pt.trace.json", [kernel(100.0, 10.0, 1), kernel(1e300, 1.0, 2)]))
    (dev,) = doc["devices"]
    assert (dev["accumulated_ns"], dev["span_ns"], dev["busy_ns"]) == (10_000, 10_000, 10_000)
    (warning,) = [w for w in doc["warnings"] if "cannot be placed" in w]
    assert "t.pt.trace.json: dropped 1 device activity" in warning and "1 with a time past" in warning


def test_kineto_durations_past_a_day_are_dropped(tmp_path: Path) -> None:
    """kineto-extreme-times-overflow: six kernels of 1.7e15 µs each fit int64 ns, their sum did not
    (accumulated_ns -8,246,744,073,709,541,616)."""
    evs = [kernel(100.0 + i, 1.7e15, i) for i in range(6)]
    evs += [kernel(50.0, 10.0, 99, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"), kernel(10.0, 2.5, 100)]
    doc = accepted(kineto(tmp_path / "t.pt.trace.json", evs))
    total = doc["total"]
    assert (total["accumulated_ns"], total["comm_ns"], total["compute_ns"]) == (12_500, 10_000, 2_500)
    assert total["span_ns"] == 50_000  # from ts 10 µs to 60 µs
    assert any("dropped 6 device activities" in w and "6 lasting more than a day" in w for w in doc["warnings"])


def test_a_file_whose_every_activity_is_unplaceable_is_refused(tmp_path: Path) -> None:
    line = refused(kineto(tmp_path / "t.pt.trace.json", [kernel(1e300, 1.0, 1), kernel(5.0, 1e11, 2)]))
    assert "no device activity with placeable times: 1 with a time past +-2^62 ns" in line
    assert "; 1 lasting more than a day" in line


def test_xprof_json_time_beyond_int64_is_dropped(tmp_path: Path) -> None:
    doc = accepted(xprof(tmp_path / "t.trace.json", [gpu_event(1.0, 2.0), gpu_event(-1e300, 1.0)]))
    assert doc["total"]["accumulated_ns"] == 2_000
    assert any("dropped 1 device activity" in w for w in doc["warnings"])


def test_nsys_end_at_int64_max_is_dropped(tmp_path: Path) -> None:
    """nsys-extreme-times-overflow: end = INT64_MAX gave accumulated_ns -9223372036854087518."""
    db = edited_sqlite(tmp_path, f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = {INT64_MAX} WHERE rowid = 1')
    ((device,),) = sql(db, "SELECT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 1")
    want = sum(
        e - s
        for table in ("KERNEL", "MEMCPY", "MEMSET")
        for s, e in sql(db, f'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_{table} WHERE deviceId = {device}')
        if e != INT64_MAX
    )
    doc = accepted(db)
    dev = next(d for d in doc["devices"] if d["device"].endswith(f"GPU:{device}"))
    assert dev["accumulated_ns"] == want and dev["busy_ns"] <= dev["accumulated_ns"]
    assert any("x.sqlite: dropped 1 device activity" in w for w in doc["warnings"])


def test_nsys_real_1e300_start_is_dropped_not_cast(tmp_path: Path) -> None:
    db = edited_sqlite(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 1e300 WHERE rowid = 1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = read_file(db)
    assert (
        len(trace.events)
        == sum(sql(db, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_{t}")[0][0] for t in ("KERNEL", "MEMCPY", "MEMSET"))
        - 1
    )
    assert trace.events["start_ns"].min() >= 0


def xplane_with_line_time(tmp_path: Path, timestamp_ns: int) -> Path:
    space = pw.decode(XPLANE.read_bytes())
    gpu = next(p for p in pw.get(space, "planes") if pw.text(pw.get(p.value, "name")[0]) == "/device:GPU:0")
    line = pw.get(gpu.value, "lines")[0]
    line.value[:] = [f for f in line.value if f.number != 3]
    line.value.append(pw.Field(3, pw.VARINT, timestamp_ns % 2**64, "int64", "timestamp_ns"))
    out = tmp_path / "x.xplane.pb"
    out.write_bytes(pw.encode(space))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("timestamp_ns", [INT64_MAX, -(2**63)])
def test_xplane_line_time_near_int64_limits(tmp_path: Path, timestamp_ns: int) -> None:
    """xplane-extreme-times-overflow and value-past-int64-at-output: the line's events wrapped around int64
    (negative span, busy > span) or gave a figure past 64 bits that orjson refused (the catch-all)."""
    base = read_file(XPLANE)
    first = base.events["stream"].astype(str) == str(base.events["stream"].iloc[0])
    path = xplane_with_line_time(tmp_path, timestamp_ns)
    trace = read_file(path)
    line_events = int(((base.events["device"].astype(str) == "node0/GPU:0") & first).sum())
    assert len(trace.events) == len(base.events) - line_events > 0
    assert any(f"dropped {line_events:,} device activities" in w for w in trace.warnings)
    doc = accepted(path)
    for dev in doc["devices"]:
        assert 0 <= dev["busy_ns"] <= min(dev["span_ns"], dev["accumulated_ns"])


@pytest.mark.slow
def test_times_before_the_clock_zero_are_dropped(tmp_path: Path) -> None:
    """Fuzz case 7:685: an XEvent.offset_ps of -2^63 put a step at -9.2e15 ns, and negative step start_ns/end_ns
    reached the output. The window starts at the clock's zero: an activity or marker before it is dropped."""
    space = pw.decode(XPLANE.read_bytes())
    gpu = next(p for p in pw.get(space, "planes") if pw.text(pw.get(p.value, "name")[0]) == "/device:GPU:0")
    lines = {pw.text(pw.get(ln.value, "name")[0]): ln for ln in pw.get(gpu.value, "lines")}
    for name in ("Steps", next(n for n in lines if n.startswith("Stream #"))):
        event = pw.get(lines[name].value, "events")[0]
        event.value[:] = [f for f in event.value if f.name != "offset_ps"]
        event.value.append(pw.Field(2, pw.VARINT, 2**64 - 2**63, "int64", "offset_ps"))
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(pw.encode(space))
    base, trace = read_file(XPLANE), read_file(path)
    assert len(trace.events) == len(base.events) - 1 and len(trace.markers) == len(base.markers) - 1
    assert trace.events["start_ns"].min() >= 0 and trace.markers["start_ns"].min() >= 0
    assert any("1 before the clock's zero" in w for w in trace.warnings)
    doc = accepted(path)
    assert all(s["start_ns"] >= 0 for s in doc["steps"])


# ---- outliers: activities more than a day from the rest of their device's activity ----------------------------

DAY_NS = 86_400 * 10**9


def _isolated_brute(devices: list[str], starts: list[int], ends: list[int]) -> list[bool]:
    """The rule of docs/metrics.md, one device at a time with Python lists: walk the device's activities in
    start order, open a new part where the next start is more than a day after every end so far; keep the
    part with the most activities (ties: the earliest)."""
    out = [False] * len(devices)
    for device in set(devices):
        rows = sorted((starts[i], i) for i in range(len(devices)) if devices[i] == device)
        parts: list[list[int]] = []
        latest = None
        for s, i in rows:
            if latest is None or s - latest > DAY_NS:
                parts.append([])
            parts[-1].append(i)
            latest = ends[i] if latest is None else max(latest, ends[i])
        keep = max(parts, key=len)  # max keeps the first of equal lengths: the earliest part
        for part in parts:
            for i in part:
                out[i] = part is not keep
    return out


@pytest.mark.parametrize("seed", range(40))
def test_isolated_activity_matches_the_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    devices = [f"h/GPU:{d}" for d in rng.integers(0, 3, n)]
    # clusters days apart, activities inside them seconds to a day long, some gaps exactly one day
    base = rng.choice([0, DAY_NS, 2 * DAY_NS + 1, 40 * DAY_NS], n)
    starts = (base + rng.integers(0, 10**9, n)).astype(np.int64)
    lengths = rng.choice([0, 10**6, DAY_NS - 5 * 10**8, DAY_NS], n)
    ends = starts + lengths
    got = events.isolated_activity(pd.Series(devices, dtype="category"), starts, ends)
    assert got.tolist() == _isolated_brute(devices, starts.tolist(), ends.tolist())


def test_isolated_activity_by_hand() -> None:
    d = DAY_NS
    devices = ["a", "a", "a", "a", "b", "b", "c", "c"]
    starts = np.array([0, 10, 3 * d, 3 * d + 5, 0, d + 20, 0, 2 * d])
    ends = np.array([d, 20, 3 * d + 1, 3 * d + 9, 10, d + 30, d, 2 * d])
    # a: [0, d] covers [10, 20]; 3d comes 2d later: two parts of 2, the earliest kept.
    # b: d + 20 is d + 10 after the end at 10: two parts of 1, the earliest kept.
    # c: [0, d] then 2d, a gap of exactly one day: one part
    want = [False, False, True, True, False, True, False, False]
    assert events.isolated_activity(np.array(devices, dtype=object), starts, ends).tolist() == want


def xplane_with_event_offsets(tmp_path: Path, count: int, offset_ps: int) -> tuple[Path, str]:
    """The sample's GPU:0 with the first ``count`` events of its first stream line moved to ``offset_ps``."""
    space = pw.decode(XPLANE.read_bytes())
    gpu = next(p for p in pw.get(space, "planes") if pw.text(pw.get(p.value, "name")[0]) == "/device:GPU:0")
    line = next(ln for ln in pw.get(gpu.value, "lines") if pw.text(pw.get(ln.value, "name")[0]).startswith("Stream #"))
    for event in pw.get(line.value, "events")[:count]:
        event.value[:] = [f for f in event.value if f.name != "offset_ps"]
        event.value.append(pw.Field(2, pw.VARINT, offset_ps % 2**64, "int64", "offset_ps"))
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(pw.encode(space))
    return path, "node0/GPU:0"


def _device_row(doc: dict, device: str) -> dict:
    return next(d for d in doc["devices"] if d["device"] == device)


@pytest.mark.slow
def test_xplane_event_106_days_away_is_an_outlier(tmp_path: Path) -> None:
    """Fuzz: offset_ps = 2^63 - 1 (106 days, under 2^62 ns) on 2 events stretched GPU:0's span and idle time to
    106 days with exit 0. They are dropped with a warning; the device's figures are those of the sample
    without those two events."""
    path, device = xplane_with_event_offsets(tmp_path, 2, INT64_MAX)
    trace = read_file(path)
    base = read_file(XPLANE)
    assert len(trace.events) == len(base.events) - 2
    (warning,) = [w for w in trace.warnings if "outliers" in w]
    assert "x.xplane.pb: dropped 2 device activities as outliers: more than 24 h after or before" in warning
    moved = trace.events["device"].astype(str) == device
    want_span = int(trace.events.loc[moved, "end_ns"].max() - trace.events.loc[moved, "start_ns"].min())
    doc = accepted(path)
    dev = _device_row(doc, device)
    assert dev["span_ns"] == want_span < DAY_NS
    assert dev["idle_ns"] == dev["span_ns"] - dev["busy_ns"]
    assert any("outliers" in w for w in doc["warnings"])


def test_kineto_kernel_two_days_away_is_an_outlier(tmp_path: Path) -> None:
    two_days_us = 2 * 86_400 * 10**6
    evs = [kernel(100.0, 10.0, 1), kernel(120.0, 5.0, 2), kernel(100.0 + two_days_us, 1.0, 3)]
    doc = accepted(kineto(tmp_path / "t.pt.trace.json", evs))
    (dev,) = doc["devices"]
    assert (dev["accumulated_ns"], dev["span_ns"], dev["busy_ns"]) == (15_000, 25_000, 15_000)
    assert any("t.pt.trace.json: dropped 1 device activity as outliers" in w for w in doc["warnings"])


def test_xprof_json_event_two_days_away_is_an_outlier(tmp_path: Path) -> None:
    two_days_us = 2 * 86_400 * 10**6
    doc = accepted(
        xprof(tmp_path / "t.trace.json", [gpu_event(1.0, 2.0), gpu_event(5.0, 1.0), gpu_event(two_days_us, 1.0)])
    )
    assert (doc["total"]["accumulated_ns"], doc["total"]["span_ns"]) == (3_000, 5_000)
    assert any("dropped 1 device activity as outliers" in w for w in doc["warnings"])


def _nsys_moved(tmp_path: Path, name: str = "x.sqlite") -> tuple[Path, int, int]:
    """The sample's Nsight export with kernel rowid 1 moved two days later; its device and that device's span
    without it (from SQL)."""
    db = edited_sqlite(
        tmp_path,
        f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + {2 * DAY_NS}, "end" = "end" + {2 * DAY_NS} '
        "WHERE rowid = 1",
        name=name,
    )
    ((device,),) = sql(db, "SELECT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 1")
    rows = [
        (s, e)
        for table in ("KERNEL", "MEMCPY", "MEMSET")
        for s, e in sql(
            db,
            f'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_{table} WHERE deviceId = {device}'
            + (" AND rowid != 1" if table == "KERNEL" else ""),
        )
    ]
    return db, device, max(e for _, e in rows) - min(s for s, _ in rows)


@pytest.mark.slow
def test_nsys_kernel_two_days_away_is_an_outlier(tmp_path: Path) -> None:
    db, device, span = _nsys_moved(tmp_path)
    doc = accepted(db)
    dev = next(d for d in doc["devices"] if d["device"].endswith(f"GPU:{device}"))
    assert dev["span_ns"] == span
    assert any("x.sqlite: dropped 1 device activity as outliers" in w for w in doc["warnings"])


@pytest.mark.slow
def test_nsys_parquet_kernel_two_days_away_is_an_outlier(tmp_path: Path) -> None:
    db, device, span = _nsys_moved(tmp_path)
    folder = to_parquetdir(db, tmp_path / "x_parquet")
    doc = accepted(folder)
    dev = next(d for d in doc["devices"] if d["device"].endswith(f"GPU:{device}"))
    assert dev["span_ns"] == span
    assert any("dropped 1 device activity as outliers" in w for w in doc["warnings"])


# ---- times that are no number: refused, naming the field -----------------------------------------------------------


def test_kineto_timestamp_true_is_refused(tmp_path: Path) -> None:
    """device-time-not-a-number-accepted: float(True) placed the kernel at 1 µs."""
    line = refused(kineto(tmp_path / "t.pt.trace.json", [kernel(100.0, 1.0, 1), kernel(True, 1.0, 2)]))
    assert "not a number" in line


@pytest.mark.parametrize(
    ("event", "said"),
    [
        (gpu_event("abc", 1.0), "whose ts is a string, not a number"),
        (gpu_event(1.0, "a\nb"), "whose dur is a string, not a number"),
        (gpu_event(1.0, [1]), "whose dur is an array, not a number"),
        ({"ph": "X", "pid": 1, "tid": 1, "name": "k", "dur": 1.0}, "without a timestamp (ts)"),
    ],
)
def test_xprof_json_time_that_is_no_number_is_refused(tmp_path: Path, event: dict, said: str) -> None:
    """xprof-json-time-not-a-number (float() escaped) and device-time-not-a-number-accepted (missing ts was 0)."""
    assert said in refused(xprof(tmp_path / "t.trace.json", [gpu_event(1.0, 2.0), event]))


def test_xprof_json_numeric_string_times_read_as_numbers(tmp_path: Path) -> None:
    doc = accepted(xprof(tmp_path / "t.trace.json", [gpu_event("1.5", "2"), gpu_event(10, 1)]))
    assert doc["total"]["accumulated_ns"] == 3_000 and doc["total"]["span_ns"] == 9_500


def parquet_with_start(tmp_path: Path, values: list) -> Path:
    folder = to_parquetdir(SQLITE, tmp_path / "pq")
    path = folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    table = pq.read_table(path)
    at = table.schema.get_field_index("start")
    pq.write_table(table.set_column(at, "start", pa.array(values)), path)
    return folder


def test_nsys_parquet_start_strings_are_refused_not_coerced(tmp_path: Path) -> None:
    """device-time-not-a-number-accepted: "abc" was coerced to -1 (accumulated 14,746,093 ns, not 13,744,146)."""
    n = sql(SQLITE, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    starts = [str(s) for (s,) in sql(SQLITE, "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    folder = parquet_with_start(tmp_path, ["abc", *starts[1:]])
    assert len(starts) == n
    line = refused(folder)
    assert "CUPTI_ACTIVITY_KIND_KERNEL.start holds text 'abc', not a time in ns (1 row like it)" in line


@pytest.mark.parametrize(("value", "said"), [([7], "a list"), (b"\xff", "bytes b'\\xff'")])
def test_nsys_parquet_start_of_another_type_is_refused(tmp_path: Path, value: object, said: str) -> None:
    """nsys-parquet-list-column and nsys-mixed-type-column: unhashable / unorderable columns escaped."""
    n = sql(SQLITE, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert f"start holds {said}" in refused(parquet_with_start(tmp_path, [value] * n))


# ---- no Python warning, no native log line on stderr ----------------------------------------------------------------


def test_nsys_parquet_folder_reads_without_a_python_warning(tmp_path: Path) -> None:
    """python-warning-on-stderr: every parquet folder printed two RuntimeWarnings (NaN cast to int64)."""
    folder = to_parquetdir(SQLITE, tmp_path / "pq")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parquet = read_file(folder)
    assert [str(w.message) for w in caught] == []
    assert len(parquet.events) == len(read_file(SQLITE).events)


def test_nsys_float_join_keys_merge_without_a_warning(tmp_path: Path) -> None:
    folder = to_parquetdir(SQLITE, tmp_path / "pq")
    path = folder / "CUPTI_ACTIVITY_KIND_RUNTIME.parquet"
    table = pq.read_table(path)
    at = table.schema.get_field_index("correlationId")
    pq.write_table(table.set_column(at, "correlationId", table.column(at).cast(pa.float64())), path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = read_file(folder)
    assert [str(w.message) for w in caught] == []
    base = read_file(SQLITE).events
    assert (trace.events["annotation"].astype(str) != "").sum() == (base["annotation"].astype(str) != "").sum()


def xplane_with_bad_utf8(tmp_path: Path) -> Path:
    """The first XStat str_value replaced by bytes that are not UTF-8: jaxlib's parser logs to fd 2."""
    space = pw.decode(XPLANE.read_bytes())

    def first_str(fields: list) -> pw.Field | None:
        for f in fields:
            if f.name == "str_value":
                return f
            if isinstance(f.value, list) and (hit := first_str(f.value)):
                return hit
        return None

    field = first_str(space)
    assert field is not None
    field.value = b"\xff\xfe"
    out = tmp_path / "x.xplane.pb"
    out.write_bytes(pw.encode(space))
    return out


@pytest.mark.slow
def test_native_log_lines_are_folded_into_the_one_error_line(tmp_path: Path) -> None:
    """native-log-lines-on-stderr: jaxlib's absl lines reached the terminal before moeprof's line."""
    path = xplane_with_bad_utf8(tmp_path)
    env = {**os.environ, "MOEPROF_XPLANE_READER": "jaxlib"}
    res = subprocess.run(
        [sys.executable, "-m", "moeprof", "analyze", str(path)], capture_output=True, text=True, env=env, timeout=300
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith(f"moeprof: {path}: not a valid XPlane file") and "invalid UTF-8" in lines[0]


# ---- exceptions that escaped a reader ------------------------------------------------------------------------------


def test_xprof_json_entries_and_args_that_are_not_objects(tmp_path: Path) -> None:
    """xprof-json-non-object-event: AttributeError: 'int' object has no attribute 'get' (args of a number)."""
    odd_args = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": "Stream #2"},
        {"ph": "M", "name": "process_name", "pid": 3, "args": 7},
        gpu_event(4.0, 1.0, args=7),
    ]
    doc = accepted(xprof(tmp_path / "t.trace.json", [gpu_event(1.0, 2.0), *odd_args]))
    assert doc["total"]["accumulated_ns"] == 3_000
    assert "not an event object" in refused(xprof(tmp_path / "u.trace.json", [gpu_event(1.0, 2.0), 1]))


def test_xprof_json_odd_fields_of_other_events_are_ignored(tmp_path: Path) -> None:
    """json-unhashable-id and xprof-json-group-arg: a list as pid, a list or null as group escaped."""
    path = xprof(
        tmp_path / "t.trace.json",
        [
            gpu_event(1.0, 2.0, args=[1, 2]),
            gpu_event(5.0, 1.0, args={"group": [1, 2], "program_id": 10**30, "hlo_op": {"a": 1}}),
            gpu_event(9.0, 1.0, args={"group": None}),
            {"ph": "M", "name": "process_name", "pid": [], "args": {"name": "/device:GPU:3"}},
            {"ph": "X", "pid": {"a": 1}, "tid": [], "name": "k", "ts": 1.0, "dur": 1.0},
        ],
    )
    doc = accepted(path)
    assert [d["device"] for d in doc["devices"]] == ["t/GPU:0"] and doc["total"]["accumulated_ns"] == 4_000


def test_xprof_json_gpu_ordinal_past_int64_is_refused(tmp_path: Path) -> None:
    """json-huge-int-overflow: a 20-digit ordinal went into an int64 column."""
    path = tmp_path / "t.trace.json"
    meta = {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:99999999999999999999"}}
    path.write_text(json.dumps({"traceEvents": [meta, gpu_event(1.0, 1.0)]}))
    assert "a GPU ordinal past 10^9" in refused(path)


@pytest.mark.parametrize(
    "top", [{"distributedInfo": {"rank": 2**64 - 1}}, {"distributedInfo": {"rank": 1e300, "world_size": 10**30}}]
)
def test_kineto_integers_past_int64_are_ignored(tmp_path: Path, top: dict) -> None:
    """json-huge-int-overflow: OverflowError: Python int too large to convert to C long."""
    evs = [kernel(1.0, 1.0, 2**64 - 1, **{"External id": 2**64 - 1}), kernel(3.0, 1.0, 1)]
    doc = accepted(kineto(tmp_path / "rank3.pt.trace.json", evs, **top))
    assert [d["device"] for d in doc["devices"]] == ["rank3/GPU:0"] and doc["total"]["accumulated_ns"] == 2_000


def test_kineto_absurd_group_size_is_not_spelled_out(tmp_path: Path) -> None:
    args = {"Collective name": "allreduce", "Group size": 2**62, "Global rank start": 0, "Global rank stride": 1}
    evs = [kernel(1.0, 1.0, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", **args)]
    doc = accepted(kineto(tmp_path / "t.pt.trace.json", evs))
    assert doc["total"]["comm_ns"] == 1_000


@pytest.mark.parametrize("world", [2**31, 2**62])
def test_kineto_absurd_world_size_is_not_spelled_out(tmp_path: Path, world: int) -> None:
    """fuzz 300:254: a world_size of 2^31 made the whole-job rule build every rank of it (out of memory)."""
    args = {"Collective name": "allreduce", "Group size": 2, "Process Group Name": "0"}
    evs = [kernel(1.0, 1.0, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", **args), kernel(3.0, 1.0, 2)]
    doc = accepted(kineto(tmp_path / "rank1.pt.trace.json", evs, distributedInfo={"rank": 1, "world_size": world}))
    assert doc["total"]["comm_ns"] == 1_000 and doc["total"]["accumulated_ns"] == 2_000
    # one rank of the job: its collective has no peer here, so it is unmatched (§8)
    (device,) = doc["devices"]
    assert doc["ledger"]["instances"] == 0 and device["comm_unmatched_ns"] == 1_000


def test_deep_nesting_is_refused_in_one_line(tmp_path: Path) -> None:
    """json-deep-nesting-recursion: RecursionError."""
    path = tmp_path / "t.pt.trace.json"
    deep = "[" * 1000 + "]" * 1000
    path.write_text(
        '{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1.0, '
        f'"dur": 1.0, "args": {{"device": 0}}, "name": {deep}}}]}}'
    )
    assert "nested too deep" in refused(path)


def test_corrupt_deflate_stream_is_refused_in_one_line(tmp_path: Path) -> None:
    """gzip-corrupt-zlib-error: the sniffer let zlib.error escape."""
    data = bytearray(XPROF_JSON.read_bytes())
    data[20] ^= 0xFF
    path = tmp_path / "t.trace.json.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(zlib_or_gzip_error()):
        gzip.decompress(bytes(data))
    assert "corrupt gzip data" in refused(path)


@pytest.mark.slow
@pytest.mark.parametrize("inflater", ["isal", "zlib"])
def test_gzip_reads_the_same_and_fails_the_same_with_either_inflater(tmp_path: Path, monkeypatch, inflater) -> None:
    """A .json.gz is inflated by ISA-L where python-isal imports, by zlib where it does not: the same
    analysis from an intact file, one line naming the file from a cut, corrupt or padded one."""
    pytest.importorskip("isal")
    kineto_gz = SAMPLES / "synthetic_2host_4gpu_kineto" / "rank0.pt.trace.json.gz"
    expected = {p.name: accepted(p) for p in (XPROF_JSON, kineto_gz)}  # isal, as users get it
    if inflater == "zlib":
        monkeypatch.setitem(sys.modules, "isal", None)
    from moeprof.readers import chrome

    assert chrome._deflate_module()[0].__name__.endswith(inflater if inflater == "zlib" else "isal_zlib")
    for p in (XPROF_JSON, kineto_gz):
        assert accepted(p) == expected[p.name]
    data = XPROF_JSON.read_bytes()
    two_members = gzip.compress(b"") + data  # an empty member, then the trace
    cases = {
        "cut.trace.json.gz": (data[: len(data) // 2], "gzip data"),
        "flip.trace.json.gz": (data[:20] + bytes([data[20] ^ 0xFF]) + data[21:], "gzip data"),
        "junk.trace.json.gz": (data + b"junk", "gzip data"),
    }
    for name, (content, words) in cases.items():
        (tmp_path / name).write_bytes(content)
        assert words in refused(tmp_path / name), name
    (tmp_path / "two.trace.json.gz").write_bytes(two_members)
    (tmp_path / "one").mkdir()
    # a member may be empty (the reader stopped at it before)
    one_member = Path(shutil.copy(XPROF_JSON, tmp_path / "one" / "two.trace.json.gz"))  # the same device names
    assert accepted(tmp_path / "two.trace.json.gz")["devices"] == accepted(one_member)["devices"]


def zlib_or_gzip_error() -> tuple[type[BaseException], ...]:
    import zlib

    return (zlib.error, OSError, EOFError)


@pytest.mark.slow
def test_corrupt_xplane_metadata_plane_is_refused_in_one_line(tmp_path: Path) -> None:
    """xplane-metadata-decode-error: DecodeError escaped from the HLO plane."""
    space = pw.decode(XPLANE.read_bytes())
    meta = next(p for p in pw.get(space, "planes") if pw.text(pw.get(p.value, "name")[0]) == "/host:metadata")
    entry = pw.get(meta.value, "event_metadata")[0]
    entry.value = pw.encode(entry.value)[:40] if isinstance(entry.value, list) else entry.value[:40]
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(pw.encode(space))
    assert "the /host:metadata plane (HLO) is corrupt: Error parsing message" in refused(path)


@pytest.mark.slow
def test_nsys_null_and_odd_enum_ids_are_skipped(tmp_path: Path) -> None:
    """nsys-null-id and nsys-name-not-text: astype(int) of a NULL id, .upper() of a float name."""
    db = edited_sqlite(
        tmp_path,
        "DROP TABLE IF EXISTS ENUM_CUDA_MEMCPY_OPER",
        "CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER, name TEXT)",
        "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (NULL, 'CUDA_MEMCPY_KIND_HTOD'), ('x', 'y'), (1, 2.5),"
        " (2, 'CUDA_MEMCPY_KIND_DTOH')",
        "DROP TABLE IF EXISTS TARGET_INFO_GPU",
        "CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT)",
        "INSERT INTO TARGET_INFO_GPU VALUES (NULL, 'H100'), (0, NULL)",
    )
    doc = accepted(db)
    assert doc["total"]["accumulated_ns"] == accepted(SQLITE)["total"]["accumulated_ns"]


@pytest.mark.slow
def test_nsys_parquet_binary_nvtx_text_is_decoded_leniently(tmp_path: Path) -> None:
    """nsys-parquet-binary-text: UnicodeDecodeError on NVTX text that is not UTF-8."""
    folder = to_parquetdir(SQLITE, tmp_path / "pq")
    path = folder / "NVTX_EVENTS.parquet"
    table = pq.read_table(path)
    at = table.schema.get_field_index("text")
    texts = [None if t is None else t.encode() + b"\xff" for t in table.column(at).to_pylist()]
    pq.write_table(table.set_column(at, "text", pa.array(texts, type=pa.binary())), path)
    doc = accepted(folder)
    assert doc["total"]["accumulated_ns"] == accepted(SQLITE)["total"]["accumulated_ns"]


@pytest.mark.parametrize("kind", ["fifo", "dev-null", "link-to-dev-null"])
def test_a_path_that_is_neither_file_nor_directory_is_refused(tmp_path: Path, kind: str) -> None:
    """not-a-file-not-a-dir: discover called iterdir() on a FIFO (NotADirectoryError)."""
    if kind == "fifo":
        path = tmp_path / "t.json"
        os.mkfifo(path)
    elif kind == "dev-null":
        path = Path("/dev/null")
    else:
        path = tmp_path / "x.sqlite"
        path.symlink_to("/dev/null")
    assert "neither a regular file nor a directory" in refused(path)
    with pytest.raises(InputError, match="neither a regular file nor a directory"):
        read_file(path)


def test_an_unforeseen_reader_failure_names_the_file_and_format(tmp_path: Path, monkeypatch) -> None:
    """The safety net: no reader exception reaches the catch-all without the file's name."""
    from moeprof.readers import chrome

    def broken(path: Path, context: ReadContext) -> None:
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(chrome, "read", broken)
    with pytest.raises(InputError) as err:
        read_file(XPROF_JSON)
    # no exception type or message: they are moeprof's inside, not what is wrong with the file
    assert str(err.value) == f"{XPROF_JSON}: cannot read as json: {unforeseen()}"
    assert "ZeroDivision" not in str(err.value) and "division" not in str(err.value)
    monkeypatch.setenv("MOEPROF_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        read_file(XPROF_JSON)


def test_library_load_applies_the_same_window(tmp_path: Path) -> None:
    path = kineto(tmp_path / "t.pt.trace.json", [kernel(100.0, 10.0, 1), kernel(1e300, 1.0, 2)])
    (trace,) = moeprof.load(path)
    assert len(trace.events) == 1 and any("cannot be placed" in w for w in trace.warnings)


@pytest.mark.slow
@pytest.mark.parametrize("value", [1e300, float("nan")])
def test_xplane_double_where_an_integer_stat_is_expected(tmp_path: Path, monkeypatch, value: float) -> None:
    """xplane-stat-value-to-int: jaxlib hands a double stat over as a float; a program id of 1e300 or NaN
    escaped as OverflowError / ValueError. Every integer stat of the file becomes that double."""
    import struct

    space = pw.decode(XPLANE.read_bytes())
    bits = int.from_bytes(struct.pack("<d", value), "little")
    changed = 0
    for _, _, _, field, message in pw.walk(space):
        if message == "XStat" and field.name == "int64_value":
            field.number, field.wire, field.value, field.name = 2, pw.FIXED64, bits, "double_value"
            changed += 1
    assert changed
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(pw.encode(space))
    monkeypatch.setenv("MOEPROF_XPLANE_READER", "jaxlib")
    trace = read_file(path)
    assert len(trace.events) == len(read_file(XPLANE).events)
    assert set(trace.events["program_id"].tolist()) == {-1}


@pytest.mark.slow
@pytest.mark.parametrize("route", ["sqlite", "parquet"])
def test_an_activity_table_without_its_time_columns_is_refused(tmp_path: Path, route: str) -> None:
    """Fuzz case 300:2206: CUPTI_ACTIVITY_KIND_KERNEL without an `end` column was skipped without a word,
    and the analysis went on with the copies alone."""
    db = edited_sqlite(tmp_path, 'ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN "end"')
    path = db if route == "sqlite" else to_parquetdir(db, tmp_path / "pq")
    line = refused(path)
    assert "CUPTI_ACTIVITY_KIND_KERNEL has rows but no end column: its activities cannot be placed" in line
    empty = edited_sqlite(
        tmp_path,
        "DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET",
        "ALTER TABLE CUPTI_ACTIVITY_KIND_MEMSET DROP COLUMN deviceId",
        name="empty.sqlite",
    )
    accepted(empty)  # an empty table without its columns leaves no activity out


# ---- the three errors the fuzz campaign on main left behind "cannot process the input" -------------------------


def _history_with_a_flipped_name(tmp_path: Path) -> Path:
    """A moeprof history database whose application id and one table name were byte-flipped: SQLite's own message
    then quotes the name ("malformed database schema (f\\xffgures)"), which Python cannot decode."""
    db = tmp_path / "runs.db"
    code, _, err = run("analyze", XPROF_JSON, "--history", db, "--json")
    assert code == 0, err
    data = bytearray(db.read_bytes())
    data[68:72] = b"\0\0\0\0"  # the application id: no longer marked as moeprof's
    at = data.find(b"figures")
    assert at > 0
    data[at + 1] = 0xFF
    db.write_bytes(bytes(data))
    return db


def test_a_byte_flipped_history_database_is_refused_naming_it(tmp_path: Path) -> None:
    db = _history_with_a_flipped_name(tmp_path)
    before = db.read_bytes()
    line = refused(db)
    assert "malformed database schema" in line and "UnicodeDecodeError" not in line, line
    for args, said in (
        (("history", db), "a damaged moeprof history database"),
        (("analyze", XPROF_JSON, "--history", db), "not a usable history database"),
    ):
        code, _, err = run(*args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"moeprof: {db}: {said}"), err
        assert "malformed database schema" in lines[0]
    assert db.read_bytes() == before


def test_steps_whose_activities_all_last_no_time_measure_zero(tmp_path: Path) -> None:
    """Kineto, each kernel on its own device and of zero duration, --steps 0:1: the projection's window of each
    device has no length (it was an IndexError). Step 0 is what ProfilerStep#0 (0-1000 µs on the host) holds
    (spec §5; no launch is linked, so each kernel by its start): the kernels of devices 0-2 at 100, 400 and
    700 µs, a window of no length on each; devices 3-5 ran nothing in it. The job's step runs from 100 to
    700 µs."""
    events_ = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": 1000 * i,
         "dur": 1000}
        for i in range(2)
    ] + [
        {"ph": "X", "cat": "kernel", "name": f"k{d}", "pid": d, "tid": 7, "ts": 100 + 300 * d, "dur": 0,
         "args": {"device": d, "stream": 7}}
        for d in range(6)
    ]  # fmt: skip
    trace = tmp_path / "own_devices.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events_}))
    code, out, err = run("analyze", trace, "--steps", "0:1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    starts = [(100 + 300 * d) * 1000 for d in range(3)]
    assert [(s["start_ns"], s["end_ns"]) for s in doc["steps"]] == [(t, t) for t in starts]
    assert [(d["span_ns"], d["accumulated_ns"]) for d in doc["devices"]] == [(0, 0)] * 3
    assert doc["step_ns"] == starts[-1] - starts[0]


def test_an_empty_window_measures_nothing() -> None:
    from moeprof.core.metrics import DeviceTimeline

    frame = pd.DataFrame(
        {"start_ns": [5, 9], "end_ns": [5, 12], "bucket": ["compute", "comm"], "ib_fraction": [np.nan, np.nan]}
    )
    empty = np.zeros(0, dtype=np.int64)
    measured = DeviceTimeline(frame).measure(empty, empty)
    assert measured.figures.span_ns == 0 and measured.figures.accumulated_ns == 0
    assert measured.clipped.tolist() == [0, 0]


@pytest.mark.parametrize(
    "sample",
    [
        "synthetic_1host_8gpu.trace.json.gz",  # xprof JSON: its reader never compiled the marker (core.steps did)
        "synthetic_1host_8gpu.nsys.sqlite",
        "synthetic_2host_4gpu_kineto",
        "synthetic_rocpd_mi300x",
        "synthetic_rocprof_mi300x",
    ],
)
@pytest.mark.parametrize("marker", ["(", "a{99999999999999999999}"])
def test_a_step_marker_that_does_not_compile_is_refused_naming_the_option(sample: str, marker: str) -> None:
    code, out, err = run("analyze", SAMPLES / sample, "--step-marker", marker)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"moeprof: --step-marker {marker!r}: not a regular expression ("), lines[0]
    # the library refuses it too, wherever it is first met (a reader, or the step finder)
    with pytest.raises(InputError, match="--step-marker"):
        moeprof.analyze_paths(
            [SAMPLES / sample], moeprof.LoadOptions(step_marker=marker), moeprof.StepOptions(marker=marker), jobs=1
        )


# ---- issue 42: what the catch-alls answered -----------------------------------------------------------------


def test_xplane_host_line_without_events_reads(tmp_path: Path) -> None:
    """A 100-byte XPlane with one GPU kernel and a /host:CPU plane whose only line has no events gave
    ``cannot read as xplane: IndexError: index 0 is out of bounds`` (the host lines' first-event pass indexed an
    empty array). It is read: the one kernel, 5 ns long, on the one device."""
    path = tiny_xplane(tmp_path / "t.xplane.pb", "void gemm_kernel<float>()", 1_000_000, 5_000, ["python3"])
    assert path.stat().st_size < 130
    trace = read_file(path)
    assert trace.events["name"].astype(str).tolist() == ["void gemm_kernel<float>()"]
    doc = accepted(path)
    assert [d["accumulated_ns"] for d in doc["devices"]] == [5]
    assert doc["devices"][0]["compute_ns"] == 5


@pytest.mark.parametrize(
    ("sample", "table", "said"),
    [
        (SQLITE, "CUPTI_ACTIVITY_KIND_KERNEL", "not a readable Nsight Systems SQLite export: damaged"),
        (SQLITE, "TARGET_INFO_SYSTEM_ENV", "not a readable Nsight Systems SQLite export: damaged"),
        (SQLITE, "NVTX_EVENTS", "not a readable Nsight Systems SQLite export: damaged"),
        (ROCPD, "rocpd_kernel_dispatch_0193a4c2_7e10_7000_8000_0000003000a0", "not a readable rocpd database"),
    ],
    ids=["nsys-kernels", "nsys-env", "nsys-nvtx", "rocpd-dispatches"],
)
def test_a_damaged_sqlite_page_is_named_without_moeprofs_sql(tmp_path: Path, sample: Path, table: str, said: str):
    """A damaged page of an Nsight export gave a 740-character line quoting moeprof's own SELECT (pandas wraps
    SQLite's error in the statement that met it). The line says the file is damaged, in SQLite's words for it."""
    path = damaged_sqlite(sample, tmp_path / sample.name, table)
    line = refused(path)
    assert said in line and "damaged (SQLite finds a corrupt page in it)" in line, line
    assert "SELECT" not in line and "sql" not in line.lower().replace("sqlite", ""), line
    assert len(line) < 250, line


def test_damaged_cell_pointers_are_refused_on_every_run(tmp_path: Path) -> None:
    """A page whose header is kept and whose cell pointers are overwritten was refused on some runs and read on
    others in one process (SQLite reads past the cells unless it checks them as it loads the page)."""
    path = damaged_sqlite(SQLITE, tmp_path / "x.sqlite", "NVTX_EVENTS", whole_page=False)
    for _ in range(8):
        with pytest.raises(InputError, match="damaged"):
            read_file(path)


def test_a_missing_package_is_named_with_how_to_install_it(monkeypatch) -> None:
    """protobuf missing on the TPU machine: ``cannot read as xplane: ModuleNotFoundError: No module named
    'google'``. The line names the package and how to install it."""
    import builtins

    real = builtins.__import__

    def without_protobuf(name: str, *args, **kwargs):
        if name == "google" or name.startswith("google."):
            raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}", name=name.split(".")[0])
        return real(name, *args, **kwargs)

    for module in [m for m in sys.modules if m == "moeprof.readers.xplane" or m.startswith("google")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(builtins, "__import__", without_protobuf)
    with pytest.raises(InputError) as err:
        read_file(XPLANE)
    assert str(err.value) == (
        f"{XPLANE}: cannot read as xplane: reading it needs the Python package protobuf, which is not installed "
        "here (pip install protobuf)"
    )


def test_rocprof_kernel_time_past_int64_is_dropped_not_a_categories_clash(tmp_path: Path) -> None:
    """Fuzz (rocprof:42:113, found by the catch-all oracle of issue 42): a kernel's Start_Timestamp of 1e20 made
    the kernel trace read by pandas (string categories) while the copies kept object ones, and joining them
    raised ``TypeError: dtype of categories must be the same`` in the catch-all. The kernel is dropped with the
    warning every reader gives, the rest read: one activity less than the unmutated process."""
    src = SAMPLES / "synthetic_rocprof_mi300x" / "mi300x-node0"
    folder = tmp_path / "node0"
    folder.mkdir()
    for f in src.glob("41200_*"):
        shutil.copy(f, folder / f.name)
    kernels = folder / "41200_kernel_trace.csv"
    lines = kernels.read_text().splitlines()
    header = lines[0].split(",")
    at = header.index('"Start_Timestamp"')
    row = lines[8].split(",")
    row[at] = "100000000000000000000"
    lines[8] = ",".join(row)
    kernels.write_text("\n".join(lines) + "\n")
    trace = read_file(kernels)
    assert len(trace.events) == len(read_file(src / "41200_kernel_trace.csv").events) - 1
    assert any("dropped 1 device activity" in w for w in trace.warnings)
