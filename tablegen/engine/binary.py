"""Binary randomized response (k-RR, k = 2) after shuffling: certified bounds on the exact worst case.

The shuffled output is the count of ones.  With p = e^eps0 / (1 + e^eps0), q = 1 - p, g = e^eps and m of
the other n - 1 users holding a one, the two neighbouring counts are S_m + Bern(q) and S_m + Bern(p) with
S_m = Bin(n-1-m, q) + Bin(m, p), and

    delta_m(eps) = (p - g q) H_g'(S_m || S_m + 1),   g' = 1 + (g - 1) / (p - g q),

the exact delta being the maximum over m (the other direction at m is this one at n - 1 - m).  For m in
[m1, m2] with m2 <= (n - 1) / 2, S_m - m is Y = Bin(n-1-2 m2+m1, q) + Bin(m1, p) - m1 plus independent
noise, so one evaluation at Y bounds the whole interval (adding noise never increases a shift
divergence).  Proofs, the floating-point analysis and the tail bounds: docs/soundness.md, "Binary
randomized response".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.fft import irfft, next_fast_len, rfft

from lookup.format import UNIT_ROUNDOFF as U
from lookup.format import exact_worst_case

WINDOW_SDS = 8.0  # half-width of each binomial window in its tilted sds (tilted tail mass < e^-30)
EXACT_MS = 4  # the m whose exact value gives the lower bound
RETRIES = 4  # certifications at one step after a worse single m raised the lower bound
FIRST_WIDTH = 20000  # past the first EXACT_MS single m, the walk's width starts at n / FIRST_WIDTH
EXACT_COMB = 2000  # binomial coefficients computed as exact integers up to this many successes
PROFILE_TOL = 0.005  # the profile's intervals: bound at eps below the reference at eps / (1 + PROFILE_TOL)
PROFILE_FLOOR = 1e-35  # eps whose reference delta is below it do not steer the profile's partition
CHUNK_SDS = 2.0  # g' that share one tilt: their stops span at most this many tilted sds


@dataclass(frozen=True)
class BinaryBounds:
    """(lower, upper) on the exact eps of shuffled binary RR, and the partition that certified upper."""

    upper: float
    lower: float
    intervals: int


def applies(query: object) -> bool:
    """Whether a query is binary RR with the exact path: k-RR with k = 2 (``lookup.format.exact_worst_case``,
    which lookup reads too) at an n the engine evaluates itself (2 <= n <= limits.N_MAX)."""
    return (exact_worst_case(query.mechanism.name, query.params)  # type: ignore[attr-defined]
            and 2 <= query.n == query.n_engine)  # type: ignore[attr-defined]


def _phi(u: float) -> float:
    """(1 + u) log(1 + u) - u, by its alternating series for |u| < 0.05 (no cancellation)."""
    if abs(u) >= 0.05:
        return (1.0 + u) * math.log1p(u) - u
    total, power = 0.0, u * u
    for k in range(2, 20):
        total += power / (k * (k - 1)) if k % 2 == 0 else -power / (k * (k - 1))
        power *= u
    return total


def log_binom_pmf(count: int, t: int, eps0: float) -> tuple[float, float]:
    """log P(Bin(count, q) = t), q = 1 / (1 + e^eps0), and a bound on its absolute error.

    Where min(t, count - t) <= EXACT_COMB the binomial coefficient is the exact integer; elsewhere
    Stirling with Robbins' remainder 1/(12k+1) < log k! - (k log k - k + log(2 pi k)/2) < 1/(12k) and the
    deviance written as q count phi(u1) + p count phi(u2) (docs/soundness.md).  The error bound is
    64 u (count + |terms|) for rounding plus the half-width of the Robbins interval.
    """
    log_p = -math.log1p(math.exp(-eps0))
    log_q = -eps0 + log_p
    if min(t, count - t) <= EXACT_COMB:
        log_comb = math.log(math.comb(count, t))
        terms = (log_comb, t * log_q, (count - t) * log_p)
        return sum(terms), 64 * U * (count + 4 + sum(abs(v) for v in terms))
    cq, cp = count / (1.0 + math.exp(eps0)), count / (1.0 + math.exp(-eps0))
    dev = cq * _phi(t / cq - 1.0) + cp * _phi((count - t) / cp - 1.0)
    half_log = 0.5 * math.log(count / (2 * math.pi * t * (count - t)))
    r_lo = 1 / (12 * count + 1) - 1 / (12 * t) - 1 / (12 * (count - t))
    r_hi = 1 / (12 * count) - 1 / (12 * t + 1) - 1 / (12 * (count - t) + 1)
    err = 64 * U * (count + abs(dev) + abs(half_log) + 4) + (r_hi - r_lo) / 2
    return -dev + half_log + (r_lo + r_hi) / 2, err


def _window(count: int, prob: float) -> tuple[int, int, int]:
    """[lo, hi] of a Bin(count, prob) window of WINDOW_SDS sds each side, and its anchor (the mean)."""
    mean, sd = count * prob, math.sqrt(count * prob * (1 - prob))
    lo = max(0, math.floor(mean - WINDOW_SDS * sd - 2))
    hi = min(count, math.ceil(mean + WINDOW_SDS * sd + 2))
    return lo, hi, min(max(round(mean), lo), hi)


def _tilted_window(count: int, lo: int, hi: int, anchor: int, log_ratio: float) -> tuple[np.ndarray, float]:
    """x(i) = P(i) e^(lam (i - anchor)) / P(anchor) on [lo, hi] for P = Bin(count, r) with e^log_ratio =
    e^lam r / (1 - r), by products of the ratios x(i+1)/x(i) = (count - i)/(i + 1) e^log_ratio; and the
    bound on every value's relative error: per step from the anchor 8 roundings and the rounding of
    log_ratio itself (lam -+ eps0 computed in floating point: |log_ratio| u relative in e^log_ratio)."""
    step = math.exp(log_ratio)
    up = np.arange(anchor, hi, dtype=float)
    down = np.arange(anchor - 1, lo - 1, -1, dtype=float)
    above = np.cumprod((count - up) / (up + 1) * step)
    below = np.cumprod((down + 1) / (count - down) / step)
    x = np.concatenate([below[::-1], [1.0], above])
    return x, (8.0 + abs(log_ratio)) * U * max(hi - anchor, anchor - lo) * 1.01


def _chernoff_out(count: int, prob: float, lo: int, hi: int) -> float:
    """A bound on P(Bin(count, prob) < lo) + P(Bin(count, prob) > hi), doubled for the rounding of prob."""
    total = 0.0
    for x, below in ((lo - 1, True), (hi + 1, False)):
        if (below and x < 0) or (not below and x > count):
            continue
        f = x / count
        if (below and f >= prob) or (not below and f <= prob):
            return 1.0
        kl = (f * math.log(f / prob) if f > 0 else 0.0) + ((1 - f) * math.log((1 - f) / (1 - prob)) if f < 1 else 0.0)
        total += 2.0 * math.exp(-count * kl)
    return total


@dataclass(frozen=True)
class _Tilted:
    """The law of Y = Bin(a, q) + Bin(b, p) tilted by e^(lam t), relative to its anchor t0 = i0 + j0:

    f(t) = exp(log_anchor +- anchor_err) e^(-lam (t - t0)) z(t), z(t) in [z_lo, z_hi] on t = start ...,
    and at most ``out`` of tilted mass (relative) lies outside the two binomial windows.
    """

    z_lo: np.ndarray
    z_hi: np.ndarray
    top_is_end: bool
    bottom_is_end: bool
    start: int
    t0: int
    lam: float
    log_anchor: float
    anchor_err: float
    out: float


def _tilted_law(a: int, b: int, eps0: float, lam: float) -> _Tilted:
    qa = 1.0 / (1.0 + math.exp(eps0 - lam))
    pb = 1.0 / (1.0 + math.exp(-eps0 - lam))
    ia, ib, i0 = _window(a, qa)
    ja, jb, j0 = _window(b, pb)
    x, eta_x = _tilted_window(a, ia, ib, i0, lam - eps0)
    y, eta_y = _tilted_window(b, ja, jb, j0, lam + eps0)
    la, ea = log_binom_pmf(a, i0, eps0)
    lb, eb = log_binom_pmf(b, b - j0, eps0)
    if len(y) == 1:
        z, fft_err = x, 0.0
    else:
        size = next_fast_len(len(x) + len(y) - 1, real=True)
        z = irfft(rfft(x, size) * rfft(y, size), size)[: len(x) + len(y) - 1]
        gamma = 64 * U * math.ceil(math.log2(size))
        norms = np.sum(x) * np.sqrt(np.sum(y * y)) + np.sqrt(np.sum(x * x)) * np.sum(y)
        fft_err = (1 + gamma) * (3 * gamma + 4 * U + gamma * gamma * math.sqrt(size)) * float(norms) * (1 + 1e-6)
    eta = (1 + eta_x) * (1 + eta_y) * (1 + 4 * U) - 1
    mass_x, mass_y = float(np.sum(x)) * (1 + eta), float(np.sum(y)) * (1 + eta)
    out_x, out_y = _chernoff_out(a, qa, ia, ib), _chernoff_out(b, pb, ja, jb)
    total_x, total_y = mass_x / (1 - out_x), mass_y / (1 - out_y)  # the whole tilted masses, at most
    out = total_x * out_x * total_y + total_x * total_y * out_y
    return _Tilted(np.maximum(z - fft_err, 0.0) * (1 - eta), (z + fft_err) * (1 + eta) + 4 * U * np.abs(z),
                   ib == a and jb == b, ia == 0 and ja == 0, ia + ja, i0 + j0, lam, la + lb, ea + eb, out * (1 + 1e-6))


def _rising_sums(z_lo: np.ndarray, z_hi: np.ndarray, mu: float, base: float, out: float, g_lo: np.ndarray,
                 g_hi: np.ndarray, closed: bool, wanted: tuple[bool, bool]) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on sum_k e^(base + mu k) (z(k) - g' e^-mu z(k-1))_+ for z in [z_lo, z_hi] (log-concave), plus
    the mass ``out`` outside the windows (pointwise and in total): lower bounds at each g' of g_hi, upper
    bounds at each g' of g_lo (each only where ``wanted``: (lower, upper); else 0 and inf).

    The upper sum stops at the first k with z(k+1) <= g' e^-mu z(k), past which a log-concave z has no
    positive term, or at the last k where the support ends there (``closed``); it is inf where neither.
    """
    exponent = base + mu * np.arange(len(z_hi), dtype=float)
    overflow = exponent > 700.0  # dropped from the lower sums; an upper sum that reaches one is inf
    weight = np.exp(np.where(overflow, -np.inf, exponent)) * (1 + 2**-40)
    prev_lo = np.concatenate([[0.0], z_lo[:-1]])
    prev_hi = np.concatenate([[0.0], z_hi[:-1]]) + out
    want_lower, want_upper = wanted
    lowers, uppers = np.zeros(len(g_hi)), np.full(len(g_lo), math.inf)
    downs = g_lo * math.exp(-mu) * (1 - 16 * U)
    stops = _first_stops(z_lo, z_hi, out, downs, closed)
    reach = int(np.argmax(overflow)) if overflow.any() else len(z_hi)  # the first weight that overflows
    for idx, (down, top, ratio_hi) in enumerate(zip(downs, stops, g_hi, strict=True)):
        if want_upper and 0 <= top < reach:
            terms = np.maximum(z_hi[: top + 1] - down * prev_lo[: top + 1], 0.0) * weight[: top + 1]
            uppers[idx] = (float(np.sum(terms)) + weight[top] * out) * (1 + 2**-30)
        if want_lower:  # terms past a proved stop are not positive: dropping them keeps a lower bound
            up, end = ratio_hi * math.exp(-mu) * (1 + 16 * U), top + 1 if top >= 0 else len(z_lo)
            lowers[idx] = float(np.sum(np.maximum(z_lo[:end] - up * prev_hi[:end], 0.0) * weight[:end])) * (
                1 - 2**-30) / (1 + 2**-39)
    return lowers, uppers


def _first_stops(z_lo: np.ndarray, z_hi: np.ndarray, out: float, downs: np.ndarray, closed: bool) -> np.ndarray:
    """For each ratio ``down`` (g' e^-mu pushed down), the first k proved to have z(k+1) <= down z(k):
    z_hi(k+1) + out <= down z_lo(k) holds in real arithmetic wherever the ratio (z_hi(k+1) + out) / z_lo(k),
    rounded up (2 roundings, pushed by 8 u), is at most down; found for every down at once by a search in the
    running minimum of the ratios.  Where none is proved: the last k if the support ends there (``closed``),
    else -1 (no stop: the upper sum is inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (z_hi[1:] + out) / z_lo[:-1] * (1 + 8 * U)
    running = np.minimum.accumulate(np.where(np.isnan(ratio), np.inf, ratio))
    stops = np.searchsorted(-running, -downs, side="left")
    return np.where(stops < len(running), stops, len(z_hi) - 1 if closed else -1)


def _tilted_sd(a: int, b: int, eps0: float, lam: float) -> float:
    """The sd of Y = Bin(a, q) + Bin(b, p) tilted by e^(lam t) (the binomials' success odds times e^lam)."""
    qa, pb = 1.0 / (1.0 + math.exp(eps0 - lam)), 1.0 / (1.0 + math.exp(-eps0 - lam))
    return math.sqrt(a * qa * (1 - qa) + b * pb * (1 - pb))


def _tilt_groups(a: int, b: int, eps0: float, log_g: np.ndarray, direction: int) -> list[np.ndarray]:
    """Consecutive runs of the g' (by log g') that one tilt serves: a run grows while its log g' stay
    within CHUNK_SDS / s of its first, s the tilted sd there; the stop of each g' then lies within about
    CHUNK_SDS tilted sds of the run's middle, well inside the windows (WINDOW_SDS).  Which g' share a tilt
    changes only tightness: every tilt gives bounds (docs/soundness.md, "Binary randomized response" 5)."""
    groups, start = [], 0
    while start < len(log_g):
        width = CHUNK_SDS / max(_tilted_sd(a, b, eps0, -direction * float(log_g[start])), 1.0)
        end = start + 1
        while end < len(log_g) and abs(log_g[end] - log_g[start]) <= width:
            end += 1
        groups.append(np.arange(start, end))
        start = end
    return groups


def shift_divergences(a: int, b: int, eps0: float, g_lo: np.ndarray, g_hi: np.ndarray, direction: int,
                      wanted: tuple[bool, bool] = (True, True)) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds (at each g' of g_hi) and upper bounds (at each g' of g_lo) on H_g'(Y || Y + 1)
    (direction +1) or H_g'(Y + 1 || Y) (direction -1) for Y = Bin(a, q) + Bin(b, p), g' >= 1.  The g'
    are evaluated in runs (``_tilt_groups``), each on the law tilted by e^(lam t), lam = -direction
    log g' at the run's middle g', which centres it where the terms stop."""
    lower, upper = np.zeros(len(g_lo)), np.zeros(len(g_lo))
    for group in _tilt_groups(a, b, eps0, np.log(g_lo), direction):
        lower[group], upper[group] = _shift_divergences_at(a, b, eps0, g_lo[group], g_hi[group], direction, wanted)
    return lower, upper


def _shift_divergences_at(a: int, b: int, eps0: float, g_lo: np.ndarray, g_hi: np.ndarray, direction: int,
                          wanted: tuple[bool, bool]) -> tuple[np.ndarray, np.ndarray]:
    """``shift_divergences`` on one tilt: lam = -direction log of the middle g' of g_lo."""
    lam = -direction * math.log(float(g_lo[len(g_lo) // 2]))
    law = _tilted_law(a, b, eps0, lam)
    if direction == 1:  # terms f(t) - g' f(t-1), t = start + k, weight e^-lam (t - t0)
        z_lo, z_hi, base, closed = law.z_lo, law.z_hi, -lam * (law.start - law.t0), law.top_is_end
    else:  # terms f(s) - g' f(s+1) read from the top (W = -Y - 1 has the law of z reversed)
        z_lo, z_hi = law.z_lo[::-1], law.z_hi[::-1]
        base, closed = -lam * (law.start + len(law.z_lo) - 1 - law.t0), law.bottom_is_end
    lo, hi = _rising_sums(z_lo, z_hi, abs(lam), base, law.out, g_lo, g_hi, closed, wanted)
    scale_lo = math.exp(law.log_anchor - law.anchor_err) * (1 - 2**-30)
    with np.errstate(divide="ignore"):  # the upper scaled in logs: a scale that underflows times a large or
        upper = np.exp(np.log(hi) + (law.log_anchor + law.anchor_err)) * (1 + 2**-30)  # infinite sum stays up
    return lo * scale_lo, np.where(hi > 0, np.maximum(upper, np.finfo(float).tiny), 0.0)  # underflow rounded up


def _prefactor(eps0: float, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p - g q) with its relative rounding pushed down / up, and g' = 1 + (g - 1)/(p - g q) in the
    directions that keep each bound safe (H_g' is non-increasing in g')."""
    q = 1.0 / (1.0 + math.exp(eps0))
    c = q * np.exp(eps) * np.expm1(eps0 - eps)
    c_lo, c_hi = c * (1 - 32 * U), c * (1 + 32 * U)
    g_lo = 1.0 + np.expm1(eps) / c_hi * (1 - 8 * U)
    g_hi = 1.0 + np.expm1(eps) / c_lo * (1 + 8 * U)
    return c_lo, c_hi, np.stack([g_lo, g_hi])


def interval_delta(n: int, eps0: float, eps: np.ndarray, m1: int, m2: int, directions: tuple[int, ...] = (1, -1),
                   want_upper: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on max over m in [m1, m2] (m2 <= (n-1)/2) and the ``directions`` of delta_m(eps) (1: target 0
    vs 1; -1: 1 vs 0).

    The lower bound is the exact value's at m1 when m1 == m2 (else 0); the upper bound holds for the
    whole interval (docs/soundness.md), inf unless ``want_upper``.  delta is 0 at eps >= eps0 (the
    likelihood ratio is at most e^eps0)."""
    eps = np.atleast_1d(np.asarray(eps, dtype=float))
    lower, upper = np.zeros(len(eps)), np.zeros(len(eps))
    inside = eps < eps0
    if not inside.any():
        return lower, upper
    c_lo, c_hi, (g_lo, g_hi) = _prefactor(eps0, eps[inside])
    a, b = n - 1 - m2, m1
    for direction in directions:
        lo, hi = shift_divergences(a, b, eps0, g_lo, g_hi, direction, (m1 == m2, want_upper))
        lower[inside] = np.maximum(lower[inside], c_lo * lo if m1 == m2 else 0.0)
        upper[inside] = np.maximum(upper[inside], c_hi * hi)
    return lower, upper


def delta_profile(n: int, eps0: float, eps: np.ndarray) -> np.ndarray:
    """Upper bounds on the exact delta (every m, both directions) at every eps of an array: the privacy
    profile, from ONE partition of [0, (n - 1) // 2] per direction evaluated at the whole array.

    Any partition gives upper bounds (the sandwich holds for every interval: docs/soundness.md, "Binary
    randomized response" 3 and 7); the partition chosen changes only how tight they are.  This one
    takes the first EXACT_MS m singly and then walks each direction as ``_walk`` does, but against the
    whole array: an interval is halved where its bound at some eps exceeds ``_exact_delta_lower`` (both
    directions; the walk steers by it, any value would be safe) at eps / (1 + PROFILE_TOL) (or
    (1 + PROFILE_TOL) times it at eps), so that the profile stays within about PROFILE_TOL in eps of the
    exact one; a single m is kept whatever its bound."""
    eps = np.atleast_1d(np.asarray(eps, dtype=float))
    top = (n - 1) // 2
    upper, here = np.zeros(len(eps)), np.zeros(len(eps))
    for m in range(min(EXACT_MS, top + 1)):
        lower, bound = interval_delta(n, eps0, eps, m, m)
        upper, here = np.maximum(upper, bound), np.maximum(here, lower)
    allowed = np.maximum(here * (1 + PROFILE_TOL), _exact_delta_lower(n, eps0, eps / (1 + PROFILE_TOL), (1, -1)))
    steer = here >= PROFILE_FLOOR
    roomy = (here[steer] + allowed[steer]) / 2  # half the margin left, as in ``_walk``
    for direction in (1, -1):
        upper = np.maximum(upper, _profile_walk(n, eps0, eps, direction, allowed[steer], roomy, steer))
    return upper


def _profile_walk(n: int, eps0: float, eps: np.ndarray, direction: int, allowed: np.ndarray, roomy: np.ndarray,
                  steer: np.ndarray) -> np.ndarray:
    """The largest bound, at every eps, over the intervals of one direction walked from m = EXACT_MS up to
    (n - 1) // 2: the width starts at n / FIRST_WIDTH, is halved after an interval whose bound exceeds
    ``allowed`` at some eps of ``steer`` (which is then retried, unless a single m) and doubles after one
    at most ``roomy`` at every such eps."""
    top, m, width = (n - 1) // 2, EXACT_MS, max(1, (n - 1) // FIRST_WIDTH)
    upper = np.zeros(len(eps))
    while m <= top:
        m2 = min(top, m + width - 1)
        bound = interval_delta(n, eps0, eps, m, m2, (direction,))[1]
        if m2 > m and np.any(bound[steer] > allowed):
            width = max(1, width // 2)
            continue
        upper = np.maximum(upper, bound)
        m = m2 + 1
        width = 2 * width if np.all(bound[steer] <= roomy) else width
    return upper


def certifies(n: int, eps0: float, eps: float, delta: float) -> tuple[bool, int, float]:
    """Whether eps is certified at delta for every m and both directions, the number of intervals
    evaluated (each direction walks [0, (n - 1) // 2] on its own partition: ``_walk``), and where a
    single m was above delta, the exact delta there proved from below (a lower bound on the exact
    delta at eps; else 0)."""
    total = 0
    for direction in (1, -1):
        ok, count, exact = _walk(n, eps0, eps, delta, direction)
        total += count
        if not ok:
            return False, total, exact
    return True, total, 0.0


def _walk(n: int, eps0: float, eps: float, delta: float, direction: int) -> tuple[bool, int, float]:
    """The intervals of one direction walked from m = 0 up to (n - 1) // 2: single m first, then a width
    of at least n / FIRST_WIDTH that doubles after an interval whose bound leaves more than half of the
    margin that m = 0 leaves below delta, and halves after one above delta (which is then retried); a
    single m above delta ends the walk uncertified, with its exact delta proved from below."""
    top, m, width, count, grow = (n - 1) // 2, 0, 1, 0, delta
    while m <= top:
        m2 = min(top, m + width - 1)
        lower, upper = interval_delta(n, eps0, np.array([eps]), m, m2, (direction,))
        count += 1
        if upper[0] > delta:
            if m2 == m:
                return False, count, float(lower[0])
            width = max(1, width // 2)
            continue
        grow = (upper[0] + delta) / 2 if m == 0 else grow
        m = m2 + 1
        width = 2 * width if upper[0] <= grow else width
        width = max(width, (n - 1) // FIRST_WIDTH) if m == EXACT_MS else width
    return True, count, 0.0


def _exact_delta_lower(n: int, eps0: float, eps: np.ndarray, directions: tuple[int, ...] = (1,)) -> np.ndarray:
    """A lower bound on the exact delta at each eps: the largest over m = 0 .. EXACT_MS - 1 and
    ``directions`` of the exact delta_m (default target 0 vs 1, the direction that dominates near m = 0),
    proved from below."""
    return np.max([interval_delta(n, eps0, eps, m, m, directions, want_upper=False)[0]
                   for m in range(min(EXACT_MS, (n - 1) // 2 + 1))],
                  axis=0)


def proves_above(n: int, eps0: float, eps: float, delta: float) -> bool:
    """Whether the exact eps is proved above eps: the exact delta at eps is proved above delta."""
    return bool(_exact_delta_lower(n, eps0, np.array([eps]))[0] > delta)


def delta_bounds(n: int, eps0: float, eps: float, blanket: float,
                 steps: tuple[float, ...] = (1.02, 1.1, 1.5)) -> tuple[float, float]:
    """(certified delta, lower bound) at eps: the lower bound is ``_exact_delta_lower``, raised to the
    exact delta of any single m that a certification finds above its target; the certified delta the
    first of ``steps`` times the lower bound that every m certifies, else ``blanket`` (already certified)."""
    lower = float(_exact_delta_lower(n, eps0, np.array([eps]))[0])
    for step in steps:
        for _ in range(RETRIES):
            if lower <= 0.0 or lower * step >= blanket:
                return blanket, lower
            ok, _, exact = certifies(n, eps0, eps, lower * step)
            if ok:
                return lower * step, lower
            if exact <= lower:
                break
            lower = exact  # a worse m than the first EXACT_MS: try the same step above it
    return blanket, lower


def exact_lower(n: int, eps0: float, delta: float, bracket: tuple[float, float]) -> float:
    """A lower bound on the exact eps: the largest eps of three nested geometric grids in ``bracket`` at
    which ``_exact_delta_lower`` is above delta (0 where none is)."""
    lo, hi = bracket
    for _ in range(3):
        grid = np.geomspace(lo, hi, 17)
        above = np.flatnonzero(_exact_delta_lower(n, eps0, grid) > delta)
        if len(above) == 0:
            return 0.0 if lo == bracket[0] else lo
        j = int(above[-1])
        lo, hi = float(grid[j]), float(grid[min(j + 1, len(grid) - 1)])
        if hi <= lo:
            break
    return lo


def eps_bounds(n: int, eps0: float, delta: float, bracket: tuple[float, float],
               steps: tuple[float, ...] = (0.005, 0.01, 0.03, 0.1)) -> BinaryBounds:
    """Certified eps of shuffled binary RR within the first of ``steps`` (relative, above the exact
    lower bound) that certifies, else the bracket's upper end (an already certified eps).  Where a
    certification finds a single m whose exact delta at the trial eps is above delta, the exact eps is
    proved above the trial: the lower bound rises to it and the same step is tried again."""
    low_bracket, high_bracket = bracket
    if high_bracket <= 0.0:
        return BinaryBounds(high_bracket, low_bracket, 0)
    lower = exact_lower(n, eps0, delta, (max(low_bracket * 0.999, high_bracket * 1e-4), high_bracket))
    total = 0
    for step in steps:
        for _ in range(RETRIES):
            trial = lower * (1 + step)
            if trial >= high_bracket:
                return BinaryBounds(high_bracket, max(lower, low_bracket), total)
            ok, count, exact = certifies(n, eps0, trial, delta)
            total += count
            if ok:
                return BinaryBounds(trial, max(lower, low_bracket), total)
            if exact <= delta:
                break
            lower = trial  # some m's exact delta at trial is above delta: its exact eps is above trial
    return BinaryBounds(high_bracket, max(lower, low_bracket), total)


def eps0_max(n: int, eps: float, delta: float, low: float, top: float, rtol: float = 1e-3) -> float:
    """The largest eps0 found in [low, top] at which eps is certified at delta for every m (``certifies``),
    ``low`` being certified already (by the blanket bound): doubling while certified, then bisection in
    log eps0 to a relative width ``rtol``; the certified end is returned."""
    high = min(top, 2.0 * low)
    while high > low and certifies(n, high, eps, delta)[0]:
        if high >= top:
            return top
        low, high = high, min(top, 2.0 * high)
    while high / low > 1 + rtol:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if certifies(n, middle, eps, delta)[0] else (low, middle)
    return low
