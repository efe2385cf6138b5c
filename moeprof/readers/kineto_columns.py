"""Kineto JSON text to typed per-category numpy columns, in one decoding pass.

Why not dicts: a Kineto trace holds millions of events; decoded into Python dicts
they take ~8x the file, and ``parse_kineto`` reads a dozen fields of four
categories. msgspec decodes each event into a Struct that declares only those
fields, in C, skipping the rest; the phase ``ph`` is the union's tag, so flow
ends, metadata and other phases decode to empty Structs. The ``traceEvents``
array is decoded a chunk of a few MB at a time and each chunk turned into
columns before the next, so only one chunk of event objects is ever alive: peak
memory is the JSON text plus the columns.

Two schemas share one set of field names:

* the *strict* one types every field as Kineto writes it (names are strings, ids
  integers, times numbers): values of those types convert to columns with
  vectorized numpy (a name as text, an id as an integer, a time as a float);
* a chunk that does not fit (a string ``ts``, a ``null`` id, ``args`` that is not
  an object, an unknown ``ph``...) is decoded again with the *permissive* one,
  whose fields take any JSON value and are brought one by one to the same types
  (``str(name)``, ``np.asarray(ts, float)``, ints else -1).
  Odd input costs time, never correctness.

Rows keep one order, whichever schema decoded them: within a group, by category in the order the
categories are listed here (kernels, then memcpys, then memsets), then file order.
"""

from __future__ import annotations

import gc
import itertools
import re
from collections import defaultdict
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any, ClassVar, Union

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from ..core.roofline import COUNTED_OPS
from ..errors import InputError

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
# python_function: PyTorch's Python frames; its "nn.Module: <Class>_<N>" ranges are the module hierarchy
CPU_CATS = ("cpu_op", "user_annotation", "python_function")
FLOW_CAT = "ac2g"
RECORD_PARAM_COMMS = "record_param_comms"
# top-level keys that mark a Kineto trace; parse_kineto reads the first two
META_KEYS = ("deviceProperties", "distributedInfo", "schemaVersion")

DEVICE, LAUNCH, CPU, FLOW = range(4)
GROUP_CATS = {DEVICE: DEVICE_CATS, LAUNCH: LAUNCH_CATS, CPU: CPU_CATS, FLOW: (FLOW_CAT,)}
_FLOW_START = object()  # the category a flow start ("s") reports: no JSON value can equal it
# event category -> code, numbered group by group in the order above; anything else: _OTHER
_CAT_CODE: dict[Any, int] = {c: i for i, c in enumerate((*DEVICE_CATS, *LAUNCH_CATS, *CPU_CATS, _FLOW_START))}
_OTHER = len(_CAT_CODE)
_GROUP_OF_CODE = np.array(
    [DEVICE] * len(DEVICE_CATS) + [LAUNCH] * len(LAUNCH_CATS) + [CPU] * len(CPU_CATS) + [FLOW] + [-1], dtype=np.int8
)
_FIRST_CODE = np.cumsum([0, len(DEVICE_CATS), len(LAUNCH_CATS), len(CPU_CATS)]).astype(np.int8)
_REPEAT_OTHER = itertools.repeat(_OTHER)

CHUNK_BYTES = 1 << 18  # JSON text decoded at once: its event objects stay in cache while turned to columns
_NAN = float("nan")
# the trace-event format's phases; one outside it sends its chunk to the permissive schema
_PHASES = "BEXiICbneSTpFstfPONDMVvRc()"

# Collective args as record_param_comms (PyTorch's saveNcclMeta) and Kineto write them, on the
# CPU op and, in recent PyTorch, on the NCCL kernel too: (JSON key, attribute). These are what
# parse_kineto's _comm_fields reads (collective, group, bytes); distinct sets are kept once.
COMM_KEYS: tuple[tuple[str, str], ...] = (
    ("Collective name", "collective"),
    ("Process Group Ranks", "pg_ranks"),
    ("Process Group Name", "pg_name"),
    ("Group size", "group_size"),
    ("Global rank start", "rank_start"),
    ("Global rank stride", "rank_stride"),
    ("In msg nelems", "in_nelems"),
    ("Out msg nelems", "out_nelems"),
    ("dtype", "dtype"),
)
# Per call, so columns: In/Out split size (all_to_allv splits, "[]" else); Seq, the process
# group's sequence number (PyTorch >= 2.11, kSeqNum; "seq" tolerated); Comms Id, a hash of group,
# Seq and P2P-ness equal on every rank of one collective (kCommsId); Rank, this rank in the group;
# Src Rank / Dst Rank, the peer of a recv / send (kP2pSrc / kP2pDst).
PER_CALL_KEYS: tuple[tuple[str, str], ...] = (
    ("In split size", "in_split"),
    ("Out split size", "out_split"),
    ("Seq", "seq"),
    ("seq", "seq_lower"),
    ("Comms Id", "comms_id"),
    ("Rank", "group_rank"),
    ("Src Rank", "src_rank"),
    ("Dst Rank", "dst_rank"),
)
# the CPU ops whose recorded shapes and values (record_shapes=True) carry an all-to-all's per-peer splits
# (spec §11): their "Concrete Inputs", "Input Dims" and "Input type" are kept, as JSON gave them
SPLIT_OPS = frozenset(("c10d::alltoall_base_",))
_COMM_ATTRS = tuple(a for _, a in COMM_KEYS)
_PER_CALL_ATTRS = tuple(a for _, a in PER_CALL_KEYS)
_COMM_FIELDS = attrgetter(*_COMM_ATTRS, *_PER_CALL_ATTRS)
_COMM_ABSENT = "\x00absent"  # a missing key in the permissive table key


# ---- the strict schema ----------------------------------------------------------------------------


class _Args(msgspec.Struct, frozen=True, gc=False):
    """The args parse_kineto reads, typed as Kineto writes them; UNSET = the key is absent."""

    device: int | str | UnsetType | None = UNSET
    stream: int | str | UnsetType | None = UNSET
    correlation: int = -1
    external: int = msgspec.field(default=-1, name="External id")
    bytes: float = _NAN
    collective: str | UnsetType = msgspec.field(default=UNSET, name="Collective name")
    pg_ranks: str | UnsetType = msgspec.field(default=UNSET, name="Process Group Ranks")
    pg_name: str | UnsetType = msgspec.field(default=UNSET, name="Process Group Name")
    group_size: int | UnsetType = msgspec.field(default=UNSET, name="Group size")
    rank_start: int | UnsetType = msgspec.field(default=UNSET, name="Global rank start")
    rank_stride: int | UnsetType = msgspec.field(default=UNSET, name="Global rank stride")
    in_nelems: int | UnsetType = msgspec.field(default=UNSET, name="In msg nelems")
    out_nelems: int | UnsetType = msgspec.field(default=UNSET, name="Out msg nelems")
    dtype: str | UnsetType = UNSET
    in_split: str | UnsetType = msgspec.field(default=UNSET, name="In split size")
    out_split: str | UnsetType = msgspec.field(default=UNSET, name="Out split size")
    seq: int | UnsetType = msgspec.field(default=UNSET, name="Seq")
    seq_lower: int | UnsetType = msgspec.field(default=UNSET, name="seq")
    comms_id: int | UnsetType = msgspec.field(default=UNSET, name="Comms Id")
    group_rank: int | UnsetType = msgspec.field(default=UNSET, name="Rank")
    src_rank: int | UnsetType = msgspec.field(default=UNSET, name="Src Rank")
    dst_rank: int | UnsetType = msgspec.field(default=UNSET, name="Dst Rank")
    # autograd: the op's sequence number and, on a backward op, the forward op's thread (0 on a forward op)
    sequence: int = msgspec.field(default=-1, name="Sequence number")
    fwd_thread: int = msgspec.field(default=-1, name="Fwd thread id")
    # record_shapes: kept undecoded (a view of the text), decoded only on the ops of SPLIT_OPS and those counted
    # from their shapes (core.roofline.COUNTED_OPS)
    concrete: msgspec.Raw | UnsetType = msgspec.field(default=UNSET, name="Concrete Inputs")
    input_dims: msgspec.Raw | UnsetType = msgspec.field(default=UNSET, name="Input Dims")
    input_type: msgspec.Raw | UnsetType = msgspec.field(default=UNSET, name="Input type")


_NO_ARGS = _Args()


class _Complete(msgspec.Struct, tag_field="ph", tag="X", frozen=True, gc=False):
    """A complete event (ph X): device activity, launches, CPU ops."""

    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = _NAN  # absent: NaN (no time: the row is refused by the time checks)
    dur: float = 0.0  # absent: 0 (an instant)
    args: _Args = _NO_ARGS


class _FlowStart(msgspec.Struct, tag_field="ph", tag="s", frozen=True, gc=False):
    """A flow start (ph s): an ``ac2g`` one links a launch to its kernel by ``id``."""

    flow_cat: str | None = msgspec.field(default=None, name="cat")
    id: int = -1
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = _NAN
    cat: ClassVar[object] = _FLOW_START


def _skipped(with_cat: bool) -> list[type]:
    """Empty Structs for the other phases; ``with_cat`` keeps their category (see KinetoColumns.any_device_cat)."""
    fields = [("other_cat", str | None, msgspec.field(default=None, name="cat"))] if with_cat else []
    return [
        msgspec.defstruct(
            f"_Phase{ord(ph)}", fields, tag_field="ph", tag=ph, frozen=True, gc=False, namespace={"cat": None}
        )
        for ph in _PHASES
        if ph not in "Xs"
    ]


_STRICT = msgspec.json.Decoder(list[Union[(_Complete, _FlowStart, *_skipped(False))]])  # type: ignore[misc]
_STRICT_WITH_CATS = msgspec.json.Decoder(list[Union[(_Complete, _FlowStart, *_skipped(True))]])  # type: ignore[misc]


# ---- the permissive schema: any JSON value, brought to the strict schema's types ------------------


class _LooseArgs(msgspec.Struct, frozen=True, gc=False):
    device: Any = UNSET
    stream: Any = UNSET
    correlation: Any = None
    external: Any = msgspec.field(default=None, name="External id")
    bytes: Any = None
    collective: Any = msgspec.field(default=UNSET, name="Collective name")
    pg_ranks: Any = msgspec.field(default=UNSET, name="Process Group Ranks")
    pg_name: Any = msgspec.field(default=UNSET, name="Process Group Name")
    group_size: Any = msgspec.field(default=UNSET, name="Group size")
    rank_start: Any = msgspec.field(default=UNSET, name="Global rank start")
    rank_stride: Any = msgspec.field(default=UNSET, name="Global rank stride")
    in_nelems: Any = msgspec.field(default=UNSET, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=UNSET, name="Out msg nelems")
    dtype: Any = UNSET
    in_split: Any = msgspec.field(default=UNSET, name="In split size")
    out_split: Any = msgspec.field(default=UNSET, name="Out split size")
    seq: Any = msgspec.field(default=UNSET, name="Seq")
    seq_lower: Any = msgspec.field(default=UNSET, name="seq")
    comms_id: Any = msgspec.field(default=UNSET, name="Comms Id")
    group_rank: Any = msgspec.field(default=UNSET, name="Rank")
    src_rank: Any = msgspec.field(default=UNSET, name="Src Rank")
    dst_rank: Any = msgspec.field(default=UNSET, name="Dst Rank")
    sequence: Any = msgspec.field(default=None, name="Sequence number")
    fwd_thread: Any = msgspec.field(default=None, name="Fwd thread id")
    concrete: msgspec.Raw | UnsetType = msgspec.field(default=UNSET, name="Concrete Inputs")
    input_dims: msgspec.Raw | UnsetType = msgspec.field(default=UNSET, name="Input Dims")
    input_type: msgspec.Raw | UnsetType = msgspec.field(default=UNSET, name="Input type")


class _LooseEvent(msgspec.Struct, frozen=True, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = 0
    id: Any = None
    # any JSON value; only an object is args (anything else counts as no args, {})
    args: _LooseArgs | list | str | int | float | bool | None = None


_LOOSE = msgspec.json.Decoder(list[_LooseEvent])
_SKIPPED_EVENT = _skipped(False)[0]()


def _raw_bytes(value: Any) -> bytes:
    """A Raw field's text (b"" where absent): the key a recording is decoded once by."""
    return b"" if value is UNSET else bytes(value)


def _raw_json(value: Any) -> Any:
    """A Raw field decoded (None where absent or not JSON)."""
    if value is UNSET:
        return None
    try:
        return msgspec.json.decode(value)
    except msgspec.DecodeError:
        return None


def _label(value: Any) -> Any:
    """pid/tid/device/stream: only ``str(value)`` matters downstream, and None (absent/null) is kept apart."""
    return value if value is None or type(value) in (int, str) else str(value)


def _float(value: Any) -> tuple[float, bool]:
    """(value, not-a-number) as ``np.asarray([...], float64)`` converts it: None is NaN, "1.5" is 1.5."""
    if value is None:
        return _NAN, False
    if type(value) is float:
        return value, False
    if type(value) is bool:  # JSON true/false is no time (np.asarray would make it 1.0)
        return _NAN, True
    try:
        arr = np.asarray([value], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return _NAN, True
    if arr.shape != (1,):
        return _NAN, True
    return float(arr[0]), False


def _int_or(value: Any, missing: int = -1) -> int:
    """An integer JSON value within int64, else ``missing`` (bools are not integers)."""
    return value if type(value) is int and -(1 << 63) <= value < 1 << 63 else missing


def _bytes(value: Any) -> float:
    if type(value) in (int, float):
        try:
            return float(value)
        except OverflowError:
            return _NAN
    return _NAN


def _canonical(loose: list[_LooseEvent], path: Path | None) -> tuple[list, np.ndarray, bool]:
    """The strict Structs these loosely typed events amount to; per-event bad-number bits."""
    events: list = []
    bad = np.zeros(len(loose), dtype=np.uint8)
    any_device_cat = False
    for i, e in enumerate(loose):
        try:
            hash(e.cat)
        except TypeError:  # an unhashable category (a list, an object): no event
            raise InputError(path, "traceEvents holds an entry that is not an event object") from None
        any_device_cat |= type(e.cat) is str and e.cat in DEVICE_CATS
        if e.ph == "s" and type(e.ph) is str:
            ts, ts_bad = _float(e.ts)
            bad[i] = ts_bad
            events.append(_FlowStart(e.cat, _int_or(e.id), _label(e.pid), _label(e.tid), ts))
            continue
        if not (e.ph == "X" and type(e.ph) is str):
            events.append(_SKIPPED_EVENT)
            continue
        ts, ts_bad = _float(e.ts)
        dur, dur_bad = _float(e.dur)
        bad[i] = ts_bad | (dur_bad << 1)
        a = e.args
        if isinstance(a, _LooseArgs):
            args = _Args(
                device=a.device if a.device is UNSET else _label(a.device),
                stream=a.stream if a.stream is UNSET else _label(a.stream),
                correlation=_int_or(a.correlation),
                external=_int_or(a.external),
                bytes=_bytes(a.bytes),
                sequence=_int_or(a.sequence),
                fwd_thread=_int_or(a.fwd_thread),
                concrete=a.concrete,
                input_dims=a.input_dims,
                input_type=a.input_type,
                **{f: getattr(a, f) for f in (*_COMM_ATTRS, *_PER_CALL_ATTRS)},
            )
        else:
            args = _NO_ARGS
        name = e.name if type(e.name) is str else str(e.name)
        events.append(_Complete(e.cat, name, _label(e.pid), _label(e.tid), ts, dur, args))
    return events, bad, any_device_cat


# ---- the columns ----------------------------------------------------------------------------------


class Group:
    """One category group's columns, one row per event; codes index the tables of ``KinetoColumns``.

    Every group: ``cat`` (int8, position of the event's category in ``GROUP_CATS[group]``),
    ``pid``/``tid`` (int32 into ``values``), ``ts`` (float64 µs; absent: NaN) and ``bad`` (uint8:
    bit 1 ``ts``, bit 2 ``dur`` held something that is not a number; the value is then NaN).
    Device and CPU: ``name`` (int32 into ``names``), ``dur`` (float64 µs; absent: 0), ``external``
    (int64 External id), ``comm`` (int32 into ``comm_args``, -1 none) and the per-call collective
    columns ``seq``, ``group_rank``, ``src_rank``, ``dst_rank`` (int64), ``comms_id`` (uint64, where
    ``has_comms_id``), ``in_split``/``out_split`` (int32 into ``strings``). Device also: ``device``/
    ``stream`` (int32 into ``values``; absent: the event's pid/tid), ``correlation`` (int64), ``bytes``
    (float64, NaN absent) and ``own_comm`` (bool: the kernel's args name a collective or group ranks).
    CPU also: ``sequence`` (autograd's ``Sequence number``) and ``fwd_thread`` (``Fwd thread id``: 0 on a
    forward op, the forward op's thread on a backward op). Launch: ``correlation``. Flow: ``id`` (int64).
    Integers absent or not integers are -1.
    """

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns["ts"])

    def __getattr__(self, key: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][key]
        except KeyError:
            raise AttributeError(key) from None


@dataclass
class KinetoColumns:
    """What parse_kineto needs of one Kineto trace, as typed columns (see ``Group``)."""

    meta: dict[str, Any]  # the top-level keys of META_KEYS that the document has
    names: list[str]  # name code -> event name
    values: list[Any]  # value code -> pid/tid/device/stream as JSON gave it (None: absent or null)
    comm_args: list[dict[str, Any]]  # comm code -> the COMM_KEYS those args hold, as JSON gave them
    strings: list[str]  # string code -> an In/Out split size
    # shapes code -> (Concrete Inputs, Input Dims, Input type), decoded (None absent), of an op of SPLIT_OPS or of
    # the ops counted from their shapes (core.roofline.COUNTED_OPS)
    shapes: list[tuple[Any, Any, Any]]
    device: Group  # kernel, gpu_memcpy, gpu_memset (ph X)
    launch: Group  # cuda_runtime, cuda_driver, hip_runtime, hip_driver (ph X)
    cpu: Group  # cpu_op, user_annotation, python_function (ph X)
    flow: Group  # ac2g flow starts (ph s)
    # some event (any phase) has a device category: what makes a document without META_KEYS Kineto
    # (only looked for when those keys are missing)
    any_device_cat: bool = False
    events: int = 0  # entries of traceEvents

    @property
    def is_kineto(self) -> bool:
        return any(k in self.meta for k in META_KEYS) or self.any_device_cat

    def name_array(self) -> np.ndarray:
        return np.array(self.names, dtype=object)


_PER_CALL_COLUMNS = ("comm", "seq", "comms_id", "has_comms_id", "group_rank", "src_rank", "dst_rank", "in_split",
                     "out_split")  # fmt: skip
_GROUP_COLUMNS: dict[int, tuple[str, ...]] = {
    DEVICE: ("cat", "name", "pid", "tid", "ts", "dur", "bad", "device", "stream", "correlation", "external", "bytes",
             "own_comm", *_PER_CALL_COLUMNS),
    LAUNCH: ("cat", "pid", "tid", "ts", "bad", "correlation", "name", "dur"),
    CPU: ("cat", "name", "pid", "tid", "ts", "dur", "bad", "external", "sequence", "fwd_thread", "shapes",
          *_PER_CALL_COLUMNS),
    FLOW: ("cat", "pid", "tid", "ts", "bad", "id"),
}  # fmt: skip
_DTYPES: dict[str, Any] = {
    "cat": np.int8, "bad": np.uint8, "ts": np.float64, "dur": np.float64, "bytes": np.float64, "own_comm": bool,
    "has_comms_id": bool, "comms_id": np.uint64, "name": np.int32, "pid": np.int32, "tid": np.int32,
    "device": np.int32, "stream": np.int32, "comm": np.int32, "in_split": np.int32, "out_split": np.int32,
    "shapes": np.int32,
}  # fmt: skip


# ---- decoding -------------------------------------------------------------------------------------


class _Redo(Exception):
    """A strict chunk whose values the vectorized conversion refused (e.g. an integer beyond int64)."""


class _BadCut(Exception):
    """A chunk cut where no event ends (or text that is not JSON): decode again, cut by msgspec."""


class _Interner:
    """Value -> dense code, first come first numbered; ``values`` lists them in code order."""

    def __init__(self) -> None:
        self.codes: defaultdict[Any, int] = defaultdict(itertools.count().__next__)

    def __call__(self, items: Any, n: int) -> np.ndarray:
        return np.fromiter(map(self.codes.__getitem__, items), np.int32, n)

    @property
    def values(self) -> list:
        return list(self.codes)


class _Builder:
    def __init__(self, path: Path | None, *, with_cats: bool, trusted_cuts: bool) -> None:
        self.path = path
        self.strict = _STRICT_WITH_CATS if with_cats else _STRICT
        self.with_cats = with_cats
        self.trusted_cuts = trusted_cuts  # cut by msgspec: a decode error is the text's, not the cut's
        self.names = _Interner()
        self.values = _Interner()
        self.strings = _Interner()
        self.comm_codes: dict[tuple, int] = {}
        self.comm_args: list[dict[str, Any]] = []
        self.shapes: list[tuple[Any, Any, Any]] = []
        self.shape_codes: dict[tuple[bytes, bytes, bytes], int] = {}  # each distinct recording, decoded once
        self.parts: dict[int, list[dict[str, np.ndarray]]] = {g: [] for g in _GROUP_COLUMNS}
        self.any_device_cat = False
        self.events = 0

    def _not_json(self, exc: Exception) -> Exception:
        if not self.trusted_cuts:
            return _BadCut()
        return InputError(self.path, f"not valid JSON ({exc}); is it truncated?")

    def add_chunk(self, blob: bytes | bytearray | memoryview) -> None:
        try:
            events = self.strict.decode(blob)
        except msgspec.ValidationError:
            self._add_loose(blob)
            return
        except msgspec.DecodeError as exc:
            raise self._not_json(exc) from None
        try:
            self._add(events, strict=True)
        except _Redo:
            self._add_loose(blob)

    def _add_loose(self, blob: bytes | bytearray | memoryview) -> None:
        try:
            loose = _LOOSE.decode(blob)
        except msgspec.ValidationError as exc:
            if "Expected `object`" in str(exc):
                raise InputError(self.path, "traceEvents holds an entry that is not an event object") from None
            raise InputError(self.path, f"not valid JSON ({exc})") from None
        except msgspec.DecodeError as exc:
            raise self._not_json(exc) from None
        events, bad, any_device_cat = _canonical(loose, self.path)
        self.any_device_cat |= any_device_cat
        self._add(events, strict=False, bad=bad, loose=True)

    def _add(self, events: list, *, strict: bool, bad: np.ndarray | None = None, loose: bool = False) -> None:
        n = len(events)
        if not n:
            return
        # one list comprehension per field: far cheaper than a tuple per event
        code = np.fromiter(map(_CAT_CODE.get, [e.cat for e in events], _REPEAT_OTHER), np.int8, n)
        if self.with_cats and not loose:
            self.any_device_cat |= bool((code < len(DEVICE_CATS)).any()) or any(
                getattr(e, "other_cat", None) in DEVICE_CATS for e in events
            )
        group = _GROUP_OF_CODE[code]
        wanted = np.flatnonzero(group >= 0)
        if not wanted.size:
            self.events += n
            return
        every = np.fromiter(events, object, n)
        parts: dict[int, dict] = {}  # kept only when every group converts (a _Redo decodes the chunk again)
        for g in _GROUP_COLUMNS:
            rows = wanted[group[wanted] == g]
            if not rows.size:
                continue
            chosen = every[rows].tolist()
            if g == FLOW:  # flow starts other than ac2g (fwdbwd...) link nothing read here
                ac2g = np.fromiter([e.flow_cat == FLOW_CAT for e in chosen], bool, len(chosen))
                if not ac2g.all():
                    rows = rows[ac2g]
                    chosen = every[rows].tolist()
                if not rows.size:
                    continue
            parts[g] = self._group(g, chosen, code[rows] - _FIRST_CODE[g], None if bad is None else bad[rows], strict)
        for g, part in parts.items():
            self.parts[g].append(part)
        self.events += n

    def _group(self, g: int, events: list, cat: np.ndarray, bad: np.ndarray | None, strict: bool) -> dict:
        m = len(events)
        pid = self.values([e.pid for e in events], m)
        tid = self.values([e.tid for e in events], m)
        out: dict[str, np.ndarray] = {
            "cat": cat.astype(np.int8),
            "pid": pid,
            "tid": tid,
            "ts": self._floats([e.ts for e in events], m),
            "bad": np.zeros(m, dtype=np.uint8) if bad is None else bad & (3 if g in (DEVICE, CPU) else 1),
        }
        if g == FLOW:
            out["id"] = self._ints([e.id for e in events], m)
            return out
        args = [e.args for e in events]
        if g == LAUNCH:
            out["correlation"] = self._ints([a.correlation for a in args], m)
            # the runtime call's name and length: the host synchronizations the §9 replay moves launches with
            out["name"] = self.names([e.name for e in events], m)
            out["dur"] = self._floats([e.dur for e in events], m)
            return out
        out["name"] = self.names([e.name for e in events], m)
        out["dur"] = self._floats([e.dur for e in events], m)
        out["external"] = self._ints([a.external for a in args], m)
        if g == DEVICE:
            out["device"] = self._or_own(self.values([a.device for a in args], m), pid)
            out["stream"] = self._or_own(self.values([a.stream for a in args], m), tid)
            out["correlation"] = self._ints([a.correlation for a in args], m)
            out["bytes"] = self._floats([a.bytes for a in args], m)
            own = [a.collective is not UNSET or a.pg_ranks is not UNSET for a in args]
            out["own_comm"] = np.array(own, dtype=bool)
            with_comm = out["own_comm"] | np.array(
                [a.seq is not UNSET or a.comms_id is not UNSET or a.seq_lower is not UNSET for a in args], dtype=bool
            )
        else:
            out["sequence"] = self._ints([a.sequence for a in args], m)
            out["fwd_thread"] = self._ints([a.fwd_thread for a in args], m)
            rpc = self.names.codes.get(RECORD_PARAM_COMMS)
            with_comm = out["name"] == rpc if rpc is not None else np.zeros(m, dtype=bool)
            out["shapes"] = self._shapes(out["name"], args)
        out.update(self._comm(args, with_comm, strict=strict))
        return out

    def _shapes(self, names: np.ndarray, args: list[_Args]) -> np.ndarray:
        """Per row, a code into ``shapes`` of its recorded inputs (Concrete Inputs, Input Dims, Input type, decoded)
        where it is an op of SPLIT_OPS (an all-to-all's splits) or of the ops whose FLOPs moeprof counts from their
        shapes (core.roofline.COUNTED_OPS); -1 elsewhere. Each distinct recording is decoded once."""
        out = np.full(len(args), -1, dtype=np.int32)
        codes = [c for op in (*SPLIT_OPS, *COUNTED_OPS) if (c := self.names.codes.get(op)) is not None]
        if not codes:
            return out
        wanted = np.zeros(len(self.names.codes) + 1, dtype=bool)  # by name code: a lookup, not a sort per chunk
        wanted[codes] = True
        for i in np.flatnonzero(wanted[names]).tolist():
            a = args[i]
            key = (_raw_bytes(a.concrete), _raw_bytes(a.input_dims), _raw_bytes(a.input_type))
            code = self.shape_codes.get(key)
            if code is None:
                code = self.shape_codes[key] = len(self.shapes)
                self.shapes.append((_raw_json(a.concrete), _raw_json(a.input_dims), _raw_json(a.input_type)))
            out[i] = code
        return out

    def _or_own(self, codes: np.ndarray, own: np.ndarray) -> np.ndarray:
        """device/stream codes, the event's own pid/tid code where the arg is absent."""
        absent = self.values.codes.get(UNSET)
        return codes if absent is None else np.where(codes == absent, own, codes).astype(np.int32)

    @staticmethod
    def _ints(values: list, m: int) -> np.ndarray:
        try:
            return np.fromiter(values, np.int64, m)
        except (OverflowError, TypeError, ValueError):
            raise _Redo from None

    @staticmethod
    def _floats(values: list, m: int) -> np.ndarray:
        try:
            return np.fromiter(values, np.float64, m)
        except (OverflowError, TypeError, ValueError):
            raise _Redo from None

    def _comm(self, args: list[_Args], with_comm: np.ndarray, *, strict: bool) -> dict[str, np.ndarray]:
        m = len(args)
        out = {c: np.full(m, -1, dtype=_DTYPES.get(c, np.int64)) for c in _PER_CALL_COLUMNS if "comms_id" not in c}
        out["comms_id"] = np.zeros(m, dtype=np.uint64)
        out["has_comms_id"] = np.zeros(m, dtype=bool)
        rows = np.flatnonzero(with_comm)
        if not rows.size:
            return out
        k = len(_COMM_ATTRS)
        calls = [_COMM_FIELDS(args[i]) for i in rows.tolist()]
        # strict values are str/int/UNSET, exact as a key; any other JSON value is keyed by its str()
        keys = [c[:k] for c in calls] if strict else [tuple(_COMM_ABSENT if v is UNSET else str(v) for v in c[:k])
                                                      for c in calls]  # fmt: skip
        codes = []
        for key, call in zip(keys, calls):
            code = self.comm_codes.get(key)
            if code is None:
                code = self.comm_codes[key] = len(self.comm_args)
                self.comm_args.append({name: v for (name, _), v in zip(COMM_KEYS, call) if v is not UNSET})
            codes.append(code)
        out["comm"][rows] = codes
        in_split, out_split, seq, seq_lower, comms_id, group_rank, src, dst = zip(*(c[k:] for c in calls))
        for column, values in (("in_split", in_split), ("out_split", out_split)):
            out[column][rows] = [-1 if v is UNSET else self.strings.codes[v if type(v) is str else str(v)]
                                 for v in values]  # fmt: skip
        out["seq"][rows] = [_int_or(a if a is not UNSET else b) for a, b in zip(seq, seq_lower)]
        out["group_rank"][rows] = [_int_or(v) for v in group_rank]
        out["src_rank"][rows] = [_int_or(v) for v in src]
        out["dst_rank"][rows] = [_int_or(v) for v in dst]
        has_id = np.array([type(v) is int and 0 <= v < 1 << 64 for v in comms_id], dtype=bool)
        out["has_comms_id"][rows] = has_id
        out["comms_id"][rows[has_id]] = np.array([v for v, ok in zip(comms_id, has_id) if ok], dtype=np.uint64)
        return out

    def result(self, meta: dict[str, Any]) -> KinetoColumns:
        groups = {}
        for g, columns in _GROUP_COLUMNS.items():
            parts = self.parts[g]
            if parts:
                cols = {c: np.concatenate([p[c] for p in parts]) for c in columns}
            else:
                cols = {c: np.zeros(0, dtype=_DTYPES.get(c, np.int64)) for c in columns}
            if len(cols["cat"]) and (np.diff(cols["cat"]) < 0).any():  # category order (module docstring)
                order = np.argsort(cols["cat"], kind="stable")
                cols = {c: v[order] for c, v in cols.items()}
            groups[g] = Group(cols)
        return KinetoColumns(
            meta=meta,
            names=self.names.values,
            values=self.values.values,
            comm_args=self.comm_args,
            strings=self.strings.values,
            shapes=self.shapes,
            device=groups[DEVICE],
            launch=groups[LAUNCH],
            cpu=groups[CPU],
            flow=groups[FLOW],
            any_device_cat=self.any_device_cat,
            events=self.events,
        )


# ---- entry points ---------------------------------------------------------------------------------


class _Top(msgspec.Struct, gc=False):
    traceEvents: msgspec.Raw | UnsetType = UNSET
    deviceProperties: Any = UNSET
    distributedInfo: Any = UNSET
    schemaVersion: Any = UNSET


_TOP = msgspec.json.Decoder(_Top)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
# "}", ",", "{" and a key: between two objects. Inside a string a quote is escaped, so this only
# matches there where a string ends in "},{" and the next string starts with ":"; a cut at such a
# place (or between objects of a nested array) makes its chunk fail to decode, never misread
_BETWEEN_EVENTS = re.compile(rb'\}\s*,\s*\{\s*"[^"\\]*"\s*:')
_NO_TRACE_EVENTS = "JSON without a traceEvents list: not a Chrome/Kineto trace"


def _address(buffer: Any) -> int:
    return np.frombuffer(buffer, np.uint8).ctypes.data if len(memoryview(buffer)) else 0


def _cut_chunks(text: memoryview, start: int, stop: int) -> list[tuple[int, int]]:
    """Byte ranges of the events array ``text[start:stop]`` (``[`` ... ``]``), each ending where an object
    ends, a few MB apart. A cut inside a string or a nested array makes that chunk fail to decode."""
    cuts = [start]  # the "[", then the commas cut at
    at = start + CHUNK_BYTES
    while at < stop:
        m = _BETWEEN_EVENTS.search(text, at, stop)
        if m is None:
            break
        comma = m.start() + bytes(text[m.start() : m.end()]).index(b",")
        cuts.append(comma)
        at = comma + CHUNK_BYTES
    cuts.append(stop - 1)  # the "]"
    return [(a + 1, b) for a, b in itertools.pairwise(cuts)]


def decode_columns(raw: bytes | bytearray | memoryview, path: Path | None = None) -> KinetoColumns:
    """Decode a Kineto JSON document (an object with ``traceEvents``, or a bare event array) into columns.

    Raises InputError for text that is not JSON ("not valid JSON ... truncated?"), JSON without a
    ``traceEvents`` list, and entries of it that are not objects. MemoryError is left to the caller.
    """
    text = memoryview(raw).cast("B")
    head = bytes(text[:4096]).lstrip(b" \t\r\n")[:1]
    meta: dict[str, Any] = {}
    try:
        if head == b"{":
            top = _TOP.decode(text)
            if top.traceEvents is UNSET or bytes(memoryview(top.traceEvents)[:1]) != b"[":
                raise InputError(path, _NO_TRACE_EVENTS)
            meta = {k: getattr(top, k) for k in META_KEYS if getattr(top, k) is not UNSET}
            events_raw: Any = top.traceEvents
            start = _address(events_raw) - _address(text)
            stop = start + len(memoryview(events_raw))
            if not 0 <= start < stop <= len(text):  # not a view of the text after all: let msgspec cut
                start = stop = -1
        elif head == b"[":  # the bare-array form of the trace-event format
            start = min(len(text), 4096) - len(bytes(text[:4096]).lstrip(b" \t\r\n"))
            stop = _stop_of(text)
            if bytes(text[stop - 1 : stop]) != b"]":  # not an array's end: let msgspec say what it is
                start = stop = -1
        else:
            msgspec.json.decode(text)  # valid JSON that is neither object nor array, or not JSON
            raise InputError(path, _NO_TRACE_EVENTS)
    except msgspec.DecodeError as exc:  # ValidationError too: a number out of range
        raise InputError(path, f"not valid JSON ({exc}); is it truncated?") from None

    with_cats = not meta  # without the metadata keys, a device category anywhere makes it Kineto
    # millions of short-lived objects and no cycles: the cyclic GC would only rescan them
    enabled = gc.isenabled()
    gc.disable()
    try:
        if start >= 0:
            builder = _Builder(path, with_cats=with_cats, trusted_cuts=False)
            try:
                for a, b in _cut_chunks(text, start, stop):
                    builder.add_chunk(b"".join((b"[", text[a:b], b"]")))
                return builder.result(meta)
            except _BadCut:
                pass
        # cut where msgspec says each event lies (one Raw view per event: slower, never wrong)
        builder = _Builder(path, with_cats=with_cats, trusted_cuts=True)
        try:
            raws = _RAW_LIST.decode(events_raw if head == b"{" else text)
        except msgspec.DecodeError as exc:
            raise InputError(path, f"not valid JSON ({exc}); is it truncated?") from None
        per_chunk = max(1, CHUNK_BYTES // 200)
        for i in range(0, len(raws), per_chunk):
            builder.add_chunk(b"".join((b"[", b",".join(raws[i : i + per_chunk]), b"]")))
        return builder.result(meta)
    finally:
        if enabled:
            gc.enable()


def _stop_of(text: memoryview) -> int:
    """One past the last non-blank byte."""
    end = len(text)
    while end > 0:
        begin = max(0, end - 4096)
        tail = bytes(text[begin:end]).rstrip(b" \t\r\n")
        if tail:
            return begin + len(tail)
        end = begin
    return 0


def columns_of_document(doc: dict, path: Path | None = None) -> KinetoColumns:
    """The columns of an already decoded document (a dict as json/orjson give it), via its JSON text."""
    import json

    import orjson

    try:
        raw = orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # e.g. an integer beyond 64 bits, which Python's json reads and writes
        try:
            raw = json.dumps(doc).encode()
        except (TypeError, ValueError) as exc:
            raise InputError(path, f"not a JSON document ({exc})") from None
    return decode_columns(raw, path)
