"""Mean-preserving randomized rounding of G onto a lattice, and exponential tilting.

Rounding rule (certified, docs/engine.md): an atom at x = value/step lying between the
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

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.special import logsumexp

from tablegen.engine.search import root

REFINE_LEVELS = 10  # refine_step halves a step at most this many times (1024-fold)


@dataclass(frozen=True)
class AtomLaw:
    """A finite law: ``points`` with probabilities ``pmf``; moments, mgf and tilting.

    A rounded law lives on a lattice that can be millions of cells wide with a handful of
    atoms on it (a fine step, atoms far apart), so everything but the dense tilted pmf is
    computed on the cells that carry mass (``support``, found once per law).
    """

    points: np.ndarray
    pmf: np.ndarray

    @cached_property
    def cells(self) -> np.ndarray:
        """Indices of the atoms with positive mass."""
        return np.flatnonzero(self.pmf > 0)

    @cached_property
    def support(self) -> tuple[np.ndarray, np.ndarray]:
        """(points, probabilities) of the atoms with positive mass."""
        return self.points[self.cells], self.pmf[self.cells]

    def log_mgf(self, lam: np.ndarray | float) -> np.ndarray:
        """log E[e^(lam K)] for an array of lam (log-sum-exp, no overflow)."""
        lam = np.atleast_1d(np.asarray(lam, dtype=float))
        pts, probs = self.support
        return logsumexp(np.log(probs)[None, :] + lam[:, None] * pts[None, :], axis=1)

    def tilted_pmf(self, lam: float) -> np.ndarray:
        """Probabilities of the Esscher-tilted law h_k e^(lam k) / M(lam)."""
        pts, probs = self.support
        logw = np.log(probs) + lam * pts
        w = np.exp(logw - logw.max())
        out = np.zeros_like(self.pmf)
        out[self.cells] = w / w.sum()
        return out

    def tilted(self, lam: float) -> AtomLaw:
        """The Esscher-tilted law."""
        return AtomLaw(self.points, self.tilted_pmf(lam))

    def mean(self) -> float:
        pts, probs = self.support
        return float(pts @ probs)

    def variance(self) -> float:
        pts, probs = self.support
        d = pts - self.mean()
        return float((d * d) @ probs)

    @property
    def last(self) -> float:
        return float(self.support[0].max())


@dataclass(frozen=True)
class LatticeLaw(AtomLaw):
    """A law on integer ``points`` (lattice units, ascending), from ``first`` on: all the cells
    from first on (``from_pmf``) or only those with mass (``randomized_rounding``: a fine
    lattice can span millions of cells with a handful of atoms)."""

    first: int

    @classmethod
    def from_pmf(cls, first: int, pmf: np.ndarray) -> LatticeLaw:
        return cls(first + np.arange(pmf.size, dtype=float), pmf, first)

    @property
    def last(self) -> int:
        return int(self.points[-1])

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
        return cls(offset, float(align_step(np.float64(gap), np.float64(max_step))))

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
    cells, where = np.unique(np.concatenate([k, k + 1]), return_inverse=True)
    pmf = np.bincount(where.ravel(), np.concatenate([probs * (1 - t), probs * t]), cells.size)
    nz = np.flatnonzero(pmf > 0)
    off_lattice = float(probs[t > 0].sum())
    return LatticeLaw(cells[nz], pmf[nz], int(cells[nz[0]])), off_lattice


def saddlepoint(law: AtomLaw, target: float = 0.0) -> float:
    """lambda >= 0 at which the tilted mean equals ``target`` (0 if the mean is already >= it).

    Any lambda >= 0 keeps the tilting identity exact; this one centres the window on the
    threshold that delta sees.  Solved on the points that carry mass (a rounded law has at most
    two per atom, however many cells lie between them).
    """
    law = AtomLaw(*law.support)
    pts = law.points

    def tilted_mean(lam: float) -> float:
        return law.tilted(lam).mean() - target

    if law.last <= target or tilted_mean(0.0) >= 0:
        return 0.0

    hi = 1.0 / max(1.0, float(pts.max() - pts.min()))
    while tilted_mean(hi) < 0:
        hi *= 2.0
    return root(lambda lam: -tilted_mean(lam), 0.0, hi)


def log_probs(probs: np.ndarray) -> np.ndarray:
    """log of the probabilities, -inf where one is 0 (no warning)."""
    with np.errstate(divide="ignore"):
        return np.where(probs > 0, np.log(np.where(probs > 0, probs, 1.0)), -np.inf)


def tilted_log_weights(points: np.ndarray, probs: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log of the Esscher-tilted weights and log M(lambda), row-wise (log-sum-exp)."""
    expo = log_probs(probs) + lam[:, None] * points
    top = np.max(expo, axis=1, keepdims=True)
    log_m = top[:, 0] + np.log(np.sum(np.exp(expo - top), axis=1))
    return expo - log_m[:, None], log_m


def saddlepoint_rows(points: np.ndarray, probs: np.ndarray, target: np.ndarray, positive: np.ndarray,
                     rtol: float = 1e-12, start: np.ndarray | None = None) -> np.ndarray:
    """lambda >= 0 with tilted mean = target, per row: safeguarded Newton on the increasing
    tilted mean, to a relative step ``rtol``, from ``start`` (0 where not given: e.g. the
    saddlepoint of a nearby law, which saves most of the iterations).

    Any lambda keeps the tilting identity exact; this one only centres the tilted law.
    """
    logp = log_probs(probs)  # once: the iterations only change lambda

    def moments(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        expo = logp + lam[:, None] * points
        w = np.exp(expo - np.max(expo, axis=1, keepdims=True))
        w /= np.sum(w, axis=1, keepdims=True)
        mean = np.sum(w * points, axis=1)
        return mean, np.sum(w * (points - mean[:, None]) ** 2, axis=1)

    top = np.max(np.where(probs > 0, points, -np.inf), axis=1)
    reachable = positive & (top > target)
    gap_goal = np.log(np.where(reachable, top - target, 1.0))
    scale = 1.0 / np.maximum(np.ptp(points, axis=1), 1.0)
    lo = np.zeros(points.shape[0])
    hi = np.full_like(lo, np.inf)
    lam = lo.copy() if start is None else np.where(reachable, np.maximum(start, 0.0), 0.0)
    for _ in range(100):
        mean, var = moments(lam)
        below = mean < target
        lo, hi = np.where(below, lam, lo), np.where(below, hi, lam)
        var = np.maximum(var, 1e-300)
        step = lam + (target - mean) / var
        # Newton on log(top - mean), nearly linear where the tilted law piles onto its top point
        # (eps near eps0), where Newton on the mean crawls by bisection
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = np.where(reachable, top - mean, 1.0)
            log_step = lam + gap * (np.log(gap) - gap_goal) / var
        inside = (step > lo) & (step < hi)
        log_inside = (log_step > lo) & (log_step < hi)
        fallback = np.where(np.isfinite(hi), 0.5 * (lo + hi), 2 * lam + scale)
        new = np.where(reachable, np.where(inside, step, np.where(log_inside, log_step, fallback)), 0.0)
        # rows stop once they converge, or once Newton's own step is that small (at a mean equal
        # to the target to the last bit the bracket closes on lambda and only bisection is left)
        tol = rtol * np.maximum(lam, 1e-300)
        done = (np.abs(new - lam) <= tol) | (reachable & (np.abs(step - lam) <= tol))
        if np.all(done):
            break
        lam = np.where(done, lam, new)
    return lam


def tilted_moments(values: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row of ``values`` (B, J): the saddlepoint lambda of the unrounded law (tilted mean 0;
    0 where G is never positive or its mean is not below 0), log M(lambda), the tilted weights and
    the tilted variance."""
    positive = np.max(values, axis=1) > 0
    lam = saddlepoint_rows(values, probs, np.zeros(values.shape[0]), positive, rtol=1e-4)
    logw, log_m = tilted_log_weights(values, probs, lam)
    w = np.exp(logw)
    mean = np.sum(w * values, axis=1)
    return lam, log_m, w, np.sum(w * (values - mean[:, None]) ** 2, axis=1)


def align_step(gap: np.ndarray, step: np.ndarray) -> np.ndarray:
    """A step in [step/2, step] dividing ``gap`` (the distance between the two heaviest atoms)
    when gap >= step/2, so that both lie on the lattice; ``step`` itself otherwise."""
    divides = gap >= step / 2
    return np.where(divides, gap / np.ceil(np.where(divides, gap, 1.0) / step), step)


def refine_step(values: np.ndarray, probs: np.ndarray, step: np.ndarray, half: bool, cells: float,
                n: np.ndarray, moments: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """``step``, or a finer one where rounding on it would cost the bound more than it should;
    per row of ``values`` (B, J) with probabilities ``probs`` (J,), for sums of up to ``n`` (B,)
    users.

    delta is decided by G tilted to mean 0 (the saddlepoint lambda of the unrounded law).  A
    step sized from sd(G) alone can be far too coarse for it: at large eps0 the k-RR law has a
    rare atom at 1 - e^eps e^eps0 that dominates sd(G) and has almost no tilted weight, while
    the atoms that decide the tail (1 - e^eps and e^eps0 - e^eps) are rounded over cells wider
    than themselves.  The rounding noise of a step is the exact variance of the randomized
    rounding under the tilted weights w_j, V = sum_j w_j t_j (1 - t_j) step^2 (t_j the atoms'
    fractional positions on the lattice the caller builds: anchored at the heaviest atom, or half
    a cell from it when ``half``, the step aligned by ``align_step``).  Its share of the tilted
    variance is V / var_lambda and, to second order, it inflates the tilted expectation by
    e^(n lambda^2 V / 2).  Where both the share and n lambda^2 V / 2 exceed 1 / cells^2, the step
    is halved (up to REFINE_LEVELS times) until either is below a quarter of that.  Any step
    keeps every bound certified (the rounding is a mean-preserving spread); this is for
    tightness only.  ``moments``: ``tilted_moments(values, probs)`` where the caller has them.
    """
    lam, _, w, var = tilted_moments(values, probs) if moments is None else moments
    order = np.argsort(probs)[::-1]
    first = values[:, order[:1]]
    gap = np.abs(values[:, order[1:2]] - first) if probs.size > 1 else np.zeros_like(first)
    candidates = step[:, None] * 2.0 ** -np.arange(REFINE_LEVELS + 1)  # (B, L)
    aligned = align_step(gap, candidates)[:, :, None]
    x = (values - first)[:, None, :] / aligned + (0.5 if half else 0.0)
    t = x - np.floor(x)
    noise = np.sum(w[:, None, :] * t * (1 - t), axis=2) * aligned[:, :, 0] ** 2
    cost = np.minimum(noise / np.maximum(var, 1e-300)[:, None], (0.5 * n * lam**2)[:, None] * noise)
    fine = np.append(cost <= 0.25 / cells**2, np.ones((values.shape[0], 1), bool), axis=1)
    level = np.where(cost[:, 0] <= 1.0 / cells**2, 0, np.minimum(np.argmax(fine, axis=1), REFINE_LEVELS))
    return candidates[np.arange(values.shape[0]), level]
