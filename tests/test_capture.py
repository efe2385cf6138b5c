"""Capture end to end with real local processes: ``capture run``, ``capture live``, ``capture nsys``
(with a stand-in nsys) and ``moeprof.profile_steps``.

Every JAX process runs on 2 virtual CPU devices (``XLA_FLAGS`` set before jax starts)
and does a jitted matmul with a ``psum`` in a ``shard_map``, so the traces hold
device work and a collective. Every process is bounded in time and killed on teardown.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeprof.capture.launch import PORT_ENV, child_env, free_port, write_sitecustomize
from moeprof.capture.live import parse_addresses
from moeprof.capture.nsys import build_nsys_export_command, build_nsys_profile_command
from moeprof.cli import app
from moeprof.errors import InputError

from .helpers import CPU_COMPILE_FLAGS, make_export, moeprof_here

ROOT = Path(__file__).resolve().parents[1]
XLA_FLAGS = f"--xla_force_host_platform_device_count=2 {CPU_COMPILE_FLAGS}"

JOB = """\
import sys
import time
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

seconds = float(sys.argv[1])
port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if port:
    jax.profiler.start_server(port)
n = jax.device_count()
mesh = jax.make_mesh((n,), ("d",))


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
def step(x):
    return jax.lax.psum(jnp.tanh(x @ x.T) @ x, "d") / n


x = jax.device_put(jnp.ones((n * 256, 256)) * 0.01, NamedSharding(mesh, P("d")))
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        x = step(x)
        x.block_until_ready()
    i += 1
    time.sleep(0.02)  # a step of ~1 ms and a pause: a job that runs for minutes need not hold a core
print("steps", i, "devices", n)
"""

LIBRARY = """\
import json
import sys
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import moeprof

n = jax.device_count()
mesh = jax.make_mesh((n,), ("d",))


@partial(jax.shard_map, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
def body(x):
    return jax.lax.psum(jnp.tanh(x @ x.T) @ x, "d") / n


x = jax.device_put(jnp.ones((n * 256, 256)) * 0.01, NamedSharding(mesh, P("d")))
mode, out = sys.argv[1], sys.argv[2]
if mode == "context":
    step = jax.jit(body)
    with moeprof.profile_steps(out, skip=1) as prof:
        for i in range(6):
            with prof.step(i):
                x = step(x)
                x.block_until_ready()
    result = prof.result
elif mode == "error":
    jitted = jax.jit(body)
    calls = []

    @moeprof.profile_steps(out, count=3)
    def failing(x):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return jitted(x)

    x = failing(x)
    try:
        failing(x)
    except RuntimeError:
        pass
    x = failing(x)  # after the failure: unprofiled
    with jax.profiler.trace(out + "-again"):  # the failed run left no trace open
        x = jitted(x)
    print(json.dumps({"result": failing.result}))
    sys.exit(0)
else:
    step = moeprof.profile_steps(out, skip=2, count=3)(jax.jit(body))
    for _ in range(7):
        x = step(x)
    assert step.result is step.profiler.result
    result = step.result
print(json.dumps({"devices": len(result.devices), "steps": sorted({s.step for s in result.steps})}))
"""


def env_for_jax(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = XLA_FLAGS
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("MOEPROF_DEBUG", None)
    env.update(extra)
    return env


def moeprof_cli(args: list[str], cwd: Path, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moeprof", *args],
        cwd=cwd,
        env=env_for_jax(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def moeprof_cli_here(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``moeprof_cli`` in this process (tests/helpers.py's ``moeprof_here``): for the refusals, whose one line
    the CLI's boundary writes; test_model_without_tokens_is_a_usage_error runs one from the entry point."""
    return moeprof_here(args, cwd, {"XLA_FLAGS": XLA_FLAGS, "JAX_PLATFORMS": "cpu", "MOEPROF_DEBUG": None})


def one_line(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("moeprof: "), res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    return lines[0]


def check_run_folder(out: Path, kind: str, xplanes: int = 1) -> tuple[dict, dict]:
    assert len(list(out.glob("trace/plugins/profile/*/*.xplane.pb"))) == xplanes
    manifest = json.loads((out / "manifest.json").read_text())
    analysis = json.loads((out / "analysis.json").read_text())
    assert manifest["schema"] == "moeprof.manifest/1" and manifest["kind"] == kind
    assert analysis["schema"] == "moeprof.analysis/1"
    assert len(analysis["devices"]) >= 2  # 2 virtual CPU devices per process
    assert analysis["steps"], "StepTraceAnnotation steps expected"
    assert any(c["kind"] == "all-reduce" for c in analysis["collectives"]), analysis["collectives"]
    return manifest, analysis


@pytest.fixture
def job(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(JOB)
    return path


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def wait_serving(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "worker exited before serving"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail(f"no profiler server on port {port}")


# ---- capture run ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_run_stop_json(tmp_path: Path, job: Path) -> None:
    out = tmp_path / "run"
    t0 = time.monotonic()
    command = [sys.executable, str(job), "120"]
    options = ["--delay", "1", "--duration", "1", "--stop", "--out", str(out), "--json"]
    res = moeprof_cli(["capture", "run", *options, "--", *command], tmp_path)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 110  # --stop ended the 120 s job
    doc = json.loads(res.stdout)  # stdout is the JSON alone: the job's and the client's output go elsewhere
    assert doc["schema"] == "moeprof.analysis/1"
    manifest, analysis = check_run_folder(out, "run")
    assert doc == analysis
    assert manifest["stopped"] is True and manifest["exit_code"] == -signal.SIGTERM
    assert manifest["command"] == command
    assert manifest["duration_s"] == 1.0 and manifest["delay_s"] == 1.0
    assert "stopped the command" in res.stderr
    # the server starts on time (the client asks for a start 200 ms ahead), so it logs nothing about it
    assert "Profiling is late" not in res.stderr, res.stderr


@pytest.mark.slow
def test_run_waits_for_the_command(tmp_path: Path, job: Path) -> None:
    out = tmp_path / "run"
    port = free_port()
    options = ["--delay", "0.5", "--duration", "1", "--port", str(port), "--out", str(out)]
    res = moeprof_cli(["capture", "run", *options, "--", sys.executable, str(job), "5"], tmp_path)
    assert res.returncode == 0, res.stderr
    manifest, _ = check_run_folder(out, "run")
    assert manifest["exit_code"] == 0 and manifest["stopped"] is False and manifest["port"] == port
    assert "devices 2" in res.stdout  # without --json the job's stdout is ours
    assert "comm share" in res.stdout


@pytest.mark.slow
def test_run_command_that_exits_at_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    t0 = time.monotonic()
    res = moeprof_cli_here(["capture", "run", "--out", str(out), "--", sys.executable, "-c", "pass"], tmp_path)
    line = one_line(res)
    assert "exited (code 0) before its JAX profiler server started" in line
    assert time.monotonic() - t0 < 30
    assert not out.exists()  # no half-written run folder


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no command to run"),
        (["--duration", "0", "--", "true"], "--duration must be positive"),
        (["--delay", "-1", "--", "true"], "--delay must not be negative"),
        (["--", "/nonexistent/trainer"], "cannot run '/nonexistent/trainer'"),
    ],
)
def test_run_bad_usage(tmp_path: Path, args: list[str], message: str) -> None:
    assert message in one_line(moeprof_cli_here(["capture", "run", *args], tmp_path))


@pytest.mark.slow
def test_run_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        res = moeprof_cli_here(["capture", "run", "--port", str(port), "--", "true"], tmp_path)
    assert f"port {port} is already in use" in one_line(res)


def test_sitecustomize_pops_port_and_chains(tmp_path: Path) -> None:
    """The port reaches one process only, jax is not imported early, a shadowed sitecustomize still runs."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    write_sitecustomize(ours)
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = '1'\n")
    env = child_env({"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(theirs)}, ours, 1)
    probe = (
        "import json, os, sys, subprocess;"
        f"print(json.dumps({{'port': os.environ.get('{PORT_ENV}'), 'path': os.environ.get('PYTHONPATH'),"
        "'theirs': os.environ.get('THEIRS_RAN'), 'jax': 'jax' in sys.modules,"
        "'site': sys.modules['sitecustomize'].__file__,"
        "'hook': any(type(f).__name__ == 'AfterJax' for f in sys.meta_path)}))"
    )
    res = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    assert seen == {
        "port": None,
        "path": str(theirs),
        "theirs": "1",
        "jax": False,
        "site": str(theirs / "sitecustomize.py"),
        "hook": True,  # the server starts when the script imports jax
    }
    # a rank other than 0 under mpirun/srun does not serve: rank 0 holds the port
    res = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "SLURM_PROCID": "3"}, capture_output=True, text=True, timeout=30
    )
    assert json.loads(res.stdout)["hook"] is False and json.loads(res.stdout)["theirs"] == "1"
    # alone on the path: no error, and the import system still finds a sitecustomize module
    env = child_env({"PATH": os.environ.get("PATH", "")}, ours, 1)
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; print(sys.modules['sitecustomize'].__name__, os.environ.get('PYTHONPATH'))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.split() == ["sitecustomize", "None"]


# ---- capture live --------------------------------------------------------------------------------


@pytest.mark.slow
def test_live_two_workers(tmp_path: Path, job: Path, workers: list[subprocess.Popen]) -> None:
    ports = [free_port(), free_port()]
    while ports[1] == ports[0]:
        ports[1] = free_port()
    for port in ports:
        workers.append(
            subprocess.Popen(
                [sys.executable, str(job), "300", str(port)],
                env=env_for_jax(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    for port, proc in zip(ports, workers):
        wait_serving(port, proc)
    out = tmp_path / "live"
    res = moeprof_cli(
        ["capture", "live", f"127.0.0.1:{ports[0]},:{ports[1]}", "--duration", "1", "--out", str(out)], tmp_path
    )
    assert res.returncode == 0, res.stderr
    manifest, _ = check_run_folder(out, "live", xplanes=2)
    assert manifest["addresses"] == [f"127.0.0.1:{p}" for p in ports]
    assert sorted(Path(t).name for t in manifest["traces"]) == sorted(f"127.0.0.1_{p}.xplane.pb" for p in ports)
    assert all(proc.poll() is None for proc in workers)  # live capture leaves the job running


@pytest.mark.slow
def test_live_nothing_listening(tmp_path: Path) -> None:
    port = free_port()
    t0 = time.monotonic()
    res = moeprof_cli_here(["capture", "live", str(port), "--duration", "1", "--out", str(tmp_path / "x")], tmp_path)
    line = one_line(res)
    assert f"nothing is serving a profiler at 127.0.0.1:{port}" in line
    assert time.monotonic() - t0 < 20
    assert not (tmp_path / "x").exists()


def test_parse_addresses() -> None:
    assert parse_addresses("9000") == ["127.0.0.1:9000"]
    assert parse_addresses(":9000,node-2.cluster:9001, 10.0.0.3:9002") == [
        "127.0.0.1:9000",
        "node-2.cluster:9001",
        "10.0.0.3:9002",
    ]
    assert parse_addresses("[::1]:9000,9000,127.0.0.1:9000") == ["[::1]:9000", "127.0.0.1:9000"]


@pytest.mark.parametrize("spec", ["", "host", "host:", "host:0", "host:65536", "host:x", "a b:1", "1,,2", "[::1]"])
def test_parse_addresses_rejects(spec: str) -> None:
    with pytest.raises(InputError) as err:
        parse_addresses(spec)
    assert "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["host:http"], "bad address 'host:http'"),
        ([], "give the job's profiler address(es)"),
        (["9", "--duration", "0"], "--duration must be positive"),
    ],
)
def test_live_bad_usage(tmp_path: Path, args: list[str], message: str) -> None:
    assert message in one_line(moeprof_cli_here(["capture", "live", *args], tmp_path))


# ---- capture nsys --------------------------------------------------------------------------------


def test_nsys_command_builders(tmp_path: Path) -> None:
    base = tmp_path / "trace" / "report"
    cmd = ["python", "train.py", "--steps", "10"]
    assert build_nsys_profile_command(cmd, base) == [
        "nsys",
        "profile",
        "--trace=cuda,nvtx,osrt",
        "--force-overwrite=true",
        "--output",
        str(base),
        "--",
        *cmd,
    ]
    ranged = build_nsys_profile_command(cmd, base, capture_range=True, nsys="/opt/nsys")
    assert ranged[0] == "/opt/nsys"
    assert ranged[ranged.index("--") - 2 : ranged.index("--")] == [
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
    ]
    assert ranged[ranged.index("--") + 1 :] == cmd
    export = build_nsys_export_command(base.with_suffix(".nsys-rep"), base.with_suffix(".sqlite"))
    assert export[:4] == ["nsys", "export", "--type", "sqlite"]
    assert export[-3:] == ["--output", str(base.with_suffix(".sqlite")), str(base.with_suffix(".nsys-rep"))]


def test_nsys_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys there
    res = CliRunner().invoke(app, ["capture", "nsys", "--out", str(tmp_path / "n"), "--", "python", "train.py"])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "nsys (Nsight Systems) is not on PATH" in lines[0], res.stderr
    assert not (tmp_path / "n").exists()


FAKE_NSYS = """\
#!/bin/sh
# stand-in for Nsight Systems: logs its arguments; profile runs the command, export copies a prepared export
echo "$@" >> "{log}"
cmd="$1"; shift
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --output) out="$2"; shift 2 ;;
    --) shift; break ;;
    *) shift ;;
  esac
done
if [ "$cmd" = profile ]; then
  "$@"; code=$?
  printf 'NVIDIA Nsight Systems report (fake)' > "$out.nsys-rep"
  exit $code
fi
cp "{export}" "$out"
"""


@pytest.mark.slow
def test_nsys_flow_with_a_stand_in(tmp_path: Path) -> None:
    """The orchestration without Nsight Systems: profile, export, manifest, analysis."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "nsys.log"
    nsys = bin_dir / "nsys"
    nsys.write_text(FAKE_NSYS.format(log=log, export=make_export(tmp_path / "made.sqlite")))
    nsys.chmod(0o755)
    out = tmp_path / "n"
    res = moeprof_cli(
        ["capture", "nsys", "--capture-range", "--out", str(out), "--json", "--", "sh", "-c", "echo job ran; exit 3"],
        tmp_path,
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["schema"] == "moeprof.analysis/1"
    assert "job ran" in res.stderr and "exited with code 3" in res.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("profile --trace=cuda,nvtx,osrt --force-overwrite=true --output")
    assert "--capture-range=cudaProfilerApi --capture-range-end=stop -- sh -c" in calls[0]
    assert calls[1].startswith("export --type sqlite")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "nsys" and manifest["exit_code"] == 3 and manifest["capture_range"] is True
    assert (out / "trace" / "report.sqlite").is_file() and (out / "trace" / "report.nsys-rep").is_file()
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["devices"] and any(i.endswith("report.sqlite") for i in analysis["inputs"])


@pytest.mark.slow
def test_capture_nsys_export_interrupted(tmp_path: Path) -> None:
    """An export stopped by a signal (the user's Ctrl-C reaches it: one process group) says so, and keeps the report."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nsys = bin_dir / "nsys"
    script = FAKE_NSYS.format(log=tmp_path / "nsys.log", export=tmp_path / "none.sqlite")
    nsys.write_text(script.replace('cp "', 'kill -INT $$; cp "'))
    nsys.chmod(0o755)
    out = tmp_path / "n"
    res = moeprof_cli(
        ["capture", "nsys", "--out", str(out), "--json", "--", "true"],
        tmp_path,
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    line = one_line(res)
    assert "nsys export was interrupted (SIGINT) before it finished; the report is kept" in line
    assert (out / "trace" / "report.nsys-rep").is_file()


def test_nsys_run_folder_is_read_once(tmp_path: Path) -> None:
    from moeprof.readers import discover

    trace = tmp_path / "trace"
    trace.mkdir()
    make_export(trace / "report.sqlite")
    (trace / "report.nsys-rep").write_bytes(b"NVIDIA Nsight Systems report (fake)")
    assert [p.name for p in discover([tmp_path])] == ["report.sqlite"]


# ---- library -------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "steps"), [("context", [1, 2, 3, 4, 5]), ("decorator", [2, 3, 4])])
def test_profile_steps(tmp_path: Path, mode: str, steps: list[int]) -> None:
    script = tmp_path / "lib.py"
    script.write_text(LIBRARY)
    out = tmp_path / mode
    res = subprocess.run(
        [sys.executable, str(script), mode, str(out)],
        cwd=ROOT,
        env=env_for_jax(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen == {"devices": 2, "steps": steps}
    manifest, analysis = check_run_folder(out, "library")
    assert manifest["mode"] == mode and manifest["devices"]["count"] == 2
    assert sorted({s["step"] for s in analysis["steps"]}) == steps


@pytest.mark.slow
def test_profile_steps_failing_step(tmp_path: Path) -> None:
    script = tmp_path / "lib.py"
    script.write_text(LIBRARY)
    out = tmp_path / "error"
    res = subprocess.run(
        [sys.executable, str(script), "error", str(out)],
        cwd=ROOT,
        env=env_for_jax(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {"result": None}
    assert list(out.glob("trace/plugins/profile/*/*.xplane.pb"))  # what was traced is kept
    assert not (out / "analysis.json").exists()


def test_profile_steps_arguments(tmp_path: Path) -> None:
    import moeprof

    with pytest.raises(ValueError, match="count"):
        moeprof.profile_steps(tmp_path, count=0)
    with pytest.raises(ValueError, match="skip"):
        moeprof.profile_steps(tmp_path, skip=-1)
    with pytest.raises(ValueError, match="needs count"):
        moeprof.profile_steps(tmp_path)(lambda: None)


@pytest.mark.slow
def test_import_moeprof_does_not_import_jax() -> None:
    res = subprocess.run(
        [sys.executable, "-c", "import sys, moeprof; moeprof.profile_steps; print('jax' in sys.modules)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.stdout.strip() == "False", res.stderr


@pytest.mark.slow
def test_finish_run_with_a_model_puts_throughput_in_the_manifest(tmp_path: Path) -> None:
    import shutil

    import moeprof
    from moeprof.cli.capture import Throughput, finish_run
    from moeprof.insight.flops import flops_per_token, load_model_config

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_moe_8dev", run)
    result = finish_run(run, as_json=True, throughput=Throughput("deepseek-v3", 4096, 4096, 64))
    tp = result.throughput
    per_token = flops_per_token(load_model_config("deepseek-v3"), 4096).total
    assert tp["tokens_per_second"] == pytest.approx(4096 / (tp["step_ns"] / 1e9))
    assert tp["tflops_per_device"] == pytest.approx(tp["tokens_per_second"] * per_token / 64 / 1e12)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["tokens_per_second"] == tp["tokens_per_second"] and manifest["tokens_per_step"] == 4096
    # a later analysis of the folder reads it back from the manifest
    assert moeprof.analyze_paths([run]).throughput["tokens_per_second"] == pytest.approx(tp["tokens_per_second"])


def test_model_without_tokens_is_a_usage_error() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "moeprof", "capture", "live", "127.0.0.1:1", "--model", "deepseek-v3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "--tokens-per-step" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# ---- the manifest's environment ------------------------------------------------------------------

SECRET = "s3cr3t-value-that-must-not-leave-the-machine"


def test_manifest_records_allow_listed_environment_and_redacts_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    from moeprof.capture.runfolder import new_manifest

    for name in list(os.environ):
        monkeypatch.delenv(name)
    recorded = {
        "XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=true",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": ".9",
        "JAX_PLATFORMS": "cuda",
        "NCCL_ALGO": "Ring",
        "NCCL_IB_HCA": "mlx5",
        "NVSHMEM_IB_ENABLE_IBGDA": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "LIBTPU_INIT_ARGS": "--xla_tpu_enable_async_all_gather=true",
    }
    secret_but_allowed = ["JAX_COMPILATION_CACHE_KEY", "NCCL_NET_PASSWORD", "NVSHMEM_Secret_x", "JAX_api_token"]
    never = {
        "TF_TOKEN_app_terraform_io": SECRET,  # Terraform's credential: "TF_" is not an allowed prefix
        "TF_VAR_db_password": SECRET,
        "CUDA_HOME": "/usr/local/cuda",  # not a performance knob
        "HF_TOKEN": SECRET,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "XLA_UNKNOWN_THING": "x",
        "PATH": "/usr/bin",
    }
    for name, value in {**recorded, **dict.fromkeys(secret_but_allowed, SECRET), **never}.items():
        monkeypatch.setenv(name, value)
    manifest = new_manifest("run", command=["python", "train.py"])
    assert manifest["env"] == {**recorded, **dict.fromkeys(secret_but_allowed, "<redacted>")}
    assert list(manifest["env"]) == sorted(manifest["env"])
    assert SECRET not in json.dumps(manifest, default=str)


# ---- where capture run's profiler listens --------------------------------------------------------


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine other than loopback that accepts local connections, or None."""
    candidates: list[str] = []
    try:
        candidates += socket.gethostbyname_ex(socket.gethostname())[2]
    except OSError:
        pass
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # UDP connect sends nothing: it only picks the outgoing address
            candidates.append(probe.getsockname()[0])
        except OSError:
            pass
    for address in dict.fromkeys(candidates):
        if address.startswith("127.") or address == "0.0.0.0":
            continue
        # the control: a listener on every interface must be reachable there, or the check below proves nothing
        with socket.socket() as listener:
            listener.bind(("0.0.0.0", 0))
            listener.listen()
            if reachable(address, listener.getsockname()[1]):
                return address
    return None


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def run_in_background(tmp_path: Path, job: Path, port: int, *options: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "moeprof", "capture", "run", "--delay", "4", "--duration", "1", "--stop"]
    command += ["--port", str(port), "--out", "run", *options, "--", sys.executable, str(job), "60"]
    return subprocess.Popen(
        command, cwd=tmp_path, env=env_for_jax(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
@pytest.mark.parametrize("host", [None, "0.0.0.0"])
def test_run_profiler_listens_on_loopback_unless_asked(tmp_path: Path, job: Path, host: str | None) -> None:
    """By default the job's profiler port answers on 127.0.0.1 and not on the machine's other address;
    --profiler-host 0.0.0.0 (jax.profiler.start_server, which binds every interface) answers on both."""
    address = non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address that accepts local connections")
    port = free_port()
    proc = run_in_background(tmp_path, job, port, *(["--profiler-host", host] if host else []))
    try:
        deadline = time.monotonic() + 90
        while not reachable("127.0.0.1", port):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the job's profiler never came up"
            time.sleep(0.1)
        assert reachable(address, port) is (host == "0.0.0.0"), f"{address}:{port}"
        if host is None:
            # loopback peers without moeprof's key get nothing: the connection closes, no trace is written
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(b'{"key": "guess", "duration_s": 0.1, "wait_s": 0.1}\n')
                sock.settimeout(15)
                assert sock.recv(100) == b""
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    manifest, _ = check_run_folder(tmp_path / "run", "run")
    assert manifest["profiler_host"] == (host or "127.0.0.1")
    assert len(manifest["traces"]) == 1


def test_run_profiler_host_must_be_loopback_or_every_interface(tmp_path: Path) -> None:
    line = one_line(moeprof_cli_here(["capture", "run", "--profiler-host", "10.1.2.3", "--", "true"], tmp_path))
    assert "--profiler-host must be 127.0.0.1 (the default) or 0.0.0.0" in line


def test_demo_run_folder_manifest_carries_tflops(tmp_path: Path) -> None:
    """The demo records tokens/s and FLOPs per token; after analysis its manifest carries TFLOPS per device too."""
    import shutil

    from moeprof.cli.capture import finish_run

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_moe_8dev", run)
    before = json.loads((run / "manifest.json").read_text())
    before.pop("throughput", None)
    (run / "manifest.json").write_text(json.dumps(before))
    finish_run(run, as_json=True)
    manifest = json.loads((run / "manifest.json").read_text())
    expected = before["tokens_per_second"] * before["model_flops_per_token"] / before["devices"]["count"] / 1e12
    assert manifest["throughput"]["tflops_per_device"] == pytest.approx(expected, rel=1e-12)
    assert "mfu" not in manifest["throughput"]  # no peak for a CPU device: no MFU rather than a guess
    assert json.loads((run / "analysis.json").read_text())["throughput"] == manifest["throughput"]
