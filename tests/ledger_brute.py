"""The cross-rank ledger (spec §8) recomputed by brute force from an event table, for the report tests.

Only for inputs on one clock whose collectives span every device and repeat in the same order on
each (the CPU sample, the 8-rank DLRM trace): the n-th activity of an op on each device is one
instance. Nothing here calls moeprof's ledger code.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def comm_instances(events: pd.DataFrame, key: str) -> pd.DataFrame:
    """One row per comm activity: its op (the ``key`` column), its instance (op, n), duration and wait ``W_r``,
    and per instance the first and last arrival and the straggler (the last; ties: the first device name)."""
    comm = events[events["bucket"] == "comm"]
    comm = pd.DataFrame(
        {
            "device": comm["device"].astype(str).to_numpy(),
            "op": comm[key].astype(str).to_numpy(),
            "kind": comm["kind"].astype(str).to_numpy(),
            "start_ns": comm["start_ns"].to_numpy(np.int64),
            "end_ns": comm["end_ns"].to_numpy(np.int64),
        }
    ).sort_values(["start_ns", "end_ns"], kind="stable")
    comm["n"] = comm.groupby(["device", "op"]).cumcount()
    rows = []
    for (op, n), members in comm.groupby(["op", "n"]):
        last = int(members["start_ns"].max())
        straggler = sorted(members.loc[members["start_ns"] == last, "device"])[0]
        for r in members.itertuples():
            wait = min(max(last - r.start_ns, 0), max(r.end_ns - r.start_ns, 0))
            rows.append(
                {
                    "device": r.device,
                    "op": op,
                    "kind": r.kind,
                    "n": n,
                    "members": len(members),
                    "start_ns": r.start_ns,
                    "end_ns": r.end_ns,
                    "wait_ns": wait,
                    "first_ns": int(members["start_ns"].min()),
                    "last_ns": last,
                    "straggler": straggler,
                }
            )
    return pd.DataFrame(rows)


def instances(records: pd.DataFrame) -> pd.DataFrame:
    """Per instance: op, kind, members, first and last arrival, straggler; in order of first arrival."""
    table = records.drop_duplicates(["op", "n"])[["op", "kind", "n", "members", "first_ns", "last_ns", "straggler"]]
    return table.sort_values(["first_ns", "op", "n"], ignore_index=True)


def stragglers(records: pd.DataFrame) -> dict[str, tuple[int, int, int]]:
    """Per device that arrives last at least once: (instances it is last in, instances it takes part in,
    the other members' waiting in the instances it is last in)."""
    table = instances(records)
    taking_part = records.groupby("device")[["op", "n"]].apply(lambda g: len(g.drop_duplicates()))
    caused = records.groupby(["op", "n"])["wait_ns"].sum()
    out = {}
    for device, mine in table.groupby("straggler"):
        waited = int(sum(caused[(op, n)] for op, n in zip(mine["op"], mine["n"])))
        out[str(device)] = (len(mine), int(taking_part[device]), waited)
    return out
