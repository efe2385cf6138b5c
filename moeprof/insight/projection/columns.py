"""Spec §9: the replay's columns of one file, made in the per-file map beside the §4 figures.

Per device activity, what the replay needs (:data:`REPLAY_COLUMNS`: times, stream, name, bucket, kind, link
share, launch, JAX scope, the row's role to the router), and the host synchronizations that waited for the
device (:data:`SYNC_COLUMNS`). The merge concatenates the files' tables and joins them into the job graph
(:func:`.job.joined_job`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from ...core import intervals as iv
from ...core.events import categorical, categorical_of, gathered, lookup, narrowest_int
from ...core.ledger_records import clock_domain
from ...core.metrics import EventColumns
from ...core.roles import ROLES
from ...core.roofline import counts_of, roles_of
from ...core.trace import TPU, Trace
from .terms.balance_router import MOE_ROLES, moe_roles
from .terms.program import shape_columns
from .terms.tokens import token_classes

# per device activity: what the replay needs (strings categorical); comm rows are in the order of the
# file's ledger records, so the i-th comm row is the i-th record
REPLAY_COLUMNS: dict[str, str] = {
    "device": "str",
    "clock": "str",
    "stream": "str",
    "name": "str",
    "op": "str",  # the collectives row / opportunity it belongs to: the HLO op, else the kernel name
    "bucket": "str",
    "kind": "str",
    "copy_kind": "str",
    "ib_fraction": "float64",
    "start_ns": "int64",
    "end_ns": "int64",
    "launch_ns": "int64",  # the launching call's time on the host clock (-1 unknown)
    "launch_thread": "str",  # "" unknown
    "scope": "str",  # the JAX name scope path (what --what-if scope~REGEX searches), "" unknown
    # the scope key of the component the activity serves and its pass (core.components): scope~REGEX searches it
    # too, diff's explanation groups by it
    "component": "str",
    "backward": "bool",
    "moe_role": "str",  # MOE_ROLES: the routed experts' compute, the dispatch/combine exchange, or ""
    # what the op is to the batch (terms.tokens.CLASSES: scaled with the tokens or held, "" unknown), and its
    # program's batch in words (the tokens term says it)
    "tokens": "str",
    "batch": "str",
    # what the op's program says of the MoE dimensions, and the op's own arrays (terms.program: JSON, one value
    # per distinct HLO op): how the routing terms resize it; "" unknown
    "program": "str",
    "shapes": "str",
    # what the op is, for diff's explanation by scope and op (never by an HLO op name: it does not survive a
    # recompilation): XLA's hlo_category and the HLO opcode, "" unknown
    "category": "str",
    "opcode": "str",
    # spec §10: the MoE role the activity serves (core.roofline.ROLES), its FLOPs and HBM bytes (NaN unknown):
    # the roof term and the on-chip levers take it to its time at the chip's roof (the job's peaks)
    "role": "str",
    "flops": "float64",
    "hbm_bytes": "float64",
    # a TPU's idle between two executions of its programs that ends at this activity (the first of its
    # program's execution after the gap; 0 elsewhere): the host dispatching the next program late
    "host_gap_ns": "int64",
}
SYNC_COLUMNS = ("device", "thread", "start_ns", "end_ns")  # host synchronizations (waited for the device)


def empty_replay_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            c: pd.Series(dtype={"str": object, "int64": np.int64, "float64": np.float64, "bool": bool}[t])
            for c, t in REPLAY_COLUMNS.items()
        }
    )


def empty_syncs() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "device": pd.Series(dtype=object),
            "thread": pd.Series(dtype=object),
            "start_ns": pd.Series(dtype=np.int64),
            "end_ns": pd.Series(dtype=np.int64),
        }
    )


def replay_table(trace: Trace, columns: EventColumns, positions: Sequence[np.ndarray]) -> pd.DataFrame:
    """The replay's columns of a file's devices (``positions``: each device's rows, sorted by start, in the
    order the map step measures them, so comm rows follow the ledger records' order)."""
    if not positions:
        return empty_replay_table()
    rows = np.concatenate([np.asarray(p, dtype=np.int64) for p in positions])
    table = columns.table

    def strings(column: str) -> pd.Categorical:
        series = table[column]
        if isinstance(series.dtype, pd.CategoricalDtype):  # its own narrow codes: a gather of 1-2 bytes a row
            cat = series.array
            categories = np.asarray(cat.categories, dtype=object)
            if len(categories) == 1 and rows.size and int(cat.codes.min()) == 0:
                # one value on every row (a column the trace leaves empty): no gather
                return pd.Categorical.from_codes(
                    np.zeros(rows.size, dtype=np.int8), categories=pd.Index(categories, dtype=object), validate=False
                )
            return _categorical(cat.codes[rows], categories, unique=True)
        codes, values = columns.strings(column)
        return _categorical(codes[rows], values)

    start = columns.numbers("start_ns")[rows]
    dev_c, dev_v = columns.strings("device")
    # each of positions is one device's rows: its code repeated (no hash of every row's code)
    lengths = np.array([len(p) for p in positions], dtype=np.int64)
    dev_rows = dev_c[rows]
    dev_first = dev_c[np.asarray([p[0] if len(p) else 0 for p in positions], dtype=np.int64)]
    one_device_each = bool(np.array_equal(dev_rows, np.repeat(dev_first, lengths)))

    def per_device(values: np.ndarray) -> pd.Categorical:
        if not one_device_each:
            return categorical_of(dev_rows, values)
        part = categorical_of(dev_first[lengths > 0], values)
        return pd.Categorical.from_codes(np.repeat(part.codes, lengths[lengths > 0]), dtype=part.dtype)

    clocks = np.array([clock_domain(trace, str(d)) for d in dev_v.tolist()], dtype=object)
    op_c, op_v = columns.strings("hlo_op")
    name_c, name_v = columns.strings("name")
    op_known = lookup(op_c, columns.nonempty("hlo_op"), True)
    op_code = np.where(op_known, op_c, np.where(name_c >= 0, name_c + len(op_v), -1))[rows]
    launch = (
        gathered(table["launch_ns"].to_numpy(np.int64), rows)
        if "launch_ns" in table.columns
        else _constant(-1, rows.size)
    )
    if "launch_thread" in table.columns:
        thread = strings("launch_thread")
    else:
        thread = categorical("", rows.size)
    role_codes, roles = moe_roles(trace, columns)
    passes = columns.numbers("backward", bool)[rows] if "backward" in table.columns else np.zeros(rows.size, bool)
    expert = role_codes == 1 + MOE_ROLES.index("expert")
    token_codes, token_values, batch_codes, batch_values = token_classes(trace, columns, expert)
    program_codes, program_values, shape_codes, shape_values = shape_columns(trace, columns)
    role_of = roles_of(columns)  # the roofline's, where it ran
    role_values = np.array(ROLES, dtype=object)
    flops, hbm_bytes = counts_of(columns)
    return pd.DataFrame(
        {
            "device": per_device(dev_v),
            "clock": per_device(clocks),
            "stream": strings("stream"),
            "name": strings("name"),
            "op": _categorical(op_code, np.concatenate([op_v, name_v])),
            "bucket": strings("bucket"),
            "kind": strings("kind"),
            "copy_kind": strings("copy_kind"),
            "ib_fraction": gathered(columns.numbers("ib_fraction", np.float64), rows),
            "start_ns": start,
            "end_ns": np.maximum(columns.numbers("end_ns")[rows], start),
            "launch_ns": launch,
            "launch_thread": thread,
            "scope": strings("scope") if "scope" in table.columns else categorical("", rows.size),
            "component": strings("component") if "component" in table.columns else categorical("", rows.size),
            "backward": passes,
            "moe_role": _categorical(role_codes[rows], roles),
            "tokens": _categorical(token_codes[rows], token_values),
            "batch": _categorical(batch_codes[rows], batch_values),
            "program": _categorical(program_codes[rows], program_values),
            "shapes": _categorical(shape_codes[rows], shape_values),
            "category": strings("category") if "category" in table.columns else categorical("", rows.size),
            "opcode": strings("opcode") if "opcode" in table.columns else categorical("", rows.size),
            "role": _categorical(role_of[rows], role_values),
            "flops": gathered(np.asarray(flops, dtype=np.float64), rows),
            "hbm_bytes": gathered(np.asarray(hbm_bytes, dtype=np.float64), rows),
            "host_gap_ns": host_gaps(trace, columns, positions),
        },
        copy=False,  # fresh arrays each: not stacked into blocks (a copy of the four int64 columns)
    )


def host_gaps(trace: Trace, columns: EventColumns, positions: Sequence[np.ndarray]) -> np.ndarray:
    """Per row of ``positions`` (each a device's rows, by start): on a TPU chip, the idle between two executions
    of its programs (the union of its ``XLA Modules`` line's runs) on the first activity that starts in the
    later execution; 0 elsewhere. A TPU runs one program per step: that idle is the host dispatching the next
    program late (insight.opportunities.host_gap_signal, the opportunity it projects)."""
    markers = trace.markers
    modules = markers[markers["kind"] == "module"] if len(markers) else markers
    if not len(modules):
        return _constant(0, sum(len(p) for p in positions))
    out = [np.zeros(len(p), dtype=np.int64) for p in positions]
    by_device = {str(d): g for d, g in modules.groupby("device", sort=False, observed=True)}
    dev_c, dev_v = columns.strings("device")
    start = columns.numbers("start_ns")
    for i, rows in enumerate(positions):
        if not len(rows):
            continue
        device = str(dev_v[dev_c[rows[0]]])
        runs = by_device.get(device)
        if runs is None or trace.kind_of(device) != TPU or len(runs) < 2:
            continue
        s, e = iv.union(runs["start_ns"].to_numpy(np.int64), runs["end_ns"].to_numpy(np.int64))
        gap = s[1:] - e[:-1]
        mine = start[np.asarray(rows, dtype=np.int64)]
        first = np.searchsorted(mine, s[1:], side="left")  # each later execution's first activity
        ok = (gap > 0) & (first < mine.size)
        ok[ok] = mine[first[ok]] < np.append(s[2:], np.iinfo(np.int64).max)[ok]  # it starts in that execution
        np.add.at(out[i], first[ok], gap[ok])
    return np.concatenate(out)


def _constant(value: int, size: int) -> np.ndarray:
    """``value`` on ``size`` rows, as int64, in no memory (a read-only broadcast)."""
    return np.broadcast_to(np.int64(value), (size,))


def _categorical(codes: np.ndarray, values: np.ndarray, unique: bool = False) -> pd.Categorical:
    """The strings ``values[codes]`` (-1: missing) as a categorical of the distinct strings they hold, in the
    order of ``values``: a count over the codes, not a hash of every row (``categorical_of`` numbers them by
    first appearance instead; a few columns of a million rows cost more that way than the replay).
    ``unique``: the values are distinct strings (a categorical's own), so that rows holding every one of them
    keep their codes as they are. ``codes``: any integer width (a categorical's own narrow codes)."""
    values = np.asarray(values, dtype=object)
    # a code of -1 reads the last slot (numpy's negative index): the missing one, no shifted copy of the codes
    seen = np.zeros(len(values) + 1, dtype=bool)
    seen[codes] = True
    used = np.flatnonzero(seen[:-1])
    if unique and used.size == len(values):
        return pd.Categorical.from_codes(codes, categories=pd.Index(values, dtype=object), validate=False)
    merged, distinct = pd.factorize(values[used])  # distinct codes may spell one string
    renumber = np.full(len(values) + 1, -1, dtype=narrowest_int(len(distinct)))
    renumber[used] = merged
    codes_out = cast("np.ndarray[Any, np.dtype[np.integer]]", renumber[codes])
    return pd.Categorical.from_codes(codes_out, categories=pd.Index(distinct, dtype=object), validate=False)
