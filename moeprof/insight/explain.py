"""Where a measured change of the step went: ``diff``'s explanation of run B against run A.

Each run's step is split into parts (:mod:`moeprof.insight.attribution`): the time of each (JAX scope, pass,
op) per device and step. The parts of A and B are matched by scope (numbered layers folded over both runs:
``layer*/experts``), pass and op (XLA's hlo_category, else the collective kind or HLO opcode; the kernel name
where a trace has no scopes and no HLO: GPU Kineto and Nsight), never by an HLO op name. A part is
**cheaper** or **dearer** (in both runs), **new** (B only) or **gone** (A only).

The identity, per device and step (ms; means over the devices and the steps of each run)::

    B step − A step = Σ Δ part + residual
    Σ Δ part       = Δ accumulated            (the summed duration of the steps' activities)
    residual       = Δ idle − Δ overlap       (idle = step − busy, overlap = accumulated − busy)

so the parts carry every change of activity time and the residual is what no part carries: time no
activity ran (a gap, a wait on the host) and time activities ran on top of one another (overlap hides
work). It holds to floating-point rounding (far below a ns), as the tests check by brute force.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..core.scopes import fold_layers
from ..options import EXPLAIN_TOP_PARTS
from .attribution import StepParts

KEYS = ["scope", "backward", "op", "bucket"]
UNIT = "ms per device and step (each run's sums over its devices and steps / (devices x steps))"


def _rows(parts: StepParts, folded: dict[str, str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per matched key: calls and ms per device and step; per key and primitive: ms per device and step)."""
    f = parts.parts.assign(scope=parts.parts["scope"].map(folded))
    by_key = f.groupby(KEYS, sort=True)[["count", "total_ns"]].sum()
    by_key = pd.DataFrame({"calls": by_key["count"] / parts.per, "ns": by_key["total_ns"] / parts.per})
    by_primitive = f.groupby([*KEYS, "primitive"], sort=True)["total_ns"].sum() / parts.per
    return by_key, by_primitive.rename("ns").to_frame()


def _change(a_calls: float, b_calls: float, delta: float) -> str:
    if not a_calls:
        return "new"
    if not b_calls:
        return "gone"
    return "cheaper" if delta < 0 else "dearer" if delta > 0 else "same"


def _figures(a_ns: float, b_ns: float) -> dict[str, float]:
    return {"reference_ms": a_ns / 1e6, "run_ms": b_ns / 1e6, "delta_ms": (b_ns - a_ns) / 1e6}


def explain_change(a: StepParts, b: StepParts) -> dict[str, Any]:
    """B's step against A's, part by part, and the residual (the module docstring); rows by |Δ|, largest
    first. Plain data: the ``diff --json`` explanation's ``parts`` and totals."""
    scopes = sorted(set(a.parts["scope"].astype(str)) | set(b.parts["scope"].astype(str)))
    folded = fold_layers(scopes)
    a_key, a_prim = _rows(a, folded)
    b_key, b_prim = _rows(b, folded)
    both = a_key.merge(b_key, how="outer", left_index=True, right_index=True, suffixes=("_a", "_b")).fillna(0.0)
    both["delta"] = both["ns_b"] - both["ns_a"]
    prims = a_prim.merge(b_prim, how="outer", left_index=True, right_index=True, suffixes=("_a", "_b")).fillna(0.0)
    prims["larger"] = prims[["ns_a", "ns_b"]].max(axis=1)
    prims = prims.reset_index()
    prims = prims[prims["primitive"] != ""].sort_values(["larger", "primitive"], ascending=[False, True])
    primitives = prims.groupby(KEYS, sort=False)["primitive"].agg(list).to_dict()
    both = both.reset_index()
    both["size"] = both["delta"].abs()
    both = both.sort_values(["size", "scope", "backward", "op", "bucket"], ascending=[False, True, True, True, True])
    rows = []
    columns = zip(
        both["scope"].astype(str).tolist(),
        both["backward"].astype(bool).tolist(),
        both["op"].astype(str).tolist(),
        both["bucket"].astype(str).tolist(),
        both["calls_a"].astype(float).tolist(),
        both["calls_b"].astype(float).tolist(),
        both["ns_a"].astype(float).tolist(),
        both["ns_b"].astype(float).tolist(),
        strict=True,
    )
    for scope, backward, op, bucket, calls_a, calls_b, ns_a, ns_b in columns:  # per matched part, not per activity
        rows.append(
            {
                "scope": scope,
                "backward": backward,
                "op": op,
                "bucket": bucket,
                "primitives": [str(x) for x in primitives.get((scope, backward, op, bucket), [])],
                "change": _change(calls_a, calls_b, ns_b - ns_a),
                **_figures(ns_a, ns_b),
                "reference_calls": calls_a,
                "run_calls": calls_b,
            }
        )
    step_delta = b.step_ns - a.step_ns
    parts_delta = b.mean(b.accumulated_ns) - a.mean(a.accumulated_ns)
    scoped = a.scoped or b.scoped
    return {
        "unit": UNIT,
        "matched_by": "JAX scope (numbered layers folded), pass and XLA op category"
        if scoped
        else "kernel name and collective kind (the traces carry no JAX scopes)",
        "scoped": scoped,
        "parts": rows,
        "step": _figures(a.step_ns, b.step_ns),
        "accumulated": _figures(a.mean(a.accumulated_ns), b.mean(b.accumulated_ns)),
        "busy": _figures(a.mean(a.busy_ns), b.mean(b.busy_ns)),
        "idle": _figures(a.idle_ns, b.idle_ns),
        "overlap": _figures(a.overlap_ns, b.overlap_ns),
        "parts_delta_ms": parts_delta / 1e6,
        "residual_ms": (step_delta - parts_delta) / 1e6,
        "identity": "B step − A step = Σ parts' Δ (= Δ accumulated) + residual; residual = Δ idle − Δ overlap,"
        " per device and step: idle = step − busy, overlap = accumulated − busy",
        "devices": [a.devices, b.devices],
        "steps": [a.steps, b.steps],
    }


def ranked(
    parts: list[dict[str, Any]], top: int = EXPLAIN_TOP_PARTS
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The ``top`` parts (already ranked by |Δ|) and the rest summed in one row (None when none is left)."""
    shown, rest = parts[:top], parts[top:]
    if not rest:
        return shown, None
    a = sum(p["reference_ms"] for p in rest)
    b = sum(p["run_ms"] for p in rest)
    return shown, {
        "scope": f"{len(rest)} more parts",
        "backward": False,
        "op": "",
        "bucket": "",
        "primitives": [],
        "change": "",
        "reference_ms": a,
        "run_ms": b,
        "delta_ms": sum(p["delta_ms"] for p in rest),
    }
