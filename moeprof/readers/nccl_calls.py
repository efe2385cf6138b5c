"""NCCL (and RCCL) API calls -> what the kernels launched inside them communicate: the collective, its bytes,
communicator and peers, a ncclGroupStart/End group counted as one launch. The Nsight reader (NVTX ranges of
the NCCL domain) and the rocpd reader (RCCL API records) both read calls this way."""

from __future__ import annotations

import numpy as np
import pandas as pd

# NCCL API call -> collective name the taxonomy's `collective` rules read; other calls
# (ncclCommInitRank, ncclGroupStart, ncclCommCount...) launch no communication kernel
_NCCL_COLLECTIVES = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "reduce": "reduce",
    "send": "send",
    "recv": "recv",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "gather": "gather",
    "scatter": "scatter",
}


def _collective_of(text: np.ndarray) -> np.ndarray:
    """ncclAllReduce -> "allreduce"; non-collective NCCL calls -> ""."""
    codes, uniques = pd.factorize(text)
    names = np.array([_NCCL_COLLECTIVES.get(u[4:].lower(), "") for u in uniques], dtype=object)
    return names[codes]


def _joined_peers(group: np.ndarray, peer: np.ndarray) -> pd.Series:
    """Per group, its distinct peers in ascending order joined by commas ("1,3"), indexed by group: one sort
    and a join per group over plain lists (a pandas aggregation called Python once per group)."""
    order = np.lexsort((peer, group))
    g, p = group[order], peer[order]
    keep = np.ones(len(g), dtype=bool)
    keep[1:] = (g[1:] != g[:-1]) | (p[1:] != p[:-1])
    g, p = g[keep], p[keep]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], len(g)]
    text = [str(int(v)) for v in p.tolist()]
    return pd.Series(
        [",".join(text[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)],
        index=g[starts],
        dtype=object,
    )


def launch_info(calls: pd.DataFrame, payload: pd.DataFrame) -> pd.DataFrame:
    """Per NCCL call range: the collective, bytes, communicator and peers of a kernel launched in it.

    A call inside ncclGroupStart/End launches nothing itself: the closing
    ncclGroupEnd launches for the whole group. Depth is counted per thread and
    clipped at zero, so a capture that starts inside a group does not shift every
    later group.
    """
    n = len(calls)
    text = calls["clean"].to_numpy(dtype=object)
    order = np.lexsort((calls["start"].to_numpy(), calls["tid"].to_numpy()))
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    t = text[order]
    tid, _ = pd.factorize(calls["tid"].to_numpy()[order])
    is_gs, is_ge = t == "ncclGroupStart", t == "ncclGroupEnd"
    delta = is_gs.astype(np.int64) - is_ge.astype(np.int64)
    g = pd.Series(delta).groupby(tid)
    s = g.cumsum().to_numpy()
    low = pd.Series(s).groupby(tid).cummin().to_numpy()
    depth_after = s - np.minimum(low, 0)
    depth_before = pd.Series(depth_after).groupby(tid).shift(1, fill_value=0).to_numpy()
    outer_start = is_gs & (depth_before == 0)
    group_no = pd.Series(outer_start.astype(np.int64)).groupby(tid).cumsum().to_numpy()
    in_group = depth_before > 0
    closes = is_ge & in_group & (depth_after == 0)
    gkey = np.where(in_group, tid.astype(np.int64) * (n + 1) + group_no, -1)

    coll = _collective_of(t)
    pay = payload.iloc[order].reset_index(drop=True)
    peer = pay["peer"].to_numpy(dtype=np.float64)
    nb = pay["nbytes"].to_numpy(dtype=np.float64)
    comm = pay["comm"].to_numpy(dtype=np.float64)

    out_coll = np.where(~in_group, coll, "").astype(object)  # a call outside a group launches for itself
    out_bytes = np.where(~in_group, nb, np.nan)
    out_comm = np.where(~in_group, comm, np.nan)
    out_peers = np.where(
        ~in_group & np.isin(coll, ("send", "recv")) & ~np.isnan(peer),
        pd.Series(peer).fillna(-1).astype(np.int64).astype(str).to_numpy(),
        "",
    ).astype(object)
    heuristic = np.zeros(n, dtype=bool)

    member = in_group & (coll != "")
    if member.any() and closes.any():
        f = pd.DataFrame(
            {
                "g": gkey[member],
                "coll": coll[member],
                "peer": peer[member],
                "nb": nb[member],
                "comm": comm[member],
            }
        )
        f["send"] = f["coll"] == "send"
        f["recv"] = f["coll"] == "recv"
        f["other"] = ~(f["send"] | f["recv"])
        f["send_nb"] = f["nb"].where(f["send"])
        f["recv_nb"] = f["nb"].where(f["recv"])
        f["send_peer"] = f["peer"].where(f["send"])
        f["recv_peer"] = f["peer"].where(f["recv"])
        f["other_coll"] = f["coll"].where(f["other"])
        grp = f.groupby("g", sort=False)
        agg = pd.DataFrame(
            {
                "n_send": grp["send"].sum(),
                "n_recv": grp["recv"].sum(),
                "n_other": grp["other"].sum(),
                "send_nb": grp["send_nb"].sum(min_count=1),
                "recv_nb": grp["recv_nb"].sum(min_count=1),
                "other_nb": grp["nb"].max(),
                "n_peer": grp["peer"].count(),
                "n": grp["coll"].size(),
                "send_peers": grp["send_peer"].nunique(),
                "recv_peers": grp["recv_peer"].nunique(),
                "all_peers": grp["peer"].nunique(),
                "comms": grp["comm"].nunique(),
                "comm": grp["comm"].first(),
            }
        )
        others = f[f["other"]]
        mode = (
            others.groupby("g", sort=False)["coll"].agg(lambda c: c.value_counts().index[0])
            if len(others)
            else pd.Series(dtype=object)
        )
        agg["other_coll"] = mode.reindex(agg.index)
        p2p = agg["n_other"] == 0
        peers_known = (agg["n_peer"] == agg["n"]) & p2p
        same_sets = (agg["send_peers"] == agg["recv_peers"]) & (agg["all_peers"] == agg["send_peers"])
        a2a_known = peers_known & same_sets & (agg["send_peers"] >= 2)
        a2a_guess = ~peers_known & (agg["n_send"] >= 2) & (agg["n_send"] == agg["n_recv"])
        kind = np.select(
            [~p2p, a2a_known | a2a_guess, (agg["n_send"] > 0) & (agg["n_recv"] > 0), agg["n_send"] > 0],
            [agg["other_coll"].fillna("").to_numpy(dtype=object), "all_to_all", "send_recv", "send"],
            default="recv",
        )
        agg["kind"] = kind
        agg["heuristic"] = (a2a_guess & p2p).to_numpy()
        agg["bytes"] = np.where(p2p, agg["send_nb"].fillna(agg["recv_nb"]), agg["other_nb"])
        agg["comm"] = agg["comm"].where(agg["comms"] == 1)
        agg["peers"] = ""
        if peers_known.any():
            known = f.loc[f["g"].isin(agg.index[peers_known]) & f["peer"].notna(), ["g", "peer"]]
            agg.loc[peers_known, "peers"] = _joined_peers(
                known["g"].to_numpy(dtype=np.int64), known["peer"].to_numpy(dtype=np.float64)
            )
        rows = np.flatnonzero(closes)
        look = agg.reindex(gkey[rows])
        out_coll[rows] = look["kind"].fillna("").to_numpy(dtype=object)
        out_bytes[rows] = look["bytes"].to_numpy(dtype=np.float64)
        out_comm[rows] = look["comm"].to_numpy(dtype=np.float64)
        out_peers[rows] = look["peers"].fillna("").to_numpy(dtype=object)
        heuristic[rows] = look["heuristic"].fillna(False).to_numpy(dtype=bool)
    return pd.DataFrame(
        {
            "coll": out_coll[inv],
            "nbytes": out_bytes[inv],
            "comm": out_comm[inv],
            "peers": out_peers[inv],
            "heuristic": heuristic[inv],
        }
    )
