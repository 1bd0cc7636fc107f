"""The Gaussian randomizer R(x) = x + N(0, sigma^2) on bits x in {0, 1}: its laws of G as data.

Not an eps0-LDP randomizer, so it is not in the registry of ``tablegen.mechanisms``: its bounds are
``tablegen.engine.gaussian``'s.  Everything here is a closed form or a decomposition whose rounding is
pushed the safe way; the proofs are in docs/soundness.md, "Shuffled Gaussian".

* ``blanket``: the privacy-blanket law (Balle-Bell-Gascon-Nissim, arXiv:1903.02837) of the pair
  (0, 1), with c(y) = min(phi(y), phi(y - 1)), its likelihood ratio u = e^t (t >= 0) clipped at e^L,
  each cell of t spread to its two ends (mean-preserving: an upper bound), optionally shifted by
  s (alpha - 1) per user (``shift``);
* ``excess``: E[(Y - a)_+] for the clipped-off excess Y = (u - e^L)_+, closed form;
* ``exact_pairs``: the pair "the other users at 0, the target 0 or 1" (arXiv:2504.07414 Theorem 5),
  each cell contracted to its conditional mean (a lower bound);
* ``sum_delta``: the sum of the outputs is N(sum x, n sigma^2), so the Gaussian mechanism at
  mu = 1 / (sigma sqrt n) is a lower bound (Balle-Wang, arXiv:1805.06530, Theorem 8);
* ``largest_report_delta``: whether the largest report exceeds a threshold, for the pair "others at 0,
  the target 1 against 0": closed form, a lower bound (the single report far in the tail that decides
  the blanket bound where n or delta is small).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr, ndtr

from lookup.format import SIGMA_MAX, SIGMA_MIN, UNIT_ROUNDOFF
from tablegen.decomposition import Decomposition

CELLS = 80  # cells of t = log u per half of the blanket (4 CELLS + 3 components: the spectral path's size)
LOWER_CELLS = 160  # cells of t per exact pair (lower bound)
LOWER_CLIPS = (14.0, 8.0, 6.0)  # the exact pairs' cells of t stop at |t| = one of these (end cells infinite):
# the spectral lower path declines the far ones where n is large (sigma 0.5, n 1e9: clip 14 beyond eps 1e-4)
# relative error bound assumed of scipy's ndtr / log_ndtr and of one exp or expm1 (tested against mpmath
# down to 1e-290 in tests/tablegen/test_gaussian.py); ``normal_mass_with_error`` builds on it
NORMAL_RTOL = 16 * UNIT_ROUNDOFF
# thresholds z = tau / sigma of ``largest_report_delta`` a search tries: Q(37) ~ 6e-300 is still a normal
# double, so no tail mass computed there underflows to 0
LARGEST_Z = np.linspace(-2.0, 37.0, 391)


def check_sigma(sigma: float) -> float:
    """sigma as a float in [SIGMA_MIN, SIGMA_MAX] (ValueError naming sigma and the range)."""
    value = float(sigma) if isinstance(sigma, (int, float, np.floating)) and not isinstance(sigma, bool) else math.nan
    if not SIGMA_MIN <= value <= SIGMA_MAX:
        raise ValueError(f"sigma must be a number in [{SIGMA_MIN:g}, {SIGMA_MAX:g}] (the noise's standard deviation "
                         f"in units of the input range), got sigma={sigma!r}")
    return value


def normal_mass(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    """P(a < Z < b) for Z standard normal, a <= b, without cancellation in either tail."""
    return normal_mass_with_error(a, b)[0]


def normal_mass_with_error(a: np.ndarray | float, b: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """P(a < Z < b) = Phi(hi) (1 - e^(log Phi(lo) - log Phi(hi))) (mirrored into the lower tail) and a
    bound on its relative error: NORMAL_RTOL (3 + |log Phi(hi)|) for the exp and expm1, plus the logs' absolute error
    NORMAL_RTOL (|log Phi(lo)| + |log Phi(hi)| + 1) times the condition number e^x / |e^x - 1| of
    expm1 at their difference x (large for narrow cells far in a tail)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    flip = a > 0
    lo, hi = np.where(flip, -b, a), np.where(flip, -a, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        log_lo, log_hi = log_ndtr(lo), log_ndtr(hi)
        x = log_lo - log_hi
        mass = np.where(hi > lo, np.exp(log_hi) * -np.expm1(x), 0.0)
        logs = np.where(np.isfinite(log_lo), np.abs(log_lo), 0.0) + np.abs(log_hi) + 1
        condition = np.where(hi > lo, np.exp(x) / -np.expm1(x), 0.0)
    return mass, NORMAL_RTOL * (3 + np.abs(log_hi) + logs * np.nan_to_num(condition, posinf=0.0))


def blanket_mass(sigma: float) -> float:
    """gamma = integral of min(phi(y), phi(y - 1)) = 2 Phi(-1 / (2 sigma))."""
    return float(2 * ndtr(-0.5 / sigma))


def _spread(lo: np.ndarray, hi: np.ndarray, c: np.ndarray, m: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two-point law on each cell's ends (lo, hi) with the ratio's conditional mean m / c:
    (hi, weight of hi, lo), hi widened to the mean where rounding put the mean above it."""
    mean = m / c
    hi = np.maximum(hi, mean)
    w = np.minimum(np.clip((mean - lo) / (hi - lo), 0.0, 1.0) * (1 + 4 * UNIT_ROUNDOFF), 1.0)
    return hi, w, lo


def blanket(sigma: float, clip_log: float, shift: float = 0.0, cells: int = CELLS) -> Decomposition:
    """The blanket law of the pair (0, 1), u clipped at e^clip_log, cells spread, shifted by ``shift``.

    Left half (y < 1/2): c(y) = phi(y - 1), v = 1, u = e^t; right half its mirror image (u and v
    exchanged).  On a cell u is replaced by the two-point law on the cell's ends with u's conditional
    mean (pushed up); beyond the clip (y < 1/2 - sigma^2 L) u is replaced by e^L (its excess is
    ``excess``'s) and, on the right, v by e^L (G only rises).  The blanket masses are pushed down, so
    the decomposition is that of a smaller c = kappa c (still a blanket), with u = 1 / kappa on the right
    (rounded up) and v = 1 <= 1 / kappa on the left (G only rises).  ``shift`` = s adds
    s (alpha - 1) to every value of G, the G = 0 atom included: u - s, v - s (docs/soundness.md).
    """
    t = np.linspace(0.0, clip_log, cells + 1)
    y = 0.5 - sigma * sigma * t  # the left half's cell edges (t = (1 - 2y) / (2 sigma^2))
    c, c_err = normal_mass_with_error((y[1:] - 1) / sigma, (y[:-1] - 1) / sigma)
    c = c * (1 - c_err)  # int phi(y - 1), pushed down
    m, m_err = normal_mass_with_error(y[1:] / sigma, y[:-1] / sigma)  # int phi(y): u's mean (left), v's (right)
    # the ratio of the smaller blanket, u / kappa, lies in [e^t_i, e^t_i+1 / kappa]: the upper ends widened
    lo, hi = np.exp(t[:-1]), np.exp(t[1:]) * (1 + 4 * UNIT_ROUNDOFF) / (1 - c_err)
    u_hi, u_w, u_lo = _spread(lo, hi, c, m * (1 + m_err))  # u's mean pushed up (G up)
    v_hi, v_w, v_lo = _spread(lo, hi, c, m * (1 - m_err))  # v's mean pushed down (G up)
    clip, tail = math.exp(clip_log), tail_mass(sigma, clip_log)
    u_left = np.concatenate([u_hi, u_lo, [clip]])
    v_right = np.concatenate([v_hi, v_lo, [clip]])
    one = np.ones_like(u_left)
    kappa = np.concatenate([1 - c_err, 1 - c_err, [1 - NORMAL_RTOL]])  # c pushed down by these factors
    u = np.concatenate([u_left, (1 + 4 * UNIT_ROUNDOFF) / kappa])
    v = np.concatenate([one, v_right])
    weight = np.concatenate([c * u_w, c * (1 - u_w), [tail], c * v_w, c * (1 - v_w), [tail]])
    rest = max(0.0, 1.0 - float(weight.sum()))
    if shift:
        u, v, weight = np.append(u - shift, -shift), np.append(v - shift, -shift), np.append(weight, rest)
    return Decomposition(u, v, weight)


def tail_mass(sigma: float, clip_log: float) -> float:
    """P(Y > 0): the blanket mass beyond the clip, int_{y < y_L} phi(y - 1) (pushed down)."""
    y = 0.5 - sigma * sigma * clip_log
    return float(ndtr((y - 1) / sigma)) * (1 - NORMAL_RTOL)


def excess(sigma: float, clip_log: float, a: np.ndarray | float = 0.0) -> np.ndarray:
    """E[(Y - a)_+], Y = (u - e^L)_+ under the blanket mass, a >= 0:

        int_{y < y_W} (phi(y) - W phi(y - 1)) dy = Phi(y_W / sigma) - W Phi((y_W - 1) / sigma),

    W = e^L + a, y_W = 1/2 - sigma^2 log W; each term's rounding added (pushed up, a larger excess
    also covers the tail mass pushed down by ``tail_mass``: at most NORMAL_RTOL W P(Y > 0) more)."""
    a = np.asarray(a, dtype=float)
    with np.errstate(divide="ignore"):
        w_log = np.logaddexp(clip_log, np.log(np.maximum(a, 0.0)))
    y = 0.5 - sigma * sigma * w_log
    first, second = exp_with_error(log_ndtr(y / sigma)), exp_with_error(w_log + log_ndtr((y - 1) / sigma))
    return np.maximum(first[0] - second[0], 0.0) + first[0] * first[1] + second[0] * second[1]


def exp_with_error(log_value: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """e^x for x computed with absolute error NORMAL_RTOL (|x| + 1), and the relative error bound of the
    result (the exp's own rounding included).  At x = -inf (a term below every double, e.g. an argument that
    overflowed) the value is 0 with no relative error: it is below DELTA_FLOOR, to which upper bounds are
    raised."""
    x = np.asarray(log_value, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.exp(x), np.where(np.isneginf(x), 0.0, NORMAL_RTOL * (np.abs(x) + 3) * 2)


def pair_spread(sigma: float, clip: float) -> float:
    """T, where the exact pairs' cells of t end: 12 sd of t beyond its mean, at most ``clip``."""
    return min(12.0 / sigma + 0.5 / (sigma * sigma), clip)


def pair_clips(sigma: float) -> tuple[float, ...]:
    """The distinct ends T of the exact pairs' cells of t over LOWER_CLIPS, farthest first."""
    return tuple(dict.fromkeys(pair_spread(sigma, clip) for clip in LOWER_CLIPS))


def exact_pairs(sigma: float, cells: int = LOWER_CELLS, clip: float = LOWER_CLIPS[0]) -> list[Decomposition]:
    """The pair "other users at 0, the target 1 or 0" in both directions (Theorem 5 with x2 = 0):
    c = phi(y), u = e^t, v = 1 (target 1 against 0) and u = 1, v = e^t, t = (2y - 1) / (2 sigma^2).
    Each cell of t (``cells`` equal ones on [-T, T] and the two
    infinite ends; T = min(12 sd of t, ``clip``)) is contracted to its conditional mean, u pushed down (and
    capped at e^T: G only falls) and v pushed up (conditional Jensen: a lower bound whatever the cells);
    the weights sum to one up to rounding."""
    s2 = sigma * sigma
    spread = pair_spread(sigma, clip)
    y = 0.5 + s2 * np.linspace(-spread, spread, cells + 1)
    ends = np.concatenate([[-np.inf], y, [np.inf]])
    c, c_err = normal_mass_with_error(ends[:-1] / sigma, ends[1:] / sigma)
    m1, m1_err = normal_mass_with_error((ends[:-1] - 1) / sigma, (ends[1:] - 1) / sigma)
    keep = c > 0
    c, ratio, err = c[keep], m1[keep] / c[keep], (c_err + m1_err)[keep] + 2 * UNIT_ROUNDOFF
    one = np.ones_like(c)
    return [Decomposition(np.minimum(ratio, math.exp(spread)) * (1 - err), one, c).merged(),
            Decomposition(one, ratio * (1 + err), c).merged()]


def sum_delta(sigma: float, n: int, eps: np.ndarray | float) -> np.ndarray:
    """Delta of the sum of the outputs, N(sum x, n sigma^2): the Gaussian mechanism at mu = 1 / (sigma sqrt n),
    pushed down (a lower bound on the shuffled delta)."""
    return gaussian_mechanism_delta(1.0 / (sigma * math.sqrt(n)), eps, up=False)


def gaussian_mechanism_delta(mu: float, eps: np.ndarray | float, up: bool) -> np.ndarray:
    """Delta of N(mu, 1) against N(0, 1): Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) (arXiv:1805.06530
    Theorem 8), each term's rounding pushed up (``up``) or down."""
    eps = np.asarray(eps, dtype=float)
    first = exp_with_error(log_ndtr(mu / 2 - eps / mu))
    second = exp_with_error(eps + log_ndtr(-mu / 2 - eps / mu))
    error = first[0] * first[1] + second[0] * second[1]
    if up:
        return np.maximum(first[0] - second[0], 0.0) + error
    return np.maximum(first[0] - second[0] - error, 0.0)


def largest_report_delta(sigma: float, n: int, eps: np.ndarray | float, z: np.ndarray | float) -> np.ndarray:
    """A lower bound on the shuffled delta at eps: the event "the largest report exceeds tau = sigma z" for
    the datasets "others at 0, the target 1" (P1) against "the target 0" (P0), a function of the shuffled
    multiset (post-processing):

        P1(max > tau) - e^eps P0(max > tau) = A (t1 - e^eps t0) - (e^eps - 1) (1 - A),

    t0 = Q(z), t1 = Q(z - 1/sigma), A = (1 - t0)^(n - 1) (Q the standard normal's upper tail).  It only
    falls as t1 falls or t0 rises (where it is positive), so t1 is pushed down (its argument up) and t0 up
    by their error bounds; A and 1 - A (log1p, exp, expm1) carry 16 u (1 + |log A|), every other product
    16 u, each term pushed the way that lowers the bound (docs/soundness.md, "Shuffled Gaussian", 6 (c)).
    ``eps`` and ``z`` broadcast against each other."""
    eps, z = np.broadcast_arrays(np.asarray(eps, dtype=float), np.asarray(z, dtype=float))
    u = UNIT_ROUNDOFF
    shifted = (z - 1.0 / sigma) + 4 * u * (np.abs(z) + 1.0 / sigma)  # rounded up: t1 only smaller
    t0, e0 = normal_mass_with_error(z, np.inf)
    t1, e1 = normal_mass_with_error(shifted, np.inf)
    log_a = (n - 1.0) * np.log1p(-np.minimum(t0 * (1 + e0), 1.0))
    err = 16 * u * (1 + np.abs(log_a))
    a, not_a = np.exp(log_a), -np.expm1(log_a)
    gain = a * t1 * (1 - e1) * (1 - err - 16 * u)
    cost = (a * np.exp(eps) * t0 * (1 + e0) + np.expm1(eps) * not_a) * (1 + err + 16 * u)
    return np.maximum(np.nan_to_num(gain - cost, nan=0.0), 0.0) * (1 - 4 * u)  # a NaN proves nothing: 0
