"""Poisson-subsampled rounds: each user takes part with probability q (docs/composition.md,
"Subsampled rounds").

The messages of the participants, shuffled, are in bijection (n being public) with the shuffle of
n reports of R_q = (1 - q) bot + q R, bot = "no message": the number of bots is n minus the number
of messages.  So bounds on the shuffle of R_q are bounds on the real round, and lower-bound pairs
of R_q are exact divergences of real dataset pairs.  R_q is the parallel composition
(arXiv:2504.07414 section 7) of R, chosen with probability q, and the silent
randomizer, whose only output bot is common to every input (u = v = c = 1).  Hence every
decomposition of R (components (u_j, v_j, c_j), Theorem 4; or a Theorem 5 pair) gives one of R_q:

    (u_j, v_j, q c_j) for every j,  plus  (1, 1, 1 - q)   (G = 1 - e^eps there),

and the rest mass becomes q * rest.  At n = 1 this gives q * delta(eps), the exact divergence of
(1 - q) bot + q R(x0) against (1 - q) bot + q R(x1).

R_q is eps0-LDP, not ln(1 + q (e^eps0 - 1))-LDP (an output y != bot has the likelihood ratio of
R): the standard clone at that smaller eps0 is not a bound for this neighbouring relation.

An (eps0, delta0)-LDP randomizer: Theorem 3.8 of arXiv:2012.12803
replaces R by an eps0-LDP L with TV(R(x), L(x)) <= (1 + e^(-eps0/2)) delta0; then
TV(R_q(x), L_q(x)) = q TV(R(x), L(x)), so the extra delta term is multiplied by q.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tablegen import validate
from tablegen.decomposition import Decomposition, parallel
from tablegen.mechanisms.base import Mechanism

SILENT = Decomposition(np.ones(1), np.ones(1), np.ones(1))  # the randomizer whose only output is bot


def subsampled_decomposition(d: Decomposition, q: float) -> Decomposition:
    """The decomposition of R_q from one of R: the mixture q d + (1 - q) SILENT; d itself at q = 1."""
    return d if q == 1 else parallel([d, SILENT], [q, 1.0 - q])


def subsampled(mechanism: Mechanism, sample_rate: float) -> Mechanism:
    """``mechanism`` with each user taking part with probability ``sample_rate`` (0 < q <= 1):
    its upper decompositions and lower-bound pairs transformed by ``subsampled_decomposition``,
    its extra delta (Theorem 3.8's n delta0 term) multiplied by q.  At q = 1 the mechanism
    itself, so that every number is bit-identical to the unsampled one."""
    q = validate.rate("sample_rate", sample_rate)
    if q == 1:
        return mechanism

    def upper(eps0: float, **params: Any) -> list[Decomposition]:
        return [subsampled_decomposition(d, q) for d in mechanism.upper(eps0, **params)]

    def lower(eps0: float, **params: Any) -> list[Decomposition]:
        assert mechanism.lower is not None
        return [subsampled_decomposition(d, q) for d in mechanism.lower(eps0, **params)]

    def extra_delta(eps: float, eps0: float, n: int, **params: Any) -> float:
        assert mechanism.extra_delta is not None
        # the base term is (e^eps + 1) n TV with TV the per-user distance to an eps0-LDP surrogate,
        # which subsampling multiplies by q; the product is rounded up
        return math.nextafter(q * mechanism.extra_delta(eps, eps0, n, **params), math.inf)

    return Mechanism(
        f"{mechanism.name} (sample rate {q:g})",
        f"{mechanism.summary}, each user taking part with probability {q:g}",
        f"{mechanism.reference}; Poisson subsampling: docs/composition.md",
        upper,
        lower if mechanism.lower is not None else None,
        mechanism.params,
        extra_delta if mechanism.extra_delta is not None else None,
        mechanism.eps0_monotone,
    )
