"""What users do by hand, for comparison: basic and advanced composition of the single-round
certified eps (both certified, both loose).

* basic: T rounds each (eps1, delta/T)-DP are (T eps1, delta)-DP;
* advanced (Dwork, Rothblum, Vadhan 2010; Dwork-Roth Thm 3.20): T rounds each (eps1, delta1)-DP
  are (sqrt(2 T ln(1/delta')) eps1 + T eps1 (e^eps1 - 1), T delta1 + delta')-DP.  We split the
  total delta in halves: delta' = delta/2 and delta1 = delta/(2T).
"""

from __future__ import annotations

import math
from typing import Any


def basic_eps(mechanism: str, *, eps0: float, n: int, rounds: int, delta: float, **params: Any) -> float:
    """T * eps1, eps1 the single-round certified eps at delta / T."""
    from tablegen.engine import eps_bounds

    return rounds * eps_bounds(mechanism, eps0=eps0, n=n, delta=delta / rounds, lower=False, **params).upper


def advanced_eps(mechanism: str, *, eps0: float, n: int, rounds: int, delta: float, **params: Any) -> float:
    """Advanced composition with delta' = delta/2 and delta1 = delta/(2T)."""
    from tablegen.engine import eps_bounds

    e1 = eps_bounds(mechanism, eps0=eps0, n=n, delta=delta / (2 * rounds), lower=False, **params).upper
    return advanced_formula(e1, rounds, delta / 2)


def advanced_formula(eps1: float, rounds: int, delta_prime: float) -> float:
    """sqrt(2 T ln(1/delta')) eps1 + T eps1 (e^eps1 - 1)."""
    return math.sqrt(2 * rounds * math.log(1 / delta_prime)) * eps1 + rounds * eps1 * math.expm1(eps1)
