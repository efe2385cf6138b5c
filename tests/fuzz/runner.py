"""Putting a case on disk and running moeprof on it: in the worker, or as ``python -m moeprof``."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .mutators import Case
from .seeds import ROOT

DEFAULT_MEMORY_MB = int(os.environ.get("MOEPROF_FUZZ_MEMORY_MB", "4096"))
HASH_LIMIT = 256 << 20  # larger files (sparse giants) are compared by size and mtime


@dataclass
class Outcome:
    rc: int | None  # None: no exit (hang or crash)
    stdout: str
    stderr: str
    escaped: str = ""  # an exception that left the command (in the worker)
    timed_out: bool = False
    signal: int | None = None  # the run died of this signal
    seconds: float = 0.0


def command_argv(case: Case) -> list[str]:
    path = case.arg if os.path.isabs(case.arg) else f"in/{case.arg}"
    return {
        "analyze": ["analyze", path, "--json"],
        "events": ["events", path, "-o", "out/events.csv"],
        "report": ["report", path, "-o", "out/report.html"],
        "annotate": ["annotate", path, "-o", "out/annotated.trace.json.gz"],
        "check": ["check", path, "--max-comm-share", "1"],
        "history": ["history", path, "--json"],
    }[case.command] + list(case.options)


def materialize(case: Case, root: Path) -> None:
    """Write the case under ``root``: ``in/`` (the input), ``out/`` (outputs), ``bin/`` (stand-in tools)."""
    if root.exists():
        unlock(root)
        shutil.rmtree(root)
    (root / "in").mkdir(parents=True)
    (root / "out").mkdir()
    for rel, content in case.files.items():
        path = root / "in" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content.kind == "fifo":
            os.mkfifo(path)
        elif content.kind == "symlink":
            path.symlink_to(content.target)
        elif content.kind == "sparse":
            with open(path, "wb") as fh:
                fh.truncate(content.size)
        elif content.kind == "dir":
            path.mkdir(exist_ok=True)
    for rel, text in case.executables.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    for rel in case.readonly_dirs:
        (root / "in" / rel).chmod(0o555)


def unlock(root: Path) -> None:
    for dirpath, dirnames, _ in os.walk(root):
        for d in dirnames:
            p = Path(dirpath) / d
            if not p.is_symlink():
                p.chmod(0o755)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` except ``out/`` and ``bin/``: kind, size, content hash (never opening a FIFO)."""
    entries: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in ("out", "bin")]
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                if st.st_size <= HASH_LIMIT:
                    with open(path, "rb") as fh:
                        digest = hashlib.sha256(fh.read()).hexdigest()
                else:
                    digest = f"mtime {st.st_mtime_ns}"
                entries[rel] = ("file", st.st_size, digest)
            elif stat.S_ISLNK(st.st_mode):
                entries[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = ("dir",)
            else:
                entries[rel] = ("other", stat.S_IFMT(st.st_mode))
    return entries


def _limit_memory(mb: int) -> None:
    limit = mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def case_env(case: Case, root: Path, base: dict[str, str]) -> dict[str, str]:
    """What the case changes in the environment: its own variables, and its stand-in tools first on PATH."""
    env = dict(case.env)
    if case.executables:
        env["PATH"] = str(root / "bin") + os.pathsep + env.get("PATH", base.get("PATH", ""))
    return env


def _env(case: Case, root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MOEPROF_DEBUG"}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(case_env(case, root, env))
    return env


def run_subprocess(case: Case, root: Path) -> Outcome:
    argv = [sys.executable, "-m", "moeprof", *command_argv(case)]
    mb = case.memory_mb or DEFAULT_MEMORY_MB
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=root,
        env=_env(case, root),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the run and whatever it starts (nsys) can be killed as one group
        preexec_fn=lambda: _limit_memory(mb),
    )
    try:
        out, err = proc.communicate(timeout=case.timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return Outcome(None, _text(out), _text(err), timed_out=True, seconds=time.monotonic() - start)
    _kill_group(proc)  # leftovers of a run that exited (a stand-in nsys still sleeping)
    rc = proc.returncode
    sig = -rc if rc < 0 else None
    return Outcome(None if sig else rc, _text(out), _text(err), signal=sig, seconds=time.monotonic() - start)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class Worker:
    """The in-process runner (see worker.py), restarted after a crash or a hang."""

    def __init__(self, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        self.memory_mb = memory_mb
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    def _start(self) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != "MOEPROF_DEBUG"}
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: _limit_memory(self.memory_mb),
        )
        line = self._readline(proc, 120.0)
        if line != "ready":
            self._stop(proc)
            raise RuntimeError(f"fuzz worker did not start: {line!r}")
        return proc

    @staticmethod
    def _readline(proc: subprocess.Popen, timeout: float) -> str | None:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = proc.stdout.readline()
        return line.decode().rstrip("\n") if line else ""

    @staticmethod
    def _stop(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def close(self) -> None:
        if self.proc is not None:
            self._stop(self.proc)
            self.proc = None

    def run(self, case: Case, root: Path) -> Outcome:
        if case.memory_mb:
            raise ValueError("a case with its own memory limit runs as a subprocess")
        if self.proc is None or self.proc.poll() is not None or self.runs >= 300:  # a fresh one now and then
            self.close()
            self.proc = self._start()
            self.runs = 0
        self.runs += 1
        out_file, err_file = root.parent / f"{root.name}.stdout", root.parent / f"{root.name}.stderr"
        request = {
            "argv": command_argv(case),
            "cwd": str(root),
            "env": case_env(case, root, dict(os.environ)),
            "stdout": str(out_file),
            "stderr": str(err_file),
        }
        assert self.proc.stdin is not None
        start = time.monotonic()
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        line = self._readline(self.proc, case.timeout)
        seconds = time.monotonic() - start
        native_out = out_file.read_text(errors="replace") if out_file.exists() else ""
        native_err = err_file.read_text(errors="replace") if err_file.exists() else ""
        if not line:
            timed_out = line is None
            self._stop(self.proc)
            rc = self.proc.returncode
            self.proc = None
            sig = -rc if rc is not None and rc < 0 else None
            return Outcome(None, native_out, native_err, timed_out=timed_out, signal=sig, seconds=seconds)
        reply = json.loads(line)
        return Outcome(
            reply["rc"], native_out + reply["stdout"], native_err + reply["stderr"], reply["escaped"], seconds=seconds
        )
