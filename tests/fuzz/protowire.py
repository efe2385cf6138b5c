"""The protobuf wire format as an editable tree, with the XSpace schema's field numbers.

The fuzzer edits XPlane files below the level any protobuf library allows: a
field re-encoded with the wrong wire type, a varint of 2^64-1 in an int64, a
sub-message cut short, a string that is not UTF-8. So it keeps its own codec
instead of generated classes, and its own copy of the field numbers of
tsl/profiler/protobuf/xplane.proto (public, stable) instead of moeprof's.
"""

from __future__ import annotations

from dataclasses import dataclass

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5

# message -> {field number: (name, kind)}; kind is a scalar type or the name of a sub-message
SCHEMA: dict[str, dict[int, tuple[str, str]]] = {
    "XSpace": {1: ("planes", "XPlane"), 2: ("errors", "string"), 3: ("warnings", "string"), 4: ("hostnames", "string")},
    "XPlane": {
        1: ("id", "int64"),
        2: ("name", "string"),
        3: ("lines", "XLine"),
        4: ("event_metadata", "EventMetadataEntry"),
        5: ("stat_metadata", "StatMetadataEntry"),
        6: ("stats", "XStat"),
    },
    "EventMetadataEntry": {1: ("key", "int64"), 2: ("value", "XEventMetadata")},
    "StatMetadataEntry": {1: ("key", "int64"), 2: ("value", "XStatMetadata")},
    "XLine": {
        1: ("id", "int64"),
        10: ("display_id", "int64"),
        2: ("name", "string"),
        11: ("display_name", "string"),
        3: ("timestamp_ns", "int64"),
        9: ("duration_ps", "int64"),
        4: ("events", "XEvent"),
    },
    "XEvent": {
        1: ("metadata_id", "int64"),
        2: ("offset_ps", "int64"),
        5: ("num_occurrences", "int64"),
        3: ("duration_ps", "int64"),
        4: ("stats", "XStat"),
    },
    "XStat": {
        1: ("metadata_id", "int64"),
        2: ("double_value", "double"),
        3: ("uint64_value", "uint64"),
        4: ("int64_value", "int64"),
        5: ("str_value", "string"),
        6: ("bytes_value", "bytes"),
        7: ("ref_value", "uint64"),
    },
    "XEventMetadata": {
        1: ("id", "int64"),
        2: ("name", "string"),
        4: ("display_name", "string"),
        3: ("metadata", "bytes"),
        5: ("stats", "XStat"),
        6: ("child_id", "packed_int64"),
    },
    "XStatMetadata": {1: ("id", "int64"), 2: ("name", "string"), 3: ("description", "string")},
}


class WireError(ValueError):
    pass


@dataclass
class Field:
    """One field occurrence. ``value``: int (varint, fixed), bytes, or the decoded fields of a sub-message."""

    number: int
    wire: int
    value: int | bytes | list[Field]
    kind: str = "unknown"  # scalar type or message name from SCHEMA
    name: str = "?"

    @property
    def is_message(self) -> bool:
        return isinstance(self.value, list)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise WireError("varint too long")


def varint(value: int) -> bytes:
    """Encode like protobuf: negative int64 values as their 64-bit two's complement (10 bytes)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def decode(data: bytes, message: str = "XSpace") -> list[Field]:
    """Fields of ``data`` read as ``message``; sub-messages of the schema are decoded too."""
    schema = SCHEMA.get(message, {})
    fields: list[Field] = []
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        name, kind = schema.get(number, ("?", "unknown"))
        if wire == VARINT:
            value, pos = read_varint(data, pos)
            fields.append(Field(number, wire, value, kind, name))
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            if pos + size > len(data):
                raise WireError("truncated fixed-size field")
            fields.append(Field(number, wire, int.from_bytes(data[pos : pos + size], "little"), kind, name))
            pos += size
        elif wire == LENGTH:
            length, pos = read_varint(data, pos)
            if pos + length > len(data):
                raise WireError("length-delimited field runs past the end")
            raw = data[pos : pos + length]
            pos += length
            if kind in SCHEMA:
                try:
                    sub = decode(raw, kind)
                    fields.append(Field(number, wire, sub, kind, name))
                    continue
                except WireError:
                    pass
            fields.append(Field(number, wire, raw, kind, name))
        else:
            raise WireError(f"wire type {wire}")
    return fields


def encode(fields: list[Field]) -> bytes:
    out = bytearray()
    for f in fields:
        out += varint(f.number << 3 | f.wire)
        if f.wire == VARINT:
            assert isinstance(f.value, int)
            out += varint(f.value)
        elif f.wire in (FIXED64, FIXED32):
            assert isinstance(f.value, int)
            out += (f.value & ((1 << (64 if f.wire == FIXED64 else 32)) - 1)).to_bytes(
                8 if f.wire == FIXED64 else 4, "little"
            )
        else:
            raw = encode(f.value) if isinstance(f.value, list) else f.value
            assert isinstance(raw, bytes)
            out += varint(len(raw)) + raw
    return bytes(out)


def walk(fields: list[Field], message: str = "XSpace", path: tuple[str, ...] = ()):
    """Yield ``(path, container list, index, field, message type)`` for every field, depth first."""
    for i, f in enumerate(fields):
        here = (*path, f"{message}.{f.name}[{i}]")
        yield here, fields, i, f, message
        if isinstance(f.value, list):
            yield from walk(f.value, f.kind, here)


def get(fields: list[Field], name: str) -> list[Field]:
    return [f for f in fields if f.name == name]


def text(f: Field) -> str:
    return f.value.decode("utf-8", "replace") if isinstance(f.value, bytes) else ""
