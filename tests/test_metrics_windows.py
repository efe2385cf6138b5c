"""A device's figures per window: the one-pass route (all steps at once) against one window at a time,
and both against nanosecond masks; the column helpers the map step uses against their plain forms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeprof.core import intervals as iv
from moeprof.core.events import categorical, categorical_of, present_values
from moeprof.core.metrics import DeviceTimeline

SPAN = 300
BUCKET_CHOICES = ("compute", "comm", "memcpy", "other", "")
IB_CHOICES = (np.nan, 0.0, 0.25, 1.0)

activities = st.lists(
    st.tuples(
        st.integers(0, SPAN),
        st.integers(0, 50),
        st.sampled_from(BUCKET_CHOICES),
        st.sampled_from(IB_CHOICES),
    ),
    min_size=1,
    max_size=40,
)
windows = st.lists(st.tuples(st.integers(0, SPAN + 40), st.integers(0, 120)), min_size=1, max_size=8)


def timeline(items: list[tuple[int, int, str, float]], origin: int = 0, comm_ib: bool = True) -> DeviceTimeline:
    frame = pd.DataFrame(
        {
            "start_ns": np.array([origin + a for a, _, _, _ in items], dtype=np.int64),
            "end_ns": np.array([origin + a + d for a, d, _, _ in items], dtype=np.int64),
            "bucket": np.array([b for _, _, b, _ in items], dtype=object),
            "ib_fraction": np.array([ib if (b == "comm" and comm_ib) else np.nan for _, _, b, ib in items]),
        }
    )
    return DeviceTimeline(frame)


def covered(items: list[tuple[int, int, str, float]], buckets: set[str], lo: int, hi: int) -> np.ndarray:
    """Nanosecond mask over [lo, hi) of the activities of some buckets."""
    m = np.zeros(max(hi - lo, 0), dtype=bool)
    for a, d, b, _ in items:
        if b in buckets:
            m[max(a, lo) - lo : max(min(a + d, hi) - lo, 0)] = True
    return m


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(activities, windows)
def test_each_window_matches_one_at_a_time_and_brute_force(items, wins):
    tl = timeline(items)
    ws = np.array([s for s, _ in wins], dtype=np.int64)
    we = np.array([s + d for s, d in wins], dtype=np.int64)
    each = tl.measure_each(ws, we)
    one = [tl.measure(ws[i : i + 1], we[i : i + 1], per_row=False).figures for i in range(ws.size)]
    full = [tl.measure(ws[i : i + 1], we[i : i + 1]).figures for i in range(ws.size)]
    assert each == one == full
    # read off the unions of a window that holds them all: the device's whole span, or the windows' union
    assert tl.measure_each(ws, we, tl.measure()) == each
    u_s, u_e = iv.union(ws, we)
    if u_s.size:
        assert tl.measure_each(ws, we, tl.measure(u_s, u_e)) == each
    # a window that holds neither: measured without the shortcut
    assert tl.measure_each(ws, we, tl.measure(np.array([0]), np.array([1]))) == each
    for f, lo, hi in zip(each, ws.tolist(), we.tolist()):
        comm = covered(items, {"comm"}, lo, hi)
        compute = covered(items, {"compute"}, lo, hi)
        assert f.span_ns == hi - lo
        assert f.busy_ns == covered(items, set(BUCKET_CHOICES), lo, hi).sum()
        assert f.exposed_comm_ns == (comm & ~compute).sum()
        assert f.overlapped_comm_ns == (comm & compute).sum()
        assert f.compute_ns == sum(max(min(a + d, hi) - max(a, lo), 0) for a, d, b, _ in items if b == "compute")
        assert f.accumulated_ns == sum(max(min(a + d, hi) - max(a, lo), 0) for a, d, _, _ in items)
        exposed_split = f.exposed_comm_nvlink_ns + f.exposed_comm_ib_ns + f.exposed_comm_unknown_link_ns
        assert exposed_split == f.exposed_comm_ns


@settings(max_examples=100, deadline=None)
@given(activities, windows, st.booleans())
def test_each_window_at_epoch_times_and_uniform_links(items, wins, comm_ib):
    """Wall-clock (epoch) ns, and every comm activity's link unknown or all known: the figures do not move."""
    origin = 1_733_011_200_000_000_000
    tl = timeline(items, origin, comm_ib)
    ws = np.array([origin + s for s, _ in wins], dtype=np.int64)
    we = np.array([origin + s + d for s, d in wins], dtype=np.int64)
    shifted = [tl.measure(ws[i : i + 1], we[i : i + 1]).figures for i in range(ws.size)]
    assert tl.measure_each(ws, we) == shifted
    assert shifted == timeline(items, 0, comm_ib).measure_each(ws - origin, we - origin)


def test_windows_too_far_apart_for_bands_are_measured_one_at_a_time():
    items = [(0, 30, "compute", np.nan), (10, 40, "comm", 0.0), (60, 5, "comm", 1.0)]
    tl = timeline(items)
    # ten windows spread over 2**60 ns: their bands would overflow int64
    ws = np.array([0, *[(1 << 60) // 9 * i for i in range(1, 10)]], dtype=np.int64)
    we = ws + 50
    each = tl.measure_each(ws, we)
    assert each == [tl.measure(ws[i : i + 1], we[i : i + 1]).figures for i in range(10)]
    assert each[0].busy_ns == 50 and each[0].exposed_comm_ns == 20 and all(f.busy_ns == 0 for f in each[1:])


codes_and_values = st.tuples(
    st.lists(st.integers(0, 5), max_size=30),
    st.lists(st.sampled_from(["", "a", "b", "all-to-all", "a"]), min_size=6, max_size=6),
)


@given(codes_and_values)
def test_categorical_of_codes_is_the_categorical_of_the_strings(args):
    codes, values = args
    codes_arr = np.array(codes, dtype=np.int64)
    values_arr = np.array(values, dtype=object)
    strings = np.array([values[c] for c in codes], dtype=object)
    expected = categorical(strings, len(codes))
    got = categorical_of(codes_arr, values_arr)
    assert list(got.categories) == list(expected.categories)
    assert np.array_equal(np.asarray(got.codes), np.asarray(expected.codes))


@given(st.lists(st.sampled_from(["x", "y", "", "z"]), max_size=30))
def test_present_values_leave_unused_categories_out(values):
    column = pd.Series(pd.Categorical(values, categories=["w", "x", "y", "z", ""]))
    assert set(present_values(column)) == set(values)
    assert set(present_values(pd.Series(values, dtype=object))) == set(values)
