"""``moeprof capture ...``: profile a step and analyze it in one go; every capture writes a run folder."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from ..analysis import AnalysisResult, analyze_paths
from ..capture.runfolder import ANALYSIS, write_json
from ..reports import terminal
from ..reports.json_report import to_json
from .common import guarded

app = typer.Typer(help="Profile a MoE training step and analyze it (writes a run folder).", no_args_is_help=True)

OutOption = Annotated[
    Path | None, typer.Option("--out", "-o", help="Run folder to write (default runs/<kind>-<time>).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the analysis JSON instead of the report.")]


def default_out(kind: str) -> Path:
    return Path("runs") / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


def finish_run(out: Path, as_json: bool) -> AnalysisResult:
    """Analyze the run folder just written, store analysis.json beside the trace, show the report."""
    result = analyze_paths([out])
    write_json(out / ANALYSIS, result.to_dict())
    if as_json:
        typer.echo(to_json(result))
    else:
        terminal.render(result)
        typer.echo(f"run folder: {out}  (moeprof analyze {out})", err=True)
    return result


@app.command("demo")
def demo_command(
    out: OutOption = None,
    devices: Annotated[int, typer.Option(help="Virtual CPU devices when no accelerator is present.")] = 8,
    experts: Annotated[int | None, typer.Option(help="Routed experts (default 16).")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="Experts per token (default 2).")] = None,
    tokens: Annotated[int | None, typer.Option(help="Tokens per device per step (default 256).")] = None,
    hidden: Annotated[int | None, typer.Option(help="Model width (default 64).")] = None,
    expert_ffn: Annotated[int | None, typer.Option("--expert-ffn", help="Expert FFN width (default 128).")] = None,
    layers: Annotated[int | None, typer.Option(help="MoE layers (default 2).")] = None,
    router: Annotated[str | None, typer.Option(help="sigmoid (DeepSeek-V3) or softmax.")] = None,
    capacity_factor: Annotated[
        float | None,
        typer.Option("--capacity-factor", help="Pad and drop to this capacity instead of dropless routing."),
    ] = None,
    dtype: Annotated[str | None, typer.Option(help="float32 or bfloat16.")] = None,
    steps: Annotated[int | None, typer.Option(help="Profiled steps (default 5).")] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up steps, not profiled (default 2).")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (default 0).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Run the built-in dropless MoE training step (JAX, expert parallel) under the profiler and analyze it."""

    def body() -> None:
        from ..capture.demo import capture_demo

        config = {
            "experts": experts,
            "top_k": top_k,
            "tokens_per_device": tokens,
            "hidden": hidden,
            "expert_ffn": expert_ffn,
            "layers": layers,
            "router": router,
            "capacity_factor": capacity_factor,
            "dtype": dtype,
            "steps": steps,
            "warmup_steps": warmup,
            "seed": seed,
        }
        target = out or default_out("demo")
        typer.echo(f"capturing the demo MoE step into {target} ...", err=True)
        capture_demo(target, {k: v for k, v in config.items() if v is not None}, host_devices=devices)
        finish_run(target, as_json)

    guarded(body)
