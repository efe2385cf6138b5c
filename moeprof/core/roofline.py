"""Spec §10 "Counts" and "Roofline": the FLOPs and HBM bytes of every device activity, and how far it runs
below the chip's roof.

Counts. FLOPs ``f`` of one execution: moeprof's own count where it made one (``recounted_flops``: a ragged dot's
2·M·K·N from the HLO shapes, a Kineto GEMM or attention kernel's from its launching op's shapes), else XLA's
``model_flops`` (what xprof's op_profile calls ``rawFlops``), else XLA's ``flops``. HBM bytes ``b``: the
``hbm_bytes`` column (XLA's memory_access_breakdown, HBM reads and writes; else ``bytes_accessed``; a Kineto
kernel's launching op's inputs and output once). An activity with neither has no roofline: its time is
``uncounted_ns``, never a zero.

Roofline. With duration ``d`` and the chip's peaks ``P`` (FLOP/s) and ``B`` (HBM bytes/s): ``roof_ns =
max(f/P, b/B)``, ``bound`` compute where ``f/P >= b/B``, ``below_roof_ns = d - roof_ns``, ``flop_util =
f/(d·P)``, ``hbm_util = b/(d·B)`` (never capped: above 1 a count is wrong, and is said).

Per file the map sums activities into small tables (:func:`device_roofline`: per device, op, scope, role and
arithmetic intensity, so that max-of-sums at the merge equals the sum of the activities' maxima); the merge
folds them into the JSON's ``roofline`` and ``roles`` (:func:`roofline_section`, :func:`role_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from . import intervals as iv
from .events import combine_codes, first_rows, lookup, narrow_codes, narrowest_int
from .roles import EXCHANGES, GLUE, ROLES, row_roles
from .scopes import NO_SCOPE, fold_layers, scope_key

# the names the levers and the roof term use (insight.levers, the projection): the roles' own, one place
GLUE_ROLES = GLUE  # the token movement around the experts (with the one-chip exchanges)
EXCHANGE_ROLES = EXCHANGES
ON_CHIP = "on-chip"  # the kind of an opportunity that is on-chip work below the roof (insight.levers)

OPS_SHARE = 0.002  # an op is listed in ``roofline.ops`` from this share of the busy time (xprof lists by time)


# ---------------------------------------------------------------- per activity


def activity_counts(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row of an event table: FLOPs f and HBM bytes b (float64, NaN where unknown), spec §10 Counts."""
    n = len(table)

    def column(name: str) -> np.ndarray:
        return table[name].to_numpy(np.float64) if name in table.columns else np.full(n, np.nan)

    recounted, model, xla = column("recounted_flops"), column("model_flops"), column("flops")
    flops = np.where(~np.isnan(recounted), recounted, np.where(~np.isnan(model), model, xla))
    # HBM bytes where a reader read them (the TPU readers fill them, with this same fallback), else every memory
    # space's bytes_accessed (a table built without them)
    hbm = column("hbm_bytes")
    return flops, np.where(np.isnan(hbm), column("bytes_accessed"), hbm)


def activity_roles(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row, its MoE role as (codes into ``values``, values = :data:`ROLES`): the event table's ``role`` column
    where filled, else decided now (core.roles: one set of rules, roles.toml)."""
    return row_roles(table), np.array(ROLES, dtype=object)


def table_roles(table: pd.DataFrame) -> np.ndarray:
    """Per row of an event table, its role's index in :data:`ROLES` (core.roles), as int8: what the table's
    ``EventColumns`` keep under ``roofline:roles`` for its devices (1 byte a row, not 8)."""
    return row_roles(table).astype(narrowest_int(len(ROLES)))


def roles_of(columns: Any) -> np.ndarray:
    """:func:`table_roles` of an ``EventColumns``' table, decided once per table: its devices' roofline and roles,
    the replay's columns and the router term read this one array."""
    return cast("np.ndarray", columns.derived("roofline:roles", lambda: table_roles(columns.table)))


def counts_of(columns: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`activity_counts` of an ``EventColumns``' table, decided once per table (the roofline's groups and
    the replay's columns read them)."""
    return cast("tuple[np.ndarray, np.ndarray]", columns.derived("counts", lambda: activity_counts(columns.table)))


def activity_roof_ns(
    flops: np.ndarray, hbm_bytes: np.ndarray, peak_flops_per_s: float | None, peak_hbm_bytes_per_s: float | None
) -> np.ndarray:
    """Per row: roof_ns = max(f/P, b/B) in ns (float64), NaN where the activity has no counts (a count whose
    peak is unknown counts as none)."""
    f = np.asarray(flops, dtype=np.float64)
    b = np.asarray(hbm_bytes, dtype=np.float64)
    compute = f / peak_flops_per_s * 1e9 if peak_flops_per_s else np.full(f.shape, np.nan)
    memory = b / peak_hbm_bytes_per_s * 1e9 if peak_hbm_bytes_per_s else np.full(b.shape, np.nan)
    return np.fmax(compute, memory)


# ---------------------------------------------------------------- counts from shapes (Kineto Input Dims)

# element sizes of the dtypes PyTorch's profiler writes in "Input type"
DTYPE_BYTES = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1, "int": 4, "long int": 8,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
}  # fmt: skip
GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear", "aten::_scaled_mm"}
GROUPED_GEMMS = {"aten::_grouped_mm", "aten::_scaled_grouped_mm"}
# attention ops that launch the kernels: (q's position among the inputs, q's layout, is_causal's position in the
# Concrete Inputs, backward)
ATTENTION = {
    "aten::_flash_attention_forward": (0, "bshd", 8, False),
    "aten::_scaled_dot_product_flash_attention": (0, "bhsd", 4, False),
    "aten::_scaled_dot_product_cudnn_attention": (0, "bhsd", 6, False),
    "aten::_flash_attention_backward": (1, "bshd", 11, True),
    "aten::_scaled_dot_product_flash_attention_backward": (1, "bhsd", 11, True),
}
COUNTED_OPS = frozenset(GEMMS | GROUPED_GEMMS | set(ATTENTION))  # the ops counted from their shapes
BACKWARD_ATTENTION = 2.5  # spec §10: an attention backward does 2.5x its forward's FLOPs


def _size(dims: Sequence[int]) -> int:
    return math.prod(int(d) for d in dims) if dims else 1


def shape_counts(op: str, dims: Any, types: Any, concrete: Any) -> tuple[float, float]:
    """FLOPs and HBM bytes of one execution of a PyTorch op from its recorded shapes (``Input Dims``, ``Input
    type``, ``Concrete Inputs`` as the profiler writes them, parsed JSON), spec §10: a GEMM 2·M·N·K, a grouped
    GEMM 2·(Σ rows)·K·N, an attention forward 4·B·H·Sq·Sk·D (half where causal), its backward 2.5x that; the bytes
    every tensor input and the output once, at their element sizes. (NaN, NaN) for any other op or shapes it
    cannot read (a variable-length attention: its per-sequence lengths are not in the shapes)."""
    none = (math.nan, math.nan)
    if not isinstance(dims, list) or not isinstance(types, list):
        return none
    tensors = [(d, types[i] if i < len(types) else "") for i, d in enumerate(dims)]
    try:
        if op in GEMMS:
            return _gemm(op, tensors)
        if op in GROUPED_GEMMS:
            return _grouped_gemm(tensors)
        if op in ATTENTION:
            return _attention(op, tensors, concrete if isinstance(concrete, list) else [])
    except (TypeError, ValueError, IndexError):
        return none
    return none


def _is_tensor(t: tuple[Any, str]) -> bool:
    dims, kind = t
    return isinstance(dims, list) and len(dims) > 0 and kind in DTYPE_BYTES


def _bytes_of(dims: Sequence[int], kind: str) -> float:
    return float(_size(dims) * DTYPE_BYTES[kind])


def _gemm(op: str, tensors: list[tuple[Any, str]]) -> tuple[float, float]:
    ins = [t for t in tensors if _is_tensor(t)]
    if op in ("aten::addmm", "aten::baddbmm"):
        a, b = ins[1], ins[2]
        extra = [ins[0]]
    elif op == "aten::linear":
        a, w = ins[0], ins[1]  # x [..., K], weight [N, K]
        k, n = int(a[0][-1]), int(w[0][0])
        m = _size(a[0][:-1])
        out = float(m * n * DTYPE_BYTES[a[1]])
        return 2.0 * m * n * k, sum(_bytes_of(*t) for t in ins) + out
    else:
        a, b = ins[0], ins[1]
        extra = ins[2:] if op == "aten::_scaled_mm" else []
    (da, ka), (db, _) = a, b
    if len(da) == 2 and len(db) == 2:
        m, k, n, batch = int(da[0]), int(da[1]), int(db[1]), 1
    elif len(da) == 3 and len(db) == 3:
        batch, m, k, n = int(da[0]), int(da[1]), int(da[2]), int(db[2])
    elif len(db) == 2:  # matmul of [..., M, K] by [K, N]
        m, k, n, batch = _size(da[:-1]), int(da[-1]), int(db[1]), 1
    else:
        raise ValueError("shapes")
    out = float(batch * m * n * DTYPE_BYTES[ka if op != "aten::_scaled_mm" else "c10::BFloat16"])
    moved = _bytes_of(*a) + _bytes_of(*b) + sum(_bytes_of(*t) for t in extra) + out
    return 2.0 * batch * m * n * k, moved


def _grouped_gemm(tensors: list[tuple[Any, str]]) -> tuple[float, float]:
    ins = [t for t in tensors if _is_tensor(t)]
    (da, ka), (db, _) = ins[0], ins[1]
    if len(da) != 2 or len(db) != 3:  # tokens [Σ rows, K] by weights [G, K, N]
        raise ValueError("shapes")
    rows, k, n = int(da[0]), int(da[1]), int(db[2])
    out = float(rows * n * DTYPE_BYTES[ka])
    return 2.0 * rows * k * n, sum(_bytes_of(*t) for t in ins) + out


def _attention(op: str, tensors: list[tuple[Any, str]], concrete: list[Any]) -> tuple[float, float]:
    q_at, layout, causal_at, backward = ATTENTION[op]
    q, k = tensors[q_at], tensors[q_at + 1]
    if not (_is_tensor(q) and _is_tensor(k)) or len(q[0]) != 4 or len(k[0]) != 4:
        raise ValueError("shapes")
    if layout == "bshd":
        (b, sq, h, d), sk = q[0], k[0][1]
    else:
        (b, h, sq, d), sk = q[0], k[0][2]
    causal = str(concrete[causal_at]).strip().lower() == "true" if causal_at < len(concrete) else False
    forward = 4.0 * int(b) * int(h) * int(sq) * int(sk) * int(d) * (0.5 if causal else 1.0)
    ins = [t for t in tensors if _is_tensor(t)]
    moved = sum(_bytes_of(*t) for t in ins)
    if backward:  # dq, dk, dv: the sizes of q, k, v
        moved += _bytes_of(*q) + _bytes_of(*k) + _bytes_of(*tensors[q_at + 2])
        return forward * BACKWARD_ATTENTION, moved
    return forward, moved + _bytes_of(*q)  # the output: q's shape


# ---------------------------------------------------------------- per file: the map's small tables

ROOFLINE_COLUMNS = [
    "device", "op", "scope", "role", "intensity", "count", "time_ns", "counted_ns", "flops", "hbm_bytes",
    "flops_known", "bytes_known",
]  # fmt: skip
ROLE_COLUMNS = ["device", "role", "steps", "time_ns", "exposed_ns", "one_device_ns", "row_flops"]


class _TableGroups:
    """The roofline's groups of a whole event table, decided once and shared by its devices: per row its group
    (op, scope key, role, arithmetic intensity, as a code numbered in order of first appearance), its FLOPs and
    HBM bytes, and each group's strings."""

    def __init__(self, table: pd.DataFrame, shared: Any = None) -> None:
        """``shared``: the table's ``EventColumns``, whose counts and roles the replay's columns read too (each
        decided once)."""
        # the table's codes of these columns, shared with the other readers of the table where it has them
        names = ("hlo_op", "name", "scope")
        columns = {c: shared.codes(c) if shared is not None else narrow_codes(table[c]) for c in names}
        if shared is not None:
            self.flops, self.bytes = counts_of(shared)
            roles = roles_of(shared)
        else:
            self.flops, self.bytes = activity_counts(table)
            roles = row_roles(table)
        self.known_f, self.known_b = ~np.isnan(self.flops), ~np.isnan(self.bytes)
        f, b = self.flops, self.bytes
        # whether any row has a count (a GPU trace without shapes: none, and no sums of counts per device)
        self.counted = bool(self.known_f.any() or self.known_b.any())
        # intensity as float32 (7 significant digits): the same op repeated is one group
        if self.counted:
            with np.errstate(divide="ignore", invalid="ignore"):
                both = self.known_f & self.known_b & (b > 0)
                ratio = np.where(both, f / np.where(b > 0, b, 1), np.where(self.known_f, np.inf, 0.0))
            intensity = np.where(self.known_f | self.known_b, ratio, -1.0).astype(np.float32)
        else:
            intensity = np.full(f.shape, -1.0, dtype=np.float32)
        op_c, op_v = columns["hlo_op"]
        name_c, name_v = columns["name"]
        named = lookup(op_c, np.array([v != "" for v in op_v.tolist()], dtype=bool), False)
        # a name's code past the ops' codes: widened, a narrow code plus the count of ops would wrap
        op = np.where(named, op_c, np.where(name_c >= 0, name_c.astype(np.int64) + len(op_v), -1))
        scope_c, scope_v = columns["scope"]
        # an intensity of -1 on every row tells no two groups apart: left out of the codes
        group = combine_codes(op, scope_c, roles, *([intensity] if self.counted else []))
        first = first_rows(group)
        self.group = group.astype(narrowest_int(first.size))  # kept for the table: 1-4 bytes a row, not 8
        ops = np.concatenate([np.asarray(op_v, dtype=object), np.asarray(name_v, dtype=object)])
        keys = np.array([scope_key(str(v))[0] if v else NO_SCOPE for v in scope_v.tolist()] + [NO_SCOPE], dtype=object)
        self.op = lookup(op[first], ops, "")
        self.scope = keys[scope_c[first]]
        self.role = np.array(ROLES, dtype=object)[roles[first]]
        self.intensity = intensity[first]


def device_roofline(device: str, rows: Any, clipped: np.ndarray) -> pd.DataFrame:
    """Per (op, scope, role, arithmetic intensity) of one device (a ``DeviceTimeline``'s rows, their time inside the
    window ``clipped``): activities, time, the time of those with counts, and the FLOPs and HBM bytes they do in
    the window (a count times the share of the activity's time inside it) (ROOFLINE_COLUMNS). Grouping by the
    intensity f/b keeps the merge's max(Σf/P, Σb/B) equal to the sum of the activities' own roofs. The groups are
    the table's, decided once (:class:`_TableGroups`): a device sums its rows into them."""
    inside = np.flatnonzero(clipped > 0)
    if not inside.size:
        return pd.DataFrame(columns=ROOFLINE_COLUMNS)
    shared = rows.columns
    groups: _TableGroups = shared.derived("roofline:groups", lambda: _TableGroups(shared.table, shared))
    positions = rows.positions[inside]
    group = groups.group[positions]
    size = groups.op.size  # the table's groups: sums by bincount, no sort of the device's rows
    counts = np.bincount(group, minlength=size)
    used = np.flatnonzero(counts)
    time = clipped[inside].astype(np.float64)

    def summed(values: np.ndarray) -> np.ndarray:
        return np.bincount(group, weights=values, minlength=size)[used]

    if groups.counted:
        share = time / np.maximum(rows.end[inside] - rows.start[inside], 1)
        known_f, known_b = groups.known_f[positions], groups.known_b[positions]
        counted = {
            "counted_ns": summed(np.where(known_f | known_b, time, 0.0)).astype(np.int64),
            "flops": summed(np.nan_to_num(groups.flops[positions] * share)),
            "hbm_bytes": summed(np.nan_to_num(groups.bytes[positions] * share)),
            "flops_known": summed(known_f.astype(np.float64)).astype(np.int64),
            "bytes_known": summed(known_b.astype(np.float64)).astype(np.int64),
        }
    else:  # no row of the table has a count: the sums of counts are zeros
        zeros = np.zeros(used.size, dtype=np.int64)
        counted = {"counted_ns": zeros, "flops": np.zeros(used.size), "hbm_bytes": np.zeros(used.size),
                   "flops_known": zeros.copy(), "bytes_known": zeros.copy()}  # fmt: skip
    # the columns in ROOFLINE_COLUMNS order
    return pd.DataFrame(
        {
            "device": device,
            "op": groups.op[used],
            "scope": groups.scope[used],
            "role": groups.role[used],
            "intensity": groups.intensity[used],
            "count": counts[used].astype(np.int64),
            "time_ns": summed(time).astype(np.int64),
            **counted,
        }
    )


def device_roles(
    device: str,
    rows: Any,
    clipped: np.ndarray,
    win_s: np.ndarray,
    win_e: np.ndarray,
    steps: int,
    measured: Any = None,
) -> pd.DataFrame:
    """Per role of one device: its time inside the window, its exposed time (the union of its activities less
    the union of every other role's: the time the device does that alone), and the time of its exchanges on a
    group of one device (local copies: token movement), and the FLOPs of its ops moeprof counted from their rows
    (``recounted_flops``: the ragged dots and the weight gradients that hold them, whose work follows the rows a
    grouped GEMM computes, padding included: spec §10's useful work scales these) (ROLE_COLUMNS); ``steps``: the
    steps the window holds; ``measured``: the rows' ``WindowMeasure`` over this window, whose pieces and busy
    time are these rows clipped to it and their union (not clipped and merged again)."""
    inside = clipped > 0
    if not inside.any():
        return pd.DataFrame(columns=ROLE_COLUMNS)
    table = rows.columns.table
    roles = roles_of(rows.columns)[rows.positions]
    one_device = rows.columns.derived("roofline:one-device", lambda: _one_device_exchange(table))[rows.positions]
    if measured is not None and measured.pieces[0].size:
        s, e, idx = measured.pieces
        busy: int | None = measured.figures.busy_ns
    else:
        s, e, idx = iv.clip(rows.start, rows.end, win_s, win_e)
        busy = None
    role_of = roles[idx]
    present = np.flatnonzero(np.bincount(role_of, minlength=len(ROLES)))
    alone = _alone(s, e, role_of, busy)
    out = []
    comm = rows.is_comm
    counted = "recounted_flops" in table.columns and rows.columns.derived(
        "roofline:recounted", lambda: not bool(np.isnan(rows.columns.numbers("recounted_flops", np.float64)).all())
    )  # none counted in the table: none on any device (no pass over each device's rows)
    recounted = rows.numbers("recounted_flops", np.float64) if counted else None
    if recounted is not None and bool(np.isnan(recounted).all()):
        recounted = None  # none counted on this device: each role's row FLOPs a sum of NaNs, 0.0
    share = np.where(inside, clipped / np.maximum(rows.end - rows.start, 1), 0.0) if recounted is not None else None
    # each role's time inside the window: float64 sums of int ns are exact below 2**53 (104 days)
    role_in = roles[inside]
    times = clipped[inside]
    exact = int(times.sum()) < 1 << 53
    by_role = np.bincount(role_in, weights=times, minlength=len(ROLES)) if exact else None
    # the roles with a one-device exchange, with a comm activity, inside the window (flags set by the few rows)
    local_roles = np.zeros(len(ROLES), dtype=bool)
    local_roles[role_in[one_device[inside]]] = True
    comm_roles = np.zeros(len(ROLES), dtype=bool)
    comm_roles[role_in[comm[inside]]] = True
    for r in present.tolist():
        exposed = int(alone[r]) if r < alone.size else 0
        of_role = inside & (roles == r) if by_role is None or share is not None else None
        time = int(by_role[r]) if by_role is not None else int(clipped[of_role].sum())
        # an exchange whose collectives all have a group of one device: the whole of it (the collective's local
        # copy and the ops XLA lowers it into beside it) is token movement inside the device
        local = ROLES[r] in EXCHANGES and bool(local_roles[r]) and not bool(comm_roles[r])
        row_flops = float(np.nansum(recounted[of_role] * share[of_role])) if share is not None else 0.0  # type: ignore[index]
        out.append(
            {
                "device": device,
                "role": ROLES[r],
                "steps": steps,
                "time_ns": time,
                "exposed_ns": int(exposed),
                "one_device_ns": time if local else 0,
                "row_flops": row_flops,
            }
        )
    return pd.DataFrame(out, columns=ROLE_COLUMNS)


UNIONS_UP_TO = 4  # roles present up to which _alone takes a union per role (each a linear pass), past it one sweep


def _alone(start: np.ndarray, end: np.ndarray, role: np.ndarray, busy: int | None = None) -> np.ndarray:
    """Per role (index into ROLES): the time only its activities run (the union of its activities less the union
    of every other role's). For a few roles, the union of all the activities less the union of the other roles',
    a linear pass each over the activities sorted by start; for more, one sweep over their starts and ends: a
    stretch belongs to a role where every activity running in it has that role (their roles' count, sum and sum
    of squares say so: a variance of 0). ``busy``: the length of the union of all the activities, where known."""
    n = start.size
    if not n:
        return np.zeros(len(ROLES), dtype=np.int64)
    if bool((end[:-1] <= start[1:]).all()):  # sorted by start and none overlaps (a TPU's ops): their own time
        return np.bincount(role, weights=end - start, minlength=len(ROLES)).astype(np.int64)
    present = np.flatnonzero(np.bincount(role, minlength=len(ROLES)))
    if present.size <= UNIONS_UP_TO:
        if not bool((start[1:] >= start[:-1]).all()):
            order = np.argsort(start, kind="stable")
            start, end, role = start[order], end[order], role[order]
        out = np.zeros(len(ROLES), dtype=np.int64)
        whole = iv.union_length(start, end, presorted=True) if busy is None else busy
        # |U(other roles)| without gathering their rows: in start order, each activity adds to the union what
        # lies past the latest end before it, max(0, end - max(start, reach)); the role's own activities end
        # at the first start (they add nothing and reach nowhere)
        floor = start[0]
        added = np.empty(n, dtype=np.int64)
        for r in present.tolist():
            ends = np.where(role != r, end, floor)
            reach = np.maximum.accumulate(ends)
            added[0] = floor
            added[1:] = reach[:-1]
            np.maximum(added, start, out=added)
            np.subtract(ends, added, out=added)
            np.maximum(added, 0, out=added)
            out[r] = whole - int(added.sum())
        return out
    points = np.concatenate([start, end])
    delta = np.concatenate([np.ones(n, dtype=np.int64), -np.ones(n, dtype=np.int64)])
    tag = np.concatenate([role, role]).astype(np.int64) + 1  # from 1: a stretch of no activity is told apart
    order = np.argsort(points, kind="stable")
    points, delta, tag = points[order], delta[order], tag[order]
    count = np.cumsum(delta)[:-1]
    total = np.cumsum(delta * tag)[:-1]
    squares = np.cumsum(delta * tag * tag)[:-1]
    length = np.diff(points)
    one = (count > 0) & (squares * count == total * total) & (length > 0)
    owner = total[one] // count[one] - 1
    return np.bincount(owner, weights=length[one], minlength=len(ROLES)).astype(np.int64)


def _one_device_exchange(table: pd.DataFrame) -> np.ndarray:
    """Per row: a collective on a group of one device (core.classify's group-of-one rule: a local copy)."""
    if "rule" not in table.columns:
        return np.zeros(len(table), dtype=bool)
    codes, values = narrow_codes(table["rule"])
    local = np.array([str(v).startswith("group-of-one") for v in values.tolist()], dtype=bool)
    return lookup(codes, local, False)


# ---------------------------------------------------------------- the job: the JSON's sections


def _figures(
    time_ns: float, flops: float, hbm: float, roof: float, counted_ns: float, peak: float | None, bw: float | None
) -> dict[str, Any]:
    """A row's roofline figures: utilizations over the time that has counts, the bound, the time below the roof."""
    flop_util = flops / (counted_ns * 1e-9 * peak) if peak and counted_ns > 0 else None
    hbm_util = hbm / (counted_ns * 1e-9 * bw) if bw and counted_ns > 0 else None
    compute = flops / peak * 1e9 if peak else 0.0
    memory = hbm / bw * 1e9 if bw else 0.0
    bound = None if not counted_ns or not (peak or bw) else ("compute" if compute >= memory else "memory")
    return {
        "flop_util": flop_util,
        "hbm_util": hbm_util,
        "bound": bound,
        "roof_ns": roof if counted_ns else None,
        "below_roof_ns": counted_ns - roof if counted_ns else None,
    }


def _with_roof(frame: pd.DataFrame, peak: float | None, bw: float | None) -> pd.DataFrame:
    """The per-group roof of the map's rows: max(Σf/P, Σb/B) of each (op, scope, role, intensity) group."""
    f = frame["flops"].to_numpy(np.float64)
    b = frame["hbm_bytes"].to_numpy(np.float64)
    fk = frame["flops_known"].to_numpy(np.int64) > 0
    bk = frame["bytes_known"].to_numpy(np.int64) > 0
    roof = activity_roof_ns(np.where(fk, f, np.nan), np.where(bk, b, np.nan), peak, bw)
    return frame.assign(roof_ns=np.nan_to_num(roof))


def _summed(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    cols = ["count", "time_ns", "counted_ns", "flops", "hbm_bytes", "roof_ns", "flops_known", "bytes_known"]
    return frame.groupby(by, sort=False)[cols].sum().reset_index()


def roofline_section(
    frame: pd.DataFrame,
    peak_flops: float | None,
    peak_bytes: float | None,
    source: str,
    busy_ns: int,
    steps: int,
    devices: int,
) -> dict[str, Any] | None:
    """The JSON ``roofline`` object from the files' ROOFLINE_COLUMNS rows (spec §10): the peaks and where they come
    from, the time without counts, and per op (those with at least :data:`OPS_SHARE` of the busy time, summed over
    the window as xprof's op_profile does), per scope (layers folded) and per role. None where no activity has
    counts."""
    if not len(frame) or int(frame["counted_ns"].sum()) == 0:
        return None
    if frame["device"].nunique() > 1:
        # the devices' rows in one order whatever order the files' results came in (a pool's, a cluster's): an
        # op's FLOPs summed over devices in another order differ in their last bit, and the JSON must not
        frame = frame.iloc[np.argsort(frame["device"].astype(str).to_numpy(dtype=object), kind="stable")]
    frame = _with_roof(frame, peak_flops, peak_bytes)
    uncounted = int(frame["time_ns"].sum() - frame["counted_ns"].sum())

    def rows(grouped: pd.DataFrame, names: list[str]) -> list[dict[str, Any]]:
        out = []
        for d in grouped.to_dict("records"):
            head = {k: d[k] for k in names}
            figures = _figures(d["time_ns"], d["flops"], d["hbm_bytes"], d["roof_ns"], d["counted_ns"], peak_flops,
                               peak_bytes)  # fmt: skip
            out.append(
                {
                    **head,
                    "count": int(d["count"]),
                    "time_ns": int(d["time_ns"]),
                    "uncounted_ns": int(d["time_ns"] - d["counted_ns"]),
                    "flops": float(d["flops"]) if d["flops_known"] else None,
                    "hbm_bytes": float(d["hbm_bytes"]) if d["bytes_known"] else None,
                    **figures,
                }
            )
        return sorted(out, key=lambda x: (-x["time_ns"], str(x.get(names[0]))))

    ops = _summed(frame, ["op", "role", "scope"])
    ops = ops[ops["time_ns"] >= OPS_SHARE * max(busy_ns, 1)]
    folded = fold_layers(sorted(frame["scope"].astype(str).unique()))
    scopes = _summed(frame.assign(scope=frame["scope"].astype(str).map(folded)), ["scope"])
    roles = _summed(frame, ["role"])
    return {
        "peak_flops": peak_flops,
        "peak_hbm_bytes_per_s": peak_bytes,
        "from": source,
        "uncounted_ns": uncounted,
        "steps": steps,
        "devices": devices,
        "ops": rows(ops, ["op", "role", "scope"]),
        "scopes": rows(scopes, ["scope"]),
        "roles": rows(roles, ["role"]),
    }


def role_rows(roles: pd.DataFrame, roofline: Mapping[str, Any] | None, devices: int) -> list[dict[str, Any]]:
    """The JSON ``roles`` (spec §10): per role, per step (the mean over steps and devices): its time, its share of
    the accumulated time (the roles partition the activities), exposed time, FLOPs, HBM bytes, roof and time below
    it (the roofline's window sums brought to one step in proportion to the time); every role that ran, in
    ROLES order."""
    if not len(roles):
        return []
    n = max(devices, 1)
    # one order of the rows whatever order the files' results came in (a pool's, a cluster's): float sums in
    # another order differ in their last bit, and the library's and the CLI's JSON must be equal
    ordered = roles.assign(device=roles["device"].astype(str)).sort_values(["role", "device"], kind="stable")
    per = ordered.assign(scale=1.0 / ordered["steps"].clip(lower=1))
    by_role = {str(r["role"]): r for r in (roofline or {}).get("roles") or ()}
    times = {role: float((g["time_ns"] * g["scale"]).sum()) / n for role, g in per.groupby("role", sort=False)}
    total = math.fsum(times[role] for role in ROLES if role in times)
    out = []
    for role in ROLES:
        if role not in times:
            continue
        g = per[per["role"] == role]
        time = times[role]
        counts = by_role.get(role) or {}
        window = float(g["time_ns"].sum())
        to_step = time / window if window else 0.0

        def per_step(key: str, counts: Mapping[str, Any] = counts, to_step: float = to_step) -> float | None:
            value = counts.get(key)
            return None if value is None else float(value) * to_step

        one_device = float((g["one_device_ns"] * g["scale"]).sum()) / n
        row_flops = float((g["row_flops"] * g["scale"]).sum()) / n if "row_flops" in g else 0.0
        out.append(
            {
                "role": role,
                "glue": role in GLUE or (role in EXCHANGES and time > 0 and one_device >= time),
                "time_ns": round(time),
                "share": time / total if total else 0.0,
                "exposed_ns": round(float((g["exposed_ns"] * g["scale"]).sum()) / n),
                "one_device_ns": round(one_device),
                "flops": per_step("flops"),
                "row_flops": row_flops,
                "hbm_bytes": per_step("hbm_bytes"),
                "roof_ns": per_step("roof_ns"),
                "below_roof_ns": per_step("below_roof_ns"),
                "uncounted_ns": per_step("uncounted_ns"),
                "flop_util": counts.get("flop_util"),
                "hbm_util": counts.get("hbm_util"),
                "bound": counts.get("bound"),
            }
        )
    return out


def token_movement(roles: Sequence[Mapping[str, Any]], roofline: Mapping[str, Any]) -> dict[str, Any]:
    """``roofline.glue``: the token movement (router, permute, unpermute, and the exchanges on a group of one device,
    spec §10) per step and device: its time and share, FLOPs and HBM bytes, FLOP/s and HBM bandwidth use over the
    time that has counts."""
    time = flops = hbm = counted = 0.0
    known_f = known_b = False
    names = []
    total = sum(float(r["time_ns"]) for r in roles)
    for r in roles:
        role = str(r["role"])
        if role in GLUE:
            share = 1.0
        elif role in EXCHANGES and r.get("time_ns"):
            share = float(r.get("one_device_ns") or 0) / float(r["time_ns"])
        else:
            continue
        if share <= 0:
            continue
        names.append(role)
        time += float(r["time_ns"]) * share
        counted += (float(r["time_ns"]) - float(r.get("uncounted_ns") or 0)) * share
        if r.get("flops") is not None:
            flops += float(r["flops"]) * share
            known_f = True
        if r.get("hbm_bytes") is not None:
            hbm += float(r["hbm_bytes"]) * share
            known_b = True
    peak_bw = roofline.get("peak_hbm_bytes_per_s")
    return {
        "time_ns": round(time),
        "share": time / total if total else 0.0,
        "flops": flops if known_f else None,
        "hbm_bytes": hbm if known_b else None,
        "tflops_per_s": flops / counted / 1e3 if known_f and counted > 0 else None,
        "hbm_util": hbm / (counted * 1e-9 * peak_bw) if known_b and counted > 0 and peak_bw else None,
        "roles": names,
    }


def above_roof_notes(roofline: Mapping[str, Any] | None) -> list[str]:
    """The warning where ops state more FLOPs or HBM bytes than the peaks allow in their time (spec §10: a
    utilization above 1 is a count that cannot be right; never capped): how many, the three furthest."""
    ops = [o for o in (roofline or {}).get("ops") or () if max(o.get("hbm_util") or 0, o.get("flop_util") or 0) > 1]
    if not ops:
        return []
    ops.sort(key=lambda o: -max(o.get("hbm_util") or 0, o.get("flop_util") or 0))
    named = ", ".join(
        f"{o['op']} ({max(o.get('hbm_util') or 0, o.get('flop_util') or 0):.2f}x its "
        f"{'HBM bandwidth' if (o.get('hbm_util') or 0) >= (o.get('flop_util') or 0) else 'FLOP/s'} peak)"
        for o in ops[:3]
    )
    return [
        f"{len(ops)} op(s) state more HBM bytes or FLOPs than the chip's peaks allow in their time: {named}; "
        "their counts cannot be right (XLA's cost model), and the roofline figures of their roles with them"
    ]
