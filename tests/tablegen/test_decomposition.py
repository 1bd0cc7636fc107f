"""Merging components of a decomposition (tablegen/decomposition.py: coarsened, joint).

The merged law must bound the exact one in the right direction for every eps and n: upper
(blanket) decompositions only grow delta, lower-bound laws only shrink it.  Checked against
exact (1/n) E[(G_1 + ... + G_n)_+] by enumeration (shuffle_reference.exact_delta).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shuffle_reference import exact_delta

from tablegen.decomposition import Decomposition, coarsened, joint
from tablegen.mechanisms import get_mechanism


def _delta(d: Decomposition, eps: float, n: int) -> float:
    values, probs = d.law(eps)
    return exact_delta(values, probs, n)


def _random_decomposition(seed: int, size: int, spread: float) -> Decomposition:
    rng = np.random.default_rng(seed)
    u = np.exp(rng.uniform(-spread, spread, size))
    v = np.exp(rng.uniform(-spread, spread, size))
    c = rng.dirichlet(np.ones(size + 1))[:size]  # the rest is the atom G = 0
    return Decomposition(u, v, c)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(2, 12),
    spread=st.floats(0.01, 2.0),
    cap=st.integers(1, 6),
    eps=st.floats(0.0, 2.0),
    n=st.integers(1, 3),
)
def test_merging_bounds_the_exact_delta(seed, size, spread, cap, eps, n):
    d = _random_decomposition(seed, size, spread)
    exact = _delta(d, eps, n)
    up, _ = coarsened(d.u, d.v, d.c, True, cap)
    down, _ = coarsened(d.u, d.v, d.c, False, cap)
    assert up.c.size <= cap and down.c.size <= cap
    assert math.isclose(up.c.sum(), d.c.sum(), rel_tol=1e-12)
    assert math.isclose(down.c.sum(), d.c.sum(), rel_tol=1e-12)
    assert _delta(up, eps, n) >= exact * (1 - 1e-12)
    assert _delta(down, eps, n) <= exact * (1 + 1e-12) + 1e-300


def test_fine_grid_only_merges_equal_components():
    d = Decomposition([1.0, 1.0, 2.0, 2.0 * (1 + 1e-6)], [1.0, 1.0, 1.0, 1.0], [0.1, 0.2, 0.3, 0.4])
    merged, width = coarsened(d.u, d.v, d.c, True, 10)
    assert width == 2.0**-26
    order = np.argsort(merged.u)
    np.testing.assert_allclose(merged.u[order], [1.0, 2.0, 2.0 * (1 + 1e-6)], rtol=1e-15)
    np.testing.assert_allclose(merged.c[order], [0.3, 0.3, 0.4], rtol=1e-15)


def _delta_two_users(d: Decomposition, eps: float) -> float:
    """(1/2) E[(G_1 + G_2)_+] for laws with many atoms: sum_i p_i E[(x_i + G)_+] by suffix sums."""
    x, p = d.law(eps)
    tail_p = np.append(np.cumsum(p[::-1])[::-1], 0.0)
    tail_px = np.append(np.cumsum((p * x)[::-1])[::-1], 0.0)
    first = np.searchsorted(x, -x, side="right")  # x sorted: atoms with x_j > -x_i
    return float(p @ (x * tail_p[first] + tail_px[first])) / 2


@pytest.mark.parametrize("up", [True, False])
def test_joint_of_laplace_parts_is_capped_and_safe(up):
    """Two Laplace parts have 194^2 product components; a cap of 300 forces coarse cells."""
    laplace = get_mechanism("laplace")
    part = (laplace.upper if up else laplace.lower)(0.5)[-1]  # the pair x2 = 1/2 (194 components)
    exact = joint([part] * 2, up, max_components=10**6)
    capped = joint([part] * 2, up, max_components=300)
    assert capped.c.size <= 300 < exact.c.size
    for eps in (0.05, 0.3):
        got, want = _delta_two_users(capped, eps), _delta_two_users(exact, eps)
        assert (got >= want * (1 - 1e-12)) if up else (got <= want * (1 + 1e-12))
        assert got == pytest.approx(want, rel=0.2)  # coarse, but not useless


def test_four_laplace_parts_fit_in_memory():
    """194^4 = 1.4e9 components would need ~34 GB; the merged product stays under the cap."""
    mech = get_mechanism("joint")
    params = mech.resolve({"base": "laplace", "parts": 4})
    (upper,) = mech.upper(4.0, **params)
    assert 0 < upper.c.size <= 100_000
    assert upper.c.sum() <= 1


def test_edge_cases_of_merging() -> None:
    """Found in review: zero weights (product underflow) must not give NaN lower laws, an empty
    part must not crash, a cap of 1 ends in one cell quickly, a cap of 0 is refused."""
    a = Decomposition([0.5, 1.2, 0.8], [0.9, 0.9, 1.3], [1e-170, 0.5, 0.5 - 1e-170])
    b = Decomposition([0.55, 1.3, 0.9], [0.9, 1.1, 1.0], [1e-170, 0.5, 0.5 - 1e-170])
    merged = joint([a, b], up=False, max_components=3)
    assert np.all(np.isfinite(merged.u)) and np.all(np.isfinite(merged.v)) and merged.c.size <= 3
    assert joint([Decomposition([], [], [])]).c.size == 0
    one, width = coarsened(np.array([0.5, 0.5, 2, 2]), np.array([0.5, 2, 0.5, 2]), np.full(4, 0.25), True, 1)
    assert (one.u.tolist(), one.v.tolist(), one.c.tolist()) == ([2.0], [0.5], [1.0]) and math.isfinite(width)
    with pytest.raises(ValueError, match="max_components"):
        coarsened(np.ones(2), np.ones(2), np.full(2, 0.5), True, 0)
