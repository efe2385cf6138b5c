"""Vectorized protobuf encoding of XPlane events: millions of events without a Python object per event.

Large test traces (the benchmark's 10M events) cannot be built through the
protobuf classes (minutes and gigabytes); here one message per row is encoded
column by column: each field is a fixed-width byte matrix with a mask of the
bytes it uses, the fields of a row are laid side by side, and the masked bytes
read row-major are the messages, one after another.

Small parts (planes' metadata, line headers) still go through the protobuf
classes of ``moeprof.readers.xspace_proto``; their bytes are joined with these,
as protobuf allows (a message is the concatenation of its fields).
"""

from __future__ import annotations

import numpy as np

MAX_VARINT = 10


def varint_bytes(value: int) -> bytes:
    """One varint (for headers written by hand)."""
    value &= (1 << 64) - 1  # negative int64 are written as their two's complement, ten bytes
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints of ``values`` as an (n, width) byte matrix and the mask of the bytes each one uses."""
    v = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    nbytes = np.ones(len(v), dtype=np.int64)
    for k in range(1, MAX_VARINT):
        nbytes += v >= np.uint64(1) << np.uint64(7 * k)
    width = int(nbytes.max()) if len(v) else 1
    cols = np.arange(width)
    groups = (v[:, None] >> (np.uint64(7) * cols.astype(np.uint64))[None, :]) & np.uint64(0x7F)
    more = cols[None, :] < (nbytes[:, None] - 1)
    mat = (groups | np.where(more, np.uint64(0x80), np.uint64(0))).astype(np.uint8)
    return mat, cols[None, :] < nbytes[:, None]


class Fields:
    """The fields of ``n`` messages of one type, added field by field (in the order given)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.mats: list[np.ndarray] = []
        self.masks: list[np.ndarray] = []

    def _add(self, mat: np.ndarray, mask: np.ndarray, present: np.ndarray | None) -> None:
        if present is not None:
            mask = mask & np.asarray(present, dtype=bool)[:, None]
        self.mats.append(mat)
        self.masks.append(mask)

    def _tag(self, number: int, wire: int) -> tuple[np.ndarray, np.ndarray]:
        tag = varint_bytes(number << 3 | wire)
        mat = np.broadcast_to(np.frombuffer(tag, dtype=np.uint8), (self.n, len(tag)))
        return mat, np.ones((self.n, len(tag)), dtype=bool)

    def varint(self, number: int, values: np.ndarray | int, present: np.ndarray | None = None) -> Fields:
        values = np.broadcast_to(np.asarray(values, dtype=np.int64), (self.n,))
        self._add(*self._tag(number, 0), present)
        self._add(*_varint_matrix(values), present)
        return self

    def double(self, number: int, values: np.ndarray, present: np.ndarray | None = None) -> Fields:
        values = np.broadcast_to(np.asarray(values, dtype="<f8"), (self.n,))
        self._add(*self._tag(number, 1), present)
        self._add(np.ascontiguousarray(values).view(np.uint8).reshape(self.n, 8), np.ones((self.n, 8), bool), present)
        return self

    def strings(
        self, number: int, categories: list[bytes], codes: np.ndarray, present: np.ndarray | None = None
    ) -> Fields:
        """A length-delimited field whose value is ``categories[code]`` on each row."""
        lens = np.array([len(c) for c in categories], dtype=np.int64)
        width = max(int(lens.max()), 1) if len(lens) else 1
        table = np.zeros((len(categories), width), dtype=np.uint8)
        for i, c in enumerate(categories):  # one row per distinct value
            table[i, : len(c)] = np.frombuffer(c, dtype=np.uint8)
        codes = np.broadcast_to(np.asarray(codes, dtype=np.int64), (self.n,))
        row_lens = lens[codes]
        self._add(*self._tag(number, 2), present)
        self._add(*_varint_matrix(row_lens), present)
        self._add(table[codes], np.arange(width)[None, :] < row_lens[:, None], present)
        return self

    def message(self, number: int, sub: Fields, present: np.ndarray | None = None) -> Fields:
        """A nested message field (``sub`` has one message per row)."""
        lens = sub.row_lengths()
        self._add(*self._tag(number, 2), present)
        self._add(*_varint_matrix(lens), present)
        for mat, mask in zip(sub.mats, sub.masks):
            self._add(mat, mask, present)
        return self

    def row_lengths(self) -> np.ndarray:
        return sum((m.sum(axis=1, dtype=np.int64) for m in self.masks), np.zeros(self.n, dtype=np.int64))

    def encode(self) -> bytes:
        """The rows' messages, one after another."""
        if not self.mats or self.n == 0:
            return b""
        mat = np.hstack(self.mats)
        mask = np.hstack(self.masks)
        return mat[mask].tobytes()


def stat(metadata_id: int, n: int) -> Fields:
    """An XStat per row with ``metadata_id`` (add its value with ``varint``/``double``/``strings``)."""
    return Fields(n).varint(1, metadata_id)
