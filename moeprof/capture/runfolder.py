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
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from ..core.analysis import Analysis
from ..outputs import write_text
from ..pipeline import Request, run, with_throughput
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
# The environment the manifest records: variables known to change what a step does on accelerators,
# by exact name or, ending in "*", by prefix. An allow-list, not prefixes like "TF_" or "CUDA_": a run
# folder is meant to be shared, and such prefixes also catch credentials (Terraform's TF_TOKEN_*).
# docs/capture.md lists them; keep the two in step.
ENV_RECORDED = (
    # XLA and JAX
    "XLA_FLAGS",
    "XLA_PYTHON_CLIENT_*",
    "XLA_CLIENT_MEM_FRACTION",
    "JAX_*",
    "LIBTPU_INIT_ARGS",
    "TPU_VISIBLE_CHIPS",
    "TPU_PROCESS_BOUNDS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_ACCELERATOR_TYPE",
    "TF_CPP_*",  # TSL logging inside XLA: verbose logging slows a step
    "TF_GPU_ALLOCATOR",  # cuda_malloc_async, which XLA's GPU client also honours
    # communication libraries: every variable of theirs is a configuration knob
    "NCCL_*",
    "RCCL_*",
    "TORCH_NCCL_*",
    "NVSHMEM_*",
    # devices, streams and allocators
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HSA_ENABLE_SDMA",
    "GPU_MAX_HW_QUEUES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "NVTE_*",  # Transformer Engine kernels (fused attention, FP8)
)
# a recorded variable whose name holds one of these words keeps its name, never its value
SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL")
REDACTED = "<redacted>"


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


def is_recorded(name: str) -> bool:
    """Whether the manifest records the environment variable ``name`` (see ``ENV_RECORDED``)."""
    return any(name.startswith(item[:-1]) if item.endswith("*") else name == item for item in ENV_RECORDED)


def recorded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed variables of ``environ``, sorted, with the value of secret-looking names redacted."""
    return {
        name: REDACTED if any(word in name.upper() for word in SECRET_WORDS) else value
        for name, value in sorted(environ.items())
        if is_recorded(name)
    }


def environment() -> dict:
    """Versions and the relevant environment of this process."""
    env = recorded_env(os.environ)
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
    """``path`` holds ``obj`` as JSON, whole, or is left as it was (a full disk never truncates analysis.json)."""
    write_text(path, json.dumps(obj, indent=1, default=str) + "\n")


def analyze_run_folder(
    out: Path,
    model: str | None = None,
    tokens_per_step: int | None = None,
    seq_len: int = 4096,
    job_devices: int | None = None,
) -> Analysis:
    """Analyze a run folder just written and store ``analysis.json`` beside its trace.

    The throughput (tokens/s, TFLOPS per device, MFU where the device's peak is known) also goes
    into the manifest, so the run's reproduction record carries it: from ``model`` and
    ``tokens_per_step`` when given, else from what the capture recorded (the demo knows its FLOPs).
    """
    result = run(Request([out])).analysis
    manifest = read_manifest(out) or {}
    if model and tokens_per_step:
        result = with_throughput(result, model, tokens_per_step, seq_len, job_devices=job_devices)
        figures = dict(result.throughput or {})
        manifest.update(
            tokens_per_second=figures.get("tokens_per_second"),
            model_flops_per_token=figures.get("model_flops_per_token"),
            tokens_per_step=tokens_per_step,
        )
        manifest.setdefault("devices", {}).setdefault("count", job_devices or len(result.devices))
    if result.throughput:
        manifest["throughput"] = dict(result.throughput)
        write_json(out / MANIFEST, manifest)
        result = result.with_(manifest=manifest)
    write_json(out / ANALYSIS, result.to_json())
    return result
