"""What NCCL Inspector logs tell (pure functions over the reader's operation rows).

An Inspector record is one rank's execution time of one collective, with no start time: so there is
no timeline, and none of the §4 figures that need one (exposed comm, overlap, span, idle). What the
rows do give, and this module measures (definitions in docs/metrics.md, "NCCL Inspector logs"):

- bus bandwidth per collective kind, link and power-of-two message-size bucket, from the message size
  and the Inspector's own traffic rules, against the GPU's link peak (``--gpu``);
- matching ranks by (communicator, ``coll_sn``): in a collective all members end together, so the
  member with the shortest call arrived last and the others waited for it. Per process: how often its
  call was the single shortest, and the time the other members spent beyond it (Σ over those
  instances of each member's time minus the instance's minimum).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from .sections import InspectorResult

# a process is "consistently" the last to arrive when its call is the shortest in at least this share of
# the complete instances it took part in (a random member is shortest in 1/n of them)
CONSISTENT_SHARE = 0.5
# of a Send/Recv pair a random member is the shorter in half of them: "consistently" is three in four
P2P_CONSISTENT_SHARE = 0.75

CANNOT_TELL = (
    "exposed communication and its overlap with compute: a record has no start time, so no timeline "
    "(dump_timestamp_us is when it was written)",
    "the §4 figures (span, busy, idle, comm share, exposed comm): null in 'total', no 'devices'",
    "wait vs transfer exactly: a member's time beyond the shortest member is its wait minus the shortest "
    "member's own wait when their transfers take equal time (so a lower bound on its wait); unequal "
    "transfers (a slower link, a channel imbalance) blur it",
    "clock alignment across hosts, the order of collectives across communicators, compute between them",
    "which GPU, stream or kernel ran it (no device id; rank is per communicator, a process is host:pid)",
    "operations under NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES (8192 by default) or overwritten in the 1024-entry "
    "ring before a dump: not written",
)

P2P_CANNOT_TELL = (
    "which Recv a Send met, from the records alone: p2p_sn is each rank's own counter, so a pair is matched by "
    "order between its two ranks (the k-th Send from A to B is B's k-th Recv from A); where the two sides hold "
    "different counts or a pair's sizes differ, that sender-receiver direction stays unmatched, never guessed; "
    "an unmatched record's link is unknown when its communicator spans nodes"
)


def traffic_factor(kind: str, op: str, size: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, bool]:
    """(bus bytes per call, known): inspectorComputeOpBw's traffic x bus factor (NVIDIA/nccl inspector.cc)."""
    size = size.astype(np.float64)
    nf = n.astype(np.float64)
    if kind == "all-reduce":
        return size * 2 * (nf - 1) / nf, True
    if kind in ("all-gather", "reduce-scatter"):
        return size * nf * (nf - 1) / nf, True
    if kind == "broadcast" or op.lower() == "reduce" or kind == "send-recv":
        return size, True
    return np.zeros_like(size), False  # All2All and others: the Inspector has no traffic rule (it writes 0)


def size_bucket(size: np.ndarray) -> np.ndarray:
    """Lower edge of each size's power-of-two bucket (0 for 0)."""
    s = np.maximum(size.astype(np.int64), 1)
    return np.where(size > 0, np.left_shift(1, np.floor(np.log2(s)).astype(np.int64)), 0)


def bytes_label(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def measure(
    rows: pd.DataFrame | Mapping[str, Any], peaks: Mapping[str, float] | None = None,
    versions: Sequence[str] | None = None,
) -> InspectorResult:  # fmt: skip
    """The ``inspector`` section of the analysis from every file's operation rows (concatenated): a table, or
    its columns by name (the pipeline's, not made into a table); ``versions`` else the table's attrs."""
    peaks = peaks or {}
    if versions is None:
        versions = getattr(rows, "attrs", {}).get("versions", ())
    cols = _Columns(rows)
    keep = cols.first_of(cols.comm, cols.op, cols.seq, cols.rank)  # a record dumped twice counts once
    if not keep.all():
        cols = _Columns({name: _array(rows[name])[keep] for name in _READ})
    p2p = cols.is_p2p
    coll = ~p2p
    result = {
        "format": "nccl-inspector",
        "versions": sorted({str(v) for v in versions}),
        "records": cols.n,
        "collective_records": int(coll.sum()),
        "p2p_records": int(p2p.sum()),
        "processes": len(cols.process_keys),
        "communicators": _communicators(cols),
        "exec_us": float(pd.Series(cols.exec_us).sum()),
        **_collective_instances(cols, coll),
        "bandwidth": _bandwidth(cols, coll, peaks) + _p2p_bandwidth(cols, p2p, peaks),
        "p2p": _p2p(cols, p2p),
        "cannot_tell": list(CANNOT_TELL) + ([P2P_CANNOT_TELL] if p2p.any() else []),
    }
    return cast("InspectorResult", result)


class _Columns:
    """The rows' columns as integer codes and numpy arrays (grouping by codes, not by pandas groupby)."""

    def __init__(self, rows: pd.DataFrame | Mapping[str, Any]) -> None:
        def ints(name: str) -> np.ndarray:
            return np.asarray(rows[name], dtype=np.int64)

        self.comm, self.comm_names = _codes(rows["comm"])
        self.n = len(self.comm)
        self.op, self.op_names = _codes(rows["op"])
        self.kind, self.kind_names = _codes(rows["kind"])
        host, self.host_names = _codes(rows["host"])
        self.host = host
        self.pid, self.seq, self.rank = ints("pid"), ints("seq"), ints("rank")
        self.n_ranks, self.nnodes, self.bytes = ints("n_ranks"), ints("nnodes"), ints("bytes")
        self.exec_us = np.asarray(rows["exec_us"], dtype=np.float64)
        self.busbw = np.asarray(rows["busbw_gbs"], dtype=np.float64)
        peer = _array(rows["peer"])
        self.has_peer = ~np.asarray(pd.isna(peer), dtype=bool)
        self.peer = np.asarray(peer.fillna(-1), dtype=np.int64)
        # a communicator's label: its name, else its id
        name_code, name_values = pd.factorize(rows["comm_name"])
        self.comm_name = name_code.astype(np.int64)  # -1: none
        self.comm_name_values = np.asarray(name_values, dtype=object)
        self.label = np.where(self.comm_name >= 0, self.comm_name, len(name_values) + self.comm)
        self.label_names = np.concatenate([self.comm_name_values, self.comm_names])
        # a process is host:pid, numbered in (host, pid) order
        self.process, first = _group_ids(self.host_of_name(), self.pid)
        self.process_keys = [(str(self.host_names[self.host[i]]), int(self.pid[i])) for i in first]
        self.is_p2p = self.has_peer | (self.kind == _code_of(self.kind_names, "send-recv"))
        self.instances: tuple[np.ndarray, np.ndarray] | None = None  # the collectives', once computed

    def host_of_name(self) -> np.ndarray:
        """Host codes renumbered in name order (so process numbering follows (host name, pid))."""
        order = np.argsort(np.asarray([str(h) for h in self.host_names], dtype=object), kind="stable")
        rank_of = np.empty(len(order), np.int64)
        rank_of[order] = np.arange(len(order))
        return rank_of[self.host] if len(order) else self.host

    def first_of(self, *keys: np.ndarray) -> np.ndarray:
        """Whether each row is the first (in row order) of the rows sharing ``keys``."""
        _, first = _group_ids(*keys)
        out = np.zeros(self.n, bool)
        out[first] = True
        return out


# the row columns measure reads
_READ = ("comm", "op", "kind", "host", "pid", "seq", "rank", "n_ranks", "nnodes", "bytes", "exec_us", "busbw_gbs",
         "peer", "comm_name")  # fmt: skip


def _array(values: Any) -> Any:
    """A column as an array (a table's column is a Series)."""
    return values.array if isinstance(values, pd.Series) else values


def _codes(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, the distinct values) of a column; a missing value gets its own code."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def _code_of(names: np.ndarray, name: str) -> int:
    hit = np.flatnonzero(names == name)
    return int(hit[0]) if len(hit) else -2


def _group_ids(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group id per row, each group's first row), groups numbered in the keys' sorted order."""
    n = len(keys[0]) if keys else 0
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    combined = _one_key(keys)
    if combined is not None:  # one int64 in the keys' order: hashed in one pass, only the distinct keys sorted
        codes, uniques = pd.factorize(combined)
        codes = codes.astype(np.int64, copy=False)
        # codes come in order of first appearance: a row is its code's first where the code passes all before it
        seen = np.maximum.accumulate(codes)
        is_first = np.empty(n, bool)
        is_first[0] = True
        is_first[1:] = seen[1:] > seen[:-1]
        firsts = np.flatnonzero(is_first)
        order = np.argsort(uniques, kind="stable")
        position = np.empty(len(order), np.int64)
        position[order] = np.arange(len(order))
        return position[codes], firsts[order]
    order = np.lexsort(keys[::-1])  # stable: within a group, row order
    new = np.zeros(n, bool)
    new[0] = True
    for k in keys:
        sorted_k = k[order]
        new[1:] |= sorted_k[1:] != sorted_k[:-1]
    gid_sorted = np.cumsum(new) - 1
    ids = np.empty(n, np.int64)
    ids[order] = gid_sorted
    return ids, order[new]


def _one_key(keys: tuple[np.ndarray, ...]) -> np.ndarray | None:
    """The keys as one int64 ordered as the tuples (mixed radix from each key's range); None if past 2**62."""
    if len(keys) == 1:
        return keys[0].astype(np.int64, copy=False)
    combined = np.zeros(len(keys[0]), np.int64)
    span = 1
    for k in keys:
        low, high = int(k.min()), int(k.max())
        width = high - low + 1
        span *= width
        if span >= 1 << 62:
            return None
        combined = combined * width + (k - low)
    return combined


def _communicators(c: _Columns) -> list[dict[str, Any]]:
    out = []
    names = np.asarray([str(x) for x in c.comm_names], dtype=object)
    order = np.argsort(c.comm, kind="stable")
    bounds = np.searchsorted(c.comm[order], np.arange(len(names) + 1))
    for code in np.argsort(names, kind="stable"):
        at = order[bounds[code] : bounds[code + 1]]  # row order
        named = at[c.comm_name[at] >= 0]
        out.append(
            {
                "id": str(names[code]),
                "name": str(c.comm_name_values[c.comm_name[named[0]]]) if len(named) else None,
                "n_ranks": int(c.n_ranks[at].max()),
                "nnodes": int(c.nnodes[at].max()),
                "ranks_seen": _distinct(c.rank[at]),
                "records": len(at),
            }
        )
    return out


def _distinct(values: np.ndarray) -> int:
    """How many distinct integers (a count per value over their range where small, else a sort)."""
    if not len(values):
        return 0
    low, high = int(values.min()), int(values.max())
    if high - low < 1 << 24:
        return int(np.count_nonzero(np.bincount(values - low)))
    return len(np.unique(values))


def _group_min(ids: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Each group's minimum (ids 0..n-1, every id present)."""
    low = np.full(n, np.inf)
    np.minimum.at(low, ids, values)
    return low


def _sorted_codes(names: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(names in sorted order, each code's position in it): a few distinct names sorted, not every row's."""
    text = np.asarray([str(x) for x in names], dtype=object)
    order = np.argsort(text, kind="stable")
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    return text[order], position[codes]


def _collective_instances(c: _Columns, coll: np.ndarray) -> dict[str, Any]:
    """Match each collective's members by (communicator, op, seq); an instance is complete when as many
    distinct ranks as n_ranks have a record."""
    idx = np.flatnonzero(coll)
    if not len(idx):
        return _last_to_arrive(c, idx, np.zeros(0, np.int64), np.zeros(0, bool), 0)
    instance, first = _coll_instances(c, idx)
    members = np.bincount(instance)  # distinct ranks: records are distinct per (comm, op, seq, rank)
    complete = members[instance] == c.n_ranks[idx]
    return _last_to_arrive(c, idx, instance, complete, len(first))


def _coll_instances(c: _Columns, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The collective rows' instances by (communicator, op, seq): computed once, for the matching and the
    bandwidth table both."""
    if c.instances is None:
        c.instances = _group_ids(c.comm[idx], c.op[idx], c.seq[idx])
    return c.instances


def _last_to_arrive(
    c: _Columns, idx: np.ndarray, instance: np.ndarray, complete: np.ndarray, n_all: int,
    consistent: float = CONSISTENT_SHARE,
) -> dict[str, Any]:  # fmt: skip
    """The shortest member of a complete instance arrived last: the rest of the members' time beyond it is
    put to its process. ``idx`` the rows, ``instance`` their instance id, ``complete`` per row."""
    empty = {"instances": 0, "incomplete_instances": 0, "beyond_shortest_us": 0.0, "last_to_arrive": []}
    if not len(idx):
        return empty
    rows_in = idx[complete]
    if not len(rows_in):
        return {**empty, "incomplete_instances": n_all}
    if complete.all():  # the usual case: the instances as numbered
        inst, n_complete = instance, n_all
    else:
        inst, firsts = _group_ids(instance[complete])
        n_complete = len(firsts)
    incomplete = n_all - n_complete
    exec_us = c.exec_us[rows_in]
    low_row = _group_min(inst, exec_us, n_complete)[inst]
    beyond = exec_us - low_row
    at_low = exec_us == low_row
    n_at_low = np.bincount(inst, weights=at_low)[inst]
    instance_beyond = np.bincount(inst, weights=beyond)[inst]
    single = at_low & (n_at_low == 1)  # ties at the minimum name no member
    proc = c.process[rows_in]
    procs = np.flatnonzero(np.bincount(proc))  # the processes taking part, in process order
    local = np.searchsorted(procs, proc)
    n_proc = len(procs)
    instances = np.bincount(local, minlength=n_proc)
    shortest = np.bincount(local[single], minlength=n_proc)
    caused = np.bincount(local[single], weights=instance_beyond[single], minlength=n_proc)
    _, seen = _group_ids(local, c.label[rows_in], c.rank[rows_in])
    ranks: dict[int, list[str]] = {}
    for p_, label, rank in zip(local[seen], c.label[rows_in][seen], c.rank[rows_in][seen]):
        ranks.setdefault(int(p_), []).append(f"{c.label_names[label]}:{rank}")
    keys = [c.process_keys[p] for p in procs]
    order = sorted(range(n_proc), key=lambda i: (-caused[i], -shortest[i], str(keys[i])))
    out = []
    for i in order:
        host, pid = keys[i]
        share = float(shortest[i]) / float(instances[i]) if instances[i] else 0.0
        out.append(
            {
                "process": f"{host}:{pid}",
                "host": host,
                "pid": pid,
                "ranks": ", ".join(sorted(ranks.get(i, []))),
                "instances": int(instances[i]),
                "shortest": int(shortest[i]),
                "shortest_share": share,
                "caused_us": float(caused[i]),
                "flagged": share >= consistent and int(shortest[i]) > 0,
            }
        )
    return {
        "instances": n_complete,
        "incomplete_instances": incomplete,
        "tied_instances": int(n_complete - single.sum()),
        "beyond_shortest_us": float(beyond.sum()),
        "last_to_arrive": out,
    }


def _bandwidth(c: _Columns, coll: np.ndarray, peaks: Mapping[str, float]) -> list[dict[str, Any]]:
    """Per (kind, op, link, size bucket): bus GB/s over every member's time, and over the shortest member's
    (the instance's transfer, as near as a log without timestamps gets), against the link's peak."""
    idx = np.flatnonzero(coll)
    if not len(idx):
        return []
    instance, first = _coll_instances(c, idx)
    low = _group_min(instance, c.exec_us[idx], len(first))
    link = np.where(c.nnodes[idx] > 1, 0, 1)
    return _bandwidth_rows(c, idx, low[instance], (np.array(["ib", "nvlink"], dtype=object), link), c.seq[idx], peaks)


def _bandwidth_rows(
    c: _Columns, idx: np.ndarray, low: np.ndarray, link: tuple[np.ndarray, np.ndarray], instance_key: np.ndarray,
    peaks: Mapping[str, float],
) -> list[dict[str, Any]]:  # fmt: skip
    """The bandwidth table's rows of records ``idx``: ``low`` each record's instance's shortest member time,
    ``link`` (names, code per record), ``instance_key`` what tells instances apart within a communicator.
    Rows in (kind, op, link, size bucket) order."""
    bucket = size_bucket(c.bytes[idx])
    kinds, kind_code = _sorted_codes(c.kind_names, c.kind[idx])
    ops, op_code = _sorted_codes(c.op_names, c.op[idx])
    links, link_code = _sorted_codes(link[0], link[1])
    group, first = _group_ids(kind_code, op_code, link_code, bucket)
    # each group's rows in row order, as pandas' groupby gives them (a small int type: numpy's radix sort)
    order = np.argsort(group.astype(np.int16) if len(first) < 1 << 15 else group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(len(first) + 1))
    out = []
    for g, f in enumerate(first):
        rows = order[bounds[g] : bounds[g + 1]]
        kind, op, lk, b = str(kinds[kind_code[f]]), str(ops[op_code[f]]), str(links[link_code[f]]), int(bucket[f])
        at = idx[rows]
        size = c.bytes[at]
        bus, known = traffic_factor(kind, op, size, c.n_ranks[at])
        exec_us = float(pd.Series(c.exec_us[at]).sum())
        low_us = float(pd.Series(low[rows]).sum())
        bus_sum = float(bus.sum())
        bus_gbps = bus_sum / (exec_us * 1000) if known and exec_us > 0 else None  # bytes/ns = GB/s
        transfer_gbps = bus_sum / (low_us * 1000) if known and low_us > 0 else None
        peak = peaks.get(lk)
        instances = len(_group_ids(c.comm[at], instance_key[rows])[1])
        out.append(
            {
                "kind": kind,
                "op": op,
                "link": lk,
                "size_bucket_bytes": b,
                "size_bucket": f"{bytes_label(b)}+",
                "records": len(rows),
                "instances": instances,
                "bytes_per_call": int(np.median(size)),
                "exec_us": exec_us,
                "mean_exec_us": exec_us / len(rows),
                "bus_bandwidth_gbps": bus_gbps,
                "transfer_bus_bandwidth_gbps": transfer_gbps,
                "inspector_busbw_gbps_median": float(pd.Series(c.busbw[at]).median()) if known else None,
                "link_peak_gbps": peak,
                "peak_share": bus_gbps / peak if peak and bus_gbps is not None else None,
                "transfer_peak_share": transfer_gbps / peak if peak and transfer_gbps is not None else None,
            }
        )
    return out


def _p2p_pairs(c: _Columns, p2p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    """Match Send and Recv records: (rows, instance id, complete, instances, the other member's row or -1).

    p2p_sn is each rank's own counter over its communicator's P2P calls, so a Send's number says nothing of
    its Recv's. What matches them is NCCL's ordering: between two ranks of a communicator, the k-th Send from
    A to B is received by the k-th Recv on B from A. So an instance is (communicator, sender, receiver, k),
    k counted in p2p_sn order on each side. Where the two sides hold different counts (a record under the
    dump size or overwritten in the plugin's ring on one side only) or a matched pair's sizes differ, the
    order is lost for that sender and receiver: their records stay unmatched (incomplete), never guessed.
    """
    op_lower = np.asarray([str(x).lower() for x in c.op_names], dtype=object)
    send = p2p & c.has_peer & (op_lower == "send")[c.op]
    recv = p2p & c.has_peer & (op_lower == "recv")[c.op]
    idx = np.flatnonzero(send | recv)
    if not len(idx):
        z = np.zeros(0, np.int64)
        return idx, z, np.zeros(0, bool), 0, z
    is_send = send[idx]
    src = np.where(is_send, c.rank[idx], c.peer[idx])
    dst = np.where(is_send, c.peer[idx], c.rank[idx])
    side = (~is_send).astype(np.int64)
    comm = c.comm[idx]
    # k: each record's position among its side's records of (comm, src, dst), in p2p_sn order
    order = np.lexsort((np.arange(len(idx)), c.seq[idx], side, dst, src, comm))
    stream, _ = _group_ids(comm, src, dst, side)
    sorted_stream = stream[order]
    start = np.searchsorted(sorted_stream, sorted_stream)
    k = np.empty(len(idx), np.int64)
    k[order] = np.arange(len(idx)) - start
    instance, inst_first = _group_ids(comm, src, dst, k)
    members = np.bincount(instance)
    # per direction (comm, src, dst): both sides' counts equal, and every pair's sizes equal
    direction, _ = _group_ids(comm, src, dst)
    n_send = np.bincount(direction, weights=is_send)
    n_recv = np.bincount(direction, weights=~is_send)
    size = c.bytes[idx]
    size_min = np.full(len(inst_first), np.iinfo(np.int64).max)
    size_max = np.full(len(inst_first), np.iinfo(np.int64).min)
    np.minimum.at(size_min, instance, size)
    np.maximum.at(size_max, instance, size)
    bad_pair = (members != 2) | (size_min != size_max)
    bad_direction = np.zeros(len(n_send), bool)
    bad_direction[direction[bad_pair[instance]]] = True
    bad_direction |= n_send != n_recv
    complete = ~bad_direction[direction]
    # the other member of a matched pair
    other = np.full(len(idx), -1, np.int64)
    by_instance = np.argsort(instance, kind="stable")
    sorted_inst = instance[by_instance]
    same_next = np.zeros(len(idx), bool)
    same_next[:-1] = sorted_inst[1:] == sorted_inst[:-1]
    a = by_instance[np.flatnonzero(same_next)]
    b = by_instance[np.flatnonzero(same_next) + 1]
    ok = complete[a]
    other[a[ok]] = idx[b[ok]]
    other[b[ok]] = idx[a[ok]]
    return idx, instance, complete, len(inst_first), other


def _p2p(c: _Columns, p2p: np.ndarray) -> dict[str, Any]:
    """Send/Recv pairs matched (see :func:`_p2p_pairs`) and read as the collectives are: of a pair, the
    shorter call arrived last and the other member waited for it."""
    idx, instance, complete, n_all, _ = _p2p_pairs(c, p2p)
    section = _last_to_arrive(c, idx, instance, complete, n_all, P2P_CONSISTENT_SHARE)
    return {
        "records": int(p2p.sum()),
        "matched_records": int(complete.sum()),
        "unmatched_records": int(p2p.sum() - complete.sum()),
        **section,
    }


def _p2p_bandwidth(c: _Columns, p2p: np.ndarray, peaks: Mapping[str, float]) -> list[dict[str, Any]]:
    """Send and Recv rows of the bandwidth table: bus bytes = size (inspectorComputeOpBw's P2P factor 1). The
    link of a matched pair is told by the two processes' hosts; an unmatched record's only by its
    communicator (one node: the scale-up fabric; else "unknown": its peer may sit on the same node)."""
    idx, instance, _, _, other = _p2p_pairs(c, p2p)
    rest = np.setdiff1d(np.flatnonzero(p2p), idx)  # P2P records that are neither Send nor Recv with a peer
    low = c.exec_us[idx].copy()
    matched = other >= 0
    low[matched] = np.minimum(low[matched], c.exec_us[other[matched]])
    names = np.array(["ib", "nvlink", "unknown"], dtype=object)
    link = np.where(c.nnodes[idx] > 1, 2, 1)
    same_host = c.host[idx[matched]] == c.host[other[matched]]
    link[matched] = np.where(same_host, 1, 0)
    all_idx = np.concatenate([idx, rest])
    if not len(all_idx):
        return []
    all_low = np.concatenate([low, c.exec_us[rest]])
    all_link = np.concatenate([link, np.where(c.nnodes[rest] > 1, 2, 1)])
    all_key = np.concatenate([instance, -1 - np.arange(len(rest))])
    order = np.argsort(all_idx, kind="stable")  # row order, as the collectives' rows
    return _bandwidth_rows(c, all_idx[order], all_low[order], (names, all_link[order]), all_key[order], peaks)
