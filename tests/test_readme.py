"""Every code block of the README runs as written (issue 25: its library example raised "no device activity").

Each ```python block runs in a fresh interpreter, and each moeprof command of each ```bash block with its words
as a shell passes them (quotes removed, wildcards expanded): ``capture demo`` in a shell and its own Python, every
other command in the test's process through the CLI's app (an interpreter start with moeprof's imports was most of
each command's time; tests/test_cli.py runs the ``moeprof`` entry point itself), in a folder laid out with the
README's own names: ``trace_dir/`` a TensorBoard log dir, ``node0.xplane.pb
node1.xplane.pb`` the hosts of a job, ``worker*.pt.trace.json.gz`` its Kineto rank files, ``report.sqlite`` an
Nsight export, ``run/`` and ``runs/*`` run folders, ``tpu_job/`` a 2-slice TPU job, ``node0/`` one host's
rocprofv3 output (CSV sets and rocpd databases), ``nccl-inspector-1234/`` NCCL Inspector logs, ``TRACE`` a trace
(all copied from ``sample_traces/``). What the README leaves to the reader's own program is given a stand-in,
stated in ``USER_CODE``: ``train_step``, ``state``, ``batch``.

Not run here, and why (each is covered elsewhere where it can be):

- ``pip install ...``: installs the package; the suite runs against the checkout.
- ``python -m pytest -q``: the suite itself.
- ``moeprof analyze gs://bucket/job42/ --scheduler tcp://10.0.0.5:8786``: a cloud bucket and a Dask
  cluster (``tests/test_fleet.py`` runs ``--scheduler`` against a real local cluster, ``memory://`` URLs).
- ``moeprof capture run ... -- python train.py``, ``capture live 10.0.0.1:9999,...``, ``capture nsys
  -- python train.py``: the user's training script, a live job serving the profiler on other hosts,
  and Nsight Systems (absent here: no GPU); ``tests/test_capture.py`` runs each against a real JAX
  program or a stand-in ``nsys``.
- ``capture demo`` runs, with sizes made small (``DEMO_SMALL``) so three captures fit a test; the
  command's own defaults are measured in docs/capture.md.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ROOT, SAMPLES, moeprof_here

README = ROOT / "README.md"

NOT_HERE = {
    "pip install": "installs the package",
    "python -m pytest": "the suite itself",
    "--scheduler tcp://": "a Dask cluster and a cloud bucket",
    "capture run": "the user's training script",
    "capture live": "a live job on other hosts",
    "capture nsys": "Nsight Systems and a GPU",
}
DEMO_SMALL = "--steps 1 --warmup 0 --tokens 32 --layers 1 --experts 8 --expert-ffn 64"
# a stand-in for the reader's own training loop: a jitted step on a small array
USER_CODE = """\
import jax
import jax.numpy as jnp

@jax.jit
def train_step(state, batch):
    return jnp.tanh(state @ batch) + state

state = jnp.ones((256, 256))
batch = jnp.full((256, 256), 0.01)
"""


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def commands() -> list[str]:
    """Every command line of every ```bash block, its trailing comment cut."""
    out = []
    for block in blocks("bash"):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line:
                out.append(line)
    return out


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    e["JAX_PLATFORMS"] = "cpu"
    e.pop("MOEPROF_DEBUG", None)
    return e


def moeprof(args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command line in a shell, in its own Python: a demo capture (JAX reads its XLA flags once per process)."""
    return subprocess.run(
        f"{sys.executable} -m moeprof {args}", shell=True, cwd=cwd, env=env(), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def shell_words(args: str, cwd: Path) -> list[str]:
    """The arguments a POSIX shell passes for ``args`` in ``cwd``: quotes removed, and each unquoted word that
    holds a wildcard expanded to its sorted matches (kept as written when nothing matches, as sh does)."""
    bare = set(args.split())
    words = []
    for word in shlex.split(args):
        matches = sorted(glob.glob(word, root_dir=cwd)) if word in bare and glob.has_magic(word) else []
        words += matches or [word]
    return words


def in_process(args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command line run in this process (tests/helpers.py's ``moeprof_here``) with ``env()``'s settings."""
    settings = {name: env().get(name) for name in ("JAX_PLATFORMS", "MOEPROF_DEBUG")}
    return moeprof_here(shell_words(args, cwd), cwd, settings)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder holding the README's names."""
    here = tmp_path_factory.mktemp("readme")
    profile = here / "trace_dir" / "plugins" / "profile" / "2026_12_03_12_00_00"
    profile.mkdir(parents=True)
    for node in ("node0", "node1"):
        shutil.copy(SAMPLES / "synthetic_2host_4gpu" / f"{node}.xplane.pb", profile / f"{node}.xplane.pb")
        shutil.copy(SAMPLES / "synthetic_2host_4gpu" / f"{node}.xplane.pb", here / f"{node}.xplane.pb")
    shutil.copy(SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb", here / "run.xplane.pb")
    shutil.copy(SAMPLES / "synthetic_1host_8gpu.nsys.sqlite", here / "report.sqlite")
    shutil.copytree(SAMPLES / "synthetic_2host_4gpu_kineto", here / "ranks")
    for rank in (here / "ranks").iterdir():  # rank3.pt.trace.json.gz -> worker3.pt.trace.json.gz
        shutil.copy(rank, here / rank.name.replace("rank", "worker"))
    shutil.copytree(SAMPLES / "cpu_moe_8dev", here / "run")
    shutil.copytree(SAMPLES / "kineto_alltoall_gloo_w4", here / "a2a_ranks")  # gloo all-to-alls with their splits
    (here / "load.csv").write_text("step,layer,expert,tokens\n0,0,0,700\n0,0,1,100\n0,0,2,0\n0,0,3,224\n")
    # node0/: one host's rocprofv3 output, CSV sets and rocpd databases of the same processes
    shutil.copytree(SAMPLES / "synthetic_rocprof_mi300x" / "mi300x-node0", here / "node0")
    for db in (SAMPLES / "synthetic_rocpd_mi300x" / "mi300x-node0").glob("*_results.db"):
        shutil.copy(db, here / "node0" / db.name)
    shutil.copytree(SAMPLES / "nccl_inspector_8rank", here / "nccl-inspector-1234")
    shutil.copytree(SAMPLES / "synthetic_tpu_2slice", here / "tpu_job")  # two slices of 4 TPU v5e chips
    shutil.copytree(SAMPLES / "tpu_v5e_ablation" / "base", here / "tpu_run")  # the demo on a TPU v5e, HLO kept
    for name in ("padded", "dropless"):  # a TPU ablation: moe_step's padded (a) and dropless (b) captures
        shutil.copytree(SAMPLES / "tpu_v5e_moe_step" / "ab"[name == "dropless"], here / "runs" / name)
    for name in ("baseline", "grouped-gemm", "ep-fusion"):
        shutil.copytree(SAMPLES / "cpu_moe_8dev", here / "runs" / name)
    assert in_process("baseline save run/ -o base.json", here).returncode == 0
    assert in_process("analyze run/ --history runs.db", here).returncode == 0
    return here


def test_the_readme_names_what_it_runs() -> None:
    """The blocks this file knows: a README that gains a block gets it run or listed above."""
    lines = commands()
    assert any(line.startswith("moeprof analyze trace_dir/") for line in lines)
    assert len(blocks("python")) == 1
    for line in lines:
        ran = line.startswith("moeprof ") or line.startswith("pip install -e . && moeprof")
        assert ran or any(reason in line for reason in NOT_HERE), line


def distinct_commands() -> list[str]:
    """The commands, each run once: the README says `capture demo` three times and one capacity run twice (a
    demo capture is 10-15 s of a test worker); the first saying of each is kept."""
    seen: dict[str, str] = {}
    for line in commands():
        seen.setdefault(line.removeprefix("pip install -e . && "), line)
    return list(seen.values())


@pytest.mark.slow
@pytest.mark.parametrize("line", distinct_commands())
def test_readme_command_runs(line: str, folder: Path) -> None:
    skipped = [why for marker, why in NOT_HERE.items() if marker in line and "moeprof capture demo" not in line]
    if skipped and not line.startswith("pip install -e . && moeprof"):
        pytest.skip(f"not here: {skipped[0]}")
    line = line.removeprefix("pip install -e . && ")
    args = line.removeprefix("moeprof ").replace("TRACE", "run.xplane.pb")
    if args.startswith("capture demo"):
        res = moeprof(f"{args} {DEMO_SMALL} --out demo-{abs(hash(line))}", folder)
    else:
        res = in_process(args, folder)
    # a gate may fail (exit 1) on these samples: that is its answer, not an error; 2 would be
    allowed = (0, 1) if args.startswith("check ") else (0,)
    assert res.returncode in allowed, f"{line}\n{res.stderr[-3000:]}"
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_readme_python_block_runs(folder: Path) -> None:
    """The library example as printed, with the reader's training loop stood in for (``USER_CODE``)."""
    (block,) = blocks("python")
    script = folder / "readme_example.py"
    script.write_text(USER_CODE + block)
    res = subprocess.run(
        [sys.executable, str(script)], cwd=folder, env=env(), capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    share = float(res.stdout.strip().splitlines()[-1])  # print(prof.result.total.comm_share)
    assert 0.0 <= share <= 1.0
    assert (folder / "runs" / "exp1" / "manifest.json").is_file()
