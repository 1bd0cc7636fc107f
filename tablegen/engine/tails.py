"""Chernoff bounds for sums of n i.i.d. lattice variables: window truncation is accounted for.

For S = K_1 + ... + K_n with K_i i.i.d. of law ``law`` and every mu > 0,

    P(S >= U) <= exp(n log M(mu) - mu U),      P(S <= L) <= exp(n log M(-mu) + mu L),
    E[S 1{S > U}] <= exp(n log M(mu) - mu U) (U + 1/mu)       (U >= 0),

(the last from E[S 1{S>U}] = U P(S>U) + int_U^inf P(S>t) dt).  Every mu gives a valid bound,
so minimising over a fixed grid of mu is safe: no optimiser can make the bound too small.
"""

from __future__ import annotations

import numpy as np

from tablegen.engine.lattice import LatticeLaw

# mu grid in units of 1/sd(K): wide enough for n from 1 to 10^9 and any skew
_MU_GRID = np.geomspace(1e-7, 1e2, 240)


def _mu_grid(law: LatticeLaw) -> np.ndarray:
    return _MU_GRID / max(np.sqrt(law.variance()), 1e-12)


def upper_tail(law: LatticeLaw, n: int, threshold: float) -> float:
    """Chernoff bound on P(K_1 + ... + K_n >= threshold)."""
    if threshold > n * law.last:
        return 0.0
    mu = _mu_grid(law)
    return _capped_exp(np.min(n * law.log_mgf(mu) - mu * threshold))


def lower_tail(law: LatticeLaw, n: int, threshold: float) -> float:
    """Chernoff bound on P(K_1 + ... + K_n <= threshold)."""
    if threshold < n * law.first:
        return 0.0
    mu = _mu_grid(law)
    return _capped_exp(np.min(n * law.log_mgf(-mu) + mu * threshold))


def upper_tail_mean(law: LatticeLaw, n: int, threshold: float) -> float:
    """Chernoff bound on E[S 1{S > threshold}] for threshold >= 0."""
    if threshold > n * law.last:
        return 0.0
    mu = _mu_grid(law)
    logs = n * law.log_mgf(mu) - mu * threshold + np.log(threshold + 1.0 / mu)
    return float(np.exp(np.min(logs)))


def _capped_exp(log_bound: float) -> float:
    """min(1, e^log_bound): a probability bound, 1 where the exponent overflows."""
    return 1.0 if log_bound >= 0 else float(np.exp(log_bound))
