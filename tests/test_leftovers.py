"""Nothing left behind, however a command ends (issue 42): a refusal, a worker killed, Ctrl-C, SIGTERM (a batch
scheduler's stop, ``kill``), SIGHUP (a closed terminal). After each: no temporary folder in ``$TMPDIR`` and no
process that the command started (``nsys export`` and the program it starts, the local pool's workers, the fork
server) still running.

Real processes: ``python -m moeprof`` children sent real signals, an ``nsys`` stand-in on PATH (a shell script
that starts a program of its own and waits, as ``nsys export`` does). Each test gives its runs a ``TMPDIR`` of its
own, which every process they start inherits: what is left is what that folder holds, and the processes whose
environment names it (found through /proc).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import ROOT, SAMPLES, fake_nsys

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="the process table is read from /proc"),
]

NSYS_SQLITE = SAMPLES / "synthetic_1host_8gpu.nsys.sqlite"
REPORT = b"NVIDIA Tegra Profiler Report 1.0 (a stand-in)"


def _terminal_signals() -> None:
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


class Run:
    """One test's runs: their ``TMPDIR``, the ``nsys`` stand-in on PATH, and what they leave."""

    def __init__(self, tmp_path: Path, export: str = "sleep 300 & wait") -> None:
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir(parents=True)
        self.started = tmp_path / "started"  # the stand-in's pid files, one per report
        self.started.mkdir()
        # the stand-in export says it started, then runs ``export``: by default a program of its own (as nsys
        # does), waited on
        self.bin = fake_nsys(tmp_path / "bin", f'echo $$ > "{self.started}/$(basename "$report").pid"\n{export}')
        self.env = {
            **os.environ,
            "TMPDIR": str(self.tmp),
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT),
        }
        self.env.pop("MOEPROF_DEBUG", None)

    def start(self, *args: str | Path, **popen: object) -> subprocess.Popen[str]:
        # as from a terminal: SIGHUP and SIGINT at their defaults, though the tests run under ``nohup`` or in a
        # shell's background job (which start them ignored, and moeprof keeps an ignored SIGHUP ignored)
        popen.setdefault("preexec_fn", _terminal_signals)
        return subprocess.Popen(
            [sys.executable, "-m", "moeprof", *map(str, args)],
            cwd=self.tmp.parent,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **popen,  # type: ignore[call-overload]
        )

    def wait_for_exports(self, count: int) -> list[int]:
        deadline = time.monotonic() + 90
        while len(list(self.started.iterdir())) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [int(p.read_text()) for p in sorted(self.started.iterdir())]
        assert len(pids) == count, f"{len(pids)} of {count} stand-in exports started"
        time.sleep(0.3)  # inside the wait
        return pids

    def processes(self) -> list[str]:
        """The processes still running whose environment names this test's TMPDIR, or a folder in it (a pool's
        worker gives what it starts its own TMPDIR there): what the runs started."""
        marker = f"TMPDIR={self.tmp}".encode()
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                environ = Path(entry.path, "environ").read_bytes()
                stat = Path(entry.path, "stat").read_text()
                command = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            ours = any(v == marker or v.startswith(marker + b"/") for v in environ.split(b"\0"))
            if ours and stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                found.append(f"{entry.name} {command[:100]}")
        return found

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + 15  # the fork server and the resource tracker end as they see us gone
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.processes() == [], "processes left running"
        assert sorted(str(p.relative_to(self.tmp)) for p in self.tmp.rglob("*")) == [], "left in TMPDIR"

    def cleanup(self) -> None:
        for line in self.processes():
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def runs(tmp_path: Path):
    made: list[Run] = []

    def make(*export: str) -> Run:
        made.append(Run(tmp_path / f"run{len(made)}", *export))
        return made[-1]

    yield make
    for run in made:  # a failed test leaves nothing running either
        run.cleanup()


def _reports(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(REPORT)
    return folder


def test_a_refusal_leaves_no_worker_folder(runs, tmp_path: Path) -> None:
    """A folder with a broken trace and an Nsight SQLite export left an empty ``moeprof-sqlite-*`` folder on every
    run: the refusal killed the busy worker inside its temporary folder."""
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(NSYS_SQLITE, folder)
    (folder / "broken.pt.trace.json").write_text('{"traceEvents": [')
    run = runs()
    for _ in range(3):
        proc = run.start("analyze", folder, "--jobs", "2")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and out == "", err
        assert err.splitlines() == [f"moeprof: {folder / 'broken.pt.trace.json'}: " + err.split(": ", 2)[2].strip()]
        run.assert_nothing_left()


WORDS = {signal.SIGINT: "interrupted", signal.SIGTERM: "stopped by SIGTERM", signal.SIGHUP: "stopped by SIGHUP"}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("where", ["one-report", "pool"])
def test_a_signal_during_nsys_export_leaves_nothing(runs, tmp_path: Path, sig: signal.Signals, where: str) -> None:
    """SIGTERM and SIGHUP during ``nsys export`` ended moeprof at once (exit 143, 129) with the export running
    under init and its ``moeprof-nsys-*`` folder left; in a local pool the workers and both exports ran on. Now
    each signal ends the command as Ctrl-C does: one line, exit 128 + the signal, nothing left. The signal goes to
    moeprof alone (``kill PID``): it must stop what it started itself."""
    run = runs()
    if where == "one-report":
        target = _reports(tmp_path / "in", "long.nsys-rep") / "long.nsys-rep"
        proc = run.start("analyze", target)
        run.wait_for_exports(1)
        detail = f" during nsys export of {target}; the export was stopped"
    else:
        target = _reports(tmp_path / "in", "a.nsys-rep", "b.nsys-rep")
        proc = run.start("analyze", target, "--jobs", "2")
        run.wait_for_exports(2)
        detail = ""
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (128 + sig, "")
    assert err.splitlines() == [f"moeprof: {WORDS[sig]}{detail}"]
    run.assert_nothing_left()


def test_sigterm_to_the_whole_group_leaves_nothing(runs, tmp_path: Path) -> None:
    """A batch scheduler signals every process of the job at once: moeprof, its fork server and workers."""
    run = runs()
    target = _reports(tmp_path / "in", "a.nsys-rep", "b.nsys-rep")
    proc = run.start("analyze", target, "--jobs", "2", start_new_session=True)
    run.wait_for_exports(2)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err.splitlines()) == (143, "", ["moeprof: stopped by SIGTERM"])
    run.assert_nothing_left()


def test_a_killed_worker_leaves_nothing(runs, tmp_path: Path) -> None:
    """A worker killed from outside (the kernel's OOM killer) in the middle of an export: its file is named as
    skipped, the export it started and its temporary folder go at once, the other file is analyzed."""
    run = runs(f'case "$report" in *slow.nsys-rep) sleep 300 & wait ;; *) sleep 3; cp "{NSYS_SQLITE}" "$out" ;; esac')
    target = _reports(tmp_path / "in", "fast.nsys-rep", "slow.nsys-rep")
    proc = run.start("analyze", target, "--jobs", "2", "--skip-bad", "--json")
    exports = dict(zip(["fast", "slow"], run.wait_for_exports(2), strict=True))
    worker = int(Path(f"/proc/{exports['slow']}/stat").read_text().rsplit(")", 1)[1].split()[1])  # its parent
    assert "moeprof" in " ".join(run.processes()) and str(worker) in " ".join(run.processes())
    os.kill(worker, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (0, ""), err
    doc = json.loads(out)
    assert doc["inputs"] == [str(target / "fast.nsys-rep")] and len(doc["devices"]) == 8
    assert any(f"{target / 'slow.nsys-rep'}" in w and "killed by SIGKILL" in w for w in doc["warnings"])
    run.assert_nothing_left()


def test_sighup_ignored_at_start_stays_ignored(runs, tmp_path: Path) -> None:
    """``nohup moeprof ...``: the command started with SIGHUP ignored goes on when the terminal closes."""
    run = runs(f'sleep 2; cp "{NSYS_SQLITE}" "$out"')
    target = _reports(tmp_path / "in", "a.nsys-rep") / "a.nsys-rep"
    proc = run.start("analyze", target, "--json", preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    run.wait_for_exports(1)
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (0, ""), err
    assert '"devices"' in out
    run.assert_nothing_left()


def test_a_long_tmpdir_does_not_stop_the_local_pool(runs, tmp_path: Path) -> None:
    """multiprocessing puts the fork server's socket under the temp dir: with a ``TMPDIR`` of ~75 characters or
    more its path passed what a Unix socket holds, and every run of several files failed ("cannot process the
    input: OSError: AF_UNIX path too long"). Its folder goes in a short temp dir then (multiprocessing removes
    it at exit); nothing is left in TMPDIR."""
    run = runs()
    deep = run.tmp / ("d" * 40) / ("e" * 40)
    deep.mkdir(parents=True)
    run.env["TMPDIR"] = str(deep)
    proc = run.start("analyze", SAMPLES / "synthetic_2host_4gpu_kineto", "--jobs", "2", "--json")
    out, err = proc.communicate(timeout=300)
    assert (proc.returncode, err) == (0, ""), err
    assert len(json.loads(out)["devices"]) == 8
    assert list(deep.iterdir()) == []
