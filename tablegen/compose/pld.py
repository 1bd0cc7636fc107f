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
(as in docs/engine.md step 4: ``FFT_ERROR * u * log2 N`` relative l2 error per transform) is
carried as ``Composite.error`` (l2 error of the pmf) and enters delta through Cauchy-Schwarz,
``sqrt(N) * error``, times ``SAFETY``.  Computing the connect-the-dots masses from the deltas
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

from tablegen.compose.profile import Vertices, masses

UNIT_ROUNDOFF = 2.0**-53
FFT_ERROR = 5.0  # relative l2 error of one FFT is <= FFT_ERROR * u * log2 N (standard model)
SAFETY = 8.0  # factor on the a-priori floating-point bound
CURVE_ROUNDING = 16 * UNIT_ROUNDOFF  # per round, absolute, on the connect-the-dots curve
TRUNCATION = 1e-15  # tail mass dp-accounting may truncate per composition (added to the infinity mass)
EXTRA = 'pip install "shuffle-eps[compose]"'


def pld_module() -> Any:
    """``dp_accounting.pld.pld_pmf``, or an ImportError naming the extra that installs it."""
    try:
        from dp_accounting.pld import pld_pmf
    except ImportError:
        raise ImportError(f"composition needs the dp-accounting package: {EXTRA}") from None
    return pld_pmf


@dataclass(frozen=True)
class Composite:
    """A (composed) PLD pmf, upper bounds on the l2 norm of its probabilities and of its FFT
    rounding error, and the additive delta bound of its rounds' curve rounding."""

    pmf: Any
    norm: float
    error: float
    shift: float


def connect_dots(v: Vertices) -> Composite:
    """The pessimistic connect-the-dots PLD through the hull vertices (exactly representable:
    every vertex loss is an integer multiple of the discretization)."""
    pmf = pld_module().create_pmf_pessimistic_connect_dots(v.discretization, v.index, v.delta)
    return Composite(pmf, float(np.linalg.norm(masses(v))), 0.0, CURVE_ROUNDING)


def _fft_length(*sizes: int) -> int:
    from scipy import fft

    return int(fft.next_fast_len(max(sizes)))


def self_composed(c: Composite, times: int) -> Composite:
    """``times`` identical rounds: FFT power (l2 error <= u (T (FFT_ERROR log2 N |p| + 1) +
    FFT_ERROR log2 N |p^T|) + T * input error)."""
    if times == 1:
        return c
    out = c.pmf.self_compose(times, tail_mass_truncation=TRUNCATION)
    log_n = math.log2(_fft_length(out.size, c.pmf.size))
    rounding = UNIT_ROUNDOFF * (times * (FFT_ERROR * log_n * c.norm + 1) + FFT_ERROR * log_n * c.norm)
    return Composite(out, c.norm, rounding + times * c.error, times * c.shift)


def composed(a: Composite, b: Composite) -> Composite:
    """Two different rounds (or groups): FFT convolution; errors add (a convolution with a
    probability vector does not grow an l2 error), plus this product's rounding."""
    out = pld_module().compose_pmfs(a.pmf, b.pmf, tail_mass_truncation=TRUNCATION)
    log_n = math.log2(_fft_length(out.size, a.pmf.size + b.pmf.size))
    rounding = UNIT_ROUNDOFF * (FFT_ERROR * log_n * (a.norm + b.norm + min(a.norm, b.norm)) + 1)
    return Composite(out, min(a.norm, b.norm), a.error + b.error + rounding, a.shift + b.shift)


def delta_slack(c: Composite) -> float:
    """Upper bound on the floating-point error of a delta read from ``c``: Cauchy-Schwarz over
    the pmf's entries (weights in [0, 1]) plus the rounding of the summation."""
    size = max(c.pmf.size, 1)
    return SAFETY * (math.sqrt(size) * c.error + 2 * size * UNIT_ROUNDOFF) + c.shift


def eps_for_delta(c: Composite, delta: float) -> float:
    """Smallest eps whose composed delta (plus its floating-point bound) is <= delta; inf if none."""
    target = delta - delta_slack(c)
    if target <= 0:
        return math.inf
    return float(c.pmf.get_epsilon_for_delta(target))


def delta_for_eps(c: Composite, eps: float) -> float:
    """Composed delta at eps, plus its floating-point bound (capped at 1)."""
    return min(1.0, float(c.pmf.get_delta_for_epsilon(eps)) + delta_slack(c))
