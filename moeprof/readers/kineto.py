"""PyTorch Kineto JSON (``*.pt.trace.json[.gz]``): what ``torch.profiler`` writes, one file per rank.

Device activity is read from ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` events
(ph ``X``) only; runtime calls, CPU ops, Python frames and ``gpu_user_annotation``
ranges are host-side or re-describe kernels, so they are never activity.

Collective evidence for a device activity, strongest first:

1. its own args (``Collective name``, ``Process Group Ranks``, ``In/Out msg nelems``,
   ``dtype``), which recent PyTorch attaches to NCCL kernels;
2. the CPU side of its launch. The launch is the ``cuda_runtime``/``cuda_driver``
   call with the same ``correlation`` (else the ``ac2g`` flow start with that id,
   else the CPU op whose ``External id`` the kernel carries). On the launching
   thread, the innermost enclosing ``record_param_comms`` gives collective, group
   and size; the innermost enclosing comm-ish range (``nccl:all_to_all``,
   ``c10d::alltoall_base_``, DeepSeek's ``dispatch(F)``/``combine(B)``...) becomes
   ``annotation``.

Ranks: ``R`` from ``distributedInfo.rank``, else the file name (``worker3``,
``rank-1``), else ``host_index``; host ``rank<R>``, device ``rank<R>/GPU:<n>``,
global id ``R``. ``ProfilerStep#N`` ranges become ``step`` marker rows.

The file is read through ``kineto_columns`` (one msgspec pass into typed columns of
the four categories above); everything here works on those columns.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.events import empty_table, make_table, us_interval_to_ns
from ..core.roofline import shape_counts
from ..core.steps import step_marker_pattern
from ..core.trace import GPU, Job, Trace, empty_markers, make_markers, trailing_number
from ..core.traffic import empty_splits
from ..core.vocabulary import vocabulary
from ..errors import InputError
from ..options import LoadOptions
from .base import ReadContext
from .kineto_columns import CPU_CATS, KinetoColumns, columns_of_document
from .kineto_scopes import kernel_scopes
from .kineto_splits import alltoall_calls

DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}  # kineto_columns' order
_MARKER_KEYS = ("deviceProperties", "distributedInfo", "schemaVersion")
DEFAULT_GPUS_PER_NODE = 8
MAX_GROUP_SIZE = 1 << 20  # a "Group size" beyond this is not believed (a group of it is spelled out rank by rank)

_RECORD_PARAM_COMMS = "record_param_comms"
# Collective names of a point-to-point call as record_param_comms writes them: the peer is Dst Rank on a send,
# Src Rank on a recv
_SEND_NAMES = frozenset({"send", "isend", "_send"})
_RECV_NAMES = frozenset({"recv", "irecv", "_recv", "recv_anysource"})
# rank in a file name: an explicit word first, else the only number in the stem
# (Kineto's default "<host>_<pid>.<time>" has two numbers and is not a rank)
_RANK_WORD = re.compile(r"(?i)(?:^|[^a-z])(?:rank|worker|r)[-_]?(\d+)")
_DIGITS = re.compile(r"\d+")
_TRACE_SUFFIX = re.compile(r"(?i)(\.pt)?(\.trace)?\.json(\.gz)?$")
# element sizes of torch dtypes as record_param_comms spells them (c10 ScalarType names)
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "byte": 1,
    "uint8": 1,
    "char": 1,
    "int8": 1,
    "short": 2,
    "int16": 2,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "bool": 1,
    "complexhalf": 4,
    "complexfloat": 8,
    "complexdouble": 16,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
}


def is_kineto(doc: object) -> bool:
    """Whether a decoded JSON document (or its columns) is a Kineto trace (metadata keys, or GPU activity)."""
    if isinstance(doc, KinetoColumns):
        return doc.is_kineto
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return False
    if any(k in doc for k in _MARKER_KEYS):
        return True
    return any(isinstance(e, dict) and e.get("cat") in DEVICE_CATS for e in doc["traceEvents"])


# one exact float-µs to ns conversion for every JSON reader
us_pair_to_ns = us_interval_to_ns


def read_kineto(doc: dict | KinetoColumns, path: Path, context: ReadContext | None = None) -> Trace:
    """Read one Kineto trace: device activity (raw columns), step markers, rank and process groups.

    ``doc`` is the trace's columns (``kineto_columns.decode_columns``, what the file reader
    passes) or an already decoded document (a dict, as json/orjson give it).

    Timestamps: ``start_ns = rint(ts*1e3)`` and ``end_ns = rint(ts*1e3 + dur*1e3)``
    (nearest ns, computed exactly even for epoch-sized ``ts``; see ``us_pair_to_ns``).
    A negative ``dur`` is clipped to 0. A trace without GPU activity gives an empty
    table (the caller decides whether that is an error).
    """
    context = context or ReadContext()
    options = context.options
    host_index = context.placement.host_index
    if isinstance(doc, KinetoColumns):
        cols = doc
    else:
        if not isinstance(doc, dict):
            raise InputError(path, "not a Kineto trace: the JSON top level is not an object")
        if not isinstance(doc.get("traceEvents"), list):
            raise InputError(path, "not a Kineto trace: no traceEvents list")
        cols = columns_of_document(doc, path)

    recorded_splits = bool(len(cols.shapes)) or bool((cols.cpu.in_split >= 0).any() if len(cols.cpu) else False)
    if not len(cols.device) and not recorded_splits:
        launches = launch_facts(cols, cols.name_array(), _Threads(cols.values)) if len(cols.launch) else {}
        return Trace(events=empty_table(), path=str(path), format="kineto", framework="pytorch", launches=launches)

    meta = cols.meta
    rank = _rank(meta, path, host_index)
    host = f"rank{rank}"
    gpus = _gpus_per_domain(meta, options)
    dist_info = meta.get("distributedInfo")
    dist: dict = dist_info if isinstance(dist_info, dict) else {}
    world = _as_int(dist.get("world_size"))
    if world is not None and not 0 < world <= MAX_GROUP_SIZE:
        world = None  # no job has that many ranks: the whole-job rule and world groups would not fit in memory
    pg_ranks = _pg_config_ranks(dist)
    names = cols.name_array()
    threads = _Threads(cols.values)

    dev = _device_columns(cols, names, path, host)
    n = len(dev["name"])
    collective = np.full(n, "", dtype=object)
    group = np.full(n, "", dtype=object)
    nbytes = dev["bytes"]
    annotation = np.full(n, "", dtype=object)

    # 1. the kernel's own args (a step repeats the same calls: each distinct set is decoded once)
    comm = _CommFields(cols.comm_args, pg_ranks, world)
    own = np.flatnonzero(cols.device.own_comm)
    if own.size:
        o_coll, o_group, o_bytes = comm.of(cols.device.comm[own])
        collective[own], group[own] = o_coll, o_group
        sized = ~np.isnan(o_bytes)
        nbytes[own[sized]] = o_bytes[sized]

    # 2. the CPU side of the launch: only the few ranges that can carry evidence are decoded
    cpu = cols.cpu
    # CPU ops and annotations; Python frames (python_function) are read for the module hierarchy only
    host_rows = np.flatnonzero(cpu.cat != CPU_CATS.index("python_function"))
    used_names, host_codes = np.unique(cpu.name[host_rows], return_inverse=True)
    codes = np.full(len(cpu), -1, dtype=np.int64)
    codes[host_rows] = host_codes
    unique_names = names[used_names]
    vocab = vocabulary()
    comm_like = np.array([vocab.is_comm_range(u) for u in unique_names], dtype=bool)
    is_rpc = unique_names == _RECORD_PARAM_COMMS
    step_no = np.array(
        [trailing_number(m.group(1)) if (m := vocab.profiler_step.match(u)) else -1 for u in unique_names],
        dtype=np.int64,
    )
    user_step = step_marker_pattern(options.step_marker)
    if user_step is not None:
        # ranges the user names as steps (--step-marker): numbered by their trailing digits, else in order
        for i, u in enumerate(unique_names):
            if step_no[i] < 0 and user_step.search(u):
                number = trailing_number(u)
                step_no[i] = number if number >= 0 else _BY_ORDER
    is_step = (step_no >= 0) | (step_no == _BY_ORDER)
    keep = host_rows[(comm_like | is_rpc | is_step)[host_codes]] if len(unique_names) else np.zeros(0, int)
    ranges = _ranges(cols, names, threads, keep, path)
    kept_codes = codes[keep]
    range_thread = ranges["thread"]
    anchor_thread, anchor_t, launch_end = _anchors(cols, threads, path)

    def innermost_of(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sel = np.flatnonzero(mask[kept_codes]) if len(keep) else np.zeros(0, dtype=np.int64)
        return sel, _innermost(range_thread[sel], ranges["start"][sel], ranges["end"][sel], anchor_thread, anchor_t)

    sel, hit = innermost_of(comm_like)
    found = np.flatnonzero(hit >= 0)
    annotation[found] = ranges["name"][sel[hit[found]]]
    # the record_function stack around each launch, and the forward op a backward kernel serves
    step_rows = np.zeros(len(cpu), dtype=bool)
    step_rows[host_rows] = is_step[host_codes] if len(unique_names) else False
    scope, component, backward, launcher = kernel_scopes(
        cols, names, threads, step_rows, anchor_thread, anchor_t, _innermost, launching=bool(cols.shapes)
    )
    shape_flops, shape_bytes = _shape_counts(
        cols, names, launcher, dev["end"] - dev["start"], dev["activity"] == "kernel"
    )

    # spec §8 rule 1: the launching record_param_comms is the one whose External id the kernel carries;
    # an op nested inside a call's range (a copy, a cat) launches its own kernels, not the call's
    sel = np.flatnonzero(is_rpc[kept_codes]) if len(keep) else np.zeros(0, dtype=np.int64)
    hit = _by_external(ranges["external"][sel], cols.device.external)
    used, inverse = np.unique(hit, return_inverse=True)
    # one decode per distinct record_param_comms args, not per kernel; -1 (no enclosing call) decodes to nothing
    call_args = np.full(len(used), -1, dtype=np.int64)
    call_args[used >= 0] = ranges["comm"][sel[used[used >= 0]]]
    r_coll, r_group, r_bytes = comm.of(call_args)
    # fill only what the kernel's own args left empty; copies keep the bytes they moved
    fill = collective == ""
    collective[fill] = r_coll[inverse][fill]
    fill = group == ""
    group[fill] = r_group[inverse][fill]
    fill = np.isnan(nbytes) & (dev["activity"] == "kernel")
    nbytes[fill] = r_bytes[inverse][fill]

    # the ledger's match key (spec §8 rule 1): process group, sequence number, p2p or not, and a p2p call's peer
    d = cols.device
    own_pg = comm.group_names(d.comm)
    rpc_rows = np.where(hit >= 0, sel[np.maximum(hit, 0)], -1) if sel.size else np.full(n, -1, dtype=np.int64)
    call = rpc_rows >= 0
    rpc_pg = np.full(n, "", dtype=object)
    rpc_pg[call] = comm.group_names(ranges["comm"][rpc_rows[call]])
    pg = np.where(own_pg != "", own_pg, rpc_pg)

    def per_call(column: str) -> np.ndarray:
        own = d.columns[column].astype(np.int64)
        from_call = np.full(n, -1, dtype=np.int64)
        from_call[call] = ranges[column][rpc_rows[call]]
        return np.where(own >= 0, own, from_call)

    seq = per_call("seq")
    # the peer of a send/recv: a global rank (PyTorch writes groupRanks[peer]), Dst Rank on a send and
    # Src Rank on a recv; a call that names neither takes the one it has
    dst, src = per_call("dst_rank"), per_call("src_rank")
    used_coll, coll_code = np.unique(collective.astype(str), return_inverse=True)
    is_recv = np.isin(used_coll, list(_RECV_NAMES))[coll_code] if n else np.zeros(0, dtype=bool)
    is_send = np.isin(used_coll, list(_SEND_NAMES))[coll_code] if n else np.zeros(0, dtype=bool)
    peer = np.where(is_recv, src, np.where(is_send, dst, np.where(dst >= 0, dst, src)))
    p2p_name = np.array([bool(vocab.p2p_range.search(c)) for c in used_coll.tolist()], dtype=bool)
    p2p = (peer >= 0) | (p2p_name[coll_code] if n else np.zeros(0, dtype=bool))
    with_peer = np.flatnonzero(p2p & (peer >= 0))
    # the members of a send/recv are its two peers, this rank and the peer
    if with_peer.size:
        pairs = np.stack([np.minimum(rank, peer[with_peer]), np.maximum(rank, peer[with_peer])], axis=1)
        used_pairs, pair_code = np.unique(pairs, axis=0, return_inverse=True)
        texts = np.array([",".join(map(str, sorted({int(a), int(b)}))) for a, b in used_pairs.tolist()], dtype=object)
        group[with_peer] = texts[pair_code.reshape(-1)]

    # every global rank below G sits in domain 0: when the whole job fits one domain,
    # any group this rank talks to is local, whatever it is. That group is assumed, not read: the links
    # use it, the ledger does not (§8: a group the trace does not name matches only by rule 4)
    group_assumed = np.zeros(n, dtype=bool)
    if world is not None and 0 < world <= gpus:
        group_assumed = (group == "") & ((collective != "") | (annotation != ""))
        group[group_assumed] = ",".join(map(str, range(world)))

    table = make_table(
        {
            "host": host,
            "device": dev["device"],
            "global_id": np.full(n, rank, dtype=np.int64),
            "gpus_per_domain": gpus,
            "stream": dev["stream"],
            "name": dev["name"],
            "start_ns": dev["start"],
            "end_ns": dev["end"],
            "activity": dev["activity"],
            "copy_kind": dev["copy_kind"],
            "collective": collective,
            "annotation": annotation,
            "scope": scope,
            "component": component,
            "backward": backward,
            "bytes": nbytes,
            "group": group,
            "group_assumed": group_assumed,
            "pg": pg,
            "seq": seq,
            "p2p": p2p,
            "source": "kineto",
            # spec §10: GEMM and attention kernels counted from their launching op's shapes (moeprof's own count)
            "recounted_flops": shape_flops,
            "hbm_bytes": shape_bytes,
            # §9: the call's return; a call that returned after its activity ended waited for it (a
            # synchronous copy): the host issued it at the call's start
            "launch_ns": np.where((launch_end >= 0) & (launch_end > dev["end"]), anchor_t, launch_end),
            "launch_thread": np.where(launch_end >= 0, anchor_thread.astype(str).astype(object), ""),
        }
    )
    table = table.sort_values("start_ns", kind="stable", ignore_index=True)
    markers = _step_markers(ranges, step_no[kept_codes], host)
    splits = (
        alltoall_calls(
            cols, names, threads, rank, world, comm.of, pg_ranks, markers, _elem_bytes, us_pair_to_ns, torch_dtype
        )
        if recorded_splits
        else None
    )
    return Trace(
        events=table,
        path=str(path),
        format="kineto",
        markers=markers,
        framework="pytorch",
        annotations=tuple(str(u) for u in unique_names),
        process_groups={name: tuple(ranks) for name, ranks in pg_ranks.items()},
        job=Job(rank=rank, world_size=world, gpus_per_node=gpus),
        devices={str(d): rank for d in pd.unique(dev["device"])},
        host_syncs=_host_syncs(cols, names, threads, pd.unique(dev["device"])),
        host_range_ns=_longest(ranges, comm_like[kept_codes] if len(keep) else np.zeros(0, dtype=bool)),
        launches=launch_facts(cols, names, threads),
        device_models=_device_models(meta, [str(d) for d in pd.unique(dev["device"])]),
        device_kinds=dict.fromkeys((str(d) for d in pd.unique(dev["device"])), GPU),
        alltoall_splits=splits if splits is not None else empty_splits(),
    )


# PyTorch's spellings of a dtype (c10 ScalarType names, C++ type names in Input type) -> its torch name
_TORCH_DTYPE = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "longint": "int64",
                "longlong": "int64", "int": "int32", "short": "int16", "char": "int8", "signedchar": "int8",
                "byte": "uint8", "unsignedchar": "uint8"}  # fmt: skip


def torch_dtype(dtype: str) -> str:
    """A dtype as torch names it (``bfloat16``, ``float32``, ``int64``) from PyTorch's trace spellings
    (``c10::BFloat16``, ``Float``, ``long int``); "" unknown."""
    name = dtype.strip().lower().removeprefix("c10::").replace(" ", "")
    return _TORCH_DTYPE.get(name, name)


def _elem_bytes(dtype: str) -> int | None:
    """Bytes of one element of a dtype as PyTorch names it (``Float``, ``c10::BFloat16``, ``long int``)."""
    return _DTYPE_BYTES.get(torch_dtype(dtype))


def launch_facts(cols: KinetoColumns, names: np.ndarray, threads: _Threads) -> dict[str, object]:
    """What the host's kernel launches say (``Trace.launches``): ``kernel_launches``, those whose correlation
    id no device activity of the file carries (``without_activity``), those issued inside a stream capture
    (``captured``: between a ``cudaStreamBeginCapture``/``hipStreamBeginCapture`` and its ``...EndCapture``
    on the same thread: they record a graph and do not run) and the call that opened it (``capture_api``)."""
    launch = cols.launch
    if not len(launch):
        return {}
    vocab = vocabulary()
    codes, inverse = np.unique(launch.name, return_inverse=True)
    text = [str(names[c]) if c >= 0 else "" for c in codes.tolist()]

    def calls(pattern: re.Pattern[str]) -> np.ndarray:
        return np.array([bool(pattern.search(t)) for t in text], dtype=bool)[inverse]

    is_launch, begin, end = calls(vocab.kernel_launch), calls(vocab.capture_begin), calls(vocab.capture_end)
    if not is_launch.any():
        return {}
    device_ids = cols.device.correlation[cols.device.correlation >= 0]
    unmatched = is_launch & ~np.isin(launch.correlation, device_ids)
    captured = np.zeros(len(launch), dtype=bool)
    api = ""
    if begin.any():
        thread = threads(launch.pid, launch.tid)
        ts = launch.ts
        api = text[int(codes.tolist().index(launch.name[np.flatnonzero(begin)[0]]))]
        for t in np.unique(thread[begin]).tolist():
            mine = thread == t
            opens = np.sort(ts[begin & mine])
            closes = np.sort(ts[end & mine])
            # each capture runs from its begin to the first end after it (to the file's end when none comes)
            after = np.searchsorted(closes, opens, side="left")
            stops = np.where(after < closes.size, closes[np.minimum(after, max(closes.size - 1, 0))], np.inf)
            at = np.searchsorted(opens, ts, side="right") - 1
            inside = (at >= 0) & (ts < stops[np.maximum(at, 0)]) if opens.size else np.zeros(len(ts), dtype=bool)
            captured |= mine & is_launch & inside
    return {
        "kernel_launches": int(is_launch.sum()),
        "without_activity": int(unmatched.sum()),
        "captured": int(captured.sum()),
        "captured_without_activity": int((captured & unmatched).sum()),
        "capture_api": api,
    }


def _longest(ranges: dict, comm: np.ndarray) -> dict[str, int]:
    """The longest duration of each name among the kept ranges that name communication (``comm``)."""
    if not comm.any():
        return {}
    frame = pd.DataFrame({"name": ranges["name"][comm].astype(str), "ns": (ranges["end"] - ranges["start"])[comm]})
    return {str(k): int(v) for k, v in frame.groupby("name", sort=True)["ns"].max().items()}


def _device_models(meta: dict, devices: list[str]) -> dict[str, str]:
    """Device -> GPU model from ``deviceProperties`` (``[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}, ...]``).

    A device ``rankR/GPU:g`` takes the entry whose id is ``g``; where every entry names one model,
    every device has it (a rank file's device may be numbered past the entries it lists).
    """
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return {}
    by_id: dict[int, str] = {}
    for entry in props:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"].strip():
            gid = _as_int(entry.get("id"))
            by_id[gid if gid is not None else len(by_id)] = entry["name"].strip()
    names = set(by_id.values())
    out = {}
    for device in devices:
        gpu = _as_int(device.rpartition("GPU:")[2])
        name = by_id.get(gpu) if gpu is not None else None
        if name is None and len(names) == 1:
            (name,) = names
        if name:
            out[device] = name
    return out


# ---- decoding -------------------------------------------------------------------------------


_INT64 = 2**63


def _as_int(value: object) -> int | None:
    """An integer (or an integral float or numeric string) within int64, else None."""
    if isinstance(value, bool):
        return None
    out: int | None = None
    if isinstance(value, int):
        out = value
    elif isinstance(value, float) and value.is_integer():
        out = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 20:
        out = int(value)
    return out if out is not None and -_INT64 <= out < _INT64 else None


def _rank(doc: dict, path: Path, host_index: int) -> int:
    info = doc.get("distributedInfo")
    if isinstance(info, dict):
        rank = _as_int(info.get("rank"))
        if rank is not None and rank >= 0:
            return rank
    stem = _TRACE_SUFFIX.sub("", path.name)
    m = _RANK_WORD.search(stem)
    if m:
        return int(m.group(1))
    numbers = _DIGITS.findall(stem)
    if len(numbers) == 1:
        return int(numbers[0])
    return host_index


def _gpus_per_domain(doc: dict, options: LoadOptions) -> int:
    if options.gpus_per_node:
        return int(options.gpus_per_node)
    props = doc.get("deviceProperties")
    if isinstance(props, list) and props:
        return len(props)
    return DEFAULT_GPUS_PER_NODE


def _pg_config_ranks(dist: dict) -> dict[str, list[int]]:
    """Process group name -> global ranks, from ``distributedInfo.pg_config`` (newer PyTorch)."""
    out: dict[str, list[int]] = {}
    config = dist.get("pg_config")
    if isinstance(config, list):
        for pg in config:
            if isinstance(pg, dict) and isinstance(pg.get("ranks"), list):
                ranks = [r for r in (_as_int(x) for x in pg["ranks"]) if r is not None]
                out[str(pg.get("pg_name"))] = ranks
    return out


def _parse_ranks(value: object) -> list[int] | None:
    """``"[0, 1, 2]"`` (or a list) to ranks; None when absent, empty or abbreviated."""
    if isinstance(value, list):
        parsed = [_as_int(x) for x in value]
        ranks = [r for r in parsed if r is not None]
        return ranks if ranks and len(ranks) == len(parsed) else None
    if isinstance(value, str) and "..." not in value:
        ranks = [int(x) for x in re.findall(r"-?\d+", value)]
        return ranks or None
    return None


def _comm_fields(args: dict, pg_ranks: dict[str, list[int]], world: int | None) -> tuple[str, str, float]:
    """(collective, group, bytes) from ``record_param_comms``-style args; "" / NaN when absent."""
    name = args.get("Collective name")
    collective = name if isinstance(name, str) else ""
    ranks = _parse_ranks(args.get("Process Group Ranks"))
    size = _as_int(args.get("Group size"))
    if ranks is None:
        ranks = pg_ranks.get(str(args.get("Process Group Name"))) if "Process Group Name" in args else None
    if size is not None and not 0 < size <= MAX_GROUP_SIZE:
        size = None  # no job has that many ranks: a group of it would not fit in memory
    if ranks is None and size:
        start, stride = _as_int(args.get("Global rank start")), _as_int(args.get("Global rank stride"))
        if start is not None and stride:
            ranks = list(range(start, start + size * stride, stride))
        elif world is not None and size == world:
            ranks = list(range(world))  # a group of every rank is the world, whichever it is
    group = ",".join(map(str, ranks)) if ranks else ""
    return collective, group, _nccl_tests_bytes(args)


class _CommFields:
    """``_comm_fields`` of the trace's distinct collective args (``KinetoColumns.comm_args``), each decoded once."""

    def __init__(self, table: list[dict], pg_ranks: dict[str, list[int]], world: int | None) -> None:
        self.table, self.pg_ranks, self.world = table, pg_ranks, world
        self.done: dict[int, tuple[str, str, float]] = {}

    def of(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(collective, group, bytes) columns for comm codes (-1: none, "" / NaN)."""
        used, inverse = np.unique(codes, return_inverse=True)
        fields = [self._one(int(c)) for c in used]
        coll = np.array([f[0] for f in fields], dtype=object)
        group = np.array([f[1] for f in fields], dtype=object)
        size = np.array([f[2] for f in fields], dtype=np.float64)
        return coll[inverse], group[inverse], size[inverse]

    def group_names(self, codes: np.ndarray) -> np.ndarray:
        """The process group name of each comm code ("" none): with the ranks, what identifies a group."""
        used, inverse = np.unique(codes, return_inverse=True)
        names = np.array(
            [str(self.table[c].get("Process Group Name") or "") if c >= 0 else "" for c in used.tolist()],
            dtype=object,
        )
        return names[inverse] if len(used) else np.zeros(0, dtype=object)

    def _one(self, code: int) -> tuple[str, str, float]:
        if code < 0:
            return "", "", float("nan")
        hit = self.done.get(code)
        if hit is None:
            hit = self.done[code] = _comm_fields(self.table[code], self.pg_ranks, self.world)
        return hit


def _nccl_tests_bytes(args: dict) -> float:
    """Size of one call as nccl-tests counts it: the larger of the input and output buffers.

    That is the full buffer for all-reduce/all-to-all/broadcast, the gathered
    output for all-gather and the scattered input for reduce-scatter.
    """
    nin, nout = _as_int(args.get("In msg nelems")), _as_int(args.get("Out msg nelems"))
    dtype = args.get("dtype")
    item = _DTYPE_BYTES.get(dtype.lower()) if isinstance(dtype, str) else None
    counts = [c for c in (nin, nout) if c is not None and c >= 0]
    if item is None or not counts:
        return float("nan")
    return float(max(counts) * item)


def _check_times(ts: np.ndarray, dur: np.ndarray | None, bad: np.ndarray, path: Path, what: str) -> None:
    """The time checks, in their order: every ts a finite number, then every dur (the first failing one is named)."""
    for values, bit in ((ts, 1), (dur, 2)):
        if values is None:
            continue
        if (bad & bit).any():
            raise InputError(path, f"{what} with a timestamp or duration that is not a number")
        if not np.isfinite(values).all():
            raise InputError(path, f"{what} with a timestamp or duration that is not finite")


def _device_columns(cols: KinetoColumns, names: np.ndarray, path: Path, host: str) -> dict[str, np.ndarray]:
    d = cols.device
    _check_times(d.ts, d.dur, d.bad, path, "a GPU event")
    start, end = us_pair_to_ns(d.ts, np.maximum(d.dur, 0.0))  # a negative dur would make end < start
    activity = np.array(list(DEVICE_CATS.values()), dtype=object)[d.cat]
    device = _label(cols.values, d.device, lambda g: f"{host}/GPU:{g}")
    stream_label = _label(cols.values, d.stream, lambda s: f"stream {s}")

    used, codes = np.unique(d.name, return_inverse=True)
    vocab = vocabulary()
    kinds = np.array([vocab.copy_kind(u) for u in names[used]], dtype=object)
    copy_kind = np.where(activity == "memcpy", kinds[codes] if len(used) else "", "").astype(object)
    # memcpy/memset args carry the bytes they moved
    nbytes = np.where(activity != "kernel", d.bytes, np.nan)

    return {
        "name": names[d.name],
        "start": start,
        "end": end,
        "activity": activity,
        "copy_kind": copy_kind,
        "device": device,
        "stream": stream_label,
        "bytes": nbytes,
    }


def _label(values: list, codes: np.ndarray, fmt) -> np.ndarray:
    """Format each distinct value once (devices and streams repeat a lot); None (absent/null) formats as ""."""
    used, inverse = np.unique(codes, return_inverse=True)
    labels = np.array([fmt("" if (v := values[c]) is None else str(v)) for c in used], dtype=object)
    return labels[inverse] if len(used) else np.array([], dtype=object)


class _Threads:
    """Thread ids for (pid, tid) value codes: equal when ``f"{pid}\\x00{tid}"`` is equal (1 and "1" are one)."""

    def __init__(self, values: list) -> None:
        self.values = values
        self.ids: dict[str, int] = {}

    def __call__(self, pids: np.ndarray, tids: np.ndarray) -> np.ndarray:
        width = max(len(self.values), 1)
        pairs, inverse = np.unique(pids.astype(np.int64) * width + tids, return_inverse=True)
        ids = np.array(
            [
                self.ids.setdefault(f"{self.values[p // width]}\x00{self.values[p % width]}", len(self.ids))
                for p in pairs.tolist()
            ],
            dtype=np.int64,
        )
        return ids[inverse] if len(pairs) else np.zeros(0, dtype=np.int64)


def _ranges(cols: KinetoColumns, names: np.ndarray, threads: _Threads, rows: np.ndarray, path: Path) -> dict:
    """The kept CPU ops / user annotations: name, thread id, [start, end] in ns, collective args code."""
    c = cols.cpu
    ts, dur = c.ts[rows], c.dur[rows]
    _check_times(ts, dur, c.bad[rows], path, "a CPU op")
    start, end = us_pair_to_ns(ts, np.maximum(dur, 0.0))
    return {
        "name": names[c.name[rows]],
        "thread": threads(c.pid[rows], c.tid[rows]),
        "start": start,
        "end": end,
        "comm": c.comm[rows],
        "external": c.external[rows],
        "seq": c.seq[rows],
        "src_rank": c.src_rank[rows],
        "dst_rank": c.dst_rank[rows],
    }


def _anchors(cols: KinetoColumns, threads: _Threads, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The launching thread (id; -1 unknown) and launch time (ns) of every device activity, and when its
    launching runtime call returned (-1: no runtime call or ac2g flow names it)."""
    dev = cols.device
    n = len(dev)
    thread = np.full(n, -1, dtype=np.int64)
    t = np.zeros(n, dtype=np.int64)
    launch_end = np.full(n, -1, dtype=np.int64)
    pending = np.ones(n, dtype=bool)

    def take(ids: np.ndarray, own_ids: np.ndarray, launches, is_call: bool = False) -> None:
        # left-join still-pending device rows onto (id -> launch event); first one wins on duplicates
        if not len(ids) or not pending.any():
            return
        lookup = pd.Series(np.arange(len(ids)), index=ids)
        lookup = lookup[~lookup.index.duplicated(keep="first")]
        rows = np.flatnonzero(pending & (own_ids >= 0))
        where = lookup.reindex(own_ids[rows]).to_numpy()
        ok = ~np.isnan(where)
        rows, where = rows[ok], where[ok].astype(np.int64)
        ts = launches.ts[where]
        _check_times(ts, None, launches.bad[where], path, "a launch")
        thread[rows] = threads(launches.pid[where], launches.tid[where])
        t[rows] = us_pair_to_ns(ts)[0]
        if is_call:
            dur = launches.dur[where]
            launch_end[rows] = us_pair_to_ns(ts, np.where(np.isfinite(dur), np.maximum(dur, 0.0), 0.0))[1]
        pending[rows] = False

    if len(cols.launch):
        take(cols.launch.correlation, dev.correlation, cols.launch, is_call=True)
    if pending.any():
        take(cols.flow.id, dev.correlation, cols.flow)
    if pending.any() and len(cols.cpu):
        # last resort: the CPU op the kernel names by External id, at its start
        take(cols.cpu.external, dev.external, cols.cpu)
    return thread, t, launch_end


_SYNC_CALL = re.compile(r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy|Memcpy2D|Memcpy3D)$")


def _host_syncs(cols: KinetoColumns, names: np.ndarray, threads: _Threads, devices: np.ndarray) -> pd.DataFrame:
    """Runtime calls that wait for the device (synchronizations, synchronous copies): device, thread, start,
    end. A file of one device only (the usual one rank, one GPU): with several, which one a call waited for
    is not known."""
    launch = cols.launch
    if not len(launch) or len(devices) != 1:
        return pd.DataFrame(columns=["device", "thread", "start_ns", "end_ns"])
    codes, inverse = np.unique(launch.name, return_inverse=True)
    is_sync = np.array([bool(_SYNC_CALL.match(str(names[c]))) if c >= 0 else False for c in codes.tolist()], bool)
    rows = np.flatnonzero(is_sync[inverse] & (launch.bad == 0) & np.isfinite(launch.dur))
    start, end = us_pair_to_ns(launch.ts[rows], np.maximum(launch.dur[rows], 0.0))
    return pd.DataFrame(
        {
            "device": np.full(rows.size, str(devices[0]), dtype=object),
            "thread": threads(launch.pid[rows], launch.tid[rows]).astype(str).astype(object),
            "start_ns": start,
            "end_ns": end,
        }
    )


def _shape_counts(
    cols: KinetoColumns, names: np.ndarray, launcher: np.ndarray, duration: np.ndarray, kernel: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per device activity: the FLOPs and HBM bytes its launching op's recorded shapes give (core.roofline
    .counts_of_shapes: GEMMs, grouped GEMMs, attention; NaN elsewhere). ``launcher``: each activity's launching op,
    the innermost CPU op around its launch on the launching thread (readers.kineto_scopes). An op that launches
    several kernels shares its counts among them in proportion to their time (``kernel``: the kernels; a memset
    or copy the op issues, cuBLAS clearing its output, does none of its math). Each distinct (op, shapes) is
    counted once."""
    n = launcher.size
    flops, nbytes = np.full(n, np.nan), np.full(n, np.nan)
    if not cols.shapes or not n:
        return flops, nbytes
    shapes = np.where((launcher >= 0) & kernel, cols.cpu.shapes[np.maximum(launcher, 0)], -1)
    launched = np.flatnonzero(shapes >= 0)
    if not launched.size:
        return flops, nbytes
    op_names = names[cols.cpu.name[launcher[launched]]]
    pair_codes, pairs = pd.factorize(pd.MultiIndex.from_arrays([op_names, shapes[launched]]))
    counted = [_counted(str(op), cols.shapes[int(code)]) for op, code in pairs.tolist()]
    f = np.array([c[0] for c in counted], dtype=np.float64)[pair_codes]
    b = np.array([c[1] for c in counted], dtype=np.float64)[pair_codes]
    # each launching op's kernels share its counts by their time
    op_row, inverse = np.unique(launcher[launched], return_inverse=True)
    time = np.maximum(duration[launched].astype(np.float64), 1.0)
    share = time / np.bincount(inverse, weights=time, minlength=op_row.size)[inverse]
    flops[launched], nbytes[launched] = f * share, b * share
    return flops, nbytes


def _counted(op: str, recorded: tuple[Any, Any, Any]) -> tuple[float, float]:
    """FLOPs and HBM bytes of one op from its recorded (Concrete Inputs, Input Dims, Input type)."""
    concrete, dims, types = recorded
    return shape_counts(op, dims, types, concrete)


def _by_external(range_ids: np.ndarray, kernel_ids: np.ndarray) -> np.ndarray:
    """For each kernel, the index of the range whose External id it carries (the first such), else -1."""
    out = np.full(len(kernel_ids), -1, dtype=np.int64)
    valid = np.flatnonzero(range_ids >= 0)
    if not valid.size or not len(kernel_ids):
        return out
    ids, first = np.unique(range_ids[valid], return_index=True)  # np.unique keeps the first occurrence
    pos = np.minimum(np.searchsorted(ids, kernel_ids), ids.size - 1)
    found = (kernel_ids >= 0) & (ids[pos] == kernel_ids)
    out[found] = valid[first[pos[found]]]
    return out


# ---- enclosing ranges ---------------------------------------------------------------------


def _innermost(
    r_thread: np.ndarray, r_start: np.ndarray, r_end: np.ndarray, q_thread: np.ndarray, q_t: np.ndarray
) -> np.ndarray:
    """For each query (thread, t): index of the innermost range of that thread with start <= t <= end, else -1.

    Innermost = the containing range that starts last (nested ranges: the deepest).
    Per thread, ranges sorted by (start, -end); ``searchsorted`` finds the last
    range starting at or before t, and a max-of-ends sparse table walks left, in
    log2(n) vectorized steps, to the last of those still open at t.
    """
    out = np.full(len(q_t), -1, dtype=np.int64)
    if not len(r_start) or not len(q_t):
        return out
    for th in np.intersect1d(np.unique(r_thread), np.unique(q_thread[q_thread >= 0])):
        ridx = np.flatnonzero(r_thread == th)
        ridx = ridx[np.lexsort((-r_end[ridx], r_start[ridx]))]
        starts, ends = r_start[ridx], r_end[ridx]
        qidx = np.flatnonzero(q_thread == th)
        t = q_t[qidx]
        j = np.searchsorted(starts, t, side="right") - 1
        # levels[k][i] = max(ends[i - 2**k + 1 .. i]) (clipped at 0)
        levels = [ends]
        width = 1
        while width * 2 <= len(ends):
            prev = levels[-1]
            nxt = prev.copy()
            nxt[width:] = np.maximum(prev[width:], prev[:-width])
            levels.append(nxt)
            width *= 2
        for k in range(len(levels) - 1, -1, -1):
            live = np.flatnonzero(j >= 0)
            closed = levels[k][j[live]] < t[live]  # every range in this block ended before t
            j[live[closed]] -= 1 << k
        ok = j >= 0
        out[qidx[ok]] = ridx[j[ok]]
    return out


_BY_ORDER = -2  # a step range without a number: numbered by its order among ranges of its name


def _step_markers(ranges: dict, step_no: np.ndarray, host: str) -> pd.DataFrame:
    rows = np.flatnonzero((step_no >= 0) | (step_no == _BY_ORDER))
    if not rows.size:
        return empty_markers()
    frame = pd.DataFrame(
        {
            "name": ranges["name"][rows],
            "start": ranges["start"][rows],
            "end": ranges["end"][rows],
            "step": step_no[rows],
        }
    )
    # a step can appear both as cpu_op and as user_annotation: keep one
    frame = frame.drop_duplicates(["name", "start", "end"]).sort_values("start", kind="stable")
    by_order = frame["step"].to_numpy() == _BY_ORDER
    if by_order.any():
        frame.loc[by_order, "step"] = frame[by_order].groupby("name").cumcount().to_numpy()
    return make_markers(
        host=host,
        device="",
        kind="step",
        name=frame["name"].to_numpy(dtype=object),
        start_ns=frame["start"].to_numpy(dtype=np.int64),
        end_ns=frame["end"].to_numpy(dtype=np.int64),
        number=frame["step"].to_numpy(dtype=np.int64),
    )
