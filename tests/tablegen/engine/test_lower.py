"""The spectral lower bound (tablegen/engine/lower.py) against exact sums and the FFT path."""

from __future__ import annotations

import math

import numpy as np
import pytest
from shuffle_reference import exact_delta, krr_lower_laws

from tablegen.decomposition import Decomposition
from tablegen.engine import eps_bounds, lower
from tablegen.engine.bounds import LOWER_RESOLUTION, Query, delta_of_decomposition, refined_lower
from tablegen.engine.lower import _min_one_minus_cos, delta_lower
from tablegen.engine.spectral import delta_upper, spread_plans


def _decomposition(values, probs):
    """G = value w.p. prob as a decomposition (u = value, v = 0): its law does not depend on eps."""
    return Decomposition(np.asarray(values, float), np.zeros(len(values)), np.asarray(probs, float))


def _random_law(rng, atoms, concentration):
    """A Theorem-5-like decomposition: weights c summing to one, E[u] = E[v] = 1 under c."""
    c = rng.dirichlet(np.full(atoms, concentration))
    eps0 = rng.uniform(0.5, 4)
    u, v = np.exp(rng.uniform(-eps0 / 2, eps0 / 2, (2, atoms)))
    return Decomposition(u / (c @ u), v / (c @ v), c / c.sum())


def _check(lower, exact):
    """Never above the exact value; within 5% below it where it answers (else NaN)."""
    if math.isnan(lower):
        return 0
    assert lower <= exact, (lower, exact)
    assert lower >= 0.95 * exact, (lower, exact)
    return 1


@pytest.mark.parametrize("seed", range(3))
def test_random_laws_below_exact_enumeration(seed):
    rng = np.random.default_rng(seed)
    answered = 0
    # 4 atoms: near-uniform weights, so that n P(G off the heaviest atom) >= 200 at n = 290
    for atoms, n, concentration in ((2, 2000, 1.0), (3, 1500, 2.0), (3, 600, 3.0), (4, 290, 300.0)):
        d = _random_law(rng, atoms, concentration)
        for eps in np.geomspace(0.01, 1.5, 7):
            values, probs = d.law(eps)
            exact = exact_delta(values, probs / probs.sum(), n)
            if 1e-13 < exact < 1e-2:
                answered += _check(float(delta_lower(d, np.array([eps]), np.array([n]))[0]), exact)
    assert answered >= 5


def test_the_slices_wider_brackets_stay_below_exact_enumeration():
    """The lower slices accept a rounding bracket up to SLICE_MAX_GAP wide (the live path declines beyond
    MAX_GAP and takes the FFT path): its lower end is still below the exact delta (enumeration), on the
    random laws above at the coarse resolution 10, where the live path declines most."""
    newly = 0
    for seed in range(4):
        rng = np.random.default_rng(seed)
        for atoms, n, concentration in ((2, 2000, 1.0), (3, 1500, 2.0), (3, 600, 3.0), (4, 290, 300.0)):
            d = _random_law(rng, atoms, concentration)
            eps, users = np.geomspace(0.01, 1.5, 7), np.full(7, n)
            live = lower.delta_lower_upper(d, eps, users, 10.0, max_gap=lower.MAX_GAP)[0]
            sliced = lower.delta_lower_upper(d, eps, users, 10.0)[0]
            assert np.array_equal(live[~np.isnan(live)], sliced[~np.isnan(live)])  # the same sums
            for e, value in zip(eps[np.isnan(live) & ~np.isnan(sliced)], sliced[np.isnan(live) & ~np.isnan(sliced)],
                                strict=True):
                values, probs = d.law(e)
                assert value <= exact_delta(values, probs / probs.sum(), n), (seed, atoms, e)
                newly += 1
    assert newly >= 10  # 30 evaluations the live path declines answer on the slices


@pytest.mark.parametrize("k,eps0,n", [(3, 0.5, 1000), (3, 1.0, 1000), (3, 3.0, 2500)])
def test_krr_lower_laws_below_exact(k, eps0, n):
    answered = 0
    for eps in eps0 * np.array([0.05, 0.1, 0.2, 0.3]) * math.sqrt(100 / n):
        for values, probs in krr_lower_laws(eps0, eps, k):
            exact = exact_delta(values, probs, n)
            if exact > 1e-13:
                d = _decomposition(values, np.asarray(probs) / sum(probs))
                answered += _check(float(delta_lower(d, np.array([0.0]), np.array([n]))[0]), exact)
    assert answered >= 2


def test_declines_where_few_users_are_off_the_heaviest_atom():
    d = _decomposition([1.0, -0.2], [0.01, 0.99])
    assert np.isnan(delta_lower(d, np.array([0.0]), np.array([1000]))[0])  # n P(rare) = 10 < 200


@pytest.mark.parametrize("name,params,eps0", [("krr", {"k": 10}, 1.0), ("oue", {}, 2.0), ("generic", {}, 4.0)])
def test_close_to_fft_lower_and_below_spectral_upper(name, params, eps0):
    """At n = 1e5..1e6 the spectral lower bound of each Theorem 5 law is below the (certified)
    upper bound of the same law and within 3% of the FFT path's lower bound."""
    compared = 0
    for n in (10**5, 10**6):
        q = Query(name, eps0, n, params)
        eps = 4 * eps0 / math.sqrt(n)
        for i, d in enumerate(q.lower):
            lower = float(delta_lower(d, np.array([eps]), np.array([n]))[0])
            if math.isnan(lower) or lower < 1e-14:
                continue
            upper = float(delta_upper(d, np.array([eps]), np.array([n]))[0])
            fft = q.delta_of_lower_pair(i, eps)
            assert lower <= upper, (n, i, lower, upper)
            assert abs(lower / fft - 1) < 0.03, (n, i, lower, fft)
            compared += 1
    assert compared >= 2


def test_eps_lower_close_to_fft_lower():
    """eps_bounds' lower bound (spectral, vectorised search) within 0.3% of the FFT path's."""
    name, eps0, n, delta = "krr", 2.0, 10**5, 1e-8
    b = eps_bounds(name, eps0=eps0, n=n, delta=delta, k=5)
    q = Query(name, eps0, n, {"k": 5}, spectral=False)

    def fft_exceeds(eps):
        return max(q.delta_of_lower_pair(i, eps) for i in range(len(q.lower))) > delta

    assert fft_exceeds(b.lower * 0.997)  # the FFT lower curve is above delta 0.3% lower down
    assert b.lower < b.upper


def test_delta_lower_of_query_falls_back_to_fft_where_declined():
    """n = 30: every spectral evaluation declines and the FFT value is returned."""
    q = Query("krr", 1.0, 30, {"k": 3})
    eps = 0.4
    expected = max(delta_of_decomposition(d, eps, 30, False, q.lower_resolution) for d in q.lower)
    assert q.delta_lower(eps) == expected


def test_min_of_one_minus_cos_over_cells_sharing_edges():
    """Per cell [y_j, y_j+1] of a row of shared edges: the minimum of 1 - cos, against a fine
    sampling of each cell (0 where the cell holds a multiple of 2 pi); never above it."""
    rng = np.random.default_rng(4)
    edges = np.sort(rng.uniform(0.0, 60.0, (41, 3)), axis=0)  # 40 cells, 3 pairs (columns)
    first = np.arange(40)
    got = np.stack([_min_one_minus_cos(edges[:, p]) for p in range(3)], axis=1)
    for j in first:
        t = np.linspace(0.0, 1.0, 20001)[:, None]
        sampled = np.min(1 - np.cos(edges[j] + t * (edges[j + 1] - edges[j])), axis=0)
        step = (edges[j + 1] - edges[j]) / 20000
        assert np.all(got[j] <= sampled + 1e-12)
        assert np.all(got[j] >= sampled - step**2 - 1e-9)


def test_min_of_one_minus_cos_is_zero_on_cells_starting_at_a_multiple():
    """Cells that start exactly on a multiple of 2 pi (0 and 4 * 2 pi, exact in floating point)
    hold it: 0, though 1 - cos at their other end is ~5e-7; a cell holding none is positive."""
    turn = 2 * np.pi
    got = _min_one_minus_cos(np.array([0.0, 1e-3, 4 * turn, 4 * turn + 1e-3, 4 * turn + 2e-3]))
    assert got[0] == 0.0 and got[2] == 0.0
    assert got[1] == 0.0  # [1e-3, 4 * 2 pi] holds 2 pi
    assert 0.0 < got[3] <= 1 - np.cos(1e-3)  # [4 * 2 pi + 1e-3, + 2e-3]: the smaller end


@pytest.mark.parametrize("n", [50, 400])
@pytest.mark.parametrize("values,probs", [([-1.0, 2.7], [0.75, 0.25]), ([-3.1, 0.05], [0.02, 0.98])])
def test_two_atom_laws_are_not_rounded_on_the_fft_path(values, probs, n):
    """A law with two atoms (mean below 0, as every G's at eps > 0) lies on the lattice of their
    gap, both atoms anchors: the FFT path's upper and lower bounds bracket the exact multinomial
    sum to floating point (fails if an atom were rounded or a rounding correction subtracted:
    either moves a bound by ~1e-3)."""
    d = _decomposition(values, probs)
    exact = exact_delta(values, probs, n)
    upper, lower = delta_of_decomposition(d, 0.3, n), delta_of_decomposition(d, 0.3, n, False)
    assert lower <= exact <= upper
    assert upper <= exact * (1 + 1e-8) and lower >= exact * (1 - 1e-8)


@pytest.mark.parametrize("k,eps0,n,eps", [(3, 6.0, 200, 5.4), (10, 6.0, 100, 5.4), (10, 6.0, 200, 4.8)])
def test_fft_lower_refined_where_the_rounding_correction_swallows_it(k, eps0, n, eps):
    """Comb-like sums (few users off the heaviest atom): at 60 cells per sd the subtracted rounding
    correction exceeds the main term and the bound is 0; the finer lattices prove a positive bound,
    never above the exact multinomial sum and within a factor 2 of it."""
    answered = 0
    for values, probs in krr_lower_laws(eps0, eps, k):
        d = _decomposition(values, np.asarray(probs) / sum(probs))
        exact = exact_delta(values, np.asarray(probs) / sum(probs), n)
        refined = refined_lower(d, eps, n, LOWER_RESOLUTION, None)
        assert refined <= exact * (1 + 1e-12)  # the reference's own float error (a sum of <= 2e4 terms)
        if delta_of_decomposition(d, eps, n, False, LOWER_RESOLUTION) == 0.0 and exact > 1e-6:
            assert refined >= 0.5 * exact, (refined, exact)
            answered += 1
    assert answered >= 1


def test_lower_search_keeps_what_finer_lattices_prove():
    """HR at eps0 = 8, n = 100, delta = 1e-8: the lower bound stopped at 4.08 where the coarse FFT
    lattice proved nothing on 4.1-4.7; 4.8 is provable (issue 28)."""
    bounds = eps_bounds("hr", eps0=8.0, n=100, delta=1e-8)
    assert 4.8 <= bounds.lower <= bounds.upper


@pytest.mark.parametrize("name,params,eps0,eps,n", [
    ("blh", {}, 0.239, 0.02, 20_000), ("krr", {"k": 512}, 2.02, 0.3, 30_000), ("laplace", {}, 2.46, 0.1, 5_000),
    ("hr", {}, 6.5, 1.0, 3_000)])
def test_noise_integral_bounds_the_integral_and_refines_where_it_matters(monkeypatch, name, params, eps0, eps, n):
    """The rounding term's int_R e^(-n t^2/8) |psi_G(t)|^n dt (psi of the unrounded tilted law,
    summed directly on a grid far finer than its oscillation) is below the bound; and the bound
    on coarse cells refined where they matter is within 3% of the bound on fine cells everywhere
    (REFINE = 1), and no larger than the coarse cells' alone (never refining)."""
    d = Query(name, eps0, 1, params).lower[-1]
    eps_a, n_a = np.array([eps]), np.array([n])
    [(_, plan, law_eps)] = [p for p in spread_plans(d, eps_a, np.zeros(1, np.int64), n_a, lower.RESOLUTION,
                                                    lower.LOWER_TAIL_LOG) if p[0].size]
    atoms, rows = lower._Atoms(d, law_eps, plan.law), plan.row
    bound = float(lower._noise_integral(atoms, rows, n_a.astype(float))[0])
    reach, top = float(np.ptp(atoms.x[rows[0]])), 1.5 * math.sqrt(8 * lower.NOISE_LOG / n)
    t = np.linspace(0.0, top, int(top * reach / 0.05) + 2)  # 125 points per turn of the fastest phase
    psi = np.concatenate([np.abs(np.exp(1j * np.outer(part, atoms.x[rows[0]])) @ atoms.w[rows[0]])
                          for part in np.array_split(t, max(1, t.size * atoms.x.shape[1] // 10**7))])
    integrand = np.exp(-n * t**2 / 8 + n * np.log(np.maximum(psi, 1e-300)))
    exact = 2 * float(np.sum((integrand[1:] + integrand[:-1]) / 2) * t[1])  # beyond top: below e^-45 of it
    assert exact <= bound, (exact, bound)
    monkeypatch.setattr(lower, "REFINE", 1)
    fine = float(lower._noise_integral(atoms, rows, n_a.astype(float))[0])
    assert bound <= 1.03 * fine, (fine, bound)
    monkeypatch.setattr(lower, "REFINE", 16)
    monkeypatch.setattr(lower, "REFINE_SHARE", np.inf)  # never refined
    coarse = float(lower._noise_integral(atoms, rows, n_a.astype(float))[0])
    assert bound <= coarse
