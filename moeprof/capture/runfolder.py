"""The run folder every capture writes: the trace(s), ``manifest.json`` and ``analysis.json``.

The manifest is the reproduction record a credible before/after comparison
needs: devices and topology, software versions, the XLA/NCCL environment,
precision and model config, throughput and, for the demo, the per-step
correctness gates.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from ..core.analysis import Analysis
from ..pipeline import analyze_paths, with_throughput
from ..readers.runfolder import ANALYSIS, MANIFEST, MANIFEST_SCHEMA, TRACE_DIR, read_manifest

__all__ = [
    "ANALYSIS",
    "MANIFEST",
    "MANIFEST_SCHEMA",
    "TRACE_DIR",
    "analyze_run_folder",
    "new_manifest",
    "read_manifest",
    "write_json",
]
# environment that changes what a step does on GPUs
ENV_PREFIXES = ("XLA_", "NCCL_", "JAX_", "CUDA_", "NVSHMEM_", "TF_", "LIBTPU_", "TPU_")


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _nvidia_smi() -> dict:
    """Driver and CUDA version from nvidia-smi, where it exists (never fails)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    names = [line.split(",")[0].strip() for line in out.stdout.strip().splitlines()]
    driver = out.stdout.strip().splitlines()[0].split(",")[-1].strip()
    return {"gpu_names": names, "driver": driver}


def environment() -> dict:
    """Versions and the relevant environment of this process."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    versions = {
        "moeprof": package_version("moeprof"),
        "python": platform.python_version(),
        "jax": package_version("jax"),
        "jaxlib": package_version("jaxlib"),
        "xprof": package_version("xprof"),
        "jax_cuda_plugin": package_version("jax-cuda12-plugin") or package_version("jax-cuda13-plugin"),
        "nvidia_nccl": package_version("nvidia-nccl-cu12") or package_version("nvidia-nccl-cu13"),
        "nvidia_cuda_runtime": package_version("nvidia-cuda-runtime-cu12") or package_version("nvidia-cuda-runtime"),
    }
    return {
        "versions": {k: v for k, v in versions.items() if v},
        "env": env,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        **({"nvidia_smi": smi} if (smi := _nvidia_smi()) else {}),
    }


def new_manifest(kind: str, command: list[str] | None = None, **fields: object) -> dict:
    return {
        "schema": MANIFEST_SCHEMA,
        "kind": kind,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command if command is not None else sys.argv,
        **environment(),
        **fields,
    }


def write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=1, default=str) + "\n")


def analyze_run_folder(
    out: Path,
    model: str | None = None,
    tokens_per_step: int | None = None,
    seq_len: int = 4096,
    job_devices: int | None = None,
) -> Analysis:
    """Analyze a run folder just written and store ``analysis.json`` beside its trace.

    With a model and tokens per step, the throughput also goes into the manifest, so a later
    ``moeprof analyze``/``diff`` of the folder has it.
    """
    result = analyze_paths([out])
    if model and tokens_per_step:
        result = with_throughput(result, model, tokens_per_step, seq_len, job_devices=job_devices)
        figures = dict(result.throughput or {})
        manifest = read_manifest(out) or {}
        manifest.update(
            throughput=figures,
            tokens_per_second=figures.get("tokens_per_second"),
            model_flops_per_token=figures.get("model_flops_per_token"),
            tokens_per_step=tokens_per_step,
        )
        manifest.setdefault("devices", {}).setdefault("count", job_devices or len(result.devices))
        write_json(out / MANIFEST, manifest)
        result = result.with_(manifest=manifest)
    write_json(out / ANALYSIS, result.to_json())
    return result
