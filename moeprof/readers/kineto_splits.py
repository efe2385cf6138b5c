"""Spec §11 source (1): the per-peer split sizes PyTorch records for an all-to-all, one row per call and rank
(:data:`moeprof.core.traffic.SPLIT_COLUMNS`).

Two records carry them:

* ``record_param_comms`` (NCCL's saveNcclMeta): ``In split size`` / ``Out split size`` (``"[2, 4, 6, 8]"``)
  with ``In msg nelems`` / ``Out msg nelems`` and ``dtype``; a row's elements are ``nelems / Σ splits``;
* the ``c10d::alltoall_base_`` op with ``record_shapes=True`` (gloo and every backend): its ``Concrete Inputs``
  hold the output splits (position 3), then the input splits (4), its ``Input Dims`` the output (0) and input
  (1) tensors' shapes, its ``Input type`` their dtypes; a row's elements are the product of the other dims.

A list is ``listed`` (every peer's count), ``even`` (``[]``: PyTorch splits dim 0 equally over the group),
``cut`` (ends in ``...``: the counts before it kept), ``dropped`` (``""``: PyTorch leaves long lists out) or
``unrecorded`` (no ``Concrete Inputs``: an older PyTorch, or shapes not recorded).
Where an ``alltoall_base_`` encloses the ``record_param_comms`` of its own call (NCCL with shapes recorded),
the two are one call: the op's row, with the group and sequence number of the record inside it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..core.traffic import CUT, DROPPED, EVEN, LISTED, SPLIT_COLUMNS, UNRECORDED, empty_splits
from .kineto_columns import RECORD_PARAM_COMMS, SPLIT_OPS, KinetoColumns

# the collective names record_param_comms gives an all-to-all whose splits it records
ALL_TO_ALL_NAMES = frozenset(("all_to_all", "all_to_allv", "alltoall", "alltoall_base", "all_to_all_single"))
_INT = re.compile(r"-?\d+")
# positions in alltoall_base_(output, input, process_group, output_split_sizes, input_split_sizes, ...)
_OUT_TENSOR, _IN_TENSOR, _OUT_SPLITS, _IN_SPLITS = 0, 1, 3, 4


def parse_splits(text: Any) -> tuple[str, tuple[int, ...]]:
    """(state, counts) of a recorded split list: ``listed``, ``even`` (``[]``), ``cut`` (the counts before
    ``...``), ``dropped`` (``""``, or not a list of integers) or ``unrecorded`` (None: no such field)."""
    if text is None:
        return UNRECORDED, ()
    if isinstance(text, list):
        if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in text):
            return (LISTED, tuple(text)) if text else (EVEN, ())
        return DROPPED, ()
    if not isinstance(text, str):
        return DROPPED, ()
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        return DROPPED, ()
    body = body[1:-1].strip()
    if not body:
        return EVEN, ()
    parts = [p.strip() for p in body.split(",")]
    cut = any("..." in p for p in parts)
    if cut:
        parts = parts[: next(i for i, p in enumerate(parts) if "..." in p)]
    counts: list[int] = []
    for p in parts:
        if not _INT.fullmatch(p) or int(p) < 0:
            return DROPPED, ()
        counts.append(int(p))
    return (CUT if cut else LISTED), tuple(counts)


def _dims_of(dims: Any, index: int) -> tuple[int, ...] | None:
    if isinstance(dims, list) and len(dims) > index and isinstance(dims[index], list):
        shape = dims[index]
        if shape and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in shape):
            return tuple(shape)
    return None


def _type_of(types: Any, index: int) -> str:
    if isinstance(types, list) and len(types) > index and isinstance(types[index], str):
        return types[index]
    return ""


def _entry(values: Any, index: int) -> Any:
    return values[index] if isinstance(values, list) and len(values) > index else None


def _joined(counts: tuple[int, ...]) -> str:
    return ",".join(map(str, counts))


def alltoall_calls(
    cols: KinetoColumns,
    names: np.ndarray,
    threads: Callable[[np.ndarray, np.ndarray], np.ndarray],
    rank: int,
    world: int | None,
    comm_fields: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]],
    pg_ranks: Mapping[str, list[int]],
    steps: pd.DataFrame,
    elem_bytes: Callable[[str], int | None],
    to_ns: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    dtype_name: Callable[[str], str] = str,
) -> pd.DataFrame:
    """The all-to-all calls of one rank file whose split sizes the trace records (SPLIT_COLUMNS).

    ``comm_fields``: (collective, group, bytes) of comm-args codes (the reader's own decoding); ``steps``: the
    file's step markers (a call's step is the one its start falls in); ``elem_bytes``: bytes of a dtype name;
    ``to_ns``: the reader's µs-to-ns conversion of (ts, dur); ``dtype_name``: a dtype as torch names it."""
    cpu = cols.cpu
    if not len(cpu):
        return empty_splits()
    # the ops of SPLIT_OPS among those whose shapes the columns kept (the FLOP-counted GEMMs and attention too)
    split_codes = [i for i, n in enumerate(cols.names) if n in SPLIT_OPS]
    shaped = np.flatnonzero((cpu.shapes >= 0) & np.isin(cpu.name, split_codes))
    rpc_code = next((i for i, n in enumerate(cols.names) if n == RECORD_PARAM_COMMS), -1)
    with_splits = (cpu.in_split >= 0) | (cpu.out_split >= 0)
    rpc = np.flatnonzero((cpu.name == rpc_code) & with_splits) if rpc_code >= 0 else np.zeros(0, dtype=np.int64)
    if rpc.size:  # only the all-to-alls
        coll = comm_fields(cpu.comm[rpc])[0]
        rpc = rpc[np.isin(coll.astype(str), list(ALL_TO_ALL_NAMES))]
    if not shaped.size and not rpc.size:
        return empty_splits()
    rows = np.r_[shaped, rpc].astype(np.int64)
    start, end = to_ns(cpu.ts[rows], np.maximum(cpu.dur[rows], 0.0))
    thread = threads(cpu.pid[rows], cpu.tid[rows])
    is_op = np.r_[np.ones(shaped.size, bool), np.zeros(rpc.size, bool)]
    # a record_param_comms inside an alltoall_base_ of its thread is that op's call: it lends its group and seq
    inner = np.full(rows.size, -1, dtype=np.int64)  # per op row: the record inside it
    inside = np.zeros(rows.size, dtype=bool)  # per record row: it lies inside an op
    ops = np.flatnonzero(is_op)
    for r in np.flatnonzero(~is_op).tolist():
        hit = ops[(thread[ops] == thread[r]) & (start[ops] <= start[r]) & (end[ops] >= end[r])]
        if hit.size:
            inside[r] = True
            inner[hit[-1]] = r
    keep = np.flatnonzero(is_op | ~inside)
    coll, group, _ = comm_fields(cpu.comm[rows])
    seq = cpu.seq[rows].astype(np.int64)
    out: dict[str, list[Any]] = {c: [] for c in SPLIT_COLUMNS if c != "step"}
    for i in keep.tolist():
        source = i if not is_op[i] else (inner[i] if inner[i] >= 0 else -1)
        call = _op_call(cols, int(rows[i]), elem_bytes) if is_op[i] else _record_call(cols, int(rows[i]), elem_bytes)
        if source >= 0 and is_op[i]:
            record = _record_call(cols, int(rows[source]), elem_bytes)
            for side in ("in", "out"):  # a list the op lost, its record kept
                if call[f"{side}_state"] in (DROPPED, UNRECORDED) and record[f"{side}_state"] not in (
                    DROPPED,
                    UNRECORDED,
                ):
                    call[f"{side}_state"], call[f"{side}_splits"] = record[f"{side}_state"], record[f"{side}_splits"]
        members = str(group[source]) if source >= 0 else ""
        assumed = False
        if not members:
            members, assumed = _assumed_group(call, pg_ranks, world), True
        out["rank"].append(rank)
        out["group"].append(members)
        out["group_assumed"].append(assumed and bool(members))
        out["op"].append(str(names[cpu.name[rows[i]]]))
        out["seq"].append(int(seq[source]) if source >= 0 else -1)
        out["start_ns"].append(int(start[i]))
        out["end_ns"].append(int(end[i]))
        out["thread"].append(int(thread[i]))
        call["dtype"] = dtype_name(call["dtype"])
        for key, value in call.items():
            out[key].append(value)
    frame = pd.DataFrame(out)
    frame["step"] = _steps_of(frame["start_ns"].to_numpy(np.int64), steps)
    return (
        frame[list(SPLIT_COLUMNS)]
        .sort_values("start_ns", kind="stable", ignore_index=True)
        .astype({c: t for c, t in SPLIT_COLUMNS.items() if t != "str"})
    )


def _op_call(cols: KinetoColumns, row: int, elem_bytes: Callable[[str], int | None]) -> dict[str, Any]:
    """The splits and tensors of an ``alltoall_base_`` from its recorded inputs."""
    concrete, dims, types = cols.shapes[int(cols.cpu.shapes[row])]
    call: dict[str, Any] = {}
    for side, tensor, splits in (("in", _IN_TENSOR, _IN_SPLITS), ("out", _OUT_TENSOR, _OUT_SPLITS)):
        state, counts = parse_splits(_entry(concrete, splits))
        shape = _dims_of(dims, tensor)
        dtype = _type_of(types, tensor)
        size = elem_bytes(dtype)
        row_bytes = float(np.prod(shape[1:], dtype=np.float64) * size) if shape and size else float("nan")
        call[f"{side}_state"], call[f"{side}_splits"] = state, _joined(counts)
        call[f"{side}_rows"] = int(shape[0]) if shape else -1
        call[f"{side}_row_bytes"] = row_bytes
        call[f"{side}_bytes"] = row_bytes * shape[0] if shape and size else float("nan")
        if side == "in":
            call["dtype"] = dtype
    return call


def _record_call(cols: KinetoColumns, row: int, elem_bytes: Callable[[str], int | None]) -> dict[str, Any]:
    """The splits of a ``record_param_comms``: ``In/Out split size``, elements from ``In/Out msg nelems``."""
    cpu = cols.cpu
    args = cols.comm_args[int(cpu.comm[row])] if cpu.comm[row] >= 0 else {}
    dtype = str(args["dtype"]) if isinstance(args.get("dtype"), str) else ""
    size = elem_bytes(dtype)
    call: dict[str, Any] = {"dtype": dtype}
    for side, column, nelems_key in (("in", "in_split", "In msg nelems"), ("out", "out_split", "Out msg nelems")):
        code = int(cpu.columns[column][row])
        state, counts = parse_splits(cols.strings[code]) if code >= 0 else (UNRECORDED, ())
        nelems = args.get(nelems_key)
        total = float(nelems) * size if isinstance(nelems, int) and nelems >= 0 and size else float("nan")
        rows = sum(counts) if state == LISTED else -1
        # a row's bytes: the buffer over its rows, where the list gives every peer's rows
        row_bytes = total / rows if rows > 0 and np.isfinite(total) else float("nan")
        call[f"{side}_state"], call[f"{side}_splits"] = state, _joined(counts)
        call[f"{side}_rows"], call[f"{side}_row_bytes"], call[f"{side}_bytes"] = rows, row_bytes, total
    return call


def _assumed_group(call: Mapping[str, Any], pg_ranks: Mapping[str, list[int]], world: int | None) -> str:
    """The group of a call that names none (an ``alltoall_base_`` without its record): the one process group
    of its size (the listed splits' length), else the job's only group, else the world."""
    sizes = {len(call[f"{s}_splits"].split(",")) for s in ("in", "out") if call[f"{s}_state"] == LISTED}
    size = sizes.pop() if len(sizes) == 1 else None
    groups = [ranks for ranks in pg_ranks.values() if ranks]
    fitting = [g for g in groups if size is None or len(g) == size]
    if len(fitting) == 1:
        return ",".join(map(str, fitting[0]))
    if world is not None and (size is None or size == world):
        return ",".join(map(str, range(world)))
    return ""


def _steps_of(start: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step marker each start falls in (its number), -1 outside every step."""
    out = np.full(start.size, -1, dtype=np.int64)
    if not len(steps) or not start.size:
        return out
    order = np.argsort(steps["start_ns"].to_numpy(np.int64), kind="stable")
    s = steps["start_ns"].to_numpy(np.int64)[order]
    e = steps["end_ns"].to_numpy(np.int64)[order]
    number = steps["number"].to_numpy(np.int64)[order]
    at = np.searchsorted(s, start, side="right") - 1
    ok = (at >= 0) & (start <= e[np.maximum(at, 0)])
    out[ok] = number[at[ok]]
    return out
