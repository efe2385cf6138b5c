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
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.events import empty_table, make_table, us_interval_to_ns
from ..core.trace import Job, Trace, empty_markers, make_markers
from ..core.vocabulary import vocabulary
from ..errors import InputError
from ..options import LoadOptions
from .base import ReadContext

DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
CPU_CATS = ("cpu_op", "user_annotation")
FLOW_CAT = "ac2g"
_WANTED = (*DEVICE_CATS, *LAUNCH_CATS, *CPU_CATS, FLOW_CAT)
_MARKER_KEYS = ("deviceProperties", "distributedInfo", "schemaVersion")
DEFAULT_GPUS_PER_NODE = 8

_RECORD_PARAM_COMMS = "record_param_comms"
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
    """Whether a decoded JSON document is a Kineto trace (metadata keys, or GPU activity events)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return False
    if any(k in doc for k in _MARKER_KEYS):
        return True
    return any(isinstance(e, dict) and e.get("cat") in DEVICE_CATS for e in doc["traceEvents"])


# one exact float-µs to ns conversion for every JSON reader
us_pair_to_ns = us_interval_to_ns


def read_kineto(doc: dict, path: Path, context: ReadContext | None = None) -> Trace:
    """Read one decoded Kineto trace: device activity (raw columns), step markers, rank and process groups.

    Timestamps: ``start_ns = rint(ts*1e3)`` and ``end_ns = rint(ts*1e3 + dur*1e3)``
    (nearest ns, computed exactly even for epoch-sized ``ts``; see ``us_pair_to_ns``).
    A negative ``dur`` is clipped to 0. A trace without GPU activity gives an empty
    table (the caller decides whether that is an error).
    """
    context = context or ReadContext()
    options = context.options
    host_index = context.placement.host_index
    if not isinstance(doc, dict):
        raise InputError(path, "not a Kineto trace: the JSON top level is not an object")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise InputError(path, "not a Kineto trace: no traceEvents list")

    by_cat: dict[str, list[dict]] = {c: [] for c in _WANTED}
    try:
        for ev in events:
            bucket = by_cat.get(ev.get("cat"))
            if bucket is not None:
                bucket.append(ev)
    except (AttributeError, TypeError):
        raise InputError(path, "traceEvents holds an entry that is not an event object") from None

    device_events = [e for c in DEVICE_CATS for e in by_cat[c] if e.get("ph") == "X"]
    if not device_events:
        return Trace(events=empty_table(), path=str(path), format="kineto", framework="pytorch")

    rank = _rank(doc, path, host_index)
    host = f"rank{rank}"
    gpus = _gpus_per_domain(doc, options)
    dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    world = _as_int(dist.get("world_size"))
    pg_ranks = _pg_config_ranks(dist)

    dev = _device_columns(device_events, path, host)
    n = len(dev["name"])
    collective = np.full(n, "", dtype=object)
    group = np.full(n, "", dtype=object)
    nbytes = dev["bytes"]
    annotation = np.full(n, "", dtype=object)

    # 1. the kernel's own args (a step repeats the same calls: decode each distinct one once)
    cache: dict[tuple, tuple[str, str, float]] = {}
    own = [i for i, a in enumerate(dev["args"]) if "Collective name" in a or "Process Group Ranks" in a]
    for i in own:
        name, members, size = _comm_fields_cached(dev["args"][i], pg_ranks, world, cache)
        collective[i], group[i] = name, members
        if size == size:  # not NaN
            nbytes[i] = size

    # 2. the CPU side of the launch: only the few ranges that can carry evidence are decoded
    cpu_events = [e for c in CPU_CATS for e in by_cat[c] if e.get("ph") == "X"]
    names = np.array([str(e.get("name", "")) for e in cpu_events], dtype=object)
    codes, uniques = pd.factorize(names)
    unique_names = np.asarray(uniques, dtype=object)
    vocab = vocabulary()
    comm_like = np.array([vocab.is_comm_range(u) for u in unique_names], dtype=bool)
    is_rpc = unique_names == _RECORD_PARAM_COMMS
    step_no = np.array(
        [int(m.group(1)) if (m := vocab.profiler_step.match(u)) else -1 for u in unique_names], dtype=np.int64
    )
    if options.step_marker:
        # ranges the user names as steps (--step-marker): numbered by their trailing digits, else in order
        try:
            user_step = re.compile(options.step_marker)
        except re.error as exc:
            raise InputError(None, f"--step-marker {options.step_marker!r}: bad regular expression: {exc}") from None
        for i, u in enumerate(unique_names):
            if step_no[i] < 0 and user_step.search(u):
                m = re.search(r"(\d+)\s*$", u)
                step_no[i] = int(m.group(1)) if m else _BY_ORDER
    is_step = (step_no >= 0) | (step_no == _BY_ORDER)
    keep = np.flatnonzero((comm_like | is_rpc | is_step)[codes]) if len(unique_names) else np.zeros(0, int)
    ranges = _ranges([cpu_events[i] for i in keep], path)
    kept_codes = codes[keep]
    anchor_key, anchor_t = _anchors(dev, by_cat, cpu_events, path)
    threads, _ = pd.factorize(pd.concat([ranges["thread_key"], anchor_key], ignore_index=True))
    range_thread = threads[: len(keep)].astype(np.int64)
    anchor_thread = threads[len(keep) :].astype(np.int64)
    anchor_thread[(anchor_key == "").to_numpy()] = -1  # launch not found

    def innermost_of(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sel = np.flatnonzero(mask[kept_codes]) if len(keep) else np.zeros(0, dtype=np.int64)
        return sel, _innermost(range_thread[sel], ranges["start"][sel], ranges["end"][sel], anchor_thread, anchor_t)

    sel, hit = innermost_of(comm_like)
    found = np.flatnonzero(hit >= 0)
    annotation[found] = ranges["name"][sel[hit[found]]]

    sel, hit = innermost_of(is_rpc)
    used, inverse = np.unique(hit, return_inverse=True)
    r_coll = np.full(len(used), "", dtype=object)
    r_group = np.full(len(used), "", dtype=object)
    r_bytes = np.full(len(used), np.nan)
    for u, r in enumerate(used):  # one decode per record_param_comms call, not per kernel
        if r >= 0:
            r_coll[u], r_group[u], r_bytes[u] = _comm_fields_cached(ranges["args"][sel[r]], pg_ranks, world, cache)
    # fill only what the kernel's own args left empty; copies keep the bytes they moved
    fill = collective == ""
    collective[fill] = r_coll[inverse][fill]
    fill = group == ""
    group[fill] = r_group[inverse][fill]
    fill = np.isnan(nbytes) & (dev["activity"] == "kernel")
    nbytes[fill] = r_bytes[inverse][fill]

    # every global rank below G sits in domain 0: when the whole job fits one domain,
    # any group this rank talks to is local, whatever it is
    if world is not None and 0 < world <= gpus:
        evident = (group == "") & ((collective != "") | (annotation != ""))
        group[evident] = ",".join(map(str, range(world)))

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
            "bytes": nbytes,
            "group": group,
            "source": "kineto",
        }
    )
    table = table.sort_values("start_ns", kind="stable", ignore_index=True)
    return Trace(
        events=table,
        path=str(path),
        format="kineto",
        markers=_step_markers(ranges, step_no[kept_codes], host),
        framework="pytorch",
        annotations=tuple(str(u) for u in unique_names),
        process_groups={name: tuple(ranks) for name, ranks in pg_ranks.items()},
        job=Job(rank=rank, world_size=world, gpus_per_node=gpus),
        devices={str(d): rank for d in pd.unique(dev["device"])},
    )


# ---- decoding -------------------------------------------------------------------------------


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


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
        ranks = [_as_int(x) for x in value]
        return None if not ranks or None in ranks else ranks  # type: ignore[return-value]
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
    if ranks is None and size:
        start, stride = _as_int(args.get("Global rank start")), _as_int(args.get("Global rank stride"))
        if start is not None and stride:
            ranks = list(range(start, start + size * stride, stride))
        elif world is not None and size == world:
            ranks = list(range(world))  # a group of every rank is the world, whichever it is
    group = ",".join(map(str, ranks)) if ranks else ""
    return collective, group, _nccl_tests_bytes(args)


_COMM_KEYS = (
    "Collective name",
    "Process Group Ranks",
    "Process Group Name",
    "Group size",
    "Global rank start",
    "Global rank stride",
    "In msg nelems",
    "Out msg nelems",
    "dtype",
)


def _comm_fields_cached(
    args: dict, pg_ranks: dict[str, list[int]], world: int | None, cache: dict[tuple, tuple[str, str, float]]
) -> tuple[str, str, float]:
    key = tuple(str(args.get(k)) for k in _COMM_KEYS)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = _comm_fields(args, pg_ranks, world)
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


def _floats(values: list, path: Path, what: str) -> np.ndarray:
    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(path, f"{what} with a timestamp or duration that is not a number") from None
    if not np.isfinite(out).all():
        raise InputError(path, f"{what} with a timestamp or duration that is not finite")
    return out


def _device_columns(events: list[dict], path: Path, host: str) -> dict[str, np.ndarray]:
    args = [a if isinstance(a := e.get("args"), dict) else {} for e in events]
    ts = _floats([e.get("ts") for e in events], path, "a GPU event")
    dur = _floats([e.get("dur", 0) for e in events], path, "a GPU event")
    start, end = us_pair_to_ns(ts, np.maximum(dur, 0.0))  # a negative dur would make end < start
    names = np.array([str(e.get("name", "")) for e in events], dtype=object)
    activity = np.array([DEVICE_CATS[e["cat"]] for e in events], dtype=object)

    gpu = pd.Series([a.get("device", e.get("pid")) for a, e in zip(args, events, strict=True)], dtype=object)
    stream = pd.Series([a.get("stream", e.get("tid")) for a, e in zip(args, events, strict=True)], dtype=object)
    device = _label(gpu, lambda g: f"{host}/GPU:{g}")
    stream_label = _label(stream, lambda s: f"stream {s}")

    codes, uniques = pd.factorize(names)
    vocab = vocabulary()
    kinds = np.array([vocab.copy_kind(u) for u in uniques], dtype=object)
    copy_kind = np.where(activity == "memcpy", kinds[codes] if len(uniques) else "", "").astype(object)

    nbytes = np.full(len(events), np.nan)
    copies = np.flatnonzero(activity != "kernel")
    if copies.size:  # memcpy/memset args carry the bytes they moved
        raw = [args[i].get("bytes") for i in copies]
        nbytes[copies] = [float(b) if isinstance(b, (int, float)) and not isinstance(b, bool) else np.nan for b in raw]

    return {
        "args": args,  # type: ignore[dict-item]
        "name": names,
        "start": start,
        "end": end,
        "activity": activity,
        "copy_kind": copy_kind,
        "device": device,
        "stream": stream_label,
        "bytes": nbytes,
        "correlation": _ints([a.get("correlation") for a in args]),
        "external": _ints([a.get("External id") for a in args]),
    }


def _label(values: pd.Series, fmt) -> np.ndarray:
    """Format each distinct value once (devices and streams repeat a lot)."""
    codes, uniques = pd.factorize(values.map(lambda v: "" if v is None else str(v)))
    labels = np.array([fmt(u) for u in uniques], dtype=object)
    return labels[codes] if len(uniques) else np.array([], dtype=object)


def _ints(values: list) -> np.ndarray:
    """Ids as int64, -1 where absent or not an integer."""
    return np.array([v if isinstance(v, int) and not isinstance(v, bool) else -1 for v in values], dtype=np.int64)


def _thread_keys(pids: Sequence, tids: Sequence) -> pd.Series:
    return pd.Series([f"{p}\x00{t}" for p, t in zip(pids, tids, strict=True)], dtype=object)


def _ranges(events: list[dict], path: Path) -> dict:
    """CPU ops / user annotations: name, thread key, [start, end] in ns, args."""
    ts = _floats([e.get("ts") for e in events], path, "a CPU op")
    dur = _floats([e.get("dur", 0) for e in events], path, "a CPU op")
    start, end = us_pair_to_ns(ts, np.maximum(dur, 0.0))
    return {
        "name": np.array([str(e.get("name", "")) for e in events], dtype=object),
        "thread_key": _thread_keys([e.get("pid") for e in events], [e.get("tid") for e in events]),
        "start": start,
        "end": end,
        "args": [a if isinstance(a := e.get("args"), dict) else {} for e in events],
    }


def _anchors(
    dev: dict, by_cat: dict[str, list[dict]], cpu_events: list[dict], path: Path
) -> tuple[pd.Series, np.ndarray]:
    """The launching thread (key; "" unknown) and launch time (ns) of every device activity."""
    n = len(dev["name"])
    key = np.full(n, "", dtype=object)
    t = np.zeros(n, dtype=np.int64)
    pending = np.ones(n, dtype=bool)

    def take(ids: np.ndarray, own_ids: np.ndarray, launches: list[dict]) -> None:
        # left-join still-pending device rows onto (id -> launch event); first one wins on duplicates
        if not len(ids) or not pending.any():
            return
        lookup = pd.Series(np.arange(len(ids)), index=ids)
        lookup = lookup[~lookup.index.duplicated(keep="first")]
        rows = np.flatnonzero(pending & (own_ids >= 0))
        where = lookup.reindex(own_ids[rows]).to_numpy()
        ok = ~np.isnan(where)
        rows, where = rows[ok], where[ok].astype(np.int64)
        hits = [launches[i] for i in where]
        key[rows] = _thread_keys([e.get("pid") for e in hits], [e.get("tid") for e in hits]).to_numpy()
        t[rows] = us_pair_to_ns(_floats([e.get("ts") for e in hits], path, "a launch"))[0]
        pending[rows] = False

    launches = [e for c in LAUNCH_CATS for e in by_cat[c] if e.get("ph") == "X"]
    if launches:
        take(
            _ints([a.get("correlation") if isinstance(a := e.get("args"), dict) else None for e in launches]),
            dev["correlation"],
            launches,
        )
    if pending.any():
        flows = [e for e in by_cat[FLOW_CAT] if e.get("ph") == "s"]
        take(_ints([e.get("id") for e in flows]), dev["correlation"], flows)
    if pending.any() and cpu_events:
        # last resort: the CPU op the kernel names by External id, at its start
        take(
            _ints([a.get("External id") if isinstance(a := e.get("args"), dict) else None for e in cpu_events]),
            dev["external"],
            cpu_events,
        )
    return pd.Series(key, dtype=object), t


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
