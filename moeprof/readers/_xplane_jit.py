"""Compiled kernels for :mod:`moeprof.readers.xplane_wire` (numba; imported only when available).

The numpy route decodes a line's events in lockstep, about 25 array passes per
field; at millions of events that is no faster than jaxlib's parse. These
kernels walk the same bytes once, in order, with every read checked against
the end of the message it belongs to; they return an error code instead of
raising (the caller turns it into :class:`WireError`). Compiled code is cached
next to this file (or in numba's user cache), so only the first run compiles.
"""

from __future__ import annotations

import numba as nb
import numpy as np

# the error codes are the reader's (the native kernels return the same ones)
from .wire_status import BAD_WIRE, FIELD_ZERO, FULL, LONG_VARINT, OK, PAST_END, TRUNCATED_VARINT

# helpers are inlined into the two entry points: one compiled unit each, and a cheaper cache load


@nb.njit(inline="always")
def _varint(data, pos, end):  # pragma: no cover - compiled
    """(value as int64 bits, position after it); position -1 (truncated) or -2 (too long) on error.

    Written so that LLVM keeps the loop tight: the same function with a ``while True`` loop and the
    too-long test on ``shift`` after it compiled to much slower code (docs/performance.md).
    """
    b = np.int64(data[pos]) if pos < end else np.int64(0x80)
    if b < 0x80:
        return b, pos + np.int64(1)
    result = np.int64(0)
    shift = np.int64(0)
    p = pos
    while p < end and shift < 70:
        b = np.int64(data[p])
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
        shift += 7
    # ten bytes read, each with its continuation bit: too long (even where the message ends there)
    return np.int64(0), np.int64(-2) if p - pos >= 10 else np.int64(-1)


@nb.njit(inline="always")
def _varint_error(p):  # pragma: no cover - compiled
    return TRUNCATED_VARINT if p == -1 else LONG_VARINT


@nb.njit(inline="always")
def _skip(data, pos, end, wire):  # pragma: no cover - compiled
    """Position after a field value of this wire type, or a negative error code."""
    if wire == 0:
        _, p = _varint(data, pos, end)
        return p if p >= 0 else -_varint_error(p)
    if wire == 2:
        length, p = _varint(data, pos, end)
        if p < 0:
            return -_varint_error(p)
        if length < 0 or length > end - p:
            return -PAST_END
        return p + length
    if wire == 1:
        return pos + 8 if pos + 8 <= end else -PAST_END
    if wire == 5:
        return pos + 4 if pos + 4 <= end else -PAST_END
    return -BAD_WIRE


@nb.njit(cache=True, nogil=True)
def field_run(data, first, end, tag, body, body_end):  # pragma: no cover - compiled
    """Consecutive length-delimited fields with one-byte key ``tag`` from ``first``.

    Fills ``body``/``body_end`` with their payloads; returns (count, stop, error):
    stop is where the run ended (or where to resume when error is FULL).
    """
    pos = first
    k = 0
    while pos < end and data[pos] == tag:
        if k == len(body):
            return k, pos, FULL
        length, p = _varint(data, pos + 1, end)
        if p < 0:
            return k, pos, _varint_error(p)
        if length < 0 or length > end - p:
            return k, pos, PAST_END
        body[k] = p
        body_end[k] = p + length
        pos = p + length
        k += 1
    return k, pos, OK


@nb.njit(inline="always")
def _store(mid, kind, value, vstart, vend, row, req_ids, req_slot, skind, svalue, sstart, send):  # pragma: no cover
    """Put one decoded stat in its requested slot (the last one on a row wins); ids not requested are dropped."""
    if kind != 0:
        # requested ids are few: a linear scan
        for r in range(len(req_ids)):
            if req_ids[r] == mid:
                slot = req_slot[r]
                skind[slot, row] = kind
                svalue[slot, row] = value
                sstart[slot, row] = vstart
                send[slot, row] = vend
                break


@nb.njit(inline="never")
def _stat_any_layout(data, pos, end, row, req_ids, req_slot, skind, svalue, sstart, send):  # pragma: no cover
    """One XStat with its fields in any order, repeated or unknown (each field last set wins)."""
    mid = np.int64(0)
    kind = np.int64(0)
    value = np.int64(0)
    vstart = np.int64(0)
    vend = np.int64(0)
    while pos < end:
        key, pos = _varint(data, pos, end)
        if pos < 0:
            return _varint_error(pos)
        number = key >> 3
        wire = key & 7
        if number == 0:
            return FIELD_ZERO
        if wire == 0 and (number == 1 or number == 3 or number == 4 or number == 7):
            v, pos = _varint(data, pos, end)
            if pos < 0:
                return _varint_error(pos)
            if number == 1:
                mid = v
            else:
                kind = number
                value = v
        elif wire == 1 and number == 2:
            if pos + 8 > end:
                return PAST_END
            v = np.int64(0)
            for j in range(8):
                v |= np.int64(data[pos + j]) << (8 * j)
            kind = np.int64(2)
            value = v
            pos += 8
        elif wire == 2 and (number == 5 or number == 6):
            length, p = _varint(data, pos, end)
            if p < 0:
                return _varint_error(p)
            if length < 0 or length > end - p:
                return PAST_END
            kind = number
            vstart = p
            vend = p + length
            pos = vend
        else:
            pos = _skip(data, pos, end, wire)
            if pos < 0:
                return -pos
    _store(mid, kind, value, vstart, vend, row, req_ids, req_slot, skind, svalue, sstart, send)
    return OK


@nb.njit(cache=True, nogil=True)
def events(
    data, body, body_end, req_ids, req_slot, metadata_id, offset_ps, duration_ps, skind, svalue, sstart, send
):  # pragma: no cover - compiled
    """Decode every event (fields in any order); its requested stats go to their slots.

    Values are int64 bit patterns (uint64 fields included). Returns (error code,
    index of the event where it occurred).
    """
    for i in range(len(body)):
        pos = body[i]
        end = body_end[i]
        mid = np.int64(0)
        off = np.int64(0)
        dur = np.int64(0)
        while pos < end:
            key, pos = _varint(data, pos, end)
            if pos < 0:
                return _varint_error(pos), i
            number = key >> 3
            wire = key & 7
            if number == 0:
                return FIELD_ZERO, i
            if wire == 0 and (number == 1 or number == 2 or number == 3 or number == 5):
                v, pos = _varint(data, pos, end)
                if pos < 0:
                    return _varint_error(pos), i
                if number == 1:
                    mid = v
                elif number == 2:
                    off = v
                elif number == 3:
                    dur = v
                else:  # num_occurrences shares a oneof with offset_ps: setting it clears the offset
                    off = np.int64(0)
            elif wire == 2 and number == 4:
                length, p = _varint(data, pos, end)
                if p < 0:
                    return _varint_error(p), i
                if length < 0 or length > end - p:
                    return PAST_END, i
                e = p + length
                done = False
                # the stat layout XLA writes, decoded here: 08 <id> <value key> <value>, the value ending the
                # message (the same code in a function inlined here compiled to slower code: docs/performance.md)
                if length >= 4 and data[p] == 0x08:
                    mid_s, t = _varint(data, p + 1, e)
                    tag = np.int64(data[t]) if 0 < t < e else np.int64(0)
                    if tag == 0x18 or tag == 0x20 or tag == 0x38 or tag == 0x2A or tag == 0x32:
                        v, q = _varint(data, t + 1, e)
                        if q > 0:
                            if tag == 0x2A or tag == 0x32:
                                if v >= 0 and v == e - q:
                                    _store(mid_s, tag >> 3, 0, q, e, i, req_ids, req_slot, skind, svalue, sstart, send)
                                    done = True
                            elif q == e:
                                _store(mid_s, tag >> 3, v, 0, 0, i, req_ids, req_slot, skind, svalue, sstart, send)
                                done = True
                if not done:
                    err = _stat_any_layout(data, p, e, i, req_ids, req_slot, skind, svalue, sstart, send)
                    if err != OK:
                        return err, i
                pos = p + length
            else:
                pos = _skip(data, pos, end, wire)
                if pos < 0:
                    return -pos, i
        metadata_id[i] = mid
        offset_ps[i] = off
        duration_ps[i] = dur
    return OK, 0
