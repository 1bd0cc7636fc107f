"""Decompositions: the law of the privacy amplification random variable G as data.

Every bound in the papers has the form (arXiv:2504.07414 Theorems 4 and 5)

    delta(eps) = (1/n) E[(G_1 + ... + G_n)_+],   G_i i.i.d.,

and G is always built from a decomposition of the local randomizer into components j with
weights c_j and likelihood ratios u_j = R(x0)(j)/c_j, v_j = R(x1)(j)/c_j:

    G = u_j - e^eps * v_j   with probability c_j,      G = 0 with probability 1 - sum_j c_j.

* blanket / general clone upper bound: c_j = min_x R(x)(j) (Theorem 4, privacy blanket);
* lower bound of Theorem 5: c_j = R(x2)(j), summing to one.

Because G is affine in alpha = e^eps for each component, a mechanism is a fixed triple of
arrays (u, v, c) per eps0; the engine evaluates ``values(eps)`` for any eps.  Joint
composition (section 6) is the Cartesian product of decompositions and parallel composition
(section 7) the weighted mixture.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_COMPONENTS = 100_000  # joint products are merged (safely) down to this many components


@dataclass(frozen=True)
class Decomposition:
    """Components (u_j, v_j, c_j) of G = u - e^eps v w.p. c; the rest of the mass is G = 0."""

    u: np.ndarray
    v: np.ndarray
    c: np.ndarray

    def __post_init__(self) -> None:
        u, v, c = (np.atleast_1d(np.asarray(a, dtype=float)) for a in (self.u, self.v, self.c))
        if not (u.shape == v.shape == c.shape) or u.ndim != 1:
            raise ValueError("decomposition arrays u, v, c must be 1-d and of equal length")
        if np.any(c < 0) or c.sum() > 1 + 1e-12:
            raise ValueError(f"component weights c must be >= 0 and sum to <= 1, sum={c.sum()!r}")
        keep = c > 0
        object.__setattr__(self, "u", u[keep])
        object.__setattr__(self, "v", v[keep])
        object.__setattr__(self, "c", c[keep])

    @property
    def rest(self) -> float:
        """Mass of the atom G = 0 (users who fall in no listed component)."""
        return max(0.0, 1.0 - float(self.c.sum()))

    def atoms(self, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unmerged atoms of G for every eps at once: values u_j - e^eps v_j and then 0, shape
        eps.shape + (components + 1,), and their probabilities c_j and then the rest."""
        alpha = np.exp(np.asarray(eps, dtype=float))[..., None]
        return np.append(self.u, 0.0) - alpha * np.append(self.v, 0.0), np.append(self.c, self.rest)

    def law(self, eps: float) -> tuple[np.ndarray, np.ndarray]:
        """Atoms (values, probabilities) of G at eps, equal values merged, zero-mass dropped."""
        alpha = np.exp(eps)
        values = np.append(self.u - alpha * self.v, 0.0)
        probs = np.append(self.c, self.rest)
        uniq, inverse = np.unique(values, return_inverse=True)
        merged = np.bincount(inverse, weights=probs, minlength=uniq.size)
        keep = merged > 0
        return uniq[keep], merged[keep]

    def merged(self) -> Decomposition:
        """The same law with components of identical (u, v) merged (smaller, same G)."""
        keys = np.stack([self.u, self.v], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        c = np.bincount(inverse.ravel(), weights=self.c, minlength=len(uniq))
        return Decomposition(uniq[:, 0], uniq[:, 1], c)


def from_pairs(rows: list[tuple[float, float, float]]) -> Decomposition:
    """Build a decomposition from (u, v, c) rows."""
    arr = np.asarray(rows, dtype=float).reshape(-1, 3)
    return Decomposition(arr[:, 0], arr[:, 1], arr[:, 2]).merged()


def joint(parts: list[Decomposition], up: bool = True, max_components: int = MAX_COMPONENTS) -> Decomposition:
    """Joint composition (arXiv:2504.07414 section 6): product of decompositions.

    The blanket of a product randomizer is the product of the blankets,
    min_(x1,x2) R1(x1)(y1) R2(x2)(y2) = c1(y1) c2(y2), so its components are the pairs of
    components with c = c1 c2, u = u1 u2, v = v1 v2 (Example 6.0); the remainder
    1 - sum c1 c2 is the atom G = 0.  For lower-bound pairs (weights summing to one) the same
    product gives the law of G for the product pair.

    The product has prod_i |part_i| components (194^4 for four Laplace parts), so after each
    factor the components are merged by ``coarsened`` (toward larger G for upper bounds, ``up``;
    to conditional means for lower bounds) until at most ``max_components`` remain.
    """
    product, width = Decomposition(np.ones(1), np.ones(1), np.ones(1)), 2.0**-26
    for part in parts:  # each factor only spreads the cells, so the next merge starts at this width
        u, v, c = (np.outer(getattr(product, a), getattr(part, a)).ravel() for a in "uvc")
        product, width = coarsened(u, v, c, up, max_components, width)
    return product


def coarsened(
    u: np.ndarray, v: np.ndarray, c: np.ndarray, up: bool, max_components: int, width: float = 2.0**-26
) -> tuple[Decomposition, float]:
    """Components merged on a grid of log u and log v, each cell moved the safe way.

    Components whose log u and log v fall in the same cell of width w are merged, weights added:

    * ``up`` (blanket decompositions, upper bounds): u and v become the cell's largest u and
      smallest v, so every G = u - e^eps v moves up for every eps on the same coupling;
      E[(G_1 + ... + G_n)_+] is nondecreasing in each G_i, so delta only grows.
    * lower bounds: u and v become the cell's c-weighted means, so the merged G' is E[G | cell]
      on the same coupling and, (x)_+ being convex, E[(G'_1 + ... + G'_n)_+] <=
      E[(G_1 + ... + G_n)_+] (conditional Jensen).  For a Theorem 5 pair this is the pair of the
      randomizer that reports one output per cell: post-processing, as data processing says.
      The means are rounded in floating point, so each is moved by its rounding bound
      ((m + 4) 2^-52 relative for a cell of m components), u down and v up: G' stays below
      E[G | cell] also after rounding.

    Components of weight 0 are dropped first.  w starts at ``width`` (by default 2^-26: only
    components within 1.5e-8 relative of each other can merge) and doubles, merging the merged
    components again, until at most ``max_components`` remain (once w exceeds the spread of
    log u and log v, one cell holds everything); the decomposition is returned with the w used.
    """
    if max_components < 1:
        raise ValueError(f"max_components must be >= 1, got {max_components!r}")
    keep = c > 0
    u, v, c = u[keep], v[keep], c[keep]
    while u.size > 0:
        key = _cell_keys(_log_or_below(u), _log_or_below(v), width)
        if key is not None:
            u, v, c = _merge_cells(u, v, c, key, up)  # merging merged cells again stays safe
            if u.size <= max_components:
                break
        width *= 2.0
    return Decomposition(u, v, c), width


def _merge_cells(
    u: np.ndarray, v: np.ndarray, c: np.ndarray, key: np.ndarray, up: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One component per distinct key: extreme u and v (``up``) or c-weighted means pushed by
    their rounding bound (u down, v up)."""
    order = np.argsort(key)
    starts = np.flatnonzero(np.diff(key[order], prepend=key[order[0]] - 1))
    u, v, c = u[order], v[order], c[order]
    mass = np.add.reduceat(c, starts)
    if up:
        return np.maximum.reduceat(u, starts), np.minimum.reduceat(v, starts), mass
    rounding = (np.diff(np.append(starts, key.size)) + 4) * 2.0**-52
    mean_u = np.add.reduceat(c * u, starts) / mass
    mean_v = np.add.reduceat(c * v, starts) / mass
    return mean_u * (1 - rounding), mean_v * (1 + rounding), mass


def _log_or_below(x: np.ndarray) -> np.ndarray:
    """log x, with x = 0 mapped one below the smallest finite log (any cell choice is safe)."""
    logs = np.log(np.where(x > 0, x, 1.0))
    return np.where(x > 0, logs, logs[x > 0].min(initial=0.0) - 1.0)


def _cell_keys(log_u: np.ndarray, log_v: np.ndarray, width: float) -> np.ndarray | None:
    """One int64 per component naming its (log u, log v) cell, the grid starting at the
    smallest values; None if the grid is too fine for int64 keys."""
    ku, kv = np.floor((log_u - log_u.min()) / width), np.floor((log_v - log_v.min()) / width)
    span_v = float(kv.max()) + 1
    if (float(ku.max()) + 1) * span_v >= 2.0**62:
        return None
    return ku.astype(np.int64) * int(span_v) + kv.astype(np.int64)


def parallel(parts: list[Decomposition], weights: list[float]) -> Decomposition:
    """Parallel composition (section 7): the mixture of decompositions with the given weights."""
    w = np.asarray(weights, dtype=float)
    if len(parts) != len(w) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
        raise ValueError(f"weights must be >= 0, one per part, and sum to 1, got weights={weights!r}")
    u = np.concatenate([p.u for p in parts])
    v = np.concatenate([p.v for p in parts])
    c = np.concatenate([wi * p.c for wi, p in zip(w, parts, strict=True)])
    return Decomposition(u, v, c).merged()
