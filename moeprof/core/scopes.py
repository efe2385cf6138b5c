"""The JAX name scope of every activity, and the scopes a per-scope table groups by.

The scope is what JAX records for each op: its name stack (``jax.named_scope``, Flax module names,
transformations), as XLA keeps it in the HLO metadata ``op_name`` and as profilers show it in the
``tf_op`` stat (``jit(step)/transpose(jvp(layer0))/experts/dot_general``). A reader that reads the
``tf_op`` stat fills the ``scope`` column itself; elsewhere :func:`attach_scopes` fills it from the
HLO of the trace's programs, by (module, program, op). GPU XPlanes carry ``hlo_op`` on the first
event of a compute kernel's name in the file only (readers/xplane.py): its other events take the
scope of their name on their device, else in the file.

:func:`scope_key` turns a path into what a table row is (docs/metrics.md, "Scopes"): the outermost
``jit(...)`` (the program) is dropped, transformations are unwrapped (``jvp(layer0)`` is ``layer0``;
``transpose`` marks the backward pass), the calls of nested jitted functions (``jit(argsort)``, library
helpers) and the primitive at the end are dropped; an HLO name XLA appended after the primitive (it has
hyphens: ``ragged_dot_general/ragged-dot-none``) goes with it; an op with a name stack but no scope left is
``(top level)``, one without a name stack ``(no scope)``; an einsum's spec (``tk,tkh->th``) is no scope,
and of several names XLA joined with ``;`` (a fusion of ops) the first counts. :func:`fold_layers` then
writes the numbered repeats of a scope once (``layer0``, ``layer1`` -> ``layer*``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from .analysis import ScopeRow, ratio
from .events import categorical, categorical_of, column_codes, combine_codes, first_rows, lookup, narrowest_int
from .metrics import DeviceTimeline
from .trace import Trace

NO_SCOPE = "(no scope)"
# transformations JAX writes around a name in its name stack; transpose is the backward pass
_WRAPPER = re.compile(
    r"^(jvp|transpose|vmap|pmap|remat|checkpoint|remat2|rematted_computation|custom_jvp_call|custom_vjp_call"
    r"|custom_vjp_call_jaxpr|named_call|shard_map|xmap|pjit|jit|core_call|closed_call|cond|while|scan)\((.*)\)$"
)
_CALLS = ("jit", "pjit", "core_call", "closed_call")  # a call of a jitted function, not a name scope
# transformations and control flow that also appear as bare components of the stack (jax.shard_map writes
# "shard_map", a while loop's body "while/body"): structure, not a scope a user named
_BARE_TRANSFORMS = frozenset(
    {"shard_map", "vmap", "pmap", "xmap", "remat", "checkpoint", "rematted_computation", "custom_jvp_call",
     "custom_vjp_call", "while", "body", "cond", "scan"}
)  # fmt: skip
TOP_LEVEL = "(top level)"  # ops of the program outside any name scope (the optimizer update, often)
_NUMBERED = re.compile(r"^(.*?[A-Za-z_])(\d+)$")


def clean_path(text: str) -> str:
    """A tf_op / op_name as a scope path: TensorFlow's ``name:type`` loses an empty type (TPU tf_op stats
    end in ``:``)."""
    return text[:-1] if text.endswith(":") else text


def _split(path: str) -> list[str]:
    """``/``-separated components; a ``/`` inside parentheses stays in its component."""
    if "(" not in path:
        return [p for p in path.split("/") if p]
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for piece in path.split("/"):
        cur.append(piece)
        if "(" in piece or ")" in piece:
            for ch in piece:
                if ch == "(":
                    depth += 1
                elif ch == ")":
                    depth = max(depth - 1, 0)
        if depth == 0:
            parts.append("/".join(cur))
            cur = []
    if cur:
        parts.append("/".join(cur))
    return [p for p in parts if p]


def scope_key(path: str) -> tuple[str, bool]:
    """(the scope a table groups ``path`` under, whether it is backward): see the module's docstring."""
    key, backward, _ = scope_parts(path)
    return key, backward


def scope_parts(path: str) -> tuple[str, bool, str]:
    """:func:`scope_key`, and the primitive it drops from the path's end (``dot_general``, ``scatter-add``,
    ``ragged_dot_general``; an HLO name where the path is nothing else, ``ragged-dot-none``; "" where the path
    has none): what the op is, in JAX's words."""
    # XLA joins the names of the ops it fused with ";": the first one names the fusion
    parts = _split(clean_path(path.split(";", 1)[0]))
    if not parts:
        return NO_SCOPE, False, ""
    backward = False
    scopes: list[str] = []
    for part in parts:
        call = False
        while m := _WRAPPER.match(part):
            backward |= m.group(1) == "transpose"
            call |= m.group(1) in _CALLS
            part = m.group(2)
        if call or not part or part in _BARE_TRANSFORMS or "->" in part:  # "->": an einsum's own name
            continue  # the program itself (the first jit), a nested jitted function (a call), a transformation
        if scopes and scopes[-1] == part:
            continue  # a scope entered twice in a row (a scoped function that scopes its body again)
        scopes.append(part)
    if len(scopes) > 1 and _appended(scopes[-2], scopes[-1]):
        scopes.pop()  # an HLO name XLA appended after the primitive it expands
    # the primitive (dot_general, reduce_sum, scatter-add, ...)
    primitive = scopes.pop() if scopes else ""
    return ("/".join(scopes) if scopes else TOP_LEVEL), backward, primitive


def _appended(primitive: str, last: str) -> bool:
    """Whether ``last`` is the HLO instruction XLA named after ``primitive`` (TPU: ``ragged_dot_general``
    then ``ragged-dot-none``): HLO names spell the primitive's words with hyphens."""
    words = primitive.split("_")
    return len(words) > 1 and "-" in last and last.startswith("-".join(words[:-1]) + "-")


def fold_layers(keys: Iterable[str]) -> dict[str, str]:
    """Each key with its numbered repeats written once: a component ``<name><N>`` that occurs with two or
    more numbers at the same depth under the same parent, as folded (PyTorch numbers a module class over the
    whole model: ``TransformerBlock_1/MLPBlock_1``), becomes ``<name>*`` where it is a layer: it has scopes
    inside it in some key, or no one parent holds two of its numbers (a module repeated once per layer), where
    ``mlp/fc1`` and ``mlp/fc2`` are two scopes of one parent and stay apart."""
    keys = list(dict.fromkeys(keys))
    split = {k: k.split("/") if k not in (NO_SCOPE, TOP_LEVEL) else [k] for k in keys}
    folded = {k: list(parts) for k, parts in split.items()}
    for depth in range(max((len(p) for p in split.values()), default=0)):
        numbers: dict[tuple[str, str], set[str]] = {}
        nests: set[tuple[str, str]] = set()  # the numbered names that hold scopes of their own
        siblings: dict[tuple[str, str], set[str]] = {}  # (unfolded parent, name) -> its numbers there
        at: dict[str, tuple[str, str]] = {}
        for key, parts in split.items():
            m = _NUMBERED.match(parts[depth]) if depth < len(parts) else None
            if m is None:
                continue
            where = at[key] = ("/".join(folded[key][:depth]), m.group(1))
            numbers.setdefault(where, set()).add(m.group(2))
            siblings.setdefault(("/".join(parts[:depth]), m.group(1)), set()).add(m.group(2))
            if depth < len(parts) - 1:
                nests.add(where)
        shared = {(folded_parent, name) for key, (folded_parent, name) in at.items()
                  if len(siblings[("/".join(split[key][:depth]), name)]) > 1}  # fmt: skip
        for key, where in at.items():
            if len(numbers[where]) > 1 and (where in nests or where not in shared):
                folded[key][depth] = f"{where[1]}*"
    return {key: "/".join(parts) for key, parts in folded.items()}


def _hlo_op_names(trace: Trace, modules: np.ndarray, programs: np.ndarray, ops: np.ndarray) -> list[str]:
    """The HLO metadata op_name of each (module, program id, op), "" where the HLO does not say."""
    out = []
    for module_name, program, op in zip(modules.tolist(), programs.tolist(), ops.tolist(), strict=True):
        module = trace.hlo.get((str(module_name), int(program))) or trace.hlo.get((str(module_name), -1))
        inst = module.instructions.get(str(op)) if module is not None and op else None
        out.append(inst.op_name if inst is not None else "")
    return out


def _fill_from_first(scope: np.ndarray, group: np.ndarray) -> None:
    """Each row of ``scope`` that is "" takes the first non-empty value of its group (in place)."""
    known = np.flatnonzero(scope != "")
    if not known.size or known.size == scope.size:
        return
    firsts = pd.Series(known).groupby(group[known]).first()
    fill = np.full(int(group.max()) + 1, -1, dtype=np.int64)
    fill[firsts.index.to_numpy()] = firsts.to_numpy()
    donor = np.where(group >= 0, fill[np.maximum(group, 0)], -1)
    missing = (scope == "") & (donor >= 0)
    scope[missing] = scope[donor[missing]]


def attach_scopes(trace: Trace) -> Trace:
    """The trace with its ``scope`` column filled: the reader's where it gave one, else the HLO op_name of
    the row's op, else (GPU kernels read once per name) the scope of the row's name on its device, else
    in the file."""
    events = trace.events
    if not len(events):
        return trace
    n = len(events)
    have_c, have_v = column_codes(events["scope"]) if "scope" in events.columns else (np.full(n, -1), np.zeros(0))
    have_v = np.array([clean_path(str(v)) for v in have_v.tolist()], dtype=object)
    given = lookup(have_c, have_v != "", False)
    scope = np.where(given, lookup(have_c, have_v, ""), "").astype(object) if given.any() else None
    if trace.hlo and not given.all():
        mod_c, mod_v = column_codes(events["hlo_module"])
        op_c, op_v = column_codes(events["hlo_op"])
        programs = events["program_id"].to_numpy(np.int64)
        key = combine_codes(mod_c, programs, op_c)
        first = first_rows(key)
        names = _hlo_op_names(trace, lookup(mod_c[first], mod_v, ""), programs[first], lookup(op_c[first], op_v, ""))
        from_hlo = np.array([clean_path(s) for s in names], dtype=object)[key]
        scope = from_hlo if scope is None else np.where(given, scope, from_hlo)
    if scope is None:
        if "scope" not in events.columns:
            trace = trace.replace(events=events.assign(scope=categorical("", n)))
        return trace
    # rows without a scope take the first scope their name has on their device, else in the file: an XPlane
    # reader reads a compute kernel's stats on the first event of its name in the file (readers/xplane.py)
    dev_c, _ = column_codes(events["device"])
    name_c, _ = column_codes(events["name"])
    for group in (combine_codes(dev_c, name_c), name_c):
        _fill_from_first(scope, group)
    codes, values = pd.factorize(scope)
    return trace.replace(events=events.assign(scope=categorical_of(codes, np.asarray(values, dtype=object))))


def own_pairs(values: np.ndarray) -> list[tuple[str, bool]]:
    """The own scope key and pass of each distinct scope path."""
    return [scope_key(clean_path(str(v))) if v else (NO_SCOPE, False) for v in values.tolist()]


def served_rows(
    scope: tuple[np.ndarray, np.ndarray], component: tuple[np.ndarray, np.ndarray] | None, backward: np.ndarray | None
) -> tuple[np.ndarray, list[tuple[str, bool]]]:
    """Per row, the index of the (component key, pass) it serves in the list returned beside: from the
    ``component``/``backward`` columns (codes and distinct values), the row's own scope key and pass where the
    component is "" or the table has none. One decision per distinct (component, pass, scope)."""
    scope_c, scope_v = scope
    n = scope_c.size
    if component is None:
        comp_c, comp_text = np.full(n, -1, dtype=np.int64), np.zeros(0, dtype=object)
    else:
        comp_c, comp_text = component[0], np.array([str(v) for v in component[1].tolist()], dtype=object)
    given = lookup(comp_c, comp_text != "", False)
    passes = np.zeros(n, dtype=bool) if backward is None else np.asarray(backward, dtype=bool)
    key = combine_codes(np.where(given, comp_c, -1), passes & given, np.where(given, -1, scope_c))
    first = first_rows(key)
    own = [*own_pairs(np.asarray(scope_v, dtype=object)), (NO_SCOPE, False)]  # -1 (missing) reads the last
    pairs = [(str(comp_text[comp_c[r]]), bool(passes[r])) if given[r] else own[scope_c[r]] for r in first.tolist()]
    return key, pairs


# ---------------------------------------------------------------- per device: scopes, ops' FLOPs

FLOP_COLUMNS = ("flops", "model_flops", "bytes_accessed")  # per-op stats a reader may give (TPU XPlanes)
# each FLOPs stat as moeprof counts it: the stat, with the ragged dots the HLO shows recounted (the event
# column ``recounted_flops``); the figures use these, and name XLA's own beside them
COUNTED = {"flops": "flops_counted", "model_flops": "model_flops_counted"}
SCOPE_COLUMNS = [
    "device",
    "scope",
    "backward",
    "count",
    "total_ns",
    "compute_ns",
    "comm_ns",
    "flops",
    "model_flops",
    "bytes_accessed",
    "flops_known",
    "model_flops_known",
    "flops_counted",
    "model_flops_counted",
    "attributed_count",
    "attributed_ns",
]
OP_FLOP_COLUMNS = [
    "device", "op", "scope", "count", "time_ns", "flops", "model_flops", "flops_counted", "model_flops_counted",
    "recounted",
]  # fmt: skip
STEP_FLOP_COLUMNS = ["step", "device", "flops", "model_flops", "flops_counted", "model_flops_counted"]


def _stat(rows: DeviceTimeline, column: str) -> np.ndarray:
    """A per-op stat of the device's rows as floats (NaN unknown; all NaN where the reader gave none)."""
    if not _stated(rows, column):
        return np.full(rows.positions.size, np.nan)
    return rows.numbers(column, np.float64)


def _stated(rows: DeviceTimeline, column: str) -> bool:
    """Whether any activity of the table states this per-op stat (decided once per table: a GPU trace states
    none, and its devices' FLOP figures are then zeros without a pass over their rows)."""
    columns = rows.columns

    def build() -> bool:
        return column in columns.table.columns and not bool(np.isnan(columns.numbers(column, np.float64)).all())

    return columns.derived(f"stated:{column}", build)


def _keys(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct scope path: its table key and whether it is backward."""
    pairs = [scope_key(str(v)) if v else (NO_SCOPE, False) for v in values.tolist()]
    return (np.array([k for k, _ in pairs] + [NO_SCOPE], dtype=object),
            np.array([b for _, b in pairs] + [False], dtype=bool))  # fmt: skip


def device_flops(rows: DeviceTimeline, clipped: np.ndarray) -> dict[str, np.ndarray]:
    """Per FLOP_COLUMNS and COUNTED column, that figure of each row inside the window: a stat times the share
    of the op's time inside it (0 where unknown); ``recounted``: the rows whose ragged dots were recounted."""
    n = rows.positions.size
    if not any(_stated(rows, c) for c in (*FLOP_COLUMNS, "recounted_flops")):
        zeros = np.zeros(n)
        return {**{c: zeros for c in (*FLOP_COLUMNS, *COUNTED.values())}, "recounted": np.zeros(n, dtype=bool)}
    duration = np.maximum(rows.end - rows.start, 1)
    share = np.where(clipped > 0, clipped / duration, 0.0)
    out = {c: np.nan_to_num(_stat(rows, c)) * share for c in FLOP_COLUMNS}
    recounted = _stat(rows, "recounted_flops")
    known = ~np.isnan(recounted)
    for stat, counted in COUNTED.items():
        out[counted] = np.where(known, np.nan_to_num(recounted) * share, out[stat])
    out["recounted"] = known & (clipped > 0)
    return out


_FLOAT_SUMS = (*FLOP_COLUMNS, *COUNTED.values())  # device_scopes' float columns


def _int_sums(groups: np.ndarray, values: np.ndarray | None, size: int) -> np.ndarray:
    """Per group in [0, size): the count of rows (``values`` None) or the sum of int ``values``, exact."""
    if values is None:
        return np.bincount(groups, minlength=size).astype(np.int64)
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, groups, values.astype(np.int64, copy=False))
    return out


def device_scopes(device: str, rows: DeviceTimeline, clipped: np.ndarray) -> pd.DataFrame:
    """Per (scope, pass) of one device: activities, time inside the window (all, compute, comm) and the
    FLOPs and bytes its ops state, of the activities whose own scope it is; and the activities and time of
    those that serve it (``attributed_*``: the component column, core.components) (SCOPE_COLUMNS)."""
    inside = clipped > 0
    if not inside.any():
        return pd.DataFrame(columns=SCOPE_COLUMNS)
    codes, values = rows.codes("scope")
    key_of, backward_of = _keys(values)
    columns = rows.columns
    table = columns.table

    def served_in_table() -> tuple[np.ndarray, list[tuple[str, bool]]]:
        component = columns.codes("component") if "component" in table.columns else None
        passes = columns.numbers("backward", bool) if "backward" in table.columns else None
        key, pairs = served_rows(columns.codes("scope"), component, passes)
        return key.astype(narrowest_int(len(pairs))), pairs  # kept for the table: 1-4 bytes a row, not 8

    # what each row serves, decided once for the table's rows (its devices take their rows of it)
    served_all, served_pairs = columns.derived("served", served_in_table)
    served = served_all[rows.positions]
    # rows grouped by an integer code numbered in (scope, backward) order; the sums over numpy's ``add.at``
    # (exact integers), the FLOP sums through pandas' group sum where a row states any (its compensated sum)
    pairs = list(zip(key_of.tolist(), backward_of.tolist()))
    ordered = sorted(set(pairs) | set(served_pairs))
    number = {pair: i for i, pair in enumerate(ordered)}
    group_of = np.array([number[pair] for pair in pairs], dtype=np.int64)
    figures = device_flops(rows, clipped)
    served_group = np.array([number[pair] for pair in served_pairs], dtype=np.int64)[served]
    size = len(ordered)
    own = group_of[codes][inside]
    attributed = served_group[inside]
    time = clipped[inside]
    present = np.zeros(size, dtype=bool)
    present[own] = True
    present[attributed] = True
    held_at = np.flatnonzero(present)  # the groups of the own and the attributed rows, in order

    def known(column: str) -> np.ndarray:
        # a stat no row of the table states: known nowhere (no pass over the rows)
        return _int_sums(own, ~np.isnan(_stat(rows, column))[inside], size) if _stated(rows, column) else zeros

    zeros = np.zeros(size, dtype=np.int64)
    sums: dict[str, np.ndarray] = {
        "count": _int_sums(own, None, size),
        "total_ns": _int_sums(own, time, size),
        "compute_ns": _int_sums(own, np.where(rows.is_compute, clipped, 0)[inside], size),
        "comm_ns": _int_sums(own, np.where(rows.is_comm, clipped, 0)[inside], size),
        "flops_known": known("flops"),
        "model_flops_known": known("model_flops"),
        "attributed_count": _int_sums(attributed, None, size),
        "attributed_ns": _int_sums(attributed, time, size),
    }
    stated = [c for c in _FLOAT_SUMS if figures[c].any() and figures[c][inside].any()]
    for column in _FLOAT_SUMS:
        sums[column] = np.zeros(size)
    if stated:
        frame = pd.DataFrame({"group": own, **{c: figures[c][inside] for c in stated}})
        summed = frame.groupby("group", sort=True).sum()
        for column in stated:
            sums[column][summed.index.to_numpy()] = summed[column].to_numpy()
    held = [ordered[i] for i in held_at.tolist()]
    # one frame in SCOPE_COLUMNS order (its columns' dtypes as inserting them one by one gave)
    return pd.DataFrame(
        {
            "device": pd.Series(device, index=range(held_at.size), dtype=str),
            "scope": pd.Series([k for k, _ in held], dtype=str),
            "backward": np.array([b for _, b in held], dtype=bool),
            **{c: sums[c][held_at] for c in SCOPE_COLUMNS[3:]},
        }
    )


def device_op_flops(device: str, rows: DeviceTimeline, clipped: np.ndarray) -> pd.DataFrame:
    """Per op (its HLO op, else its name) of one device whose FLOPs the trace states: calls, time inside the
    window, FLOPs and model FLOPs (OP_FLOP_COLUMNS); what an op above the chip's peak is found in."""
    if not (_stated(rows, "flops") or _stated(rows, "model_flops")):
        return pd.DataFrame(columns=OP_FLOP_COLUMNS)
    stated = ~np.isnan(_stat(rows, "flops")) | ~np.isnan(_stat(rows, "model_flops"))
    keep = stated & (clipped > 0)
    if not keep.any():
        return pd.DataFrame(columns=OP_FLOP_COLUMNS)
    op_c, op_v = rows.strings("hlo_op")
    name_c, name_v = rows.strings("name")
    ops = np.where(lookup(op_c, op_v != "", False), lookup(op_c, op_v, ""), lookup(name_c, name_v, ""))
    scope_c, scope_v = rows.strings("scope")
    figures = device_flops(rows, clipped)
    frame = pd.DataFrame(
        {
            "op": ops[keep].astype(str),
            "scope": _keys(scope_v)[0][scope_c][keep],
            "count": 1,
            "time_ns": clipped[keep],
            **{c: figures[c][keep] for c in ("flops", "model_flops", *COUNTED.values(), "recounted")},
        }
    )
    out = frame.groupby(["op", "scope"], sort=True).sum().reset_index()
    out.insert(0, "device", device)
    return out[OP_FLOP_COLUMNS]


def device_step_flops(
    device: str, rows: DeviceTimeline, clipped: np.ndarray, numbers: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> pd.DataFrame:
    """Per step of one device: the FLOPs of the ops that start in it (STEP_FLOP_COLUMNS); empty where the
    trace states none."""
    figures = device_flops(rows, clipped)
    if not (figures["flops"].any() or figures["model_flops"].any()) or not numbers.size:
        return pd.DataFrame(columns=STEP_FLOP_COLUMNS)
    order = np.argsort(starts, kind="stable")
    at = np.searchsorted(starts[order], rows.start, side="right") - 1
    inside = (at >= 0) & (rows.start < ends[order][np.maximum(at, 0)])
    step = np.where(inside, order[np.maximum(at, 0)], -1)
    frame = pd.DataFrame({"step": step[inside], **{c: figures[c][inside] for c in STEP_FLOP_COLUMNS[2:]}})
    out = frame.groupby("step").sum().reindex(range(numbers.size), fill_value=0.0).reset_index(drop=True)
    out.insert(0, "step", numbers.astype(np.int64))
    out.insert(1, "device", device)
    return out[STEP_FLOP_COLUMNS]


# ---------------------------------------------------------------- the job's table


def flops_source(frame: pd.DataFrame) -> str | None:
    """Which FLOPs stat the figures use: model_flops where the trace states it, else flops, else None."""
    if len(frame) and frame["model_flops_known"].sum() > 0:
        return "model_flops"
    if len(frame) and frame["flops_known"].sum() > 0:
        return "flops"
    return None


def scope_rows(frame: pd.DataFrame, accumulated_ns: int, peak_tflops: float | None = None) -> tuple[ScopeRow, ...]:
    """The job's per-scope table from the files' SCOPE_COLUMNS rows: numbered repeats folded (``layer*``),
    summed over devices and passes, largest first. Empty where no activity has a scope."""
    if not len(frame) or set(frame["scope"].astype(str)) == {NO_SCOPE}:
        return ()
    folded = fold_layers(sorted(frame["scope"].astype(str).unique()))
    frame = frame.assign(row=frame["scope"].astype(str).map(folded))
    source = flops_source(frame)
    out = []
    attributed = "attributed_ns" in frame.columns
    for scope, g in frame.groupby("row", sort=False):
        total = int(g["total_ns"].sum())
        stated = float(g[source].sum()) if source else None
        counted = float(g[COUNTED[source]].sum()) if source else None
        rate = counted / total / 1e3 if counted is not None and total > 0 else None  # flops per ns -> TFLOP/s
        # XLA's own rate, beside it where the recount changed it (more than rounding)
        xla = stated / total / 1e3 if stated is not None and total > 0 and stated != counted else None
        served = int(g["attributed_ns"].sum()) if attributed else None
        backward = g["backward"].astype(bool)
        out.append(
            ScopeRow(
                scope=str(scope),
                count=int(g["count"].sum()),
                devices=int(g["device"].nunique()),
                total_ns=total,
                share=ratio(total, accumulated_ns),
                compute_ns=int(g["compute_ns"].sum()),
                comm_ns=int(g["comm_ns"].sum()),
                backward_ns=int(g.loc[backward, "total_ns"].sum()),
                members=tuple(sorted(set(g["scope"].astype(str)))),
                flops=float(g["flops"].sum()) if g["flops_known"].sum() else None,
                model_flops=float(g["model_flops"].sum()) if g["model_flops_known"].sum() else None,
                bytes_accessed=float(g["bytes_accessed"].sum()) if source else None,
                counted_flops=counted,
                tflops_per_s=rate,
                peak_fraction=rate / peak_tflops if rate is not None and peak_tflops else None,
                tflops_per_s_xla=xla,
                peak_fraction_xla=xla / peak_tflops if xla is not None and peak_tflops else None,
                attributed_count=int(g["attributed_count"].sum()) if attributed else None,
                attributed_ns=served,
                attributed_share=ratio(served, accumulated_ns) if served is not None else None,
                attributed_backward_ns=int(g.loc[backward, "attributed_ns"].sum()) if attributed else None,
            )
        )
    # what a component costs first (its own time where nothing is attributed)
    return tuple(sorted(out, key=lambda r: (-(r.attributed_ns or 0), -r.total_ns, r.scope)))
