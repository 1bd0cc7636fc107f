"""Mean-preserving randomized rounding of G onto a lattice, and exponential tilting.

Rounding rule (certified, DESIGN.md section 2): an atom at x = value/step lying between the
integers k and k + 1 is replaced by k with probability 1 - t and k + 1 with probability t,
t = x - k.  The rounded G' = G + eta with E[eta | G] = 0, so S' = S + N is a mean-preserving
spread of S and, (.)_+ being convex, E[S'_+] >= E[S_+] (Jensen conditionally on G): an upper
bound with no shift of the mean, unlike rounding every atom up.  The price is the variance
sum_j p_j t_j (1 - t_j) <= step^2 / 4 per user, negligible for step = sd(G) / resolution.
Given G, N is a sum of n independent zero-mean terms each in an interval of length one
(lattice units), which is what the lower-bound correction uses (Hoeffding).

Tilting: for lambda >= 0, E[f(S)] = M(lambda)^n E_lambda[f(S) e^(-lambda S)] with
M(lambda) = E[e^(lambda G')] and the tilted law h_k e^(lambda k) / M(lambda) (Esscher).
Choosing lambda so that the tilted mean is 0 moves the tail that delta sees to the centre of
the window, so the FFT works at full relative precision whatever delta is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from tablegen.engine.search import root


@dataclass(frozen=True)
class AtomLaw:
    """A finite law: ``points`` with probabilities ``pmf``; moments, mgf and tilting."""

    points: np.ndarray
    pmf: np.ndarray

    def log_mgf(self, lam: np.ndarray | float) -> np.ndarray:
        """log E[e^(lam K)] for an array of lam (log-sum-exp, no overflow)."""
        lam = np.atleast_1d(np.asarray(lam, dtype=float))
        keep = self.pmf > 0
        logp = np.log(self.pmf[keep])
        pts = self.points[keep]
        return logsumexp(logp[None, :] + lam[:, None] * pts[None, :], axis=1)

    def tilted_pmf(self, lam: float) -> np.ndarray:
        """Probabilities of the Esscher-tilted law h_k e^(lam k) / M(lam)."""
        logw = np.log(np.where(self.pmf > 0, self.pmf, 1.0)) + lam * self.points
        logw[self.pmf <= 0] = -np.inf
        w = np.exp(logw - logw.max())
        return w / w.sum()

    def tilted(self, lam: float) -> AtomLaw:
        """The Esscher-tilted law."""
        return AtomLaw(self.points, self.tilted_pmf(lam))

    def mean(self) -> float:
        return float(self.points @ self.pmf)

    def variance(self) -> float:
        d = self.points - self.mean()
        return float((d * d) @ self.pmf)

    @property
    def last(self) -> float:
        return float(self.points[self.pmf > 0].max())


@dataclass(frozen=True)
class LatticeLaw(AtomLaw):
    """A law on the integers first, first + 1, ... (lattice units)."""

    first: int

    @classmethod
    def from_pmf(cls, first: int, pmf: np.ndarray) -> LatticeLaw:
        return cls(first + np.arange(pmf.size, dtype=float), pmf, first)

    @property
    def last(self) -> int:
        return self.first + self.pmf.size - 1

    def tilted(self, lam: float) -> LatticeLaw:
        return LatticeLaw(self.points, self.tilted_pmf(lam), self.first)


@dataclass(frozen=True)
class Grid:
    """The lattice offset + step * Z, chosen so that the two heaviest atoms lie on it exactly."""

    offset: float
    step: float

    @classmethod
    def aligned(cls, values: np.ndarray, probs: np.ndarray, max_step: float) -> Grid:
        """Offset at the heaviest atom; a step in [max_step/2, max_step] dividing the gap to the
        second heaviest when that gap is at least max_step/2, else max_step."""
        order = np.argsort(probs)[::-1]
        offset = float(values[order[0]])
        gap = abs(float(values[order[1]]) - offset) if values.size > 1 else 0.0
        if gap < max_step / 2:
            return cls(offset, max_step)
        return cls(offset, gap / math.ceil(gap / max_step))

    def coordinates(self, values: np.ndarray) -> np.ndarray:
        """(values - offset) / step, points within 1e-13 (relative) of an integer snapped onto it."""
        x = (np.asarray(values, dtype=float) - self.offset) / self.step
        near = np.round(x)
        return np.where(np.abs(x - near) <= 1e-13 * np.maximum(1.0, np.abs(x)), near, x)


def randomized_rounding(x: np.ndarray, probs: np.ndarray) -> tuple[LatticeLaw, float]:
    """Mean-preserving randomized rounding of atoms at lattice coordinates ``x`` to Z.

    Returns the law and the probability that a user's atom is off the lattice (q): only those
    users carry rounding noise.
    """
    k = np.floor(x)
    t = x - k
    first = int(k.min())
    idx = (k - first).astype(np.int64)
    size = int(idx.max()) + 2
    pmf = np.bincount(idx, probs * (1 - t), size) + np.bincount(idx + 1, probs * t, size)
    nz = np.flatnonzero(pmf > 0)
    off_lattice = float(probs[t > 0].sum())
    return LatticeLaw.from_pmf(first + int(nz[0]), pmf[nz[0] : nz[-1] + 1]), off_lattice


def saddlepoint(law: AtomLaw, target: float = 0.0) -> float:
    """lambda >= 0 at which the tilted mean equals ``target`` (0 if the mean is already >= it).

    Any lambda >= 0 keeps the tilting identity exact; this one centres the window on the
    threshold that delta sees.
    """
    pts = law.points

    def tilted_mean(lam: float) -> float:
        return law.tilted(lam).mean() - target

    if law.last <= target or tilted_mean(0.0) >= 0:
        return 0.0

    hi = 1.0 / max(1.0, float(pts.max() - pts.min()))
    while tilted_mean(hi) < 0:
        hi *= 2.0
    return root(lambda lam: -tilted_mean(lam), 0.0, hi)
