"""What users do by hand, for comparison: basic and advanced composition of the single-round
certified eps (both certified, both loose), and for subsampled rounds the subsampling lemma
(a labelled reference, not certified).

* basic: T rounds each (eps1, delta/T)-DP are (T eps1, delta)-DP;
* advanced (Dwork, Rothblum, Vadhan 2010; Dwork-Roth Thm 3.20): T rounds each (eps1, delta1)-DP
  are (sqrt(2 T ln(1/delta')) eps1 + T eps1 (e^eps1 - 1), T delta1 + delta')-DP.  We split the
  total delta in halves: delta' = delta/2 and delta1 = delta/(2T).
* subsampling lemma (subsampled rounds, docs/composition.md; NOT certified by us): a round of
  m = floor(q n) users is (eps1, delta1)-DP; Poisson subsampling (arXiv:1807.01647) would make
  it (ln(1 + q (e^eps1 - 1)), q delta1)-DP; T such rounds composed optimally (arXiv:1311.0776),
  with T q delta1 = delta/2.  The lemma is stated for add/remove neighbours
  and a mechanism private at every input size; here the relation is substitution and the number
  of participants is random, so the result is a labelled reference, not a certified bound.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tablegen.mechanisms import Mechanism


def basic_eps(mechanism: str | Mechanism, *, eps0: float, n: int, rounds: int, delta: float, **params: Any) -> float:
    """T * eps1, eps1 the single-round certified eps at delta / T."""
    from tablegen.engine import eps_bounds

    return rounds * eps_bounds(mechanism, eps0=eps0, n=n, delta=delta / rounds, lower=False, **params).upper


def advanced_eps(mechanism: str | Mechanism, *, eps0: float, n: int, rounds: int, delta: float, **params: Any) -> float:
    """Advanced composition with delta' = delta/2 and delta1 = delta/(2T)."""
    from tablegen.engine import eps_bounds

    e1 = eps_bounds(mechanism, eps0=eps0, n=n, delta=delta / (2 * rounds), lower=False, **params).upper
    return advanced_formula(e1, rounds, delta / 2)


def advanced_formula(eps1: float, rounds: int, delta_prime: float) -> float:
    """sqrt(2 T ln(1/delta')) eps1 + T eps1 (e^eps1 - 1)."""
    return math.sqrt(2 * rounds * math.log(1 / delta_prime)) * eps1 + rounds * eps1 * math.expm1(eps1)


def subsampling_lemma_eps(mechanism: str | Mechanism, *, eps0: float, n: int, rounds: int, delta: float,
                          sample_rate: float, **params: Any) -> float:
    """The subsampling-lemma recipe of the module docstring (a reference, not certified)."""
    from tablegen.engine import eps_bounds

    delta1 = min(0.5, delta / (2 * rounds * sample_rate))
    m = max(1, math.floor(sample_rate * n))
    eps1 = eps_bounds(mechanism, eps0=eps0, n=m, delta=delta1, lower=False, **params).upper
    return optimal_composition_eps(math.log1p(sample_rate * math.expm1(eps1)), sample_rate * delta1, rounds, delta)


def optimal_composition_eps(eps1: float, delta1: float, rounds: int, delta: float) -> float:
    """Smallest eps (bisection, to 1e-9 relative) at which T (eps1, delta1)-DP rounds are
    (eps, delta)-DP by the optimal composition theorem (Kairouz, Oh, Viswanath 2015): the worst
    pair's privacy loss is infinite w.p. 1 - (1 - delta1)^T, else eps1 (T - 2K) with
    K ~ Bin(T, 1/(1 + e^eps1)), and delta(eps) = P(inf) + (1 - delta1)^T E[(1 - e^(eps - L))_+]."""
    from scipy.stats import binom

    k = np.arange(rounds + 1)
    weights = binom.pmf(k, rounds, 1 / (1 + math.exp(eps1)))
    loss = eps1 * (rounds - 2 * k)
    keep = 1 - delta1
    infinite = -math.expm1(rounds * math.log1p(-delta1))

    def delta_at(e: float) -> float:
        return infinite + keep**rounds * float(weights @ -np.expm1(np.minimum(e - loss, 0.0)))

    if delta_at(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, rounds * eps1
    if delta_at(hi) > delta:
        return math.inf
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if delta_at(mid) > delta else (lo, mid)
    return hi
