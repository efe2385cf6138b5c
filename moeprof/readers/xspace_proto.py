"""The XSpace protobuf schema (tsl/profiler/protobuf/xplane.proto), built at run time.

jaxlib reads XPlane events natively (``jax.profiler.ProfileData``) but does not
expose a plane's event metadata, which is where JAX/XLA stores the HLO of every
compiled program (``/host:metadata``, stat ``hlo_proto``), nor ``XSpace.hostnames``.
No wheel ships ``xplane_pb2``, so the few messages needed are declared here and
compiled by the ``protobuf`` runtime that jax already depends on.

Only small parts of a file are decoded with these classes: the top level of the
file is walked with :func:`iter_fields`, and only the metadata plane is parsed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2


class _F:
    """The ``FieldDescriptorProto`` type and label numbers of descriptor.proto (protobuf is imported only
    when the message classes are built: reading field headers needs none of it)."""

    TYPE_DOUBLE = 1
    TYPE_INT64 = 3
    TYPE_UINT64 = 4
    TYPE_STRING = 9
    TYPE_MESSAGE = 11
    TYPE_BYTES = 12
    LABEL_OPTIONAL = 1
    LABEL_REPEATED = 3


# (message, [(field name, number, type, label, message type name)])
_SCHEMA: list[tuple[str, list[tuple[str, int, int, int, str | None]]]] = [
    (
        "XSpace",
        [
            ("planes", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XPlane"),
            ("errors", 2, _F.TYPE_STRING, _F.LABEL_REPEATED, None),
            ("warnings", 3, _F.TYPE_STRING, _F.LABEL_REPEATED, None),
            ("hostnames", 4, _F.TYPE_STRING, _F.LABEL_REPEATED, None),
        ],
    ),
    (
        "XPlane",
        [
            ("id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
            ("lines", 3, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XLine"),
            ("event_metadata", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XPlane.EventMetadataEntry"),
            ("stat_metadata", 5, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XPlane.StatMetadataEntry"),
            ("stats", 6, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XStat"),
        ],
    ),
    (
        "XLine",
        [
            ("id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("display_id", 10, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
            ("display_name", 11, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
            ("timestamp_ns", 3, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("duration_ps", 9, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("events", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XEvent"),
        ],
    ),
    (
        "XEvent",
        [
            ("metadata_id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("offset_ps", 2, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("num_occurrences", 5, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("duration_ps", 3, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("stats", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XStat"),
        ],
    ),
    (
        "XStat",
        [
            ("metadata_id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("double_value", 2, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, None),
            ("uint64_value", 3, _F.TYPE_UINT64, _F.LABEL_OPTIONAL, None),
            ("int64_value", 4, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("str_value", 5, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
            ("bytes_value", 6, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, None),
            ("ref_value", 7, _F.TYPE_UINT64, _F.LABEL_OPTIONAL, None),
        ],
    ),
    (
        "XEventMetadata",
        [
            ("id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
            ("display_name", 4, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
            ("metadata", 3, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, None),
            ("stats", 5, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "XStat"),
            ("child_id", 6, _F.TYPE_INT64, _F.LABEL_REPEATED, None),
        ],
    ),
    (
        "XStatMetadata",
        [
            ("id", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None),
            ("name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
            ("description", 3, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
        ],
    ),
]

_PACKAGE = "moeprof_xplane"


# fields inside a proto `oneof`: set values are written even when zero (a step number 0, an offset 0)
_ONEOFS = {"XStat": ("value", range(2, 8)), "XEvent": ("data", (2, 5))}


def _add_message(file: descriptor_pb2.FileDescriptorProto, name: str, fields: list) -> None:
    msg = file.message_type.add(name=name)
    oneof = _ONEOFS.get(name)
    if oneof:
        msg.oneof_decl.add(name=oneof[0])
    for fname, number, ftype, label, type_name in fields:
        field = msg.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name:
            field.type_name = f".{_PACKAGE}.{type_name}"
        if oneof and number in oneof[1]:
            field.oneof_index = 0
    if name == "XPlane":
        for entry, value in (("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")):
            nested = msg.nested_type.add(name=entry)
            nested.options.map_entry = True
            nested.field.add(name="key", number=1, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)
            nested.field.add(
                name="value",
                number=2,
                type=_F.TYPE_MESSAGE,
                label=_F.LABEL_OPTIONAL,
                type_name=f".{_PACKAGE}.{value}",
            )


@cache
def messages() -> dict[str, type]:
    """Message classes keyed by name: ``XSpace``, ``XPlane``, ``XLine``, ..."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="moeprof_xplane.proto", package=_PACKAGE, syntax="proto3")
    for name, fields in _SCHEMA:
        _add_message(file, name, fields)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")) for name, _ in _SCHEMA
    }


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def iter_fields(
    data: bytes | memoryview, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, int, int]]:
    """Yield ``(field number, wire type, value start, value end)`` for each top-level field.

    For varints the value is returned as ``value start`` (and ``value end`` is
    the position after it); length-delimited values are not copied, so walking
    the top level of a 1 GB file costs one step per field.
    """
    pos = start
    end = len(data) if end is None else end
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, pos2 = _varint(data, pos)
            yield number, wire, value, pos2
            pos = pos2
        elif wire == 1:
            yield number, wire, pos, pos + 8
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise WireError("length-delimited field runs past the end")
            yield number, wire, pos, pos + length
            pos += length
        elif wire == 5:
            yield number, wire, pos, pos + 4
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire}")
    if pos != end:
        raise WireError("message runs past the end")


def length_delimited(data: bytes | memoryview, number: int) -> bytes | None:
    """The first length-delimited field ``number`` of a message, or None."""
    for num, wire, start, end in iter_fields(data):
        if num == number and wire == 2:
            return bytes(data[start:end])
    return None


def _read_varint(fh, pos: int) -> tuple[int, int]:
    fh.seek(pos)
    head = fh.read(10)
    value, used = _varint(head, 0)
    return value, pos + used


def peek(path: str | Path, read_plane: str | None = None) -> tuple[list[str], list[str], bytes | None]:
    """Host names and plane names of an XSpace file, reading only field headers (seeks, no parse),
    and the whole bytes of the plane named ``read_plane`` when there is one.

    Lets a multi-file job be laid out (which files are processes of one host)
    before any file is read in full, and the HLO plane be read without the events.
    """
    hostnames: list[str] = []
    planes: list[str] = []
    wanted: bytes | None = None
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        pos = 0
        while pos < size:
            key, pos = _read_varint(fh, pos)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise WireError("field number 0")
            if wire == 0:
                _, pos = _read_varint(fh, pos)
                continue
            if wire != 2:
                if wire not in (1, 5):
                    raise WireError(f"unsupported wire type {wire}")
                pos += 8 if wire == 1 else 4
                continue
            length, pos = _read_varint(fh, pos)
            if pos + length > size:
                raise WireError("a field runs past the end of the file")
            if number == 4:
                fh.seek(pos)
                hostnames.append(fh.read(length).decode("utf-8", "replace"))
            elif number == 1:
                fh.seek(pos)
                name = length_delimited_prefix(fh.read(min(length, 1024)), 2) or ""
                planes.append(name)
                if read_plane is not None and name == read_plane:
                    fh.seek(pos)
                    wanted = fh.read(length)
            pos += length
    return hostnames, planes, wanted


def length_delimited_prefix(data: bytes, number: int) -> str | None:
    """Field ``number`` of a message whose bytes may be cut short (it is usually near the start)."""
    try:
        for num, wire, start, end in iter_fields(data):
            if num == number and wire == 2:
                return bytes(data[start:end]).decode("utf-8", "replace")
    except WireError:
        return None
    return None


class _Window:
    """Reads of a file through one window of ``size`` bytes: the small fields of a message that follow one
    another (map entries, stats) come from one read; a large field (a line of events) is jumped over."""

    def __init__(self, fh: BinaryIO, size: int = 1 << 16) -> None:
        self.fh, self.size, self.start, self.data = fh, size, 0, b""

    def read(self, pos: int, n: int) -> bytes:
        if not (self.start <= pos and pos + n <= self.start + len(self.data)):
            self.fh.seek(pos)
            self.data, self.start = self.fh.read(max(n, self.size)), pos
        return self.data[pos - self.start : pos - self.start + n]


def _fields_at(window: _Window, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """The length-delimited fields of one message in a file, reading headers only:
    ``(number, value start, value end)``."""
    pos = start
    while pos < end:
        head = window.read(pos, min(20, end - pos))
        key, used = _varint(head, 0)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            used = _varint(head, used)[1]
            pos += used
            continue
        if wire in (1, 5):
            pos += used + (8 if wire == 1 else 4)
            continue
        if wire != 2:
            raise WireError(f"unsupported wire type {wire}")
        length, used = _varint(head, used)
        pos += used
        if pos + length > end:
            raise WireError("a field runs past the end of its message")
        yield number, pos, pos + length
        pos += length


# XPlane fields a plane's own stats need: stat_metadata (5) and stats (6), never lines or event metadata
_STAT_METADATA, _STATS = 5, 6
_PLANE_STATS = (_STAT_METADATA, _STATS)


def _stat_value(data: bytes, start: int, end: int) -> tuple[int, object] | None:
    """(metadata id, value) of one XStat message, decoded by hand (no protobuf: reading a file never builds
    its message classes unless it has HLO to parse)."""
    metadata_id, value = 0, None
    for number, wire, vstart, vend in iter_fields(data, start, end):
        if number == 1 and wire == 0:
            metadata_id = vstart
        elif number == 2 and wire == 1:
            value = struct.unpack_from("<d", data, vstart)[0]
        elif number in (3, 7) and wire == 0:
            value = vstart
        elif number == 4 and wire == 0:
            value = vstart - (1 << 64) if vstart >= 1 << 63 else vstart
        elif number == 5 and wire == 2:
            value = bytes(data[vstart:vend]).decode("utf-8", "replace")
    return None if value is None else (metadata_id, value)


def _entry_key(data: bytes, start: int, end: int) -> int | None:
    """The key of a map entry (field 1, a varint, written first), without decoding the rest."""
    if start < end and data[start] == 0x08:
        return _varint(data, start + 1)[0]
    return next((v for n, w, v, _ in iter_fields(data, start, end) if n == 1 and w == 0), None)


def _stat_name(data: bytes, start: int, end: int) -> str:
    """The name of one ``stat_metadata`` map entry's XStatMetadata."""
    value = next((bytes(data[s:e]) for n, w, s, e in iter_fields(data, start, end) if n == 2 and w == 2), b"")
    return length_delimited_prefix(value, 2) or ""


def plane_stats(path: str | Path, wanted: Callable[[str], bool]) -> dict[str, dict[str, object]]:
    """Plane name -> its own stats (name -> value) for the planes ``wanted`` accepts, reading field headers
    and those planes' stat metadata and stats only (a device's events are skipped by seeks)."""
    out: dict[str, dict[str, object]] = {}
    with open(path, "rb") as fh:
        window = _Window(fh)
        size = fh.seek(0, 2)
        for number, start, end in _fields_at(window, 0, size):
            if number != 1:
                continue
            name = length_delimited_prefix(window.read(start, min(end - start, 1024)), 2) or ""
            if not wanted(name):
                continue
            parts = [
                (sub, window.read(sub_start, sub_end - sub_start), 0, sub_end - sub_start)
                for sub, sub_start, sub_end in _fields_at(window, start, end)
                if sub in _PLANE_STATS
            ]
            values = [v for n, d, s, e in parts if n == _STATS and (v := _stat_value(d, s, e)) is not None]
            used = {k for k, _ in values}
            names = {}  # only the names of the stats the plane has (a plane may declare a thousand)
            for n, d, s, e in parts:
                if n == _STAT_METADATA and (key := _entry_key(d, s, e)) in used:
                    names[key] = _stat_name(d, s, e)
            out[name] = {names.get(k, ""): v for k, v in values}
    return out
