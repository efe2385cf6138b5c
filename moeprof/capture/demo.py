"""``moeprof capture demo``: profile the built-in MoE training step and write a run folder.

The step runs in a child process: XLA reads ``XLA_FLAGS`` (8 virtual CPU
devices) once, when jax starts, and the parent may already have imported it.

The child's stderr comes back through a pipe. Lines it marks as progress are
passed on (to ``progress``); everything else (jax/XLA logging such as absl
``W...`` lines) is kept aside: it goes to ``demo_stderr.log`` in the run folder,
error-level absl lines are also shown, and on failure the log is named in the
one-line error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InputError
from .runfolder import MANIFEST, TRACE_DIR, new_manifest, write_json

CHILD = "moeprof.capture.demo"
PROGRESS_MARK = "moeprof-demo-progress: "  # child -> parent; never shown as is
REFUSED_MARK = "moeprof-demo-refused: "  # child -> parent: the config cannot run on these devices (in option names)
CHILD_LOG = "demo_stderr.log"
# absl/glog prefix of an ERROR or FATAL line ("E1201 05:22:23.895918   10079 file.cc:125] ...")
_ABSL_ERROR = re.compile(r"^[EF]\d{4} \d\d:\d\d:\d\d")
_ABSL_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")


# JAX's note after an exception it filtered ("For simplicity, JAX has removed its internal frames...") and the
# rule above it: context, not the error
_JAX_NOTE = re.compile(r"^(-{5,}|For simplicity, JAX has removed its internal frames\b.*)$")


def _last_message(lines: list[str]) -> str:
    # the Python exception line if there is one; absl log lines and JAX's trailing note are context, not the cause
    meaningful = [line for line in lines if line.strip() and not _ABSL_LINE.match(line) and not _JAX_NOTE.match(line)]
    return (meaningful or lines or ["no output"])[-1].strip()


class DemoRefused(InputError):
    """The child found the config unable to run on its devices (a count the parent cannot know)."""

    def __init__(self, problem: str) -> None:
        super().__init__(None, problem)

    def __reduce__(self) -> tuple[type[DemoRefused], tuple[str]]:  # type: ignore[override]
        return (DemoRefused, (self.problem,))


def run_child(config: dict, out: Path, host_devices: int | None, progress: Callable[[str], None] | None = None) -> dict:
    """Run the demo in a fresh interpreter; returns its ``DemoResult.to_dict()``."""
    env = dict(os.environ)
    if host_devices:
        from ..demo import xla_flags_with_host_devices

        env["XLA_FLAGS"] = xla_flags_with_host_devices(host_devices, env.get("XLA_FLAGS", ""))
    result_path = out / ".demo_result.json"
    log_path = out / CHILD_LOG
    log_path.unlink(missing_ok=True)
    other: list[str] = []
    refused: list[str] = []
    proc = subprocess.Popen(
        [sys.executable, "-m", CHILD, json.dumps(config), str(out / TRACE_DIR), str(result_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert proc.stderr is not None
    try:
        with proc.stderr:
            for line in proc.stderr:
                if line.startswith(PROGRESS_MARK):
                    if progress:
                        progress(line[len(PROGRESS_MARK) :].rstrip())
                    continue
                if line.startswith(REFUSED_MARK):
                    refused.append(line[len(REFUSED_MARK) :].rstrip())
                    continue
                other.append(line.rstrip("\n"))
                if _ABSL_ERROR.match(line):
                    print(line.rstrip(), file=sys.stderr, flush=True)
        code = proc.wait()
    except BaseException:  # Ctrl-C (which reached the child too): it stops now, before its files are removed
        proc.kill()
        proc.wait()
        raise
    if refused:
        raise DemoRefused(refused[-1])
    if other:
        log_path.write_text("\n".join(other) + "\n")
    if code != 0:
        where = f" (its output: {log_path})" if other else ""
        raise InputError(None, f"the demo step failed: {_last_message(other)}{where}")
    result = json.loads(result_path.read_text())
    result_path.unlink()
    return result


def capture_demo(
    out: Path, config: dict, host_devices: int | None = 8, progress: Callable[[str], None] | None = None
) -> Path:
    """Run the demo with a trace and write ``out/`` (trace, manifest; the caller adds the analysis).

    Interrupted (Ctrl-C), it leaves nothing behind: what it wrote is removed, and the folders it made
    (``runs/demo-<time>``, ``runs`` if new) too."""
    made = [d for d in (out, *out.parents) if not d.exists()]
    before = set(out.iterdir()) if out.is_dir() else set()
    out.mkdir(parents=True, exist_ok=True)
    try:
        result = run_child(config, out, host_devices, progress)
    except (KeyboardInterrupt, DemoRefused):  # nothing of the run is worth keeping: no folder is left
        _remove_new(out, before, made)
        raise
    write_json(out / MANIFEST, demo_manifest(result))
    return out


def demo_manifest(result: dict, command: list[str] | None = None) -> dict:
    """The run folder's manifest of a demo run (``DemoResult.to_dict()``): model, routing, load, timings."""
    records = result["records"]
    cfg = result["config"]
    tokens_per_step = cfg["tokens_per_device"] * result["device_count"]
    return new_manifest(
        "demo",
        command,
        devices={"count": result["device_count"], "kind": result["device_kind"], "platform": result["platform"]},
        topology=demo_topology(result["platform"], result["device_count"]),
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
        demo={
            "router_skew": cfg["router_skew"],
            "expert_compute": result["expert_impl"],
            "expert_compute_note": result["expert_note"],
            "expert_scope": result["expert_scope"],
            "expert_ops": result["expert_ops"],
            "load": result["load"],
            "records": records,
        },
    )


def demo_topology(platform: str, devices: int) -> dict:
    """The manifest's topology: one host; its scale-up domain is the fabric of the platform (a TPU's chips
    are one ICI slice; GPUs and XLA:CPU devices keep the one-host NVLink domain they were recorded with)."""
    domain = {"ici_domain": "one slice"} if platform.lower() == "tpu" else {"nvlink_domain": "one host"}
    return {"hosts": 1, "devices_per_host": devices, **domain}


def _remove_new(out: Path, before: set[Path], made: list[Path]) -> None:
    """Remove what a capture added to ``out`` and the folders it made (deepest first, where left empty)."""
    for entry in set(out.iterdir()) - before if out.is_dir() else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    for folder in made:
        try:
            folder.rmdir()
        except OSError:  # not empty (something else wrote there): kept
            break


def _child(config_json: str, trace_dir: str, result_path: str) -> None:
    import jax

    from ..demo.config import OPTION_NAMES, DemoConfigError, checked, from_fields, sized_for
    from ..demo.model import make_mesh, run_demo

    def progress(message: str) -> None:
        print(PROGRESS_MARK + message, file=sys.stderr, flush=True)

    platform = jax.devices()[0].platform
    given = sized_for(platform, json.loads(config_json))
    if platform != "cpu":
        progress(f"sized for the {platform.upper()}: " + ", ".join(f"{k} {given[k]}" for k in sorted(given)))
    config = from_fields(given)
    try:  # the checks that need the device count, in the command's option names
        checked(config, make_mesh(config).size, OPTION_NAMES)
    except (DemoConfigError, ValueError) as exc:
        print(REFUSED_MARK + str(exc), file=sys.stderr, flush=True)
        sys.exit(2)
    result = run_demo(config, Path(trace_dir), progress)
    doc: dict[str, Any] = result.to_dict(include_hlo=False)
    Path(result_path).write_text(json.dumps(doc, default=str))


if __name__ == "__main__":
    _child(*sys.argv[1:4])
