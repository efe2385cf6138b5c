"""Throughput: tokens/s, model TFLOPS per device and MFU, from a model config and the measured step time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

import numpy as np

from ..core.analysis import Analysis
from ..core.sections import Throughput


def projected_throughput(throughput: Throughput | None, measured: int, projected: int) -> Throughput | None:
    """tokens/s, TFLOPS per device and MFU at the projected step (they scale with 1 / step time)."""
    if not throughput or measured <= 0 or projected <= 0:
        return None
    factor = measured / projected
    out: dict[str, Any] = {}
    for key in ("tokens_per_second", "tflops_per_device", "mfu"):
        value = cast("Mapping[str, Any]", throughput).get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = value * factor
    if "step_ns" in throughput:
        out["step_ns"] = round(float(throughput["step_ns"]) / factor)
    return cast("Throughput", out) if out else None


def manifest_throughput(manifest: Mapping[str, Any]) -> Throughput | None:
    """tokens/s and model TFLOPS per device from a manifest's run figures, where it has them."""
    tokens_per_second = manifest.get("tokens_per_second")
    flops = manifest.get("model_flops_per_token")
    devices = (manifest.get("devices") or {}).get("count")
    if not tokens_per_second:
        return None
    out: Throughput = {"tokens_per_second": tokens_per_second}
    if flops and devices:
        out["model_flops_per_token"] = flops
        out["tflops_per_device"] = tokens_per_second * flops / devices / 1e12
    return out


def with_throughput(
    analysis: Analysis,
    model: str,
    tokens_per_step: int,
    seq_len: int = 4096,
    gpu: str | None = None,
    dtype: str = "bf16",
    job_devices: int | None = None,
) -> Analysis:
    """The analysis with tokens/s, model TFLOPS per device and MFU added.

    ``tokens_per_step`` is the job's global batch in tokens and ``job_devices`` the job's
    device count (default: the devices in the trace; a one-rank Kineto trace of a 64-GPU
    job needs 64). The step time is the one every screen shows (§9's ``step_ns``: the mean
    over steps of the job's §5 step window); an analysis without it (saved before it was
    written) takes the median over steps of the job's step span, else the longest device
    window (the trace is taken as one step).
    """
    from .flops import dtype_kind, flops_per_token, load_model_config, throughput_figures

    cfg = load_model_config(model)
    per_token = flops_per_token(cfg, seq_len).total
    spans = [s.span_ns for s in analysis.spread.steps]
    warnings: list[str] = []
    if analysis.step_ns:
        step_ns = float(analysis.step_ns)
    elif spans:
        step_ns = float(np.median(spans))
    else:
        step_ns = float(max((d.span_ns for d in analysis.devices), default=0))
    if not spans:
        warnings.append("no steps found: throughput takes the whole trace window as one step")
    if step_ns <= 0 or not analysis.devices:
        return analysis.with_warnings(*warnings, "no device activity: throughput not computed")
    # the GPU: --gpu, else the run folder's, else the preset the traces' own device names matched
    manifest_kind = ((analysis.manifest or {}).get("devices") or {}).get("kind")
    kind = gpu or manifest_kind or (analysis.hardware or {}).get("preset")
    # the chip's own peak where its plane states one (a TPU plane's peak_teraflops_per_second, a bf16 peak)
    stated = (analysis.utilization or {}) if gpu is None and dtype_kind(dtype) == "bf16" else {}
    own_peak = stated.get("peak_tflops") if "device plane" in str(stated.get("peak_from", "")) else None
    figures: Throughput = {
        **throughput_figures(
            tokens_per_step, step_ns / 1e9, per_token, job_devices or len(analysis.devices), kind, dtype, own_peak
        ),
        "model": cfg.name,
        "seq_len": seq_len,
        "step_ns": round(step_ns),
    }
    mfu, tflops, peak = figures.get("mfu"), figures.get("tflops_per_device"), figures.get("peak_tflops")
    if isinstance(mfu, int | float) and mfu > 1:
        warnings.append(f"MFU {mfu:.1%} is impossible: {throughput_mismatch(figures)}")
    elif isinstance(tflops, int | float) and isinstance(peak, int | float) and peak and tflops > peak:
        warnings.append(
            f"{tflops:,.1f} model TFLOPS per device exceeds the {peak:,.0f} TFLOPS peak: {throughput_mismatch(figures)}"
        )
    # §9: tokens/s, TFLOPS and MFU at each projection's step time
    projections = tuple(
        replace(p, throughput=projected_throughput(figures, p.measured_step_ns, p.projected_step_ns))
        for p in analysis.projections
    )
    return analysis.with_(throughput=figures, warnings=(*analysis.warnings, *warnings), projections=projections)


def throughput_mismatch(figures: Mapping[str, Any]) -> str:
    """Why an MFU above 100% happens: the model, tokens or devices given do not describe this trace."""
    step_ms = figures.get("step_ns", 0) / 1e6
    return (
        f"--model {figures.get('model', '?')}, --tokens-per-step and --job-devices do not describe the traced step "
        f"(a step of {step_ms:,.3f} ms was measured: too short for that many tokens on that many devices)"
    )
