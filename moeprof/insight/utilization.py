"""The chip's FLOPs utilization from the FLOPs the trace's own ops state (TPU XPlanes: XLA's ``flops`` and
``model_flops`` per op), against the chip's peak; and every op or step whose stated FLOPs the chip could
not have done in its time.

The peak is the chip's own first (a TPU plane's ``peak_teraflops_per_second``), then the preset of the
chip the trace names; ``--chip`` overrides both. ``model_flops`` is used where the trace states it, else
``flops``. XLA's cost model counts a ragged dot's weight gradient dense over every expert: where the
program's HLO shows the ragged dots, their FLOPs are recounted from the shapes (the event column
``recounted_flops``) and the figures use that count, with XLA's own beside it (``*_xla``). An op whose
counted FLOPs over its time still exceed the peak is named, with its factor, and so is a step above the
peak; the MFU is then said to be overstated, never silently capped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from ..core.analysis import DeviceFigures, StepFigures
from ..core.expert_load import RoutedLoad
from ..core.hardware import ChipPreset
from ..core.padding import useful_work
from ..core.scopes import COUNTED, flops_source
from ..core.sections import Utilization

OPS_LISTED = 10  # ops above the peak listed by name in the JSON (all are counted)


def job_peak(
    plane_peaks: Mapping[str, Mapping[str, float]], preset: ChipPreset | None, preset_from: str | None
) -> tuple[float | None, str]:
    """(bf16 peak TFLOP/s of one chip, where it comes from): ``--chip``'s preset, else what the planes
    state (one value for every device that states one), else the preset the trace names."""
    if preset is not None and preset_from in ("--chip", "--gpu"):
        return preset.bf16_tflops, f"--chip {preset.name}"
    stated = {round(float(p["tflops"]), 6) for p in plane_peaks.values() if p.get("tflops")}
    if len(stated) == 1:
        return stated.pop(), "the device plane's peak_teraflops_per_second"
    if preset is not None:
        return preset.bf16_tflops, f"preset {preset.name}"
    return None, ""


def job_hbm_peak(
    plane_peaks: Mapping[str, Mapping[str, float]], preset: ChipPreset | None, preset_from: str | None
) -> tuple[float | None, str]:
    """(HBM GB/s of one chip, where it comes from), chosen as :func:`job_peak` chooses the FLOP/s peak: ``--chip``'s
    preset, else what the planes state (``peak_hbm_bw_gigabytes_per_second``, one value), else the preset."""
    if preset is not None and preset_from in ("--chip", "--gpu"):
        return preset.hbm_gbps, f"--chip {preset.name}"
    stated = {round(float(p["hbm_gbps"]), 6) for p in plane_peaks.values() if p.get("hbm_gbps")}
    if len(stated) == 1:
        return stated.pop(), "the device plane's peak_hbm_bw_gigabytes_per_second"
    if preset is not None and preset.hbm_gbps:
        return preset.hbm_gbps, f"preset {preset.name}"
    return None, ""


def peaks_source(flops_from: str, hbm_from: str) -> str:
    """Where the two peaks come from, in one phrase ("the device plane's peak_teraflops_per_second and
    peak_hbm_bw_gigabytes_per_second", "preset H100 SXM")."""
    plane = "the device plane's "
    if flops_from.startswith(plane) and hbm_from.startswith(plane):
        return f"{flops_from} and {hbm_from[len(plane) :]}"
    if flops_from == hbm_from or not hbm_from:
        return flops_from
    if not flops_from:
        return hbm_from
    return f"{flops_from}; HBM: {hbm_from}"


def utilization(
    scopes: pd.DataFrame,
    op_flops: pd.DataFrame,
    step_flops: pd.DataFrame,
    steps: Sequence[StepFigures],
    devices: Sequence[DeviceFigures],
    peak_tflops: float | None,
    peak_from: str,
) -> tuple[Utilization | None, list[str]]:
    """The ``utilization`` summary and its warnings; (None, []) where the trace states no FLOPs."""
    source = flops_source(scopes)
    if source is None:
        return None, []
    counted = COUNTED[source]
    stated = float(scopes[source].sum())
    total = float(scopes[counted].sum()) if counted in scopes else stated
    if len(step_flops) and steps:
        spans = pd.DataFrame({"step": [s.step for s in steps], "device": [s.device for s in steps],
                              "span_ns": [s.span_ns for s in steps]})  # fmt: skip
        per = step_flops.astype({"step": np.int64}).merge(spans, on=["step", "device"], how="inner")
        flops, xla, span = float(per[counted].sum()), float(per[source].sum()), float(per["span_ns"].sum())
        n_steps = int(per["step"].nunique())
    else:
        per = None
        flops, xla, span = total, stated, float(sum(d.span_ns for d in devices))
        n_steps = 0
    rate = flops / span / 1e3 if span > 0 else None  # FLOPs per ns -> TFLOP/s, per device
    recounted = op_flops[op_flops["recounted"].astype(bool)] if "recounted" in op_flops and len(op_flops) else None
    out: dict[str, Any] = {
        "flops_source": source,
        "flops": total,
        "flops_per_step": flops / n_steps if n_steps else None,
        "tflops_per_s_per_device": rate,
    }
    if recounted is not None and len(recounted) and total != stated:
        # XLA's own figures beside the recounted ones (docs/metrics.md, "Utilization")
        out.update(
            recounted_ops=int(recounted["op"].nunique()),
            flops_xla=stated,
            flops_per_step_xla=xla / n_steps if n_steps else None,
            tflops_per_s_per_device_xla=xla / span / 1e3 if span > 0 else None,
        )
    warnings: list[str] = []
    if not peak_tflops:
        out["note"] = "no peak known for this chip (give --chip)"
        return cast("Utilization", {k: v for k, v in out.items() if v is not None}), warnings
    out.update(peak_tflops=peak_tflops, peak_from=peak_from, mfu=rate / peak_tflops if rate is not None else None)
    if out.get("tflops_per_s_per_device_xla") is not None:
        out["mfu_xla"] = out["tflops_per_s_per_device_xla"] / peak_tflops
    above = _ops_above(op_flops, counted if counted in op_flops else source, peak_tflops)
    if len(above):
        out["ops_above_peak"] = above.head(OPS_LISTED).to_dict("records")
        out["ops_above_peak_count"] = int(len(above))
        out["ops_above_peak_flops_share"] = float(above["flops_stated"].sum()) / total if total else 0.0
        named = ", ".join(f"{r.op} ({r.of_peak:.1f}x)" for r in above.head(3).itertuples())
        warnings.append(
            f"the FLOPs counted (XLA's {source}, ragged dots recounted from the HLO where it shows them) put "
            f"{len(above)} ops above the chip's {peak_tflops:,.1f} TFLOP/s peak, "
            f"{out['ops_above_peak_flops_share']:.0%} of the FLOPs: {named}; their FLOPs are overstated "
            "(a count moeprof could not correct), and the MFU from them with them"
        )
    if per is not None and len(per):
        per = per.assign(tflops=per[counted] / per["span_ns"].clip(lower=1) / 1e3)
        high = per[per["tflops"] > peak_tflops].sort_values(["tflops", "step"], ascending=[False, True])
        if len(high):
            rates = high["tflops"].to_numpy(np.float64)
            out["steps_above_peak"] = [
                {"step": int(step), "device": str(device), "tflops_per_s": float(t), "of_peak": float(t / peak_tflops)}
                for step, device, t in zip(
                    high["step"].to_numpy(np.int64).tolist(), high["device"].astype(str).tolist(), rates.tolist()
                )
            ]
            worst = out["steps_above_peak"][0]
            warnings.append(
                f"{len(high)} step(s) state more FLOPs than the chip can do in their time: step {worst['step']} "
                f"on {worst['device']} at {worst['tflops_per_s']:,.1f} TFLOP/s, "
                f"{worst['of_peak']:.0%} of the {peak_tflops:,.1f} TFLOP/s peak"
            )
    return cast("Utilization", {k: v for k, v in out.items() if v is not None}), warnings


def _ops_above(op_flops: pd.DataFrame, source: str, peak_tflops: float) -> pd.DataFrame:
    """The ops whose stated FLOPs over their time exceed the peak, fastest first, summed over devices."""
    if not len(op_flops):
        return pd.DataFrame(columns=["op", "scope", "count", "time_ns", "flops_stated", "tflops_per_s", "of_peak"])
    per = op_flops.groupby(["op", "scope"], sort=True)[["count", "time_ns", source]].sum().reset_index()
    per = per.rename(columns={source: "flops_stated"})
    per["tflops_per_s"] = per["flops_stated"] / per["time_ns"].clip(lower=1) / 1e3
    per["of_peak"] = per["tflops_per_s"] / peak_tflops
    high = per[per["tflops_per_s"] > peak_tflops]
    high = high.astype({"count": np.int64, "time_ns": np.int64})
    return high.sort_values(["of_peak", "op"], ascending=[False, True]).reset_index(drop=True)


# the precisions a run folder's manifest names, as moeprof writes them
_PRECISIONS = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "float32": "f32",
               "f32": "f32", "fp32": "f32", "float8": "fp8", "fp8": "fp8"}  # fmt: skip


def job_precision(manifest: Mapping[str, Any] | None) -> str:
    """The job's compute precision where the run says it (a run folder's manifest ``precision``), else ""."""
    if not isinstance(manifest, Mapping):
        return ""
    precision = manifest.get("precision")
    return _PRECISIONS.get(str(precision).lower(), "") if precision else ""


def precision_note(precision: str, preset: ChipPreset | None, peak_from: str) -> str:
    """What the one peak is against a job of another precision than the peak's (docs/metrics.md, "Roofline"):
    a TPU states one peak, its bf16 one; an f32 matmul runs as several bf16 passes on the MXU and cannot reach it.
    "" where the peak is for the job's precision."""
    if precision in ("bf16", "fp16", ""):
        return ""
    if precision == "fp8" and preset is not None and preset.fp8_tflops:
        return "an fp8 job: its FLOP/s are measured against the bf16 peak (the one every screen shows)"
    tpu = "device plane" in peak_from or (preset is not None and preset.is_tpu)
    if precision == "f32" and tpu:
        return (
            "an f32 job: the chip states one peak, its bf16 one (no f32 peak is published for it); an f32 matmul "
            "runs as several bf16 passes on the MXU and cannot reach it"
        )
    return f"an {precision} job: its FLOP/s are measured against the bf16 peak"


def with_useful_work(
    used: Utilization | None, roles: Sequence[Mapping[str, Any]], load: RoutedLoad | None, rows: Mapping[int, int]
) -> Utilization | None:
    """The ``utilization`` with spec §10's useful work where the run records its experts' load and the HLO shows
    the rows its expert GEMMs compute: the experts' padded rows are no model work, so the MFU counts the useful
    rows only (``mfu``), the ops' own count beside it (``mfu_counted``); ``padding_waste`` of the experts' FLOPs
    and the assignments ``dropped``."""
    if used is None or load is None:
        return used
    work = useful_work(load, rows)
    experts = next((r for r in roles if r.get("role") == "experts"), None)
    per_step = used.get("flops_per_step")
    # the FLOPs that follow the rows the expert GEMMs compute (their ragged dots and weight gradients, counted
    # from the rows): padded with them; the experts' other work (their weights' updates, activations) is not
    padded = float(experts.get("row_flops") or 0.0) if experts is not None else 0.0
    if work is None or not padded or per_step is None:
        return used
    wasted = padded * work.padding_waste
    out: dict[str, Any] = dict(used)
    useful = float(per_step) - wasted
    out["useful"] = {
        "flops_per_step": useful,
        "experts_gemm_flops_per_step": padded,
        "padding_waste": work.padding_waste,
        "dropped": work.dropped,
        "capacity": work.capacity,
        "rows": work.rows,
        "source": f"the {load.source}'s expert load, the experts' ragged dots' rows in the HLO",
    }
    if used.get("mfu") is not None and per_step:
        out["mfu_counted"] = used["mfu"]
        out["mfu"] = float(used["mfu"]) * useful / float(per_step)
        if used.get("tflops_per_s_per_device") is not None:
            out["tflops_per_s_per_device_counted"] = used["tflops_per_s_per_device"]
            out["tflops_per_s_per_device"] = float(used["tflops_per_s_per_device"]) * useful / float(per_step)
    return cast("Utilization", out)
