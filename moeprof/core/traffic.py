"""Spec §11, per-pair traffic: the bytes each all-to-all sent from every sender to every receiver, from the
split sizes each rank recorded, joined to the §8 ledger (the receiver's wait and transfer).

The readers give one row per all-to-all call and rank (:data:`SPLIT_COLUMNS`); :func:`traffic_instances` matches
the rows of one call across the ranks of its group and builds its matrix (row = sender, column = receiver, in
the group's rank order):

* a cell is the sender's ``in`` split for the receiver times the sender's row bytes, else (where the sender's
  list was cut or dropped) the receiver's ``out`` split for the sender times the receiver's row bytes; an
  ``even`` list (``[]``) splits the tensor equally over the group; a cell neither side recorded is unknown
  (None): never guessed, and the instance is ``partial``;
* a row's sum is the sender's input tensor (its dims), a column's the receiver's output tensor, whatever the
  lists say;
* rows or columns above ``3x`` their mean and cells above ``5x`` theirs are flagged.

Calls match across ranks by their group and the record's sequence number where every call of the group has
one, else by their order on each rank (§8 rule 1 without a sequence number: the n-th call of the group). The
ledger joins per rank in the same way: a rank's n-th complete all-to-all instance of the §8 ledger is its n-th
call, where both count alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

# a list: every peer's count; [] (PyTorch splits dim 0 equally); cut ("...": the counts before it); dropped ("":
# PyTorch leaves long lists out); unrecorded (the trace has no field for it: an older PyTorch, shapes not recorded)
LISTED, EVEN, CUT, DROPPED, UNRECORDED = "listed", "even", "cut", "dropped", "unrecorded"
SPLIT_STATES = (LISTED, EVEN, CUT, DROPPED, UNRECORDED)
# one row per all-to-all call and rank, as the rank's file records it
SPLIT_COLUMNS: dict[str, str] = {
    "rank": "int64",  # the file's global rank
    "group": "str",  # the call's group: comma-separated global ranks ("" unknown)
    "group_assumed": "bool",  # the group is the reader's reading (the job's one group, the world), not recorded
    "op": "str",  # what recorded it: c10d::alltoall_base_, record_param_comms
    "seq": "int64",  # the group's sequence number of the call (-1 unknown)
    "start_ns": "int64",  # the host-side call (host clock)
    "end_ns": "int64",
    "thread": "int64",
    "step": "int64",  # the step marker it falls in (-1 none)
    "dtype": "str",
    # per side (in: what this rank sends; out: what it receives): the list's state (SPLIT_STATES), its counts
    # (comma-separated rows per peer, in group order; a cut list's prefix), the tensor's rows along dim 0, the
    # bytes of one row, the tensor's bytes (NaN / -1 unknown)
    "in_state": "str",
    "in_splits": "str",
    "in_rows": "int64",
    "in_row_bytes": "float64",
    "in_bytes": "float64",
    "out_state": "str",
    "out_splits": "str",
    "out_rows": "int64",
    "out_row_bytes": "float64",
    "out_bytes": "float64",
}
ROW_FLAG, CELL_FLAG = 3.0, 5.0  # spec §11: a row or column above 3x its mean, a cell above 5x theirs
MAX_INSTANCES = 256  # instances the JSON lists one by one (each a matrix); the rest are counted
_TYPES = {"int64": np.int64, "float64": np.float64, "bool": bool, "str": object}


def empty_splits() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=_TYPES[t]) for c, t in SPLIT_COLUMNS.items()})


def _counts(text: str) -> np.ndarray:
    return np.array([int(v) for v in text.split(",")], dtype=np.int64) if text else np.zeros(0, np.int64)


def _side_cells(row: Mapping[str, Any], side: str, n: int) -> np.ndarray:
    """Bytes per peer (in group order) that one rank's list says for one side; NaN where it does not say."""
    out = np.full(n, np.nan)
    state, row_bytes, total = row[f"{side}_state"], float(row[f"{side}_row_bytes"]), float(row[f"{side}_bytes"])
    if state == EVEN:
        if np.isfinite(total):
            out[:] = total / n
        return out
    if state not in (LISTED, CUT) or not np.isfinite(row_bytes):
        return out
    counts = _counts(str(row[f"{side}_splits"]))
    if state == LISTED and counts.size != n:
        return out  # a list of another length than the group: not this group's peers
    k = min(counts.size, n)
    out[:k] = counts[:k] * row_bytes
    return out


def _over_mean(values: np.ndarray) -> float | None:
    known = values[np.isfinite(values)]
    if not known.size or known.mean() <= 0:
        return None
    return round(float(known.max() / known.mean()), 4)


def _flags(matrix: np.ndarray, rows: np.ndarray, cols: np.ndarray, ranks: Sequence[int]) -> list[dict[str, Any]]:
    flags: list[dict[str, Any]] = []
    for kind, values in (("sender", rows), ("receiver", cols)):
        known = values[np.isfinite(values)]
        if not known.size or known.mean() <= 0:
            continue
        mean = float(known.mean())
        for i in np.flatnonzero(np.isfinite(values) & (values > ROW_FLAG * mean)).tolist():
            over = round(float(values[i]) / mean, 4)
            flags.append({"kind": kind, "rank": ranks[i], "bytes": int(values[i]), "over_mean": over})
    known = matrix[np.isfinite(matrix)]
    if known.size and known.mean() > 0:
        mean = float(known.mean())
        for s, d in zip(*np.nonzero(np.isfinite(matrix) & (matrix > CELL_FLAG * mean)), strict=True):
            over = round(float(matrix[s, d]) / mean, 4)
            flags.append(
                {"kind": "pair", "src": ranks[s], "dst": ranks[d], "bytes": int(matrix[s, d]), "over_mean": over}
            )
    return flags


def _number_calls(calls: pd.DataFrame) -> pd.DataFrame:
    """Each call's match key within its group: its sequence number where every call of the group has one,
    else its order among the group's calls on its rank (start order)."""
    calls = calls.sort_values(["group", "rank", "start_ns"], kind="stable", ignore_index=True)
    order = calls.groupby(["group", "rank"], sort=False).cumcount().to_numpy(np.int64)
    with_seq = calls.groupby("group", sort=False)["seq"].transform(lambda s: bool((s >= 0).all())).to_numpy(bool)
    calls["key"] = np.where(with_seq, calls["seq"].to_numpy(np.int64), order)
    calls["keyed_by"] = np.where(with_seq, "seq", "order")
    calls["order"] = order
    return calls


def _ledger_by_rank(matched: pd.DataFrame | None) -> dict[int, pd.DataFrame]:
    """Per global rank, its complete all-to-all records of the §8 ledger in start order (own clock)."""
    if matched is None or not len(matched):
        return {}
    done = matched[(matched["instance"] >= 0) & (matched["kind"].astype(str) == "all-to-all")]
    if not len(done):
        return {}
    done = done.sort_values(["global_id", "start_ns"], kind="stable")
    return {int(str(g)): frame.reset_index(drop=True) for g, frame in done.groupby("global_id", sort=False)}


def traffic_instances(
    calls: pd.DataFrame, matched: pd.DataFrame | None = None, timeline: bool = True
) -> tuple[list[dict[str, Any]], list[str]]:
    """Spec §11's ``traffic`` entries of a job's all-to-all calls (SPLIT_COLUMNS, every rank's), and notes.

    ``matched``: the §8 ledger's comm records with their instance and wait (None: no ledger); ``timeline``:
    whether the job has device activity (without it, the timeline figures are said to need it)."""
    notes: list[str] = []
    if calls is None or not len(calls):
        return [], notes
    grouped = calls[calls["group"].astype(str) != ""]
    if len(grouped) < len(calls):
        notes.append(
            f"{len(calls) - len(grouped)} all-to-all call(s) name no group and the job has none to assume: "
            "their traffic is left out"
        )
    if not len(grouped):
        return [], notes
    numbered = _number_calls(grouped.reset_index(drop=True))
    ledger = _ledger_by_rank(matched)
    # the ledger's n-th all-to-all of a rank is its n-th call where the counts agree
    counts = numbered.groupby("rank").size().to_dict()
    joinable = {r for r, frame in ledger.items() if counts.get(r) == len(frame)}
    numbered = numbered.sort_values(["rank", "start_ns"], kind="stable", ignore_index=True)
    numbered["on_rank"] = numbered.groupby("rank").cumcount().to_numpy(np.int64)
    out: list[dict[str, Any]] = []
    incomplete = 0
    partial = 0
    for (group, _), frame in numbered.groupby(["group", "key"], sort=False):
        ranks = [int(r) for r in str(group).split(",")]
        n = len(ranks)
        if frame["rank"].nunique() != n or len(frame) != n or set(frame["rank"].tolist()) != set(ranks):
            incomplete += 1
            continue
        by_rank: dict[int, Mapping[str, Any]] = {int(r["rank"]): r for r in frame.to_dict("records")}  # type: ignore[misc]
        rows = [by_rank[r] for r in ranks]
        sent = np.vstack([_side_cells(r, "in", n) for r in rows])  # [sender, receiver]
        received = np.vstack([_side_cells(r, "out", n) for r in rows]).T  # [sender, receiver]
        matrix = np.where(np.isfinite(sent), sent, received)
        disagree = np.isfinite(sent) & np.isfinite(received) & (sent != received)
        row_bytes = np.array([float(r["in_bytes"]) for r in rows])
        col_bytes = np.array([float(r["out_bytes"]) for r in rows])
        # a tensor's dims unknown (a record without them): the sum of its known cells where the row is whole
        whole_rows = np.isfinite(matrix).all(axis=1)
        row_bytes = np.where(np.isfinite(row_bytes), row_bytes, np.where(whole_rows, np.nansum(matrix, axis=1), np.nan))
        whole_cols = np.isfinite(matrix).all(axis=0)
        col_bytes = np.where(np.isfinite(col_bytes), col_bytes, np.where(whole_cols, np.nansum(matrix, axis=0), np.nan))
        is_partial = bool(~np.isfinite(matrix).all())
        partial += is_partial
        steps = sorted({int(s) for s in frame["step"].tolist() if s >= 0})
        entry: dict[str, Any] = {
            "collective": str(rows[0]["op"]),
            "call": int(rows[0]["order"]),
            "matched_by": str(rows[0]["keyed_by"]),
            "step": steps[0] if len(steps) == 1 else None,
            "ranks": ranks,
            "group_assumed": bool(any(r["group_assumed"] for r in rows)),
            "dtype": str(rows[0]["dtype"]),
            "partial": is_partial,
            "matrix_bytes": [[None if not np.isfinite(v) else int(round(v)) for v in row] for row in matrix.tolist()],
            "row_bytes": [None if not np.isfinite(v) else int(round(v)) for v in row_bytes.tolist()],
            "col_bytes": [None if not np.isfinite(v) else int(round(v)) for v in col_bytes.tolist()],
            "row_max_over_mean": _over_mean(row_bytes),
            "col_max_over_mean": _over_mean(col_bytes),
            "flagged": _flags(matrix, row_bytes, col_bytes, ranks),
            "lists": {
                "sent": sorted({str(r["in_state"]) for r in rows}),
                "received": sorted({str(r["out_state"]) for r in rows}),
            },
        }
        if disagree.any():
            entry["disagreeing_cells"] = int(disagree.sum())
        entry.update(_joined(rows, ranks, matrix, col_bytes, ledger, joinable, timeline))
        out.append(entry)
    if incomplete:
        notes.append(
            f"{incomplete} all-to-all call(s) with split sizes are not in every member's trace: no matrix for them"
        )
    if partial:
        notes.append(
            f"{partial} all-to-all call(s) have split lists PyTorch cut, dropped (long lists) or did not record: "
            "their cells are unknown (null), their row and column sums come from the tensors' dims"
        )
    if len(out) > MAX_INSTANCES:
        notes.append(f"traffic lists the first {MAX_INSTANCES} of {len(out)} all-to-all instances")
        out = out[:MAX_INSTANCES]
    return out, notes


def _joined(
    rows: Sequence[Mapping[str, Any]],
    ranks: Sequence[int],
    matrix: np.ndarray,
    col_bytes: np.ndarray,
    ledger: Mapping[int, pd.DataFrame],
    joinable: set[int],
    timeline: bool,
) -> dict[str, Any]:
    """The §8 join of one instance: per receiver its wait and transfer (and bytes over the transfer), per pair
    its bytes with the receiver's transfer and wait; else why there is none."""
    if not timeline:
        return {"timeline": "needs device activity: the trace has no device timeline, so no wait or transfer"}
    if not all(r in joinable for r in ranks):
        return {"timeline": "not joined: the ranks' all-to-all instances in the §8 ledger do not count as their calls"}
    records = [ledger[r].iloc[int(row["on_rank"])] for r, row in zip(ranks, rows, strict=True)]
    instances = {int(rec["instance"]) for rec in records}
    if len(instances) != 1:
        return {"timeline": "not joined: the ranks' calls fall in different §8 instances"}
    receivers = []
    for i, (r, rec) in enumerate(zip(ranks, records, strict=True)):
        duration = int(rec["end_ns"]) - int(rec["start_ns"])
        wait = int(rec["wait_ns"])
        transfer = max(duration - wait, 0)
        received = col_bytes[i]
        gbps = round(float(received) / transfer, 3) if transfer > 0 and np.isfinite(received) else None
        receivers.append({"rank": r, "bytes": None if not np.isfinite(received) else int(received),
                          "wait_ns": wait, "transfer_ns": transfer, "gbps": gbps})  # fmt: skip
    pairs = [
        {
            "src": ranks[s],
            "dst": ranks[d],
            "bytes": int(round(matrix[s, d])),
            "transfer_ns": receivers[d]["transfer_ns"],
            "wait_ns": receivers[d]["wait_ns"],
        }
        for s in range(len(ranks))
        for d in range(len(ranks))
        if np.isfinite(matrix[s, d])
    ]
    return {"ledger_instance": instances.pop(), "receivers": receivers, "pairs": pairs}
