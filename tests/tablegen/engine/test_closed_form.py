"""Closed-form bounds (tablegen/engine/closed_form.py) against exact sums, brute force and the engine."""

from __future__ import annotations

import math

import numpy as np
import pytest
from shuffle_reference import clone_law, exact_delta, krr_lower_laws, krr_matrix, krr_upper_law, pair_divergence

from tablegen.engine.bounds import Query
from tablegen.engine.closed_form import (
    chernoff_log_delta,
    far_n_delta,
    few_users_delta,
    few_users_eps_lower,
    normal_log_delta,
)
from tablegen.mechanisms import get_mechanism

# the Theorem 5 pairs of tablegen.mechanisms.frequency.krr_lower, in order: x2 = x1, x2 = x0, x2 distinct
KRR_TRIPLES = [(0, 1, 1), (0, 1, 0), (0, 1, 2)]


@pytest.mark.parametrize("eps0", [1.0, 4.0])
@pytest.mark.parametrize("n", [20, 150])
def test_upper_bounds_are_above_exact_sums_krr(eps0: float, n: int) -> None:
    (d,) = get_mechanism("krr").upper(eps0, k=3)
    for eps in eps0 * np.array([0.02, 0.1, 0.3, 0.6, 0.9]):
        exact = exact_delta(*krr_upper_law(eps0, eps, 3), n)
        assert math.exp(chernoff_log_delta(d, eps, n)) >= exact
        assert math.exp(normal_log_delta(d, eps, n)) >= exact
        assert far_n_delta([d], [eps], n)[0] >= exact


@pytest.mark.parametrize("eps0", [0.5, 2.0])
def test_upper_bounds_are_above_exact_sums_clone(eps0: float) -> None:
    (d,) = get_mechanism("generic").upper(eps0)
    for n in (10, 200):
        for eps in eps0 * np.array([0.05, 0.2, 0.5]):
            assert far_n_delta([d], [eps], n)[0] >= exact_delta(*clone_law(eps0, eps), n)


def test_far_n_bound_is_above_the_engines_lower_bound() -> None:
    """Two independent paths at large n: the closed form's upper bound never falls below the
    spectral lower path's lower bound, and it is close to it in the Gaussian bulk."""
    q = Query("krr", 1.0, 2 * 10**9, {"k": 10})
    eps = np.array([2e-5, 4e-5, 6e-5])
    upper = far_n_delta(q.upper, eps, q.n)
    lower = q.delta_lower_many(eps)
    assert np.all(lower > 0) and np.all(upper >= lower)
    assert upper[0] <= 1.05 * lower[0]  # Berry-Esseen: within a few percent where delta ~ 1e-6


def test_far_n_bound_at_huge_n_is_finite_and_non_increasing_in_eps() -> None:
    (d,) = get_mechanism("krr").upper(1.0, k=10)
    eps = np.geomspace(1e-10, 1e-6, 9)
    values = far_n_delta([d], eps, 10**18)
    assert np.all(np.isfinite(values)) and np.all(np.diff(values) <= 0)


@pytest.mark.parametrize("eps0", [3.0, 6.0, 25.0])
@pytest.mark.parametrize("n", [2, 4])
def test_few_users_bound_is_below_brute_force(eps0: float, n: int) -> None:
    """The real shuffle model, every multiset of outputs (k = 3): the few-users bound on each
    Theorem 5 pair is below the pair's exact divergence, and below the exact sum of its law."""
    pairs = get_mechanism("krr").lower(eps0, k=3)
    matrix = krr_matrix(3, eps0)
    for eps in eps0 * np.array([0.0, 0.3, 0.7, 0.95, 0.999]):
        laws = krr_lower_laws(eps0, eps, 3)
        for d, triple, law in zip(pairs, KRR_TRIPLES, laws, strict=True):
            bound = few_users_delta(d, eps, n)
            assert 0 <= bound <= pair_divergence(matrix, *triple, n, eps) * (1 + 1e-9) + 1e-300
            values, probs = law
            rest = 1.0 - sum(probs)
            assert bound <= exact_delta([*values, 0.0], [*probs, max(rest, 0.0)], n) * (1 + 1e-9) + 1e-300


def test_few_users_eps_lower_at_large_eps0() -> None:
    """k-RR, eps0 = 25, n = 1e6, delta = 1e-8: the pair X0 = (x0, x0, ..), X1 = (x1, x0, ..) and
    the event 'every report is x0' give delta >= a^(n-1) b (e^eps0 - e^eps) (a = e^eps0 b,
    b = 1/(e^eps0 + k - 1)): the lower bound is at least where that event bound meets delta
    (it contains the event), and never above eps0."""
    eps0, n, delta, k = 25.0, 10**6, 1e-8, 10
    low = few_users_eps_lower(get_mechanism("krr").lower(eps0, k=k), eps0, n, delta)
    b = 1.0 / (math.exp(eps0) + k - 1)
    a = math.exp(eps0) * b
    event = math.log(math.exp(eps0) - delta / (math.exp((n - 1) * math.log(a)) * b))
    assert event * (1 - 1e-12) <= low <= eps0
    assert low >= 0.99 * eps0


def test_few_users_eps_lower_is_zero_where_nothing_is_proved() -> None:
    # many users off the heaviest component (n k e^-eps0 = 1e7): the bound proves nothing
    assert few_users_eps_lower(get_mechanism("krr").lower(1.0, k=10), 1.0, 10**6, 1e-8) == 0.0
    assert few_users_eps_lower([], 30.0, 10, 1e-8) == 0.0
