"""Laplace mechanism on [0, 1]: R(x) = x + Lap(1/eps0) (arXiv:2504.07414 Appendix C).

The upper bound is the blanket decomposition of the pair (0, 1), its continuous parts cut into
cells each spread to a two-point law with the same mean; the lower bound is the Theorem 5 pair
with reference x2 = 1/2, each cell contracted to its mean.  The law of G, why any partition
certifies and why these cells: docs/soundness.md ("Laplace: cells of the continuous law").
"""

from __future__ import annotations

import math

import numpy as np

from tablegen.decomposition import Decomposition
from tablegen.mechanisms.base import Mechanism

S_CELLS = 32  # cells equal in s = e^(-eps0 t), upper bound
T_CELLS = 24  # cells equal in t, upper bound
LOWER_T_CELLS = 96  # cells equal in t, lower bound (none in s: fewer components for joint products)


def _cells(eps0: float, t_cells: int, s_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """Cells [a, b] of t tiling (0, 1/2): the union of the edges equal in s = e^(-eps0 t),
    t_i = -log(1 + (i / s_cells) (e^(-eps0/2) - 1)) / eps0, and of ``t_cells`` equal in t;
    the first edge exactly 0, the last exactly 1/2.  An edge in s within a tenth of a t-cell of an
    edge in t is dropped (near-equal edges would make cells whose two-point law is all rounding)."""
    in_t = np.linspace(0.0, 0.5, t_cells + 1)
    in_s = -np.log1p(np.arange(1, s_cells) / max(s_cells, 1) * math.expm1(-eps0 / 2)) / eps0
    apart = np.min(np.abs(in_s[:, None] - in_t[None, :]), axis=1) > 0.05 / t_cells
    edges = np.union1d(in_s[apart], in_t)
    return edges[:-1], edges[1:]


def _exp_integral(rate: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """int_a^b e^(rate y) dy, stable for rate near 0."""
    if abs(rate) < 1e-300:
        return b - a
    return np.exp(rate * a) * np.expm1(rate * (b - a)) / rate


def laplace_upper(eps0: float) -> list[Decomposition]:
    """Blanket decomposition with each cell spread to its two extreme values (certified)."""
    beta = math.exp(eps0)
    a, b = _cells(eps0, T_CELLS, S_CELLS)  # cells of t in (0, 1/2): y = t on the left half, y = 1 - t on the right
    # left half: c(t) dt = (eps0/2) e^(-eps0) e^(eps0 t) dt, u(t) = e^(eps0 (1 - 2t)), v = 1;
    # the right half is its mirror image with u and v exchanged.
    mass = 0.5 * eps0 * math.exp(-eps0) * _exp_integral(eps0, a, b)
    mean_u = 0.5 * eps0 * _exp_integral(-eps0, a, b) / mass  # int c u / int c
    u_hi, u_lo = np.exp(eps0 * (1 - 2 * a)), np.exp(eps0 * (1 - 2 * b))
    w_hi = (mean_u - u_lo) / (u_hi - u_lo)  # two-point law on {u_lo, u_hi} with mean mean_u
    u = np.concatenate([u_hi, u_lo])
    c = np.concatenate([mass * w_hi, mass * (1 - w_hi)])
    ones = np.ones_like(u)
    tail = 0.5 * math.exp(-eps0)
    return [
        Decomposition(
            np.concatenate([u, ones, [beta, 1.0]]),
            np.concatenate([ones, u, [1.0, beta]]),
            np.concatenate([c, c, [tail, tail]]),
        ).merged()
    ]


def laplace_lower(eps0: float) -> list[Decomposition]:
    """Theorem 5 pair (0, 1, x2 = 1/2), each cell contracted to its conditional mean."""
    h = math.exp(eps0 / 2)
    a, b = _cells(eps0, LOWER_T_CELLS, 0)
    # left half, y = t in (0, 1/2): density (eps0/2) e^(-eps0 (1/2 - t)),
    # u = e^(eps0 (1/2 - 2t)), v = e^(-eps0/2); the right half mirrors it.
    mass = 0.5 * eps0 * math.exp(-eps0 / 2) * _exp_integral(eps0, a, b)
    mean_u = 0.5 * eps0 * _exp_integral(-eps0, a, b) / mass
    const = np.full_like(mean_u, 1.0 / h)
    tail = 0.5 * math.exp(-eps0 / 2)
    return [
        Decomposition(
            np.concatenate([mean_u, const, [h, 1.0 / h]]),
            np.concatenate([const, mean_u, [1.0 / h, h]]),
            np.concatenate([mass, mass, [tail, tail]]),
        ).merged()
    ]


LAPLACE = Mechanism(
    "laplace",
    "Laplace mechanism on [0, 1], scale 1/eps0",
    "Su, Cheng, Wang, arXiv:2504.07414, Appendix C and Theorem 5",
    laplace_upper,
    laplace_lower,
)
