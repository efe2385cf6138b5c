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

from .events import categorical
from .metrics import collective_key
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


def comm_records(trace: Trace, comm: pd.DataFrame) -> pd.DataFrame:
    """Records of a device's comm activities (``comm``: rows of ``trace.events`` with bucket comm)."""
    n = len(comm)
    if not n:
        return empty_records()
    kind = comm["kind"].to_numpy(dtype=object)
    name = comm["name"].to_numpy(dtype=object)
    group = comm["group"].to_numpy(dtype=object)
    pg = comm["pg"].to_numpy(dtype=object)
    seq = comm["seq"].to_numpy(dtype=np.int64)
    p2p = comm["p2p"].to_numpy(dtype=bool)
    op = comm["hlo_op"].to_numpy(dtype=object)
    module = comm["hlo_module"].to_numpy(dtype=object)
    activity = comm["activity"].to_numpy(dtype=object)
    has_group = group != ""
    key = np.full(n, "", dtype=object)
    counted = np.ones(n, dtype=bool)
    fmt = trace.format
    if fmt == "kineto":
        # rule 1: process group (name, ranks) and its sequence number; p2p calls count apart
        with_seq = has_group & (seq >= 0)
        key[with_seq] = _join(
            np.full(with_seq.sum(), "pt"), pg[with_seq], group[with_seq], p2p[with_seq], seq[with_seq]
        )
        counted[with_seq] = False
        no_seq = has_group & ~with_seq
        key[no_seq] = _join(np.full(no_seq.sum(), "pt"), pg[no_seq], group[no_seq], kind[no_seq])
    elif fmt in ("nsys", "nsys-parquet"):
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
        xla = has_group & (op != "")
        key[xla] = _join(np.full(xla.sum(), "xla"), module[xla], op[xla], group[xla])
    peer_copy = activity == "memcpy"
    key[peer_copy] = ""  # copies that are not NCCL's are never matched
    device = comm["device"].to_numpy(dtype=object)
    # string columns repeat a few values thousands of times (a 1,024-rank group's member list on every
    # row): categorical, so a file's records stay small on their way to the coordinator
    return pd.DataFrame(
        {
            "device": categorical(device, n),
            "clock": categorical(_clock(trace, device), n),
            "global_id": comm["global_id"].to_numpy(dtype=np.int64),
            "start_ns": comm["start_ns"].to_numpy(dtype=np.int64),
            "end_ns": np.maximum(comm["end_ns"].to_numpy(dtype=np.int64), comm["start_ns"].to_numpy(dtype=np.int64)),
            "kind": categorical(kind, n),
            "name": categorical(name, n),
            "op": categorical(collective_key(comm), n),
            "key": categorical(key, n),
            "counted": counted,
            "members": categorical(np.where(key != "", group, ""), n),
            "fallback": ~peer_copy,
        }
    )


def clock_domain(trace: Trace, device: str) -> str:
    """The clock a device's times are on (spec §8): its host; PyTorch rank files: the node ``r // G``."""
    if trace.format == "kineto" and trace.job.rank is not None:
        return f"node{trace.job.rank // max(trace.job.gpus_per_node or 8, 1)}"
    return device.split("/")[0]


def _clock(trace: Trace, device: np.ndarray) -> np.ndarray:
    codes, uniques = pd.factorize(device)
    return np.array([clock_domain(trace, str(d)) for d in uniques], dtype=object)[codes]
