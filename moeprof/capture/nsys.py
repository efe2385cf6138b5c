"""``moeprof capture nsys``: run a command under Nsight Systems and export the report to SQLite.

NCCL marks its calls with NVTX ranges by default; those ranges are how the
reader names the collective behind each NCCL kernel, so ``NCCL_NVTX_DISABLE``
must not be set for the job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import InputError
from ..readers.nsys import signal_of
from .runfolder import MANIFEST, TRACE_DIR, new_manifest, write_json

REPORT_STEM = "report"


def build_nsys_profile_command(
    command: list[str], output: Path, *, capture_range: bool = False, nsys: str = "nsys"
) -> list[str]:
    """``nsys profile`` for ``command``, writing ``<output>.nsys-rep``.

    ``capture_range`` records only between ``cudaProfilerStart`` and ``cudaProfilerStop``
    (the job brackets the steps it wants), and stops the capture at the first stop.
    """
    args = [nsys, "profile", "--trace=cuda,nvtx,osrt", "--force-overwrite=true", "--output", str(output)]
    if capture_range:
        args += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    return [*args, "--", *command]


def build_nsys_export_command(report: Path, sqlite: Path, *, nsys: str = "nsys") -> list[str]:
    """``nsys export`` of ``report`` (``.nsys-rep``) to the SQLite file ``sqlite``."""
    return [nsys, "export", "--type", "sqlite", "--force-overwrite=true", "--output", str(sqlite), str(report)]


def nvtx_disabled(env: dict[str, str]) -> bool:
    return env.get("NCCL_NVTX_DISABLE", "").strip() not in ("", "0")


def capture_nsys(
    command: list[str], out: Path, *, capture_range: bool = False, child_stdout_to_stderr: bool = False
) -> dict:
    """Profile ``command`` with nsys, export to SQLite, write the manifest; returns the manifest."""
    if not command:
        raise InputError(None, "no command to run (put it after --, e.g. moeprof capture nsys -- python train.py)")
    nsys = shutil.which("nsys")
    if nsys is None:
        raise InputError(None, "nsys (Nsight Systems) is not on PATH; install it or use moeprof capture run")
    if nvtx_disabled(dict(os.environ)):
        print(
            "moeprof: warning: NCCL_NVTX_DISABLE is set: NCCL kernels will not be named by their collective",
            file=sys.stderr,
        )
    trace_dir = out / TRACE_DIR
    trace_dir.mkdir(parents=True, exist_ok=True)
    base = trace_dir / REPORT_STEM
    report = base.with_name(REPORT_STEM + ".nsys-rep")
    sqlite = base.with_name(REPORT_STEM + ".sqlite")
    profile = build_nsys_profile_command(command, base, capture_range=capture_range, nsys=nsys)
    # nsys returns the application's exit code: the report decides whether the capture worked
    code = subprocess.run(profile, check=False, stdout=2 if child_stdout_to_stderr else None).returncode
    if not report.is_file():
        raise InputError(report, f"nsys profile wrote no report (exit code {code})")
    try:
        export = subprocess.run(
            build_nsys_export_command(report, sqlite, nsys=nsys), capture_output=True, text=True, check=False
        )
    except KeyboardInterrupt:
        # Ctrl-C reaches the export too (one process group); run() has waited for it and re-raised
        raise KeyboardInterrupt(f"during nsys export of {report}; the report is kept, export it again") from None
    stopped_by = signal_of(export.returncode)
    if stopped_by is not None:
        raise InputError(
            report,
            f"nsys export was interrupted ({stopped_by}) before it finished; the report is kept: "
            f"{' '.join(build_nsys_export_command(report, sqlite))}",
        )
    if export.returncode != 0 or not sqlite.is_file():
        lines = (export.stderr or export.stdout or "").strip().splitlines()
        raise InputError(report, f"nsys export failed: {lines[-1] if lines else f'exit code {export.returncode}'}")
    manifest = new_manifest(
        "nsys",
        command=list(command),
        nsys_command=profile,
        capture_range=capture_range,
        traces=[str(sqlite.relative_to(out))],
        report=str(report.relative_to(out)),
        exit_code=code,
    )
    write_json(out / MANIFEST, manifest)
    return manifest
