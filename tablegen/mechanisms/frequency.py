"""Frequency oracles: k-RR, BLH, OLH, RAPPOR, OUE, HR.

Upper bounds: the domain-free optimal decompositions of arXiv:2504.07414 (Table 1 and
Appendix B, Table 2): with beta = e^eps0,

    R(x0) = beta p Q0 + p Q1 + beta q Q2 + r Q3,   R(x1) = p Q0 + beta p Q1 + beta q Q2 + r Q3,

so G = beta - alpha w.p. p, 1 - beta alpha w.p. p, beta - beta alpha w.p. q, 1 - alpha w.p. r,
and 0 otherwise.  k-RR is Example 4.0 (exact for every k).  OLH with g buckets (BLH is g = 2)
is derived the same way for a pairwise-independent hash: (h(x0), h(x1)) is uniform on [g]^2.

Finite domain (optional ``domain`` parameter): the exact matrix of the randomizer on that many
values (``domain.py``; hashing uses the family of all functions [d] -> [g]) bounded by the
``finite`` machinery, which is tighter than Table 1 for small domains.

Lower bounds: arXiv:2504.07414 Theorem 5 for X0 = (x0, x2, ..., x2), X1 = (x1, x2, ...,
x2): G = (R(x0)(y) - alpha R(x1)(y)) / R(x2)(y), y ~ R(x2).  Hash-based randomizers use a
3-wise independent hash, RAPPOR/OUE the three coordinates x0, x1, x2 (the others cancel).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tablegen import validate
from tablegen.decomposition import Decomposition, from_pairs
from tablegen.limits import CATEGORIES_MAX
from tablegen.mechanisms.base import Mechanism, Param
from tablegen.mechanisms.domain import MAX_OUTPUTS, hadamard_matrix, hash_matrix, unary_matrix
from tablegen.mechanisms.domain import output_count as domain_outputs
from tablegen.mechanisms.finite import MAX_INPUTS, finite_lower, finite_upper

PAPER = "Su, Cheng, Wang, arXiv:2504.07414, Table 1, Appendix B and Theorem 5"


def table1(beta: float, p: float, q: float, r: float) -> Decomposition:
    """Appendix B decomposition with coefficients (p, q, r): G's atoms of Table 1."""
    return from_pairs([(beta, 1.0, p), (1.0, beta, p), (beta, beta, q), (1.0, 1.0, r)])


def krr_upper(eps0: float, k: int) -> list[Decomposition]:
    """k-RR, Example 4.0: p = 1/(e^eps0 + k - 1), q = 0, r = (k - 2) p."""
    beta = math.exp(eps0)
    p = 1.0 / (beta + k - 1)
    return [table1(beta, p, 0.0, (k - 2) * p)]


def krr_lower(eps0: float, k: int) -> list[Decomposition]:
    """Theorem 5 pairs of k-RR: x2 distinct from x0, x1 (k >= 3), and x2 = x1 or x0 (k = 2)."""
    beta = math.exp(eps0)
    p = 1.0 / (beta + k - 1)
    pairs = [
        # x2 = x1 and x2 = x0: the only pairs of binary RR, valid for every k
        from_pairs([(beta, 1.0, p), (1.0 / beta, 1.0, beta * p), (1.0, 1.0, (k - 2) * p)]),
        from_pairs([(1.0, 1.0 / beta, beta * p), (1.0, beta, p), (1.0, 1.0, (k - 2) * p)]),
    ]
    if k >= 3:
        pairs.append(
            from_pairs(
                [(beta, 1.0, p), (1.0, beta, p), (1.0 / beta, 1.0 / beta, beta * p), (1.0, 1.0, (k - 3) * p)]
            )
        )
    return pairs


def olh_upper(eps0: float, g: int | None = None) -> list[Decomposition]:
    """Local hashing into g buckets (g-ary RR on h(x)); domain-free blanket c = P(h)/(beta+g-1).

    (h(x0), h(x1)) is uniform on [g]^2; the reported bucket b gives ratios (f(b,h0), f(b,h1))
    with f = beta on a match, 1 otherwise: beta - alpha and 1 - beta alpha w.p. (g-1)/(g(beta+g-1))
    each, beta - beta alpha w.p. 1/(g(beta+g-1)), 1 - alpha w.p. (g-1)^2/(g(beta+g-1)).
    For g = 2 this is Table 1's BLH row.
    """
    beta = math.exp(eps0)
    g = default_buckets(eps0) if g is None else g
    s = 1.0 / (g * (beta + g - 1))
    return [table1(beta, (g - 1) * s, s, (g - 1) ** 2 * s)]


# the five set partitions of {x0, x1, x2}, as block labels of (h(x0), h(x1), h(x2))
PARTITIONS_OF_THREE = [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (0, 1, 2)]


def olh_lower(eps0: float, g: int | None = None) -> list[Decomposition]:
    """Theorem 5 for local hashing with a 3-wise independent hash into g buckets."""
    beta = math.exp(eps0)
    g = default_buckets(eps0) if g is None else g
    rows = []
    # equality pattern of (h(x0), h(x1), h(x2)) as block labels, with its probability
    for labels in PARTITIONS_OF_THREE:
        blocks = len(set(labels))
        if blocks > g:
            continue
        prob_pattern = math.perm(g, blocks) / g**3
        for b in list(range(blocks)) + [None]:  # reported bucket: one of the blocks or none
            weight_b = (g - blocks) if b is None else 1
            if weight_b == 0:
                continue
            f = [beta if b == lab else 1.0 for lab in labels]
            rows.append((f[0] / f[2], f[1] / f[2], prob_pattern * weight_b * f[2] / (beta + g - 1)))
    return [from_pairs(rows)]


def blh_upper(eps0: float) -> list[Decomposition]:
    """Binary local hashing: Table 1, p = q = r = 1/(2(e^eps0 + 1))."""
    return olh_upper(eps0, 2)


def blh_lower(eps0: float) -> list[Decomposition]:
    """Theorem 5 for BLH (3-wise independent binary hash)."""
    return olh_lower(eps0, 2)


def rappor_upper(eps0: float) -> list[Decomposition]:
    """RAPPOR (each bit flipped w.p. 1/(e^(eps0/2)+1)): Table 2 coefficients."""
    h = math.exp(eps0 / 2)
    p = 1.0 / (h + 1) ** 2
    return [table1(h * h, p, p / h, p * h)]


def oue_upper(eps0: float) -> list[Decomposition]:
    """Optimized unary encoding: Table 2, p = 1/(2(b+1)), q = 1/(2b(b+1)), r = b/(2(b+1))."""
    beta = math.exp(eps0)
    p = 1.0 / (2 * (beta + 1))
    return [table1(beta, p, p / beta, p * beta)]


def unary_lower(one_if_true: float, one_if_false: float) -> list[Decomposition]:
    """Theorem 5 for a unary encoding: only the bits at x0, x1, x2 differ between inputs."""

    def bit(b: int, true: bool) -> float:
        q = one_if_true if true else one_if_false
        return q if b else 1.0 - q

    rows = []
    for bits in itertools.product((0, 1), repeat=3):
        # probability of the bits at coordinates (x0, x1, x2) under input x0, x1 and x2
        p0, p1, p2 = (math.prod(bit(b, pos == x) for pos, b in enumerate(bits)) for x in range(3))
        rows.append((p0 / p2, p1 / p2, p2))
    return [from_pairs(rows)]


def rappor_lower(eps0: float) -> list[Decomposition]:
    """Theorem 5 for RAPPOR."""
    h = math.exp(eps0 / 2)
    return unary_lower(h / (h + 1), 1.0 / (h + 1))


def oue_lower(eps0: float) -> list[Decomposition]:
    """Theorem 5 for OUE."""
    return unary_lower(0.5, 1.0 / (math.exp(eps0) + 1))


def default_buckets(eps0: float) -> int:
    """The usual OLH choice g = round(e^eps0) + 1 (arXiv:1705.04421)."""
    return int(round(math.exp(eps0))) + 1


MAX_CATEGORIES = CATEGORIES_MAX  # k, g, domain: the limits of tablegen/limits.py


def categories(name: str, value: object) -> int:
    """An integer in [2, MAX_CATEGORIES] (k, g, domain)."""
    return validate.integer_at_least(name, value, 2, MAX_CATEGORIES)


def domain_matrix(name: str, eps0: float, domain: int, g: int | None = None) -> np.ndarray:
    """The randomizer matrix of ``name`` on ``domain`` input values (see ``domain.py``)."""
    outputs = domain_outputs(name, domain, g) if domain <= MAX_INPUTS else None  # g^domain: check domain first
    if outputs is None or outputs > MAX_OUTPUTS:
        raise ValueError(
            f"domain={domain} gives {outputs or 'too many'} outputs for {name}; the finite-domain option allows "
            f"at most {MAX_INPUTS} values and {MAX_OUTPUTS} outputs (omit domain for the domain-free bound)"
        )
    if name == "rappor":
        h = math.exp(eps0 / 2)
        return unary_matrix(domain, h / (h + 1), 1 / (h + 1))
    if name == "oue":
        return unary_matrix(domain, 0.5, 1 / (math.exp(eps0) + 1))
    if name == "hr":
        return hadamard_matrix(domain, eps0)
    return hash_matrix(domain, g or 2, eps0)


Bound = Callable[..., list[Decomposition]]


def _with_domain(name: str, free: Bound, exact: Bound) -> Bound:
    """Bounds from ``free`` (domain-free, Table 1) or, given ``domain``, from the exact matrix."""

    def bound(eps0: float, domain: int | None = None, **params: Any) -> list[Decomposition]:
        if domain is None:
            return free(eps0, **params)
        g = params.get("g") or (default_buckets(eps0) if name == "olh" else None)
        return exact(eps0, domain_matrix(name, eps0, domain, g))

    bound.__doc__ = free.__doc__  # the law of G documented where it is written
    return bound


def _mechanism(
    name: str, summary: str, reference: str, upper: Bound, lower: Bound, params: dict[str, Param] | None = None
) -> Mechanism:
    """A frequency oracle with the optional finite ``domain`` parameter."""
    params = {**(params or {}), "domain": DOMAIN_PARAM}
    return Mechanism(name, summary, reference, _with_domain(name, upper, finite_upper),
                     _with_domain(name, lower, finite_lower), params)


K_PARAM = Param(None, categories, "number of categories k, an integer >= 2", required=True)
G_PARAM = Param(None, categories, "number of hash buckets g >= 2 (default round(e^eps0) + 1)", eps0_default=True)
DOMAIN_PARAM = Param(None, categories, "optional finite domain size >= 2: exact optimal decomposition of the matrix")

MECHANISMS = [
    Mechanism("krr", "k-ary randomized response", PAPER + " (Example 4.0)", krr_upper, krr_lower, {"k": K_PARAM}),
    _mechanism("blh", "binary local hashing", PAPER, blh_upper, blh_lower),
    _mechanism("olh", "optimal local hashing (g buckets)", PAPER, olh_upper, olh_lower, {"g": G_PARAM}),
    _mechanism("rappor", "basic RAPPOR (unary encoding, symmetric flips)", PAPER, rappor_upper, rappor_lower),
    _mechanism("oue", "optimized unary encoding", PAPER, oue_upper, oue_lower),
    _mechanism("hr", "Hadamard response", PAPER + " (HR behaves as BLH)", blh_upper, blh_lower),
]

