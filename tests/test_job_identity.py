"""What is one job (issue 25 §1): moeprof's own outputs are never read as traces, one capture in two
formats is read once, files of different jobs are refused naming both, a stray non-trace is skipped.

Inputs are built in tmp_path by copying and renaming the samples and the shared traces."""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import random
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core.identity import EPOCH_NS, JOB_GAP_NS, JobIdentity, disagreement
from moeprof.pipeline import analyze_paths, load, measure_file
from moeprof.pipeline.merge import JobResults, finish_job
from moeprof.readers.marks import moeprof_output

from .helpers import SAMPLES, shared_trace, to_parquetdir

runner = CliRunner()
XPLANE = SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb"
CHROME = SAMPLES / "synthetic_1host_8gpu.trace.json.gz"
SQLITE = SAMPLES / "synthetic_1host_8gpu.nsys.sqlite"
KINETO = SAMPLES / "synthetic_2host_4gpu_kineto"
TWO_HOST = SAMPLES / "synthetic_2host_4gpu"


def invoke(*args: str):
    return runner.invoke(app, [*map(str, args)])


def analyze_json(*args: object) -> dict:
    res = invoke("analyze", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@functools.cache
def unchanged_json(path: Path) -> dict:
    """``analyze PATH --json`` of an input no test changes (a sample, the module's parquet export), made once
    per module run: several tests read one of them alone (don't change the dict)."""
    return analyze_json(path)


def kineto_job(tmp_path: Path, name: str = "job") -> Path:
    job = tmp_path / name
    shutil.copytree(KINETO, job)
    return job


def activities(paths: list[Path]) -> int:
    """Activities the files hold, counted from each file read on its own."""
    return sum(len(t.events) for p in paths for t in load(p))


# ---- 1. moeprof's own outputs ---------------------------------------------------------------------


@pytest.mark.slow
def test_annotated_trace_in_the_job_folder_is_skipped_not_merged(tmp_path):
    job = kineto_job(tmp_path)
    ranks = sorted(job.iterdir())
    alone = analyze_json(job)
    res = invoke("annotate", job, "-o", job / "annotated.trace.json.gz")
    assert res.exit_code == 0, res.output
    doc = analyze_json(job)
    assert len(doc["devices"]) == 8 == len(ranks)  # before the fix: 16 devices from 9 files
    assert doc["total"] == alone["total"]
    assert any("annotated.trace.json.gz" in w and "written by moeprof" in w for w in doc["warnings"])
    # the event table holds every activity once (before: twice the rows)
    res = invoke("events", job, "-o", job / "events.csv")
    assert res.exit_code == 0, res.output
    assert len(pd.read_csv(job / "events.csv")) == activities(ranks)


@pytest.mark.slow
def test_outputs_are_recognized_by_their_mark_not_their_name(tmp_path):
    job = kineto_job(tmp_path)
    # an annotated trace renamed as one more rank file is still moeprof's
    out = tmp_path / "annotated.trace.json.gz"
    assert invoke("annotate", job, "-o", out).exit_code == 0
    shutil.copy(out, job / "rank8.pt.trace.json.gz")
    (job / "saved.json").write_text(invoke("analyze", KINETO, "--json").stdout)  # an analysis JSON by any name
    assert invoke("baseline", "save", KINETO, "-o", job / "base.json").exit_code == 0
    res = invoke("analyze", job, "--json", "--history", job / "history.sqlite")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert len(doc["devices"]) == 8
    skipped = [w for w in doc["warnings"] if "written by moeprof" in w]
    assert {Path(w.split(":")[0].removeprefix("skipped ")).name for w in skipped} == {
        "rank8.pt.trace.json.gz",
        "saved.json",
        "base.json",
    }
    # the history database the run appended to is moeprof's too: the next run skips it
    doc = analyze_json(job)
    assert len(doc["devices"]) == 8
    assert any("history.sqlite" in w and "moeprof.history-db/1" in w for w in doc["warnings"])


@pytest.mark.slow
def test_every_output_carries_its_mark(tmp_path):
    job = kineto_job(tmp_path)
    annotated, parquet, csv, html = (tmp_path / n for n in ("a.trace.json.gz", "e.parquet", "e.csv", "r.html"))
    for args in (
        ("annotate", job, "-o", annotated),
        ("events", job, "-o", parquet),
        ("events", job, "-o", csv),
        ("report", job, "-o", html),
        ("baseline", "save", job, "-o", tmp_path / "base.json"),
    ):
        assert invoke(*args).exit_code == 0, args
    (tmp_path / "analysis.out").write_text(invoke("analyze", job, "--json").stdout)
    assert moeprof_output(annotated) == "moeprof.annotated-trace/1"
    assert moeprof_output(parquet) == moeprof_output(csv) == "moeprof.events/1"
    assert moeprof_output(html) == "moeprof.report/1"
    assert moeprof_output(tmp_path / "base.json") == moeprof_output(tmp_path / "analysis.out") == "moeprof.analysis/1"
    assert moeprof_output(SAMPLES / "cpu_moe_8dev" / "manifest.json") == "moeprof.manifest/1"
    for trace in (XPLANE, CHROME, SQLITE, *KINETO.iterdir()):
        assert moeprof_output(trace) is None, trace
    # the annotated trace stays a Chrome trace: the mark is the "metadata" key, the only key Perfetto's JSON
    # importer reads before traceEvents, and the events follow it
    doc = json.loads(gzip.decompress(annotated.read_bytes()))
    assert next(iter(doc)) == "metadata" and doc["metadata"]["schema"] == "moeprof.annotated-trace/1"
    assert isinstance(doc["traceEvents"], list) and doc["traceEvents"]
    # named on its own, it is read (the round trip); beside the traces it was made of, skipped
    alone = analyze_json(annotated)
    assert len(alone["devices"]) == 8
    beside = analyze_json(job, annotated)
    assert [d["device"] for d in beside["devices"]] == [d["device"] for d in analyze_json(job)["devices"]]


@pytest.mark.slow
def test_a_moeprof_output_named_alone_is_refused(tmp_path):
    (tmp_path / "saved.json").write_text(invoke("analyze", KINETO, "--json").stdout)
    res = invoke("analyze", tmp_path / "saved.json")
    assert res.exit_code == 2
    assert "saved.json" in res.output and "written by moeprof (moeprof.analysis/1)" in res.output


# ---- 2. one capture in two formats ------------------------------------------------------------------


@pytest.fixture(scope="module")
def formats(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The one capture in each format (its parquet export made once: no test writes beside it)."""
    parquet = to_parquetdir(SQLITE, tmp_path_factory.mktemp("formats") / "capture_parquet")
    return {"xplane": XPLANE, "chrome": CHROME, "nsys": SQLITE, "nsys-parquet": parquet}


RICHER = ["xplane", "nsys", "nsys-parquet", "chrome"]


@pytest.mark.slow
@pytest.mark.parametrize("pair", list(itertools.combinations(RICHER, 2)), ids="+".join)
def test_one_capture_in_two_formats_is_read_once(formats, pair):
    richer, poorer = formats[pair[0]], formats[pair[1]]
    alone = unchanged_json(richer)
    for order in ((richer, poorer), (poorer, richer)):
        doc = analyze_json(*order)
        assert doc["inputs"] == [str(richer)]
        assert len(doc["devices"]) == 8  # before: 16 devices, or "claims device" refused
        assert doc["total"] == alone["total"]
        note = [w for w in doc["warnings"] if "same activities" in w]
        assert len(note) == 1 and str(richer) in note[0] and str(poorer) in note[0]


@pytest.mark.slow
def test_kineto_rank_files_of_an_xplane_capture_are_read_once():
    """The Kineto ranks of the 2-host sample are the 2 XPlanes' devices: each XPlane holds 4 of them."""
    doc = analyze_json(TWO_HOST, KINETO)
    assert doc["inputs"] == [str(p) for p in sorted(TWO_HOST.iterdir())]
    assert doc["total"] == unchanged_json(TWO_HOST)["total"]
    notes = [w for w in doc["warnings"] if "same activities" in w]
    assert len(notes) == 2 and all(w.count("rank") == 4 for w in notes)


@pytest.mark.slow
def test_the_merge_decides_whatever_the_order_results_arrive_in():
    traces = [t for p in (CHROME, XPLANE, SQLITE) for t in load(p)]
    parts = [measure_file(t) for t in traces]
    seen = set()
    for perm in itertools.permutations(range(3)):
        job = JobResults()
        for i in perm:
            job.add(i, parts[i])
        analysis, _, _ = finish_job(job)
        doc = analysis.to_json()
        seen.add(json.dumps({k: doc[k] for k in ("inputs", "total", "warnings", "devices")}, sort_keys=True))
    assert len(seen) == 1
    assert json.loads(seen.pop())["inputs"] == [str(XPLANE)]


@pytest.mark.slow
def test_ranks_of_one_job_are_never_taken_for_one_capture(tmp_path):
    """Eight rank files of one job (same kernels, same counts) stay eight devices."""
    doc = unchanged_json(KINETO)
    assert len(doc["devices"]) == 8 and not [w for w in doc["warnings"] if "same activities" in w]


# ---- 3. different jobs ------------------------------------------------------------------------------


@pytest.mark.slow
def test_dlrm_ranks_with_a_deepseek_rank_are_refused(tmp_path):
    dlrm = shared_trace("kineto/dlrm_8rank_v100")
    deepseek = shared_trace("kineto/deepseek_v3_ep64_h800_rank0.json.gz")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for f in sorted(dlrm.iterdir())[1:]:
        shutil.copy(f, mixed / f.name)
    shutil.copy(deepseek, mixed / "worker0.pt.trace.json.gz")
    res = invoke("analyze", mixed)
    assert res.exit_code == 2  # before: exit 0, 8 devices, no warning
    line = res.output.strip()
    assert "\n" not in line and "worker0.pt.trace.json.gz" in line and "worker1.pt.trace.json.gz" in line
    assert "world size 64 vs 8" in line


@pytest.mark.slow
def test_tf_bert_and_jax_mi300_xplanes_are_refused():
    folder = shared_trace("xplane")
    res = invoke("analyze", folder)
    assert res.exit_code == 2  # before: "11 devices"
    assert "tf_bert_8xv100_worker.xplane.pb" in res.output and "jax_conv_8xmi300.xplane.pb" in res.output
    # the first field that disagrees is named: their GPUs (MI300 vs V100) where the XPlanes name them
    assert "cannot be one job with" in res.output
    assert "device model AMD gfx94x" in res.output or "framework jax vs tensorflow" in res.output


@pytest.mark.slow
def test_compare_keeps_working_on_different_jobs(tmp_path):
    tf = shared_trace("xplane/tf_bert_8xv100_worker.xplane.pb")
    jax = shared_trace("xplane/jax_conv_8xmi300.xplane.pb")
    res = invoke("report", tf, jax, "--compare", "-o", tmp_path / "cmp.html")
    assert res.exit_code == 0, res.output


@pytest.mark.slow
def test_a_kineto_rank_with_an_nsight_export_of_another_job_is_refused(tmp_path):
    kineto = shared_trace("kineto/ddp_2rank_a100_rank0.json.gz")
    nsys = shared_trace("nsys/torch_a2a_2gpu.sqlite")
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(kineto, folder / "rank0.pt.trace.json.gz")
    shutil.copy(nsys, folder / "other.sqlite")
    res = invoke("analyze", folder)
    assert res.exit_code == 2  # before: 3 devices
    assert "rank0.pt.trace.json.gz" in res.output and "other.sqlite" in res.output
    assert "world size 2, but the files hold 3 ranks or devices" in res.output


@pytest.mark.slow
@pytest.mark.parametrize(
    "relative",
    ["kineto/dlrm_8rank_v100", "kineto/torchrec_128rank_sampled"],
)
def test_real_jobs_are_not_refused(relative):
    folder = shared_trace(relative)
    doc = analyze_json(folder)
    assert len(doc["devices"]) == len(list(folder.iterdir()))


@pytest.mark.slow
@pytest.mark.parametrize("folder", [TWO_HOST, KINETO, SAMPLES / "cpu_moe_8dev"], ids=lambda p: p.name)
def test_sample_jobs_are_not_refused(folder):
    doc = unchanged_json(folder)
    assert doc["devices"] and not [w for w in doc["warnings"] if "same activities" in w]


def test_the_time_rule_tolerates_clock_offsets_between_hosts():
    """Wall-clock ranges of one job's hosts overlap up to clock skew; boot clocks are never compared."""
    start = 1_700_000_000 * 10**9
    host0 = JobIdentity(format="xplane", start_ns=start, end_ns=start + 2 * 10**9)
    assert start >= EPOCH_NS
    for skew_ns in (3 * 10**6, -3 * 10**6, 2 * 10**9 + 10**6, JOB_GAP_NS):  # ms apart, even past the end
        host1 = JobIdentity(format="xplane", start_ns=start + skew_ns, end_ns=start + skew_ns + 2 * 10**9)
        assert disagreement(host0, host1) is None, skew_ns
    later = JobIdentity(format="xplane", start_ns=start + 4 * 10**9 + JOB_GAP_NS, end_ns=start + 5 * 10**9 + JOB_GAP_NS)
    assert disagreement(host0, later) is not None and disagreement(host0, later).startswith("time range")  # type: ignore[union-attr]
    boot0 = JobIdentity(start_ns=10**9, end_ns=2 * 10**9)
    boot1 = JobIdentity(start_ns=10**15, end_ns=10**15 + 1)
    assert disagreement(boot0, boot1) is None


def test_each_identity_field_refuses_on_its_own():
    base = JobIdentity(format="kineto", world_size=8, rank=0, framework="pytorch")
    cases = {
        "world size": JobIdentity(format="kineto", world_size=16, rank=1),
        "rank 9 in a world of 8": JobIdentity(format="kineto", rank=9),
        "device model": JobIdentity(format="kineto", device_models=("NVIDIA H800",)),
        "framework": JobIdentity(format="xplane", framework="jax"),
        "HLO modules": JobIdentity(hlo_modules=("jit_b",)),
        "process group": JobIdentity(process_groups=(("0", (0, 1)),)),
    }
    a = JobIdentity(
        format="kineto",
        world_size=8,
        rank=0,
        framework="pytorch",
        device_models=("Tesla V100-SXM2-32GB",),
        hlo_modules=("jit_a",),
        process_groups=(("0", tuple(range(8))),),
    )
    for field, b in cases.items():
        why = disagreement(a, b)
        assert why is not None and why.startswith(field), (field, why)
    # the same GPU as two formats name it, and one framework, are one job
    assert disagreement(a, JobIdentity(format="kineto", device_models=("NVIDIA V100 SXM2 32GB",))) is None
    # formats name one GPU differently (XPlane by compute capability): models compare within a format
    assert disagreement(a, JobIdentity(format="xplane", device_models=("NVIDIA compute capability 7.0",))) is None
    assert disagreement(base, JobIdentity(format="nsys", framework="jax")) is None  # Nsight's framework is a guess


# ---- 4. a stray file ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_stray_config_among_rank_files_is_skipped_with_a_note(tmp_path):
    job = kineto_job(tmp_path)
    (job / "config.json").write_text(json.dumps({"lr": 0.1, "experts": 8}))
    doc = analyze_json(job)  # before: exit 2, "JSON without a traceEvents list"
    assert len(doc["devices"]) == 8
    assert any("config.json" in w and "not a trace" in w for w in doc["warnings"])


@pytest.mark.slow
def test_broken_traces_still_refuse_unless_skip_bad(tmp_path):
    job = kineto_job(tmp_path)
    victim = job / "rank3.pt.trace.json.gz"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])  # a truncated gzip
    res = invoke("analyze", job)
    assert res.exit_code == 2 and "rank3.pt.trace.json.gz" in res.output
    doc = analyze_json(job, "--skip-bad")
    assert len(doc["devices"]) == 7
    # a Kineto file with a broken event refuses too
    job2 = kineto_job(tmp_path, "job2")
    broken = job2 / "rank5.pt.trace.json.gz"
    text = gzip.decompress(broken.read_bytes()).decode()
    doc5 = json.loads(text)
    kernels = [e for e in doc5["traceEvents"] if e.get("cat") == "kernel"]
    kernels[random.Random(0).randrange(len(kernels))]["dur"] = "soon"
    broken.write_bytes(gzip.compress(json.dumps(doc5).encode()))
    res = invoke("analyze", job2)
    assert res.exit_code == 2 and "rank5.pt.trace.json.gz" in res.output


@pytest.mark.slow
def test_analyze_paths_and_load_agree_on_the_job(tmp_path):
    """The library's load() sets the second format aside too (events and annotate read through it)."""
    traces = load([XPLANE, SQLITE])
    assert [t.path for t in traces] == [str(XPLANE)]
    assert any("same activities" in n for n in traces.notes)
    assert analyze_paths([XPLANE, SQLITE]).inputs == (str(XPLANE),)


def _one_chip(folder: Path, name: str, program_id: int) -> Path:
    """A one-chip TPU capture of host "runsc" (as the shared ones are): two programs of 4 ops."""
    from synthetic.tpu import Chip, Op, write_xplane

    ops = [
        Op(f"%fusion.{i} = f32[8]{{0}} fusion(f32[8]{{0}} %x)", 1_000 + 700 * i, 600, "loop fusion") for i in range(8)
    ]
    path = folder / f"{name}.xplane.pb"
    write_xplane(path, "runsc", [Chip(0, ops, [], [(1_000, 3_700), (3_800, 6_500)])], program_id=program_id)
    return path


def test_tpu_captures_of_different_programs_are_refused_naming_them(tmp_path):
    """Two one-chip captures of one host whose programs (both jit_step) have different fingerprints: two jobs,
    refused naming both programs (they were merged as two chips, one a "straggler"); of one program: one job."""
    from moeprof.core.identity import tpu_programs

    a, b = _one_chip(tmp_path, "a", 111), _one_chip(tmp_path, "b", 2**64 - 5)  # an id past int64 reads unsigned
    assert tpu_programs(load(a)[0]) == ("jit_step (program 111)",)
    res = invoke("analyze", tmp_path)
    assert res.exit_code == 2
    said = " ".join(res.stderr.split())
    assert (
        f"{b}: cannot be one job with {a}: XLA programs jit_step (program 111) vs jit_step (program {2**64 - 5})"
        in said
    )
    same = tmp_path / "same"
    same.mkdir()
    for name in ("a", "b"):
        _one_chip(same, name, 111)
    assert len(analyze_json(same)["devices"]) == 2


def test_the_shared_tpu_folder_is_two_programs():
    folder = shared_trace("tpu")
    res = invoke("analyze", folder)
    assert res.exit_code == 2
    assert (
        "XLA programs jit_step (program 15805627424561511384) vs jit_step (program 17543705561213154289)" in res.stderr
    )
