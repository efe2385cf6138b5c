"""Spec §10 "Grouped GEMM padding": what of the expert GEMMs' FLOPs is model work, from the load a run records
(spec §11's :class:`~moeprof.core.expert_load.RoutedLoad`: the (token, k) assignments each expert received per
layer and step, before any drop, and the run's capacity factor).

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

import numpy as np

from .events import column_codes, combine_codes, first_rows
from .expert_load import RoutedLoad
from .trace import Trace

_DIMS = re.compile(r"^\w+\[([\d,]*)\]")


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


def useful_work(load: RoutedLoad, rows: Mapping[int, int]) -> UsefulWork | None:
    """What of the experts' GEMM rows is model work, from the load per step and the rows the GEMMs compute: on a
    capacity run the buffers hold ``E·C`` rows of which each expert keeps ``min(nₑ, C)``; dropless, every row is
    an assignment. None where the rows are not known or fit neither."""
    if not rows or not load.experts:
        return None
    m = max(rows.items(), key=lambda kv: (kv[1], kv[0]))[0]  # the rows most of the ragged dots compute
    loads, _ = load.per_step_layer_expert()  # [steps, layers, experts]
    assigned = float(loads.sum())
    if not assigned:
        return None
    if load.capacity_factor is not None and m % load.experts == 0:
        c = m // load.experts
        computed = float(m) * loads.shape[0] * loads.shape[1]
        useful = float(np.minimum(loads, c).sum()) / computed
        dropped = float(np.maximum(loads - c, 0).sum()) / assigned
        return UsefulWork(useful, 1.0 - useful, dropped, c, m)
    per_layer = loads.sum(axis=2)
    if load.capacity_factor is None and bool((per_layer <= m).all()):
        useful = float(per_layer.sum()) / (m * per_layer.size)
        return UsefulWork(useful, 1.0 - useful, 0.0, None, m)
    return None
