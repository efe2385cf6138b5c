"""Interval math against a brute force that counts nanoseconds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeprof.core import intervals as iv

SPAN = 200
pairs = st.lists(st.tuples(st.integers(0, SPAN), st.integers(0, 60)), max_size=40)


def arrays(items: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([a for a, _ in items], dtype=np.int64)
    e = np.array([a + d for a, d in items], dtype=np.int64)
    return s, e


def mask(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    m = np.zeros(SPAN + 100, dtype=bool)
    for a, b in zip(s, e):
        m[a:b] = True
    return m


@pytest.mark.slow
@given(pairs)
def test_union_matches_brute_force(items):
    s, e = arrays(items)
    us, ue = iv.union(s, e)
    assert iv.length(us, ue) == mask(s, e).sum()
    # disjoint, sorted, non-touching segments
    assert np.all(us[1:] > ue[:-1])
    assert np.array_equal(mask(us, ue), mask(s, e))


@given(pairs, pairs)
def test_overlap_each_matches_brute_force(items, others):
    s, e = arrays(items)
    os_, oe = iv.union(*arrays(others))
    m = mask(os_, oe)
    got = iv.overlap_each(s, e, os_, oe)
    expected = [int(m[a:b].sum()) for a, b in zip(s, e)]
    assert got.tolist() == expected


@pytest.mark.slow
@given(pairs, pairs)
def test_intersect_matches_brute_force(a, b):
    a_s, a_e = iv.union(*arrays(a))
    b_s, b_e = iv.union(*arrays(b))
    i_s, i_e = iv.intersect(a_s, a_e, b_s, b_e)
    assert np.array_equal(mask(i_s, i_e), mask(a_s, a_e) & mask(b_s, b_e))


@pytest.mark.slow
@settings(max_examples=200)
@given(pairs, pairs)
def test_clip_to_multi_segment_window(items, window):
    s, e = arrays(items)
    w_s, w_e = iv.union(*arrays(window))
    if w_s.size == 0:
        return
    c_s, c_e, idx = iv.clip(s, e, w_s, w_e)
    w = mask(w_s, w_e)
    # each interval's clipped length is its overlap with the window
    per = np.zeros(s.size, dtype=np.int64)
    np.add.at(per, idx, c_e - c_s)
    assert per.tolist() == [int(w[a:b].sum()) for a, b in zip(s, e)]
    assert np.all(c_e > c_s)


def test_union_of_nothing():
    s, e = iv.union(np.array([], np.int64), np.array([], np.int64))
    assert s.size == 0 and iv.length(s, e) == 0
    assert iv.overlap_each(np.array([1]), np.array([5]), s, e).tolist() == [0]


@given(st.lists(st.integers(-10, SPAN + 20), max_size=30), pairs)
def test_inside_matches_brute_force(points, items):
    s, e = iv.union(*arrays(items))
    m = mask(s, e)
    got = iv.inside(np.array(points, dtype=np.int64), s, e)
    assert got.tolist() == [bool(0 <= p < m.size and m[p]) for p in points]


@given(pairs, pairs)
def test_overlap_length_matches_brute_force(a, b):
    a_s, a_e = iv.union(*arrays(a))
    b_s, b_e = iv.union(*arrays(b))
    assert iv.overlap_length(a_s, a_e, b_s, b_e) == int((mask(a_s, a_e) & mask(b_s, b_e)).sum())


def test_sum_by_index_is_exact_int64():
    big = 2**53 + 1  # not representable in float64: a bincount with weights would round it
    got = iv.sum_by_index(np.array([big, 1, 5]), np.array([0, 0, 2]), 4)
    assert got.tolist() == [big + 1, 0, 5, 0]
