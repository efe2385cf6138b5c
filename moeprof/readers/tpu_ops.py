"""Google TPU device activity: the op lines of a ``/device:TPU:N`` plane as event-table rows.

Shared by the XPlane reader (both decoders: the wire decoder and jaxlib's ``ProfileData``) and the
Chrome-JSON reader (xprof's trace-viewer JSON and JAX's ``.trace.json.gz``), so that one capture
gives one table whatever file it was read from.

What a TPU device plane holds, and how each line is read (:data:`TPU_LINES`; the rest, ``TC Overlay``
and ``_counters_``, is no activity):

* ``XLA Ops``: every op the chip's TensorCore runs, one after another (they never overlap). There are
  no stream lines on a TPU: this line is the chip's own activity, not a re-description of kernels
  (spec §1 excludes it on GPUs, where it is one). Each event is named by its whole HLO expression
  (``%fusion.12 = bf16[...] fusion(...), kind=kLoop, calls=...``); its metadata carries XLA's
  ``hlo_category``, ``flops``, ``model_flops``, ``bytes_accessed``, ``tf_op`` (the JAX name scope) and
  ``program_id``.
* ``Async XLA Ops``: one event per asynchronous op, from its ``-start`` op's start to its ``-done`` op's
  end (named by the start op's expression; stat ``hlo_op``: the done op). xprof's and JAX's trace JSON
  do not carry this line; there the same intervals are found by pairing each ``-done`` op with the
  ``-start`` op its first operand names (:func:`pair_async`): on the captures seen both give the same
  intervals to the nanosecond.
* ``XLA Modules`` and ``Steps``: module executions and steps (markers, never activity).

Times are the ops' ``device_offset_ps``/``device_duration_ps`` stats where an event has both (what
xprof's op_profile and overview_page measure: ``GetEventTimespan``), else the event's own offset.

How the two op lines combine, so that nothing is counted twice and busy time is xprof's:

* an async **collective** (all-reduce, all-gather, reduce-scatter, all-to-all, ragged-all-to-all,
  collective-permute, send/recv between chips, and their ``-start``/``-done`` pairs) is one comm
  activity: its async interval, the time the transfer is in flight. Its ``-start`` and ``-done`` ops on
  ``XLA Ops`` lie inside that interval and are dropped. Exposed communication is then the part of the
  interval where no compute op runs (the ``-start``, the ``-done`` op's wait, and any gap);
* a **DCN collective** between slices (MegaScale: ``send``, ``recv``, ``send-done``, ``recv-done`` to the host,
  the send naming its recv's channel and the collective in its frontend attributes) is one comm activity from
  the ``send``'s start to the end of its ``recv-done``, as xprof's Megascale Stats measure it; its kind is the
  rendezvous's prefix (``all-reduce.49_47``), its group the chip at its position in every slice;
* an async **copy** (``copy-start``/``copy-done`` to another memory space, async slices: the chip's
  DMAs within its own memory) is not comm: its ``-start`` and ``-done`` ops on ``XLA Ops`` are memcpy
  activity (the TensorCore's time issuing it and waiting for it), and the DMA interval is not counted
  (it runs beside the TensorCore like a GPU kernel's own loads from memory; counting it would add DMA
  time while the TensorCore idles, which xprof does not count as busy);
* every other op on ``XLA Ops`` is one activity, bucketed by its opcode (:mod:`moeprof.core.taxonomy`).

So busy time is the union of the ``XLA Ops`` ops (xprof's: they do not overlap) plus whatever part of
an in-flight collective no op covers (none without collectives).

The opcode is read from the expression (``%name = <shape> opcode(...)``, never the whole expression),
resolved through the program's HLO where the profile holds it (an ``async-start`` takes the opcode of
the op it wraps); bytes and replica groups come from the HLO, else from the expression itself (operand
shapes and ``replica_groups=``/``source_target_pairs=`` are written in it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..core.events import make_table
from ..core.hlo import (
    HloExpression,
    HloModule,
    group_members,
    parse_expression,
    recount_expression,
    recount_flops,
)
from ..core.trace import trailing_number

TPU_PLANE = re.compile(r"^/device:TPU:(\d{1,9})$")  # a TensorCore chip; "/device:TPU:0 SparseCore 0" is not one
TPU_DEVICE = "TPU"  # devices are "<host>/TPU:<N>"

# what each line of a TPU device plane is to moeprof; lines not named here (TC Overlay, _counters_) are not read
OPS, ASYNC, MODULES, STEPS = "ops", "async", "modules", "steps"
TPU_LINES: dict[str, str] = {"XLA Ops": OPS, "Async XLA Ops": ASYNC, "XLA Modules": MODULES, "Steps": STEPS}
# stats read on a TPU plane: the device clock's times of every event, the op's own figures (event metadata),
# the done op of an async interval, and the module execution's run id
TIME_STATS = ("device_offset_ps", "device_duration_ps")
OP_STATS = (
    "hlo_category",
    "program_id",
    "flops",
    "model_flops",
    "bytes_accessed",
    "memory_access_breakdown",
    "tf_op",
    "deduplicated_name",
)
ASYNC_STATS = ("hlo_op",)
TPU_STATS = (*TIME_STATS, *OP_STATS, *ASYNC_STATS)

# collectives between chips, by opcode; XLA's printer writes an async one as "<op>-start"/"<op>-done"
_COLLECTIVE_BASE = frozenset(
    {
        "all-to-all",
        "ragged-all-to-all",
        "all-gather",
        "all-reduce",
        "reduce-scatter",
        "collective-permute",
        "collective-broadcast",
        "send",
        "recv",
    }
)
_ASYNC_SUFFIX = re.compile(r"-(start|update|done)$")
# async wrappers and copies whose pair is not a collective: DMAs within the chip's own memory (memcpy DtoD)
_ASYNC_OPCODES = frozenset({"async-start", "async-update", "async-done", "copy-start", "copy-done"})
# a -done op ends the async interval its first operand (the -start op) began
_DONE = re.compile(r"-done$")
# transfers between the chip and its host: send/recv with is_host_transfer=true, infeed/outfeed
_HOST_COPY = {
    "send": "DtoH",
    "send-done": "DtoH",
    "recv": "HtoD",
    "recv-done": "HtoD",
    "outfeed": "DtoH",
    "infeed": "HtoD",
}
_HOST_FEEDS = ("infeed", "outfeed")
_DEVICE_COPY = "DtoD"
# the collectives a DCN rendezvous can name (its prefix); the reader writes collective = "dcn:<kind>"
DCN_KINDS = frozenset({"all-reduce", "all-gather", "reduce-scatter", "all-to-all"})
# xprof's hlo_category values that are collectives between chips (XLA's TPU collective fusions included;
# "megacore fusion" syncs the two TensorCores of one chip and stays compute)
_COLLECTIVE_CATEGORIES = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute)(-start|-done)?$"
    r"|^(all-reduce|all-gather|all-reduce-scatter) fusion$"
)


@dataclass
class OpEvents:
    """The events of one TPU op line of one chip (``XLA Ops``, or ``Async XLA Ops`` with ``done`` set), as
    arrays: what either reader hands to :func:`tpu_activity`."""

    device: str  # "<host>/TPU:<N>"
    global_id: int
    expression: np.ndarray  # object: the event's name (an HLO expression, or a bare op name)
    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64
    category: np.ndarray | None = None  # object: hlo_category ("" absent)
    program_id: np.ndarray | None = None  # int64 (a uint64 id as its bit pattern); -1 absent
    flops: np.ndarray | None = None  # float64, NaN absent
    model_flops: np.ndarray | None = None
    bytes_accessed: np.ndarray | None = None
    # object: the serialized MemoryAccessBreakdown of the op (bytes; b"" absent, or not decodable: the trace JSON
    # writes "<opaque bytes>")
    memory_access: np.ndarray | None = None
    tf_op: np.ndarray | None = None  # object: "jit(step)/.../reduce_sum:" ("" absent)
    deduplicated: np.ndarray | None = None  # object: the op whose metadata XLA kept for this one ("" absent)
    done: np.ndarray | None = None  # Async XLA Ops only: the done op's name (stat hlo_op)
    line: str = "XLA Ops"

    def __len__(self) -> int:
        return len(self.start_ns)

    def column(self, name: str) -> np.ndarray:
        """A column with its default where the reader had none."""
        value = getattr(self, name)
        if value is not None:
            return value
        n = len(self)
        if name in ("flops", "model_flops", "bytes_accessed"):
            return np.full(n, np.nan)
        if name == "program_id":
            return np.full(n, -1, dtype=np.int64)
        if name == "memory_access":
            return np.full(n, b"", dtype=object)
        return np.full(n, "", dtype=object)


@dataclass
class ChipLines:
    """What one chip's plane holds: its op lines, and its step and module markers."""

    device: str
    global_id: int
    ops: OpEvents | None = None
    asyncs: OpEvents | None = None  # None where the file has no Async XLA Ops line (trace JSON)
    markers: list[tuple[str, str, int, int, int]] = field(default_factory=list)  # kind, name, start, end, number


# XLA's memory spaces as xprof counts them (plugin/xprof/protobuf/op_metrics.proto: MemorySpace): 1 is HBM, the
# off-chip memory; every other space is on-chip. The breakdown's operation types: 1 READ, 2 WRITE (0 UNKNOWN)
HBM_SPACE = 1
_READ, _WRITE = 1, 2


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _skip(data: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return _varint(data, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 2:
        length, pos = _varint(data, pos)
        return pos + length
    if wire == 5:
        return pos + 4
    raise ValueError(f"wire type {wire}")


def hbm_bytes_of(breakdown: bytes) -> float:
    """HBM bytes read and written by one execution of an op, from its serialized ``MemoryAccessBreakdown``
    (``repeated MemoryAccessed memory_accessed = 1``; each ``operation_type = 1``, ``memory_space = 2``,
    ``bytes_accessed = 3``): the entries of memory space 1 (HBM) that are reads or writes, summed, as xprof's
    op_profile sums them (``BytesAccessedPerCore`` for HBM, READ then WRITE). NaN where it holds no entry or does
    not decode (an empty stat, the trace JSON's ``<opaque bytes>``)."""
    if not breakdown:
        return np.nan
    total, entries, pos = 0, 0, 0
    try:
        while pos < len(breakdown):
            key, pos = _varint(breakdown, pos)
            if key >> 3 != 1 or key & 7 != 2:
                pos = _skip(breakdown, pos, key & 7)
                continue
            length, pos = _varint(breakdown, pos)
            end = pos + length
            if end > len(breakdown):
                return np.nan
            op = space = nbytes = 0
            while pos < end:
                field_key, pos = _varint(breakdown, pos)
                number, wire = field_key >> 3, field_key & 7
                if wire != 0:
                    pos = _skip(breakdown, pos, wire)
                    continue
                value, pos = _varint(breakdown, pos)
                if number == 1:
                    op = value
                elif number == 2:
                    space = value
                elif number == 3:
                    nbytes = value
            entries += 1
            if space == HBM_SPACE and op in (_READ, _WRITE):
                total += nbytes
    except (ValueError, IndexError):
        return np.nan
    return float(total) if entries else np.nan


def hbm_bytes_column(memory_access: np.ndarray, bytes_accessed: np.ndarray) -> np.ndarray:
    """Per op row, its HBM bytes (:func:`hbm_bytes_of`, once per distinct breakdown), else its
    ``bytes_accessed`` (every memory space: the count a trace JSON keeps, whose breakdown is opaque)."""
    codes, distinct = pd.factorize(np.asarray(memory_access, dtype=object))
    decoded = np.array([hbm_bytes_of(v if isinstance(v, bytes) else b"") for v in distinct.tolist()], dtype=np.float64)
    hbm = np.where(codes >= 0, np.append(decoded, np.nan)[codes], np.nan)
    return np.where(np.isnan(hbm), np.asarray(bytes_accessed, dtype=np.float64), hbm)


def device_times(
    start_ns: np.ndarray, end_ns: np.ndarray, offset_ps: np.ndarray, duration_ps: np.ndarray, has: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Event times from ``device_offset_ps``/``device_duration_ps`` where an event has both (``has``), as
    xprof reads them: ``start = round_half_even(offset / 1000)``, ``end = round_half_even((offset +
    duration) / 1000)``; elsewhere the event's own times."""
    if not has.any():
        return start_ns, end_ns
    off = offset_ps.astype(np.int64)
    dur = duration_ps.astype(np.int64)
    q1, r1 = np.divmod(off, 1000)
    start = q1 + ((r1 > 500) | ((r1 == 500) & (q1 & 1 == 1)))
    s = r1 + dur % 1000
    q = q1 + dur // 1000 + s // 1000
    r = s % 1000
    end = q + ((r > 500) | ((r == 500) & (q & 1 == 1)))
    return np.where(has, start, start_ns), np.where(has, end, end_ns)


def step_markers(
    device: str, kind: str, names: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray
) -> list[tuple[str, str, int, int, int]]:
    """Marker rows of a ``Steps`` (kind ``step``: numbered by the digits that end the name) or ``XLA Modules``
    line (kind ``module``)."""
    names = np.asarray(names, dtype=object)
    numbers = [trailing_number(str(n)) if kind == "step" else -1 for n in names.tolist()]
    return [
        (kind, str(n), int(s), int(e), k)
        for n, s, e, k in zip(names.tolist(), start_ns.tolist(), end_ns.tolist(), numbers, strict=True)
    ]


@dataclass(frozen=True)
class _Op:
    """What one distinct op says of itself (from its expression, resolved through the HLO where found)."""

    name: str
    opcode: str  # resolved (an async wrapper: the wrapped op's opcode, where the HLO says it)
    written: str  # the opcode as the expression writes it
    collective: bool
    dcn: bool  # a send/recv to the host that carries a DCN channel: a transfer between slices
    activity: str  # kernel | memcpy
    copy_kind: str
    bytes: float
    replica_groups: tuple[tuple[int, ...], ...] | None
    source_target_pairs: tuple[tuple[int, ...], ...] | None
    first_operand: str
    num_devices: int
    op_name: str  # the HLO's op_name metadata (a scope where the trace gives none)
    channel: int = -1  # channel_id (-1 absent)
    dcn_recv_channel: int = -1  # a DCN send: the channel of the recv that completes its collective
    dcn_kind: str = ""  # a DCN transfer: the collective its rendezvous names ("all-reduce"), "" none
    # the ragged dots inside the op (core.hlo.recount_flops): their FLOPs, and what XLA counts for them (NaN:
    # the op is one, its FLOPs are the first); NaN where the HLO shows none
    ragged_flops: float = np.nan
    ragged_counted: float = np.nan


def _describe(expression: str, category: str, module: HloModule | None, program_devices: int) -> _Op:
    parsed: HloExpression | None = parse_expression(expression)
    if parsed is None:  # a bare name (xprof's streaming trace viewer): its category is all there is to go on
        coll = bool(_COLLECTIVE_CATEGORIES.match(category))
        return _Op(expression, "", "", coll, False, "kernel", "", np.nan, None, None, "", program_devices, "")
    inst = module.instructions.get(parsed.name) if module is not None else None
    opcode = inst.opcode if inst is not None else parsed.opcode
    host = parsed.host_transfer and parsed.opcode in _HOST_COPY
    dcn = host and parsed.dcn
    between_chips = _ASYNC_SUFFIX.sub("", opcode) in _COLLECTIVE_BASE or bool(_COLLECTIVE_CATEGORIES.match(category))
    collective = (between_chips and not host) or dcn
    activity, copy_kind = "kernel", ""
    if (host and not dcn) or parsed.opcode in _HOST_FEEDS:
        activity, copy_kind = "memcpy", _HOST_COPY[parsed.opcode]
    elif parsed.opcode in _ASYNC_OPCODES and not collective:
        activity, copy_kind = "memcpy", _DEVICE_COPY
    groups = inst.replica_groups if inst is not None else parsed.replica_groups
    pairs = inst.source_target_pairs if inst is not None else parsed.source_target_pairs
    nbytes = float(inst.bytes if inst is not None else parsed.bytes) if collective else np.nan
    recount = None
    if not collective:  # from the program's HLO, else from the op's own text (its operand shapes are in it)
        recount = recount_flops(module, parsed.name) if module is not None else recount_expression(parsed)
    return _Op(
        parsed.name,
        opcode,
        parsed.opcode,
        collective,
        dcn,
        activity,
        copy_kind,
        nbytes,
        groups,
        pairs,
        parsed.operands[0] if parsed.operands else "",
        module.num_devices if module is not None else program_devices,
        inst.op_name if inst is not None else "",
        parsed.channel_id,
        parsed.dcn_recv_channel,
        _dcn_kind(parsed.rendezvous) if host else "",
        recount.flops if recount is not None else np.nan,
        recount.counted_dense if recount is not None and recount.counted_dense is not None else np.nan,
    )


def _recounted(ragged: np.ndarray, counted: np.ndarray, model: np.ndarray, flops: np.ndarray) -> np.ndarray:
    """Per row, the op's FLOPs with its ragged dots recounted (NaN where it holds none): a ragged dot itself
    does ``ragged``; a fusion holding some does what XLA states (``model_flops``, else ``flops``) less what XLA
    counts for them dense (``counted``), plus what they do. Where the stated FLOPs do not hold that dense count
    (another XLA's cost model), they stand."""
    stated = np.where(np.isnan(model), flops, model)
    holds = stated >= counted  # False where either is NaN
    fused = np.where(holds, stated - np.nan_to_num(counted) + ragged, stated)
    return np.where(np.isnan(counted), ragged, fused)


def _dcn_kind(rendezvous: str) -> str:
    """The collective a DCN rendezvous names by its prefix (``all-reduce.49_47`` -> ``all-reduce``: xprof's
    DCN analysis reads it so); "" for a point-to-point one (``one-to-one``) or an unknown prefix."""
    prefix = rendezvous.split(".", 1)[0]
    return prefix if prefix in DCN_KINDS else ""


def _scope(tf_op: str) -> str:
    """The framework scope of a ``tf_op`` stat: the name without its trailing ``:<type>`` (empty for JAX)."""
    return tf_op.rpartition(":")[0] if ":" in tf_op else tf_op


def _module_names(hlo: Mapping[tuple[str, int], HloModule]) -> dict[int, str]:
    """Program id (as the int64 bit pattern the readers keep) -> module name."""
    out: dict[int, str] = {}
    for name, pid in hlo:
        if pid >= 0:
            out[pid - (1 << 64) if pid >= 1 << 63 else pid] = name
    return out


def pair_async(
    device: np.ndarray, names: np.ndarray, written: np.ndarray, first_operand: np.ndarray, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each ``-done`` op's ``-start`` op, where the op line holds both (trace JSON has no Async XLA Ops line):
    (done rows, their start rows). The start op is the one the done op's first operand names, the latest of
    that name on the same device that starts by the done op's start."""
    done = np.flatnonzero(np.char.endswith(written.astype(str), "-done")) if len(written) else np.zeros(0, np.int64)
    if not len(done):
        return done, done.copy()
    wanted = first_operand[done]
    candidates = np.flatnonzero(np.isin(names, np.unique(wanted)))
    left = pd.DataFrame({"device": device[done], "op": wanted, "t": start[done], "done": done})
    right = pd.DataFrame({"device": device[candidates], "op": names[candidates], "t": start[candidates]})
    right["start"] = candidates
    left = left.sort_values("t", kind="stable")
    right = right.sort_values("t", kind="stable")
    merged = pd.merge_asof(left, right, on="t", by=["device", "op"], direction="backward")
    found = merged["start"].notna().to_numpy()
    return merged["done"].to_numpy()[found].astype(np.int64), merged["start"].to_numpy()[found].astype(np.int64)


@dataclass(frozen=True)
class OwnTime:
    """The own time of the ops that hold others on a chip's op line: each piece of it as (op row, start, end), and
    whether the piece is its op's first."""

    parents: np.ndarray  # int64: rows of the ops that hold others
    row: np.ndarray  # int64: each piece's op row
    start: np.ndarray  # int64
    end: np.ndarray  # int64
    first: np.ndarray  # bool


def own_time_pieces(device: np.ndarray, start: np.ndarray, end: np.ndarray) -> OwnTime | None:
    """On a TPU's ``XLA Ops`` line a control-flow op (a ``while`` around its body's ops: ``jax.lax.scan``,
    ``fori_loop``) is an event that holds the events of the ops it runs, which the line lists too: its time is
    theirs plus its own (the loop's condition and bookkeeping). Its own time is the part of its interval no op
    inside it covers, as xprof's op_profile counts it (the loop's ops each under their own name, the loop's own
    time at the program's total). Returns those parts per holding op (``device``: integer codes), or None where
    no op holds another (the common case, found without sorting more than once)."""
    n = len(start)
    if n < 2:
        return None
    order = np.lexsort((-end, start, device))
    s, e, d = start[order], end[order], device[order]
    holds = np.zeros(n, dtype=bool)
    holds[:-1] = (d[1:] == d[:-1]) & (s[1:] < e[:-1])
    if not holds.any():
        return None
    parent = np.flatnonzero(holds)  # positions in the sorted order
    # the ops inside each holding op: the positions after it that start before it ends, on its device
    stop = np.empty(len(parent), dtype=np.int64)
    bounds = np.flatnonzero(np.r_[True, d[1:] != d[:-1], True])
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):  # one search per device
        here = (parent >= lo) & (parent < hi)
        stop[here] = lo + np.searchsorted(s[lo:hi], e[parent[here]], side="left")
    count = stop - parent - 1
    block = np.repeat(np.arange(len(parent)), count)
    inside = np.arange(len(block)) - np.repeat(np.cumsum(count) - count, count) + np.repeat(parent + 1, count)
    p_start, p_end = s[parent], e[parent]
    child_end = np.minimum(e[inside], p_end[block])
    # each block's running latest end, as one accumulate: every block's values raised above the blocks before it
    span = p_end - p_start + 1
    offset = np.cumsum(span) - span
    reach = np.maximum.accumulate(child_end - p_start[block] + offset[block]) - offset[block] + p_start[block]
    first_in_block = np.r_[True, block[1:] != block[:-1]]
    before = np.where(first_in_block, p_start[block], np.r_[p_start[0], reach[:-1]])
    gap_start, gap_end, gap_block = before, s[inside], block
    last = np.flatnonzero(np.r_[block[1:] != block[:-1], True])
    gap_start = np.concatenate([gap_start, reach[last]])
    gap_end = np.concatenate([gap_end, p_end[block[last]]])
    gap_block = np.concatenate([gap_block, block[last]])
    positive = gap_end > gap_start
    gap_start, gap_end, gap_block = gap_start[positive], gap_end[positive], gap_block[positive]
    by_time = np.lexsort((gap_start, gap_block))
    gap_start, gap_end, gap_block = gap_start[by_time], gap_end[by_time], gap_block[by_time]
    return OwnTime(
        parents=order[parent],
        row=order[parent][gap_block],
        start=gap_start.astype(np.int64),
        end=gap_end.astype(np.int64),
        first=np.r_[True, gap_block[1:] != gap_block[:-1]] if len(gap_block) else np.zeros(0, dtype=bool),
    )


def tpu_activity(
    chips: Sequence[ChipLines],
    host: str,
    chips_per_domain: int | None = None,
    hlo: Mapping[tuple[str, int], HloModule] | None = None,
    source: str = "xplane",
) -> pd.DataFrame:
    """The event table of a host's TPU chips (see the module docstring for what each line gives).

    ``chips_per_domain``: chips per slice (the scale-up domain); None: every chip the file's collectives
    name (one more than the largest device id in their replica groups and source-target pairs), at least
    the chips of this file. On one slice that is the slice, whichever hosts its chips sit on."""
    hlo = hlo or {}
    parts = [c.ops for c in chips if c.ops is not None and len(c.ops)]
    if not parts:
        return make_table({}, n=0)
    module_of_pid = _module_names(hlo)
    program_devices = max((m.num_devices for m in hlo.values()), default=1)

    def cat(name: str, part_list: list[OpEvents]) -> np.ndarray:
        return np.concatenate([p.column(name) for p in part_list])

    n_ops = sum(len(p) for p in parts)
    device = np.repeat(np.array([p.device for p in parts], dtype=object), [len(p) for p in parts])
    gid = np.repeat(np.array([p.global_id for p in parts], dtype=np.int64), [len(p) for p in parts])
    expr = cat("expression", parts).astype(object)
    start = np.concatenate([p.start_ns for p in parts]).astype(np.int64)
    end = np.concatenate([p.end_ns for p in parts]).astype(np.int64)
    pid = cat("program_id", parts).astype(np.int64)
    # one description per distinct (expression, program): the opcode, what it moves and with whom
    category = cat("category", parts).astype(object)
    key_codes, keys = pd.factorize(pd.MultiIndex.from_arrays([expr, pid, category]))
    descs: list[_Op] = []
    modules = []
    for text, program, cat_text in keys.tolist():
        module_name = module_of_pid.get(int(program), "")
        module = hlo.get((module_name, _unsigned(int(program)))) or hlo.get((module_name, -1))
        descs.append(_describe(str(text), str(cat_text), module, program_devices))
        modules.append(module_name)

    def per_row(attr: str, dtype: type | str = object) -> np.ndarray:
        return np.array([getattr(d, attr) for d in descs], dtype=dtype)[key_codes]

    names = per_row("name")
    written = per_row("written")
    collective = per_row("collective", bool)

    # async intervals: each as (device, start row, done row, start, end); collectives become one activity
    drop = np.zeros(n_ops, dtype=bool)
    async_rows: list[pd.DataFrame] = []
    have_async_line = any(c.asyncs is not None for c in chips)
    if have_async_line:
        intervals = _async_line_intervals(chips, names, device, start, end)
    else:
        done_rows, start_rows = pair_async(device, names, written, per_row("first_operand"), start)
        intervals = pd.DataFrame(
            {"start_row": start_rows, "done_row": done_rows, "start": start[start_rows], "end": end[done_rows]}
        )
    # a DCN collective (send ... recv-done) is one interval of its own; its ops leave the async pairs
    dcn_intervals, dcn_ops = _dcn_collectives(descs, key_codes, device, start, end)
    if len(dcn_intervals):
        drop[dcn_ops] = True
        intervals = intervals[~np.isin(intervals["start_row"].to_numpy(dtype=np.int64), dcn_ops)]
        async_rows.append(dcn_intervals)
    if len(intervals):
        rows = intervals["start_row"].to_numpy(dtype=np.int64)
        is_coll = collective[rows]
        coll = intervals[is_coll]
        drop[coll["start_row"].to_numpy(dtype=np.int64)] = True
        done = coll["done_row"].to_numpy(dtype=np.int64)
        drop[done[done >= 0]] = True
        async_rows.append(coll)

    # an op that holds others on the line (a while loop around its body's ops) is its own time only: the parts of
    # its interval no op inside it covers, one row each (its counts on the first), so nothing is counted twice
    pieces = own_time_pieces(pd.factorize(device)[0], start, end)
    if pieces is not None:
        drop[pieces.parents] = True
    keep = np.flatnonzero(~drop)
    row_parts: list[np.ndarray] = [keep]
    starts, ends = [start[keep]], [end[keep]]
    streams = [np.full(len(keep), "XLA Ops", dtype=object)]
    later_piece = [np.zeros(len(keep), dtype=bool)]
    if pieces is not None:
        row_parts.append(pieces.row)
        starts.append(pieces.start)
        ends.append(pieces.end)
        streams.append(np.full(len(pieces.row), "XLA Ops", dtype=object))
        later_piece.append(~pieces.first)
    for coll in async_rows:
        r = coll["start_row"].to_numpy(dtype=np.int64)
        row_parts.append(r)
        starts.append(coll["start"].to_numpy(dtype=np.int64))
        ends.append(coll["end"].to_numpy(dtype=np.int64))
        streams.append(np.full(len(r), "Async XLA Ops", dtype=object))
        later_piece.append(np.zeros(len(r), dtype=bool))
    rows = np.concatenate(row_parts)  # each output row's op row (an async interval: its -start op's)
    uncounted = np.concatenate(later_piece)  # a piece of an op's own time after its first: the op's counts are there

    def counts(values: np.ndarray) -> np.ndarray:
        return np.where(uncounted, 0.0, values) if pieces is not None else values
    out_key = key_codes[rows]

    def described(attr: str, dtype: type | str = object) -> np.ndarray:
        return np.array([getattr(d, attr) for d in descs], dtype=dtype)[out_key]

    module_column = np.array(modules, dtype=object)[key_codes]
    unnamed = module_column == ""
    if unnamed.any():  # no HLO to name the program (trace JSON): the XLA Modules execution the op runs in
        module_column = module_column.copy()
        module_column[unnamed] = _running_module(chips, device[unnamed], start[unnamed])
    scope = _scopes(cat("tf_op", parts).astype(object), cat("deduplicated", parts).astype(object), names, pid)
    from_hlo = np.array([d.op_name for d in descs], dtype=object)[key_codes]
    scope = np.where(scope == "", from_hlo, scope)
    groups = _groups(descs, out_key, gid[rows])
    n = len(rows)
    is_dcn = described("dcn", bool)
    named = [
        max((max(g, default=-1) for g in (*(d.replica_groups or ()), *(d.source_target_pairs or ()))), default=-1)
        for d in descs
        if d.collective
    ]
    program_chips = max([len(chips), *(i + 1 for i in named)])
    if chips_per_domain is None:
        chips_per_domain = program_chips
    groups = _dcn_groups(groups, is_dcn, gid[rows], chips_per_domain, program_chips)
    dcn_kind = described("dcn_kind")
    table = make_table(
        {
            "host": host,
            "device": device[rows],
            "global_id": gid[rows],
            "gpus_per_domain": chips_per_domain,
            "stream": np.concatenate(streams),
            "name": names[rows],
            "start_ns": np.concatenate(starts),
            "end_ns": np.concatenate(ends),
            "activity": described("activity"),
            "copy_kind": described("copy_kind"),
            "hlo_module": module_column[rows],
            "hlo_op": names[rows],
            "program_id": pid[rows],
            "opcode": described("opcode"),
            "collective": np.where(is_dcn, np.where(dcn_kind != "", "dcn:" + dcn_kind, "dcn"), ""),
            "bytes": described("bytes", np.float64),
            "group": groups,
            "category": category[rows],
            "scope": scope[rows],
            "flops": counts(cat("flops", parts).astype(np.float64)[rows]),
            "model_flops": counts(cat("model_flops", parts).astype(np.float64)[rows]),
            "bytes_accessed": counts(cat("bytes_accessed", parts).astype(np.float64)[rows]),
            "hbm_bytes": counts(
                hbm_bytes_column(
                    cat("memory_access", parts)[rows], cat("bytes_accessed", parts).astype(np.float64)[rows]
                )
            ),
            "recounted_flops": counts(
                _recounted(
                    described("ragged_flops", np.float64),
                    described("ragged_counted", np.float64),
                    cat("model_flops", parts).astype(np.float64)[rows],
                    cat("flops", parts).astype(np.float64)[rows],
                )
            ),
            "source": source,
        },
        n=n,
    )
    order = np.lexsort((table["start_ns"].to_numpy(), table["device"].cat.codes.to_numpy()))
    return table.iloc[order].reset_index(drop=True)


def _dcn_collectives(
    descs: list[_Op], key_codes: np.ndarray, device: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[pd.DataFrame, np.ndarray]:
    """The DCN collectives between slices, each one interval from its ``send`` op's start to the end of the
    ``recv-done`` that completes it (what xprof's Megascale Stats measure: "a collective is initiated by a send
    operation and completed by the matching recv-done operation"), and the rows of the ops it spans: its
    ``send``, ``recv-done``, and the ``recv`` and ``send-done`` that lie inside it. A send's recv is the one on
    the channel its ``_xla_dcn_recv_channel`` names; a ``-done`` op's first operand names its op. A send
    without a ``recv-done`` after it (cut by the capture) stays an activity of its own."""
    none = (pd.DataFrame({"start_row": [], "done_row": [], "start": [], "end": []}), np.zeros(0, dtype=np.int64))
    sends = {d.name for d in descs if d.dcn and d.written == "send"}
    if not sends:
        return none
    recv_on = {d.dcn_recv_channel: d.name for d in descs if d.name in sends and d.dcn_recv_channel >= 0}
    recv_of = {d.name: recv_on[d.channel] for d in descs if d.written == "recv" and d.channel in recv_on}
    roles = {name: (name, "send") for name in sends}
    for d in descs:
        if d.written == "recv" and d.name in recv_of:
            roles[d.name] = (recv_of[d.name], "inside")
    for d in descs:
        if d.written == "recv-done" and roles.get(d.first_operand, ("", ""))[1] == "inside":
            roles[d.name] = (roles[d.first_operand][0], "done")
        elif d.written == "send-done" and d.first_operand in sends:
            roles[d.name] = (d.first_operand, "inside")
    owner = np.array([roles.get(d.name, ("", ""))[0] for d in descs], dtype=object)[key_codes]
    role = np.array([roles.get(d.name, ("", ""))[1] for d in descs], dtype=object)[key_codes]
    ops = pd.DataFrame({"device": device, "send": owner, "start": start, "end": end, "row": np.arange(len(start))})
    ops = ops[role != ""].assign(role=role[role != ""]).sort_values("start", kind="stable")
    begun = ops[ops["role"] == "send"]
    done = ops[ops["role"] == "done"].rename(columns={"row": "done_row", "end": "done_end"})
    done = done.assign(at=done["start"])[["device", "send", "at", "done_row", "done_end"]]
    # each send: the first recv-done of its collective on its chip that starts after it
    paired = pd.merge_asof(
        begun.assign(at=begun["start"]), done, on="at", by=["device", "send"], direction="forward"
    ).dropna(subset=["done_row"])
    paired = paired.drop_duplicates("done_row", keep="last")  # a recv-done completes the latest send before it
    if not len(paired):
        return none
    intervals = pd.DataFrame(
        {
            "start_row": paired["row"].to_numpy(dtype=np.int64),
            "done_row": paired["done_row"].to_numpy(dtype=np.int64),
            "start": paired["start"].to_numpy(dtype=np.int64),
            "end": paired["done_end"].to_numpy(dtype=np.int64),
        }
    )
    # the recv and send-done of each collective: the latest send's interval before them, if they lie inside it
    inside = ops[ops["role"] == "inside"]
    begins = intervals["start_row"].to_numpy()
    spans = intervals.assign(device=device[begins], send=owner[begins])
    spans = spans.rename(columns={"start": "span_start", "end": "span_end"}).sort_values("span_start")
    within = pd.merge_asof(
        inside.assign(at=inside["start"]),
        spans.assign(at=spans["span_start"])[["device", "send", "at", "span_start", "span_end"]],
        on="at",
        by=["device", "send"],
        direction="backward",
    )
    held = within["span_end"].notna().to_numpy() & (within["end"].to_numpy() <= within["span_end"].to_numpy())
    rows = np.concatenate([intervals["start_row"], intervals["done_row"], within["row"].to_numpy()[held]])
    return intervals, np.unique(rows.astype(np.int64))


def _running_module(chips: Sequence[ChipLines], device: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The module (its XLA Modules name without the program id) whose execution on ``device`` holds each
    start; "" where none does."""
    out = np.full(len(device), "", dtype=object)
    for chip in chips:
        runs = sorted((s, e, re.sub(r"\(\d+\)$", "", n)) for kind, n, s, e, _ in chip.markers if kind == "module")
        mine = np.flatnonzero(device == chip.device)
        if not runs or not len(mine):
            continue
        run_start = np.array([r[0] for r in runs], dtype=np.int64)
        run_end = np.array([r[1] for r in runs], dtype=np.int64)
        at = np.searchsorted(run_start, start[mine], side="right") - 1
        inside = (at >= 0) & (start[mine] < run_end[np.maximum(at, 0)])
        names = np.array([r[2] for r in runs], dtype=object)
        out[mine[inside]] = names[at[inside]]
    return out


def _unsigned(pid: int) -> int:
    return pid + (1 << 64) if pid < -1 else pid


def _async_line_intervals(
    chips: Sequence[ChipLines], names: np.ndarray, device: np.ndarray, start: np.ndarray, end: np.ndarray
) -> pd.DataFrame:
    """The Async XLA Ops intervals, each with the XLA Ops rows of its -start op (the op of the interval's
    name that starts with it) and -done op (the op the interval's ``hlo_op`` names that ends with it);
    -1 where the op line does not hold one (cut by the capture window)."""
    frames = []
    for chip in chips:
        a = chip.asyncs
        if a is None or not len(a):
            continue
        parsed = [parse_expression(str(e)) for e in pd.unique(a.expression)]
        short = {str(e): (p.name if p is not None else str(e)) for e, p in zip(pd.unique(a.expression), parsed)}
        frames.append(
            pd.DataFrame(
                {
                    "device": chip.device,
                    "start_op": [short[str(e)] for e in a.expression.tolist()],
                    "done_op": a.column("done").astype(object),
                    "start": a.start_ns.astype(np.int64),
                    "end": a.end_ns.astype(np.int64),
                }
            )
        )
    if not frames:
        return pd.DataFrame({"start_row": [], "done_row": [], "start": [], "end": []})
    intervals = pd.concat(frames, ignore_index=True)
    ops = pd.DataFrame({"device": device, "op": names, "start": start, "end": end, "row": np.arange(len(names))})
    begins = ops.drop_duplicates(["device", "op", "start"]).rename(columns={"op": "start_op", "row": "start_row"})
    intervals = intervals.merge(
        begins[["device", "start_op", "start", "start_row"]], on=["device", "start_op", "start"], how="left"
    )
    ends = ops.drop_duplicates(["device", "op", "end"]).rename(columns={"op": "done_op", "row": "done_row"})
    intervals = intervals.merge(
        ends[["device", "done_op", "end", "done_row"]], on=["device", "done_op", "end"], how="left"
    )
    intervals = intervals[intervals["start_row"].notna()]  # an interval whose start op is not on the op line
    return pd.DataFrame(
        {
            "start_row": intervals["start_row"].to_numpy(dtype=np.int64),
            "done_row": intervals["done_row"].fillna(-1).to_numpy(dtype=np.int64),
            "start": intervals["start"].to_numpy(dtype=np.int64),
            "end": intervals["end"].to_numpy(dtype=np.int64),
        }
    )


def _scopes(tf_op: np.ndarray, deduplicated: np.ndarray, names: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Each op's framework scope: its own ``tf_op``, else that of the op XLA deduplicated its metadata into
    (``deduplicated_name``: same program), else ""."""
    scope_codes, scope_values = pd.factorize(tf_op)
    scopes = np.array([_scope(str(v)) for v in scope_values.tolist()], dtype=object)[scope_codes]
    missing = (scope_codes < 0) | (scopes == "")
    wanted = missing & (deduplicated != "")
    if wanted.any():
        known = pd.DataFrame({"op": names[~missing], "pid": pid[~missing], "scope": scopes[~missing]})
        known = known.drop_duplicates(["op", "pid"])
        ask = pd.DataFrame({"op": deduplicated[wanted], "pid": pid[wanted]})
        found = ask.merge(known, on=["op", "pid"], how="left")["scope"].fillna("").to_numpy(dtype=object)
        scopes = scopes.copy()
        scopes[np.flatnonzero(wanted)] = found
    return scopes


def _dcn_groups(
    groups: np.ndarray, is_dcn: np.ndarray, gids: np.ndarray, slice_chips: int, program_chips: int
) -> np.ndarray:
    """The group of each DCN transfer that names none (a send/recv to the host carries no replica groups): the
    chip at the same position in every slice of the program, as a collective between slices runs over DCN
    (each chip exchanges with its counterparts; the part within a slice runs over ICI). Unknown ("") where the
    program's chips (those its collectives name) are not whole slices of more than one."""
    wanted = is_dcn & (groups == "")
    slices = program_chips // slice_chips if slice_chips > 0 else 0
    if not wanted.any() or slices < 2 or program_chips % slice_chips:
        return groups
    out = groups.copy()
    positions, codes = np.unique(gids[wanted] % slice_chips, return_inverse=True)
    texts = [",".join(str(p + slice_chips * k) for k in range(slices)) for p in positions.tolist()]
    out[wanted] = np.array(texts, dtype=object)[codes]
    return out


def _groups(descs: list[_Op], keys: np.ndarray, gids: np.ndarray) -> np.ndarray:
    """The communicating group of each collective row ("0,1,2,3"), decided once per (op, device)."""
    out = np.full(len(keys), "", dtype=object)
    coll = np.flatnonzero(np.array([d.collective for d in descs], dtype=bool)[keys]) if len(keys) else keys
    if not len(coll):
        return out
    pair_codes, pairs = pd.factorize(keys[coll] * (1 << 32) + gids[coll])
    texts = []
    for pair in pairs.tolist():
        d = descs[int(pair) >> 32]
        members = group_members(d.replica_groups, d.source_target_pairs, int(pair) & 0xFFFFFFFF, d.num_devices)
        texts.append(",".join(map(str, members)) if members else "")
    out[coll] = np.array(texts, dtype=object)[pair_codes]
    return out
