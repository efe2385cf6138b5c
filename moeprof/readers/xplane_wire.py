"""XPlane (``.xplane.pb``) decoded from the protobuf wire format straight into numpy columns.

jaxlib's ``ProfileData`` parses the whole XSpace into C++ messages and hands
Python one object per event and per stat; at millions of events that walk
is the cost of reading a trace. Here the bytes are decoded column-wise,
without a Python object per event:

* the few top-level fields (planes, host names), a plane's fields (lines and
  metadata entries) and a line's header fields are walked in Python;
* a plane's metadata maps (event and stat metadata: names, metadata stats) are
  decoded like events, entry by entry in lockstep (the protobuf runtime is
  never imported: loading it and iterating a map of tens of thousands of
  interned stat strings cost more than decoding the rest of a small trace);
  each field last set wins and the metadata's string fields are checked as
  UTF-8, as a protobuf parse does;
* a line's events (repeated field 4, tag byte ``0x22``, length-prefixed) are
  found without walking them one by one: every ``0x22`` byte of the line is a
  candidate field start whose successor (the position after its length and
  payload) is computed at once; true events form the chain of successors that
  starts at the first event, found by removing, round after round, candidates
  nothing points to (a candidate no other candidate leads to cannot be reached
  from the first event); pointer doubling finishes pathological chains;
* the fields of all events of a line are decoded in lockstep, one vectorized
  step per field position whatever the field order (each step reads every
  active message's next key and dispatches on it), and the events' stats
  likewise; varints are decoded from 8-byte little-endian words gathered at
  once.

Times are integers: ``start_ns = timestamp_ns + round_half_even(offset_ps / 1000)``
and ``end_ns = timestamp_ns + round_half_even((offset_ps + duration_ps) / 1000)``,
computed without ever forming picoseconds since the epoch (which overflow int64).
A stat on the event overrides the same stat on its event metadata (as tsl's
XPlane visitors resolve them), and ``ref_value`` stats resolve to the name of
the stat metadata they reference.

Where compiled kernels load, a line's events are walked instead, once, in order:
the C kernels of ``_xplane_native.c`` (built at install where a C compiler is
there; used at any size, since they load in about a millisecond), else numba's
(``_xplane_jit.py``, the ``fast`` extra; from the size where their start-up
pays). ``MOEPROF_XPLANE_DECODER=native|numba|numpy`` picks one; every route
gives the same columns and the same refusals (the tests run them against each
other and against the protobuf runtime).

Malformed input raises :class:`WireError` with a short reason; every read is
bounds-checked against the message it belongs to.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from ..core.time_window import TIME_LIMIT_NS, UNPLACEABLE_NS
from .wire_status import FULL, KERNEL_ERRORS, OK
from .xspace_proto import WireError

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "STAT_ABSENT",
    "STAT_BYTES",
    "STAT_DOUBLE",
    "STAT_INT64",
    "STAT_REF",
    "STAT_STR",
    "STAT_UINT64",
    "Line",
    "Plane",
    "StatColumn",
    "WireError",
    "XSpaceColumns",
    "read_xspace",
]

# StatColumn.kind: the XStat value field that was set (its field number), 0 = no such stat
STAT_ABSENT = 0
STAT_DOUBLE = 2
STAT_UINT64 = 3
STAT_INT64 = 4
STAT_STR = 5
STAT_BYTES = 6
STAT_REF = 7
_INT_KINDS = (STAT_UINT64, STAT_INT64)
_STRING_KINDS = (STAT_STR, STAT_BYTES, STAT_REF)

_PAD = 16  # zero bytes after a buffer, so that an 8-byte word can be gathered at any position in it
_EVENTS_TAG = 0x22  # XLine.events: field 4, wire type 2
_U64 = np.uint64
_HIGH_BITS = _U64(0x8080808080808080)
_LOW_BITS = _U64(0x7F7F7F7F7F7F7F7F)
_MASK64 = (1 << 64) - 1
_MAX_ROUNDS = 64  # pruning rounds before a line's event chain is finished by pointer doubling


# --------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class StatColumn:
    """One stat over the events of a line: which value kind each event carries, and the values.

    ``ints`` holds int64 values and uint64 values as their bit pattern (a uint64
    above 2**63-1 reads negative); ``codes`` index ``categories`` for string,
    bytes and reference values (references resolved to the referenced stat
    metadata's name); each array is None when no event carries that kind.
    """

    kind: np.ndarray  # int8: STAT_* per event, STAT_ABSENT where the event has no such stat
    ints: np.ndarray | None = None  # int64, 0 where not an integer
    doubles: np.ndarray | None = None  # float64, NaN where not a double
    codes: np.ndarray | None = None  # int32 into categories, -1 where not a string
    categories: tuple[str | bytes, ...] = ()

    @property
    def present(self) -> np.ndarray:
        return self.kind != STAT_ABSENT

    def integers(self, default: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """(int64 values, mask of events whose value is an integer); ``default`` elsewhere."""
        mask = (self.kind == STAT_INT64) | (self.kind == STAT_UINT64)
        if self.ints is None:
            return np.full(len(self.kind), default, dtype=np.int64), mask
        return np.where(mask, self.ints, default), mask

    def string_codes(self) -> tuple[np.ndarray, tuple[str | bytes, ...]]:
        """(int32 codes into categories, -1 where the value is not a string/bytes/reference)."""
        if self.codes is None:
            return np.full(len(self.kind), -1, dtype=np.int32), ()
        return self.codes, self.categories


@dataclass(frozen=True)
class Line:
    id: int
    display_id: int
    name: str
    display_name: str
    timestamp_ns: int
    duration_ps: int
    metadata_id: np.ndarray  # int32 where every id fits, else int64
    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64
    stats: dict[str, StatColumn] = field(default_factory=dict)
    events_read: bool = True  # False: the `lines` filter skipped this line's events (and fields after them)

    def __len__(self) -> int:
        return len(self.start_ns)


@dataclass(frozen=True)
class Plane:
    id: int
    name: str
    event_metadata_ids: np.ndarray  # int64, sorted
    event_names: tuple[str, ...]  # name of each event metadata, in the order of event_metadata_ids
    stat_names: dict[int, str]  # stat metadata id -> name
    lines: list[Line]
    # the plane's own stats (name -> value: float, int or str; bytes left out), e.g. a GPU's model
    own_stats: dict[str, object] = field(default_factory=dict)

    def name_index(self, line: Line) -> np.ndarray:
        """Each event's position in ``event_names`` (int32), -1 where its metadata id is unknown."""
        return _lookup(self.event_metadata_ids, line.metadata_id)


@dataclass(frozen=True)
class XSpaceColumns:
    planes: list[Plane]  # the selected planes, in file order
    plane_names: list[str]  # every plane's name, in file order
    hostnames: list[str]
    route: str = "numpy"  # the decoder route that read this file: native, numba or numpy


# --------------------------------------------------------------------------------------------- entry point


def read_xspace(
    path: str | Path,
    *,
    planes: Callable[[str], bool] = lambda name: True,
    stats: Collection[str] = (),
    lines: Callable[[str, str], bool] | None = None,
    plane_stats: Callable[[str], Collection[str]] | None = None,
    threads: int = 1,
) -> XSpaceColumns:
    """Decode the planes whose name ``planes`` accepts, with a column per stat named in ``stats``.

    ``lines(plane name, line name)``, when given, chooses the lines whose events
    are decoded (the others keep the header fields that precede their events).
    ``plane_stats(plane name)``, when given, names the stats of each plane instead
    of ``stats`` (every stat is still checked; only the named ones get columns).
    Planes are read one at a time, so memory follows the largest plane. ``threads`` > 1 decodes a
    large plane's lines that many at a time (numpy and the compiled kernels release the GIL on
    whole columns; the lines' temporaries are then held at once).
    """
    every = tuple(dict.fromkeys(stats))

    def wanted(plane: str) -> tuple[str, ...]:
        return every if plane_stats is None else tuple(dict.fromkeys(plane_stats(plane)))

    out_planes: list[Plane] = []
    plane_names: list[str] = []
    hostnames: list[str] = []
    with open(path, "rb") as fh, _LinePool(threads) as pool:
        size = fh.seek(0, 2)
        # chosen per file and handed down with each plane's buffer: files read on threads never share it
        route = _choose_route(size)
        kernels = None if route == "numpy" else _KERNELS[route]
        for number, wire, start, end in _file_fields(fh, size):
            if wire != 2:
                continue
            if number == 4:
                fh.seek(start)
                hostnames.append(_utf8(fh.read(end - start), "a host name"))
            elif number == 1:
                buf = _Buffer.read(fh, start, end - start, kernels)
                plane = _read_plane(buf, planes, wanted, lines, plane_names, pool)
                if plane is not None:
                    out_planes.append(plane)
                del buf
    return XSpaceColumns(out_planes, plane_names, hostnames, route)


# --------------------------------------------------------------------------------------------- Python-level walks


def _file_fields(fh: BinaryIO, size: int) -> Iterator[tuple[int, int, int, int]]:
    """The XSpace's top-level fields by seeks (planes are large: never read whole here)."""
    pos = 0
    while pos < size:
        fh.seek(pos)
        head = fh.read(20)
        key, used = _py_varint(head, 0, len(head))
        number, wire = key >> 3, key & 7
        _check_key(number, wire)
        pos += used
        if wire == 2:
            length, used2 = _py_varint(head, used, len(head))
            start = pos + used2 - used
            if length > size - start:
                raise WireError("a top-level field runs past the end of the file")
            yield number, wire, start, start + length
            pos = start + length
        elif wire == 0:
            _, used2 = _py_varint(head, used, len(head))
            pos += used2 - used
        else:
            pos += 8 if wire == 1 else 4
            if pos > size:
                raise WireError("a top-level field runs past the end of the file")


def _py_varint(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _MASK64, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def _check_key(number: int, wire: int) -> None:
    if number == 0:
        raise WireError("field number 0")
    if wire not in (0, 1, 2, 5):
        raise WireError(f"unsupported wire type {wire}")


def _py_fields(mv: memoryview, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """``(number, wire, field start, value start or varint value, field end)`` of a message's fields."""
    while pos < end:
        start = pos
        key, pos = _py_varint(mv, pos, end)
        number, wire = key >> 3, key & 7
        _check_key(number, wire)
        if wire == 0:
            value, pos = _py_varint(mv, pos, end)
            yield number, wire, start, value, pos
        elif wire == 2:
            length, pos = _py_varint(mv, pos, end)
            if length > end - pos:
                raise WireError("a field runs past the end of its message")
            yield number, wire, start, pos, pos + length
            pos += length
        else:
            width = 8 if wire == 1 else 4
            if width > end - pos:
                raise WireError("a field runs past the end of its message")
            yield number, wire, start, pos, pos + width
            pos += width


def _strings(buf: _Buffer, starts: np.ndarray, ends: np.ndarray, what: str) -> list[str]:
    """Decode many byte ranges of the buffer: by the native kernels where they decode this file (a string
    object straight from each range), else one decode of the lot when it is all ASCII (the usual case)."""
    if not len(starts):
        return []
    kernels = buf.kernels
    if kernels is not None and hasattr(kernels, "strings"):  # numba's have no strings: numpy's below
        try:
            return kernels.strings(
                buf.data, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(ends, dtype=np.int64)
            )
        except UnicodeDecodeError:
            raise WireError(f"{what} is not valid UTF-8") from None
    lengths = ends - starts
    total = int(lengths.sum())
    if total:
        # gather every range's bytes at once: a running index through the ranges
        index = np.repeat(starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(total)
        blob = buf.data[index].tobytes()
    else:
        blob = b""
    bounds = np.r_[0, np.cumsum(lengths)].tolist()
    if blob.isascii():
        text = blob.decode("ascii")
        return [text[a:b] for a, b in itertools.pairwise(bounds)]
    return [_utf8(blob[a:b], what) for a, b in itertools.pairwise(bounds)]


def _utf8(raw: bytes | memoryview, what: str) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(f"{what} is not valid UTF-8") from None


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# --------------------------------------------------------------------------------------------- buffers and varints


class _Buffer:
    """One plane's bytes (zero-padded), with an 8-byte little-endian word view at every byte offset, and the
    compiled kernels that decode them (None: the numpy route), chosen for the file the plane is part of."""

    def __init__(self, data: np.ndarray, size: int, kernels: ModuleType | None = None) -> None:
        self.data = data
        self.size = size
        self.kernels = kernels
        self.mv = memoryview(data)[:size]  # type: ignore[arg-type]  # numpy arrays are buffers
        # overlapping unaligned words: words[i] = bytes i..i+7 (the padding keeps the last ones in bounds)
        self.words = np.ndarray((size + _PAD - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))
        # positions in int32 where they fit: half the memory traffic of int64
        self.itype = np.int32 if size + _PAD < 2**31 else np.int64

    @classmethod
    def read(cls, fh: BinaryIO, start: int, size: int, kernels: ModuleType | None = None) -> _Buffer:
        """``size`` bytes of ``fh`` (a file opened "rb") from ``start``."""
        data = np.empty(size + _PAD, dtype=np.uint8)
        data[size:] = 0
        fh.seek(start)
        if fh.readinto(memoryview(data)[:size]) != size:  # type: ignore[attr-defined,arg-type]
            raise WireError("file shorter than its fields say")
        return cls(data, size, kernels)


_PAIRS = (
    (_U64(0x00FF00FF00FF00FF), _U64(0xFF00FF00FF00FF00), _U64(1)),
    (_U64(0x0000FFFF0000FFFF), _U64(0xFFFF0000FFFF0000), _U64(2)),
    (_U64(0x00000000FFFFFFFF), _U64(0xFFFFFFFF00000000), _U64(4)),
)


def _varint_words(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode a varint at the start of each 8-byte word: (value uint64, length in bytes uint8, terminated).

    ``terminated`` is False where the varint does not end within the word (its
    value and length are then meaningless). Works in place on temporaries: at
    millions of rows, allocations cost as much as the arithmetic.
    """
    stop = np.invert(w)
    stop &= _HIGH_BITS  # bit 7 of each byte that ends a varint
    ok = stop != 0
    low = np.negative(stop)
    low &= stop  # 2**(8k+7) for the first such byte k
    stop -= stop  # reuse as scratch below
    np.subtract(low, _U64(1), out=stop)
    nbytes = np.bitwise_count(stop)
    nbytes += 1
    nbytes >>= 3
    low <<= _U64(1)
    low -= _U64(1)  # mask of the varint's bytes
    low &= w
    low &= _LOW_BITS
    x = low
    longest = int(nbytes.max()) if len(nbytes) else 1
    # pack the 7-bit groups (pairs into 14 bits, then 28, then 56) as far as the longest varint needs
    for level, (keep, move, shift) in enumerate(_PAIRS):
        if longest <= 1 << level:
            break
        np.bitwise_and(x, keep, out=stop)
        x &= move
        x >>= shift
        x |= stop
    return x, nbytes, ok


def _varints_at(buf: _Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
    """Varints starting at ``pos`` (up to 10 bytes): (value, length); (uint8 values, 1) when all are one byte."""
    first = buf.data[pos]
    if not (first >= 0x80).any():
        return first, 1
    value, nbytes, ok = _varint_words(buf.words[pos])
    if not ok.all():
        long = np.flatnonzero(~ok)
        value[long], nbytes[long] = _long_varints(buf, pos[long])
    return value, nbytes


def _long_varints(buf: _Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints of 9 or 10 bytes (negative int64s): the first 8 bytes, then one or two more."""
    x = buf.words[pos] & _LOW_BITS
    for keep, move, shift in _PAIRS:
        x = (x & keep) | ((x & move) >> shift)
    b8 = buf.data[pos + 8].astype(np.uint64)
    b9 = buf.data[pos + 9].astype(np.uint64)
    tenth = b8 >= 0x80
    if (b9[tenth] >= 0x80).any():
        raise WireError("varint longer than 10 bytes")
    value = x | ((b8 & _U64(0x7F)) << _U64(56)) | np.where(tenth, (b9 & _U64(1)) << _U64(63), _U64(0))
    return value, np.where(tenth, 10, 9).astype(np.uint8)


def _lookup(sorted_keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Position of each value in ``sorted_keys`` (distinct, int32), -1 where absent."""
    if not len(sorted_keys):
        return np.full(len(values), -1, dtype=np.int32)
    top = int(sorted_keys[-1])
    if int(sorted_keys[0]) >= 0 and top < 4 * len(sorted_keys) + (1 << 16):
        # small ids (XLA numbers metadata 1, 2, ...): a table indexed by id, no search
        table = np.full(top + 2, -1, dtype=np.int32)
        table[sorted_keys] = np.arange(len(sorted_keys), dtype=np.int32)
        ids = np.asarray(values).astype(np.int64, copy=False)
        return table[np.where((ids >= 0) & (ids <= top), ids, top + 1)]
    idx = np.searchsorted(sorted_keys, values)
    idx = np.minimum(idx, len(sorted_keys) - 1)
    return np.where(sorted_keys[idx] == values, idx, -1).astype(np.int32)


# --------------------------------------------------------------------------------------------- lockstep field walk


@dataclass
class _Step:
    """One lockstep step: the next field of each active message.

    ``rows`` is None while every message is still active (the arrays are then
    in message order): consumers assign whole columns instead of scattering.
    """

    rows: np.ndarray | None
    key: int | None  # the key every row has, when they share one (the usual case); else see number/wire
    number: np.ndarray | None
    wire: np.ndarray | None
    value: np.ndarray  # varint value (wire 0), payload length (wire 2), the 8 bytes (wire 1)
    value_start: np.ndarray  # first byte of the value, or of the payload
    end: np.ndarray  # first byte after the field

    def values(self, sel: np.ndarray | None) -> np.ndarray:
        """The selected rows' values (all of them where ``sel`` is None)."""
        return self.value if sel is None else self.value[sel]

    def payloads(self, sel: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The selected rows' payload bounds (length-delimited fields): (first byte, first byte after)."""
        return (self.value_start, self.end) if sel is None else (self.value_start[sel], self.end[sel])


def _walk(buf: _Buffer, starts: np.ndarray, ends: np.ndarray) -> Iterator[_Step]:
    """Walk the fields of many messages at once, one field of each message per step."""
    it = buf.itype
    p: np.ndarray = starts.astype(it)
    msg_end: np.ndarray = ends.astype(it)
    rows: np.ndarray | None = None
    live = p < msg_end
    if not live.all():
        rows = np.flatnonzero(live).astype(it)
        p, msg_end = p[rows], msg_end[rows]
    while len(p):
        key = buf.data[p]
        if (key >= 0x80).any():  # keys of fields numbered 16 and up, or overlong keys
            key, klen, ok = _varint_words(buf.words[p])
            if not ok.all() or (klen > 5).any():
                raise WireError("bad field key")
            vstart = p + klen
        else:
            vstart = p + 1
        kmin, kmax = int(key.min()), int(key.max())
        if kmin < 8:
            raise WireError("field number 0")
        if kmin == kmax:
            wire = kmin & 7
            if wire not in (0, 1, 2, 5):
                raise WireError(f"unsupported wire type {wire}")
            value, value_start, end = _field_values(buf, wire, vstart, msg_end)
            step = _Step(rows, kmin, None, None, value, value_start, end)
        else:
            numbers = key >> 3
            wires = (key & 7).astype(np.uint8)
            bad = (wires != 0) & (wires != 1) & (wires != 2) & (wires != 5)
            if bad.any():
                raise WireError(f"unsupported wire type {int(wires[bad][0])}")
            value = np.zeros(len(p), dtype=np.uint64)
            value_start = vstart.copy()
            end = np.empty_like(vstart)
            for wire in np.unique(wires).tolist():
                sel = np.flatnonzero(wires == wire)
                v, vs, e = _field_values(buf, wire, vstart[sel], msg_end[sel])
                value[sel], value_start[sel], end[sel] = v, vs, e
            step = _Step(rows, None, numbers, wires, value, value_start, end)
        if (end > msg_end).any():
            raise WireError("a field runs past the end of its message")
        yield step
        keep = end < msg_end
        if keep.all():
            p = end
        else:
            rows = np.flatnonzero(keep).astype(it) if rows is None else rows[keep]
            p, msg_end = end[keep], msg_end[keep]


def _field_values(
    buf: _Buffer, wire: int, vstart: np.ndarray, msg_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, value start, field end) of fields of one wire type whose keys end at ``vstart``."""
    if wire == 0:
        value, vlen = _varints_at(buf, vstart)
        return value, vstart, vstart + vlen
    if wire == 2:
        length, vlen = _varints_at(buf, vstart)
        body = vstart + vlen
        room = msg_end - body
        if (room < 0).any() or (length > room.astype(np.uint64)).any():
            raise WireError("a field runs past the end of its message")
        return length, body, body + length.astype(body.dtype)
    if wire == 1:
        return buf.words[vstart], vstart, vstart + 8
    return np.zeros(len(vstart), dtype=np.uint64), vstart, vstart + 4


# --------------------------------------------------------------------------------------------- events of a line


def _field_run(
    buf: _Buffer, first: int, end: int, tag: int, window: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """The consecutive length-delimited fields with one-byte key ``tag`` from ``first`` (where one starts)
    within a message ending at ``end``: their payloads' starts and ends, and where the run stops.

    Candidates are all ``tag`` bytes; each one's successor is the position after
    its (length-prefixed) payload. The fields are the chain of successors from
    ``first``: a candidate that no remaining candidate leads to cannot be on
    that chain (unless it is ``first``), so removing such candidates until none
    is left leaves exactly the chain. ``window`` bounds the bytes looked at
    (grown until the run is seen to stop inside it): a run of small fields
    followed by large ones costs what the run does.
    """
    kernels = buf.kernels
    if kernels is not None:
        return _kernels_field_run(kernels, buf, first, end, tag)
    while True:
        region_end = end if window is None else min(end, first + window)
        found = _chain(buf, first, region_end, end, tag)
        if found is not None:
            return found
        window = 4 * (window or 1)


def _chain(buf: _Buffer, first: int, region_end: int, end: int, tag: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """:func:`_field_run` over candidates in ``[first, region_end)``; None if the run may go on past it."""
    n_bytes = region_end - first
    limit = end - first
    it = buf.itype
    is_tag = np.empty(n_bytes + 1, dtype=bool)  # one spare False: a successor may be the region's end
    np.equal(buf.data[first:region_end], tag, out=is_tag[:n_bytes])
    is_tag[n_bytes] = False
    cand = np.flatnonzero(is_tag).astype(it)
    n = len(cand)
    # the payload length after each candidate: one byte, mostly (data is padded past any region)
    length, nb = _varints_at(buf, cand + (first + 1))
    if isinstance(nb, int):
        nxt = cand + length
        nxt += 2
        valid = nxt <= limit
    else:  # some lengths take more bytes (or are garbage): compare in uint64, then clip
        after = (cand + 1 + nb).astype(np.uint64)
        valid = after <= _U64(limit)
        valid &= length <= _U64(limit) - np.minimum(after, _U64(limit))
        nxt = np.where(valid, after + length, _U64(limit + 1)).astype(np.int64)
    inside = nxt < n_bytes
    member = is_tag[np.where(inside, nxt, n_bytes)]
    member &= valid
    # successor's index = its rank among candidates, from a bitmap with a popcount prefix per 64 bytes
    words = np.packbits(is_tag, bitorder="little")
    words = np.concatenate([words, np.zeros((-len(words)) % 8, np.uint8)]).view("<u8")
    prefix = np.zeros(len(words) + 1, dtype=np.int64)
    np.cumsum(np.bitwise_count(words), out=prefix[1:])
    del is_tag
    hit = np.flatnonzero(member)
    q = nxt[hit]
    word_index = q >> 6
    below = np.left_shift(_U64(1), (q & 63).astype(np.uint64))
    below -= _U64(1)
    below &= words[word_index]
    # n: the run stops there; n + 1: the field runs past the message; n + 2: past the window, not known yet
    succ = np.where(valid, n, n + 1).astype(it)
    if region_end < end:
        succ[valid & ~inside] = n + 2
    succ[hit] = prefix[word_index] + np.bitwise_count(below)
    del words, prefix, q, word_index, below, hit, member, inside
    chain = _reachable(succ, n)
    last = int(chain[-1])
    if succ[last] == n + 2:
        return None
    if succ[last] == n + 1:
        raise WireError("a field runs past the end of its message")
    heads = cand[chain].astype(np.int64) + first
    body_end = nxt[chain].astype(np.int64) + first
    body = heads + 1 + (nb if isinstance(nb, int) else nb[chain])
    return body, body_end, int(body_end[-1])


def _reachable(succ: np.ndarray, n: int) -> np.ndarray:
    """Nodes reachable from node 0 (in order) where each node has one successor at a later position."""
    indeg = np.bincount(succ[succ < n], minlength=n)
    alive = np.ones(n, dtype=bool)
    owner = np.empty(n, dtype=np.int64)
    leaves = np.flatnonzero(indeg == 0)
    leaves = leaves[leaves != 0]
    for _ in range(_MAX_ROUNDS):
        if not len(leaves):
            return np.flatnonzero(alive)
        alive[leaves] = False
        targets = succ[leaves]
        targets = targets[targets < n]
        np.subtract.at(indeg, targets, 1)
        targets = targets[indeg[targets] == 0]
        # each new leaf once: a node two removed leaves led to appears twice
        order = np.arange(len(targets))
        owner[targets] = order
        leaves = targets[owner[targets] == order]
        leaves = leaves[leaves != 0]
    return _reachable_by_doubling(succ, n)


def _reachable_by_doubling(succ: np.ndarray, n: int) -> np.ndarray:
    """Chain from node 0 by pointer doubling: after round b, the first 2**b nodes of the chain are known."""
    jump = np.concatenate([np.minimum(succ, n), [n]]).astype(succ.dtype)  # n: the end (stays there)
    chain = np.zeros(1, dtype=np.int64)
    while True:
        ahead = jump[chain]
        ahead = ahead[ahead < n]
        if not len(ahead):
            return chain
        chain = np.concatenate([chain, ahead.astype(np.int64)])
        jump = jump[jump]


@dataclass
class _LineEvents:
    metadata_id: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    stat_event: np.ndarray  # per stat field: its event's index
    stat_start: np.ndarray  # the stat message's bytes
    stat_end: np.ndarray


def _decode_events(buf: _Buffer, body: np.ndarray, body_end: np.ndarray, timestamp_ns: int) -> _LineEvents:
    """Fields of the events whose messages are ``[body, body_end)``."""
    m = len(body)
    columns = {1: np.zeros(m, dtype=np.uint64), 2: np.zeros(m, dtype=np.uint64), 3: np.zeros(m, dtype=np.uint64)}
    stat_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    all_rows = None
    for step in _walk(buf, body, body_end):
        groups: list[tuple[int, int, np.ndarray | None]]
        if step.key is not None:
            groups = [(step.key >> 3, step.key & 7, None)]
        else:
            assert step.number is not None and step.wire is not None
            groups = []
            for number, wire in ((1, 0), (2, 0), (3, 0), (4, 2), (5, 0)):
                chosen = np.flatnonzero((step.number == number) & (step.wire == wire))
                if len(chosen):
                    groups.append((number, wire, chosen))
        for number, wire, sel in groups:
            if wire == 0 and number in (1, 2, 3, 5):
                value: np.ndarray | int = step.values(sel)
                if number == 5:  # num_occurrences shares a oneof with offset_ps: setting it clears the offset
                    number, value = 2, 0
                if step.rows is None and sel is None:
                    columns[number][:] = value
                else:
                    rows = step.rows if step.rows is not None else None
                    idx = (rows if sel is None else rows[sel]) if rows is not None else sel
                    columns[number][idx] = value
            elif wire == 2 and number == 4:
                if step.rows is None:
                    if all_rows is None:
                        all_rows = np.arange(m, dtype=buf.itype)
                    rows = all_rows
                else:
                    rows = step.rows
                stat_parts.append((rows if sel is None else rows[sel], *step.payloads(sel)))
            # other fields: unknown to XEvent (or a known number with another wire type), skipped as protobuf does
    mid, start_ns, end_ns = _ids_and_times(columns[1], columns[2], columns[3], timestamp_ns)
    if stat_parts:
        ev, s0, s1 = (np.concatenate(parts) for parts in zip(*stat_parts, strict=True))
    else:
        ev = s0 = s1 = np.zeros(0, dtype=buf.itype)
    return _LineEvents(mid, start_ns, end_ns, ev, s0, s1)


def _ps_to_ns(offset_ps: np.ndarray, duration_ps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """round_half_even(offset/1000) and round_half_even((offset+duration)/1000), never forming the sum."""
    q1, r1 = np.divmod(offset_ps, 1000)
    q2, r2 = np.divmod(duration_ps, 1000)
    if not (r1.any() or r2.any()):  # whole nanoseconds: the usual case
        q2 += q1
        return q1, q2
    start = q1 + ((r1 > 500) | ((r1 == 500) & (q1 & 1 == 1)))
    s = r1 + r2
    q = q1 + q2 + s // 1000
    r = s % 1000
    end = q + ((r > 500) | ((r == 500) & (q & 1 == 1)))
    return start, end


# --------------------------------------------------------------------------------------------- stats

_STAT_FIELDS = ((1, 0), (2, 1), (3, 0), (4, 0), (5, 2), (6, 2), (7, 0))  # XStat's (number, wire type)
_VALUE_TAG = np.zeros(256, dtype=np.int8)  # value key byte -> STAT_* kind, for the common stat layout
for _number, _wire in _STAT_FIELDS[1:]:
    _VALUE_TAG[_number << 3 | _wire] = _number


@dataclass
class _Stats:
    """The decoded XStat messages whose metadata id was requested (each field last set wins)."""

    row: np.ndarray  # position among the line's stat fields (their order: field order within an event)
    metadata_id: np.ndarray  # uint64
    kind: np.ndarray  # int8 STAT_* (the oneof's last value field), STAT_ABSENT if none
    value: np.ndarray  # uint64: integer / reference / double bits
    value_start: np.ndarray  # str/bytes payload
    value_end: np.ndarray


def _decode_stats(buf: _Buffer, starts: np.ndarray, ends: np.ndarray, requested: np.ndarray) -> _Stats:
    """Decode (and check) every stat message; keep those whose metadata id is in ``requested`` (sorted uint64).

    Nearly every stat is laid out ``08 <id> <value key> <value>`` with an id
    below 16384: those are decoded at fixed offsets; the rest by the lockstep walk.
    """
    b0 = buf.data[starts]
    b1 = buf.data[starts + 1]
    b2 = buf.data[starts + 2]
    # the id takes one byte (below 128) or two (below 16384)
    two = b1 >= 0x80
    mid = b1.astype(np.int64)
    tag = b2
    if two.any():
        mid = np.where(two, (mid & 0x7F) | (b2.astype(np.int64) << 7), mid)
        tag = np.where(two, buf.data[starts + 3], b2)
        two &= b2 < 0x80
        short = b1 < 0x80
    else:
        short = np.ones(len(starts), dtype=bool)
    vpos = starts + 3 + two
    word = buf.words[vpos]
    value, vlen, ok = _varint_words(word)
    kind = _VALUE_TAG[tag]
    common = (b0 == 0x08) & (short | two) & (kind != STAT_ABSENT)
    # where each layout's value would end; it must end the message
    vend = vpos + vlen
    is_len = (kind == STAT_STR) | (kind == STAT_BYTES)
    is_double = kind == STAT_DOUBLE
    fits = np.where(is_double, vpos + 8 == ends, ok & (vend <= ends))
    payload_room = np.maximum(ends - vend, 0).astype(np.uint64)
    fits &= np.where(is_len, value == payload_room, is_double | (vend == ends))
    common &= fits
    del fits, payload_room
    req_small = requested[requested < 0x4000].astype(np.intp)
    wanted = np.zeros(0x4000, dtype=bool)
    wanted[req_small] = True
    keep = np.flatnonzero(common & wanted[mid & 0x3FFF])
    out = _Stats(
        keep,
        mid[keep].astype(np.uint64),
        kind[keep],
        np.where(is_double[keep], word[keep], value[keep]),
        vend[keep],
        ends[keep],
    )
    del b0, word, value, vlen, ok, vend, is_len, is_double, kind
    rest = np.flatnonzero(~common)
    if len(rest):
        other = _decode_stats_walk(buf, starts[rest], ends[rest])
        sel = np.flatnonzero(np.isin(other.metadata_id, requested))
        out = _Stats(
            *(
                np.concatenate([a, b[sel]])
                for a, b in zip(
                    (out.row, out.metadata_id, out.kind, out.value, out.value_start, out.value_end),
                    (rest, other.metadata_id, other.kind, other.value, other.value_start, other.value_end),
                    strict=True,
                )
            )
        )
    return out


def _decode_stats_walk(buf: _Buffer, starts: np.ndarray, ends: np.ndarray) -> _Stats:
    """Stat messages in any layout: fields in any order, repeated fields, unknown fields."""
    m = len(starts)
    mid = np.zeros(m, dtype=np.uint64)
    kind = np.zeros(m, dtype=np.int8)
    value = np.zeros(m, dtype=np.uint64)
    vstart = np.zeros(m, dtype=buf.itype)
    vend = np.zeros(m, dtype=buf.itype)
    every = np.arange(m, dtype=buf.itype)
    for step in _walk(buf, starts, ends):
        rows_all = every if step.rows is None else step.rows
        groups: list[tuple[int, int, np.ndarray | None]]
        if step.key is not None:
            groups = [(step.key >> 3, step.key & 7, None)]
        else:
            assert step.number is not None and step.wire is not None
            groups = []
            for number, wire in _STAT_FIELDS:
                chosen = np.flatnonzero((step.number == number) & (step.wire == wire))
                if len(chosen):
                    groups.append((number, wire, chosen))
        for number, wire, sel in groups:
            if (number, wire) not in _STAT_FIELDS:
                continue  # unknown field, or a known number with another wire type: skipped as protobuf does
            rows = rows_all if sel is None else rows_all[sel]
            if number == 1:
                mid[rows] = step.values(sel)
                continue
            kind[rows] = number
            if wire == 2:
                vstart[rows], vend[rows] = step.payloads(sel)
            else:
                value[rows] = step.values(sel)
    return _Stats(every, mid, kind, value, vstart, vend)


def _factorize_slices(buf: _Buffer, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """Distinct byte strings among slices of the buffer: (int32 code per slice, the distinct values)."""
    n = len(starts)
    codes = np.empty(n, dtype=np.int32)
    values: list[bytes] = []
    if not n:
        return codes, values
    lens = ends - starts
    order = np.argsort(lens, kind="stable")
    sorted_lens = lens[order]
    bounds = np.flatnonzero(np.diff(sorted_lens)) + 1
    for group in np.split(order, bounds):  # one group per distinct length
        width = int(lens[group[0]])
        if width == 0:
            codes[group] = len(values)
            values.append(b"")
            continue
        rows = buf.data[starts[group, None] + np.arange(width)]
        keys = np.ascontiguousarray(rows).view(f"V{width}").ravel()
        uniq, inverse = np.unique(keys, return_inverse=True)
        codes[group] = inverse.ravel() + len(values)
        values.extend(u.tobytes() for u in uniq)
    return codes, values


@dataclass(frozen=True)
class _MetaStat:
    """One requested stat as the plane's event metadata carry it (indexed like event_metadata_ids)."""

    kind: np.ndarray  # int8
    ints: np.ndarray  # int64
    doubles: np.ndarray  # float64
    strings: list[str | bytes | None]


@dataclass
class _Slot:
    """One requested stat as the events themselves carry it: full-length columns, the last stat of an event."""

    kind: np.ndarray  # int8 STAT_*
    value: np.ndarray  # uint64: integer / reference / double bits
    value_start: np.ndarray  # str/bytes payload
    value_end: np.ndarray


def _unique_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of uint64 ids, without a sort when the ids are small."""
    top = int(values.max()) if len(values) else 0
    if top >= 4 * len(values) + (1 << 16):
        uniq, inverse = np.unique(values, return_inverse=True)
        return uniq, inverse.ravel()
    present = np.zeros(top + 1, dtype=bool)
    present[values] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present).astype(values.dtype), rank[values]


def _slot_from_stats(n: int, own: _Stats, rows: np.ndarray, event: np.ndarray) -> _Slot:
    """Scatter decoded stats to their events; the last stat of that name on an event wins (as in a dict)."""
    kind = np.zeros(n, dtype=np.int8)
    value = np.empty(n, dtype=np.uint64)  # read only where ``kind`` says a stat is (see _decode_events_kernels)
    vstart = np.empty(n, dtype=np.int64)
    vend = np.empty(n, dtype=np.int64)
    if len(rows):
        order = np.lexsort((own.row[rows], event))  # stat rows follow field order within an event
        rows, event = rows[order], event[order]
        last = np.r_[event[1:] != event[:-1], True]
        rows, event = rows[last], event[last]
        kind[event] = own.kind[rows]
        value[event] = own.value[rows]
        vstart[event] = own.value_start[rows]
        vend[event] = own.value_end[rows]
    return _Slot(kind, value, vstart, vend)


def _stat_column(
    buf: _Buffer, own: _Slot, meta: _MetaStat | None, meta_index: np.ndarray, stat_names: dict[int, str]
) -> StatColumn:
    """One requested stat over a line's events: the event's own stat, else its metadata's."""
    n = len(own.kind)
    has_own = own.kind != STAT_ABSENT
    if (meta is None or not (meta.kind != STAT_ABSENT).any()) and not has_own.any():
        return StatColumn(own.kind)  # no event of this line carries it: most stats on most lines
    kind = own.kind.copy()
    from_meta = np.zeros(0, dtype=np.int64)
    if meta is not None and (meta.kind != STAT_ABSENT).any():
        from_meta = np.flatnonzero(~has_own & (meta_index >= 0))
        from_meta = from_meta[meta.kind[meta_index[from_meta]] != STAT_ABSENT]
        kind[from_meta] = meta.kind[meta_index[from_meta]]
    ints = doubles = codes = None
    categories: list[str | bytes] = []
    is_int = (kind == STAT_INT64) | (kind == STAT_UINT64)
    if is_int.any():
        ints = np.where(is_int & has_own, own.value.view(np.int64), 0)
        if len(from_meta):
            ints[from_meta] = meta.ints[meta_index[from_meta]]  # type: ignore[union-attr]
    if (kind == STAT_DOUBLE).any():
        doubles = np.where((kind == STAT_DOUBLE) & has_own, own.value.view(np.float64), np.nan)
        if len(from_meta):
            doubles[from_meta] = meta.doubles[meta_index[from_meta]]  # type: ignore[union-attr]
    if ((kind == STAT_STR) | (kind == STAT_BYTES) | (kind == STAT_REF)).any():
        codes = np.full(n, -1, dtype=np.int32)
        index: dict[str | bytes, int] = {}

        def code_of(value: str | bytes) -> int:
            return index.setdefault(value, len(index))

        for k in (STAT_STR, STAT_BYTES):
            rows = np.flatnonzero(own.kind == k)
            if len(rows):
                slice_codes, raw = _factorize_slices(buf, own.value_start[rows], own.value_end[rows])
                decoded = [_utf8(v, "a string stat") if k == STAT_STR else v for v in raw]
                remap = np.array([code_of(v) for v in decoded], dtype=np.int32)
                codes[rows] = remap[slice_codes]
        rows = np.flatnonzero(own.kind == STAT_REF)
        if len(rows):
            uniq, inverse = _unique_ids(own.value[rows])
            # a reference to a missing stat metadata reads as "" (as jaxlib's ProfileData has it)
            get = stat_names.get
            names = [get(r - (1 << 64) if r >= 1 << 63 else r, "") for r in uniq.tolist()]
            if not index and len(set(names)) == len(names):  # the usual case: distinct names, nothing before
                index.update(zip(names, range(len(names)), strict=True))
                codes[rows] = inverse.ravel()
            else:
                codes[rows] = np.array([code_of(v) for v in names], dtype=np.int32)[inverse.ravel()]
        if len(from_meta):
            mk = meta.kind[meta_index[from_meta]]  # type: ignore[union-attr]
            rows = from_meta[(mk == STAT_STR) | (mk == STAT_BYTES) | (mk == STAT_REF)]
            if len(rows):
                uniq, inverse = np.unique(meta_index[rows], return_inverse=True)
                strings = [meta.strings[int(i)] for i in uniq.tolist()]  # type: ignore[union-attr]
                codes[rows] = np.array([code_of(v) for v in strings], dtype=np.int32)[inverse.ravel()]  # type: ignore[arg-type]
        categories = list(index)
    return StatColumn(kind, ints, doubles, codes, tuple(categories))


# --------------------------------------------------------------------------------------------- planes and lines

# a plane whose lines are decoded on threads: below, thread hand-offs and the GIL on small arrays cost
# more than they save (docs/performance.md)
THREADED_FROM_BYTES = 4 << 20


class _LinePool:
    """Decodes a plane's lines, in order, on up to ``threads`` threads; started on first use, so a file of
    small planes never starts one."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self._executor: ThreadPoolExecutor | None = None

    def map(self, fn: Callable[[tuple[int, int]], Line], spans: list[tuple[int, int]], threaded: bool) -> list[Line]:
        if self.threads == 1 or len(spans) < 2 or not threaded:
            return [fn(span) for span in spans]
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor  # (imports a small trace never needs)

            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="moeprof-xplane")
        # results in line order; the first line (in order) that fails raises, as one thread would
        return list(self._executor.map(fn, spans))

    def __enter__(self) -> _LinePool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)


def _read_plane(
    buf: _Buffer,
    select: Callable[[str], bool],
    stats_of: Callable[[str], tuple[str, ...]],
    select_line: Callable[[str, str], bool] | None,
    plane_names: list[str],
    pool: _LinePool,
) -> Plane | None:
    mv = buf.mv
    lines: list[tuple[int, int]] = []
    # the metadata maps' entries (payload ranges): event metadata, stat metadata
    maps: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {4: [], 5: []}
    plane_id = 0
    name_span = (0, 0)
    plane_stats: list[tuple[int, int]] = []
    pos = 0
    while pos < buf.size:
        number, wire, start, value, end = next(_py_fields(mv, pos, buf.size))
        if wire == 2 and number in (4, 5) and mv[start] == (number << 3 | 2):
            # metadata maps: thousands of small entries, found at once (the window keeps lines out)
            body, body_end, end = _field_run(buf, start, buf.size, number << 3 | 2, window=1 << 16)
            maps[number].append((body, body_end))
        elif wire == 2 and number in (4, 5):  # an entry whose key is not in its shortest form
            maps[number].append((np.array([value]), np.array([end])))
        elif wire == 2 and number == 3:
            lines.append((value, end))
        elif wire == 0 and number == 1:
            plane_id = _signed(value)
        elif wire == 2 and number == 2:
            name_span = (value, end)
        elif wire == 2 and number == 6:
            plane_stats.append((value, end))
        # any other field is unknown, or a known number with another wire type: skipped, as protobuf does
        pos = end
    # each field last set wins, as in a protobuf parse; strings are checked as protobuf checks them
    name = _utf8(mv[name_span[0] : name_span[1]], "a plane name")
    own = _check_stats(buf, plane_stats, "a plane stat")
    stat_names = _stat_metadata(buf, maps[5])
    plane_names.append(name)
    if not select(name):
        return None
    own_stats = _own_stats(buf, own, stat_names) if own is not None else {}
    wanted = stats_of(name)
    position = {s: i for i, s in enumerate(wanted)}
    # requested stat metadata ids, sorted, with the requested stat each one names
    pairs = sorted((k, position[v]) for k, v in stat_names.items() if v in position)
    req_ids = np.array([k & _MASK64 for k, _ in pairs], dtype=np.uint64)
    req_which = np.array([i for _, i in pairs], dtype=np.int64)
    event_ids, event_names, meta_stats = _event_metadata(buf, maps[4], wanted, req_ids, req_which, stat_names)

    def read_line(span: tuple[int, int]) -> Line:
        a, b = span
        return _read_line(buf, a, b, name, wanted, req_ids, req_which, event_ids, meta_stats, stat_names, select_line)

    out_lines = pool.map(read_line, lines, threaded=buf.size >= THREADED_FROM_BYTES)
    return Plane(plane_id, name, event_ids, event_names, stat_names, out_lines, own_stats)


def _map_entries(
    buf: _Buffer, entries: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A metadata map's entries (payload ranges): (key, value start, value end), one per distinct key."""
    starts = np.concatenate([e[0] for e in entries])
    ends = np.concatenate([e[1] for e in entries])
    m = len(starts)
    key = np.zeros(m, dtype=np.uint64)
    value_start = np.zeros(m, dtype=np.int64)
    value_end = np.zeros(m, dtype=np.int64)  # empty: an entry without a value has the default metadata
    seen_value = np.zeros(m, dtype=bool)
    for step, rows, number, wire, sel in _fields_by_number(buf, starts, ends):
        if number == 1 and wire == 0:
            key[rows] = step.values(sel)
        elif number == 2 and wire == 2:
            if seen_value[rows].any():  # protobuf would merge the two messages: not worth a special case
                raise WireError("a metadata map entry with two values")
            seen_value[rows] = True
            value_start[rows], value_end[rows] = step.payloads(sel)
    # a key seen twice: the last entry wins, as when protobuf fills a map
    order = np.argsort(key, kind="stable")
    last = np.r_[key[order][1:] != key[order][:-1], True]
    order = order[last]
    return key[order], value_start[order], value_end[order]


def _stat_metadata(buf: _Buffer, entries: list[tuple[np.ndarray, np.ndarray]]) -> dict[int, str]:
    """The stat metadata map as {id: name}, decoded like the event metadata (XLA interns every string stat
    value here, so it holds about as many entries as a plane has distinct ops)."""
    if not entries:
        return {}
    key, value_start, value_end = _map_entries(buf, entries)
    n = len(key)
    name_start = np.zeros(n, dtype=np.int64)
    name_end = np.zeros(n, dtype=np.int64)
    descriptions: list[tuple[np.ndarray, np.ndarray]] = []
    for step, rows, number, wire, sel in _fields_by_number(buf, value_start, value_end):
        if wire == 2 and number in (2, 3):  # XStatMetadata's name and description
            a, b = step.payloads(sel)
            if number == 2:
                name_start[rows], name_end[rows] = a, b
            else:
                descriptions.append((a, b))
    for a, b in descriptions:  # only checked (a string field protobuf would refuse)
        _strings(buf, a, b, "a stat description")
    return dict(zip(key.view(np.int64).tolist(), _strings(buf, name_start, name_end, "a stat name"), strict=True))


def _check_stats(buf: _Buffer, spans: list[tuple[int, int]], what: str) -> _Stats | None:
    """Check stat messages that are not read as columns (a plane's own): well formed, their strings
    UTF-8; the decoded stats (None: there are none)."""
    if not spans:
        return None
    found = _decode_stats_walk(buf, np.array([a for a, _ in spans]), np.array([b for _, b in spans]))
    text = found.kind == STAT_STR
    _strings(buf, found.value_start[text], found.value_end[text], what)
    return found


def _own_stats(buf: _Buffer, found: _Stats, stat_names: dict[int, str]) -> dict[str, object]:
    """A plane's own stats by name (a plane holds a handful: decoded one by one)."""
    out: dict[str, object] = {}
    for i in range(len(found.kind)):
        kind, bits = int(found.kind[i]), int(found.value[i])
        value: object
        if kind == STAT_DOUBLE:
            value = float(np.array([bits], dtype=np.uint64).view(np.float64)[0])
        elif kind in (STAT_UINT64, STAT_REF):
            value = bits
        elif kind == STAT_INT64:
            value = bits - (1 << 64) if bits >= 1 << 63 else bits
        elif kind == STAT_STR:
            value = bytes(buf.mv[int(found.value_start[i]) : int(found.value_end[i])]).decode("utf-8", "replace")
        else:
            continue
        out[stat_names.get(int(found.metadata_id[i]), "")] = value
    return out


def _event_metadata(
    buf: _Buffer,
    entries: list[tuple[np.ndarray, np.ndarray]],
    wanted: tuple[str, ...],
    req_ids: np.ndarray,
    req_which: np.ndarray,
    stat_names: dict[int, str],
) -> tuple[np.ndarray, tuple[str, ...], dict[str, _MetaStat | None]]:
    """The event metadata map, decoded like events: (sorted ids, names, the requested stats they carry)."""
    if not entries:
        return np.zeros(0, dtype=np.int64), (), {s: None for s in wanted}
    key, value_start, value_end = _map_entries(buf, entries)
    n = len(key)
    name_start = np.zeros(n, dtype=np.int64)
    name_end = np.zeros(n, dtype=np.int64)
    stat_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for step, rows, number, wire, sel in _fields_by_number(buf, value_start, value_end):
        if number == 2 and wire == 2:
            name_start[rows], name_end[rows] = step.payloads(sel)
        elif number == 5 and wire == 2:
            stat_parts.append((rows, *step.payloads(sel)))
        elif number == 6 and wire == 2:  # packed child ids: the last varint must end the payload
            a, b = step.payloads(sel)
            if (buf.data[np.maximum(b - 1, a)][b > a] >= 0x80).any():
                raise WireError("a packed field ends inside a varint")
        elif number == 4 and wire == 2:  # the display name: only checked (a string field protobuf would refuse)
            _strings(buf, *step.payloads(sel), "an event display name")
    names = _strings(buf, name_start, name_end, "an event name")
    ids = key.view(np.int64)
    reorder = np.argsort(ids, kind="stable")  # sorted as signed ids (map keys are int64)
    ids = ids[reorder]
    ordered = tuple([names[i] for i in reorder.tolist()])
    rank = np.empty(n, dtype=np.int64)
    rank[reorder] = np.arange(n)
    meta_stats: dict[str, _MetaStat | None] = {s: None for s in wanted}
    if stat_parts and len(req_ids):
        owner, s0, s1 = (np.concatenate(parts) for parts in zip(*stat_parts, strict=True))
        found = _decode_stats(buf, s0, s1, req_ids)
        pos_in = np.minimum(np.searchsorted(req_ids, found.metadata_id), len(req_ids) - 1)
        which = np.where((req_ids[pos_in] == found.metadata_id) & (found.kind != STAT_ABSENT), req_which[pos_in], -1)
        for i, stat in enumerate(wanted):
            rows = np.flatnonzero(which == i)
            if len(rows):
                slot = _slot_from_stats(n, found, rows, rank[owner[found.row[rows]]])
                col = _stat_column(buf, slot, None, np.zeros(0, dtype=np.int32), stat_names)
                strings: list[str | bytes | None] = [None] * n
                if col.codes is not None:
                    for j in np.flatnonzero(col.codes >= 0).tolist():
                        strings[j] = col.categories[col.codes[j]]
                ints = col.ints if col.ints is not None else np.zeros(n, dtype=np.int64)
                doubles = col.doubles if col.doubles is not None else np.full(n, np.nan)
                meta_stats[stat] = _MetaStat(col.kind, ints, doubles, strings)
    else:
        for step_parts in stat_parts:  # still check the stats are well formed
            _decode_stats(buf, step_parts[1], step_parts[2], req_ids)
    return ids, ordered, meta_stats


def _fields_by_number(
    buf: _Buffer, starts: np.ndarray, ends: np.ndarray
) -> Iterator[tuple[_Step, np.ndarray, int, int, np.ndarray | None]]:
    """The lockstep walk, grouped: (step, message rows, field number, wire type, selection within the step)."""
    every = np.arange(len(starts))
    for step in _walk(buf, starts, ends):
        rows_all = every if step.rows is None else step.rows
        if step.key is not None:
            yield step, rows_all, step.key >> 3, step.key & 7, None
            continue
        assert step.number is not None and step.wire is not None
        pairs = np.unique(step.number.astype(np.int64) * 8 + step.wire)
        for k in pairs.tolist():
            sel = np.flatnonzero((step.number == k >> 3) & (step.wire == (k & 7)))
            yield step, rows_all[sel], k >> 3, k & 7, sel


def _read_line(
    buf: _Buffer,
    start: int,
    end: int,
    plane_name: str,
    wanted: tuple[str, ...],
    req_ids: np.ndarray,
    req_which: np.ndarray,
    event_ids: np.ndarray,
    meta_stats: dict[str, _MetaStat | None],
    stat_names: dict[int, str],
    select_line: Callable[[str, str], bool] | None,
) -> Line:
    mv = buf.mv
    head: dict[str, int | str] = {
        "id": 0,
        "display_id": 0,
        "name": "",
        "display_name": "",
        "timestamp_ns": 0,
        "duration_ps": 0,
    }
    bodies: list[np.ndarray] = []
    body_ends: list[np.ndarray] = []
    read_events = True
    name_seen = False
    pos = start
    while pos < end:
        number, wire, fstart, value, fend = next(_py_fields(mv, pos, end))
        if number == 4 and wire == 2:
            if select_line is not None and not bodies and name_seen and not select_line(plane_name, str(head["name"])):
                read_events = False  # its events are not walked: fields after them stay unread
                break
            if mv[fstart] == _EVENTS_TAG:
                body, body_end, pos = _field_run(buf, fstart, end, _EVENTS_TAG)
            else:  # a key written in more bytes than needed: this one event on its own
                body, body_end, pos = np.array([value]), np.array([fend]), fend
            bodies.append(body)
            body_ends.append(body_end)
            continue
        pos = fend
        if wire == 0 and number in (1, 3, 9, 10):
            head[{1: "id", 3: "timestamp_ns", 9: "duration_ps", 10: "display_id"}[number]] = _signed(value)
        elif wire == 2 and number in (2, 11):
            head["name" if number == 2 else "display_name"] = _utf8(mv[value:fend], "a line name")
            name_seen = name_seen or number == 2
    if not read_events or not bodies:
        empty = np.zeros(0, dtype=np.int64)
        return Line(
            **head,  # type: ignore[arg-type]
            metadata_id=empty.astype(np.int32),
            start_ns=empty,
            end_ns=empty.copy(),
            stats={s: StatColumn(np.zeros(0, dtype=np.int8)) for s in wanted},
            events_read=read_events,
        )
    body = np.concatenate(bodies) if len(bodies) > 1 else bodies[0]
    body_end = np.concatenate(body_ends) if len(body_ends) > 1 else body_ends[0]
    del bodies, body_ends
    kernels = buf.kernels
    if kernels is not None:
        events, slots = _decode_events_kernels(
            kernels, buf, body, body_end, int(head["timestamp_ns"]), req_ids, req_which, wanted
        )
    else:
        events = _decode_events(buf, body, body_end, int(head["timestamp_ns"]))
        slots = _slots_numpy(buf, events, req_ids, req_which, wanted)
    del body, body_end
    meta_index = _lookup(event_ids, events.metadata_id) if wanted else np.zeros(0, np.int32)
    stats_out = {
        stat: _stat_column(buf, slots[i], meta_stats.get(stat), meta_index, stat_names) for i, stat in enumerate(wanted)
    }
    return Line(
        **head,  # type: ignore[arg-type]
        metadata_id=events.metadata_id,
        start_ns=events.start_ns,
        end_ns=events.end_ns,
        stats=stats_out,
    )


def _slots_numpy(
    buf: _Buffer, events: _LineEvents, req_ids: np.ndarray, req_which: np.ndarray, wanted: tuple[str, ...]
) -> list[_Slot]:
    n = len(events.start_ns)
    found = _decode_stats(buf, events.stat_start, events.stat_end, req_ids)
    which = np.full(len(found.metadata_id), -1, dtype=np.int64)
    if len(req_ids):
        pos_in = np.minimum(np.searchsorted(req_ids, found.metadata_id), len(req_ids) - 1)
        # a stat without a value reads as absent (jaxlib yields no name for it)
        which = np.where((req_ids[pos_in] == found.metadata_id) & (found.kind != STAT_ABSENT), req_which[pos_in], -1)
    slots = []
    for i in range(len(wanted)):
        rows = np.flatnonzero(which == i)
        slots.append(_slot_from_stats(n, found, rows, events.stat_event[found.row[rows]]))
    return slots


# --------------------------------------------------------------------------------------------- compiled route

# Three routes decode the same bytes to the same columns (the tests run each against the others and
# against jaxlib): "native", the C kernels of _xplane_native.c (built by setup.py where a C compiler is
# there; they load at once, so they serve any size); "numba", the same loops in _xplane_jit.py (the `fast`
# extra); "numpy", lockstep array passes (always there).
DECODER_ROUTES = ("native", "numba", "numpy")
DECODER_ENV = "MOEPROF_XPLANE_DECODER"  # native | numba | numpy; unset (or auto): the fastest there
_KERNELS: dict[str, ModuleType | None] = {}  # route -> its kernels, None where they do not load
# numba costs CPU in every process: its import, and a first dispatch that, even from its cache, loads
# numba's typing registries, whose BLAS check imports scipy.linalg where jax installed scipy. It then decodes
# faster than numpy: from about this size on, where the native kernels are not built (docs/performance.md)
JIT_FROM_BYTES = 56 << 20
# In moeprof's own processes the BLAS check is skipped (_numba_without_blas_check), which moves the
# crossover down (docs/performance.md)
JIT_FROM_BYTES_OWNED = 40 << 20


def _load_kernels(route: str) -> ModuleType | None:
    """The kernels of a compiled route, imported once per process; None where they are not there."""
    if route not in _KERNELS:
        module: ModuleType | None = None
        try:
            if route == "native":
                from . import _xplane_native as module
            elif route == "numba":
                with _numba_without_blas_check():
                    from . import _xplane_jit as module
        except ImportError:  # not built (no C compiler at install), or numba not installed
            module = None
        _KERNELS[route] = module
    return _KERNELS[route]


def installed_routes() -> list[str]:
    """The routes this install has, found without loading them: numpy always, numba with the `fast`
    extra, native where the C kernels were built (``_choose_route`` still falls back if one fails to load)."""
    import importlib.util

    found = {"numba": "numba", "native": f"{__package__}._xplane_native"}
    return [r for r in DECODER_ROUTES if r == "numpy" or importlib.util.find_spec(found[r]) is not None]


_BLAS_PROBE = "scipy.linalg.cython_blas"  # what numba imports to decide whether BLAS is there


@contextmanager
def _numba_without_blas_check() -> Iterator[None]:
    """In moeprof's own processes, let numba's typing registries load without importing scipy.linalg.

    numba sets ``numba.np.arraymath._HAVE_BLAS`` once, on its first dispatch, by importing
    scipy.linalg (more than the decoding it serves below ~40 MiB: docs/performance.md). With the probe
    blocked it reads False, which only makes numba's own np.correlate/convolve use a plain loop in
    this process; np.dot still finds BLAS when compiled. A library call in someone else's process
    keeps numba's default: the setting outlives this call.
    """
    from ..workers import process_is_owned

    if not process_is_owned() or "numba.np.arraymath" in sys.modules or _BLAS_PROBE in sys.modules:
        yield
        return
    sys.modules[_BLAS_PROBE] = None  # type: ignore[assignment]  # an import of it now fails at once
    try:
        import numba.np.arraymath  # noqa: F401  # the module that checks, loaded while the probe fails

        yield
    finally:
        if sys.modules.get(_BLAS_PROBE, 0) is None:
            del sys.modules[_BLAS_PROBE]


def _choose_route(size: int) -> str:
    """The route for a file of ``size`` bytes: MOEPROF_XPLANE_DECODER when it names one that loads,
    else native where built, else numba from the size where its start-up pays, else numpy."""
    from ..workers import process_is_owned

    setting = os.environ.get(DECODER_ENV, "").strip().lower()
    if setting in DECODER_ROUTES:
        wanted = [setting]
    else:
        threshold = JIT_FROM_BYTES_OWNED if process_is_owned() else JIT_FROM_BYTES
        wanted = ["native", "numba"] if size >= threshold else ["native"]
    return next((r for r in wanted if r == "numpy" or _load_kernels(r) is not None), "numpy")


def _kernels_field_run(
    kernels: ModuleType, buf: _Buffer, first: int, end: int, tag: int
) -> tuple[np.ndarray, np.ndarray, int]:
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    capacity = max(64, (end - first) // 48)
    pos = first
    while True:
        body = np.empty(capacity, dtype=np.int64)
        body_end = np.empty(capacity, dtype=np.int64)
        count, pos, err = kernels.field_run(buf.data, pos, end, tag, body, body_end)
        parts.append((body[:count], body_end[:count]))
        if err == FULL:
            capacity *= 2
            continue
        if err != OK:
            raise WireError(KERNEL_ERRORS[err])
        break
    if len(parts) == 1:
        body, body_end = parts[0]
        return body.copy(), body_end.copy(), pos
    return np.concatenate([b for b, _ in parts]), np.concatenate([e for _, e in parts]), pos


def _decode_events_kernels(
    kernels: ModuleType,
    buf: _Buffer,
    body: np.ndarray,
    body_end: np.ndarray,
    timestamp_ns: int,
    req_ids: np.ndarray,
    req_which: np.ndarray,
    wanted: tuple[str, ...],
) -> tuple[_LineEvents, list[_Slot]]:
    m = len(body)
    mid = np.empty(m, dtype=np.int64)
    off = np.empty(m, dtype=np.int64)
    dur = np.empty(m, dtype=np.int64)
    k = len(wanted)
    kind = np.zeros((k, m), dtype=np.int8)
    # written only where a stat is found, and read only where ``kind`` says one is: never zeroed (zeroing
    # them was ~7% of a 1M-event read, the allocator handing back used memory calloc must clear)
    value = np.empty((k, m), dtype=np.int64)
    vstart = np.empty((k, m), dtype=np.int64)
    vend = np.empty((k, m), dtype=np.int64)
    err, _ = kernels.events(
        buf.data,
        body.astype(np.int64, copy=False),
        body_end.astype(np.int64, copy=False),
        req_ids.view(np.int64),
        req_which,
        mid,
        off,
        dur,
        kind,
        value,
        vstart,
        vend,
    )
    if err != OK:
        raise WireError(KERNEL_ERRORS[err])
    empty = np.zeros(0, dtype=np.int64)
    events = _LineEvents(*_ids_and_times(mid, off, dur, timestamp_ns, kernels), empty, empty, empty)
    return events, [_Slot(kind[i], value[i].view(np.uint64), vstart[i], vend[i]) for i in range(k)]


def _ids_and_times(
    metadata_id: np.ndarray,
    offset_ps: np.ndarray,
    duration_ps: np.ndarray,
    timestamp_ns: int,
    kernels: ModuleType | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(metadata ids as int32 where they fit, start_ns, end_ns) from the raw uint64 fields."""
    # |start|, |end| < 2^55 here (int64 ps / 1000, twice): adding a line time this far out could wrap
    # around int64, and no event of the line could be placed anyway (the readers' window is +-2^62 ns)
    if abs(timestamp_ns) >= TIME_LIMIT_NS + 2**55:
        start = np.full(len(offset_ps), UNPLACEABLE_NS, dtype=np.int64)
        end = start.copy()
    elif hasattr(kernels, "ps_to_ns"):  # the native kernels: one pass, where numpy's divmod takes ten
        start, end = np.empty(len(offset_ps), dtype=np.int64), np.empty(len(offset_ps), dtype=np.int64)
        kernels.ps_to_ns(offset_ps.view(np.int64), duration_ps.view(np.int64), timestamp_ns, start, end)  # type: ignore[union-attr]
    else:
        start, end = _ps_to_ns(offset_ps.view(np.int64), duration_ps.view(np.int64))
        start += timestamp_ns
        end += timestamp_ns
    mid = metadata_id.view(np.int64)
    if len(mid) and mid.min() >= -(2**31) and mid.max() < 2**31:
        mid = mid.astype(np.int32)
    return mid, start, end
