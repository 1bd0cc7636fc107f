"""Laplace mechanism on [0, 1]: R(x) = x + Lap(1/eps0) (arXiv:2504.07414 Appendix C).

The upper bound is the blanket decomposition of the pair (0, 1), its continuous parts cut into
cells each spread to a two-point law with the same mean; the lower bound is the largest of three
exact pairs (Theorem 5): the other users at 0 and the target 1 against 0, the reverse, and the
other users at 1/2 and the target 0 against 1, each cell contracted to its mean.  The law of G,
why any partition certifies and why these cells: docs/soundness.md ("Laplace: cells of the
continuous law", "Laplace: the exact pairs").
"""

from __future__ import annotations

import math

import numpy as np

from lookup.format import UNIT_ROUNDOFF
from tablegen.decomposition import Decomposition
from tablegen.mechanisms.base import Mechanism

S_CELLS = 32  # cells equal in s = e^(-eps0 t), upper bound
T_CELLS = 24  # cells equal in t, upper bound
LOWER_T_CELLS = 96  # cells equal in t per half, pair x2 = 1/2 (none in s: fewer components for joint products)
PAIR_CELLS = 24  # cells of [0, 1], pairs with the other users at 0: 96 raise the live lower bound by at most 0.5%
# but lower the table's lower slices (more declines on the spectral lower path) at twice their cost, 12-16 lose
# cells there (docs/soundness.md, "Laplace: the exact pairs")


def _cells(eps0: float, t_cells: int, s_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """Cells [a, b] of t tiling (0, 1/2): the union of the edges equal in s = e^(-eps0 t),
    t_i = -log(1 + (i / s_cells) (e^(-eps0/2) - 1)) / eps0, and of ``t_cells`` equal in t;
    the first edge exactly 0, the last exactly 1/2.  An edge in s within a tenth of a t-cell of an
    edge in t is dropped (near-equal edges would make cells whose two-point law is all rounding)."""
    in_t = np.linspace(0.0, 0.5, t_cells + 1)
    in_s = -np.log1p(np.arange(1, s_cells) / s_cells * math.expm1(-eps0 / 2)) / eps0
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
    """The exact pairs "other users at 0, the target 1 against 0" and its reverse, then the pair
    (0, 1) with the other users at 1/2 (last: ``parallel_lower`` mixes the pairs whose x2 is
    distinct from x0 and x1); the largest of their bounds is the lower bound."""
    return [exact_pair(eps0, 1.0, 0.0, PAIR_CELLS), exact_pair(eps0, 0.0, 0.0, PAIR_CELLS),
            exact_pair(eps0, 0.0, 0.5, 2 * LOWER_T_CELLS)]


def exact_pair(eps0: float, x0: float, x2: float, cells: int) -> Decomposition:
    """Theorem 5 of arXiv:2504.07414 for the target x0 in {0, 1} against x1 = 1 - x0, the other
    users at x2 in [0, 1] (an edge k / ``cells``): c = P_x2(cell), u = P_x0(cell) / c,
    v = P_x1(cell) / c on the cells (-inf, 0], ``cells`` equal ones of [0, 1], [1, inf), each the
    conditional mean of (u, v) over its cell (conditional Jensen: a lower bound).  Rounding lowers
    G: u pushed down and v up by their error bounds, every mass pushed down, and the mass so taken
    given to the tail beyond x1, where u is smallest and v largest for every y (G smallest at every
    eps), as 1 - (the others' sum) (``math.fsum``: the weights sum to one within an ulp)."""
    if x0 not in (0.0, 1.0) or not 0 <= x2 <= 1 or (x2 * cells) % 1:
        raise ValueError(f"exact_pair needs x0 in {{0, 1}} and x2 an edge k / {cells}, got x0={x0}, x2={x2}")
    edges = np.concatenate([[-np.inf], np.arange(cells + 1) / cells, [np.inf]])  # x2 is an edge
    (c, c_err), (m0, m0_err), (m1, m1_err) = (_mass_with_error(eps0, edges, x) for x in (x2, x0, 1.0 - x0))
    u, v = m0 / c * (1 - m0_err - c_err - 2 * UNIT_ROUNDOFF), m1 / c * (1 + m1_err + c_err + 2 * UNIT_ROUNDOFF)
    c = c * (1 - c_err)
    floor = -1 if x0 == 0.0 else 0  # the tail beyond x1: [1, inf) or (-inf, 0]
    c[floor] = 0.0
    c[floor] = 1.0 - math.fsum(c)
    return Decomposition(u, v, c).merged()


def _mass_with_error(eps0: float, edges: np.ndarray, x: float) -> tuple[np.ndarray, np.ndarray]:
    """P(a < x + Z < b) for Z ~ Lap(1/eps0) and each cell [a, b] of consecutive ``edges`` (none
    holding x inside): (1/2) e^(-eps0 near) (1 - e^(-eps0 (b - a))), near = min(|a - x|, |b - x|),
    without cancellation; and a bound on its relative error (near and b - a each rounded once, then
    a product, exp and expm1, each within an ulp: 8 u (1 + eps0 near) is generous)."""
    a, b = edges[:-1], edges[1:]
    near = np.minimum(np.abs(a - x), np.abs(b - x))
    return 0.5 * np.exp(-eps0 * near) * -np.expm1(-eps0 * (b - a)), 8 * UNIT_ROUNDOFF * (1 + eps0 * near)


LAPLACE = Mechanism(
    "laplace",
    "Laplace mechanism on [0, 1], scale 1/eps0",
    "Su, Cheng, Wang, arXiv:2504.07414, Appendix C and Theorem 5",
    laplace_upper,
    laplace_lower,
)
