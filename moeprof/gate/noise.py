"""Whether a figure moved beyond the noise of its steps: the test behind ``check --baseline``.

The test is Welch's one-sided t-test on the per-step values of the two runs, shifted by the
tolerance: H0 "the current run's step mean exceeds the baseline's by at most the tolerance"
against H1 "by more". It is the two-sample test that does not assume equal variances (a run
on a loaded machine spreads more than a quiet one) and it gains power with every step
measured, where a range or a rank test with 2-6 steps per run cannot reject at all (a one-sided
Mann-Whitney test of 3 against 3 values has p >= 0.05 whatever the values). Steps of one run
are not independent draws (a run on a busy machine is slow in every step), so the level is
strict by default (``DEFAULT_ALPHA``, 0.001) and the tolerance is still required on top.

Pure Python on a handful of numbers: Student's t distribution through the regularized
incomplete beta function (continued fraction, as in Numerical Recipes' ``betacf``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# One-sided level of each gate's test; 1 turns it off (every excess is beyond noise). A check runs 4-6
# baseline gates, so 0.001 keeps a false alarm under 1 in 150 checks (Bonferroni) where steps were
# independent draws; they are not (a capture on a busy machine is slow in every step), and the unchanged
# demo captures of benchmarks/bench_gate_noise.py reach p = 0.003 on a shared 2-core machine.
DEFAULT_ALPHA = 0.001
# diff's "within noise" (a label, not a gate that fails a job): the usual two-sided 5%. A half-range overlap rule
# was used before; one step out of line (a TPU run's first step, which has no host gap before it) widened a band
# enough to call a 2.9x shorter step "within noise" (docs/ci.md)
DIFF_ALPHA = 0.05


@dataclass(frozen=True)
class NoiseTest:
    """Welch's one-sided test of ``mean(current) - mean(baseline) > shift``."""

    baseline_mean: float
    current_mean: float
    baseline_sd: float
    current_sd: float
    baseline_steps: int
    current_steps: int
    shift: float  # the tolerance, in the figure's unit
    t: float
    df: float
    p: float  # P(T >= t) under H0
    alpha: float

    @property
    def beyond_noise(self) -> bool:
        return self.p < self.alpha or self.alpha >= 1


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T >= t) for Student's t with ``df`` (real, > 0) degrees of freedom."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    return mean, math.fsum((v - mean) ** 2 for v in values) / (n - 1)


def indistinguishable(a: Sequence[float], b: Sequence[float], alpha: float = DIFF_ALPHA) -> bool | None:
    """Whether two runs' per-step values cannot be told apart: Welch's two-sided test of equal means does not
    reject at ``alpha``; None with fewer than two values on either side. ``diff``'s "within noise"."""
    test = welch_test(a, b, alpha=alpha)
    if test is None:
        return None
    return min(1.0, 2.0 * min(test.p, 1.0 - test.p)) >= alpha


def welch_test(
    baseline: Sequence[float], current: Sequence[float], shift: float = 0.0, alpha: float = DEFAULT_ALPHA
) -> NoiseTest | None:
    """The one-sided test of ``mean(current) - mean(baseline) > shift``; None with fewer than two
    values on either side (no spread to judge against)."""
    if len(baseline) < 2 or len(current) < 2:
        return None
    mx, vx = _mean_var(baseline)
    my, vy = _mean_var(current)
    n, m = len(baseline), len(current)
    se2 = vx / n + vy / m
    excess = my - mx - shift
    if se2 <= 0.0:  # both runs constant over their steps: the difference is exact
        t, df = (math.inf if excess > 0 else -math.inf), float(n + m - 2)
        p = 0.0 if excess > 0 else 1.0
    else:
        t = excess / math.sqrt(se2)
        # Welch-Satterthwaite; a run with zero variance contributes nothing to the sum
        denom = (vx / n) ** 2 / (n - 1) + (vy / m) ** 2 / (m - 1)
        df = se2**2 / denom if denom > 0 else float(n + m - 2)
        p = t_sf(t, df)
    return NoiseTest(mx, my, math.sqrt(vx), math.sqrt(vy), n, m, shift, t, df, p, alpha)
