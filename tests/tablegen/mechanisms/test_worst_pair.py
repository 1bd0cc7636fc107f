"""The pair (0, 1) is the worst pair of the blanket bound for inputs in [0, 1] (docs/soundness.md, "The
worst pair of inputs in [0, 1]"): checked by quadrature, independently of the engine, for the
Gaussian and the Laplace mechanism, with a two-humped noise (not log-concave) where the claim is
false to show the check can fail; and end to end against the exact shuffled delta of every pair of
neighbouring datasets of a grid of [0, 1] at n = 2."""

import numpy as np
import pytest
from scipy import stats

from tablegen.engine import delta_bounds, gaussian
from tablegen.mechanisms import get_mechanism

PAIRS = np.linspace(0.0, 1.0, 11)  # a, b in steps of 0.1
ALPHAS = np.exp([0.0, 0.1, 0.5, 1.5, 3.0])
TS = np.concatenate([-np.logspace(-2, 2, 9), [0.0], np.logspace(-3, 2, 11)])


def gaussian_noise(sigma):
    return lambda y: stats.norm.pdf(y, scale=sigma)


def laplace_noise(eps0):
    return lambda y: 0.5 * eps0 * np.exp(-eps0 * np.abs(y))


def two_humps(shift, scale):
    return lambda y: 0.5 * (stats.norm.pdf(y - shift, scale=scale) + stats.norm.pdf(y + shift, scale=scale))


def nodes(reach, per_tenth):
    """Quadrature nodes on [-reach, 1 + reach] with every multiple of 0.1 among them (the kinks of
    Laplace densities and of the blanket: the trapezoid rule is then second order on every piece)."""
    tenths = int(np.ceil(reach * 10))
    return np.linspace(-tenths / 10, 1 + tenths / 10, (2 * tenths + 10) * per_tenth + 1)


def excess_over_corner(noise, ys):
    """max over a, b, alpha, t of h_t(a, b) - h_t(0, 1), h_t(a, b) = int (p_a - alpha p_b - t c)_+ dy on
    the nodes ``ys`` (trapezoid rule: the same nodes for every pair)."""
    p = np.array([noise(ys - x) for x in PAIRS])
    c = np.minimum(p[0], p[-1])
    worst = -np.inf
    for alpha in ALPHAS:
        g = p[:, None, :] - alpha * p[None, :, :]  # (a, b, y)
        for t in TS:
            h = np.trapezoid(np.clip(g - t * c, 0.0, None), ys, axis=-1)
            worst = max(worst, float((h - max(h[0, -1], h[-1, 0])).max()))
    return worst


@pytest.mark.parametrize("sigma", [0.2, 0.5, 1.0, 4.0])
def test_gaussian_pairs_below_corner(sigma):
    assert excess_over_corner(gaussian_noise(sigma), nodes(14 * sigma, 20)) <= 1e-9


@pytest.mark.parametrize("eps0", [0.5, 2.0, 8.0])
def test_laplace_pairs_below_corner(eps0):
    assert excess_over_corner(laplace_noise(eps0), nodes(40 / eps0, 20)) <= 1e-9


def test_check_fails_where_the_noise_is_not_log_concave():
    """Noise with two humps (not log-concave) breaks step 1: an inner pair beats (0, 1) there."""
    assert excess_over_corner(two_humps(0.3, 0.1), nodes(3.0, 100)) > 0.01


@pytest.mark.parametrize("noise", [gaussian_noise(0.3), gaussian_noise(2.0), laplace_noise(3.0)])
def test_lemma_non_increasing_to_the_middle(noise):
    """Step 3: E(x) = int (p_x - lambda c)_+ dy is non-increasing in x on [0, 1/2] (and so largest at 0)."""
    ys = nodes(60.0, 50)
    xs = np.linspace(0.0, 0.5, 26)
    c = np.minimum(noise(ys), noise(ys - 1))
    for lam in (0.5, 1.0, 1.3, 3.0, 30.0):
        e = np.array([np.trapezoid(np.clip(noise(ys - x) - lam * c, 0.0, None), ys) for x in xs])
        assert np.all(np.diff(e) <= 1e-10)


def shuffled_pair_delta(noise, ys, a, b, w, alpha):
    """The exact delta of the shuffled reports of (a, w) against (b, w) at n = 2: the unordered pair's
    densities p_a(y1) p_w(y2) + p_w(y1) p_a(y2), by two-dimensional quadrature over the plane (half of it
    is the ordered half's value twice)."""
    dy = ys[1] - ys[0]
    p = {x: noise(ys - x) for x in (a, b, w)}
    first = np.outer(p[a], p[w]) + np.outer(p[w], p[a])
    second = np.outer(p[b], p[w]) + np.outer(p[w], p[b])
    return 0.5 * np.clip(first - alpha * second, 0.0, None).sum() * dy * dy


GRID = (0.0, 0.3, 0.5, 0.7, 1.0)


@pytest.mark.parametrize("sigma, eps", [(0.5, 1.0), (1.0, 0.3), (2.0, 0.1)])
def test_gaussian_unit_datasets_below_certified(sigma, eps):
    """Every pair of neighbouring datasets of a grid of [0, 1] at n = 2: exact delta <= certified."""
    certified = gaussian.delta_bounds(sigma, 2, eps, lower=False).upper
    ys = np.linspace(-9 * sigma, 1 + 9 * sigma, 1201)
    exact = max(shuffled_pair_delta(gaussian_noise(sigma), ys, a, b, w, np.exp(eps))
                for a in GRID for b in GRID if a != b for w in GRID)
    assert 0 < exact <= certified


@pytest.mark.parametrize("eps0, eps", [(1.0, 0.3), (4.0, 1.5)])
def test_laplace_unit_datasets_below_certified(eps0, eps):
    certified = delta_bounds(get_mechanism("laplace"), eps0=eps0, n=2, eps=eps, lower=False).upper
    ys = np.linspace(-30 / eps0, 1 + 30 / eps0, 1601)
    exact = max(shuffled_pair_delta(laplace_noise(eps0), ys, a, b, w, np.exp(eps))
                for a in GRID for b in GRID if a != b for w in GRID)
    assert 0 < exact <= certified
