"""NCCL's NVTX extended payloads (``--include-blobs`` / ``--include-json``): bytes, communicator, rank and peer
of each NCCL call, decoded with the file's own payload schemas; the members of each communicator."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from .columns import ints
from .tables import PID_SHIFT

# nvToolsExtPayload.h entry types -> (bytes, signed), LP64
_NVTX_TYPES = {
    1: (1, True),
    2: (1, False),
    3: (2, True),
    4: (2, False),
    5: (4, True),
    6: (4, False),
    7: (8, True),
    8: (8, False),
    9: (8, True),
    10: (8, False),
    11: (1, True),
    12: (1, False),
    13: (2, True),
    14: (2, False),
    15: (4, True),
    16: (4, False),
    17: (8, True),
    18: (8, False),
    22: (8, False),
    23: (8, False),
}


# binaryData = [domainId u64][schemaId u64][payload size u64][payload offset u64] + payload
_BLOB_HEADER = 32


PAYLOAD_FIELDS = ("comm", "nranks", "rank", "cudadev", "nbytes", "peer", "root")


def _payload_field(key: str) -> str | None:
    """Which NCCL payload field an entry name ("Message size [bytes]", "Peer rank"...) is."""
    k = re.sub(r"[^a-z0-9]", "", key.lower())
    if "communicator" in k or k in ("comm", "commid", "commhash"):
        return "comm"
    if "peer" in k:
        return "peer"
    if k in ("noofranks", "nranks", "numranks", "commsize"):
        return "nranks"
    if k in ("rank", "myrank"):
        return "rank"
    if "cudadevice" in k or k == "cudadev":
        return "cudadev"
    if "messagesize" in k or k in ("bytes", "nbytes", "msgsize"):
        return "nbytes"
    if k in ("root", "rootrank"):
        return "root"
    return None


def decode_payloads(calls: pd.DataFrame, schemas: pd.DataFrame | None) -> pd.DataFrame:
    """NCCL NVTX payload fields per call (NaN where not exported): from ``jsonText`` or
    from ``binaryData`` decoded with the file's own payload schemas."""
    n = len(calls)
    out = pd.DataFrame({f: np.full(n, np.nan) for f in PAYLOAD_FIELDS})
    if "blob" in calls and schemas is not None and len(schemas):
        _decode_blobs(calls["blob"], schemas, out)
    if "json" in calls:
        js = calls["json"]
        rows = np.flatnonzero(js.notna().to_numpy() & (js.astype(str).str.len().to_numpy() > 1))
        # one json.loads per NCCL call that carries a payload: the format has no columnar form
        for r in rows:
            for key, value in _json_leaves(js.iloc[r]):
                name = _payload_field(key)
                if name is not None and pd.isna(out.at[r, name]):  # type: ignore[arg-type]
                    out.at[r, name] = value
    return out


def _json_leaves(text: object) -> list[tuple[str, float]]:
    try:
        doc = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return []
    leaves: list[tuple[str, float]] = []
    stack = [("", doc)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            # {"name": "Peer rank", "value": 3} style entries name themselves
            if isinstance(value.get("name"), str) and "value" in value and not isinstance(value["value"], dict):
                stack.append((value["name"], value["value"]))
            stack.extend(value.items())
        elif isinstance(value, list):
            stack.extend((key, v) for v in value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            leaves.append((key, float(value)))
        elif isinstance(value, str) and re.fullmatch(r"-?\d+|0x[0-9a-fA-F]+", value.strip()):
            leaves.append((key, float(int(value.strip(), 0))))
    return leaves


def _schema_layouts(schemas: pd.DataFrame) -> dict[tuple[int, int], list[tuple[str, int, int, bool]]]:
    """(domain, schema) -> [(field, offset, size, signed)] for the NCCL fields it holds."""
    layouts: dict[tuple[int, int], list[tuple[str, int, int, bool]]] = {}
    s = schemas.sort_values(["domainId", "schemaId", "idx"])
    for (dom, sch), entries in s.groupby(["domainId", "schemaId"], sort=False):
        fields: list[tuple[str, int, int, bool]] = []
        pos: int | None = 0
        for typ, name, off in zip(
            entries["type"], entries["name"], entries["offset"] if "offset" in entries else [None] * len(entries)
        ):
            size, signed = _NVTX_TYPES.get(int(typ), (0, False)) if pd.notna(typ) else (0, False)
            explicit = pd.to_numeric(pd.Series([off]), errors="coerce").iloc[0]
            if pd.notna(explicit) and (int(explicit) > 0 or pos == 0):
                pos = int(explicit)
            elif pos is not None and size:
                pos = -(-pos // size) * size  # self-aligned, as NVTX lays out an implicit offset
            name_field = _payload_field(str(name or ""))
            if pos is not None and size and name_field:
                fields.append((name_field, pos, size, signed))
            pos = pos + size if (pos is not None and size) else None  # unknown size: next offset unknown
        if fields:
            layouts[(int(dom), int(sch))] = fields  # type: ignore[call-overload]
    return layouts


def _decode_blobs(blobs: pd.Series, schemas: pd.DataFrame, out: pd.DataFrame) -> None:
    import pyarrow as pa

    values = blobs.to_numpy(dtype=object)
    if any(isinstance(v, str) for v in values):
        # SQLite hands blobs over as hex text (one conversion per NCCL call that carries a payload)
        values = np.array([_unhex(v) if isinstance(v, str) else v for v in values], dtype=object)
    try:
        arr = pa.array(values, type=pa.binary(), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # mixed column (text where a blob was expected): keep the blobs only
        arr = pa.array([v if isinstance(v, (bytes, bytearray)) else None for v in values], type=pa.binary())
    if arr.null_count == len(arr):
        return
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    rows = np.flatnonzero(lengths >= _BLOB_HEADER)
    if not len(rows):
        return
    header = data[offsets[rows, None] + np.arange(_BLOB_HEADER)].copy().view("<u8")  # (rows, 4)
    dom, sch, size, poff = header[:, 0], header[:, 1], header[:, 2], header[:, 3]
    fits = (poff >= _BLOB_HEADER) & (poff + size <= lengths[rows].astype(np.uint64))
    layouts = _schema_layouts(schemas)
    for (d, sc), fields in layouts.items():
        sel = fits & (dom == np.uint64(d)) & (sch == np.uint64(sc))
        if not sel.any():
            continue
        r = rows[sel]
        base = offsets[r] + poff[sel].astype(np.int64)
        for name, off, width, signed in fields:
            inside = off + width <= size[sel].astype(np.int64)
            if not inside.any():
                continue
            raw_bytes = data[base[inside, None] + off + np.arange(width)].copy()
            values = raw_bytes.view(f"<{'i' if signed else 'u'}{width}").ravel().astype(np.float64)
            out.loc[r[inside], name] = values


def _unhex(text: str) -> bytes | None:
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


def comm_members(
    calls: pd.DataFrame,
    payload: pd.DataFrame,
    act: pd.DataFrame,
    dev_ids: np.ndarray,
    gpus: np.ndarray,
    host_index: int,
) -> dict[int, dict[int, int]]:
    """Communicator -> {comm rank: global id}, from the payloads of the ncclCommInit* calls:
    the rank's process is found by thread, its GPU by the activity that process launched."""
    init = payload["comm"].notna() & payload["rank"].notna() & payload["nranks"].notna()
    if not init.any():
        return {}
    pids = ints(act["pid"], len(act))
    launch_pid = np.where(pd.notna(act["launch_tid"]).to_numpy(), ints(act["launch_tid"], len(act)) >> PID_SHIFT, pids)
    by_pid = pd.DataFrame({"pid": launch_pid, "dev": dev_ids}).drop_duplicates()
    one = by_pid.groupby("pid")["dev"].agg(lambda d: int(d.iloc[0]) if len(d) == 1 else -1)
    p = payload[init]
    tids = calls.loc[init, "tid"].to_numpy(dtype=np.int64) >> PID_SHIFT
    devs = one.reindex(tids).fillna(-1).to_numpy(dtype=np.int64)
    members: dict[int, dict[int, int]] = {}
    nranks: dict[int, int] = {}
    for comm, rank, size, dev in zip(p["comm"], p["rank"], p["nranks"], devs):
        if dev < 0 or dev not in gpus:
            continue
        gid = host_index * len(gpus) + int(np.searchsorted(gpus, dev))
        members.setdefault(int(comm), {})[int(rank)] = gid
        nranks[int(comm)] = int(size)
    # only communicators whose every rank is in this file name a usable group
    return {c: m for c, m in members.items() if len(m) == nranks[c]}


def groups(
    coll: np.ndarray, comm: np.ndarray, peers: np.ndarray, gid: np.ndarray, members: dict[int, dict[int, int]]
) -> np.ndarray:
    """Comma-separated global ids of each launch's communicating group ("" unknown)."""
    out = np.full(len(coll), "", dtype=object)
    key = pd.MultiIndex.from_arrays(
        [coll.astype(str), np.nan_to_num(comm, nan=-1).astype(np.int64), peers.astype(str), gid]
    )
    codes, uniques = pd.factorize(key)
    values = np.full(len(uniques), "", dtype=object)
    for i, (name, c, peer_list, own) in enumerate(uniques):
        ranks = members.get(int(c))
        if not name or ranks is None:
            continue
        if name in ("send", "recv", "send_recv", "all_to_all") and peer_list:
            wanted = [int(x) for x in peer_list.split(",")]
            if any(r not in ranks for r in wanted):
                continue
            ids = {int(own), *(ranks[r] for r in wanted)}
        elif name in ("send", "recv", "send_recv"):
            continue  # a p2p exchange whose peers were not exported
        else:
            ids = set(ranks.values())
        values[i] = ",".join(str(x) for x in sorted(ids))
    out[:] = values[codes]
    return out
