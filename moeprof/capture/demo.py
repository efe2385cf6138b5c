"""``moeprof capture demo``: profile the built-in MoE training step and write a run folder.

The step runs in a child process: XLA reads ``XLA_FLAGS`` (8 virtual CPU
devices) once, when jax starts, and the parent may already have imported it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from ..errors import InputError
from .runfolder import MANIFEST, TRACE_DIR, new_manifest, write_json

CHILD = "moeprof.capture.demo"


def run_child(config: dict, out: Path, host_devices: int | None) -> dict:
    """Run the demo in a fresh interpreter; returns its ``DemoResult.to_dict()``."""
    env = dict(os.environ)
    if host_devices:
        from ..demo import xla_flags_with_host_devices

        env["XLA_FLAGS"] = xla_flags_with_host_devices(host_devices, env.get("XLA_FLAGS", ""))
    result_path = out / ".demo_result.json"
    proc = subprocess.run(
        [sys.executable, "-m", CHILD, json.dumps(config), str(out / TRACE_DIR), str(result_path)],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InputError(None, f"the demo step failed: {tail[0]}")
    result = json.loads(result_path.read_text())
    result_path.unlink()
    return result


def capture_demo(out: Path, config: dict, host_devices: int | None = 8) -> Path:
    """Run the demo with a trace and write ``out/`` (trace, manifest; the caller adds the analysis)."""
    out.mkdir(parents=True, exist_ok=True)
    result = run_child(config, out, host_devices)
    records = result["records"]
    cfg = result["config"]
    tokens_per_step = cfg["tokens_per_device"] * result["device_count"]
    manifest = new_manifest(
        "demo",
        devices={"count": result["device_count"], "kind": result["device_kind"], "platform": result["platform"]},
        topology={"hosts": 1, "devices_per_host": result["device_count"], "nvlink_domain": "one host"},
        precision=cfg["dtype"],
        model=cfg,
        tokens_per_step=tokens_per_step,
        steps=len(records),
        tokens_per_second=result["tokens_per_second"],
        model_flops_per_token=result["model_flops_per_token"],
        active_params_per_token=result["active_params_per_token"],
        dispatch=result["a2a_impl"],
        dispatch_note=result["a2a_note"],
        xla_flags=result["xla_flags"],
        timings={
            "compile_s": result["compile_seconds"],
            "warmup_s": result["warmup_seconds"],
            "total_s": result["total_seconds"],
        },
        demo={"records": records},
    )
    write_json(out / MANIFEST, manifest)
    return out


def _child(config_json: str, trace_dir: str, result_path: str) -> None:
    from ..demo.model import DemoConfig, run_demo

    fields = {f.name for f in dataclasses.fields(DemoConfig)}
    config = DemoConfig(**{k: v for k, v in json.loads(config_json).items() if k in fields})
    result = run_demo(config, Path(trace_dir))
    Path(result_path).write_text(json.dumps(result.to_dict(include_hlo=False), default=str))


if __name__ == "__main__":
    _child(*sys.argv[1:4])
