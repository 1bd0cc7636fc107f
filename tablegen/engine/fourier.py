"""Bounds on E[S_+] for S = G_1 + ... + G_n from the rounded lattice law, via one FFT pair.

Method (docs/engine.md; all quantities in lattice units):

1. G' = randomized rounding of G (``lattice.py``): E[S'_+] >= E[S_+], no mean shift.
2. Tilt by the saddlepoint lambda: E[S'_+] = M(lambda)^n E_lambda[S'_+ e^(-lambda S')].
3. The tilted law of S' on the window [L, U] (periodised): p~ = irfft(psi^n * phase), with
   psi the rfft of the tilted single-user law.  Mass outside the window folds into it, so
   p~ >= p there: the sum over the window over-estimates (safe for the upper bound) by at most
   sup(g) P_lambda(outside), which the lower bound subtracts (Chernoff, ``tails.py``).
4. The part above U is bounded by Chernoff and added (upper bound).
5. Floating point: the error of p~ is bounded in l2 (standard-model FFT bound with a safety
   factor 8, and n |d psi| |psi|^(n-1) for the power) and enters through Cauchy-Schwarz,
   ||g||_2 ||d p||_2; it is added to the upper bound and subtracted from the lower one.
6. Lower bound only: E[S'_+] - E[S_+] = E[B] with B = (S+N)_+ - S_+ - N 1{S>0} >= 0 and
   E[B | G] <= psi1(|S|), psi1(u) = int_u^inf exp(-2 t^2 / n) dt (Hoeffding for the rounding
   noise N given G).  For any r, psi1(|S|) <= psi1((|S'| - r)_+) + psi1(0) 1{|N| > r}, so
   E[B] <= E[psi1((|S'| - r)_+)] + 2 psi1(0) exp(-2 r^2 / n); the best r of a grid is used.

The error budget of a call: (window tail + folded mass + floating point) / main term, kept
below about 1e-6 of the result; the rounding variance (upper) and the correction in 6 (lower)
are the discretisation error, controlled by the resolution (cells per standard deviation).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.fft import irfft, next_fast_len, rfft
from scipy.special import bdtrc, erfcx

from lookup.format import UNIT_ROUNDOFF
from tablegen.engine import tails
from tablegen.engine.lattice import LatticeLaw, saddlepoint
from tablegen.limits import CellBudget

FP_SAFETY = 8.0
FOLD_TOLERANCE = 1e-10  # target for the relative size of truncated and folded mass


def log_expected_positive_part(
    law: LatticeLaw, n: int, pessimistic: bool, shift: float = 0.0, off_lattice: float = 1.0,
    budget: CellBudget | None = None,
) -> float:
    """log of a bound on E[(S + shift)_+] (lattice units), S the unrounded sum behind ``law``.

    ``pessimistic=True`` gives an upper bound (valid for the rounded and the unrounded sum);
    ``False`` a lower bound for the unrounded sum, whose users carry rounding noise only with
    probability ``off_lattice`` each.  Returns -inf for a zero bound.  With a ``budget`` the
    window is admitted by ``budget.spend`` before anything of its size is allocated (which raises
    ``limits.WindowTooLarge`` for a window over the budget's limits).
    """
    if n * law.last + shift <= 0:
        return -math.inf
    lam = saddlepoint(law, -shift / n)
    tilted = law.tilted(lam)
    log_scale = n * float(law.log_mgf(lam)[0]) + lam * shift  # E = e^log_scale E_lam[g(S)]
    window = _window(tilted, n, lam)
    if budget is not None:
        budget.spend(window.size)
    p = _periodised_law(tilted, n, window)
    y = window.low + np.arange(p.size, dtype=float) + shift
    g = _weight(y, lam)
    main = float(g @ p)
    fp = float(np.linalg.norm(g) * window.fp_l2)
    if pessimistic:
        value = main + fp + _above_window(tilted, n, lam, window.high, shift)
    else:
        folded = _sup_weight(lam) * (
            tails.upper_tail(tilted, n, window.high + 1) + tails.lower_tail(tilted, n, window.low - 1)
        )
        correction = _rounding_correction(y, p, lam, n, off_lattice, log_scale, window)
        value = main - fp - folded - correction
    if value <= 0:
        return -math.inf
    return log_scale + math.log(value)


class _Window:
    """Integer window [low, high] of length ``size`` (an FFT-friendly length)."""

    def __init__(self, low: int, high: int) -> None:
        span = high - low + 1
        # beyond 2^40 cells no FFT is ever run (a live query's CellBudget refuses it first), and
        # next_fast_len itself refuses lengths near 2^63
        self.size = next_fast_len(span, real=True) if span <= 2**40 else span
        self.low = low
        self.high = low + self.size - 1
        self.fp_l2 = 0.0


def _window(tilted: LatticeLaw, n: int, lam: float) -> _Window:
    """Smallest window (from a geometric ladder) whose outside mass is below tolerance."""
    sd = math.sqrt(n * max(tilted.variance(), 1e-300))
    lo_support, hi_support = n * tilted.first, n * tilted.last
    centre = n * tilted.mean()
    target = FOLD_TOLERANCE * min(1.0, _main_estimate(lam, sd) / _sup_weight(lam))
    width = 8.0
    while True:
        high = min(hi_support, int(math.ceil(centre + width * sd)))
        low = max(lo_support, int(math.floor(centre - width * sd)))
        ok_high = high >= hi_support or tails.upper_tail(tilted, n, high + 1) <= target
        ok_low = low <= lo_support or tails.lower_tail(tilted, n, low - 1) <= target
        if ok_high and ok_low:
            return _Window(low, high)
        width *= 1.3


def _main_estimate(lam: float, sd: float) -> float:
    """Rough size of E_lambda[S_+ e^(-lambda S)] (Bahadur-Rao), used only to size the window."""
    if lam <= 0:
        return sd / math.sqrt(2 * math.pi)
    return 1.0 / (lam * lam * sd * math.sqrt(2 * math.pi)) if lam * sd > 1 else sd / math.sqrt(2 * math.pi)


def _sup_weight(lam: float) -> float:
    """sup over s > 0 of s e^(-lambda s) (= 1/(e lambda)); infinite for lambda = 0."""
    return math.inf if lam <= 0 else 1.0 / (math.e * lam)


def _weight(y: np.ndarray, lam: float) -> np.ndarray:
    """g(y) = y_+ e^(-lambda y), y = s + shift."""
    out = np.zeros_like(y)
    pos = y > 0
    out[pos] = y[pos] * np.exp(-lam * y[pos])
    return out


def _above_window(tilted: LatticeLaw, n: int, lam: float, high: int, shift: float) -> float:
    """Bound on E_lambda[g(S + shift) 1{S > high}]."""
    tail = tails.upper_tail(tilted, n, high + 1)
    if lam <= 0:
        return tails.upper_tail_mean(tilted, n, high + 1) + max(shift, 0.0) * tail
    edge = high + shift
    sup = edge * math.exp(-lam * edge) if edge >= 1.0 / lam else _sup_weight(lam)
    return sup * tail


def _periodised_law(tilted: LatticeLaw, n: int, window: _Window) -> np.ndarray:
    """P_lambda(S = low + j mod size), j = 0..size-1, by one rfft/irfft pair.

    Sets ``window.fp_l2`` to a bound on the l2 norm of the floating-point error.
    """
    size = window.size
    centre = int(round(tilted.mean()))
    points, probs = tilted.support  # the folded law, from the cells that carry mass
    h = np.bincount((points - tilted.first).astype(np.int64) % size, probs, minlength=size)
    psi = rfft(h)  # sum_k h_k exp(-i theta (k - first))
    log_abs_all = np.log(np.maximum(np.abs(psi), 1e-300))
    # only frequencies with |psi|^n above underflow carry anything: work on those alone
    live = np.flatnonzero(n * log_abs_all > -800.0)
    freq = live.astype(np.int64)
    log_abs = log_abs_all[live]
    # centre the phase: psi_c = sum_k h_k exp(-i theta (k - centre)), exact integer reduction
    shift = (freq * ((centre - tilted.first) % size)) % size
    arg = np.angle(psi[live] * np.exp(2j * np.pi * shift / size))
    offset = (freq * ((n * centre - window.low) % size)) % size
    magnitude = np.exp(n * log_abs)
    spectrum = np.zeros(psi.size, dtype=complex)
    spectrum[live] = magnitude * np.exp(1j * (n * arg - 2 * np.pi * offset / size))
    p = irfft(spectrum, n=size)
    # error model: |d psi| <= 5 u log2(size) (||h||_1 = 1); power: n |d psi| |psi|^(n-1);
    # a dropped frequency has (n-1) log|psi| <= -400, so n |d psi| e^-400 bounds its error
    log2n = math.log2(max(size, 2))
    d_psi = 5 * UNIT_ROUNDOFF * log2n
    d_spec = n * d_psi * np.exp((n - 1) * log_abs) + 4 * UNIT_ROUNDOFF * magnitude * (
        1 + n * np.abs(arg) + 2 * np.pi * offset / size + n * np.abs(log_abs)
    )
    dropped = (psi.size - live.size) * (n * d_psi * math.exp(-400.0)) ** 2
    spec_l2 = math.sqrt(2.0 * (float(d_spec @ d_spec) + dropped))
    window.fp_l2 = FP_SAFETY * (
        spec_l2 / math.sqrt(size) + 5 * UNIT_ROUNDOFF * log2n * float(np.linalg.norm(p)) + 1e-300
    )
    return p


def _rounding_correction(
    y: np.ndarray, p: np.ndarray, lam: float, n: int, off_lattice: float, log_scale: float, window: _Window
) -> float:
    """Upper bound on (E[Y'_+] - E[Y_+]) / e^log_scale, the price of rounding (Y = S + shift).

    Given G, the rounding noise N is a sum of M zero-mean terms of range one, M the number of
    users whose atom is off the lattice, M ~ Bin(n, q).  On {M <= m} Hoeffding gives
    E[B | G] <= psi1(|Y|), psi1(u) = int_u^inf e^(-2 t^2 / m) dt (0 when m = 0); on {M > m},
    B <= |N| <= M and E[M 1{M > m}] = n q P(Bin(n-1, q) >= m).  Minimised over a few m and r:
    every candidate is bounded on blocks of the window first (``_Blocks.inside``, itself an
    upper bound), and only the best of them is summed cell by cell.
    """
    if off_lattice <= 0:
        return 0.0
    q = off_lattice
    p_pos = np.maximum(p, 0.0)
    blocks = _Blocks(y, p_pos, window.fp_l2)
    best, chosen = math.inf, None
    for m in _noise_counts(n, q):
        rare = n * q * _at_least(m, n - 1, q) * (1 + 1e-9) if m < n else 0.0
        rare_scaled = math.exp(min(math.log(rare + 1e-300) - log_scale, 700.0))
        if m == 0:
            best = min(best, rare_scaled)
            continue
        psi0 = math.sqrt(math.pi * m / 8.0)
        for r in math.sqrt(m) * np.array([0.0, 0.5, 1.0, 2.0, 3.0, 5.0]):
            edge = psi0 * math.erfc(max(min(-y[0], y[-1]) - r, 0.0) * math.sqrt(2.0 / m))
            noise = 2.0 * psi0 * math.exp(-2.0 * r * r / m)
            rest = math.exp(min(math.log(edge + noise + 1e-300) - log_scale, 700.0)) + rare_scaled
            total = blocks.inside(m, r, lam) + rest
            if total < best:
                best, chosen = total, (m, r, rest)
    if chosen is not None:
        m, r, rest = chosen
        best = min(best, _inside_cells(y, p_pos, m, r, lam, window.fp_l2) + rest)
    return best


def _noise_weight(abs_y: np.ndarray, y: np.ndarray, m: int, r: float, lam: float) -> np.ndarray:
    """psi1((|y| - r)_+) e^(-lambda y), psi1(u) = sqrt(pi m / 8) erfc(u sqrt(2 / m)).

    erfc = erfcx e^(-x^2) keeps the two exponents together; where e^(-lambda y) overflows the
    result is inf (or NaN from inf * 0), which the callers count as an infinite candidate.
    """
    x = np.maximum(abs_y - r, 0.0) * math.sqrt(2.0 / m)
    with np.errstate(over="ignore", invalid="ignore"):
        return math.sqrt(math.pi * m / 8.0) * erfcx(x) * np.exp(-x * x - lam * y)


def _inside_cells(y: np.ndarray, p_pos: np.ndarray, m: int, r: float, lam: float, fp_l2: float) -> float:
    """sum_y psi1((|y| - r)_+) e^(-lambda y) p~(y)_+ plus its floating-point allowance."""
    weight = _noise_weight(np.abs(y), y, m, r, lam)
    with np.errstate(over="ignore", invalid="ignore"):
        inside = float(weight @ p_pos) + float(np.linalg.norm(weight)) * fp_l2
    return math.inf if math.isnan(inside) else inside


class _Blocks:
    """The window cut into blocks, for upper bounds on ``_inside_cells`` at a fraction of its cost.

    On a block both factors of the weight are bounded by their largest value there (erfc at the
    smallest |y|, e^(-lambda y) at the end lambda favours), so sum_block w p_+ <= w_max P_block
    and the l2 norm of w is at most sqrt(sum_block size w_max^2).
    """

    CELLS = 4096  # blocks per window (windows shorter than this are not cut)

    def __init__(self, y: np.ndarray, p_pos: np.ndarray, fp_l2: float) -> None:
        starts = np.arange(0, y.size, max(1, -(-y.size // self.CELLS)))
        ends = np.append(starts[1:], y.size) - 1
        self.low, self.high = y[starts], y[ends]
        self.size = (ends - starts + 1).astype(float)
        self.mass = np.add.reduceat(p_pos, starts)
        self.nearest = np.where(
            (self.low <= 0) & (self.high >= 0), 0.0, np.minimum(np.abs(self.low), np.abs(self.high))
        )
        self.fp_l2 = fp_l2

    def inside(self, m: int, r: float, lam: float) -> float:
        """Upper bound on ``_inside_cells(y, p_pos, m, r, lam, fp_l2)``."""
        weight = _noise_weight(self.nearest, self.low if lam >= 0 else self.high, m, r, lam)
        with np.errstate(over="ignore", invalid="ignore"):
            inside = float(weight @ self.mass) + math.sqrt(float((weight * weight) @ self.size)) * self.fp_l2
        return math.inf if math.isnan(inside) else inside


def _at_least(m: int, trials: int, q: float) -> float:
    """P(Bin(trials, q) >= m)."""
    return 1.0 if m <= 0 else float(bdtrc(m - 1, trials, q))


def _noise_counts(n: int, q: float) -> list[int]:
    """Candidate cut-offs m for the number of users with rounding noise."""
    mean, sd = n * q, math.sqrt(n * q * (1 - q))
    cands = {0, min(n, math.ceil(mean + 3 * sd + 3)), min(n, math.ceil(mean + 20 * sd + 40))}
    return sorted(cands)
