"""Binary RR (k = 2) after shuffling against exact enumeration of every dataset (tablegen/engine/binary.py).

The exact values come from the neighbouring counts themselves, T = Bin(n-1-m, q) + Bin(m, p) + Bern(q) vs
+ Bern(p), summed over every outcome for every m and both directions, in exact rational arithmetic
(e^eps0 and e^eps rational) or with mpmath at 50 digits: no shift reduction, no interval, no tilt.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from math import comb
from pathlib import Path

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tablegen.engine import binary, certifies, delta_bounds, eps_bounds, proves_above


def _exact_per_m(n: int, beta: Fraction, g: Fraction) -> list[Fraction]:
    """delta of the pair (m other ones, target 0 vs 1), the larger direction, for m = 0 .. n-1."""
    p = beta / (1 + beta)
    q = 1 - p
    out = []
    for m in range(n):
        a = [comb(n - 1 - m, i) * q**i * p ** (n - 1 - m - i) for i in range(n - m)]
        b = [comb(m, j) * p**j * q ** (m - j) for j in range(m + 1)]
        s = [Fraction(0)] * n
        for i, x in enumerate(a):
            for j, y in enumerate(b):
                s[i + j] += x * y
        p0 = [(s[t] * p if t < n else 0) + (s[t - 1] * q if t else 0) for t in range(n + 1)]
        p1 = [(s[t] * q if t < n else 0) + (s[t - 1] * p if t else 0) for t in range(n + 1)]
        out.append(max(sum(max(x - g * y, 0) for x, y in zip(p0, p1, strict=True)),
                       sum(max(y - g * x, 0) for x, y in zip(p0, p1, strict=True))))
    return out


CASES = [(2, 3, Fraction(3, 2)), (3, 2, Fraction(11, 10)), (7, 3, Fraction(5, 4)), (30, 2, Fraction(6, 5)),
         (40, 3, Fraction(3, 2)), (25, 3, Fraction(2)), (50, 2, Fraction(21, 20))]


@pytest.mark.parametrize(("n", "beta", "g"), CASES)
def test_every_m_is_bracketed_by_its_bounds(n: int, beta: int, g: Fraction) -> None:
    exact = _exact_per_m(n, Fraction(beta), g)
    eps0, eps = math.log(beta), math.log(g)
    for m in range((n - 1) // 2 + 1):
        lower, upper = binary.interval_delta(n, eps0, np.array([eps]), m, m)
        worst = float(max(exact[m], exact[n - 1 - m]))  # m and its mirror: the two directions
        assert lower[0] <= worst * (1 + 1e-12) and upper[0] >= worst * (1 - 1e-12)
        assert upper[0] <= worst * (1 + 1e-6) and lower[0] >= worst * (1 - 1e-6)  # tight


@pytest.mark.parametrize(("n", "beta", "g"), CASES[2:])
def test_one_interval_bounds_every_m_inside_it(n: int, beta: int, g: Fraction) -> None:
    exact = _exact_per_m(n, Fraction(beta), g)
    top = (n - 1) // 2
    for m1, m2 in [(0, top), (0, top // 2), (top // 2, top), (1, 3), (2, 2)]:
        _, upper = binary.interval_delta(n, math.log(beta), np.array([math.log(g)]), m1, m2)
        worst = max(float(max(exact[m], exact[n - 1 - m])) for m in range(m1, m2 + 1))
        assert upper[0] >= worst * (1 - 1e-12)


def test_the_exact_worst_case_is_not_always_m_zero_and_is_found() -> None:
    """n = 50, eps0 = 0.5, delta = 1e-9: m = 1 beats m = 0 (0.4016946 against 0.4011183, the issue's
    oracle); here from mpmath at 50 digits: the eps at which each m's delta crosses 1e-9.  The profile that
    composition reads is at or above m = 1's delta between the crossings, where m = 0's is below 1e-9."""
    mpmath.mp.dps = 50
    n, eps0, delta = 50, mpmath.mpf("0.5"), mpmath.mpf("1e-9")
    p = mpmath.exp(eps0) / (1 + mpmath.exp(eps0))
    q = 1 - p

    def delta_m(m: int, eps: mpmath.mpf) -> mpmath.mpf:
        s = [mpmath.mpf(0)] * n
        for i in range(n - m):
            for j in range(m + 1):
                s[i + j] += (mpmath.binomial(n - 1 - m, i) * q**i * p ** (n - 1 - m - i)
                             * mpmath.binomial(m, j) * p**j * q ** (m - j))
        g = mpmath.exp(eps)
        p0 = [(s[t] * p if t < n else 0) + (s[t - 1] * q if t else 0) for t in range(n + 1)]
        p1 = [(s[t] * q if t < n else 0) + (s[t - 1] * p if t else 0) for t in range(n + 1)]
        pairs = list(zip(p0, p1, strict=True))
        return max(sum(max(x - g * y, 0) for x, y in pairs), sum(max(y - g * x, 0) for x, y in pairs))

    def crossing(m: int) -> float:
        lo, hi = mpmath.mpf("0.3"), mpmath.mpf("0.5")
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if delta_m(m, mid) > delta else (lo, mid)
        return float(hi)

    at_zero, at_one = crossing(0), crossing(1)
    assert at_one > at_zero  # m = 1 is worse than m = 0
    assert at_zero == pytest.approx(0.4011183, abs=1e-6) and at_one == pytest.approx(0.4016946, abs=1e-6)
    b = eps_bounds("krr", eps0=0.5, n=n, delta=1e-9, k=2)
    assert b.lower <= at_one <= b.upper <= at_one * 1.01
    assert b.lower > at_zero  # the lower bound found the m = 1 case
    # the composition's profile covers m = 1 too: between the two crossings m = 0 alone is below delta
    middle = (at_zero + at_one) / 2
    worst = delta_m(1, mpmath.mpf(middle))
    assert delta_m(0, mpmath.mpf(middle)) < delta < worst
    assert binary.delta_profile(n, 0.5, np.array([middle]))[0] >= float(worst)


@pytest.mark.parametrize(("eps0", "n", "exact"), [
    (1.0, 10**4, 0.0470123), (2.0, 10**4, 0.112655), (4.0, 10**4, 0.404521), (4.0, 10**5, 0.109727)])
def test_within_one_percent_of_the_published_exact_values(eps0: float, n: int, exact: float) -> None:
    """The issue's oracle (log-space pmfs, every m, checked at 60 digits), delta = 1e-8, 6 digits."""
    b = eps_bounds("krr", eps0=eps0, n=n, delta=1e-8, k=2)
    assert b.lower <= exact * (1 + 1e-6) and b.upper >= exact * (1 - 1e-6)
    assert b.upper <= exact * 1.01 and b.lower >= exact * 0.99


def _sandwich_delta(n: int, eps0: float, eps: float, m1: int, m2: int) -> float:
    """The sandwich of [m1, m2] evaluated by brute force: X = Bin(n-1-m2, q) + Bin(m1, p) by direct
    convolution of scipy's pmfs, the counts X + Bern(q) and X + Bern(p), both directions summed outright."""
    from scipy.stats import binom

    p = 1 / (1 + math.exp(-eps0))
    x = np.convolve(binom.pmf(np.arange(n - m2), n - 1 - m2, 1 - p), binom.pmf(np.arange(m1 + 1), m1, p))
    p0 = np.append(x * p, 0) + np.insert(x * (1 - p), 0, 0)
    p1 = np.append(x * (1 - p), 0) + np.insert(x * p, 0, 0)
    g = math.exp(eps)
    return float(max(np.maximum(p0 - g * p1, 0).sum(), np.maximum(p1 - g * p0, 0).sum()))


def _crossing(delta_at: object, delta: float) -> float:
    lo, hi = 0.3, 0.4
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_at(mid) > delta else (lo, mid)
    return hi


def test_the_sandwich_figures_of_the_issue() -> None:
    """n = 1000, eps0 = 2, delta = 1e-6: the issue's sandwich, X = Bin(n-1-2 m2+m1, q) + Bin(m1, p), bounds
    the exact 0.3233235 by 0.3252274 on [0, 5] and by 0.3320 on [100, 150]; ours, X = Bin(n-1-m2, q) +
    Bin(m1, p) (more independent noise, docs/soundness.md step 3), lies between the exact values of m1 and
    m2 and those, above the exact maximum on [0, 5], and equals its brute-force evaluation (the eps where
    each interval's bound crosses delta, by bisection)."""
    for (m1, m2), issue in [((0, 5), 0.3252274), ((100, 150), 0.3320)]:
        ours = _crossing(lambda e, m1=m1, m2=m2: binary.interval_delta(1000, 2.0, np.array([e]), m1, m2)[1][0], 1e-6)
        brute = _crossing(lambda e, m1=m1, m2=m2: _sandwich_delta(1000, 2.0, e, m1, m2), 1e-6)
        ends = [_crossing(lambda e, m=m: _sandwich_delta(1000, 2.0, e, m, m), 1e-6) for m in (m1, m2)]
        assert max(ends) <= ours <= issue + 1e-7  # m1 and m2 exactly, each inside the interval
        assert ours == pytest.approx(brute, abs=1e-7)
    assert _crossing(lambda e: binary.interval_delta(1000, 2.0, np.array([e]), 0, 5)[1][0], 1e-6) > 0.3233235
    b = eps_bounds("krr", eps0=2.0, n=1000, delta=1e-6, k=2)
    assert b.lower <= 0.3233236 and 0.3233234 <= b.upper <= 0.3233235 * 1.01


def _blanket(monkeypatch: pytest.MonkeyPatch, **query: float) -> object:
    """The engine's bounds without the exact path (the optimal blanket and Theorem 5)."""
    with monkeypatch.context() as patch:
        patch.setattr(binary, "applies", lambda q: False)
        return eps_bounds("krr", k=2, **query)


def test_certifies_and_proves_above_use_the_exact_path(monkeypatch: pytest.MonkeyPatch) -> None:
    b = eps_bounds("krr", eps0=2.0, n=10**4, delta=1e-8, k=2)
    blanket = _blanket(monkeypatch, eps0=2.0, n=10**4, delta=1e-8)
    assert b.upper < blanket.upper * 0.8
    assert certifies("krr", eps0=2.0, n=10**4, eps=b.upper, delta=1e-8, k=2)
    assert not certifies("krr", eps0=2.0, n=10**4, eps=0.112, delta=1e-8, k=2)  # below the exact 0.112655
    assert proves_above("krr", eps0=2.0, n=10**4, eps=0.1126, delta=1e-8, k=2)
    assert not proves_above("krr", eps0=2.0, n=10**4, eps=0.1127, delta=1e-8, k=2)


def test_log_binom_pmf_error_bound_holds() -> None:
    mpmath.mp.dps = 40
    for count, t, eps0 in [(10, 3, 1.0), (10**9, 17_986_000, 4.0), (10**9, 268_941_421, 1.0), (5000, 2500, 0.05),
                           (10**6, 0, 2.0), (10**6, 10**6, 0.3), (3 * 10**5, 2100, 3.0)]:
        value, err = binary.log_binom_pmf(count, t, eps0)
        e = mpmath.mpf(eps0)
        q = 1 / (1 + mpmath.exp(e))
        exact = (mpmath.loggamma(count + 1) - mpmath.loggamma(t + 1) - mpmath.loggamma(count - t + 1)
                 + t * mpmath.log(q) + (count - t) * mpmath.log(1 - q))
        assert abs(value - float(exact)) <= err
        assert err < 1e-5


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 2000), st.floats(0.05, 6.0), st.sampled_from([1e-12, 1e-8, 1e-4]))
def test_bounds_are_ordered_and_never_above_the_blanket(n: int, eps0: float, delta: float) -> None:
    b = eps_bounds("krr", eps0=eps0, n=n, delta=delta, k=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(binary, "applies", lambda q: False)
        blanket = eps_bounds("krr", eps0=eps0, n=n, delta=delta, k=2)
    assert 0.0 <= b.lower <= b.upper <= blanket.upper
    assert b.lower >= blanket.lower * (1 - 1e-12)


@pytest.mark.parametrize(("n", "beta", "g"), CASES[1:])
def test_delta_bounds_bracket_the_exact_worst_case(n: int, beta: int, g: Fraction) -> None:
    exact = float(max(_exact_per_m(n, Fraction(beta), g)))
    b = delta_bounds("krr", eps0=math.log(beta), n=n, eps=math.log(g), k=2)
    assert b.lower <= exact * (1 + 1e-12) and b.upper >= exact * (1 - 1e-12)
    assert b.upper <= exact * 1.03


def test_the_side_by_side_quoted_in_the_docs_is_current() -> None:
    """docs/mechanisms.md's k = 2 table (n up to 1e5): ours and our lower bound as eps_bounds gives them now
    (6 digits quoted), the blanket column as the engine gives it without the exact path."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "mechanisms.md").read_text()
    cell, ratio = r"([\d.]+)", r"([\d.]+) \(\S+\)"
    rows = re.findall(rf"^\| (\d) \| (1e[45]) \| {cell} \| {ratio} \| {ratio} \| {cell} \|$", page, re.M)
    assert len(rows) == 6
    with pytest.MonkeyPatch.context() as patch:
        for eps0, n, _, blanket, ours, lower in rows:
            b = eps_bounds("krr", eps0=float(eps0), n=int(float(n)), delta=1e-8, k=2)
            assert b.upper == pytest.approx(float(ours), rel=1e-5) and b.lower == pytest.approx(float(lower), rel=1e-5)
            patch.setattr(binary, "applies", lambda q: False)
            assert eps_bounds("krr", eps0=float(eps0), n=int(float(n)), delta=1e-8, k=2).upper == pytest.approx(
                float(blanket), rel=1e-5)
            patch.undo()


@pytest.mark.parametrize("n,eps", [(2000, 0.3), (500, 0.6)])
def test_eps0_max_is_certified_by_every_dataset_and_beyond_the_blanket(n: int, eps: float) -> None:
    from shuffle_reference import binary_rr_delta

    from tablegen.engine import eps0_max

    found = eps0_max("krr", eps=eps, n=n, delta=1e-8, k=2)
    assert binary_rr_delta(found, eps, n) <= 1e-8  # every m, both directions, from the counts' own laws
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(binary, "applies", lambda q: False)
        blanket = eps0_max("krr", eps=eps, n=n, delta=1e-8, k=2)
    assert found > blanket * 1.01


@pytest.mark.parametrize(("n", "beta"), [(30, 2), (41, 3), (50, 2)])
def test_the_profile_bounds_the_exact_worst_case_at_every_eps(n: int, beta: int) -> None:
    """``delta_profile`` and the engine's ``delta_curve`` for k = 2: at every eps of a grid, at or above
    the exact delta (every m, both directions, rational arithmetic) and close to it."""
    from tablegen.engine import delta_curve

    gs = [Fraction(101, 100), Fraction(6, 5), Fraction(3, 2), Fraction(9, 5)]
    exact = np.array([float(max(_exact_per_m(n, Fraction(beta), g))) for g in gs])
    eps = np.log(np.array([float(g) for g in gs]))
    profile = binary.delta_profile(n, math.log(beta), eps)
    curve = delta_curve("krr", eps0=math.log(beta), n=n, eps=eps, k=2)
    live = exact > 1e-30
    assert np.all(profile >= exact * (1 - 1e-12)) and np.all(curve >= exact * (1 - 1e-12))
    assert np.all(curve <= profile)
    assert np.all(profile[live] <= exact[live] * 1.05)


def _composed_pair_delta(n: int, eps0: float, eps: float) -> float:
    """Two rounds of the pair m = 0 (the other users all 0, the target 0 vs 1), both directions: the
    hockey-stick divergence of the product laws summed over every pair of counts (a lower bound on the
    exact delta of two composed rounds)."""
    from scipy.stats import binom

    p = 1 / (1 + math.exp(-eps0))
    x = binom.pmf(np.arange(n), n - 1, 1 - p)
    p0 = np.append(x * p, 0) + np.insert(x * (1 - p), 0, 0)
    p1 = np.append(x * (1 - p), 0) + np.insert(x * p, 0, 0)
    a, b, g = np.outer(p0, p0), np.outer(p1, p1), math.exp(eps)
    return float(max(np.maximum(a - g * b, 0).sum(), np.maximum(b - g * a, 0).sum()))


def test_composed_rounds_are_certified_by_the_exact_pair_and_tighter_than_the_blanket(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """compose.eps for k = 2 reads the exact profile: two rounds at n = 200, eps0 = 2, delta = 1e-6 are
    at or above the exact composed pair m = 0, within 5% of it, and below the blanket route's composition."""
    from tablegen import compose

    composed = compose.eps("krr", eps0=2.0, n=200, rounds=2, delta=1e-6, k=2).eps
    assert _composed_pair_delta(200, 2.0, composed) <= 1e-6
    assert _composed_pair_delta(200, 2.0, composed / 1.05) > 1e-6  # within 5% of a lower bound
    with monkeypatch.context() as patch:
        patch.setattr(binary, "applies", lambda q: False)
        blanket = compose.eps("krr", eps0=2.0, n=200, rounds=2, delta=1e-6, k=2).eps
    assert composed < blanket
