"""Spec §10 "Grouped GEMM padding": what of the expert GEMMs' FLOPs is model work, from the load a run records.

:func:`manifest_expert_load` reads a run folder's manifest (``moeprof capture demo``): the (token, k) assignments
each expert received per layer, per profiled step (``demo.records[].expert_load``) and their mean
(``demo.load.tokens_per_expert``), with the model's experts, top-k and capacity factor (a small reader: spec §11's
expert-load reader, where the job has one, is the one place to read them, and this one gives way to it).

:func:`expert_gemm_rows` finds how many rows the expert GEMMs compute, from the program's HLO: a ragged dot's
rows ``M`` (its output's first dimension): every assignment on a dropless run, ``E·C`` on a capacity run (each
expert's buffer padded to its capacity ``C``). :func:`useful_work` then says which part of the experts' FLOPs is
model work: ``useful = Σₑ min(nₑ, C) / (E·C)`` of them (the spec's 2·Σₑ nₑ·K·N over the padded count 2·E·C·K·N,
nₑ the rows the expert keeps), ``padding_waste = 1 − useful``, ``dropped = Σₑ max(0, nₑ − C) / Σₑ nₑ``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .events import column_codes, combine_codes, first_rows
from .trace import Trace

_DIMS = re.compile(r"^\w+\[([\d,]*)\]")


@dataclass(frozen=True)
class ExpertLoad:
    """What a run recorded of its experts' load."""

    experts: int
    top_k: int
    layers: int
    tokens_per_step: int  # tokens of one step over the job's devices
    capacity_factor: float | None  # None: dropless
    # per profiled step, per layer, per expert: the (token, k) assignments it received (before any drop)
    per_step: tuple[tuple[tuple[int, ...], ...], ...]
    tokens_dropped: tuple[int, ...]  # per profiled step, as the run counted them (all layers)
    source: str  # where it was read ("manifest demo.records")

    @property
    def assignments(self) -> int:
        """(token, k) assignments per layer and step: what a dropless expert layer computes."""
        return self.tokens_per_step * self.top_k


def manifest_expert_load(manifest: Mapping[str, Any] | None) -> ExpertLoad | None:
    """The expert load a run folder's manifest records (``demo.records[].expert_load``, the model's experts,
    top-k, capacity factor, tokens per step); None where it records none."""
    if not isinstance(manifest, Mapping):
        return None
    demo, model = manifest.get("demo"), manifest.get("model")
    if not isinstance(demo, Mapping) or not isinstance(model, Mapping):
        return None
    records = [
        r for r in demo.get("records") or () if isinstance(r, Mapping) and isinstance(r.get("expert_load"), list)
    ]
    try:
        per_step = tuple(tuple(tuple(int(n) for n in layer) for layer in r["expert_load"]) for r in records)
        experts, top_k = int(model["experts"]), int(model["top_k"])
        tokens = int(manifest.get("tokens_per_step") or 0)
        factor = model.get("capacity_factor")
        capacity = float(factor) if isinstance(factor, int | float) and not isinstance(factor, bool) else None
        dropped = tuple(int(r.get("tokens_dropped") or 0) for r in records)
    except (KeyError, TypeError, ValueError):
        return None
    if not per_step or experts <= 0 or top_k <= 0 or any(len(layer) != experts for s in per_step for layer in s):
        return None
    return ExpertLoad(experts, top_k, len(per_step[0]), tokens, capacity, per_step, dropped, "manifest demo.records")


def _dims(shape: str) -> tuple[int, ...]:
    m = _DIMS.match(shape.strip())
    return tuple(int(d) for d in m.group(1).split(",") if d) if m else ()


def expert_gemm_rows(trace: Trace, experts: np.ndarray) -> dict[int, int]:
    """The rows the experts' ragged dots compute (their output's first dimension), from the program's HLO: rows ->
    how many distinct ragged-dot ops compute that many. ``experts``: per row of the event table, the routed
    experts' work (core.roles). Empty without HLO or ragged dots."""
    events = trace.events
    rows = np.flatnonzero(np.asarray(experts, dtype=bool))
    if not trace.hlo or not rows.size:
        return {}
    mod_c, mod_v = column_codes(events["hlo_module"])
    op_c, op_v = column_codes(events["hlo_op"])
    programs = events["program_id"].to_numpy(np.int64)
    key = combine_codes(mod_c[rows], programs[rows], op_c[rows])
    out: dict[int, int] = {}
    for r in rows[first_rows(key)].tolist():
        if mod_c[r] < 0 or op_c[r] < 0:
            continue
        name = str(mod_v[mod_c[r]])
        module = trace.hlo.get((name, int(programs[r]))) or trace.hlo.get((name, -1))
        inst = module.instructions.get(str(op_v[op_c[r]])) if module is not None else None
        if inst is None or not inst.ragged_dot:
            continue
        dims = _dims(inst.shape)
        if len(dims) == 2:
            out[dims[0]] = out.get(dims[0], 0) + 1
    return out


@dataclass(frozen=True)
class UsefulWork:
    """The part of the experts' FLOPs that is model work, and the assignments dropped."""

    useful_fraction: float  # of the experts' counted FLOPs
    padding_waste: float  # 1 - useful_fraction
    dropped: float  # of the assignments, over the profiled steps
    capacity: int | None  # rows per expert's buffer (None: dropless)
    rows: int  # rows the expert GEMMs compute per layer


def useful_work(load: ExpertLoad, rows: Mapping[int, int]) -> UsefulWork | None:
    """What of the experts' GEMM rows is model work, from the load per step and the rows the GEMMs compute: on a
    capacity run the buffers hold ``E·C`` rows of which each expert keeps ``min(nₑ, C)``; dropless, every row is
    an assignment. None where the rows are not known or fit neither."""
    if not rows:
        return None
    m = max(rows.items(), key=lambda kv: (kv[1], kv[0]))[0]  # the rows most of the ragged dots compute
    loads = np.array(load.per_step, dtype=np.int64)  # [steps, layers, experts]
    assigned = int(loads.sum())
    if not assigned:
        return None
    if load.capacity_factor is not None and m % load.experts == 0:
        c = m // load.experts
        kept = int(np.minimum(loads, c).sum())
        computed = m * loads.shape[0] * loads.shape[1]
        useful = kept / computed
        dropped = int(np.maximum(loads - c, 0).sum()) / assigned
        return UsefulWork(useful, 1.0 - useful, dropped, c, m)
    per_layer = loads.sum(axis=2)
    if load.capacity_factor is None and bool((per_layer <= m).all()):
        useful = float(per_layer.sum()) / (m * per_layer.size)
        return UsefulWork(useful, 1.0 - useful, 0.0, None, m)
    return None
