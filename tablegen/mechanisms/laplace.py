"""Laplace mechanism on [0, 1]: R(x) = x + Lap(1/eps0) (arXiv:2504.07414 Appendix C).

Blanket (upper bound), pair x0 = 0, x1 = 1, c(y) = min_x R(x)(y) = (eps0/2) e^(-eps0 max(|y|, |y-1|)):

    y <= 0:       G = beta - alpha                        mass (1/2) e^(-eps0)
    0 < y < 1/2:  G = e^(eps0 (1 - 2y)) - alpha           density (eps0/2) e^(-eps0 (1 - y))
    1/2 < y < 1:  G = 1 - alpha e^(eps0 (2y - 1))         density (eps0/2) e^(-eps0 y)
    y >= 1:       G = 1 - beta alpha                      mass (1/2) e^(-eps0)

and G = 0 with the remaining mass 1 - e^(-eps0/2); its CDF is the paper's (Appendix C).
Lower bound (Theorem 5 with x2 = 1/2, y ~ R(1/2)): u = R(0)(y)/R(1/2)(y), v = R(1)(y)/R(1/2)(y).

Discretisation of the continuous parts into cells of y per half: the union
of ``S_CELLS`` cells equal in s = e^(-eps0 t) and ``T_CELLS`` cells equal in t (t = y on the left
half, 1 - y on the right).  The likelihood ratio u = e^(eps0 (1 - 2t)) = beta s^2 while the mass
per unit s is proportional to 1/s^2, so equal steps of s give every cell the same spread
(mass x width^2 in u); the cells equal in t keep the heavy end near t = 1/2 fine.  Upper bound:
32 + 24 edges (about 49 cells: an edge in s near one in t is dropped): eps within +0.0030%
(median), +0.057% (max) and -0.004% (min) of 96 cells equal in t over
70 queries (eps0 0.1-8, n 1e2-1e8, delta 1e-6 and 1e-10; docs/mechanisms.md); 48 cells equal
in s alone lost up to 0.9% (eps0 = 8, n = 1e3, eps near eps0).  Lower bound: 96 cells
equal in t (adding the cells in s would refine them, but 244 components
instead of 194 would lower the largest joint Laplace product built live from 6 parts to 5:
limits.JOINT_WORK_MAX).  Any
partition certifies:
* upper: inside a cell G is replaced by the two-point law on the cell's extreme values with
  the same conditional mean (a mean-preserving spread, so E[(sum)_+] can only grow: certified);
* lower: inside a cell G is replaced by its conditional mean (a mean-preserving contraction).
Both keep G affine in alpha, so a cell is one or two components (u, v, c).
"""

from __future__ import annotations

import math

import numpy as np

from tablegen.decomposition import Decomposition
from tablegen.mechanisms.base import Mechanism

S_CELLS = 32  # cells equal in s = e^(-eps0 t), upper bound
T_CELLS = 24  # cells equal in t, upper bound
LOWER_T_CELLS = 96  # cells equal in t, lower bound (none in s: the engine-version-2 partition)


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
