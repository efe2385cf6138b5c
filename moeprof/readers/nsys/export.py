"""Raw ``.nsys-rep`` reports: exported to SQLite by ``nsys export`` (when nsys is on PATH) into a private
folder, with a timeout sized by the report, a stop that takes the export's whole process group, and an
exit by signal told apart from a failure."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from ...core.trace import Trace
from ...errors import InputError
from .sqlite import parse_sqlite
from .tables import report_stem

# `nsys export` of a .nsys-rep: how long before a hung export is killed. Generous, sized by the report
# (exports of large reports run for minutes): a base plus a second per MiB; the variable overrides it.
EXPORT_TIMEOUT_ENV = "MOEPROF_NSYS_EXPORT_TIMEOUT"


EXPORT_TIMEOUT_BASE_S = 300.0


EXPORT_TIMEOUT_S_PER_MIB = 1.0


def parse_report(path: Path, host_index: int, step_marker: re.Pattern[str] | None = None) -> Trace:
    nsys = shutil.which("nsys")
    stem = report_stem(path)
    if nsys is None:
        raise InputError(
            path,
            "is a raw Nsight Systems report and nsys is not on PATH; export it first: "
            f"nsys export --type sqlite --output {stem}.sqlite {path}",
        )
    timeout_s = export_timeout(path)
    # export into a private folder: nothing is ever written beside the user's report
    with tempfile.TemporaryDirectory(prefix="moeprof-nsys-") as tmp:
        out = Path(tmp) / "x.sqlite"
        # output to a file, not a pipe: a killed export's own children could hold a pipe open
        with open(Path(tmp) / "export.log", "w+", encoding="utf-8", errors="replace") as log:
            proc: subprocess.Popen[bytes] | None = None
            try:
                # its own process group: on a timeout the export and everything it started are killed. Started
                # inside the try: a Ctrl-C that lands just after it started (before the wait) still names it
                proc = subprocess.Popen(
                    [nsys, "export", "--type", "sqlite", "--output", str(out), str(path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
                code = proc.wait(timeout=timeout_s)
            except KeyboardInterrupt:
                # the export runs in its own session, so Ctrl-C reached only us: say what it stopped
                raise KeyboardInterrupt(f"during nsys export of {path}; the export was stopped") from None
            except subprocess.TimeoutExpired:
                raise InputError(
                    path,
                    f"nsys export did not finish in {timeout_s:g} s and was stopped; "
                    f"set {EXPORT_TIMEOUT_ENV}=SECONDS to wait longer, or export it yourself: "
                    f"nsys export --type sqlite --output {stem}.sqlite {path}",
                ) from None
            finally:
                if proc is not None and proc.poll() is None:  # timed out, or interrupted (Ctrl-C)
                    _kill_group(proc)
            log.seek(0)
            lines = log.read().strip().splitlines()
        stopped_by = signal_of(code)
        if stopped_by is not None:
            raise InputError(
                path,
                f"nsys export was interrupted ({stopped_by}) before it finished; run it again, or export it "
                f"yourself: nsys export --type sqlite --output {stem}.sqlite {path}",
            )
        if code != 0 or not out.exists():
            raise InputError(path, f"nsys export failed: {lines[-1] if lines else f'exit code {code}'}")
        return parse_sqlite(out, path, stem, host_index, step_marker)


# exit codes that say a process was stopped by a signal, not that it failed: killed by it (negative, from
# Popen) or a shell's 128 + signal for the interrupt, quit and termination signals
_STOPPING_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP)


def signal_of(code: int | None) -> str | None:
    """The signal's name when an exit code says the process was interrupted or terminated by one, else None."""
    if code is None:
        return None
    number = -code if code < 0 else code - 128 if code > 128 else 0
    if number <= 0:
        return None
    try:
        sig = signal.Signals(number)
    except ValueError:
        return f"signal {number}" if code < 0 else None
    return sig.name if code < 0 or sig in _STOPPING_SIGNALS else None


def export_timeout(report: Path, environ: dict[str, str] | None = None) -> float:
    """Seconds ``nsys export`` of ``report`` may take: ``MOEPROF_NSYS_EXPORT_TIMEOUT``, else sized by the report."""
    environ = dict(os.environ) if environ is None else environ
    override = environ.get(EXPORT_TIMEOUT_ENV, "").strip()
    if override:
        try:
            seconds = float(override)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds < float("inf"):
            raise InputError(None, f"{EXPORT_TIMEOUT_ENV} must be a positive number of seconds (got {override!r})")
        return seconds
    try:
        size = report.stat().st_size
    except OSError:
        size = 0
    return EXPORT_TIMEOUT_BASE_S + EXPORT_TIMEOUT_S_PER_MIB * size / 2**20


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
