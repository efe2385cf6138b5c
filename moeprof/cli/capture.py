"""``moeprof capture ...``: profile a step and analyze it in one go; every capture writes a run folder."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import InputError
from .common import FittingHelp, MoeprofGroup, guarded

# `capture demo`'s defaults, sized so that a skewed router makes a straggler on a small machine: with
# 8 virtual devices on 2 cores the device threads' scheduling, not the routing, decides who arrives
# last, and a narrow expert FFN leaves the experts' work under that noise (docs/capture.md, measured).
# The library's DemoConfig keeps its small model.
DEMO_DEVICES = 4
DEMO_EXPERT_FFN = 1024

if TYPE_CHECKING:
    from ..core.analysis import Analysis

app = typer.Typer(
    help="Profile a MoE training step and analyze it (writes a run folder).", no_args_is_help=True, cls=MoeprofGroup
)

OutOption = Annotated[
    Path | None, typer.Option("--out", "-o", help="Run folder to write (default runs/<kind>-<time>).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the analysis JSON instead of the report.")]


def default_out(kind: str) -> Path:
    return Path("runs") / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


ModelOption = Annotated[
    str | None, typer.Option("--model", help="deepseek-v3 or a config.json: tokens/s, TFLOPS and MFU in the manifest.")
]
TokensOption = Annotated[
    int | None, typer.Option("--tokens-per-step", min=1, help="Global tokens per step (batch x sequence).")
]
SeqLenOption = Annotated[int, typer.Option("--seq-len", min=1, help="Sequence length for attention FLOPs.")]
JobDevicesOption = Annotated[
    int | None, typer.Option("--job-devices", min=1, help="Devices in the whole job (default: those captured).")
]


@dataclass(frozen=True)
class Throughput:
    """What turns a captured window into tokens/s and TFLOPS per device (all or nothing)."""

    model: str | None = None
    tokens_per_step: int | None = None
    seq_len: int = 4096
    job_devices: int | None = None

    def __post_init__(self) -> None:
        if (self.model is None) != (self.tokens_per_step is None):
            raise InputError(None, "--model and --tokens-per-step go together")


def finish_run(out: Path, as_json: bool, throughput: Throughput | None = None) -> Analysis:
    from ..capture.runfolder import analyze_run_folder
    from ..reports import terminal
    from ..reports.json_report import write_json

    """Analyze the run folder just written (analysis.json beside the trace) and show the report."""
    rate = throughput or Throughput()
    result = analyze_run_folder(out, rate.model, rate.tokens_per_step, rate.seq_len, rate.job_devices)
    if as_json:
        write_json(result)
    else:
        terminal.render(result)
        typer.echo(f"run folder: {out}  (moeprof analyze {out})", err=True)
    return result


@app.command("demo", cls=FittingHelp)
def demo_command(
    out: OutOption = None,
    devices: Annotated[
        int,
        typer.Option(
            metavar="N",
            min=1,
            help="Virtual CPU devices when no accelerator is present (4: enough for expert parallelism, few "
            "enough that a small machine's thread scheduling does not hide a straggler).",
        ),
    ] = DEMO_DEVICES,
    experts: Annotated[int | None, typer.Option(help="Routed experts (default 16).")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="Experts per token (default 2).")] = None,
    tokens: Annotated[
        int | None, typer.Option(help="Tokens per device per step (default 256; 16384 on an accelerator).")
    ] = None,
    hidden: Annotated[int | None, typer.Option(help="Model width (default 64; 2048 on an accelerator).")] = None,
    expert_ffn: Annotated[
        int | None, typer.Option("--expert-ffn", help=f"Expert FFN width (default {DEMO_EXPERT_FFN}).")
    ] = None,
    layers: Annotated[int | None, typer.Option(help="MoE layers (default 2; 3 on an accelerator).")] = None,
    router: Annotated[str | None, typer.Option(help="sigmoid (DeepSeek-V3) or softmax.")] = None,
    capacity_factor: Annotated[
        float | None,
        typer.Option("--capacity-factor", help="Pad and drop to this capacity instead of dropless routing."),
    ] = None,
    dtype: Annotated[
        str | None, typer.Option(help="float32 or bfloat16 (default float32; bfloat16 on an accelerator).")
    ] = None,
    router_skew: Annotated[
        float | None,
        typer.Option(
            "--router-skew",
            min=0.0,
            help="Router logit ramp from +S (expert 0) to -S (last expert): hot experts on the first devices "
            "(default 0: balanced; 4 gives the hottest device about 5x the mean tokens).",
        ),
    ] = None,
    expert_compute: Annotated[
        str | None,
        typer.Option(
            "--expert-compute",
            help="auto, tiled (work follows the tokens received) or ragged_dot (on CPU: the same cost whatever "
            "the routing). auto: ragged_dot on accelerators, tiled on CPU.",
        ),
    ] = None,
    permute_backward: Annotated[
        str | None,
        typer.Option(
            "--permute-backward",
            help="scatter (default: autodiff's scatter-add for each token permutation's backward) or gather (the "
            "inverse permutation's gather, the k copies of a token summed after it).",
        ),
    ] = None,
    skip_one_device_exchange: Annotated[
        bool,
        typer.Option(
            "--skip-one-device-exchange",
            help="With one device on the expert axis, skip the dispatch/combine exchange and the re-sort of the "
            "received rows (copies inside the device there): the sorted tokens feed the grouped GEMM directly.",
        ),
    ] = False,
    sync_every: Annotated[
        int | None,
        typer.Option(
            "--sync-every",
            help="The host waits for a step's results every N steps (default 1: every step, as a loop that reads "
            "its loss back each step; N lets the host dispatch up to N steps ahead of the chip). A TPU's steps are "
            "its own; on CPU and GPU they are the host's step annotations, which then end before their work does.",
        ),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Profiled steps (default 5).")] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up steps, not profiled (default 2).")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (default 0).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Run the built-in dropless MoE training step (JAX, expert parallel) under the profiler and analyze it.

    On a TPU or GPU the step runs there, sized to keep the chip busy (bf16, hidden 2048, 16384 tokens per
    device, 3 layers) where the options leave the sizes out; on CPU it runs on virtual CPU devices."""

    def body() -> None:
        from ..demo.config import OPTION_NAMES, DemoConfigError, checked, from_fields

        config = {
            "experts": experts,
            "top_k": top_k,
            "tokens_per_device": tokens,
            "hidden": hidden,
            "expert_ffn": DEMO_EXPERT_FFN if expert_ffn is None else expert_ffn,
            "layers": layers,
            "router": router,
            "capacity_factor": capacity_factor,
            "dtype": dtype,
            "router_skew": router_skew,
            "expert_compute": expert_compute,
            "permute_backward": permute_backward,
            "skip_one_device_exchange": skip_one_device_exchange or None,
            "sync_every": sync_every,
            "steps": steps,
            "warmup_steps": warmup,
            "seed": seed,
        }
        target = out or default_out("demo")

        def progress(message: str) -> None:
            # stderr, and only without --json: stdout carries the report or the JSON alone
            if not as_json:
                typer.echo(f"moeprof: {message}", err=True)

        chosen = {k: v for k, v in config.items() if v is not None}
        try:  # before the child starts jax (seconds): what needs the device count is checked there
            checked(from_fields(chosen), names=OPTION_NAMES)
        except DemoConfigError as exc:
            raise InputError(None, str(exc)) from None
        from ..capture.demo import capture_demo  # after the checks: its imports (pandas, the pipeline) take 0.6 s

        progress(f"capturing the demo MoE step into {target}")
        capture_demo(target, chosen, host_devices=devices, progress=progress)
        progress("analyzing the trace")
        try:
            finish_run(target, as_json)
        except KeyboardInterrupt:  # the capture is whole: kept, and said where
            raise KeyboardInterrupt(f"while analyzing; the capture is kept: moeprof analyze {target}") from None

    guarded(body)


CommandArgument = Annotated[
    list[str] | None, typer.Argument(help="The command to run, after -- (e.g. -- python train.py --steps 100).")
]


@app.command("run", cls=FittingHelp)
def run_command(
    command: CommandArgument = None,
    delay: Annotated[float, typer.Option("--delay", help="Seconds to wait after the server is up (compile).")] = 10.0,
    duration: Annotated[float, typer.Option("--duration", help="Seconds of trace to capture.")] = 2.0,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the command after the capture (SIGTERM).")] = False,
    port: Annotated[int | None, typer.Option("--port", help="Profiler server port (default: a free one).")] = None,
    profiler_host: Annotated[
        str,
        typer.Option(
            "--profiler-host",
            help="127.0.0.1: the job's profiler listens on loopback only; 0.0.0.0: jax.profiler.start_server "
            "on every interface, for capture from other hosts (multi-host jobs).",
        ),
    ] = "127.0.0.1",
    out: OutOption = None,
    as_json: JsonOption = False,
    model: ModelOption = None,
    tokens_per_step: TokensOption = None,
    seq_len: SeqLenOption = 4096,
    job_devices: JobDevicesOption = None,
) -> None:
    """Launch a JAX training command with its profiler on, capture a window of it and analyze it.

    The script is not edited: a generated sitecustomize.py starts the profiler when the command imports jax.
    """

    def body() -> None:
        rate = Throughput(model, tokens_per_step, seq_len, job_devices)  # checked before anything runs
        from ..capture.launch import capture_run

        target = out or default_out("run")
        manifest = capture_run(
            command or [],
            target,
            delay_s=delay,
            duration_s=duration,
            stop=stop,
            port=port,
            host=profiler_host,
            child_stdout_to_stderr=as_json,  # stdout carries only the JSON
        )
        code = manifest["exit_code"]
        if manifest["stopped"]:
            typer.echo(f"moeprof: stopped the command after the capture (exit code {code})", err=True)
        elif code:
            typer.echo(f"moeprof: the command exited with code {code} (after the capture)", err=True)
        finish_run(target, as_json, rate)

    guarded(body)


@app.command("live", cls=FittingHelp)
def live_command(
    addresses: Annotated[
        str | None,
        typer.Argument(help="HOST:PORT[,HOST:PORT...] of jax.profiler.start_server; PORT alone is 127.0.0.1."),
    ] = None,
    duration: Annotated[float, typer.Option("--duration", help="Seconds of trace to capture.")] = 2.0,
    out: OutOption = None,
    as_json: JsonOption = False,
    model: ModelOption = None,
    tokens_per_step: TokensOption = None,
    seq_len: SeqLenOption = 4096,
    job_devices: JobDevicesOption = None,
) -> None:
    """Capture a running JAX job (every listed worker at once, one XPlane each) and analyze it."""

    def body() -> None:
        rate = Throughput(model, tokens_per_step, seq_len, job_devices)  # checked before anything runs
        from ..capture.live import capture_live, parse_addresses

        if not addresses:
            raise InputError(None, "give the job's profiler address(es): moeprof capture live HOST:PORT[,HOST:PORT...]")
        parsed = parse_addresses(addresses)
        target = out or default_out("live")
        capture_live(parsed, target, duration)
        finish_run(target, as_json, rate)

    guarded(body)


@app.command("nsys", cls=FittingHelp)
def nsys_command(
    command: CommandArgument = None,
    capture_range: Annotated[
        bool,
        typer.Option(
            "--capture-range", help="Record only between cudaProfilerStart and cudaProfilerStop (the job calls them)."
        ),
    ] = False,
    out: OutOption = None,
    as_json: JsonOption = False,
    model: ModelOption = None,
    tokens_per_step: TokensOption = None,
    seq_len: SeqLenOption = 4096,
    job_devices: JobDevicesOption = None,
) -> None:
    """Run a command under Nsight Systems (nsys on PATH), export the report to SQLite and analyze it.

    NCCL names its kernels' collectives through NVTX ranges: leave NCCL_NVTX_DISABLE unset.
    """

    def body() -> None:
        rate = Throughput(model, tokens_per_step, seq_len, job_devices)  # checked before anything runs
        from ..capture.nsys import capture_nsys

        target = out or default_out("nsys")
        manifest = capture_nsys(command or [], target, capture_range=capture_range, child_stdout_to_stderr=as_json)
        if manifest["exit_code"]:
            typer.echo(f"moeprof: the command exited with code {manifest['exit_code']}", err=True)
        finish_run(target, as_json, rate)

    guarded(body)
