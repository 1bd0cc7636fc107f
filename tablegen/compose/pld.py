"""Privacy-loss distributions of shuffled rounds and their composition, with Google's dp-accounting.

A round's PLD is the pessimistic connect-the-dots PLD (Doroshenko, Ghazi, Kamath, Kumar,
Manurangsi 2022, Algorithm 1; ``dp_accounting.pld.pld_pmf.create_pmf_pessimistic_connect_dots``)
of the hull vertices of ``profile.envelope``: its hockey-stick curve is the piecewise-linear
function of x = e^eps through (0, 1) and the vertices, flat after the last one (infinity mass =
the last delta).  That curve lies above the exact profile at every real eps (profile.py), so the
connect-the-dots pair dominates every neighbouring pair of the round in both orders, and the
composition of dominating pairs dominates the composition of the rounds: the composed delta at
every eps, and so the composed eps at every delta, is an upper bound.  ``PLDPmf.self_compose``
and ``compose`` (FFT convolution) move truncated tail mass pessimistically (into the infinity
mass); ``get_epsilon_for_delta`` is exact for the discrete PLD.

Floating point: the FFT convolutions are not exact.  An a-priori bound in the standard model
(as in docs/engine.md step 4: ``FFT_ERROR * u * log2 N`` error per FFT output entry, relative to
the l1 norm of the input, here a probability vector) is carried as ``Composite.error``, a bound
on the l1 norm of the pmf's error, which bounds the error of any delta (a sum of the entries
weighted in [0, 1]); it is multiplied by ``SAFETY``.  Computing the connect-the-dots masses from the deltas
rounds each delta by a few ulps: a round's curve is then above the intended one less at most
``CURVE_ROUNDING`` (absolute), and T such rounds move the composed delta by at most T times that
(hybrid argument: (0, eta)-approximate dominance composes additively); it is carried as
``Composite.shift``.  eps is read at delta minus both bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lookup.format import UNIT_ROUNDOFF
from tablegen.compose.profile import Vertices, masses

FFT_ERROR = 5.0  # relative l2 error of one FFT is <= FFT_ERROR * u * log2 N (standard model)
SAFETY = 8.0  # factor on the a-priori floating-point bound
CURVE_ROUNDING = 16 * UNIT_ROUNDOFF  # per round, absolute, on the connect-the-dots curve
TRUNCATION = 1e-15  # tail mass dp-accounting may truncate per composition (added to the infinity mass)
EXTRA = "pip install 'shuffle-eps[compose]'"


def pld_module() -> Any:
    """``dp_accounting.pld.pld_pmf``, or an ImportError naming the extra that installs it."""
    try:
        from dp_accounting.pld import pld_pmf
    except ImportError:
        raise ImportError(f"composition needs the dp-accounting package: {EXTRA}") from None
    return pld_pmf


@dataclass(frozen=True)
class Composite:
    """A (composed) PLD pmf with what its floating-point bound needs: a single round's dense
    probabilities (None once composed), an upper bound on the l2 norm of its probabilities, its
    dense length, a bound on the l1 norm of its FFT rounding error, and the additive delta bound
    of its rounds' curve rounding."""

    pmf: Any
    dense: np.ndarray | None
    norm: float
    span: int
    error: float
    shift: float


def connect_dots(v: Vertices) -> Composite:
    """The pessimistic connect-the-dots PLD through the hull vertices (exactly representable:
    every vertex loss is an integer multiple of the discretization)."""
    pmf = pld_module().create_pmf_pessimistic_connect_dots(v.discretization, v.index, v.delta)
    dense = np.zeros(int(v.index[-1] - v.index[0]) + 1)
    dense[v.index - v.index[0]] = masses(v)
    return Composite(pmf, dense, float(np.linalg.norm(dense)), dense.size, 0.0, CURVE_ROUNDING)


def _fft_length(size: int) -> int:
    from scipy import fft

    return int(fft.next_fast_len(size))


def self_composed(c: Composite, times: int) -> Composite:
    """``times`` identical rounds, by dp-accounting's FFT power ifft(fft(p, N)^T).

    Error (l1 of the output <= l2 of the spectrum's error, Parseval and Cauchy-Schwarz): each
    computed y_k = fft(p)_k is off by <= FFT_ERROR u log2 N |p|_1 (componentwise, |p|_1 <= 1),
    which y_k^T amplifies by T |y_k|^(T-1); the power and the inverse FFT add T u |y_k|^T and
    FFT_ERROR u log2 N |y_k|^T.  With S_m = sqrt(sum_k |y_k|^(2m)) (computed here from the
    round's masses) the bound is u (FFT_ERROR log2 N (T S_(T-1) + S_T) + T S_T).
    """
    if times == 1:
        return c
    if c.dense is None:
        raise ValueError("self-composition needs a single round's PLD")
    out = c.pmf.self_compose(times, tail_mass_truncation=TRUNCATION)
    n_fft = _fft_length(max(out.size, c.span))
    y = np.abs(np.fft.fft(c.dense, n_fft))
    before, last = (math.sqrt(float(np.sum(y ** (2 * m)))) for m in (times - 1, times))
    error = UNIT_ROUNDOFF * (FFT_ERROR * math.log2(n_fft) * (times * before + last) + times * last)
    return Composite(out, None, c.norm, out.size, error, times * c.shift)


def composed(a: Composite, b: Composite) -> Composite:
    """Two different rounds (or groups) by FFT convolution.  Errors already in a and b add (a
    convolution with a probability vector does not grow an l1 error); this product adds, with
    componentwise spectral errors <= FFT_ERROR u log2 N, an l2 spectral error <=
    FFT_ERROR u log2 N sqrt(N) (|a|_2 + |b|_2 + |a*b|_2) + u sqrt(N) |a*b|_2."""
    out = pld_module().compose_pmfs(a.pmf, b.pmf, tail_mass_truncation=TRUNCATION)
    n_fft = _fft_length(max(out.size, a.span + b.span - 1))
    norm = min(a.norm, b.norm)
    spectral = FFT_ERROR * math.log2(n_fft) * (a.norm + b.norm + norm) + norm
    error = a.error + b.error + UNIT_ROUNDOFF * math.sqrt(n_fft) * spectral
    return Composite(out, None, norm, out.size, error, a.shift + b.shift)


def delta_slack(c: Composite) -> float:
    """Upper bound on the floating-point error of a delta read from ``c``: the l1 error bound
    (delta weighs each entry by a number in [0, 1]) times SAFETY, the rounding of the summation,
    and the curve-rounding shift."""
    return SAFETY * (c.error + 2 * max(c.pmf.size, 1) * UNIT_ROUNDOFF) + c.shift


def eps_for_delta(c: Composite, delta: float) -> float:
    """Smallest eps whose composed delta (plus its floating-point bound) is <= delta; inf if none."""
    target = delta - delta_slack(c)
    if target <= 0:
        return math.inf
    return float(c.pmf.get_epsilon_for_delta(target))


def delta_for_eps(c: Composite, eps: float) -> float:
    """Composed delta at eps, plus its floating-point bound (capped at 1)."""
    return min(1.0, float(c.pmf.get_delta_for_epsilon(eps)) + delta_slack(c))
