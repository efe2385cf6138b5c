"""The map side of the cross-rank ledger (spec §8): one compact record per communication activity.

Each record carries the activity as read (unclipped, on its host's own clock) and
the parts of its match key that one file can know: the key of rules 1-3 without
the occurrence index, whether the index is part of it, the group's members, and
whether rule 4 may apply. The reduce (:mod:`moeprof.core.ledger`) matches records
across files by a group-by; it never needs the event table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .events import categorical, categorical_of, lookup
from .metrics import DeviceTimeline
from .trace import Trace

RECORD_COLUMNS: dict[str, str] = {
    "device": "str",
    "clock": "str",  # clock domain: the host; PyTorch rank files: the node r // G
    "global_id": "int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "kind": "str",
    "name": "str",
    "op": "str",  # the collectives row it belongs to (HLO op, else kernel name)
    "key": "str",  # rules 1-3 match key without n; "" when the group is unknown
    "counted": "bool",  # the occurrence index n is part of the key
    "members": "str",  # comma-separated global ids of the instance's members ("" unknown)
    "fallback": "bool",  # rule 4 may match it (not a copy that is not NCCL's)
}
SEP = "\x1f"  # joins key parts: never inside a name


def empty_records() -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series(dtype={"str": object, "int64": np.int64, "bool": bool}[t]) for c, t in RECORD_COLUMNS.items()}
    )


def _join(*parts: np.ndarray) -> np.ndarray:
    out = parts[0].astype(str).astype(object)
    for p in parts[1:]:
        out = out + SEP + p.astype(str).astype(object)
    return out


def comm_records(trace: Trace, timeline: DeviceTimeline, comm: np.ndarray) -> pd.DataFrame:
    """Records of a device's comm activities (``comm``: a mask over the timeline's rows, bucket comm).

    String columns are taken as codes of the event table's categories, each distinct value handled once.
    """
    n = int(np.count_nonzero(comm))
    if not n:
        return empty_records()
    rows = timeline.positions[comm]
    table = timeline.columns

    def strings(column: str) -> tuple[np.ndarray, np.ndarray]:
        # the table's own narrow codes, gathered and widened: no int64 copy of a whole column kept
        codes, values = table.codes(column)
        return codes[rows].astype(np.int64), values

    def text(column: str) -> np.ndarray:
        codes, values = strings(column)
        return lookup(codes, values, np.nan)

    kind_c, kind_v = strings("kind")
    name_c, name_v = strings("name")
    op_c, op_v = strings("hlo_op")
    group_c, group_v = strings("group")
    # a group the reader assumed (not read from the trace) is no group for the match key: §8 rule 4 or unmatched
    has_group = lookup(group_c, table.nonempty("group"), True) & ~table.numbers("group_assumed", bool)[rows]
    key = np.full(n, "", dtype=object)
    counted = np.ones(n, dtype=bool)
    fmt = trace.format
    if fmt in ("kineto", "nsys", "nsys-parquet"):
        kind, group, pg = text("kind"), text("group"), text("pg")
        seq = table.numbers("seq")[rows]
        if fmt == "kineto":
            # rule 1: process group (name, ranks) and its sequence number; p2p calls count apart
            p2p = table.numbers("p2p", bool)[rows]
            with_seq = has_group & (seq >= 0)
            key[with_seq] = _join(
                np.full(with_seq.sum(), "pt"), pg[with_seq], group[with_seq], p2p[with_seq], seq[with_seq]
            )
            counted[with_seq] = False
            no_seq = has_group & ~with_seq
            key[no_seq] = _join(np.full(no_seq.sum(), "pt"), pg[no_seq], group[no_seq], kind[no_seq])
        else:
            # rule 3: the NCCL communicator and sequence where the NVTX payload has them
            comm_id = np.where(pg != "", pg, group)
            known = comm_id != ""
            with_seq = known & (seq >= 0)
            key[with_seq] = _join(np.full(with_seq.sum(), "nccl"), comm_id[with_seq], seq[with_seq])
            counted[with_seq] = False
            no_seq = known & ~with_seq
            key[no_seq] = _join(np.full(no_seq.sum(), "nccl"), comm_id[no_seq], kind[no_seq])
    else:
        # rule 2, XLA: (module, hlo_op, replica group, n)
        xla = has_group & lookup(op_c, table.nonempty("hlo_op"), True)
        if xla.any():
            module_c, module_v = strings("hlo_module")
            key[xla] = _join(
                np.full(xla.sum(), "xla"),
                lookup(module_c[xla], module_v, np.nan),
                lookup(op_c[xla], op_v, np.nan),
                lookup(group_c[xla], group_v, np.nan),
            )
    activity_c, activity_v = strings("activity")
    peer_copy = lookup(activity_c, activity_v == "memcpy", False)
    key[peer_copy] = ""  # copies that are not NCCL's are never matched
    device_c, device_v = strings("device")
    clocks = np.array([clock_domain(trace, str(d)) for d in device_v.tolist()], dtype=object)
    keyed = key != ""
    start = table.numbers("start_ns")[rows]
    # the op: the HLO op where known, else the kernel name (codes past the ops' index the names)
    op_known = lookup(op_c, table.nonempty("hlo_op"), True)
    op_code = np.where(op_known, op_c, np.where(name_c >= 0, name_c + len(op_v), -1))
    # string columns repeat a few values thousands of times (a 1,024-rank group's member list on every
    # row): categorical, so a file's records stay small on their way to the coordinator
    return pd.DataFrame(
        {
            "device": categorical_of(device_c, device_v),
            "clock": categorical_of(device_c, clocks),
            "global_id": table.numbers("global_id")[rows],
            "start_ns": start,
            "end_ns": np.maximum(table.numbers("end_ns")[rows], start),
            "kind": categorical_of(kind_c, kind_v),
            "name": categorical_of(name_c, name_v),
            "op": categorical_of(op_code, np.concatenate([op_v, name_v])),
            "key": categorical(key, n),
            "counted": counted,
            "members": categorical_of(np.where(keyed, group_c, len(group_v)), np.append(group_v, "")),
            "fallback": ~peer_copy,
        }
    )


def clock_domain(trace: Trace, device: str) -> str:
    """The clock a device's times are on (spec §8): its host; PyTorch rank files: the node ``r // G``."""
    if trace.format == "kineto" and trace.job.rank is not None:
        return f"node{trace.job.rank // max(trace.job.gpus_per_node or 8, 1)}"
    return device.split("/")[0]


def clock_domains(trace: Trace) -> dict[str, str]:
    """Every device of the trace -> its clock domain (:func:`clock_domain`)."""
    return {device: clock_domain(trace, device) for device in trace.device_names}
