"""Exact, certified accounting of the two protocols of arXiv:1911.06879, section 3.

What the analyzer sees (proof of Theorem 3.1 i): for the binary sum, the number of messages
S + N with N ~ Bin(n, p); neighbouring inputs move S by one.  For the histogram, every bin j
carries its own independent Bin(n, p) noise and a neighbouring input moves one user from a bin
to another: one count goes up by one and another down by one (not the same as doubling eps).

With b the Bin(n, p) pmf and r(k) = b(k - 1) / b(k) = k (1 - p) / ((n - k + 1) p) (increasing):

* binary sum, P = law of N + 1, Q = law of N:
      delta(eps) = max over the two directions of sum_k (P(k) - e^eps Q(k))_+,
      P || Q:  sum_k b(k - 1) (1 - e^(eps - l(k)))_+            l = log r
      Q || P:  sum_k b(k) (1 - e^(eps + l(k)))_+
* histogram, P = law of (X + 1, Y), Q = law of (X, Y + 1), X, Y iid Bin(n, p):
      delta(eps) = sum_a b(a - 1) sum_b b(b) (1 - e^(eps - l(a) + l(b)))_+
  (both directions are equal by symmetry).  The inner sum over b with l(b) < l(a) - eps is
  W(m) - e^(eps - l(a)) W(m - 1), W the cdf, because b(b) r(b) = b(b - 1).

Certification: every term is non-negative; the pmf is exp of a gammaln expression whose
floating-point error is bounded (``log_pmf``) and pushed up; the cancellation in the histogram's
inner sums gets an explicit rounding bound; the mass outside the window (Chernoff) is added.
Lower bounds push everything the other way and drop the outside mass.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

from lookup.format import PROTOCOLS, UNIT_ROUNDOFF
from tablegen import validate
from tablegen.engine.search import shrink_bracket

VERSION = "1"  # of this accounting: what a calibration table is stamped with (not the lattice engine's)

TAIL = 1e-30  # window: the Bin(n, p) mass outside it is below this (Chernoff), and added
MAX_EPS = 100.0
LOG_CAP = 700.0  # exp overflows above ~709
MAX_LOG_NOISE = 36.0  # p up to 1 - e^-36, still below 1 in floating point


def log_pmf(n: int, p: float, k: np.ndarray) -> tuple[np.ndarray, float]:
    """log Bin(n, p) pmf at integer k in [0, n] and a bound on its absolute rounding error."""
    k = k.astype(float)
    lg = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)
    log_p, log_q = math.log(p), math.log1p(-p)
    value = lg + k * log_p + (n - k) * log_q
    # gammaln (a few ulps each) and the sums: 16 u times the magnitudes involved
    scale = abs(gammaln(n + 1.0)) * 3 + n * (abs(log_p) + abs(log_q)) + 1.0
    return value, 16 * UNIT_ROUNDOFF * scale


def window(n: int, p: float) -> tuple[int, int, float]:
    """[lo, hi] holding all but at most ``TAIL`` of Bin(n, p) on each side, and that bound."""
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    width = max(10.0, math.sqrt(2 * math.log(1 / TAIL))) * sd + 10
    lo, hi = max(0, math.floor(mean - width)), min(n, math.ceil(mean + width))
    outside = _chernoff(n, p, lo - 1, below=True) + _chernoff(n, p, hi + 1, below=False)
    return lo, hi, outside


def _chernoff(n: int, p: float, k: int, below: bool) -> float:
    """Chernoff bound on P(Bin(n, p) <= k) (below) or >= k; exp(-n KL(k/n || p))."""
    if (below and k < 0) or (not below and k > n):
        return 0.0
    a = k / n
    if (below and a >= p) or (not below and a <= p):
        return 1.0
    kl = (a * math.log(a / p) if a > 0 else 0.0) + ((1 - a) * math.log((1 - a) / (1 - p)) if a < 1 else 0.0)
    return math.exp(-n * kl)


def log_ratio(n: int, p: float, k: np.ndarray) -> np.ndarray:
    """l(k) = log b(k-1)/b(k) = log(k (1-p)) - log((n-k+1) p), -inf at k = 0, +inf at k = n+1."""
    k = k.astype(float)
    with np.errstate(divide="ignore"):
        return np.log(k * (1 - p)) - np.log((n - k + 1) * p)


def delta_bounds(protocol: str, *, eps: float, n: int, p: float) -> tuple[float, float]:
    """(certified upper bound, lower bound) on delta(eps) of ``protocol`` with noise p."""
    protocol, eps, n, p = check(protocol, eps, n, p)
    return (_binary_sum if protocol == "binary-sum" else _histogram)(eps, n, p)


def check(protocol: str, eps: float, n: float, p: float) -> tuple[str, float, int, float]:
    if protocol not in PROTOCOLS:
        raise validate.unknown_name("protocol mechanism", protocol, PROTOCOLS)
    eps = validate.nonnegative_finite("eps", eps)
    n = validate.integer_at_least("n", n, 1)
    if not (isinstance(p, (int, float)) and 0 < p < 1):
        raise ValueError(f"p must be in (0, 1), got p={p!r}")
    return protocol, eps, n, float(p)


def _grid(n: int, p: float) -> tuple[np.ndarray, np.ndarray, float, float]:
    """k = lo-1 .. hi+1 (clipped to [0, n]), pmf pushed up, pmf pushed down, outside mass."""
    lo, hi, outside = window(n, p)
    k = np.arange(max(lo - 1, 0), min(hi + 1, n) + 1)
    log_b, err = log_pmf(n, p, k)
    return k, log_b, err, outside


def _binary_sum(eps: float, n: int, p: float) -> tuple[float, float]:
    k, log_b, err, outside = _grid(n, p)
    b = np.exp(log_b)
    l_next = log_ratio(n, p, k + 1)  # l(k + 1): P || Q term at k+1 is b(k) (1 - e^(eps - l(k+1)))_+
    l_here = log_ratio(n, p, k)
    forward = b * np.maximum(-np.expm1(eps - l_next), 0.0)
    backward = b * np.maximum(-np.expm1(eps + l_here), 0.0)
    return _bounded(max(forward.sum(), backward.sum()), k.size, err, outside)


def _histogram(eps: float, n: int, p: float) -> tuple[float, float]:
    k, log_b, err, outside = _grid(n, p)
    b = np.exp(log_b)
    cdf = np.cumsum(b)  # W over the window (mass below it is at most ``outside``)
    ell = log_ratio(n, p, k)
    # for a = k + 1 (so b(a - 1) = b(k)): m(a) = last window index with l(b) < l(a) - eps
    ell_a = log_ratio(n, p, k + 1)
    m = np.searchsorted(ell, ell_a - eps, side="left") - 1
    has = m >= 0
    mm = np.clip(m, 0, None)
    w_m = np.where(has, cdf[mm], 0.0)
    w_prev = np.where(m >= 1, cdf[np.clip(m - 1, 0, None)], 0.0)
    # e^(eps - l(a)) capped where it would overflow: a smaller factor only enlarges the upper
    # bound's inner sum; those rows contribute nothing to the lower bound
    capped = eps - ell_a > LOG_CAP
    factor = np.exp(np.minimum(eps - ell_a, LOG_CAP))
    inner = np.maximum(w_m - factor * w_prev, 0.0)
    # errors of the cancellation: the pmf's relative error and the rounding of the cumulative sums
    inner_err = (math.expm1(err) + 4 * UNIT_ROUNDOFF * (k.size + 4)) * (w_m + factor * w_prev)
    main = float(b @ inner)
    main_lower = float(b @ np.where(capped, 0.0, inner))
    slack = float(b @ inner_err)
    upper, _ = _bounded(main, k.size, err, outside)
    _, lower = _bounded(main_lower, k.size, err, outside)
    # the cdf misses the mass B below the window: the true inner sum is the computed one plus
    # B (1 - factor), so add B (at most ``outside``) to the upper bound and take B (factor - 1)_+ off
    below = _chernoff(n, p, int(k[0]) - 1, below=True)
    missing = below * float(b @ np.maximum(factor - 1, 0.0))
    return upper + slack + outside * (1 + 4 * UNIT_ROUNDOFF), max(lower - slack - missing, 0.0)


def _bounded(main: float, terms: int, log_err: float, outside: float) -> tuple[float, float]:
    """Push a sum of non-negative terms computed from the pmf up and down by its error bounds."""
    rel = math.expm1(2 * log_err) + 4 * UNIT_ROUNDOFF * (terms + 4)
    upper = main * (1 + rel) + outside
    lower = main * (1 - rel)
    return upper * (1 + 4 * UNIT_ROUNDOFF), max(lower, 0.0)


def eps_bounds(protocol: str, *, delta: float, n: int, p: float, rtol: float = 1e-6) -> tuple[float, float]:
    """(certified eps, lower bound) at ``delta``: the evaluated ends of brackets of the two
    delta curves (delta(eps) is non-increasing)."""
    check(protocol, 0.0, n, p)
    delta = validate.open_unit("delta", delta)

    def crossing(side: int) -> tuple[float, float]:
        def excess(eps: float) -> float:
            value = delta_bounds(protocol, eps=eps, n=n, p=p)[side]
            return math.log(value / delta) if value > 0 else -math.inf

        if excess(0.0) <= 0:
            return 0.0, 0.0
        hi = 0.1
        while excess(hi) > 0:
            if hi > MAX_EPS:
                raise ValueError(f"{protocol} with n={n}, p={p} is not (eps, delta={delta})-DP for any eps <= "
                                 f"{MAX_EPS}: the last count alone has probability p^n above delta")
            hi *= 2
        lo = hi / 2 if hi > 0.1 else 0.0
        return shrink_bracket(excess, lo, excess(lo), hi, excess(hi), rtol)

    upper = crossing(0)[1]
    lower = crossing(1)[0] if delta_bounds(protocol, eps=0.0, n=n, p=p)[1] > delta else 0.0
    return upper, lower


def calibrate(protocol: str, *, eps: float, delta: float, n: int, rtol: float = 1e-6) -> float:
    """Largest p in (1/2, 1) (least noise) found whose certified delta at eps is <= delta; the
    search runs on log(1 - p) and returns its evaluated safe (smaller p) end."""
    check(protocol, eps, n, 0.5)
    eps = validate.positive_finite("eps", eps)
    delta = validate.open_unit("delta", delta)

    def excess(x: float) -> float:  # x = -log(1 - p) in (log 2, ...): increasing p
        value = delta_bounds(protocol, eps=eps, n=n, p=-math.expm1(-x))[0]
        return math.log(value / delta) if value > 0 else -math.inf

    lo = math.log(2.0)
    if excess(lo) > 0:
        raise ValueError(f"no p in (1/2, 1) makes {protocol} ({eps}, {delta})-DP with n={n}: even p = 1/2 "
                         "gives a larger delta (more users are needed)")
    hi = lo
    while True:
        hi = min(2 * hi, MAX_LOG_NOISE)
        if excess(hi) > 0:
            break
        if hi == MAX_LOG_NOISE:  # certified even with (almost) no noise
            return -math.expm1(-hi)
    a, _ = shrink_bracket(lambda x: -excess(x), lo, -excess(lo), hi, -excess(hi), rtol)
    return -math.expm1(-a)


def paper_p(protocol: str, *, eps: float, delta: float, n: int) -> float:
    """The paper's p: 1 - 50 ln(2/delta) / (eps^2 n) (Theorem 3.1); the histogram protocol is
    (2 eps, 2 delta)-DP at that p (Theorem 3.2), so its target (eps, delta) uses eps/2, delta/2."""
    if protocol == "histogram":
        eps, delta = eps / 2, delta / 2
    return 1 - 50 * math.log(2 / delta) / (eps * eps * n)
