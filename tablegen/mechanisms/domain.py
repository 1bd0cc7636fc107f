"""Finite-domain versions of the frequency oracles: the exact randomizer matrix for a domain of
``domain`` values, bounded by the ``finite`` machinery (arXiv:2504.07414 Theorems 4 and 5).

Table 1 is valid for every domain size; for small domains the blanket of the actual matrix is
larger (constant hash functions, the all-ones unary report, Hadamard columns), so the optimal
decomposition of the matrix is tighter (docs/engine.md).  Output spaces grow like 2^d or
g^d, so the domain is capped by ``MAX_OUTPUTS``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

MAX_OUTPUTS = 4096


def unary_matrix(d: int, one_if_true: float, one_if_false: float) -> np.ndarray:
    """Unary encoding: output bit vectors y in {0,1}^d, bit x kept 1 w.p. one_if_true."""
    bits = np.array(list(itertools.product((0, 1), repeat=d)), dtype=float)  # outputs x d
    rows = []
    for x in range(d):
        p_one = np.full(d, one_if_false)
        p_one[x] = one_if_true
        rows.append(np.prod(np.where(bits == 1, p_one, 1 - p_one), axis=1))
    return np.array(rows)


def hash_matrix(d: int, g: int, eps0: float) -> np.ndarray:
    """Local hashing with the family of all functions [d] -> [g] (uniform), then g-ary RR."""
    beta = math.exp(eps0)
    hashes = np.array(list(itertools.product(range(g), repeat=d)))  # (g^d, d)
    bucket = np.arange(g)
    match = hashes.T[:, :, None] == bucket[None, None, :]  # (d, g^d, g)
    probs = np.where(match, beta, 1.0) / (beta + g - 1) / len(hashes)
    return probs.reshape(d, -1)


def hadamard_matrix(d: int, eps0: float) -> np.ndarray:
    """Hadamard response: K = 2^ceil(log2(d+1)); input x reports a column in the set where row
    x+1 of the Sylvester-Hadamard matrix is +1 w.p. e^eps0/(e^eps0+1), elsewhere otherwise."""
    k = 1 << math.ceil(math.log2(d + 1))
    h = np.array([[1.0]])
    while h.shape[0] < k:
        h = np.block([[h, h], [h, -h]])
    beta = math.exp(eps0)
    inside = h[1 : d + 1] > 0
    return np.where(inside, 2 * beta / (k * (beta + 1)), 2 / (k * (beta + 1)))


def output_count(name: str, d: int, g: int | None) -> int:
    """Number of outputs of the matrix that ``name`` on ``d`` values would have."""
    if name in ("rappor", "oue"):
        return 2**d
    if name == "hr":
        return 1 << math.ceil(math.log2(d + 1))
    return (g or 2) ** d * (g or 2)
