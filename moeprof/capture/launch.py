"""``moeprof capture run``: launch a training command with the JAX profiler server on, capture a window of it.

The user's script is not edited: a generated ``sitecustomize.py``, first on the
child's ``PYTHONPATH``, starts ``jax.profiler.start_server(port)`` in the first
Python process of the command. It starts the server once that process imports
jax, not at interpreter start, so environment a script sets before ``import jax``
(``JAX_PLATFORMS``, ``XLA_FLAGS``) and ``jax.distributed.initialize()`` still work.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import InputError
from .live import LOOPBACK, trace
from .runfolder import MANIFEST, TRACE_DIR, new_manifest, write_json

PORT_ENV = "MOEPROF_PROFILER_PORT"
SERVER_WAIT_S = 300.0  # jax import, data loading before it: minutes at worst
STOP_GRACE_S = 10.0
POLL_S = 0.1

SITECUSTOMIZE = '''\
"""Written by moeprof capture run: start the JAX profiler server in this process once it imports jax."""
import os
import sys


def _moeprof_start(port):
    try:
        import jax.profiler

        try:
            # no backend yet: jax.distributed.initialize() and platform choice stay the script's own
            jax.profiler.start_server(port, requires_backend=False)
        except TypeError:  # jax without requires_backend
            jax.profiler.start_server(port)
    except Exception as exc:
        sys.stderr.write(f"moeprof: could not start the JAX profiler server on port {port}: {exc}\\n")


def _moeprof_after_jax(port):
    import importlib.abc
    import importlib.util

    class AfterJax(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "jax":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec("jax")
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            exec_module = spec.loader.exec_module

            def exec_then_start(module):
                exec_module(module)
                _moeprof_start(port)

            spec.loader.exec_module = exec_then_start
            return spec

    sys.meta_path.insert(0, AfterJax())


def _moeprof_setup():
    here = os.path.dirname(os.path.abspath(__file__))
    # only the first Python process of the command serves: its children must not bind the same port
    port = os.environ.pop("{port_env}", None)
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if not p or os.path.abspath(p) != here]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("PYTHONPATH", None)
    # under mpirun/srun every rank inherits the port from a launcher that is not Python: rank 0 serves
    ranks = [os.environ.get(v) for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")]
    if any(r not in (None, "", "0") for r in ranks):
        port = None
    if port and port.isdigit():
        if "jax" in sys.modules:
            _moeprof_start(int(port))
        else:
            _moeprof_after_jax(int(port))
    # run the sitecustomize this one shadows (a distribution's, a virtualenv's), as site.py would
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    me = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
    finally:
        # the import system expects an entry under this name once this file has run
        if me is not None:
            sys.modules.setdefault("sitecustomize", me)


_moeprof_setup()
'''


def say(message: str) -> None:
    """Progress on stderr: stdout is for the report or the JSON."""
    print(f"moeprof: {message}", file=sys.stderr, flush=True)


def write_sitecustomize(folder: Path) -> Path:
    path = folder / "sitecustomize.py"
    path.write_text(SITECUSTOMIZE.replace("{port_env}", PORT_ENV))
    return path


def child_env(base: dict[str, str], site_dir: Path, port: int) -> dict[str, str]:
    """The child's environment: our sitecustomize first on PYTHONPATH, the port to serve on."""
    env = dict(base)
    existing = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(site_dir) + (os.pathsep + existing if existing else "")
    env[PORT_ENV] = str(port)
    return env


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((LOOPBACK, port)) == 0


def wait_for_server(proc: subprocess.Popen, port: int, timeout_s: float) -> None:
    """Return once ``port`` accepts connections; fail when the command exits first or never serves."""
    deadline = time.monotonic() + timeout_s
    while True:
        code = proc.poll()
        if code is not None:
            raise InputError(
                None,
                f"the command exited (code {code}) before its JAX profiler server started "
                "(does its first Python process import jax and keep running?)",
            )
        if port_in_use(port):
            return
        if time.monotonic() > deadline:
            raise InputError(
                None,
                f"no JAX profiler server on port {port} after {timeout_s:g} s "
                "(the command's first Python process must import jax; python -I/-E/-S skip sitecustomize)",
            )
        time.sleep(POLL_S)


def sleep_while_running(proc: subprocess.Popen, seconds: float) -> None:
    """Wait ``seconds`` (the warm-up), failing when the command exits meanwhile."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            code = proc.wait(timeout=min(left, 0.5))
        except subprocess.TimeoutExpired:
            continue
        raise InputError(None, f"the command exited (code {code}) during the {seconds:g} s delay, before the capture")


def stop_process(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> int:
    """SIGTERM the command's process group, SIGKILL it after ``grace_s``; returns the exit code."""
    if proc.poll() is not None:
        return int(proc.returncode)
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)  # the command runs in its own session: its children go too
        except ProcessLookupError:
            break
        try:
            return int(proc.wait(timeout=wait_s))
        except subprocess.TimeoutExpired:
            continue
    return int(proc.wait())


def capture_run(
    command: list[str],
    out: Path,
    *,
    delay_s: float = 0.0,
    duration_s: float = 2.0,
    stop: bool = False,
    port: int | None = None,
    child_stdout_to_stderr: bool = False,
    server_wait_s: float = SERVER_WAIT_S,
) -> dict:
    """Launch ``command``, capture ``duration_s`` after ``delay_s``, write trace and manifest; returns the manifest.

    The command keeps running until it exits (or is stopped with ``stop``); its
    exit code goes into the manifest, which is written once right after the
    capture and again when the command has ended.
    """
    if not command:
        raise InputError(None, "no command to run (put it after --, e.g. moeprof capture run -- python train.py)")
    if delay_s < 0:
        raise InputError(None, f"--delay must not be negative (got {delay_s:g})")
    if duration_s <= 0:
        raise InputError(None, f"--duration must be positive (got {duration_s:g})")
    if port is not None and not 0 < port < 65536:
        raise InputError(None, f"--port must be from 1 to 65535 (got {port})")
    if port is not None and port_in_use(port):
        raise InputError(None, f"port {port} is already in use; pick another --port or leave it out")
    port = port or free_port()
    with tempfile.TemporaryDirectory(prefix="moeprof-site-") as site:
        write_sitecustomize(Path(site))
        env = child_env(dict(os.environ), Path(site), port)
        try:
            # its own session: --stop and Ctrl-C reach every process of the command
            proc = subprocess.Popen(
                command, env=env, start_new_session=True, stdout=2 if child_stdout_to_stderr else None
            )
        except OSError as exc:
            raise InputError(None, f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
        try:
            wait_for_server(proc, port, server_wait_s)
            say(f"profiler server up on port {port}; capturing {duration_s:g} s into {out} after {delay_s:g} s")
            sleep_while_running(proc, delay_s)
            started = time.time()
            files = trace([f"{LOOPBACK}:{port}"], out / TRACE_DIR, duration_s)
            manifest = new_manifest(
                "run",
                command=list(command),
                port=port,
                delay_s=delay_s,
                duration_s=duration_s,
                capture_started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                traces=[str(f.relative_to(out)) for f in files],
                stopped=stop,
                exit_code=None,
            )
            write_json(out / MANIFEST, manifest)
            if stop:
                code = stop_process(proc)
            else:
                say("capture done; waiting for the command to exit (Ctrl-C stops it)")
                try:
                    code = proc.wait()
                except KeyboardInterrupt:
                    code = stop_process(proc)
                    manifest["stopped"] = True
        except BaseException:
            stop_process(proc)  # never leave the command running behind a failed capture
            raise
    manifest["exit_code"] = code
    write_json(out / MANIFEST, manifest)
    return manifest
