"""Spec §10's levers: on-chip work that runs below the chip's roof, as opportunities (§6) like a collective.

A lever is a set of what-if terms (``roof(role=permute|unpermute,pass=backward,op~scatter)``): its §6 bound
is what those terms take from the activities of the worst device, per step, without a replay
(:func:`moeprof.insight.projection.taken_away`); its projected saving is the §9 replay of the same terms
(``roof(opportunity=N)``, the projection plan), a bound ("up to"), since no op runs faster than its roof.
The levers a trace gets are the ones its roles and ops show (:data:`LEVERS`):

* the token movement around the experts (spec §10's glue: router, permute, unpermute) at its roof, with the
  exchanges over a group of one chip taken away (they move no byte between chips: a copy inside HBM);
* the backward scatter-adds of the permutations (autodiff's transpose of a gather) at their roof;
* the routed experts' compute-bound ops (their GEMMs), the optimizer at their roof.

The other roles (the shared expert, attention) are asked by name (``--what-if 'roof(role=shared)'``): they get
no lever of their own until a remedy can say what the trace shows about them.

A lever is an opportunity where its bound per step is ``LEVER_SHARE`` of the step or more (spec §10: "large";
nearly every op runs below its roof, and a list of every role at 1% would bury the ones that matter). Its remedy
comes from the remedy table (kind ``on-chip``, role the lever's key, bound memory or compute), with the facts
the trace shows about it (:func:`lever_facts`: the scatter-adds, the one-chip exchange, a grouped GEMM slower
than the same program's dense matmuls) as stack evidence, said after the remedy's text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from ..core.analysis import Opportunity
from ..core.events import BUCKETS
from ..core.roofline import EXCHANGE_ROLES, GLUE_ROLES, ON_CHIP, ROLES
from .projection import ReplayJob, taken_away
from .remedies import Situation, choose, devices_kind
from .stack import Stack

TOP_OPS = 3  # the ops a lever's evidence names, most time below the roof first
LEVER_SHARE = 0.05  # of the step: a lever's bound per step (its time below the roof, worst device) from which it is one


@dataclass(frozen=True)
class Lever:
    """One candidate: its key (the remedy table's role for it), its title, and its terms."""

    key: str
    title: str
    terms: tuple[str, ...]


GLUE = "|".join(GLUE_ROLES)
# an exchange over a group of one chip (a copy inside it, bucket memcpy) and the ops that exist to feed it (its
# output buffer, its reshapes: the JAX primitive that made them is the exchange's) move no byte between chips
ONE_CHIP_EXCHANGE = (
    f"scale(role={'|'.join(EXCHANGE_ROLES)},bucket=memcpy)=0",
    "scale(op~ragged.all.to.all,bucket=compute)=0",
)
SCATTER_BACKWARD = "roof(role=permute|unpermute,pass=backward,op~scatter)"


def candidates(one_chip_exchange: bool) -> tuple[Lever, ...]:
    """The levers a job is tried for (the one-chip exchange where the job has one)."""
    glue_terms = (f"roof(role={GLUE})", *(ONE_CHIP_EXCHANGE if one_chip_exchange else ()))
    glue_title = "token movement below its roof (router, permutations" + (
        ", the exchange over one chip)" if one_chip_exchange else ")"
    )
    return (
        Lever("glue", glue_title, glue_terms),
        Lever("scatter-backward", "the permutations' backward scatter-adds below HBM bandwidth", (SCATTER_BACKWARD,)),
        Lever("experts", "the routed experts' GEMMs below the chip's roof", ("roof(role=experts,bound=compute)",)),
        Lever("optimizer", "the optimizer's update below the chip's roof", ("roof(role=optimizer)",)),
    )


@dataclass(frozen=True)
class Figures:
    """A set of activities inside the steps, per step on one device: time, counts, roof."""

    time_ns: float
    counted_ns: float  # the time of those with counts (the rest has no roof)
    flops: float
    hbm_bytes: float
    roof_ns: float
    compute_roof_ns: float  # Σ f/P
    memory_roof_ns: float  # Σ b/B

    @property
    def bound(self) -> str:
        return "compute" if self.compute_roof_ns >= self.memory_roof_ns else "memory"


def _figures(job: ReplayJob, rows: np.ndarray, per: float) -> Figures:
    """The figures of ``rows`` divided by ``per`` (steps, or steps x devices)."""
    d = (job.end - job.start)[rows].astype(np.float64)
    roof = job.roof_ns[rows]
    counted = ~np.isnan(roof) & (job.bucket[rows] != BUCKETS.index("comm"))
    f = job.table["flops"].to_numpy(np.float64)[rows]
    b = job.table["hbm_bytes"].to_numpy(np.float64)[rows]
    peak_f, peak_b = job.peak_flops_per_s, job.peak_hbm_bytes_per_s
    compute = np.nan_to_num(f[counted]) / peak_f * 1e9 if peak_f else np.zeros(int(counted.sum()))
    memory = np.nan_to_num(b[counted]) / peak_b * 1e9 if peak_b else np.zeros(int(counted.sum()))
    return Figures(
        time_ns=float(d.sum()) / per,
        counted_ns=float(d[counted].sum()) / per,
        flops=float(np.nan_to_num(f[counted]).sum()) / per,
        hbm_bytes=float(np.nan_to_num(b[counted]).sum()) / per,
        roof_ns=float(np.minimum(roof[counted], np.inf).sum()) / per,
        compute_roof_ns=float(compute.sum()) / per,
        memory_roof_ns=float(memory.sum()) / per,
    )


def _utilization(job: ReplayJob, fig: Figures) -> dict[str, float]:
    """FLOP and HBM utilization of counted time (spec §10: not capped)."""
    out: dict[str, float] = {}
    if fig.counted_ns > 0 and job.peak_flops_per_s:
        out["flop_util"] = round(fig.flops / (fig.counted_ns * 1e-9 * job.peak_flops_per_s), 4)
    if fig.counted_ns > 0 and job.peak_hbm_bytes_per_s:
        out["hbm_util"] = round(fig.hbm_bytes / (fig.counted_ns * 1e-9 * job.peak_hbm_bytes_per_s), 4)
    return out


_NUMBERED = re.compile(r"\.\d+$")


def op_family(name: str) -> str:
    """An op's name without XLA's instance number (``scatter_custom_fusion.14`` -> ``scatter_custom_fusion``):
    the op each layer runs once, counted together."""
    return _NUMBERED.sub("", name)


def _top_ops(job: ReplayJob, rows: np.ndarray, removed: np.ndarray, steps: int) -> list[dict[str, Any]]:
    """The ops (by name, instance numbers folded) with the most time taken away, per step, most first."""
    names_c, names_v = job.codes("name")
    families = np.array([op_family(str(v)) for v in np.asarray(names_v, dtype=object).tolist()] + [""], dtype=object)
    frame = pd.DataFrame({"op": families[names_c[rows]], "removed": removed[rows], "ns": (job.end - job.start)[rows]})
    top = frame.groupby("op", sort=True)[["removed", "ns"]].sum().sort_values("removed", ascending=False)
    top = top[top["removed"] > 0].head(TOP_OPS)
    return [
        {"op": str(op), "time_ns": round(ns / steps), "below_roof_ns": round(r / steps)}
        for op, r, ns in zip(top.index.tolist(), top["removed"].tolist(), top["ns"].tolist(), strict=True)
    ]


def _per_device(job: ReplayJob, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Σ ``values`` over ``rows`` per device: (device codes, sums), the graph-free device codes."""
    dev_c = job.codes("device")[0]
    sums = np.bincount(dev_c[rows], weights=values[rows].astype(np.float64), minlength=len(job.device_names))
    return np.arange(sums.size), sums


@dataclass(frozen=True)
class Found:
    """One lever the job shows: its candidate, the rows it shortens, what it takes away per row, its worst
    device's total over the steps, and the figures of its activities per step on that device."""

    lever: Lever
    rows: np.ndarray
    removed: np.ndarray
    worst: int
    worst_ns: int
    figures: Figures


def _found(job: ReplayJob, lever: Lever, steps: int, inside: np.ndarray) -> Found | None:
    try:
        removed, selected = taken_away(job, lever.terms)
    except ValueError:
        return None
    rows = np.flatnonzero(selected & inside)
    if not rows.size:
        return None
    _, per_device = _per_device(job, removed, rows)
    worst = int(np.argmax(per_device))
    dev_c = job.codes("device")[0]
    on_worst = rows[dev_c[rows] == worst]
    return Found(lever, rows, removed, worst, int(round(per_device[worst])), _figures(job, on_worst, steps))


def lever_facts(job: ReplayJob, found: Mapping[str, Found], steps: int) -> tuple[set[str], dict[str, str]]:
    """What the trace shows about the levers, as stack facts for the remedies (flag, and where it shows, in
    words): the permutations' backward scatter-adds, an exchange over a group of one chip, and routed experts
    slower than the program's other compute-bound ops (its dense matmuls)."""
    in_use: set[str] = set()
    evidence: dict[str, str] = {}
    scatter = found.get("scatter-backward")
    if scatter is not None:
        fig = scatter.figures
        util = _utilization(job, fig).get("hbm_util")
        ops = _top_ops(job, scatter.rows, scatter.removed, steps)
        in_use.add("scatter_backward")
        evidence["scatter_backward"] = (
            f"the backward of the permutations runs as scatter-adds ({', '.join(o['op'] for o in ops)}), "
            f"{fig.time_ns / 1e6:.1f} ms per step" + (f" at {util:.1%} of HBM bandwidth" if util is not None else "")
        )
    inside = np.zeros(job.size, dtype=bool)
    inside[job.step_rows] = True
    roles_c, roles_v = job.codes("role")
    exchange = np.isin(np.asarray(roles_v, dtype=object), EXCHANGE_ROLES)
    one_chip = inside & (job.bucket == BUCKETS.index("memcpy")) & np.append(exchange, False)[roles_c]
    if one_chip.any():
        devices = max(int(np.unique(job.codes("device")[0][one_chip]).size), 1)
        per_step = float((job.end - job.start)[one_chip].sum()) / steps / devices
        count = int(one_chip.sum()) / steps / devices
        in_use.add("one_chip_exchange")
        evidence["one_chip_exchange"] = (
            f"{count:g} expert exchanges per step over a group of one chip ({per_step / 1e6:.2f} ms per step): "
            "copies inside the chip, with their buffers and the re-sort of what they return"
        )
    if _ragged_experts(job, inside):
        in_use.add("ragged_experts")
    rates = _rates(job, inside)
    if rates is not None:
        grouped, dense = rates
        if grouped < dense:
            in_use.add("grouped_below_dense")
            evidence["grouped_below_dense"] = (
                f"the routed experts' compute-bound ops run at {grouped / 1e12:.1f} TFLOP/s, the program's other "
                f"compute-bound ops (its dense matmuls) at {dense / 1e12:.1f} TFLOP/s on the same chip"
            )
    return in_use, evidence


# the routed experts as a grouped GEMM over the rows routed to them (a ragged dot: XLA's ragged-dot, the TPU's
# Mosaic kernel, megablox gmm; a GPU's grouped GEMM kernels), not a dense einsum over capacity-padded buffers
_RAGGED = re.compile(r"ragged|gmm|grouped", re.IGNORECASE)


def _ragged_experts(job: ReplayJob, inside: np.ndarray) -> bool:
    roles_c, roles_v = job.codes("role")
    experts = np.append(np.asarray(roles_v, dtype=object) == "experts", False)[roles_c] & inside
    if not experts.any():
        return False
    names_c, names_v = job.codes("name")
    ragged_name = np.append(np.array([bool(_RAGGED.search(str(v))) for v in names_v], dtype=bool), False)
    op_c, op_v = job.codes("opcode")
    ragged_op = np.append(np.isin(np.asarray(op_v, dtype=object), ("ragged-dot", "custom-call")), False)
    return bool((experts & (ragged_name[names_c] | ragged_op[op_c])).any())


DENSE_SHARE = 0.01  # the other compute-bound ops a grouped GEMM is held against: at least this share of the time


def _rates(job: ReplayJob, inside: np.ndarray) -> tuple[float, float] | None:
    """(FLOP/s of the routed experts' compute-bound ops, FLOP/s of the other compute-bound ops), each over its
    time; None where either is not seen (or the others are under ``DENSE_SHARE`` of the steps' time)."""
    if not job.peak_flops_per_s or not job.peak_hbm_bytes_per_s:
        return None
    f = job.table["flops"].to_numpy(np.float64)
    b = job.table["hbm_bytes"].to_numpy(np.float64)
    d = (job.end - job.start).astype(np.float64)
    bound = (f / job.peak_flops_per_s >= np.nan_to_num(b) / job.peak_hbm_bytes_per_s) & (f > 0) & inside
    roles_c, roles_v = job.codes("role")
    experts = np.append(np.asarray(roles_v, dtype=object) == "experts", False)[roles_c]
    # the dense matmuls: where XLA names its ops' categories, the matmul fusions ("convolution fusion" on a TPU),
    # not every op the roofline calls compute-bound: an op whose arrays sit in on-chip memory states almost no
    # HBM bytes (a top-1 program's scatters), so it reads as compute-bound at a rate no matmul has
    cat_c, cat_v = job.codes("category")
    matmul = np.append(np.char.find(np.asarray(cat_v, dtype=str), "convolution") >= 0, False)[cat_c]
    dense = matmul if (matmul & bound & ~experts).any() else np.ones(job.size, dtype=bool)
    mine, others = bound & experts, bound & ~experts & dense
    total = float(d[inside].sum())
    if not mine.any() or not others.any() or float(d[others].sum()) < DENSE_SHARE * total:
        return None
    return float(f[mine].sum() / (d[mine].sum() * 1e-9)), float(f[others].sum() / (d[others].sum() * 1e-9))


def on_chip_levers(job: ReplayJob | None, stack: Stack) -> tuple[list[Opportunity], Stack]:
    """The on-chip levers of a job (kind ``on-chip``), and the stack with the facts they show (remedies fit
    on them); none where no activity has a roof (no counts, or no peak known)."""
    if job is None or not job.size or "role" not in job.table.columns or bool(np.isnan(job.roof_ns).all()):
        return [], stack
    steps = max(int(job.step_numbers.size), 1)
    inside = np.zeros(job.size, dtype=bool)
    inside[job.step_rows] = True
    spans = job.measured_spans
    step_ns = float(spans.mean()) if spans.size else 0.0
    roles_c, roles_v = job.codes("role")
    bucket_memcpy = job.bucket == BUCKETS.index("memcpy")
    exchange = np.append(np.isin(np.asarray(roles_v, dtype=object), EXCHANGE_ROLES), False)[roles_c]
    found: dict[str, Found] = {}
    # an exchange over one chip, and none between chips (whose own buffers would be taken with it)
    one_chip = bool((inside & bucket_memcpy & exchange).any()) and not bool(
        (inside & (job.bucket == BUCKETS.index("comm")) & exchange).any()
    )
    for lever in candidates(one_chip):
        got = _found(job, lever, steps, inside)
        if got is not None and got.worst_ns / steps >= LEVER_SHARE * step_ns > 0:
            found[lever.key] = got
    in_use, evidence = lever_facts(job, found, steps)
    stack = replace(stack, in_use=stack.in_use | in_use, evidence={**stack.evidence, **evidence})
    return [_opportunity(job, got, steps, stack) for got in found.values()], stack


def _opportunity(job: ReplayJob, got: Found, steps: int, stack: Stack) -> Opportunity:
    lever, fig = got.lever, got.figures
    device = str(job.device_names[got.worst])
    dev_c = job.codes("device")[0]
    roles_c, roles_v = job.codes("role")
    util = _utilization(job, fig)
    per_role: dict[str, dict[str, int]] = {}
    on_worst = got.rows[dev_c[got.rows] == got.worst]
    for code in np.unique(roles_c[on_worst]).tolist():
        mine = on_worst[roles_c[on_worst] == code]
        role = str(roles_v[code]) if code >= 0 else "other"
        per_role[role] = {
            "time_ns": round(float((job.end - job.start)[mine].sum()) / steps),
            "below_roof_ns": round(float(got.removed[mine].sum()) / steps),
        }
    per_role = dict(sorted(per_role.items(), key=lambda kv: ROLES.index(kv[0]) if kv[0] in ROLES else len(ROLES)))
    ops = _top_ops(job, on_worst, got.removed, steps)
    left = fig.time_ns - got.worst_ns / steps
    rates = []
    if "flop_util" in util and fig.bound == "compute":
        rates.append(f"{util['flop_util']:.1%} of the FLOP/s peak")
    if "hbm_util" in util:
        rates.append(f"{util['hbm_util']:.1%} of HBM bandwidth")
    detail = f"{fig.time_ns / 1e6:.2f} ms per step" + (f" at {' and '.join(rates)}" if rates else "")
    detail += f" ({fig.bound}-bound), {left / 1e6:.2f} ms at the roof"
    if fig.counted_ns < fig.time_ns:
        detail += f"; {(fig.time_ns - fig.counted_ns) / 1e6:.2f} ms without counts kept"
    if ops:
        detail += "; most below it: " + ", ".join(f"{o['op']} {o['below_roof_ns'] / 1e6:.2f} ms" for o in ops)
    title = lever.title
    if lever.key == "optimizer" and fig.bound == "memory":
        title = "the optimizer's update below HBM bandwidth (memory-bound)"
    if lever.key == "experts" and stack.uses("grouped_below_dense"):
        title = "the routed experts' GEMMs below the chip's roof and below its dense matmuls"
    situation = Situation(
        kind=ON_CHIP,
        role=lever.key,
        devices=devices_kind([device], stack.device_kinds),
        bound=fig.bound,
    )
    fix = choose(situation, stack)
    return Opportunity(
        title=title,
        kind=ON_CHIP,
        name=lever.key,
        link=None,
        exposed_ns=int(round(float(got.removed[got.rows].sum()))),
        saving_bound_ns=got.worst_ns,
        bound_from="roof",
        evidence={
            "terms": list(lever.terms),
            "count": int(on_worst.size),
            "devices": int(np.unique(dev_c[got.rows]).size),
            "worst_device": device,
            "total_ns": int(round(fig.time_ns * steps)),
            "time_per_step_ns": round(fig.time_ns),
            "roof_per_step_ns": round(fig.roof_ns),
            "below_roof_per_step_ns": round(got.worst_ns / steps),
            "bound": fig.bound,
            **util,
            "roles": per_role,
            "ops": ops,
            "detail": detail,
        },
        remedy=fix.said(stack),
        remedy_id=fix.id,
        remedy_family=fix.family,
        remedy_checked=fix.checked(situation, stack),
    )
