"""rocprofv3's rocpd SQLite database: the synthetic 8x MI300X job's figures against the generator's truth, the
collective kind taken from the host-side RCCL call, ROCTx steps, routing apart from Nsight's SQLite, the CLI, and
the bad-input contract (one line naming the file, exit 2, the input untouched)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli import app
from moeprof.errors import InputError
from moeprof.readers import base as readers_base
from moeprof.readers import read_file, sniff
from synthetic import rocpd as rocpd_synth
from synthetic import rocprof as job_synth
from tests.fuzz.engine import Harness
from tests.fuzz.rocpd_cases import SEED_WEIGHTS as FUZZ_SEEDS
from tests.fuzz.rocpd_cases import generate_rocpd, seed_case

from .helpers import SAMPLES, assert_refused, judge_fuzz_result
from .truth import assert_equals_truth, comm_ns_by_kind

SYNTH = SAMPLES / "synthetic_rocpd_mi300x"
ONE = SYNTH / "mi300x-node0" / "41200_results.db"


def truth() -> dict:
    return json.loads((SAMPLES / "synthetic_rocpd_mi300x.truth.json").read_text())


# ---- the synthetic job ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_committed_sample_is_what_the_generator_writes(tmp_path: Path) -> None:
    for path in rocpd_synth.write_samples(tmp_path):
        rel = path.relative_to(tmp_path)
        assert path.read_bytes() == (SAMPLES / rel).read_bytes(), rel


@pytest.mark.slow
def test_every_section4_figure_equals_the_generators_truth() -> None:
    assert_equals_truth(moeprof.analyze_paths([SYNTH]).to_json(), truth(), skip=("copy_bytes", "steps"))


@pytest.mark.slow
def test_generic_rccl_kernels_take_their_kind_from_the_rccl_call() -> None:
    """ncclDevKernel_Generic_1 names no collective: ncclAllToAll, the grouped ncclSend/ncclRecv to every peer and
    ncclAllReduce say it (the CSV of the same job can only say "other")."""
    assert comm_ns_by_kind(moeprof.analyze_paths([SYNTH]).to_json()) == truth()["comm_kind_ns"]


def test_without_the_rccl_calls_the_generic_kernels_have_no_kind(tmp_path: Path) -> None:
    db = copy_of(ONE, tmp_path)
    with sqlite3.connect(db) as conn:
        region = table_of(conn, "rocpd_region")
        conn.execute(
            f"DELETE FROM `{region}` WHERE event_id IN (SELECT E.id FROM rocpd_event E JOIN rocpd_string S "
            "ON S.id = E.category_id WHERE S.string = 'RCCL_API')"
        )
    got = moeprof.analyze_paths([db]).to_json()
    generic = [c for c in got["collectives"] if c["name"].startswith("ncclDevKernel_Generic")]
    assert [(c["kind"], c["count"]) for c in generic] == [("other", 9)]


def test_devices_copies_and_steps() -> None:
    trace = read_file(ONE)
    assert trace.format == "rocpd"
    assert trace.devices == {"mi300x-node0/GPU:0": 0}
    assert trace.device_models == {"mi300x-node0/GPU:0": "AMD Instinct MI300X"}
    want = {d["device"]: d for d in truth()["devices"]}["mi300x-node0/GPU:0"]
    copies = trace.events[trace.events["activity"] == "memcpy"]
    assert Counter(copies["copy_kind"]) == {"HtoD": 3, "DtoH": 3, "PtoP": 3}
    assert copies["bytes"].sum() == want["copy_bytes"]
    steps = trace.markers[trace.markers["kind"] == "step"]
    assert [[int(s), int(e)] for s, e in zip(steps["start_ns"], steps["end_ns"])] == want["steps"]
    assert list(steps["number"]) == [0, 1, 2] and set(steps["device"]) == {""}  # ROCTx: host ranges
    job = job_synth.build()
    assert len(trace.events) == len(job.of(0))
    assert set(trace.events["stream"]) == {"Default Stream", "Stream 0"}


@pytest.mark.slow
def test_eight_processes_are_one_host() -> None:
    traces = moeprof.load(SYNTH)
    assert len(traces) == 8
    ids = {d: i for t in traces for d, i in t.devices.items()}
    assert ids == {f"mi300x-node0/GPU:{g}": g for g in range(8)}


def test_sniffed_by_schema_apart_from_nsight_sqlite() -> None:
    assert sniff(ONE) == "rocpd"
    nsys = SAMPLES / "synthetic_1host_8gpu.nsys.sqlite"
    assert sniff(nsys) == "sqlite"
    assert read_file(nsys).format != "rocpd"


def test_memory_guard_uses_the_rocpd_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    size = ONE.stat().st_size
    factor = readers_base.MEMORY_FACTOR["rocpd"]
    monkeypatch.delenv("MOEPROF_IGNORE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(readers_base, "available_memory", lambda: size * factor - 1)
    with pytest.raises(InputError, match="too large"):
        readers_base.check_fits_in_memory(ONE, "rocpd")
    monkeypatch.setattr(readers_base, "available_memory", lambda: size * factor)
    readers_base.check_fits_in_memory(ONE, "rocpd")


# ---- the CLI -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_analyze_events_and_report_on_the_sample(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", str(SYNTH), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["total"]["accumulated_ns"] == truth()["total"]["accumulated_ns"]
    out = tmp_path / "events.csv"
    res = runner.invoke(app, ["events", str(SYNTH), "-o", str(out)])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out, keep_default_na=False)
    job = job_synth.build()
    assert Counter(table["bucket"]) == Counter(a.bucket for a in job.activities)
    html = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(SYNTH), "-o", str(html)])
    assert res.exit_code == 0 and "mi300x-node0/GPU:7" in html.read_text(), res.output


@pytest.mark.slow
def test_dask_path_check_and_diff(dask_scheduler: str, tmp_path: Path) -> None:
    local = moeprof.analyze_paths([SYNTH], jobs=1).to_json()
    remote = moeprof.analyze_paths([SYNTH], scheduler=dask_scheduler).to_json()
    assert remote["devices"] == local["devices"] and remote["total"] == local["total"]
    runner = CliRunner()
    assert runner.invoke(app, ["check", str(SYNTH), "--max-comm-share", "0.9"]).exit_code == 0
    assert runner.invoke(app, ["check", str(SYNTH), "--max-comm-share", "0.1"]).exit_code == 1
    # the same job as rocprofv3 CSV against rocpd, both with the 3 ROCTx steps: the same compute per step
    res = runner.invoke(app, ["diff", str(SAMPLES / "synthetic_rocprof_mi300x"), str(SYNTH), "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r["values"] for r in json.loads(res.output)["rows"] if r["section"] == "buckets"}
    assert rows["compute"][0] == pytest.approx(rows["compute"][1])
    # without its marker trace the CSV is one step: per step, three times rocpd's
    csv_only = tmp_path / "mi300x-node0"
    shutil.copytree(SAMPLES / "synthetic_rocprof_mi300x" / "mi300x-node0", csv_only)
    for marks in csv_only.glob("*_marker_api_trace.csv"):
        marks.unlink()
    res = runner.invoke(app, ["diff", str(csv_only), str(SYNTH), "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r["values"] for r in json.loads(res.output)["rows"] if r["section"] == "buckets"}
    assert rows["compute"][0] == pytest.approx(3 * rows["compute"][1])


# ---- bad input -----------------------------------------------------------------------------------------------------


def copy_of(src: Path, folder: Path, name: str = "77_results.db") -> Path:
    dst = folder / name
    shutil.copyfile(src, dst)
    return dst


def table_of(conn: sqlite3.Connection, view: str) -> str:
    """The uuid-suffixed table under one of rocpd's views."""
    (name,) = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ? ESCAPE '\\'",
        (view.replace("_", "\\_") + "\\_%",),
    ).fetchone()
    return str(name)


def mutated(tmp_path: Path, *sql: str) -> Path:
    db = copy_of(ONE, tmp_path)
    with sqlite3.connect(db) as conn:
        dispatch, copy = table_of(conn, "rocpd_kernel_dispatch"), table_of(conn, "rocpd_memory_copy")
        for statement in sql:
            conn.execute(statement.format(dispatch=dispatch, copy=copy))
    conn.close()
    return db


@pytest.mark.slow
def test_truncated_database(tmp_path: Path) -> None:
    data = ONE.read_bytes()
    db = tmp_path / "77_results.db"
    db.write_bytes(data[: len(data) * 2 // 5])
    assert_refused(db)


@pytest.mark.slow
def test_empty_file(tmp_path: Path) -> None:
    db = tmp_path / "77_results.db"
    db.write_bytes(b"")
    assert_refused(db, "empty file")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sql", "said"),
    [
        (["DROP VIEW rocpd_kernel_dispatch"], ("no rocpd_kernel_dispatch",)),
        (["DROP VIEW rocpd_info_agent"], ("no rocpd_info_agent",)),
        (
            [
                "DROP VIEW rocpd_kernel_dispatch",
                "CREATE VIEW rocpd_kernel_dispatch AS SELECT id, guid, agent_id, kernel_id, stream_id, end, event_id "
                "FROM `{dispatch}`",
            ],
            ("no such column", "start"),
        ),
        (["UPDATE `{dispatch}` SET start = 'soon' WHERE id = 3"], ("rocpd_kernel_dispatch.start", "'soon'")),
        (['UPDATE `{dispatch}` SET "end" = 12.5 WHERE id = 2'], ("rocpd_kernel_dispatch.end",)),
        (["UPDATE `{dispatch}` SET agent_id = 42 WHERE id = 1"], ("agent_id 42", "names no agent")),
        (["UPDATE `{copy}` SET start = ''"], ("rocpd_memory_copy.start",)),
        # a cell the dispatch columns' text route would misread (a space parses as 0)
        (["UPDATE `{dispatch}` SET start = ' ' WHERE id = 4"], ("rocpd_kernel_dispatch.start", "' '")),
        # a REAL in an id column: refused, not cast by numpy (fuzz case rocpd:28:80)
        (["UPDATE `{dispatch}` SET stream_id = 1e300 WHERE id = 5"], ("rocpd_kernel_dispatch.stream_id", "1e+300")),
        (
            ["UPDATE `{dispatch}` SET kernel_id = 1e300 WHERE id = 5"],
            ("rocpd_kernel_dispatch.kernel_id", "not an integer"),
        ),
        (["UPDATE `{dispatch}` SET kernel_id = 2.5 WHERE id = 5"], ("rocpd_kernel_dispatch.kernel_id", "'2.5'")),
        (["DELETE FROM `{dispatch}`", "DELETE FROM `{copy}`"], ("no kernel dispatch or memory copy",)),
        (["UPDATE rocpd_info_agent_0193a4c2_7e10_7000_8000_0000003000a0 SET type = 'CPU'"], ("no GPU agent",)),
    ],
    ids=[
        "no dispatch view",
        "no agent view",
        "no start column",
        "text time",
        "fractional time",
        "unknown agent",
        "empty copy time",
        "blank time",
        "huge stream id",
        "huge kernel id",
        "fractional kernel id",
        "no records",
        "no gpu agent",
    ],
)
def test_bad_databases_are_refused_in_one_line(tmp_path: Path, sql: list[str], said: tuple[str, ...]) -> None:
    assert_refused(mutated(tmp_path, *sql), *said)


def test_a_text_cell_with_commas_stays_in_its_row(tmp_path: Path) -> None:
    """One kernel id written as "3,4": its row alone loses its name (the checked route, as for any text), where
    the text route's comma-joined column would have shifted every later row."""
    before = read_file(ONE).events
    db = mutated(tmp_path, "UPDATE `{dispatch}` SET kernel_id = '3,4' WHERE id = 7")
    after = read_file(db).events
    assert len(after) == len(before)
    changed = after["name"].astype(str) != before["name"].astype(str)
    assert int(changed.sum()) == 1
    assert after.loc[changed, "name"].astype(str).tolist() == ["unknown_kernel"]
    assert (after["start_ns"] == before["start_ns"]).all() and (after["end_ns"] == before["end_ns"]).all()


def test_a_blob_time_reads_as_the_checked_route_reads_it(tmp_path: Path) -> None:
    """A time stored as a blob of its digits takes the checked route (pandas reads the digits), as before the
    text route: the same events as the clean file."""
    start = int(read_file(ONE).events["start_ns"].min())
    with sqlite3.connect(ONE.resolve().as_uri() + "?mode=ro", uri=True) as clean:
        (first,) = clean.execute("SELECT start FROM rocpd_kernel_dispatch WHERE id = 1").fetchone()
    db = mutated(tmp_path, f"UPDATE `{{dispatch}}` SET start = CAST('{first}' AS BLOB) WHERE id = 1")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT typeof(start) FROM rocpd_kernel_dispatch WHERE id = 1").fetchone() == ("blob",)
    events = read_file(db).events
    pd.testing.assert_frame_equal(events, read_file(ONE).events)
    assert int(events["start_ns"].min()) == start


@pytest.mark.slow
def test_a_folder_of_databases_is_left_as_it_was(tmp_path: Path) -> None:
    """Reading never writes beside the input (no -wal, -shm or journal): the folder lists what it did."""
    folder = tmp_path / "node"
    shutil.copytree(SYNTH / "mi300x-node0", folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    moeprof.analyze_paths([folder])
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


# ---- fuzz (tests/fuzz/rocpd_cases.py; the harness and oracle of tests/test_fuzz.py) ---------------------------------

FUZZ_RUNS = int(os.environ.get("MOEPROF_FUZZ_ROCPD_RUNS", "15"))
FUZZ_SEED = int(os.environ.get("MOEPROF_FUZZ_SEED", "1"))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory):
    h = Harness(tmp_path_factory.mktemp("fuzz-rocpd"))
    yield h
    h.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FUZZ_SEEDS))
def test_fuzz_seed_is_accepted(harness: Harness, name: str) -> None:
    result = harness.run(seed_case(name), with_seed=False)
    assert result.outcome.rc == 0, result.report()
    judge_fuzz_result(result)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(FUZZ_RUNS))
def test_fuzz_rocpd(harness: Harness, index: int) -> None:
    """Hostile cells, times as text, views and columns dropped, rows deleted or duplicated, cut bytes."""
    judge_fuzz_result(harness.run(generate_rocpd(FUZZ_SEED, index)))
