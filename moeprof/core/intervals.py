"""Interval arithmetic on sorted numpy arrays: unions, coverage, overlap.

Intervals are half-open ``[start, end)`` in integer ns. Everything is
vectorized; no Python loop runs per interval.
"""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray, presorted: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint ``[start, end)`` segments (empty ones dropped).

    ``presorted``: the starts are already in increasing order (no sort needed).
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return starts, ends
    if presorted:
        s, e = starts, ends
    else:
        order = np.argsort(starts, kind="stable")
        s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # a new segment begins where an interval starts after everything before it ended
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, s.size - 1]
    return s[first], reach[last]


def length(seg_starts: np.ndarray, seg_ends: np.ndarray) -> int:
    return int(np.sum(seg_ends - seg_starts, dtype=np.int64))


def union_length(starts: np.ndarray, ends: np.ndarray, presorted: bool = False) -> int:
    return length(*union(starts, ends, presorted))


def coverage(seg_starts: np.ndarray, seg_ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Measure of the disjoint segments below each point: ``|segments ∩ (-inf, p)|``."""
    points = np.asarray(points, dtype=np.int64)
    if seg_starts.size == 0:
        return np.zeros(points.shape, dtype=np.int64)
    return _coverage(_prefix(seg_starts, seg_ends), seg_starts, seg_ends, points)


def _prefix(seg_starts: np.ndarray, seg_ends: np.ndarray) -> np.ndarray:
    """The measure of the first k disjoint segments, for k in [0, n]."""
    prefix = np.empty(seg_starts.size + 1, dtype=np.int64)
    prefix[0] = 0
    np.cumsum(seg_ends - seg_starts, dtype=np.int64, out=prefix[1:])
    return prefix


def _coverage(prefix: np.ndarray, seg_starts: np.ndarray, seg_ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """:func:`coverage` with the segments' :func:`_prefix` given (non-empty segments)."""
    i = np.searchsorted(seg_starts, points, side="right")  # segments starting at or before p
    j = np.maximum(i - 1, 0)
    inside = np.maximum(np.minimum(points, seg_ends[j]) - seg_starts[j], 0)  # of the last of them
    return np.where(i > 0, prefix[j] + inside, 0)


def overlap_each(starts: np.ndarray, ends: np.ndarray, seg_starts: np.ndarray, seg_ends: np.ndarray) -> np.ndarray:
    """For each interval, the length of its overlap with the disjoint segments."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.maximum(np.asarray(ends, dtype=np.int64), starts)
    if seg_starts.size == 0:
        return np.zeros(starts.shape, dtype=np.int64)
    prefix = _prefix(seg_starts, seg_ends)  # once for both ends
    return _coverage(prefix, seg_starts, seg_ends, ends) - _coverage(prefix, seg_starts, seg_ends, starts)


def intersect(
    a_starts: np.ndarray, a_ends: np.ndarray, b_starts: np.ndarray, b_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two sets of disjoint sorted segments, as disjoint sorted segments."""
    if a_starts.size == 0 or b_starts.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    # every boundary of either set; a piece between two boundaries is in both or not
    bounds = np.unique(np.concatenate([a_starts, a_ends, b_starts, b_ends]))
    lo, hi = bounds[:-1], bounds[1:]

    def inside(seg_s: np.ndarray, seg_e: np.ndarray) -> np.ndarray:
        k = np.searchsorted(seg_s, lo, side="right") - 1
        return (k >= 0) & (hi <= seg_e[np.maximum(k, 0)])

    keep = inside(a_starts, a_ends) & inside(b_starts, b_ends)
    return union(lo[keep], hi[keep])


def clip(
    starts: np.ndarray, ends: np.ndarray, win_starts: np.ndarray, win_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clip intervals to a window made of disjoint sorted segments.

    Returns ``(starts, ends, index)``: one piece per (interval, window segment)
    overlap, ``index`` the interval each piece came from. With a single window
    segment this is one ``np.clip``.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if win_starts.size == 1:
        s = np.clip(starts, win_starts[0], win_ends[0])
        e = np.clip(ends, win_starts[0], win_ends[0])
        keep = e > s
        return s[keep], e[keep], np.flatnonzero(keep)
    # first and last window segment each interval can touch
    first = np.searchsorted(win_ends, starts, side="right")
    last = np.searchsorted(win_starts, ends, side="left") - 1
    counts = np.maximum(last - first + 1, 0)
    index = np.repeat(np.arange(starts.size), counts)
    offsets = np.arange(index.size) - np.repeat(np.cumsum(counts) - counts, counts)
    seg = first[index] + offsets
    s = np.maximum(starts[index], win_starts[seg])
    e = np.minimum(ends[index], win_ends[seg])
    keep = e > s
    return s[keep], e[keep], index[keep]


def subtract(
    a_starts: np.ndarray, a_ends: np.ndarray, b_starts: np.ndarray, b_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted segments A minus disjoint sorted segments B, as disjoint sorted segments.

    A minus B is A clipped to the gaps of B: one :func:`clip`, linear in the segments.
    """
    if a_starts.size == 0 or b_starts.size == 0:
        return a_starts.copy(), a_ends.copy()
    lo = min(int(a_starts[0]), int(b_starts[0]))
    hi = max(int(a_ends[-1]), int(b_ends[-1]))
    gap_s = np.r_[np.int64(lo), b_ends].astype(np.int64)
    gap_e = np.r_[b_starts, np.int64(hi)].astype(np.int64)
    keep = gap_e > gap_s
    if not keep.any():
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s, e, _ = clip(a_starts, a_ends, gap_s[keep], gap_e[keep])
    return s, e


def inside(points: np.ndarray, seg_starts: np.ndarray, seg_ends: np.ndarray) -> np.ndarray:
    """For each point, whether it lies in one of the disjoint sorted segments (half-open)."""
    points = np.asarray(points, dtype=np.int64)
    if seg_starts.size == 0:
        return np.zeros(points.shape, dtype=bool)
    k = np.searchsorted(seg_starts, points, side="right") - 1
    return (k >= 0) & (points < seg_ends[np.maximum(k, 0)])


def overlap_length(a_starts: np.ndarray, a_ends: np.ndarray, b_starts: np.ndarray, b_ends: np.ndarray) -> int:
    """``|A ∩ B|`` for two sets of disjoint sorted segments, without building the intersection."""
    if a_starts.size == 0 or b_starts.size == 0:
        return 0
    return int(np.sum(overlap_each(a_starts, a_ends, b_starts, b_ends), dtype=np.int64))


def sum_by_index(values: np.ndarray, index: np.ndarray, size: int) -> np.ndarray:
    """``out[i] = Σ values[index == i]`` in int64 (``np.bincount`` would go through float64)."""
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, np.asarray(index, dtype=np.int64), np.asarray(values, dtype=np.int64))
    return out
