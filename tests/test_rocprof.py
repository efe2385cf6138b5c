"""rocprofv3 CSV output: the real MI350X kernel trace's §4 figures against a scan written apart from the reader
(the csv module and a plain-Python interval union, no moeprof code), and the bad-input contract."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli import app
from moeprof.core.steps import find_steps
from moeprof.readers import read_file
from synthetic import rocprof as rocprof_synth

from .helpers import SAMPLES, assert_refused, shared_trace
from .truth import assert_equals_truth, comm_ns_by_kind, union_length

REAL = "rocprof/flydsl_moe_gemm_mi350x_kernel_trace.csv.gz"
REAL_AGENTS = "rocprof/flydsl_moe_gemm_mi350x_agent_info.csv"


# ---- the independent route -----------------------------------------------------------------------------------------


def intersection_length(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    # |A ∩ B| = |A| + |B| - |A ∪ B|
    return union_length(a) + union_length(b) - union_length(a + b)


def bucket_of(name: str) -> str:
    """Spec §2 by hand: RCCL kernels are comm, ROCclr's blit copies memcpy, its fills other, the rest compute."""
    if re.match(r"nccl(Dev)?Kernel", name):
        return "comm"
    if name.startswith("__amd_rocclr_copyBuffer"):
        return "memcpy"
    if name.startswith("__amd_rocclr_fillBuffer"):
        return "other"
    return "compute"


def scan_real_csv(trace: Path, agents: Path) -> tuple[str, str, list[tuple[str, int, int]]]:
    """(GPU index as "GPU:k", product name, [(bucket, start, end)]) of the one GPU the trace uses."""
    with agents.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    gpus = sorted((int(r["Logical_Node_Id"]), r["Product_Name"]) for r in rows if r["Agent_Type"] == "GPU")
    with gzip.open(trace, "rt", newline="") as fh:
        records = list(csv.DictReader(fh))
    labels = {r["Agent_Id"] for r in records}
    assert len(labels) == 1
    logical = int(labels.pop().split()[1])
    index = [g[0] for g in gpus].index(logical)
    out = [(bucket_of(r["Kernel_Name"]), int(r["Start_Timestamp"]), int(r["End_Timestamp"])) for r in records]
    return f"GPU:{index}", gpus[index][1], out


def section4(rows: list[tuple[str, int, int]]) -> dict[str, int | float]:
    by = {b: [(s, e) for bb, s, e in rows if bb == b] for b in ("compute", "comm", "memcpy", "other")}
    acc = sum(e - s for _, s, e in rows)
    span = max(e for *_, e in rows) - min(s for _, s, _ in rows)
    busy = union_length([(s, e) for _, s, e in rows])
    comm, compute = by["comm"], by["compute"]
    exposed = union_length(comm + compute) - union_length(compute)
    return {
        "accumulated_ns": acc,
        **{f"{b}_ns": sum(e - s for s, e in v) for b, v in by.items()},
        "span_ns": span,
        "busy_ns": busy,
        "idle_ns": span - busy,
        "exposed_comm_ns": exposed,
        "overlapped_comm_ns": intersection_length(comm, compute),
        "comm_share": (sum(e - s for s, e in comm) / acc) if acc else 0.0,
        "exposed_comm_fraction": exposed / span,
    }


@pytest.fixture(scope="module")
def real_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real kernel trace and its agent list in a folder of their own (as rocprofv3 writes them)."""
    trace, agents = shared_trace(REAL), shared_trace(REAL_AGENTS)
    folder = tmp_path_factory.mktemp("rocprof_real")
    shutil.copy(trace, folder / trace.name)
    shutil.copy(agents, folder / agents.name)
    return folder


def test_real_csv_section4_figures_by_an_independent_scan(real_copy: Path) -> None:
    trace = real_copy / Path(REAL).name
    gpu, product, rows = scan_real_csv(trace, real_copy / Path(REAL_AGENTS).name)
    assert len(rows) == 905 and gpu == "GPU:5" and product == "AMD Instinct MI350X"
    want = section4(rows)
    got = moeprof.analyze_paths([trace]).to_json()
    (device,) = got["devices"]
    assert device["device"] == f"flydsl_moe_gemm_mi350x/{gpu}"
    for key, value in want.items():
        if isinstance(value, float):
            assert device[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert device[key] == value, key
    # no RCCL in this test: no comm, so no link split either
    assert device["comm_nvlink_ns"] == device["comm_ib_ns"] == device["comm_unknown_link_ns"] == 0
    assert got["total"]["accumulated_ns"] == want["accumulated_ns"]


def test_real_csv_device_is_named_by_its_agent(real_copy: Path) -> None:
    trace = read_file(real_copy / Path(REAL).name)
    assert trace.device_models == {"flydsl_moe_gemm_mi350x/GPU:5": "AMD Instinct MI350X"}
    assert trace.format == "rocprof-csv"
    starts = trace.events["start_ns"].to_numpy()
    assert (starts[1:] >= starts[:-1]).all()  # the file's rows are not in start order; the table is


def test_real_folder_is_one_capture(real_copy: Path) -> None:
    one = moeprof.analyze_paths([real_copy / Path(REAL).name]).to_json()["total"]
    folder = moeprof.analyze_paths([real_copy]).to_json()
    assert len(folder["devices"]) == 1 and folder["total"] == one


# ---- the bad-input contract ----------------------------------------------------------------------------------------


HEADER = (
    '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Correlation_Id",'
    '"Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count",'
    '"Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
)


def kernel_row(i: int, start: int, end: int, name: str = "moe_gemm1_0", agent: str = "Agent 2") -> str:
    return f'"KERNEL_DISPATCH","{agent}",1,0,77,{i},3,"{name}",{i},{start},{end},0,0,8,0,16,256,1,1,4096,1,1\n'


def moeprof_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moeprof", *args], capture_output=True, text=True, timeout=300)


def refused(path: Path, *said: str) -> None:
    assert_refused(path, *said, listing=_listing[path.parent])  # the folder as write() left it


_listing: dict[Path, list[str]] = {}


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    _listing[folder] = [p.name for p in folder.iterdir()]
    return path


GOOD = HEADER + kernel_row(1, 1000, 2000) + kernel_row(2, 1500, 2500)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "text", "said"),
    [
        ("truncated row", GOOD + kernel_row(3, 3000, 4000)[:60], ("not an integer",)),
        ("truncated in a quoted name", GOOD + '"KERNEL_DISPATCH","Agent 2",1,0,77,3,3,"moe_gem', ("malformed CSV",)),
        ("text time", HEADER + kernel_row(1, 1000, 2000).replace(",2000,", ",soon,"), ("End_Timestamp", "row 2")),
        ("fractional time", HEADER + kernel_row(1, 1000, 2000).replace(",2000,", ",2000.5,"), ("End_Timestamp",)),
        # Arrow's int64 parse reads 0x1F as 31 (fuzz cases rocprof:29:27, rocprof:29:39)
        (
            "hex end time",
            GOOD + kernel_row(3, 3000, 4000).replace(",4000,", ",0x1F,"),
            ("End_Timestamp", "row 4", "0x1F"),
        ),
        ("hex start time", GOOD + kernel_row(3, 3000, 4000).replace(",3000,", ",0X1f,"), ("Start_Timestamp", "row 4")),
        ("signed time", GOOD + kernel_row(3, 3000, 4000).replace(",3000,", ",+3000,"), ("Start_Timestamp", "'+3000'")),
        ("header only", HEADER, ("no kernel dispatch",)),
        ("agent label that is no agent", HEADER + kernel_row(1, 1, 2, agent="node seven"), ("Agent_Id",)),
    ],
)
def test_bad_kernel_traces_are_refused_in_one_line(tmp_path: Path, case: str, text: str, said: tuple[str, ...]) -> None:
    refused(write(tmp_path, "77_kernel_trace.csv", text), *said)


@pytest.mark.slow
def test_a_hex_time_in_the_memory_copy_trace_is_refused(tmp_path: Path) -> None:
    """The copy trace beside a kernel trace takes the same check (fuzz case rocprof:29:39)."""
    host = tmp_path / "mi300x-node0"
    host.mkdir()
    for p in (SAMPLES / "synthetic_rocprof_mi300x" / "mi300x-node0").glob("41200_*"):
        shutil.copy(p, host / p.name)
    copies = host / "41200_memory_copy_trace.csv"
    lines = copies.read_text().splitlines(keepends=True)
    cells = lines[2].split(",")
    cells[6] = "0x1F"
    lines[2] = ",".join(cells)
    copies.write_text("".join(lines))
    _listing[host] = [p.name for p in host.iterdir()]
    refused(copies, "Start_Timestamp", "row 3", "0x1F")


@pytest.mark.slow
def test_missing_columns_are_named(tmp_path: Path) -> None:
    text = GOOD.replace('"End_Timestamp",', '"Ending",')
    refused(write(tmp_path, "77_kernel_trace.csv", text), "no column End_Timestamp")


@pytest.mark.slow
def test_empty_and_gzipped_truncation(tmp_path: Path) -> None:
    refused(write(tmp_path, "77_kernel_trace.csv", b""), "empty file")
    cut = gzip.compress(GOOD.encode() * 50, mtime=0)[:-30]
    refused(write(tmp_path, "78_kernel_trace.csv.gz", cut))


@pytest.mark.slow
def test_a_csv_that_is_not_rocprof_is_unrecognized(tmp_path: Path) -> None:
    refused(write(tmp_path, "77_kernel_trace.csv", "name,start,end\nk,1,2\n"), "unrecognized format")


@pytest.mark.slow
def test_an_agent_list_alone_is_no_trace(tmp_path: Path) -> None:
    agents = shared_trace(REAL_AGENTS)
    refused(write(tmp_path, "77_agent_info.csv", agents.read_bytes()), "agent list, not a trace")


@pytest.mark.slow
def test_a_label_missing_from_the_agent_list_is_refused(tmp_path: Path) -> None:
    agents = shared_trace(REAL_AGENTS)
    write(tmp_path, "77_agent_info.csv", agents.read_bytes())
    refused(write(tmp_path, "77_kernel_trace.csv", HEADER + kernel_row(1, 1, 2, agent="Agent 42")), "Agent 42")


def test_without_an_agent_list_devices_keep_the_label_and_a_warning_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, "77_kernel_trace.csv", GOOD)
    trace = read_file(path)
    assert trace.device_names == [f"{tmp_path.name}/GPU:2"]
    assert any("agent_info.csv" in w for w in trace.warnings)


def test_gzip_and_plain_read_the_same(tmp_path: Path) -> None:
    plain = read_file(write(tmp_path, "a_kernel_trace.csv", GOOD))
    gz = read_file(write(tmp_path, "a_kernel_trace.csv.gz", gzip.compress(GOOD.encode())))
    assert plain.events[["start_ns", "end_ns"]].equals(gz.events[["start_ns", "end_ns"]])


def test_csv_module_parses_what_the_writer_quotes() -> None:
    """The hand-written rows above are what csv reads back as the writer's 22 columns."""
    (row,) = list(csv.reader(io.StringIO(kernel_row(1, 5, 9))))
    assert len(row) == len(next(csv.reader(io.StringIO(HEADER)))) == 22


# ---- the synthetic MI300X job: 8 processes, RCCL, copies --------------------------------------------------------

SYNTH = SAMPLES / "synthetic_rocprof_mi300x"


def synth_truth() -> dict:
    return json.loads((SAMPLES / "synthetic_rocprof_mi300x.truth.json").read_text())


def test_committed_sample_is_what_the_generator_writes(tmp_path: Path) -> None:
    written = rocprof_synth.write_samples(tmp_path)
    for path in written:
        rel = path.relative_to(tmp_path)
        assert path.read_bytes() == (SAMPLES / rel).read_bytes(), rel


@pytest.mark.slow
def test_synthetic_job_figures_match_the_generators_truth() -> None:
    got = moeprof.analyze_paths([SYNTH]).to_json()
    want = synth_truth()
    assert_equals_truth(got, want, skip=("steps",))
    t = want["total"]
    assert got["total"]["comm_share"] == pytest.approx(t["comm_ns"] / t["accumulated_ns"])
    # RCCL's generic kernel says no collective: the RCCL and HIP API traces beside it do (a grouped
    # ncclAllToAll launched inside ncclGroupEnd, an ncclAllReduce); the peer copies are send-recv
    assert comm_ns_by_kind(got) == want["comm_kind_ns"]


def test_without_api_traces_a_generic_rccl_kernel_is_other(tmp_path: Path) -> None:
    for p in (SYNTH / "mi300x-node0").glob("41200_*.csv"):
        if "api_trace" not in p.name:
            shutil.copy(p, tmp_path / p.name)
    got = moeprof.analyze_paths([tmp_path]).to_json()
    kinds = {c["kind"] for c in got["collectives"]}
    assert kinds == {"other", "send-recv"}  # spec §3: the kernel name alone says no collective


@pytest.mark.slow
def test_synthetic_devices_are_named_by_their_agents() -> None:
    traces = moeprof.load(SYNTH)
    assert len(traces) == 8  # one capture per process; agent lists and copy traces are companions
    models = {d: m for t in traces for d, m in t.device_models.items()}
    assert models == {f"mi300x-node0/GPU:{g}": "AMD Instinct MI300X" for g in range(8)}
    ids = {d: i for t in traces for d, i in t.devices.items()}
    assert ids == {f"mi300x-node0/GPU:{g}": g for g in range(8)}  # one host index: node-wide GPU numbers


@pytest.mark.slow
def test_events_table_holds_every_record(tmp_path: Path) -> None:
    out = tmp_path / "events.csv"
    res = CliRunner().invoke(app, ["events", str(SYNTH), "-o", str(out)])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out, keep_default_na=False)
    job = rocprof_synth.build()
    assert len(table) == len(job.activities)
    want = Counter(a.bucket for a in job.activities)
    assert Counter(table["bucket"]) == want
    copies = table[table["activity"] == "memcpy"]
    assert Counter(copies["copy_kind"]) == Counter(
        {"HtoD": 24, "DtoH": 24, "PtoP": 24}  # 3 steps x 8 GPUs each
    )


@pytest.mark.slow
def test_two_processes_given_as_files_are_one_host() -> None:
    files = sorted(SYNTH.glob("mi300x-node0/4120[03]_kernel_trace.csv"))
    got = moeprof.analyze_paths(files).to_json()
    want = {d["device"]: d for d in synth_truth()["devices"]}
    assert [d["device"] for d in got["devices"]] == ["mi300x-node0/GPU:0", "mi300x-node0/GPU:3"]
    for d in got["devices"]:
        assert d["accumulated_ns"] == want[d["device"]]["accumulated_ns"]
        assert d["comm_nvlink_ns"] == want[d["device"]]["comm_ns"]  # one host: every peer on xGMI


@pytest.mark.slow
def test_dask_path_gives_the_same_figures(dask_scheduler: str) -> None:
    local = moeprof.analyze_paths([SYNTH], jobs=1).to_json()
    remote = moeprof.analyze_paths([SYNTH], scheduler=dask_scheduler).to_json()
    assert remote["devices"] == local["devices"] and remote["total"] == local["total"]


@pytest.mark.slow
def test_check_diff_and_report_take_the_capture(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["check", str(SYNTH), "--max-comm-share", "0.9"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["check", str(SYNTH), "--max-comm-share", "0.1"])
    assert res.exit_code == 1, res.output
    res = runner.invoke(app, ["diff", str(SYNTH), str(SAMPLES / "synthetic_1host_8gpu")])
    assert res.exit_code == 0, res.output
    html = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(SYNTH), "-o", str(html)])
    assert res.exit_code == 0 and "mi300x-node0/GPU:7" in html.read_text(), res.output


# ---- rocprofv3 JSON: the same job, with its HIP and RCCL API records ------------------------------------------

SYNTH_JSON = SAMPLES / "synthetic_rocprof_mi300x_json"


@pytest.mark.slow
def test_json_job_figures_match_the_truth_and_rccl_calls_name_the_collectives() -> None:
    got = moeprof.analyze_paths([SYNTH_JSON]).to_json()
    want = synth_truth()
    assert_equals_truth(got, want, skip=("steps",), total=False)
    # the generic RCCL kernel's kind from its launch: ncclAllToAll inside a group (launched at ncclGroupEnd),
    # ncclAllReduce with HIP untraced (the kernel carries the RCCL call's own id)
    assert comm_ns_by_kind(got) == want["comm_kind_ns"]


@pytest.mark.slow
def test_json_and_csv_of_one_job_give_the_same_device_figures() -> None:
    csv_devices = moeprof.analyze_paths([SYNTH]).to_json()["devices"]
    json_devices = moeprof.analyze_paths([SYNTH_JSON]).to_json()["devices"]
    assert csv_devices == json_devices


def _json_doc() -> dict:
    return json.loads((SYNTH_JSON / "mi300x-node0" / "41200_results.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("no agents", "without its agents list"),
        ("start is text", "start_timestamp"),
        ("unknown kernel id", "not in kernel_symbols"),
        ("unknown agent", "not in the agents list"),
        ("two processes", "2 process records"),
        ("truncated", "not valid JSON"),
    ],
)
def test_bad_json_is_refused_in_one_line(tmp_path: Path, case: str, said: str) -> None:
    doc = _json_doc()
    proc = doc["rocprofiler-sdk-tool"][0]
    if case == "no agents":
        del proc["agents"]
    elif case == "start is text":
        proc["buffer_records"]["kernel_dispatch"][3]["start_timestamp"] = "soon"
    elif case == "unknown kernel id":
        proc["buffer_records"]["kernel_dispatch"][0]["dispatch_info"]["kernel_id"] = 999
    elif case == "unknown agent":
        proc["buffer_records"]["memory_copy"][0]["src_agent_id"]["handle"] = 1
    elif case == "two processes":
        doc["rocprofiler-sdk-tool"].append(proc)
    text = json.dumps(doc)
    if case == "truncated":
        text = text[: len(text) // 2]
    refused(write(tmp_path, "41200_results.json", text), said)


def test_a_copy_trace_given_beside_its_kernel_trace_is_read_once() -> None:
    host = SYNTH / "mi300x-node0"
    both = moeprof.analyze_paths([host / "41200_kernel_trace.csv", host / "41200_memory_copy_trace.csv"]).to_json()
    one = moeprof.analyze_paths([host / "41200_kernel_trace.csv"]).to_json()
    assert both["devices"] == one["devices"]
    assert any("read with its kernel trace" in w for w in both["warnings"])


# ---- ROCTx ranges (--marker-trace) as steps: CSV, JSON and rocpd of one job -------------------------------------

STEP_FIGURES = ("start_ns", "end_ns", "accumulated_ns", "compute_ns", "comm_ns", "memcpy_ns", "other_ns", "span_ns",
                "busy_ns", "idle_ns", "exposed_comm_ns", "overlapped_comm_ns", "comm_nvlink_ns", "comm_ib_ns",
                "comm_unknown_link_ns")  # fmt: skip


def step_figures(got: dict) -> dict[tuple[str, int], dict[str, int]]:
    return {(s["device"], s["step"]): {k: s[k] for k in STEP_FIGURES} for s in got["steps"]}


@pytest.mark.slow
@pytest.mark.parametrize(
    "sample", ["synthetic_rocprof_mi300x", "synthetic_rocprof_mi300x_json", "synthetic_rocpd_mi300x"]
)
def test_roctx_step_ranges_give_the_generators_step_figures(sample: str) -> None:
    """The ``step N`` ROCTx ranges of the marker trace (CSV), ``buffer_records.marker_api`` with
    ``strings.marker_api`` (JSON) and rocpd's MARKER regions are the steps, each with the §4 figures the generator
    computed over its window; the nested ``forward`` ranges are no steps."""
    got = moeprof.analyze_paths([SAMPLES / sample]).to_json()
    want = {(s["device"], s["step"]): {k: s[k] for k in STEP_FIGURES} for s in synth_truth()["steps"]}
    assert len(want) == 24  # 3 steps x 8 GPUs
    assert step_figures(got) == want  # 24 steps: the forward ranges are none


def test_a_process_steps_are_host_ranges_on_its_own_device() -> None:
    """ROCTx ranges time the host (spec §5): markers of the host; a process's steps are on its own GPU only,
    each what started inside its range (rocprofv3's kernel trace links no launch)."""
    trace = read_file(SYNTH / "mi300x-node0" / "41203_kernel_trace.csv")
    steps = trace.markers[trace.markers["kind"] == "step"]
    windows = [list(w) for w in synth_truth()["devices"][3]["steps"]]
    assert [[int(s), int(e)] for s, e in zip(steps["start_ns"], steps["end_ns"])] == windows
    assert list(steps["number"]) == [0, 1, 2] and set(steps["device"]) == {""}
    assert {"step 0", "forward"} <= set(trace.annotations)
    found = find_steps(trace)
    assert set(found["device"]) == {"mi300x-node0/GPU:3"}
    start, end = trace.events["start_ns"].to_numpy(), trace.events["end_ns"].to_numpy()
    inside = [(start >= s) & (start < e) for s, e in windows]
    assert [[int(lo), int(hi)] for lo, hi in zip(found["start_ns"], found["end_ns"])] == [
        [int(start[m].min()), int(end[m].max())] for m in inside
    ]


@pytest.mark.slow
def test_step_marker_picks_other_roctx_ranges(tmp_path: Path) -> None:
    """``--step-marker`` takes the ranges it matches, as for NVTX and rocpd: the ``forward`` ranges."""
    res = moeprof_cli("analyze", str(SYNTH / "mi300x-node0" / "41200_kernel_trace.csv"), "--step-marker", "^forward$",
                      "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    steps = json.loads(res.stdout)["steps"]
    marks = list(csv.DictReader((SYNTH / "mi300x-node0" / "41200_marker_api_trace.csv").open()))
    forward = sorted((int(m["Start_Timestamp"]), int(m["End_Timestamp"])) for m in marks if m["Function"] == "forward")
    # each range's step: what started inside it (spec §5: a host range; rocprofv3 links no launch)
    events = read_file(SYNTH / "mi300x-node0" / "41200_kernel_trace.csv").events
    start, end = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    inside = [(start >= s) & (start < e) for s, e in forward]
    want = [(int(start[m].min()), int(end[m].max())) for m in inside]
    assert [(s["start_ns"], s["end_ns"]) for s in steps] == want and len(forward) == 3


@pytest.mark.slow
def test_without_the_marker_trace_there_are_no_steps(tmp_path: Path) -> None:
    for p in (SYNTH / "mi300x-node0").glob("41200_*.csv"):
        if "marker" not in p.name:
            shutil.copy(p, tmp_path / p.name)
    assert moeprof.analyze_paths([tmp_path]).to_json()["steps"] == []


def test_json_marker_text_comes_from_the_string_table(tmp_path: Path) -> None:
    """A range's text is ``strings.marker_api``'s value for its correlation id: renamed there, no step."""
    doc = json.loads((SYNTH_JSON / "mi300x-node0" / "41202_results.json").read_text())
    proc = doc["rocprofiler-sdk-tool"][0]
    first = min(proc["buffer_records"]["marker_api"], key=lambda r: r["start_timestamp"])["correlation_id"]["internal"]
    for entry in proc["strings"]["marker_api"]:
        if entry["key"] == first:
            entry["value"] = "optimizer"
    path = tmp_path / "41202_results.json"
    path.write_text(json.dumps(doc))
    steps = read_file(path).markers
    assert sorted(steps["name"]) == ["step 1", "step 2"]


@pytest.mark.slow
def test_a_bad_marker_trace_is_refused_naming_it(tmp_path: Path) -> None:
    for p in (SYNTH / "mi300x-node0").glob("41200_*.csv"):
        shutil.copy(p, tmp_path / p.name)
    marks = tmp_path / "41200_marker_api_trace.csv"
    marks.write_text(marks.read_text().replace(",1870000000688044", ",0x1F", 1))
    before = marks.read_bytes()
    res = moeprof_cli("analyze", str(tmp_path / "41200_kernel_trace.csv"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for said in (str(marks), "End_Timestamp", "row 3", "0x1F"):
        assert said in lines[0], lines[0]
    assert marks.read_bytes() == before
