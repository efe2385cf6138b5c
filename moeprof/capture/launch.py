"""``moeprof capture run``: launch a training command with the JAX profiler on, capture a window of it.

The user's script is not edited: a generated ``sitecustomize.py``, first on the
child's ``PYTHONPATH``, starts the profiler in the first Python process of the
command: by default a listener on 127.0.0.1 only that traces the process when
moeprof asks; with host 0.0.0.0, ``jax.profiler.start_server(port)`` (every
interface). It starts once that process imports jax, not at interpreter start, so
environment a script sets before ``import jax`` (``JAX_PLATFORMS``, ``XLA_FLAGS``)
and ``jax.distributed.initialize()`` still work.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import InputError
from ..stopping import terminated
from .live import LOOPBACK, refuse_without_tcp, trace
from .runfolder import MANIFEST, TRACE_DIR, new_manifest, write_json

PORT_ENV = "MOEPROF_PROFILER_PORT"
HOST_ENV = "MOEPROF_PROFILER_HOST"
DIR_ENV = "MOEPROF_PROFILER_DIR"
KEY_ENV = "MOEPROF_PROFILER_KEY"
ALL_INTERFACES = "0.0.0.0"
SERVER_WAIT_S = 300.0  # jax import, data loading before it: minutes at worst
BACKEND_WAIT_S = 300.0  # after the delay, until the job has a JAX backend to trace
EXPORT_WAIT_S = 300.0  # after the window, for the job to write the trace
STOP_GRACE_S = 10.0
POLL_S = 0.1
CONNECT_TIMEOUT_S = 2.0

# The child's side. jax.profiler.start_server binds "[::]:port" (xla/tsl/profiler/rpc/profiler_server.cc)
# whatever one asks: every interface, with no address argument, environment variable or gRPC option to
# narrow it. So by default the job serves no gRPC profiler at all: a thread of the job listens on
# 127.0.0.1 only and, asked by moeprof with the key moeprof gave it, traces the job's process with
# jax.profiler.start_trace/stop_trace into the run folder. Only --profiler-host 0.0.0.0 starts jax's own
# server (every interface), for jobs that other hosts capture with `capture live`.
SITECUSTOMIZE = r'''"""Written by moeprof capture run: serve the JAX profiler in this process once it imports jax."""
import os
import sys


def _moeprof_trace(logdir, duration_s, wait_s):
    """Trace this process for duration_s seconds into logdir; returns None, or what went wrong."""
    import time

    import jax

    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:
        backends_are_initialized = None
    # start_trace initializes a backend when there is none; the job's own jax.distributed.initialize()
    # and platform choice must come first, so wait for the job to make one
    deadline = time.monotonic() + wait_s
    while backends_are_initialized is not None and not backends_are_initialized():
        if time.monotonic() > deadline:
            return f"the job initialized no JAX backend within {wait_s:g} s after the delay"
        time.sleep(0.05)
    options_type = getattr(jax.profiler, "ProfileOptions", None)
    try:
        if options_type is None:
            jax.profiler.start_trace(logdir)
        else:
            options = options_type()
            # what jax/collect_profile.py asks of a profiler server: host activity at level 2, Python at 1
            options.host_tracer_level = 2
            options.python_tracer_level = 1
            jax.profiler.start_trace(logdir, profiler_options=options)
    except Exception as exc:
        return f"jax.profiler.start_trace failed: {type(exc).__name__}: {exc}"
    try:
        time.sleep(duration_s)
    finally:
        try:
            jax.profiler.stop_trace()
        except Exception as exc:
            return f"jax.profiler.stop_trace failed: {type(exc).__name__}: {exc}"
    return None


def _moeprof_serve_loopback(port, logdir, key):
    import hmac
    import json
    import socket
    import threading

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # as gRPC's server does: a port a previous run's connections left in TIME_WAIT can be bound again
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(8)

    def answer(conn):
        with conn:
            try:
                conn.settimeout(10)
                request = b""
                while not request.endswith(b"\n") and len(request) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return  # moeprof's check that the port is up: connect, close
                    request += chunk
                asked = json.loads(request)
                if not hmac.compare_digest(str(asked.get("key", "")).encode(), key.encode()):
                    return
                conn.settimeout(None)
                error = _moeprof_trace(logdir, float(asked["duration_s"]), float(asked["wait_s"]))
                conn.sendall((json.dumps({"error": error}) + "\n").encode())
            except Exception:
                return

    def serve():
        while True:
            conn, _ = server.accept()
            threading.Thread(target=answer, args=(conn,), name="moeprof-profiler", daemon=True).start()

    threading.Thread(target=serve, name="moeprof-profiler", daemon=True).start()


def _moeprof_start(port, host, logdir, key):
    try:
        if host == "{all_interfaces}":
            import jax.profiler

            try:
                # no backend yet: jax.distributed.initialize() and platform choice stay the script's own
                jax.profiler.start_server(port, requires_backend=False)
            except TypeError:  # jax without requires_backend
                jax.profiler.start_server(port)
        else:
            _moeprof_serve_loopback(port, logdir, key)
    except Exception as exc:
        sys.stderr.write(f"moeprof: could not start the JAX profiler on port {port}: {exc}\n")


def _moeprof_after_jax(start):
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
                start()

            spec.loader.exec_module = exec_then_start
            return spec

    sys.meta_path.insert(0, AfterJax())


def _moeprof_setup():
    here = os.path.dirname(os.path.abspath(__file__))
    # only the first Python process of the command serves: its children must not bind the same port
    # (nor see the key)
    port = os.environ.pop("{port_env}", None)
    host = os.environ.pop("{host_env}", "127.0.0.1")
    logdir = os.environ.pop("{dir_env}", "")
    key = os.environ.pop("{key_env}", "")
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

        def start():
            _moeprof_start(int(port), host, logdir, key)

        if "jax" in sys.modules:
            start()
        else:
            _moeprof_after_jax(start)
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
    text = SITECUSTOMIZE
    for placeholder, value in (
        ("{port_env}", PORT_ENV),
        ("{host_env}", HOST_ENV),
        ("{dir_env}", DIR_ENV),
        ("{key_env}", KEY_ENV),
        ("{all_interfaces}", ALL_INTERFACES),
    ):
        text = text.replace(placeholder, value)
    path.write_text(text)
    return path


def child_env(
    base: dict[str, str],
    site_dir: Path,
    port: int,
    host: str = LOOPBACK,
    logdir: Path | None = None,
    key: str = "",
) -> dict[str, str]:
    """The child's environment: our sitecustomize first on PYTHONPATH; the port, bind, trace folder and key."""
    env = dict(base)
    existing = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(site_dir) + (os.pathsep + existing if existing else "")
    env[PORT_ENV] = str(port)
    env[HOST_ENV] = host
    env[DIR_ENV] = str(logdir or "")
    env[KEY_ENV] = key
    return env


def profiler_host(host: str) -> str:
    """``127.0.0.1`` (this host only) or ``0.0.0.0`` (every interface): the two binds moeprof can keep."""
    if host in (LOOPBACK, "localhost"):
        return LOOPBACK
    if host == ALL_INTERFACES:
        return ALL_INTERFACES
    raise InputError(
        None,
        f"--profiler-host must be 127.0.0.1 (the default) or 0.0.0.0 (got {host!r}): "
        "jax.profiler.start_server cannot bind one address, only every interface",
    )


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


def trace_in_process(
    proc: subprocess.Popen,
    port: int,
    key: str,
    logdir: Path,
    duration_s: float,
    backend_wait_s: float = BACKEND_WAIT_S,
    export_wait_s: float = EXPORT_WAIT_S,
) -> list[Path]:
    """Ask the job's loopback profiler thread for ``duration_s`` of trace into ``logdir``; returns the XPlanes."""
    logdir.mkdir(parents=True, exist_ok=True)
    before = set(logdir.glob("plugins/profile/*/*.xplane.pb"))
    request = json.dumps({"key": key, "duration_s": duration_s, "wait_s": backend_wait_s}) + "\n"
    deadline = time.monotonic() + backend_wait_s + duration_s + export_wait_s
    answer = b""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=CONNECT_TIMEOUT_S) as sock:
            sock.sendall(request.encode())
            sock.settimeout(POLL_S * 5)
            while not answer.endswith(b"\n"):
                try:
                    chunk = sock.recv(4096)
                except TimeoutError:
                    if proc.poll() is not None:
                        raise InputError(
                            None, f"the command exited (code {proc.returncode}) during the capture"
                        ) from None
                    if time.monotonic() > deadline:
                        raise InputError(
                            None, f"no trace from the job's profiler on {LOOPBACK}:{port} in time"
                        ) from None
                    continue
                if not chunk:
                    break
                answer += chunk
    except OSError as exc:
        raise InputError(None, f"the capture from {LOOPBACK}:{port} failed: {exc.strerror or exc}") from None
    if not answer.endswith(b"\n"):
        code = proc.poll()
        exited = f"the command exited (code {code})" if code is not None else "the job closed the connection"
        raise InputError(None, f"{exited} during the capture, before its trace was written")
    try:
        error = json.loads(answer).get("error")
    except (ValueError, AttributeError):
        error = f"unreadable answer {answer[:80]!r}"
    if error:
        raise InputError(None, f"the capture in the job failed: {error}")
    written = sorted(set(logdir.glob("plugins/profile/*/*.xplane.pb")) - before)
    if not written:
        raise InputError(logdir, "the job reported a finished trace but wrote no .xplane.pb")
    return written


def capture_run(
    command: list[str],
    out: Path,
    *,
    delay_s: float = 0.0,
    duration_s: float = 2.0,
    stop: bool = False,
    port: int | None = None,
    host: str = LOOPBACK,
    child_stdout_to_stderr: bool = False,
    server_wait_s: float = SERVER_WAIT_S,
) -> dict:
    """Launch ``command``, capture ``duration_s`` after ``delay_s``, write trace and manifest; returns the manifest.

    ``host`` 127.0.0.1 (the default): the job's profiler listens on loopback only and traces itself
    when asked; 0.0.0.0: the job serves ``jax.profiler.start_server(port)`` on every interface, and
    other hosts can capture it too. The command keeps running until it exits (or is stopped with
    ``stop``); its exit code goes into the manifest, which is written once right after the capture and
    again when the command has ended.
    """
    if not command:
        raise InputError(None, "no command to run (put it after --, e.g. moeprof capture run -- python train.py)")
    if delay_s < 0:
        raise InputError(None, f"--delay must not be negative (got {delay_s:g})")
    if duration_s <= 0:
        raise InputError(None, f"--duration must be positive (got {duration_s:g})")
    if port is not None and not 0 < port < 65536:
        raise InputError(None, f"--port must be from 1 to 65535 (got {port})")
    refuse_without_tcp("capture run", "it talks to the job's profiler over loopback")
    if port is not None and port_in_use(port):
        raise InputError(None, f"port {port} is already in use; pick another --port or leave it out")
    host = profiler_host(host)
    port = port or free_port()
    logdir = out.resolve() / TRACE_DIR  # absolute: the job may change its working directory
    key = secrets.token_hex(16)  # other users of this host can reach loopback too: only moeprof has the key
    with tempfile.TemporaryDirectory(prefix="moeprof-site-") as site:
        write_sitecustomize(Path(site))
        env = child_env(dict(os.environ), Path(site), port, host=host, logdir=logdir, key=key)
        try:
            # its own session: --stop and Ctrl-C reach every process of the command
            proc = subprocess.Popen(
                command, env=env, start_new_session=True, stdout=2 if child_stdout_to_stderr else None
            )
        except OSError as exc:
            raise InputError(None, f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
        try:
            wait_for_server(proc, port, server_wait_s)
            say(f"profiler up on {host}:{port}; capturing {duration_s:g} s into {out} after {delay_s:g} s")
            sleep_while_running(proc, delay_s)
            started = time.time()
            if host == LOOPBACK:
                files = trace_in_process(proc, port, key, logdir, duration_s)
            else:
                files = trace([f"{LOOPBACK}:{port}"], logdir, duration_s)
            manifest = new_manifest(
                "run",
                command=list(command),
                port=port,
                profiler_host=host,
                delay_s=delay_s,
                duration_s=duration_s,
                capture_started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                traces=[str(f.relative_to(logdir.parent)) for f in files],
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
                    if terminated():  # SIGTERM, SIGHUP: moeprof ends too, the capture kept (not analyzed)
                        manifest["exit_code"] = code
                        write_json(out / MANIFEST, manifest)
                        raise
        except BaseException:
            stop_process(proc)  # never leave the command running behind a failed capture
            raise
    manifest["exit_code"] = code
    write_json(out / MANIFEST, manifest)
    return manifest
