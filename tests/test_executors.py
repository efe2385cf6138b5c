"""The per-file map on every executor (in-process, local pool, a real Dask cluster) and URL inputs.

Expected figures come from synthetic.fleet's truth file (sums over the
generator's own event list), never from moeprof. The Dask cluster is real: a
``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1 (.ci/run, or
the session fixture in conftest.py). The task functions below are imported by
the workers from this module (the cluster runs with the repository on
PYTHONPATH).
"""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from moeprof.errors import InputError
from moeprof.pipeline import load_trace
from moeprof.pipeline.executors import SkippedFile, map_files, resolve_scheduler
from moeprof.pipeline.per_file import measure_file
from synthetic.fleet import TRUTH_NAME, write_job

ROOT = Path(__file__).resolve().parents[1]
RANKS = 12
KEYS = ("accumulated_ns", "compute_ns", "comm_ns", "memcpy_ns")
BAD_RANK = 3
KILL_RANK = 5


# ---------------------------------------------------------------------------------------------- tasks
# module level: the pool and the Dask workers import them by name


def measure(source: str | Path) -> dict[str, tuple[int, ...]]:
    """What a rank file contributes, as the map step computes it: figures per device."""
    part = measure_file(load_trace(source))
    return {d.device: tuple(int(getattr(d, k)) for k in KEYS) for d in part.devices}


def measure_slowly(task: tuple[str, float]) -> dict[str, tuple[int, ...]]:
    path, delay = task
    time.sleep(delay)
    return measure(path)


def measure_or_die(path: str) -> dict[str, tuple[int, ...]]:
    if Path(path).name.startswith(f"rank{KILL_RANK:02d}"):
        _alone_on_the_cluster()
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does to a worker
    return measure(path)


def _alone_on_the_cluster(timeout_s: float = 120) -> None:
    """On a Dask worker: wait until the scheduler holds no task but this one waiting or running.

    The test cluster blames every task it has running on a worker that dies (allowed-failures 0): a task that
    another worker's scheduling put beside this one, or one whose "finished" message was still in the dying
    worker's outgoing buffer, would be named too, and the error could name it first (rank04 instead of rank05
    under load). Alone, the death is this file's. Finished results that die with the worker are computed again
    by the scheduler; the map must then still take them. Outside Dask (the local pool: a worker per file) at once.
    """
    try:
        from distributed import get_client, get_worker

        key = get_worker().get_current_task()
    except (ImportError, ValueError):
        return
    client = get_client()
    deadline = time.monotonic() + timeout_s
    while client.run_on_scheduler(_busy_besides, key) and time.monotonic() < deadline:
        time.sleep(0.05)


def _busy_besides(key: str, dask_scheduler=None) -> int:
    """On the scheduler: how many tasks other than ``key`` still wait or run (none of them may be blamed)."""
    busy = ("processing", "queued", "waiting", "no-worker")
    return sum(1 for k, ts in dask_scheduler.tasks.items() if k != key and ts.state in busy)


def mark_and_wait(task: tuple[str, str]) -> str:
    path, marks = task
    Path(marks, Path(path).name).touch()
    time.sleep(0.3)
    return path


def buggy(path: str) -> int:
    raise ValueError("a reader bug")


def needs_a_missing_package(path: str) -> None:
    import moeprof_no_such_module  # noqa: F401 - a worker environment without it


def owned_by_moeprof(item: int) -> tuple[int, bool]:
    from moeprof.workers import process_is_owned

    return os.getpid(), process_is_owned()


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict]:
    """A 12-rank job: its rank files (input order) and, per file, the truth of its one device."""
    out = tmp_path_factory.mktemp("fleet")
    paths = write_job(out, RANKS, steps=2, layers=2, seed=7)
    truth = json.loads((out / TRUTH_NAME).read_text())
    expected = {str(p): {r["device"]: tuple(r[k] for k in KEYS)} for p, r in zip(paths, truth["per_rank"], strict=True)}
    return [str(p) for p in paths], expected


@pytest.fixture(scope="module")
def fleet_with_bad(fleet: tuple[list[str], dict], tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The same job with rank 3's file cut short (a truncated upload)."""
    out = tmp_path_factory.mktemp("fleet_bad")
    paths = []
    for p in fleet[0]:
        paths.append(str(shutil.copy(p, out)))
    raw = Path(paths[BAD_RANK]).read_bytes()
    Path(paths[BAD_RANK]).write_bytes(raw[: len(raw) // 2])
    return paths


@pytest.fixture(params=["inline", "pool", pytest.param("dask", marks=pytest.mark.slow)])
def executor(request: pytest.FixtureRequest) -> dict:
    """map_files keywords for each executor."""
    if request.param == "inline":
        return {"jobs": 1}
    if request.param == "pool":
        return {"jobs": 2}
    return {"scheduler": request.getfixturevalue("dask_scheduler")}


@pytest.fixture(params=["pool", pytest.param("dask", marks=pytest.mark.slow)])
def parallel(request: pytest.FixtureRequest) -> dict:
    """The executors that run files in other processes."""
    if request.param == "pool":
        return {"jobs": 2}
    return {"scheduler": request.getfixturevalue("dask_scheduler")}


def run(fn, items, **kw) -> tuple[list, list[int], list[SkippedFile]]:
    """map_files into a list in input order, with the order results arrived in."""
    out: list = [None] * len(items)
    arrived: list[int] = []

    def collect(index: int, value: object) -> None:
        arrived.append(index)
        out[index] = value

    skipped = map_files(fn, items, on_result=collect, **kw)
    return out, arrived, skipped


# ---------------------------------------------------------------------------------------------- InputError
def test_input_error_pickles_intact() -> None:
    err = pickle.loads(pickle.dumps(InputError("/data/rank3.pt.trace.json.gz", "truncated gzip data")))
    assert (type(err), err.path, err.problem) == (InputError, "/data/rank3.pt.trace.json.gz", "truncated gzip data")
    assert str(err) == "/data/rank3.pt.trace.json.gz: truncated gzip data"
    bare = pickle.loads(pickle.dumps(InputError(None, "bad option")))
    assert (bare.path, str(bare)) == (None, "bad option")


def test_bad_file_no_longer_breaks_the_process_pool(fleet_with_bad: list[str]) -> None:
    """Issue 14: the current analyze_paths (ProcessPoolExecutor) died with BrokenProcessPool."""
    from moeprof.pipeline import analyze_paths

    with pytest.raises(InputError) as info:
        analyze_paths(fleet_with_bad[:5], jobs=2)
    assert info.value.path == fleet_with_bad[BAD_RANK]
    with ProcessPoolExecutor(1) as pool:  # and it crosses a plain process boundary as itself
        with pytest.raises(InputError, match="rank03"):
            pool.submit(measure, fleet_with_bad[BAD_RANK]).result()


# ---------------------------------------------------------------------------------------------- results
@pytest.mark.slow
def test_every_executor_gives_the_truth_in_input_order(fleet: tuple[list[str], dict], executor: dict) -> None:
    paths, expected = fleet
    out, arrived, skipped = run(measure, paths, **executor)
    assert skipped == []
    assert sorted(arrived) == list(range(len(paths)))  # each file exactly once
    assert out == [expected[p] for p in paths]


@pytest.mark.slow
def test_results_stream_in_completion_order(fleet: tuple[list[str], dict], parallel: dict) -> None:
    """The first file is slow: the others stream in meanwhile, and the index restores the input order."""
    paths, expected = fleet
    tasks = [(p, 1.5 if i == 0 else 0.0) for i, p in enumerate(paths[:6])]
    out, arrived, _ = run(measure_slowly, tasks, **parallel)
    assert arrived[0] != 0  # another file's result came in while the first was still being read
    assert out == [expected[p] for p in paths[:6]]


# ---------------------------------------------------------------------------------------------- bad files
@pytest.mark.slow
def test_bad_file_stops_the_run_in_one_line(fleet_with_bad: list[str], executor: dict) -> None:
    with pytest.raises(InputError) as info:
        run(measure, fleet_with_bad, **executor)
    assert info.value.path == fleet_with_bad[BAD_RANK]
    assert "\n" not in str(info.value) and "gzip" in str(info.value)


@pytest.mark.slow
def test_skip_bad_lists_the_file_and_measures_the_rest(
    fleet: tuple[list[str], dict], fleet_with_bad: list[str], executor: dict
) -> None:
    _, expected = fleet
    seen: list[SkippedFile] = []
    out, _, skipped = run(measure, fleet_with_bad, skip_bad=True, on_skip=seen.append, **executor)
    assert [(s.index, s.file) for s in skipped] == [(BAD_RANK, fleet_with_bad[BAD_RANK])]
    assert "gzip" in skipped[0].problem and seen == skipped
    good = [i for i in range(RANKS) if i != BAD_RANK]
    assert [out[i] for i in good] == [expected[p] for p in (fleet[0][i] for i in good)]
    assert out[BAD_RANK] is None


@pytest.mark.slow
def test_killed_worker_is_named_by_file(fleet: tuple[list[str], dict], parallel: dict) -> None:
    paths, expected = fleet
    with pytest.raises(InputError) as info:
        run(measure_or_die, paths, **parallel)
    assert info.value.path == paths[KILL_RANK]
    assert "died" in str(info.value) or "killed" in str(info.value)
    out, _, skipped = run(measure_or_die, paths, skip_bad=True, **parallel)
    assert [(s.index, s.file) for s in skipped] == [(KILL_RANK, paths[KILL_RANK])]
    assert [out[i] for i in range(RANKS) if i != KILL_RANK] == [expected[p] for p in paths if p != paths[KILL_RANK]]


@pytest.mark.slow
def test_pool_workers_are_moeprofs_own_processes_and_dask_workers_are_not(parallel: dict) -> None:
    """Process-wide shortcuts (the XPlane decoder's numba start) are taken only in processes moeprof
    started: its pool's workers, never a Dask worker that other clients share."""
    out, _, _ = run(owned_by_moeprof, list(range(4)), **parallel)
    assert {pid for pid, _ in out} != {os.getpid()}  # really other processes
    assert {owned for _, owned in out} == {"jobs" in parallel}


def test_option_error_stops_even_with_skip_bad() -> None:
    """An InputError without a file (a bad option) would fail every file alike: it is raised."""

    def bad_option(item: str) -> None:
        raise InputError(None, "--step-marker '(': bad regular expression")

    with pytest.raises(InputError, match="step-marker"):
        map_files(bad_option, ["a", "b"], on_result=lambda i, v: None, jobs=1, skip_bad=True)


def test_a_bug_is_raised_as_itself_naming_the_file(fleet: tuple[list[str], dict], parallel: dict) -> None:
    paths, _ = fleet
    with pytest.raises(ValueError, match="a reader bug") as info:
        run(buggy, paths[:3], skip_bad=True, **parallel)
    assert any(n.startswith("while analyzing ") and n.endswith(".pt.trace.json.gz") for n in info.value.__notes__)


def test_workers_without_a_package_say_so_in_one_line(fleet: tuple[list[str], dict], dask_scheduler: str) -> None:
    with pytest.raises(InputError, match="Dask workers cannot import 'moeprof_no_such_module'") as info:
        run(needs_a_missing_package, fleet[0][:2], scheduler=dask_scheduler, skip_bad=True)
    assert info.value.path is None and "\n" not in str(info.value)


@pytest.mark.slow
def test_interrupt_cancels_pending_work(fleet: tuple[list[str], dict], parallel: dict, tmp_path: Path) -> None:
    paths, _ = fleet
    tasks = [(p, str(tmp_path)) for p in paths]  # 12 tasks of 0.3 s on 2 workers, one task each at a time

    def interrupt(index: int, value: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        map_files(mark_and_wait, tasks, on_result=interrupt, **parallel)
    assert not [p for p in mp.active_children() if p.name == "moeprof-worker"]
    time.sleep(1.0)  # anything not cancelled would have started by now
    assert len(list(tmp_path.iterdir())) <= 6  # the first result stopped the run: the rest never started


@pytest.mark.slow
def test_scheduler_unreachable_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    monkeypatch.setattr("moeprof.pipeline.executors.CONNECT_TIMEOUT_S", 1)
    with pytest.raises(InputError, match=r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:9") as info:
        map_files(measure, ["x"], on_result=lambda i, v: None, scheduler="tcp://127.0.0.1:9")
    assert "\n" not in str(info.value)


def test_scheduler_option_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOEPROF_SCHEDULER", "tcp://10.0.0.5:8786")
    assert resolve_scheduler(None) == "tcp://10.0.0.5:8786"
    assert resolve_scheduler("tcp://127.0.0.1:8786") == "tcp://127.0.0.1:8786"
    monkeypatch.delenv("MOEPROF_SCHEDULER")
    assert resolve_scheduler(None) is None


# ---------------------------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_analyze_paths_through_each_executor(fleet: tuple[list[str], dict], parallel: dict) -> None:
    """The JSON of a job is the same whichever executor measured its files (and equals the generator's truth)."""
    from moeprof import pipeline

    paths, _ = fleet
    folder = str(Path(paths[0]).parent)
    truth = json.loads(Path(folder, TRUTH_NAME).read_text())
    alone = pipeline.analyze_paths([folder], jobs=1).to_json()
    mapped = pipeline.analyze_paths([folder], **parallel).to_json()
    assert mapped == alone
    assert {k: mapped["total"][k] for k in KEYS} == {k: truth["total"][k] for k in KEYS}


def job_with_a_bad_rank(paths: list[str], tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the fleet's folder whose rank BAD_RANK is a broken gzip."""
    folder = tmp_path / "job"
    shutil.copytree(Path(paths[0]).parent, folder)
    bad = folder / Path(paths[BAD_RANK]).name
    bad.write_bytes(b"\x1f\x8b not gzip")
    return folder, bad


@pytest.mark.slow
def test_skip_bad_analyzes_the_rest_and_lists_what_it_skipped(
    fleet: tuple[list[str], dict], parallel: dict, tmp_path: Path
) -> None:
    from moeprof import pipeline
    from moeprof.errors import InputError

    folder, bad = job_with_a_bad_rank(fleet[0], tmp_path)
    with pytest.raises(InputError) as err:
        pipeline.analyze_paths([folder], **parallel)
    assert str(bad) in str(err.value)
    doc = pipeline.analyze_paths([folder], skip_bad=True, **parallel).to_json()
    assert [s["file"] for s in doc["skipped"]] == [str(bad)]
    assert any(w.startswith(f"skipped {bad}: ") for w in doc["warnings"])
    assert len(doc["devices"]) == RANKS - 1
    alone = pipeline.analyze_paths([folder], skip_bad=True, jobs=1).to_json()
    assert doc == alone


# ---------------------------------------------------------------------------------------------- URLs
@pytest.fixture
def memfs():
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    yield fs
    fs.store.clear()  # one store per process: leave it empty for the next test
    fs.pseudo_dirs[:] = [""]


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where temporary copies go in this test: checked empty afterwards."""
    folder = tmp_path / "worker-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.parametrize(
    "sample",
    [
        "synthetic_2host_4gpu/node0.xplane.pb",  # jaxlib reads a real path
        "synthetic_1host_8gpu.nsys.sqlite",  # so does SQLite
        "synthetic_2host_4gpu_kineto/rank5.pt.trace.json.gz",
    ],
)
def test_memory_url_reads_like_the_local_file(sample: str, memfs, private_tmp: Path) -> None:
    from moeprof.readers import read_file

    local = ROOT / "sample_traces" / sample
    memfs.pipe(f"/bucket/{local.name}", local.read_bytes())
    url = f"memory://bucket/{local.name}"
    remote = read_file(url)
    here = read_file(local)
    assert len(remote.events) and remote.events.equals(here.events) and remote.markers.equals(here.markers)
    assert (remote.path, remote.format, remote.hlo.keys()) == (url, here.format, here.hlo.keys())
    assert list(private_tmp.iterdir()) == []  # the copy is gone


@pytest.mark.slow
def test_memory_url_folder_is_discovered_and_analyzed(fleet: tuple[list[str], dict], memfs, private_tmp: Path) -> None:
    from moeprof.pipeline import analyze_paths
    from moeprof.readers import discover

    paths, _ = fleet
    # a TensorBoard-style layout: plugins/profile/<run>/, the newest run is read
    for run in ("2026_01_01", "2026_01_02"):
        for p in paths[:4]:
            memfs.pipe(f"/job/plugins/profile/{run}/{Path(p).name}", Path(p).read_bytes())
    memfs.pipe("/job/plugins/profile/2026_01_02/fleet.truth.json", b"{}")
    found = discover(["memory://job"])
    assert found == [f"memory:///job/plugins/profile/2026_01_02/{Path(p).name}" for p in paths[:4]]
    result = analyze_paths(["memory://job"], jobs=1)
    local = analyze_paths(paths[:4], jobs=1)
    assert result.total == local.total and list(result.inputs) == found
    assert list(private_tmp.iterdir()) == []


def test_memory_url_errors_name_the_url(memfs, private_tmp: Path) -> None:
    from moeprof.readers import discover, read_file

    with pytest.raises(InputError) as info:
        discover(["memory://nowhere/rank0.pt.trace.json.gz"])
    assert info.value.path == "memory://nowhere/rank0.pt.trace.json.gz" and "no such file" in info.value.problem
    memfs.pipe("/b/rank0.pt.trace.json.gz", gzip.compress(b'{"traceEvents": [')[:-4])
    with pytest.raises(InputError) as info:
        read_file("memory://b/rank0.pt.trace.json.gz")
    assert info.value.path == "memory://b/rank0.pt.trace.json.gz"  # not the temporary copy
    assert list(private_tmp.iterdir()) == []
    with pytest.raises(InputError, match="Protocol not known"):
        discover(["nosuchprotocol://bucket/x.json"])


@pytest.mark.slow
def test_file_urls_are_local_paths(fleet: tuple[list[str], dict], parallel: dict) -> None:
    from moeprof.readers import discover
    from moeprof.readers.sources import local_file

    paths, expected = fleet
    folder = Path(paths[0]).parent
    assert discover([f"file://{folder}"]) == [Path(p) for p in paths]
    with local_file(f"file://{paths[0]}") as p:
        assert p == Path(paths[0])  # no copy of a local file
    urls = [f"file://{p}" for p in paths[:4]]  # as a worker receives them
    out, _, _ = run(measure, urls, **parallel)
    assert out == [expected[p] for p in paths[:4]]


@pytest.mark.slow
def test_local_analysis_imports_neither_fsspec_nor_dask() -> None:
    code = (
        "import sys; from moeprof.pipeline import analyze_paths; from moeprof.pipeline import executors;"
        f"analyze_paths([{str(ROOT / 'sample_traces' / 'synthetic_2host_4gpu_kineto')!r}], jobs=1);"
        "print(sorted(m for m in ('fsspec', 'distributed', 'dask') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_report_on_the_cluster_writes_the_local_page(
    fleet: tuple[list[str], dict], dask_scheduler: str, tmp_path: Path
) -> None:
    """``moeprof report --scheduler`` maps the files on Dask and writes the same page as a local run."""
    from typer.testing import CliRunner

    from moeprof.cli import app

    folder, bad = job_with_a_bad_rank(fleet[0], tmp_path)
    runner = CliRunner()
    local = runner.invoke(app, ["report", str(folder), "-o", str(tmp_path / "local.html"), "--jobs", "1", "--skip-bad"])
    assert local.exit_code == 0, local.output
    remote = runner.invoke(
        app, ["report", str(folder), "-o", str(tmp_path / "dask.html"), "--scheduler", dask_scheduler, "--skip-bad"]
    )
    assert remote.exit_code == 0, remote.output
    page = (tmp_path / "dask.html").read_bytes()
    assert page == (tmp_path / "local.html").read_bytes()
    assert f"skipped {bad}".encode() in page  # the skipped file is listed on the page
    refused = runner.invoke(app, ["report", str(folder), "-o", str(tmp_path / "x.html"), "--scheduler", dask_scheduler])
    assert refused.exit_code == 2 and str(bad) in refused.output and not (tmp_path / "x.html").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "started"),
    [
        ("[folder], None, None", True),  # a folder, default jobs: a pool is likely
        ("[folder], 1, None", False),  # one job: no pool
        ("[folder], None, 'tcp://127.0.0.1:9'", False),  # Dask runs the map
        ("[folder / 'rank0.json'], None, None", False),  # one file
        ("[folder / 'a', folder / 'b'], 2, None", True),  # several inputs
    ],
)
def test_fork_server_starts_early_only_where_a_pool_is_likely(args: str, started: bool, tmp_path: Path) -> None:
    """The CLI starts the pool's fork server before importing the pipeline (its imports overlap ours)."""
    code = (
        "import multiprocessing.forkserver as fs, pathlib, sys\n"
        "from moeprof.workers import warm_fork_server\n"
        f"folder = pathlib.Path({str(tmp_path)!r})\n"
        f"said = warm_fork_server({args})\n"
        "print(said, fs._forkserver._forkserver_pid is not None, 'pandas' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MOEPROF_SCHEDULER"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    from moeprof.workers import usable_cores

    multi_core = usable_cores() > 1
    assert out.stdout.split() == [str(started and multi_core)] * 2 + ["False"]  # and never imports pandas


def test_files_read_at_once_share_the_cores(monkeypatch) -> None:
    """Each file's XPlane decoding threads: what the process may use when it reads alone, its share when
    a pool reads several at once, one on a Dask worker; a user's choice stands."""
    from dataclasses import replace

    import moeprof.pipeline.runner as pipeline
    from moeprof.options import LoadOptions
    from moeprof.pipeline.executors import concurrent_files

    monkeypatch.setattr("moeprof.workers.usable_cores", lambda: 8)
    monkeypatch.setattr("moeprof.pipeline.executors.usable_cores", lambda: 8)
    assert concurrent_files(1, None, None) == 1
    assert concurrent_files(5, 1, None) == 1
    assert concurrent_files(5, None, None) == 5
    assert concurrent_files(20, None, None) == 8
    assert concurrent_files(20, 3, None) == 3
    assert concurrent_files(20, 3, "tcp://127.0.0.1:8786") is None
    base = LoadOptions()
    assert pipeline._share_cores(base, 1, None).decode_threads is None  # the reader takes what it may use
    assert pipeline._share_cores(base, 1, 1).decode_threads == 1  # --jobs 1: one core
    assert pipeline._share_cores(base, 3, None).decode_threads == 2
    assert pipeline._share_cores(base, 8, 8).decode_threads == 1
    assert pipeline._share_cores(base, None, None).decode_threads == 1
    assert pipeline._share_cores(replace(base, decode_threads=5), 8, 1).decode_threads == 5
    # on a large machine the share stays within the cap that bounds the lines' temporaries in memory
    monkeypatch.setattr("moeprof.workers.usable_cores", lambda: 64)
    assert pipeline._share_cores(base, 2, None).decode_threads == 8
    assert pipeline._share_cores(base, 16, None).decode_threads == 4


_THREADS_AFTER_NUMPY = """
import os, sys
{setup}
import numpy
assert "numpy" in sys.modules
status = open("/proc/self/status").read()
print(status.split("Threads:")[1].split()[0], os.environ.get("OPENBLAS_NUM_THREADS", "unset"))
"""


def _threads_after_numpy(setup: str, env: dict[str, str]) -> tuple[int, str]:
    code = _THREADS_AFTER_NUMPY.format(setup=setup)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    threads, variable = out.split()
    return int(threads), variable


def _numpy_blas() -> str:
    import numpy

    return str(numpy.__config__.CONFIG["Build Dependencies"]["blas"]["name"])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="thread counts read from /proc (Linux)")
@pytest.mark.skipif("openblas" not in _numpy_blas(), reason="numpy's BLAS here is not OpenBLAS")
def test_moeprofs_own_processes_load_numpy_with_one_blas_thread_and_leave_the_environment_alone() -> None:
    """OpenBLAS starts a spinning thread per core as numpy loads (1.2 s of CPU on 13 cores) though moeprof
    multiplies no matrices: in moeprof's own processes numpy loads with one, the variable set only meanwhile
    (children and the run folder's recorded environment see the user's), a user's own setting kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    own = "from moeprof.workers import own_process\nown_process()"
    threads, variable = _threads_after_numpy(own, env)
    assert (threads, variable) == (1, "unset")
    # the user's setting is theirs: kept, and OpenBLAS follows it
    cores = len(os.sched_getaffinity(0))
    threads, variable = _threads_after_numpy(own, {**env, "OPENBLAS_NUM_THREADS": "2"})
    assert variable == "2"
    assert threads == min(2, cores)
    # a library import of moeprof changes nothing in its caller's process
    threads, variable = _threads_after_numpy("import moeprof.workers", env)
    assert variable == "unset"
    assert threads == min(cores, 64)  # OpenBLAS: a thread per core, its build's MAX_THREADS=64 at most


def test_a_dask_result_is_told_by_its_value_not_by_a_status_read_later() -> None:
    """as_completed(with_results=True, raise_errors=False) hands over an error as (type, exception, traceback) and a
    cancellation as CancelledError; anything else is the result, whatever the future's status reads by then (a
    result gathered after its worker died and it was computed again read "lost": the file was refused, path None)."""
    pytest.importorskip("distributed", reason="dask.distributed is not installed")
    from distributed.client import CancelledError

    from moeprof.pipeline.executors import _outcome

    error = ValueError("a reader bug")
    assert _outcome((ValueError, error, None)) == ("error", (ValueError, error, None))
    cancelled = CancelledError("moeprof-1")
    assert _outcome(cancelled) == ("cancelled", cancelled)
    result = {"rank0/GPU:0": (1, 2, 3, 4)}
    assert _outcome(result) == ("finished", result)
    assert _outcome((1, 2, 3)) == ("finished", (1, 2, 3))  # a tuple that is no error is a result


def test_dask_log_lines_do_not_reach_the_cli_users_stderr() -> None:
    """dask.distributed logs to stderr on its own ("distributed.client - WARNING - Couldn't gather 1 keys,
    rescheduling" when a finished result died with its worker): in moeprof's own process, nothing; the map says
    what matters in one line of its own."""
    pytest.importorskip("distributed", reason="dask.distributed is not installed")
    line = "import logging, distributed; {quiet}logging.getLogger('distributed.client').warning(\"Couldn't gather\")"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    loud = subprocess.run([sys.executable, "-c", line.format(quiet="")], capture_output=True, text=True, env=env)
    assert "Couldn't gather" in loud.stderr  # distributed's own handler, as a library caller keeps it
    quiet = "from moeprof.pipeline.executors import _quiet_dask_logs; _quiet_dask_logs(); "
    res = subprocess.run([sys.executable, "-c", line.format(quiet=quiet)], capture_output=True, text=True, env=env)
    assert (res.returncode, res.stderr) == (0, "")
