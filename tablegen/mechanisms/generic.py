"""Every eps0-LDP randomizer: the standard clone (arXiv:2012.12803 Theorem 3.2).

With beta = e^eps0 the clone decomposition is R(x0) = beta/(beta+1) Q0 + 1/(beta+1) Q1 and
R(x) = 1/(2 beta) Q0 + 1/(2 beta) Q1 + (1 - 1/beta) LO(x), so G has the three atoms
(docs/engine.md)

    2 beta (beta - alpha)/(beta + 1)  and  2 beta (1 - alpha beta)/(beta + 1)  w.p. 1/(2 beta) each,

and 0 otherwise.  Approximate-DP randomizers (eps0, delta0): Theorem 3.8's proof reduces to
the same clone pair up to total variation n (1 + e^(-eps0/2)) delta0 per dataset, which adds
(e^eps + 1)(1 + e^(-eps0/2)) n delta0 to delta (Lemma C.1).

Lower bound: binary and ternary randomized response are eps0-LDP randomizers, so the exact
divergence of their worst pairs (Theorem 5 of arXiv:2504.07414) lower-bounds the worst
case over all randomizers; the larger of the two is reported.

``generic-closed-form`` is Theorem 3.1's closed form (Equation (1)), a labelled reference.
"""

from __future__ import annotations

import math

from tablegen import validate
from tablegen.decomposition import Decomposition, from_pairs
from tablegen.mechanisms.base import Mechanism, Param
from tablegen.mechanisms.frequency import krr_lower

PAPER = "Feldman, McMillan, Talwar, arXiv:2012.12803, Theorems 3.2 and 3.8"


def clone_upper(eps0: float, delta0: float = 0.0) -> list[Decomposition]:
    """Standard-clone law of G (Theorem 3.2)."""
    beta = math.exp(eps0)
    a = 2 * beta / (beta + 1)
    return [from_pairs([(a * beta, a, 0.5 / beta), (a, a * beta, 0.5 / beta)])]


def clone_lower(eps0: float, delta0: float = 0.0) -> list[Decomposition]:
    """Worst pairs of binary and ternary RR (each an eps0-LDP randomizer)."""
    return krr_lower(eps0, 2) + krr_lower(eps0, 3)[2:]


def approx_dp_delta(eps: float, eps0: float, n: int, delta0: float = 0.0) -> float:
    """Theorem 3.8's extra delta: (e^eps + 1)(1 + e^(-eps0/2)) n delta0."""
    return (math.exp(eps) + 1) * (1 + math.exp(-eps0 / 2)) * n * delta0 if delta0 else 0.0


def closed_form_eps(eps0: float, n: int, delta: float) -> float:
    """Theorem 3.1, Equation (1); valid when eps0 <= log(n / (16 log(2/delta))), else eps0.

    eps = log(1 + (e^eps0 - 1)/(e^eps0 + 1) (8 sqrt(e^eps0 log(4/delta)) / sqrt(n) + 8 e^eps0 / n))
    """
    limit = 16 * math.log(2 / delta)
    if n <= limit or eps0 > math.log(n / limit):
        return eps0
    beta = math.exp(eps0)
    inner = 8 * math.sqrt(beta * math.log(4 / delta)) / math.sqrt(n) + 8 * beta / n
    # relative slack 1e-12 covers the rounding of the few floating-point operations above
    return min(eps0, math.log1p((beta - 1) / (beta + 1) * inner) * (1 + 1e-12))


def _delta0(name: str, value: object) -> float:
    return validate.unit_interval(name, value)


DELTA0 = Param(0.0, _delta0, "delta0 of an approximate-DP local randomizer, in [0, 1) (default 0)")

GENERIC = Mechanism(
    "generic",
    "any eps0-LDP (or (eps0, delta0)-LDP) randomizer, standard clone",
    PAPER,
    clone_upper,
    clone_lower,
    {"delta0": DELTA0},
    extra_delta=approx_dp_delta,
)
