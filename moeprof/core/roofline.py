"""Spec §10 per activity: its counts (FLOPs ``f``, HBM bytes ``b``), its time at the chip's roof, and the MoE role
it serves.

What the levers and the ``roof`` term stand on (insight/levers.py, the projection's ``roof(FILTERS)``): per
row of the event table, ``f`` and ``b`` (NaN where the trace does not state them: no roofline, not zero),
``roof_ns = max(f/P, b/B)`` against the chip's peaks, and the role (:data:`ROLES`), read from the event
table's ``role`` column where a reader or the roles pass wrote one, else from the scope the activity serves
and the op itself (:func:`activity_roles`)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from .events import column_codes, lookup
from .vocabulary import vocabulary

# spec §10's roles, in the order a roles table lists them
ROLES = (
    "router",
    "permute",
    "dispatch",
    "experts",
    "combine",
    "unpermute",
    "shared",
    "attention",
    "optimizer",
    "other",
)
# the token movement around the experts (spec §10's glue, with the one-chip exchanges: insight/levers.py)
GLUE_ROLES = ("router", "permute", "unpermute")
EXCHANGE_ROLES = ("dispatch", "combine")
ON_CHIP = "on-chip"  # the kind of an opportunity that is on-chip work below the roof (insight.levers)


def activity_counts(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: FLOPs ``f`` (moeprof's recount of a ragged dot where it made one, else XLA's ``flops``) and
    HBM bytes ``b`` (XLA's ``bytes_accessed``), float64, NaN where the trace states none."""
    n = len(table)

    def column(name: str) -> np.ndarray:
        if name not in table.columns:
            return np.full(n, np.nan)
        return table[name].to_numpy(np.float64, na_value=np.nan)

    recounted = column("recounted_flops")
    flops = np.where(np.isnan(recounted), column("flops"), recounted)
    return flops, column("bytes_accessed")


def activity_roof_ns(
    flops: np.ndarray,
    hbm_bytes: np.ndarray,
    peak_flops_per_s: float | None,
    peak_hbm_bytes_per_s: float | None,
) -> np.ndarray:
    """Per row: ``max(f/P, b/B)`` in ns (float64); NaN where neither count is known against a known peak (an
    uncounted activity has no roof, and is never shown at 0). A count known against its peak bounds the roof
    from below when the other is unknown."""
    flops = np.asarray(flops, dtype=np.float64)
    hbm_bytes = np.asarray(hbm_bytes, dtype=np.float64)
    compute = flops / peak_flops_per_s * 1e9 if peak_flops_per_s else np.full(flops.shape, np.nan)
    memory = hbm_bytes / peak_hbm_bytes_per_s * 1e9 if peak_hbm_bytes_per_s else np.full(flops.shape, np.nan)
    return np.fmax(compute, memory)


_ROUTER = re.compile(r"(?i)router|\bgate\b|gating|top_?k")
_ATTENTION = re.compile(r"(?i)attn|attention|flash|fmha|sdpa")
_OPTIMIZER = re.compile(r"(?i)optim|adam|sgd|lamb\b|multi_tensor")
_SHARED = re.compile(r"(?i)shared")
_DISPATCH = re.compile(r"(?i)dispatch")
_COMBINE = re.compile(r"(?i)combine")
_UNPERMUTE = re.compile(r"(?i)unpermute|unsort|un_permute")
_PERMUTE = re.compile(r"(?i)permute|moe_sort|moe_align|token_sort")
_EXCHANGE_KINDS = ("all-to-all", "ep-dispatch", "ep-combine")


def _scope_role(scope: str) -> str:
    """The role a scope path names by the common words (spec §10), "" where it names none; inside a MoE layer
    without a sub-scope word, ``moe`` (the permutation around the experts, or their exchange: the op says
    which). The deepest word wins: ``layer0/moe/router`` is the router."""
    if not scope:
        return ""
    vocab = vocabulary()
    for part in reversed(scope.split("/")):
        if _SHARED.search(part):
            return "shared"
        if vocab.expert_scope.search(part):
            return "experts"
        if _ROUTER.search(part):
            return "router"
        if _DISPATCH.search(part):
            return "dispatch"
        if _COMBINE.search(part):
            return "combine"
        if _UNPERMUTE.search(part):
            return "unpermute"
        if _PERMUTE.search(part):
            return "permute"
        if _ATTENTION.search(part):
            return "attention"
        if _OPTIMIZER.search(part):
            return "optimizer"
    return "moe" if vocab.moe_scope.search(scope) else ""


def _op_role(name: str, opcode: str) -> str:
    """The role an op says by itself (its HLO opcode, its kernel name), "" where it says none."""
    vocab = vocabulary()
    if opcode == "ragged-dot" or (vocab.gemm.search(name) and vocab.grouped_gemm.search(name)):
        return "experts"
    if vocab.expert_scope.search(name):
        return "experts"
    if _UNPERMUTE.search(name):
        return "unpermute"
    if _PERMUTE.search(name):
        return "permute"
    if re.search(r"(?i)topk|top_k", name):
        return "router"
    if _ATTENTION.search(name):
        return "attention"
    if _OPTIMIZER.search(name):
        return "optimizer"
    return ""


def activity_roles(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row, its role as (codes into ``values``, values) (spec §10's evidence, first that holds): the event
    table's ``role`` column where present; else the scope the activity serves (``component``: a backward op's
    forward scope, a weight update's parameter scope; else its own ``scope``) by the common words, with
    inside a dispatch or combine scope the exchange itself ``dispatch``/``combine`` and the rest (buffers,
    layout copies, the weighting) ``permute``/``unpermute``; then the op (ragged dot, grouped GEMM, EP kernels,
    ragged all-to-all, top-k, permute kernels); else ``other``. Each string is judged once, over its codes."""
    values = np.array(ROLES, dtype=object)
    index = {r: i for i, r in enumerate(ROLES)}
    n = len(table)
    if "role" in table.columns:
        codes, given = column_codes(table["role"])
        mapped = np.array([index.get(str(v), index["other"]) for v in given.tolist()], dtype=np.int64)
        return lookup(codes, mapped, index["other"]), values
    if not n:
        return np.zeros(0, dtype=np.int64), values
    none, moe = -1, len(ROLES)  # no word; a MoE layer's scope without a sub-scope word
    words = {**index, "": none, "moe": moe}

    def judged(column: str, judge: Callable[[str], object], missing: object) -> np.ndarray:
        """Per row: ``judge`` of its string, once per distinct string (``missing`` where absent)."""
        if column not in table.columns:
            return np.full(n, missing)
        codes, distinct = column_codes(table[column])
        said = [judge(str(v)) for v in distinct.tolist()]
        return lookup(codes, np.array(said, dtype=type(missing)), missing)

    def scope_code(scope: str) -> int:
        return words[_scope_role(scope)]

    served = judged("component", scope_code, none)
    role = np.where(served != none, served, judged("scope", scope_code, none))
    # the op's own word: an HLO ragged dot, else what its kernel name says (each distinct name judged once)
    op = np.where(judged("opcode", lambda o: o == "ragged-dot", False), index["experts"], none)
    op = np.where(op != none, op, judged("name", lambda name: words[_op_role(name, "")], none))
    exchange = judged("kind", lambda k: k in _EXCHANGE_KINDS, False)
    exchange |= judged("opcode", lambda o: o.startswith("ragged-all-to-all"), False)
    exchange &= ~judged("bucket", lambda b: b == "compute", False)
    ep_combine = judged("kind", lambda k: k == "ep-combine", False)
    role = np.where(role != none, role, op)
    dispatch, combine = index["dispatch"], index["combine"]
    # an exchange is the dispatch or the combine whatever scope it runs in; around it, the local layout
    exchange_role = np.where((role == combine) | ep_combine, combine, dispatch)
    role = np.where(exchange, exchange_role, role)
    role = np.where(~exchange & (role == dispatch), index["permute"], role)
    role = np.where(~exchange & (role == combine), index["unpermute"], role)
    # a MoE layer's op in no sub-scope: the op's own word, else the permutation around the experts
    role = np.where(role == moe, np.where(op != none, op, index["permute"]), role)
    role = np.where((role == none) | (role == moe), index["other"], role)
    return role.astype(np.int64), values
