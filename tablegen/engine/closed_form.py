"""Closed-form bounds on delta = (1/n) E[(G_1 + ... + G_n)_+]: no lattice, no FFT, any n and eps0.

Upper bounds: Chernoff (``y_+ <= e^(mu y) / (e mu)``) and Berry-Esseen (``far_n_delta`` takes the
smaller), which join the engine's from ``limits.CLOSED_FORM_N`` users on and replace it above
``limits.N_MAX``; a lower bound from the configurations with at most one user off the heaviest
component, which joins every lower bound of the engine and proves answers of eps0 close above
``limits.EPS0_MAX``.  O(components) per evaluation, every float operation pushed the safe way.
The bounds and their measured tightness: docs/engine.md, "Supported domain".
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erfcx

from lookup.format import UNIT_ROUNDOFF as U
from tablegen.decomposition import Decomposition

TINY = 5e-324  # the smallest positive double
MU_GRID = 160  # mu values of the first pass (then golden sections around the best)
GOLDEN_STEPS = 40
MU_EXP_MAX = 700.0  # mu max(g) stays below this (expm1 overflows past 709)
SLACK = 1e-9  # relative slack of the final exp (the engine's FLOAT_SLACK)
BISECTIONS = 80  # of the lower bound's eps search
# Berry-Esseen: sup_x |P(S <= x) - Phi((x - n m) / (sigma sqrt n))| <= C rho / (sigma^3 sqrt n) with
# C = 0.56 for independent summands (Shevtsova 2010; 0.4748 for identically distributed ones: the
# larger is used)
BERRY_ESSEEN = 0.56
TAIL_WIDTHS = (4.0, 8.0, 16.0, 32.0, 64.0)  # X / (sigma sqrt n) tried in the Berry-Esseen bound


def _pushed_values(d: Decomposition, eps: float, up: bool) -> np.ndarray:
    """g_j = (u_j - v_j) - expm1(eps) v_j, moved by its rounding bound: up (``up``) or down.

    |fl(g) - g| <= U |u - v| + 3 U expm1(eps) |v| + U |fl(g)| (the difference, expm1 within one
    ulp, the product and the final difference), taken four times over.
    """
    grow = math.expm1(eps)
    diff = d.u - d.v
    g = diff - grow * d.v
    err = 4 * U * (np.abs(diff) + 3 * grow * np.abs(d.v) + np.abs(g)) + 1e-300
    return g + err if up else g - err


def chernoff_log_delta(d: Decomposition, eps: float, n: int) -> float:
    """log of the Chernoff upper bound min_mu M(mu)^n / (e mu n) (pushed up; see the module)."""
    g = _pushed_values(d, eps, up=True)
    c = d.c
    positive = g[c > 0]
    if positive.size == 0 or positive.max() <= 0:
        return -math.inf  # G <= 0 always: delta = 0
    top = float(positive.max())
    spread = math.sqrt(max(float(c @ (g * g)), 1e-300))
    # the optimum sits near z / (sd sqrt(n)) (z up to ~40) for spread sums, near log-odds / g
    # for few users: the grid spans both, capped where mu g would overflow expm1
    hi = MU_EXP_MAX / top
    lo = min(1e-4 / (spread * math.sqrt(n)), hi * 1e-12)
    grid = np.geomspace(lo, hi, MU_GRID)
    values = _log_bounds(g, c, grid, n)
    best = int(np.argmin(values))
    a, b = math.log(grid[max(best - 1, 0)]), math.log(grid[min(best + 1, grid.size - 1)])
    found = float(values[best])
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(GOLDEN_STEPS):  # in log mu: the bound is convex in mu, so unimodal in log mu
        x1, x2 = b - ratio * (b - a), a + ratio * (b - a)
        f1, f2 = _log_bounds(g, c, np.exp([x1, x2]), n)
        found = min(found, float(f1), float(f2))
        if f1 <= f2:
            b = x2
        else:
            a = x1
    return found


def _log_bounds(g: np.ndarray, c: np.ndarray, mu: np.ndarray, n: int, threshold: float = 0.0) -> np.ndarray:
    """Upper bounds on log(M(mu)^n e^(-mu X) / (e mu n)) for each mu (inf where none is
    computed), X = ``threshold`` >= 0: (1/n) E[(S - X)_+] <= that, as (y - X)_+ <= e^(mu (y - X)) / (e mu).

    T = sum_j c_j expm1(mu g_j): the product x = mu g_j carries U |x|, which expm1 turns into a
    relative error |x| e^x / |expm1(x)| U <= (max(x, 0) + 1) U; with expm1's own two ulps and
    the product by c_j each term is within (max(x, 0) + 5) U of itself, and the sum adds
    (J - 1) U sum |t_j|: |T~ - T| <= E = U sum_j |t~_j| (J + 5 + max(x_j, 0)) (1 + 1e-9).  Then
    log M <= log1p(T~ + 2E) (the second E covers the addition's rounding, E >= U |T~|) plus 4 U
    of itself for log1p; the rest (n times it, - mu X - 1 - log mu - log n) carries 8 U of its terms.
    """
    x = mu[:, None] * g[None, :]
    terms = c[None, :] * np.expm1(x)
    total = terms.sum(axis=1)
    err = U * np.sum(np.abs(terms) * (g.size + 5 + np.maximum(x, 0.0)), axis=1) * (1 + 1e-9)
    arg = total + 2 * err
    with np.errstate(invalid="ignore", divide="ignore"):
        log_m = np.log1p(arg)
    log_m = log_m + 4 * U * np.abs(log_m)
    scaled = n * log_m
    rest = 1.0 + np.log(mu) + math.log(n) + mu * threshold
    out = scaled - rest + 8 * U * (np.abs(scaled) + np.abs(rest) + 1.0)
    return np.where((arg > -1.0) & np.isfinite(out), out, np.inf)


def normal_log_delta(d: Decomposition, eps: float, n: int) -> float:
    """log of the Berry-Esseen upper bound on delta (see the module; inf where it does not apply:
    E[G] >= 0 or no spread).

    With G pushed up (``_pushed_values``), m, sigma and rho = E|G - m|^3 of its law, and any
    X >= 0: E[S_+] = int_0^X P(S > x) dx + E[(S - X)_+] <= s J(a) + X eps_BE + (Chernoff tail at X),
    s = sigma sqrt(n), a = -sqrt(n) m / sigma, J(t) = int_t^inf Phi_bar = phi(t) - t Phi_bar(t),
    eps_BE = BERRY_ESSEEN rho / (sigma^3 sqrt(n)).  Phi_bar((x - n m) / s) grows with m and with
    sigma (x - n m > 0), so m and sigma enter by upper bounds, eps_BE by rho's upper and sigma's
    lower bound: the computed m carries (J + 2) U sum p |g|, the second moment about the
    computed mean m~ is var + (m - m~)^2 (an upper bound; minus err_m^2 a lower one), rho <=
    E(|G - m~| + err_m)^3; each with its own rounding.  X runs over ``TAIL_WIDTHS`` times s.
    """
    g = _pushed_values(d, eps, up=True)
    values, probs = np.append(g, 0.0), np.append(d.c, d.rest)
    size = values.size
    mean = float(probs @ values)
    err_m = (size + 2) * U * float(probs @ np.abs(values))
    m_hi = mean + err_m
    if not m_hi < 0:
        return math.inf
    dev = np.abs(values - mean)
    second = float(probs @ (dev * dev))
    var_hi = second * (1 + (size + 6) * U)
    var_lo = second * (1 - (size + 6) * U) - err_m * err_m
    if not var_lo > 0:
        return math.inf
    third = float(probs @ (dev + err_m) ** 3) * (1 + (size + 8) * U)
    sd_hi, sd_lo = math.sqrt(var_hi) * (1 + 2 * U), math.sqrt(var_lo) * (1 - 2 * U)
    root = math.sqrt(n)
    gap = BERRY_ESSEEN * third / (sd_lo**3 * root) * (1 + 8 * U)
    scale = sd_hi * root * (1 + 2 * U)
    a = -root * m_hi / sd_hi * (1 - 4 * U)  # J is decreasing: a lower bound on a
    area = scale * _normal_tail_area(a)
    c = d.c
    top = float(np.max(g[c > 0], initial=-math.inf))
    if top <= 0:
        return -math.inf
    spread = math.sqrt(max(float(c @ (g * g)), 1e-300))
    grid = np.geomspace(min(1e-4 / (spread * root), MU_EXP_MAX / top * 1e-12), MU_EXP_MAX / top, MU_GRID)
    best = math.inf
    for width in TAIL_WIDTHS:
        x = width * scale
        tail = float(np.min(_log_bounds(g, c, grid, n, x)))
        value = (area + x * gap) / n + (math.exp(tail) if tail < 709.0 else math.inf)
        best = min(best, math.log(value) + 8 * U * (abs(math.log(value)) + 1) if value > 0 else math.inf)
    return best


def _normal_tail_area(a: float) -> float:
    """Upper bound on J(a) = int_a^inf Phi_bar(t) dt = phi(a) - a Phi_bar(a), a > 0: by erfcx,
    e^(-a^2/2) (1/sqrt(2 pi) - (a/2) erfcx(a/sqrt 2)), whose cancellation costs ~ a^2 U relative
    (slack 1e-9 + 8 a^2 U) for a < 30; beyond, J(a) <= phi(a) / (1 + a^2) (from Phi_bar(t) >=
    phi(t) t / (1 + t^2))."""
    if a >= 30.0:
        return math.exp(-a * a / 2) / math.sqrt(2 * math.pi) / (1 + a * a) * (1 + SLACK)
    inner = 1 / math.sqrt(2 * math.pi) - 0.5 * a * float(erfcx(a / math.sqrt(2)))
    return max(inner, 0.0) * math.exp(-a * a / 2) * (1 + SLACK + 8 * a * a * U) + 1e-300


def far_n_delta(decompositions: list[Decomposition], eps: np.ndarray, n: int) -> np.ndarray:
    """Certified upper bound on delta at each eps for n users with no lattice: for each
    decomposition the smaller of the Chernoff and the Berry-Esseen bound, the largest over the
    decompositions (exp with relative slack ``SLACK``; inf where it overflows)."""
    eps = np.atleast_1d(np.asarray(eps, dtype=float))
    out = np.empty(eps.size)
    for i, e in enumerate(eps):
        log = max(min(chernoff_log_delta(d, float(e), n), normal_log_delta(d, float(e), n)) for d in decompositions)
        if log == -math.inf:  # G <= 0 always: delta is exactly 0
            out[i] = 0.0
        else:  # never 0 for a positive expectation: an underflow is replaced by the smallest float
            out[i] = max(math.exp(log) * (1 + SLACK), TINY) if log < 709.0 else math.inf
    return out


def few_users_delta(d: Decomposition, eps: float, n: int) -> float:
    """Lower bound on delta at eps from the configurations with at most one user off the
    heaviest component of the lower-bound pair ``d`` (see the module), pushed down."""
    g = _pushed_values(d, eps, up=False)
    probs = np.append(d.c, d.rest)
    g = np.append(g, 0.0)
    h = int(np.argmax(probs))
    others = np.arange(probs.size) != h
    off = float(probs[others].sum()) * (1 + probs.size * U)  # 1 - c_h, pushed up (a smaller c_h)
    if off >= 1.0:
        return 0.0
    log_stay = math.log1p(-off) * (1 + 4 * U)  # log c_h, pushed down (it is negative)
    gh = float(g[h])
    # one user at j, n - 1 at h; the sums pushed down by their rounding
    one = g[others] + (n - 1) * gh
    one = one - 4 * U * (np.abs(g[others]) + (n - 1) * abs(gh))
    first = float(probs[others] @ np.maximum(one, 0.0)) * (1 - probs.size * 4 * U)
    value = math.exp((n - 1) * log_stay) * first * (1 - SLACK)
    if gh > 0:  # all n at h: (1/n) c_h^n (n g_h)_+ = c_h^n g_h
        value += math.exp(n * log_stay) * gh * (1 - SLACK)
    return max(value * (1 - SLACK), 0.0)


def few_users_eps_lower(decompositions: list[Decomposition], eps0: float, n: int, delta: float) -> float:
    """Largest eps found in [0, eps0] whose few-users lower bound on delta (the largest over the
    lower-bound pairs) exceeds ``delta``: the exact eps(delta) is above it (0 where none is)."""
    def proves(eps: float) -> bool:
        return max(few_users_delta(d, eps, n) for d in decompositions) > delta

    if not decompositions or not proves(0.0):
        return 0.0
    a, b = 0.0, eps0
    for _ in range(BISECTIONS):
        mid = 0.5 * (a + b)
        if proves(mid):
            a = mid
        else:
            b = mid
        if b - a <= 1e-12 * eps0:
            break
    return a
