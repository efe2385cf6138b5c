"""Column codes of the event table against a brute force over Python tuples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeprof.core import events
from moeprof.core.events import combine_codes, first_rows


def brute_force(columns: list[list]) -> list[int]:
    """Each row's tuple numbered in order of first appearance; NaN equals NaN, as in one column's codes."""
    seen: dict[tuple, int] = {}
    out = []
    for row in zip(*columns, strict=True):
        key = tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row)
        out.append(seen.setdefault(key, len(seen)))
    return out


narrow = st.integers(-1, 6)  # codes as column_codes gives them: -1 for a missing value
wide = st.integers(-(2**62), 2**62)  # a range too wide to pack: hashed instead
floats = st.sampled_from([0.0, 0.25, 1.0, math.nan])  # ib_fraction-like, NaN where the link is unknown
kinds = {
    "narrow": (narrow, np.int64),
    "int8": (st.integers(-1, 4), np.int8),
    "wide": (wide, np.int64),
    "float": (floats, np.float64),
    "bool": (st.booleans(), bool),
    "text": (st.sampled_from(["a", "b", "c"]), object),
}


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[list], list[np.ndarray]]:
    n = draw(st.integers(0, 40))
    names = draw(st.lists(st.sampled_from(sorted(kinds)), min_size=1, max_size=16))
    columns = [draw(st.lists(kinds[k][0], min_size=n, max_size=n)) for k in names]
    arrays = [np.array(c, dtype=kinds[k][1]) for c, k in zip(columns, names, strict=True)]
    return columns, arrays


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(tables(), st.sampled_from([1 << 62, 1 << 8, 3]))
def test_combine_codes_numbers_tuples_as_the_brute_force(table, limit):
    """Any mix of columns, with the packed keys renumbered as often as a small limit forces."""
    columns, arrays = table
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(events, "_PACKED_LIMIT", limit)
        got = combine_codes(*arrays)
    assert got.dtype == np.int64
    assert got.tolist() == brute_force(columns)
    assert first_rows(got).tolist() == sorted({c: i for i, c in reversed(list(enumerate(got.tolist())))}.values())


@pytest.mark.slow
def test_combine_codes_of_a_million_rows_matches_per_column_hashing():
    """At scale, as annotate calls it: eight evidence columns, against the numbering of the row tuples."""
    rng = np.random.default_rng(5)
    n = 1_000_000
    cols = [rng.integers(-1, k, n) for k in (6, 40, 3_000, 2, 900)]
    cols += [rng.choice([0.0, 1.0, np.nan], n), rng.integers(0, 2**40, n) * (rng.random(n) < 0.01)]
    got = combine_codes(*cols)
    keys = np.rec.fromarrays([np.nan_to_num(c, nan=-7.0) if c.dtype.kind == "f" else c for c in cols])
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first)  # distinct tuples by first appearance
    expected = np.empty(len(first), dtype=np.int64)
    expected[order] = np.arange(len(first))
    assert np.array_equal(got, expected[inverse.ravel()])


def test_combine_codes_renumbers_before_the_packed_key_overflows():
    """65 two-valued columns: packed as one integer, the row (1, 0, ..., 0) would be 2**64, which wraps
    to the all-zero row's key; the keys are renumbered before that."""
    first = np.array([1, 0, 0])
    rest = [np.array([0, 0, 1])] * 64  # each column two-valued, so each doubles the key's range
    assert combine_codes(first, *rest).tolist() == [0, 1, 2]
