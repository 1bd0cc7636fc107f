"""One shuffled round's certified privacy profile, made ready for a privacy-loss distribution.

Input: points (e_j, u_j) with e_j >= 0 and u_j >= delta(e_j), the hockey-stick divergence
delta(e) = sup_S P(S) - e^e Q(S) of the round's output laws P, Q on two neighbouring datasets,
for BOTH orders of the pair (the decomposition bounds of arXiv:2504.07414 Thm 4 and
arXiv:2012.12803 Thm 3.2 are symmetric: swapping x0 and x1 swaps atoms of G of equal
probability, so one certified curve bounds both orders).  Output: the vertices of a convex,
non-increasing function of x = e^eps that lies above the exact delta_{P||Q} at every real eps,
positive and negative.  Each step is pushed the safe way:

1. monotone: u_j <- min over e_i <= e_j of u_i (the exact profile is non-increasing);
2. negative eps (docs/composition.md): for e >= 0,
   delta_{P||Q}(-e) = 1 - e^-e (1 - delta_{Q||P}(e)) <= 1 - e^-e (1 - u(e)),
   so every positive point gives a negative one, an upper bound as well;
3. the anchor (x = 0, delta = 1): delta_{P||Q}(-inf) = P(Q > 0) <= 1;
4. the lower convex hull in x of these upper points: the exact profile is convex in x and lies
   below every point, so below the largest convex function that does (the hull), and below any
   chord between two points.  Beyond the last point the hull is continued flat (the exact profile
   is non-increasing); that constant becomes the PLD's infinity mass.

The grid of the engine route (``tail_edge``, ``sample``) is uniform on [0, e_hi] (for the shuffled
Gaussian also geometric near 0, on a finer lattice: ``tablegen.compose.core``), where e_hi is
the first probed eps whose certified delta is <= ``TAIL``; above e_hi the profile is cut (its
delta, <= TAIL, goes to the infinity mass), so a pure eps0-LDP round whose profile reaches TAIL
only at eps0 keeps its whole support [-eps0, eps0].
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TAIL = 1e-30  # profile cut: delta beyond it goes to the infinity mass (T * TAIL is negligible)
POINTS = 100  # grid intervals on [0, e_hi]
EDGE_BISECTIONS = 4  # log-scale bisection steps locating e_hi (to a factor 2^(1/16))

Profile = Callable[[np.ndarray], np.ndarray]  # eps array -> certified delta upper bounds


@dataclass(frozen=True)
class Vertices:
    """Hull vertices: losses ``index * discretization`` (ascending) and their deltas (non-increasing)."""

    index: np.ndarray
    delta: np.ndarray
    discretization: float


def tail_edge(profile: Profile, eps0: float) -> float:
    """e_hi: an evaluated eps with certified delta <= TAIL (eps0 if none below it is found).

    Halve from eps0 until delta exceeds TAIL, then bisect in log scale; the returned end was
    evaluated (or is eps0)."""
    hi = eps0
    lo = eps0 / 2
    while lo > eps0 * 1e-12 and _at(profile, lo) <= TAIL:
        hi, lo = lo, lo / 2
    for _ in range(EDGE_BISECTIONS):
        mid = math.sqrt(lo * hi)
        if _at(profile, mid) <= TAIL:
            hi = mid
        else:
            lo = mid
    return hi


def _at(profile: Profile, eps: float) -> float:
    return float(profile(np.array([eps]))[0])


def sample(profile: Profile, e_hi: float, discretization: float, points: int = POINTS,
           near_zero: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(index, upper): the profile at eps = index * discretization on a uniform grid from 0 to at
    least e_hi, with about ``points`` intervals (the step a multiple of the discretization), and at
    ``near_zero`` more lattice points spaced geometrically from one lattice step to e_hi / 4 (where
    a profile with a long tail has its answers: the shuffled Gaussian's e_hi is 47x its eps at delta
    1e-6 at sigma 1, n 1e4).  Any points serve: the hull of upper bounds lies above the profile."""
    step = max(1, math.floor(e_hi / (points * discretization) * (1 + 1e-12)))
    count = math.ceil(e_hi / (step * discretization) * (1 - 1e-12))
    index = np.arange(count + 1) * step
    if near_zero:
        geometric = np.geomspace(1, max(index[-1] // 4, 2), near_zero)
        index = np.union1d(index, np.round(geometric).astype(np.int64))
    return index, np.asarray(profile(index * discretization), dtype=float)


def envelope(index: np.ndarray, upper: np.ndarray, discretization: float) -> Vertices:
    """Steps 1-4 of the module docstring for points at eps = index * discretization >= 0."""
    order = np.argsort(index)
    index = np.asarray(index, dtype=np.int64)[order]
    upper = np.minimum.accumulate(np.clip(np.asarray(upper, dtype=float)[order], 0.0, 1.0))
    eps = index * discretization
    # delta(-e) <= 1 - e^-e (1 - u(e)) = -expm1(-e) + e^-e u(e)
    negative = -np.expm1(-eps) + np.exp(-eps) * upper
    all_index = np.concatenate([-index[::-1], index])
    all_delta = np.concatenate([negative[::-1], upper])
    keep = np.concatenate([[True], np.diff(all_index) > 0])  # eps = 0 appears twice
    all_index, all_delta = all_index[keep], all_delta[keep]
    hull = _lower_hull(np.exp(all_index * discretization), all_delta)
    return Vertices(all_index[hull], all_delta[hull], discretization)


def _lower_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the vertices of the lower convex hull of (0, 1) and (x_i, y_i), x ascending,
    the anchor (0, 1) left out (Andrew's monotone chain)."""
    hull: list[int] = [-1]  # -1: the anchor

    def point(i: int) -> tuple[float, float]:
        return (0.0, 1.0) if i < 0 else (float(x[i]), float(y[i]))

    for i in range(x.size):
        cx, cy = point(i)
        while len(hull) >= 2:
            (ax, ay), (bx, by) = point(hull[-2]), point(hull[-1])
            if (bx - ax) * (cy - ay) - (by - ay) * (cx - ax) > 0:
                break  # a strict left turn: b stays
            hull.pop()
        hull.append(i)
    return np.array(hull[1:], dtype=np.int64)


def masses(v: Vertices) -> np.ndarray:
    """P-probabilities of the vertex losses of the connect-the-dots PLD: the profile's slope in
    x = e^eps jumps by p_j e^(-l_j) at x_j, so p_j = x_j (slope right - slope left)."""
    x = np.exp(v.index * v.discretization)
    xs = np.concatenate([[0.0], x])
    ys = np.concatenate([[1.0], v.delta])
    slopes = np.concatenate([np.diff(ys) / np.diff(xs), [0.0]])
    return np.maximum(x * np.diff(slopes), 0.0)
