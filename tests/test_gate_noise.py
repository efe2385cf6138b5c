"""The statistics behind ``check --baseline``: Student's t tail, Welch's test, and the generator's regression.

Expected values come from scipy (a dependency of jax, so always here) and from the generator's
brute-force truth, never from moeprof.gate.
"""

from __future__ import annotations

import math

import pytest

from moeprof.gate.noise import t_sf, welch_test
from synthetic.gpu import build, truth


@pytest.mark.parametrize("df", [1.0, 1.7, 2.0, 3.3, 7.5, 30.0, 400.0])
@pytest.mark.parametrize("t", [-6.0, -1.0, 0.0, 0.3, 1.5, 2.9, 8.0, 40.0])
def test_t_tail_matches_scipy(t, df):
    from scipy import stats

    assert t_sf(t, df) == pytest.approx(float(stats.t.sf(t, df)), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(
    ("before", "after", "shift"),
    [
        ([1.0, 1.2, 0.9], [1.4, 1.5, 1.35, 1.6], 0.05),
        ([10.0, 10.0, 10.5], [11.0, 9.0, 12.5], 0.0),
        ([0.2, 0.25], [0.5, 0.1], 0.02),
    ],
)
def test_welch_matches_scipy(before, after, shift):
    from scipy import stats

    got = welch_test(before, after, shift, alpha=0.01)
    assert got is not None
    ref = stats.ttest_ind(after, [b + shift for b in before], equal_var=False, alternative="greater")
    assert got.t == pytest.approx(float(ref.statistic), rel=1e-9)
    assert got.df == pytest.approx(float(ref.df), rel=1e-9)
    assert got.p == pytest.approx(float(ref.pvalue), rel=1e-9)
    assert got.beyond_noise is (float(ref.pvalue) < 0.01)


def test_welch_edges():
    assert welch_test([1.0], [1.0, 2.0]) is None  # one step: no spread
    same = welch_test([2.0, 2.0], [2.0, 2.0], shift=0.1)
    assert same is not None and same.p == 1.0 and not same.beyond_noise
    up = welch_test([2.0, 2.0], [3.0, 3.0], shift=0.1)  # no spread at all: the difference is exact
    assert up is not None and up.p == 0.0 and up.beyond_noise and math.isinf(up.t)
    assert welch_test([1.0, 1.1], [1.0, 1.05], alpha=1.0).beyond_noise  # alpha 1: the tolerance alone


def test_generator_regression_adds_exposed_comm_to_every_device():
    """``regression=0.1`` is the same job (the same draws) with 10% more exposed comm on every device."""
    plain = truth(build("r", 1, 4, steps=2, layers=2, seed=5))
    worse = truth(build("r", 1, 4, steps=2, layers=2, seed=5, regression=0.10))
    for a, b in zip(plain["devices"], worse["devices"], strict=True):
        # per device-step rounding to the ns: within a nanosecond per step
        assert abs(b["exposed_comm_ns"] - 1.1 * a["exposed_comm_ns"]) <= 2
        assert b["compute_ns"] == a["compute_ns"]
