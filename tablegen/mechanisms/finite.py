"""Any finite randomizer given as a probability matrix R[x, y] (rows = inputs).

Upper bound: the optimal (blanket) decomposition of arXiv:2504.07414 Theorem 4:
c(y) = min_x R[x, y], u = R[x0, y]/c(y), v = R[x1, y]/c(y), for every ordered pair x0 != x1
(the certified value is the largest over pairs; identical laws are evaluated once).
Lower bound: Theorem 5 for every triple (x0, x1, x2), x2 may equal x0 or x1.
The matrix must be row-stochastic and eps0-LDP: max_y max_(x, x') log(R[x,y]/R[x',y]) <= eps0.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tablegen.decomposition import Decomposition
from tablegen.mechanisms.base import Mechanism, Param

MAX_INPUTS = 16  # the lower bound visits all triples of inputs


def check_matrix(name: str, value: object) -> np.ndarray:
    """Validate a randomizer matrix: 2-d, >= 0, rows summing to 1, at least two inputs."""
    try:
        m = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a matrix of probabilities (rows = inputs)") from None
    if m.ndim != 2 or m.shape[0] < 2 or m.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-d matrix with at least 2 rows (inputs), got shape {m.shape}")
    if m.shape[0] > MAX_INPUTS:
        raise ValueError(f"{name} may have at most {MAX_INPUTS} rows (inputs), got {m.shape[0]}")
    if not np.all(np.isfinite(m)) or np.any(m < 0):
        raise ValueError(f"{name} entries must be finite and >= 0")
    sums = m.sum(axis=1)
    if not np.allclose(sums, 1.0, rtol=0, atol=1e-9):
        raise ValueError(f"{name} rows must sum to 1 (a stochastic matrix), got row sums {sums.tolist()}")
    return m[:, m.max(axis=0) > 0]


def ldp_epsilon(matrix: np.ndarray) -> float:
    """The smallest eps0 for which the matrix is eps0-LDP (inf if a column mixes 0 and > 0)."""
    lo, hi = matrix.min(axis=0), matrix.max(axis=0)
    if np.any(lo <= 0):
        return math.inf
    return float(np.max(np.log(hi / lo)))


def _check_ldp(matrix: np.ndarray, eps0: float) -> None:
    eps_true = ldp_epsilon(matrix)
    if eps_true > eps0 * (1 + 1e-9):
        raise ValueError(f"matrix is not eps0-LDP for eps0={eps0!r}: its local epsilon is {eps_true!r}")


def _unique(decompositions: list[Decomposition]) -> list[Decomposition]:
    seen: dict[bytes, Decomposition] = {}
    for d in decompositions:
        key = np.round(np.stack([d.u, d.v, d.c]), 12).tobytes()
        seen.setdefault(key, d)
    return list(seen.values())


def finite_upper(eps0: float, matrix: np.ndarray) -> list[Decomposition]:
    """Blanket decomposition for every ordered input pair (Theorem 4)."""
    _check_ldp(matrix, eps0)
    c = matrix.min(axis=0)
    pairs = itertools.permutations(range(matrix.shape[0]), 2)
    return _unique([Decomposition(matrix[a] / c, matrix[b] / c, c).merged() for a, b in pairs])


def finite_lower(eps0: float, matrix: np.ndarray) -> list[Decomposition]:
    """Theorem 5 pairs for every triple (x0, x1, x2)."""
    _check_ldp(matrix, eps0)
    rows = range(matrix.shape[0])
    out = []
    for a, b in itertools.permutations(rows, 2):
        for x2 in rows:
            ref = matrix[x2]
            out.append(Decomposition(matrix[a] / ref, matrix[b] / ref, ref).merged())
    return _unique(out)


FINITE = Mechanism(
    "finite",
    "any finite randomizer given as a probability matrix (rows = inputs)",
    "Su, Cheng, Wang, arXiv:2504.07414, Theorems 4 and 5",
    finite_upper,
    finite_lower,
    {"matrix": Param(None, check_matrix, "row-stochastic matrix R[x, y] (JSON list of rows)", required=True)},
)
