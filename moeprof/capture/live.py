"""``moeprof capture live``: capture a job that already serves ``jax.profiler.start_server(port)``.

The capture client is xprof's (what ``jax/collect_profile.py`` calls): it asks every
listed profiler server for ``duration`` seconds of trace at once and writes one
XPlane per server under ``<logdir>/plugins/profile/<run>/``.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError
from .runfolder import MANIFEST, TRACE_DIR, new_manifest, write_json

LOOPBACK = "127.0.0.1"
# the options jax/collect_profile.py passes: host and device activity, Python frames at level 1
# delay_ms: the client asks the server to start at now + delay_ms; with 0 that moment has passed by the time
# the request arrives, and the server (in the job, on its stderr) logs "Profiling is late by N nanoseconds"
TRACER_OPTIONS = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 1, "delay_ms": 200}
TRACING_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 2.0
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def parse_addresses(spec: str) -> list[str]:
    """``HOST:PORT[,HOST:PORT...]`` as ``host:port`` strings; a bare ``PORT`` or ``:PORT`` is 127.0.0.1."""
    addresses: list[str] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            raise InputError(None, f"empty address in {spec!r} (expected HOST:PORT[,HOST:PORT...])")
        if item.isdigit():
            host, port_text = LOOPBACK, item
        elif item.startswith("["):  # [IPv6]:PORT
            host, sep, port_text = item[1:].partition("]:")
            if not sep or not host:
                raise InputError(None, f"bad address {item!r} (expected [IPv6]:PORT)")
            host = f"[{host}]"
        else:
            host, sep, port_text = item.rpartition(":")
            if not sep:
                raise InputError(None, f"bad address {item!r}: no port (expected HOST:PORT or PORT)")
            host = host or LOOPBACK
            if not _HOSTNAME.fullmatch(host):
                raise InputError(None, f"bad address {item!r}: {host!r} is not a host name or IPv4 address")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InputError(None, f"bad address {item!r}: the port must be a number from 1 to 65535")
        address = f"{host}:{int(port_text)}"
        if address not in addresses:
            addresses.append(address)
    return addresses


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def check_serving(addresses: list[str], timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast when an address does not accept TCP connections: the capture client would only retry."""
    for address in addresses:
        try:
            with socket.create_connection(_split(address), timeout=timeout):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise InputError(
                None,
                f"nothing is serving a profiler at {address} ({reason}); "
                "start the job with jax.profiler.start_server(PORT) and pass HOST:PORT",
            ) from None


@contextmanager
def client_output_to_file() -> Iterator[None]:
    """Send what the native client writes to fds 1 and 2 (progress, absl logs) to a scratch file.

    Stdout must carry only the report or the JSON, and a failure only our one line;
    ``MOEPROF_DEBUG=1`` lets the client's lines through.
    """
    if os.environ.get("MOEPROF_DEBUG"):
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def trace(addresses: list[str], logdir: Path, duration_s: float) -> list[Path]:
    """Capture every address at once into ``logdir``; returns the XPlane files this capture wrote."""
    from xprof.convert import _pywrap_profiler_plugin  # the native client; loads only when capturing

    logdir.mkdir(parents=True, exist_ok=True)
    before = set(logdir.glob("plugins/profile/*/*.xplane.pb"))
    duration_ms = max(1, round(duration_s * 1000))
    try:
        with client_output_to_file():
            _pywrap_profiler_plugin.trace(
                ",".join(addresses), str(logdir), "", True, duration_ms, TRACING_ATTEMPTS, dict(TRACER_OPTIONS)
            )
    except RuntimeError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(None, f"the capture from {','.join(addresses)} failed: {first}") from None
    written = sorted(set(logdir.glob("plugins/profile/*/*.xplane.pb")) - before)
    if not written:
        raise InputError(logdir, "the capture client reported success but wrote no .xplane.pb")
    return written


LIBRARY_ROUTE = (
    'profile in-process instead: run the steps inside moeprof.profile_steps("runs/mine") (or '
    "jax.profiler.trace(LOGDIR)) in the training script, then moeprof analyze the folder"
)


def tcp_refused() -> str | None:
    """Why no TCP socket can be opened here (a sandbox that allows none: errno 97), None where one can.
    ``capture run`` reaches the job's profiler over loopback TCP; the library route needs no socket."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
    except OSError as exc:
        code = f"[Errno {exc.errno}] " if exc.errno is not None else ""
        return f"OSError {code}{exc.strerror or exc}"
    return None


def refuse_without_tcp(command: str, why: str) -> None:
    """One line, exit 2, where this machine allows no TCP socket: what needs one, and the route that does not."""
    if (refused := tcp_refused()) is not None:
        said = f"{command} cannot open a TCP socket on this machine ({refused}): {why}"
        raise InputError(None, f"{said}; {LIBRARY_ROUTE}")


def capture_live(addresses: list[str], out: Path, duration_s: float) -> Path:
    """Capture the running job at ``addresses`` into the run folder ``out`` (trace and manifest)."""
    if duration_s <= 0:
        raise InputError(None, f"--duration must be positive (got {duration_s:g})")
    refuse_without_tcp("capture live", "it reaches the job's profiler servers over TCP")
    check_serving(addresses)
    print(f"moeprof: capturing {duration_s:g} s from {','.join(addresses)} into {out}", file=sys.stderr, flush=True)
    files = trace(addresses, out / TRACE_DIR, duration_s)
    manifest = new_manifest(
        "live",
        addresses=addresses,
        duration_s=duration_s,
        traces=[str(f.relative_to(out)) for f in files],
        topology={"hosts": len(files)},
    )
    write_json(out / MANIFEST, manifest)
    return out
