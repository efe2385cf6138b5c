"""Kineto JSON bytes to typed per-category numpy columns, in one decoding pass.

Why not dicts: a Kineto trace holds millions of events, decoded into Python
dicts they take ~8x the file, and ``parse_kineto`` reads only a dozen fields of
four categories. msgspec decodes each event into a Struct that declares just
those fields (the others are skipped in C). The ``traceEvents`` array is first
cut into ``Raw`` slices (views, no copy), then decoded a chunk at a time and
turned into columns, so only one chunk of event objects is ever alive: peak
memory is the JSON text plus the columns.

Two decoders share one set of field names:

* the *strict* one types every field as Kineto writes it (names are strings,
  ids are integers, times are numbers). Values of those types convert to
  columns with vectorized numpy, exactly as the dict reader converted them;
* a chunk that does not fit (a string ``ts``, a ``null`` id, ``args`` that is
  not an object...) is decoded again by the *permissive* one, whose fields take
  any JSON value and are brought, one by one, to what the dict reader made of
  them (``str(name)``, ``np.asarray(ts, float)``, ints else -1...). Odd input
  costs time, never correctness.

Columns keep the event order of the dict reader: within a category group,
categories in the order they are listed (kernels, then memcpys, then memsets),
then file order.
"""

from __future__ import annotations

import gc
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from ..errors import InputError

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
CPU_CATS = ("cpu_op", "user_annotation")
FLOW_CAT = "ac2g"
RECORD_PARAM_COMMS = "record_param_comms"
# top-level keys that mark a Kineto trace (and the two parse_kineto reads)
META_KEYS = ("deviceProperties", "distributedInfo", "schemaVersion")

# category -> code; the code order within a group is the dict reader's category order
_CAT_CODE: dict[Any, int] = {c: i for i, c in enumerate((*DEVICE_CATS, *LAUNCH_CATS, *CPU_CATS, FLOW_CAT))}
_OTHER_CAT = len(_CAT_CODE)
DEVICE, LAUNCH, CPU, FLOW = range(4)
# group of each category code (-1: not read); the phase each group is read with
_GROUP_OF_CAT = np.array([DEVICE] * 3 + [LAUNCH] * 4 + [CPU] * 2 + [FLOW] + [-1], dtype=np.int8)
_FIRST_CAT = np.array([0, 3, 7, 9], dtype=np.int8)  # first category code of each group
_PH_OF_GROUP_NAME = ("X", "X", "X", "s")  # complete events, except flow starts
_REPEAT_OTHER = itertools.repeat(_OTHER_CAT)

CHUNK_EVENTS = 1 << 15  # events decoded at once: bounds the live Python objects to a few MB
_NAN = float("nan")

# Collective args as record_param_comms (torch/csrc/profiler/util.cpp, saveNcclMeta) and Kineto write
# them, on the CPU op and, in recent PyTorch, on the NCCL kernel too: (JSON key, attribute).
# The first nine are what parse_kineto's _comm_fields reads (collective, group, bytes).
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
# per call, so kept as columns rather than in the shared table of distinct args:
# In/Out split size (all_to_allv splits, "[]" else), Seq (the process group's sequence number, recent
# PyTorch; "seq" tolerated), Comms Id (a hash of group, Seq and P2P-ness, equal on every rank of one
# collective), Rank (this rank within the group) and Src Rank / Dst Rank (the peer of a recv / send)
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
_COMM_ATTRS = tuple(a for _, a in COMM_KEYS)
_PER_CALL_ATTRS = tuple(a for _, a in PER_CALL_KEYS)
_COMM_ABSENT = "\x00absent"  # stands for a missing key in the permissive table key


# ---- the two schemas ------------------------------------------------------------------------------


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


_NO_ARGS = _Args()


class _Event(msgspec.Struct, frozen=True, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = _NAN  # absent: NaN, as the dict reader's float(None)
    dur: float = 0.0  # absent: 0, as the dict reader's e.get("dur", 0)
    id: int = -1
    args: _Args = _NO_ARGS


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


class _LooseEvent(msgspec.Struct, frozen=True, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = 0
    id: Any = None
    # any JSON value; only an object is args (the dict reader took anything else as {})
    args: _LooseArgs | list | str | int | float | bool | None = None


class _Top(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] | UnsetType = UNSET
    deviceProperties: Any = UNSET
    distributedInfo: Any = UNSET
    schemaVersion: Any = UNSET


_TOP = msgspec.json.Decoder(_Top)
_BARE = msgspec.json.Decoder(list[msgspec.Raw])
_STRICT = msgspec.json.Decoder(list[_Event])
_LOOSE = msgspec.json.Decoder(list[_LooseEvent])
_COMM_FIELDS = attrgetter(*_COMM_ATTRS, *_PER_CALL_ATTRS)


# ---- the columns ----------------------------------------------------------------------------------


@dataclass
class Group:
    """One category group's columns, one row per event. Codes index the tables of ``KinetoColumns``.

    ``cat``: category code within the group (its position in the group's category list).
    ``name``: into ``names``; ``pid``/``tid``: into ``values`` (the JSON value, None = absent or null).
    ``ts``/``dur``: µs as JSON gave them (ts absent: NaN; dur absent: 0). ``bad``: bit 1 = ``ts``,
    bit 2 = ``dur`` held something that is not a number (then NaN here).
    ``correlation``/``external``/``id``: int64, -1 absent or not an integer.
    Device events also: ``device``/``stream`` (into ``values``; absent: the event's pid/tid),
    ``bytes`` (float64, NaN absent), ``own_comm`` (the kernel carries a collective name or group ranks).
    Device and CPU events: ``comm`` (into ``comm_args``, -1 none) and the per-call collective columns:
    ``seq``, ``group_rank``, ``src_rank``, ``dst_rank`` (int64, -1 absent), ``comms_id`` (uint64, valid
    where ``has_comms_id``), ``in_split``/``out_split`` (into ``strings``, -1 absent).
    """

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["ts"])

    def __getattr__(self, key: str) -> np.ndarray:
        try:
            return self.columns[key]
        except KeyError:
            raise AttributeError(key) from None


@dataclass
class KinetoColumns:
    """What parse_kineto needs of one Kineto trace, as typed columns (see ``Group``)."""

    meta: dict[str, Any]  # the top-level keys of META_KEYS that the file has
    names: list[str]  # name code -> event name
    values: list[Any]  # value code -> pid/tid/device/stream as JSON gave it (None: absent or null)
    comm_args: list[dict[str, Any]]  # comm code -> the COMM_KEYS present in those args, as JSON gave them
    strings: list[str]  # string code -> In/Out split size
    device: Group  # kernel, gpu_memcpy, gpu_memset (ph X)
    launch: Group  # cuda_runtime, cuda_driver, hip_runtime, hip_driver (ph X)
    cpu: Group  # cpu_op, user_annotation (ph X)
    flow: Group  # ac2g flow starts (ph s)
    any_device_cat: bool = False  # some event (any ph) has a device category: a Kineto trace without metadata
    events: int = 0  # entries of traceEvents

    @property
    def is_kineto(self) -> bool:
        return any(k in self.meta for k in META_KEYS) or self.any_device_cat

    def name_array(self) -> np.ndarray:
        return np.array(self.names, dtype=object)


_INT_COLUMNS = ("correlation", "external", "id", "seq", "group_rank", "src_rank", "dst_rank")
_CODE_COLUMNS = ("name", "pid", "tid", "device", "stream", "comm", "in_split", "out_split")
_GROUP_COLUMNS: dict[int, tuple[str, ...]] = {
    DEVICE: (
        "cat",
        "name",
        "pid",
        "tid",
        "ts",
        "dur",
        "bad",
        "device",
        "stream",
        "correlation",
        "external",
        "bytes",
        "own_comm",
        "comm",
        "seq",
        "comms_id",
        "has_comms_id",
        "group_rank",
        "src_rank",
        "dst_rank",
        "in_split",
        "out_split",
    ),
    LAUNCH: ("cat", "pid", "tid", "ts", "bad", "correlation"),
    CPU: (
        "cat",
        "name",
        "pid",
        "tid",
        "ts",
        "dur",
        "bad",
        "external",
        "comm",
        "seq",
        "comms_id",
        "has_comms_id",
        "group_rank",
        "src_rank",
        "dst_rank",
        "in_split",
        "out_split",
    ),
    FLOW: ("cat", "pid", "tid", "ts", "bad", "id"),
}


def _empty(column: str) -> np.ndarray:
    if column in ("cat", "bad"):
        return np.zeros(0, dtype=np.int8 if column == "cat" else np.uint8)
    if column in ("ts", "dur", "bytes"):
        return np.zeros(0, dtype=np.float64)
    if column in ("own_comm", "has_comms_id"):
        return np.zeros(0, dtype=bool)
    if column == "comms_id":
        return np.zeros(0, dtype=np.uint64)
    if column in _CODE_COLUMNS:
        return np.zeros(0, dtype=np.int32)
    return np.zeros(0, dtype=np.int64)


# ---- decoding -------------------------------------------------------------------------------------


class _Redo(Exception):
    """A strict chunk whose values the vectorized conversion refused (e.g. an int beyond int64)."""


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
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.names = _Interner()
        self.values = _Interner()
        self.strings = _Interner()
        self.comm_codes: dict[tuple, int] = {}
        self.comm_args: list[dict[str, Any]] = []
        self.parts: dict[int, list[dict[str, np.ndarray]]] = {g: [] for g in _GROUP_COLUMNS}
        self.any_device_cat = False
        self.events = 0

    # -- per chunk

    def add_chunk(self, blob: bytes | bytearray | memoryview) -> None:
        try:
            events = _STRICT.decode(blob)
        except msgspec.ValidationError:
            self._add_loose(blob)
            return
        except msgspec.DecodeError as exc:
            raise InputError(self.path, f"not valid JSON ({exc}); is it truncated?") from None
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
            raise InputError(self.path, f"not valid JSON ({exc}); is it truncated?") from None
        events, bad = _canonical(loose)
        self._add(events, strict=False, bad=bad)

    def _add(self, events: Sequence[_Event], *, strict: bool, bad: np.ndarray | None = None) -> None:
        n = len(events)
        self.events += n
        if not n:
            return
        # one list comprehension per field: far cheaper than a tuple per event
        try:
            cat_code = np.fromiter(map(_CAT_CODE.get, [e.cat for e in events], _REPEAT_OTHER), np.int8, n)
        except TypeError:  # an unhashable category: the dict reader failed the same way
            raise InputError(self.path, "traceEvents holds an entry that is not an event object") from None
        self.any_device_cat |= bool((cat_code < len(DEVICE_CATS)).any())
        group = _GROUP_OF_CAT[cat_code]
        wanted = np.flatnonzero(group >= 0)
        if not wanted.size:
            return
        every = np.fromiter(events, object, n)
        for g in _GROUP_COLUMNS:
            rows = wanted[group[wanted] == g]
            if not rows.size:
                continue
            chosen = every[rows].tolist()
            phase = _PH_OF_GROUP_NAME[g]
            keep = np.fromiter([e.ph == phase for e in chosen], bool, len(chosen))
            if not keep.all():
                rows = rows[keep]
                chosen = every[rows].tolist()
            if rows.size:
                self.parts[g].append(
                    self._group(g, chosen, cat_code[rows], None if bad is None else bad[rows], strict=strict)
                )

    def _group(
        self, g: int, events: list[_Event], cat_code: np.ndarray, bad: np.ndarray | None, *, strict: bool
    ) -> dict[str, np.ndarray]:
        m = len(events)
        pids = [e.pid for e in events]
        tids = [e.tid for e in events]
        try:
            ts = np.fromiter([e.ts for e in events], np.float64, m)
        except (OverflowError, TypeError, ValueError):
            raise _Redo from None
        out: dict[str, np.ndarray] = {
            "cat": (cat_code - _FIRST_CAT[g]).astype(np.int8),
            "pid": self.values(pids, m),
            "tid": self.values(tids, m),
            "ts": ts,
            "bad": np.zeros(m, dtype=np.uint8) if bad is None else bad & (1 if g in (LAUNCH, FLOW) else 3),
        }
        if g == FLOW:
            out["id"] = self._ints([e.id for e in events], m)
            return out
        args = [e.args for e in events]
        if g == LAUNCH:
            out["correlation"] = self._ints([a.correlation for a in args], m)
            return out
        out["name"] = self.names([e.name for e in events], m)
        try:
            out["dur"] = np.fromiter([e.dur for e in events], np.float64, m)
        except (OverflowError, TypeError, ValueError):
            raise _Redo from None
        if g == DEVICE:
            # an absent device/stream arg falls back to the event's pid/tid (a present null stays null)
            out["device"] = self.values(map(_or_else, [a.device for a in args], pids), m)
            out["stream"] = self.values(map(_or_else, [a.stream for a in args], tids), m)
            out["correlation"] = self._ints([a.correlation for a in args], m)
            out["external"] = self._ints([a.external for a in args], m)
            try:
                out["bytes"] = np.fromiter([a.bytes for a in args], np.float64, m)
            except (OverflowError, TypeError, ValueError):
                raise _Redo from None
            own = np.fromiter(map(_present2, [a.collective for a in args], [a.pg_ranks for a in args]), bool, m)
            out["own_comm"] = own
            with_comm = own | np.fromiter(map(_present2, [a.seq for a in args], [a.comms_id for a in args]), bool, m)
        else:
            out["external"] = self._ints([a.external for a in args], m)
            rpc = self.names.codes.get(RECORD_PARAM_COMMS)
            with_comm = out["name"] == rpc if rpc is not None else np.zeros(m, dtype=bool)
        out.update(self._comm(args, with_comm, strict=strict))
        return out

    def _ints(self, values: Any, m: int) -> np.ndarray:
        try:
            return np.fromiter(values, np.int64, m)
        except (OverflowError, TypeError, ValueError):
            raise _Redo from None

    def _comm(self, args: list[_Args], with_comm: np.ndarray, *, strict: bool) -> dict[str, np.ndarray]:
        m = len(args)
        out = {
            "comm": np.full(m, -1, dtype=np.int32),
            "seq": np.full(m, -1, dtype=np.int64),
            "comms_id": np.zeros(m, dtype=np.uint64),
            "has_comms_id": np.zeros(m, dtype=bool),
            "group_rank": np.full(m, -1, dtype=np.int64),
            "src_rank": np.full(m, -1, dtype=np.int64),
            "dst_rank": np.full(m, -1, dtype=np.int64),
            "in_split": np.full(m, -1, dtype=np.int32),
            "out_split": np.full(m, -1, dtype=np.int32),
        }
        rows = np.flatnonzero(with_comm)
        if not rows.size:
            return out
        k = len(_COMM_ATTRS)
        for i in rows.tolist():
            vals = _COMM_FIELDS(args[i])
            table_key = vals[:k] if strict else tuple(_COMM_ABSENT if v is UNSET else str(v) for v in vals[:k])
            code = self.comm_codes.get(table_key)
            if code is None:
                code = self.comm_codes[table_key] = len(self.comm_args)
                self.comm_args.append({key: v for (key, _), v in zip(COMM_KEYS, vals) if v is not UNSET})
            out["comm"][i] = code
            in_split, out_split, seq, seq_lower, comms_id, group_rank, src, dst = vals[k:]
            if in_split is not UNSET:
                out["in_split"][i] = self.strings.codes[in_split if strict else str(in_split)]
            if out_split is not UNSET:
                out["out_split"][i] = self.strings.codes[out_split if strict else str(out_split)]
            out["seq"][i] = _int_or(seq if seq is not UNSET else seq_lower)
            out["group_rank"][i] = _int_or(group_rank)
            out["src_rank"][i] = _int_or(src)
            out["dst_rank"][i] = _int_or(dst)
            if type(comms_id) is int and 0 <= comms_id < 1 << 64:
                out["comms_id"][i] = comms_id
                out["has_comms_id"][i] = True
        return out

    # -- result

    def result(self, meta: dict[str, Any]) -> KinetoColumns:
        groups = {}
        for g, columns in _GROUP_COLUMNS.items():
            parts = self.parts[g]
            if parts:
                cols = {c: np.concatenate([p[c] for p in parts]) for c in columns}
            else:
                cols = {c: _empty(c) for c in columns}
            # the dict reader's order: by category, then file order
            if len(cols["cat"]) and (np.diff(cols["cat"]) < 0).any():
                order = np.argsort(cols["cat"], kind="stable")
                cols = {c: v[order] for c, v in cols.items()}
            groups[g] = Group(cols)
        return KinetoColumns(
            meta=meta,
            names=[n if type(n) is str else str(n) for n in self.names.values],
            values=self.values.values,
            comm_args=self.comm_args,
            strings=self.strings.values,
            device=groups[DEVICE],
            launch=groups[LAUNCH],
            cpu=groups[CPU],
            flow=groups[FLOW],
            any_device_cat=self.any_device_cat,
            events=self.events,
        )


def _or_else(value: Any, fallback: Any) -> Any:
    return fallback if value is UNSET else value


def _present2(a: Any, b: Any) -> bool:
    return a is not UNSET or b is not UNSET


def _int_or(value: Any, missing: int = -1) -> int:
    """An integer JSON value within int64, else ``missing`` (bools are not integers)."""
    return value if type(value) is int and -(1 << 63) <= value < 1 << 63 else missing


# ---- the permissive path: bring each value to what the dict reader made of it --------------------


def _label(value: Any) -> Any:
    """pid/tid/device/stream: only str(value) matters downstream, and None (absent/null) is kept apart."""
    return value if value is None or type(value) in (int, str) else str(value)


def _float(value: Any) -> tuple[float, bool]:
    """(value, not-a-number) as ``np.asarray([...], float64)`` converts it: None is NaN, "1.5" is 1.5."""
    if value is None:
        return _NAN, False
    if type(value) is float:
        return value, False
    try:
        arr = np.asarray([value], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return _NAN, True
    if arr.shape != (1,):
        return _NAN, True
    return float(arr[0]), False


def _bytes(value: Any) -> float:
    if type(value) in (int, float):
        try:
            return float(value)
        except OverflowError:
            return _NAN
    return _NAN


def _canonical(loose: list[_LooseEvent]) -> tuple[list[_Event], np.ndarray]:
    events = []
    bad = np.zeros(len(loose), dtype=np.uint8)
    for i, e in enumerate(loose):
        ts, ts_bad = _float(e.ts)
        dur, dur_bad = _float(e.dur)
        if ts_bad or dur_bad:
            bad[i] = ts_bad | (dur_bad << 1)
        a = e.args
        if isinstance(a, _LooseArgs):
            args = _Args(
                device=a.device if a.device is UNSET else _label(a.device),
                stream=a.stream if a.stream is UNSET else _label(a.stream),
                correlation=_int_or(a.correlation),
                external=_int_or(a.external),
                bytes=_bytes(a.bytes),
                **{f: getattr(a, f) for f in (*_COMM_ATTRS, *_PER_CALL_ATTRS)},
            )
        else:
            args = _NO_ARGS
        events.append(
            _Event(
                ph=e.ph if type(e.ph) is str else None,
                cat=e.cat,
                name=e.name if type(e.name) is str else str(e.name),
                pid=_label(e.pid),
                tid=_label(e.tid),
                ts=ts,
                dur=dur,
                id=_int_or(e.id),
                args=args,
            )
        )
    return events, bad


# ---- entry points ---------------------------------------------------------------------------------


def _first_byte(raw: bytes | bytearray | memoryview) -> bytes:
    return bytes(memoryview(raw)[:4096]).lstrip(b" \t\r\n")[:1]


def decode_columns(raw: bytes | bytearray | memoryview, path: Path | None = None) -> KinetoColumns:
    """Decode a Kineto JSON document (object with ``traceEvents``, or a bare event array) into columns.

    Raises InputError for text that is not JSON ("not valid JSON ... truncated?"), JSON without a
    ``traceEvents`` list, and entries of it that are not objects; MemoryError is left to the caller.
    """
    first = _first_byte(raw)
    meta: dict[str, Any] = {}
    try:
        if first == b"[":
            raws = _BARE.decode(raw)
        elif first == b"{":
            top = _TOP.decode(raw)
            if top.traceEvents is UNSET:
                raise InputError(path, "JSON without a traceEvents list: not a Chrome/Kineto trace")
            raws = top.traceEvents
            meta = {k: getattr(top, k) for k in META_KEYS if getattr(top, k) is not UNSET}
        else:
            msgspec.json.decode(raw)  # valid JSON that is neither object nor array, or not JSON
            raise InputError(path, "JSON without a traceEvents list: not a Chrome/Kineto trace")
    except msgspec.ValidationError as exc:
        if "`$.traceEvents`" in str(exc):
            raise InputError(path, "JSON without a traceEvents list: not a Chrome/Kineto trace") from None
        raise InputError(path, f"not valid JSON ({exc})") from None
    except msgspec.DecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc}); is it truncated?") from None
    builder = _Builder(path)
    # millions of short-lived objects and no cycles: the cyclic GC would only rescan them
    enabled = gc.isenabled()
    gc.disable()
    try:
        for start in range(0, len(raws), CHUNK_EVENTS):
            builder.add_chunk(b"[" + b",".join(raws[start : start + CHUNK_EVENTS]) + b"]")
        del raws
        return builder.result(meta)
    finally:
        if enabled:
            gc.enable()


def columns_of_document(doc: dict, path: Path | None = None) -> KinetoColumns:
    """The columns of an already decoded document (a dict as json/orjson give it), via its JSON text."""
    import orjson

    try:
        raw = orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise InputError(path, f"not a JSON document ({exc})") from None
    return decode_columns(raw, path)
