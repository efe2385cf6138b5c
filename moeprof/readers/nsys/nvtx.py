"""NVTX ranges: the families moeprof reads (NCCL API calls, framework communication ranges, XLA thunks and
modules, steps), each distinct text classified once, and the innermost range around each launch."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...core.vocabulary import vocabulary
from .columns import ints
from .tables import Frames

# PyTorch's emit_nvtx appends ", seq = N, op_id = N, sizes = [...]" to every op name
TORCH_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$", re.S)


NCCL_CALL = re.compile(r"^nccl[A-Z]\w*$")


_NCCL_DOMAINS = frozenset({"", "nccl", "rccl"})  # "" = a domain nobody named (default or never created)


P2P_ANNOTATION = re.compile(r"(?i)send|recv|p2p")


ALL_TO_ALL = re.compile(r"(?i)all_?(to|2)_?all")


# XLA's thunk and module annotations; nsys may show them as "TSL:Thunk:#...#" (domain prefix)
THUNK = re.compile(r"(?:^|:)Thunk:#([^#]*)#")


XLA_MODULE = re.compile(r"(?:^|:)XlaModule:#([^#]*)#")


_KV = re.compile(r"(\w+)=([^,#]*)")


# SQL pre-filter for NVTX rows (LIKE is ASCII case-insensitive): a superset of the families above,
# so that the aten:: ranges of emit_nvtx (often millions) stay in the file. No "_" (a LIKE wildcard).
NVTX_LIKE = (
    "nccl%",
    "rccl%",
    "gloo%",
    "ucc%",
    "mpi%",
    "xccl%",
    "%c10d%",
    "symm%",
    "%all%all%",
    "%all%reduce%",
    "%all%gather%",
    "%reduce%scatter%",
    "%broadcast%",
    "%send%",
    "%recv%",
    "%dispatch%",
    "%combine%",
    "%Thunk:#%",
    "%XlaModule:#%",
    "%step%",
)


def _like_to_regex(pattern: str) -> str:
    core = ".*".join(re.escape(part) for part in pattern.strip("%").split("%"))
    return ("" if pattern.startswith("%") else "^") + core + ("" if pattern.endswith("%") else "$")


LIKE_REGEX = "|".join(_like_to_regex(p) for p in NVTX_LIKE)


def nvtx_ranges(frames: Frames, step_marker: re.Pattern[str] | None = None) -> pd.DataFrame:
    """The NVTX ranges of interest, with their family flags; other rows dropped."""
    nv = frames.nvtx
    if not len(nv):
        return pd.DataFrame()
    nv = nv[nv["start"].notna() & nv["end"].notna() & nv["text"].notna()].copy()
    nv["start"] = ints(nv["start"], len(nv))
    nv["end"] = ints(nv["end"], len(nv))
    nv["tid"] = ints(nv["tid"], len(nv), 0)
    nv["domain"] = ints(nv["domain"], len(nv), 0)
    nv = nv[nv["end"] >= nv["start"]]
    # the SQL pre-filter, as one vectorized regex (parquet input has no SQL to do it)
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = pa.array(nv["text"].astype(str).to_numpy(dtype=object), type=pa.string())
    wanted = pc.match_substring_regex(texts, LIKE_REGEX, ignore_case=True).to_numpy(zero_copy_only=False)
    if step_marker is not None:
        wanted = wanted | pc.match_substring_regex(texts, step_marker.pattern).to_numpy(zero_copy_only=False)
    nv = nv[wanted]
    # classify each distinct text once
    codes, uniques = pd.factorize(nv["text"].astype(str).to_numpy(dtype=object))
    clean = np.array([TORCH_SUFFIX.sub("", u).strip() for u in uniques], dtype=object)
    nccl = np.array([bool(NCCL_CALL.match(c)) for c in clean], dtype=bool)
    vocab = vocabulary()
    annot = np.array([vocab.is_comm_range(c) for c in clean], dtype=bool)
    thunk = np.array([(m.group(1) if (m := THUNK.search(c)) else "") for c in clean], dtype=object)
    module = np.array([(m.group(1) if (m := XLA_MODULE.search(c)) else "") for c in clean], dtype=object)
    step = np.array(
        [bool(vocab.step_range.match(c)) or bool(step_marker and step_marker.search(c)) for c in clean], dtype=bool
    )
    nv["clean"] = clean[codes]
    domain_names = np.array(
        [frames.domains.get(int(d), "").strip().lower() for d in nv["domain"].unique()], dtype=object
    )
    nccl_domain = {d: name in _NCCL_DOMAINS for d, name in zip(nv["domain"].unique(), domain_names)}
    in_nccl_domain = nv["domain"].map(nccl_domain).to_numpy(dtype=bool)
    nv["is_nccl"] = nccl[codes] & in_nccl_domain
    nv["is_annotation"] = annot[codes] & ~nv["is_nccl"].to_numpy()
    nv["thunk_kv"] = thunk[codes]
    nv["module_kv"] = module[codes]
    nv["is_step"] = step[codes]
    keep = nv["is_nccl"] | nv["is_annotation"] | (nv["thunk_kv"] != "") | (nv["module_kv"] != "") | nv["is_step"]
    return nv[keep].reset_index(drop=True)


def innermost(
    r_tid: np.ndarray, r_start: np.ndarray, r_end: np.ndarray, q_tid: np.ndarray, q_t: np.ndarray
) -> np.ndarray:
    """For each query (thread, t), the index of the range on that thread that contains t and
    started last (the innermost, when ranges nest), or -1.

    Ranges sorted by (thread, start); the candidate is the last one starting at or
    before t; if it has ended, a sparse table of running maxima of the ends finds,
    in log2(n) vectorized jumps, the last earlier range still open at t.
    """
    n, m = len(r_start), len(q_t)
    out = np.full(m, -1, dtype=np.int64)
    if n == 0 or m == 0:
        return out
    codes, _ = pd.factorize(np.concatenate([np.asarray(r_tid, dtype=np.int64), np.asarray(q_tid, dtype=np.int64)]))
    rc, qc = codes[:n], codes[n:]
    r_start = np.asarray(r_start, dtype=np.int64)
    r_end = np.asarray(r_end, dtype=np.int64)
    q_t = np.asarray(q_t, dtype=np.int64)
    order = np.lexsort((-r_end, r_start, rc))
    rc_s, rs_s, re_s = rc[order], r_start[order], r_end[order]
    # merge ranges and queries by (thread, time); a range starting at t counts as started
    kind = np.r_[np.zeros(n, dtype=np.int8), np.ones(m, dtype=np.int8)]
    merged = np.lexsort((kind, np.r_[rs_s, q_t], np.r_[rc_s, qc]))  # stable: ranges keep their order
    is_range = kind[merged] == 0
    last = np.cumsum(is_range) - 1
    cand = np.empty(m, dtype=np.int64)
    cand[merged[~is_range] - n] = last[~is_range]
    valid = cand >= 0
    valid[valid] = rc_s[cand[valid]] == qc[valid]
    p = np.where(valid, cand, -1)
    open_now = valid & (re_s[np.maximum(p, 0)] > q_t)
    pending = valid & ~open_now
    if pending.any():
        uniq_end = np.unique(re_s)
        ends = np.searchsorted(uniq_end, re_s).astype(np.int32)
        need = np.searchsorted(uniq_end, q_t, side="right")  # end > t  <=>  rank(end) >= need
        levels = [ends]
        while (1 << len(levels)) <= n:
            prev, half = levels[-1], 1 << (len(levels) - 1)
            nxt = prev.copy()
            nxt[half:] = np.maximum(prev[half:], prev[:-half])
            levels.append(nxt)
        idx = np.flatnonzero(pending)
        pos, thr = p[idx], need[idx]
        for k in range(len(levels) - 1, -1, -1):
            live = pos >= 0
            block = levels[k][np.maximum(pos, 0)]
            jump = live & (block < thr)
            pos = np.where(jump, pos - (1 << k), pos)
        found = pos >= 0
        found[found] = rc_s[pos[found]] == qc[idx[found]]
        p[idx] = np.where(found, pos, -1)
        open_now[idx] = found
    out[open_now] = order[p[open_now]]
    return out


def kv_columns(kv: np.ndarray) -> dict[str, np.ndarray]:
    """ "hlo_op=fusion.3,hlo_module=jit_f,program_id=7" strings -> one column per key (per unique string)."""
    codes, uniques = pd.factorize(kv)
    parsed = [dict(_KV.findall(u)) for u in uniques]
    keys = {k for p in parsed for k in p}
    return {k: np.array([p.get(k, "") for p in parsed], dtype=object)[codes] for k in keys}
