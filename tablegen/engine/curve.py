"""Certified eps(delta) for a whole delta axis at once: what one table cell-curve costs.

The table needs eps at many deltas for the same (mechanism, eps0, n).  Searching each delta
to a tight relative tolerance (``eps_bounds``) repeats most of the work, so here every eps is
taken from a geometric ladder e_j = LADDER**j and the evaluations are shared across deltas:

* upper: the smallest ladder point e_j whose certified delta_upper(e_j) <= delta (each
  answer was evaluated, so it is certified; rounding to the ladder only makes it larger),
  capped at eps0;
* lower: the largest ladder point below it whose lower-bound delta exceeds delta (the true
  eps is then above it), 0 if none down to the floor.

The answer is therefore within one ladder step (0.2%) of a full search, at a few FFTs per
delta.  Afterwards the curve is made monotone the safe way: an upper bound certified for a
smaller delta is also one for a larger delta (cumulative minimum), a lower bound for a larger
delta also one for a smaller delta.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tablegen import validate
from tablegen.engine.accountant import LOWER_RESOLUTION, RESOLUTION, Query, guess_eps, trivial_eps0
from tablegen.mechanisms import Mechanism

LADDER = 1.002  # ratio of consecutive eps values tried
FLOOR = 1e-9  # smallest eps tried, relative to eps0 (as in eps_bounds)
MAX_STEPS = 40  # evaluations per delta before taking the best certified point so far


@dataclass(frozen=True)
class Curve:
    """Certified eps (upper) and lower bounds (NaN where not computed) for each delta."""

    upper: np.ndarray
    lower: np.ndarray
    evaluations: int  # upper-bound FFT evaluations
    lower_evaluations: int


def eps_curve(mechanism: str | Mechanism, *, eps0: float, n: int, deltas: Sequence[float],
              lower: bool = True, resolution: float = RESOLUTION,
              lower_resolution: float = LOWER_RESOLUTION, **params: Any) -> Curve:
    """Certified eps(delta) and lower bounds for every delta in ``deltas`` (any order).

    ``resolution`` / ``lower_resolution``: lattice cells per standard deviation of G for the
    upper / lower bound; any value is certified, larger ones are tighter and slower.
    """
    # table builds stay on the FFT path: the spectral path's half-cell lattice moves some ladder
    # crossings by one or two steps, and published tables are verified against this function
    q = Query(mechanism, eps0, n, params, resolution, lower_resolution, spectral=False)
    targets = np.array([validate.open_unit("delta", d) for d in deltas], dtype=float)
    ladder = _Ladder(q)
    upper = np.empty_like(targets)
    tops = np.empty(targets.size, dtype=np.int64)
    for i in np.argsort(-targets, kind="stable"):  # largest delta (smallest eps) first
        upper[i], tops[i] = ladder.certified(targets[i])
    low = _lower_values(ladder, targets, tops) if lower else np.full_like(targets, np.nan)
    order = np.argsort(targets, kind="stable")
    upper[order] = np.minimum.accumulate(upper[order])
    return Curve(upper, low, ladder.evaluations, ladder.lower_evaluations)


def lower_curve(mechanism: str | Mechanism, *, eps0: float, n: int, deltas: Sequence[float],
                upper: Sequence[float], lower_resolution: float = LOWER_RESOLUTION, **params: Any) -> np.ndarray:
    """Lower bounds for every delta below given certified eps ``upper`` (e.g. from a slice):
    the largest ladder eps below each upper value whose lower-bound delta exceeds delta."""
    q = Query(mechanism, eps0, n, params, RESOLUTION, lower_resolution, spectral=False)
    targets = np.array([validate.open_unit("delta", d) for d in deltas], dtype=float)
    ladder = _Ladder(q)
    # the first ladder index at or above each upper value: every index below it is below upper
    tops = np.array([min(ladder.top + 1, max(ladder.floor, math.ceil(math.log(u) / math.log(LADDER))))
                     for u in upper], dtype=np.int64)
    return _lower_values(ladder, targets, tops)


def _lower_values(ladder: _Ladder, targets: np.ndarray, tops: np.ndarray) -> np.ndarray:
    """Lower bounds below ladder indices ``tops``, made monotone the safe way (NaN: no pair)."""
    low = np.full_like(targets, np.nan)
    if not ladder.q.lower:
        return low
    for i in np.argsort(-targets, kind="stable"):
        low[i] = ladder.lower_bound(targets[i], int(tops[i]))
    order = np.argsort(targets, kind="stable")[::-1]
    low[order] = np.maximum.accumulate(low[order])
    return low


class _Ladder:
    """Memoised log delta bounds at ladder points e_j = LADDER**j, j in [floor, top)."""

    def __init__(self, q: Query) -> None:
        self.q = q
        self.floor = math.ceil(math.log(q.eps0 * FLOOR) / math.log(LADDER))
        self.top = math.floor(math.log(q.eps0) / math.log(LADDER))  # e_top <= eps0
        self.log_upper: dict[int, float] = {}
        self.log_lower: dict[tuple[int, int], float] = {}
        self.evaluations = 0
        self.drift = 0  # ladder steps between the last answer and its Bahadur-Rao guess
        self.lower_drift = -1  # ladder steps from the last upper answer down to its lower bound
        self.lower_evaluations = 0
        self.lower_pair = 0  # the pair that certified the last lower bound is tried first
        # certified delta at eps0: 0 except for an (eps0, delta0)-LDP randomizer's n delta0 term
        self.delta_at_eps0 = q.delta_upper(q.eps0) if q.mechanism.extra_delta is not None else 0.0

    @staticmethod
    def eps(j: int) -> float:
        return math.exp(j * math.log(LADDER))

    def upper_at(self, j: int) -> float:
        if j not in self.log_upper:
            self.evaluations += 1
            self.log_upper[j] = _log(self.q.delta_upper(self.eps(j)), nan=math.inf)  # NaN: not certified
        return self.log_upper[j]

    def lower_exceeds(self, j: int, log_delta: float) -> bool:
        """Whether some lower-bound pair's delta at e_j exceeds delta (short-circuit)."""
        for pair in sorted(range(len(self.q.lower)), key=lambda p: p != self.lower_pair):
            if (j, pair) not in self.log_lower:
                self.lower_evaluations += 1
                value = self.q.delta_of_lower_pair(pair, self.eps(j))
                self.log_lower[(j, pair)] = _log(value, nan=-math.inf)  # NaN: proves nothing
            if self.log_lower[(j, pair)] > log_delta:
                self.lower_pair = pair
                return True
        return False

    def certified(self, delta: float) -> tuple[float, int]:
        """(certified eps, its ladder index) for ``delta``; eps0 when no ladder point below works."""
        if self.delta_at_eps0 > delta:
            return trivial_eps0(self.q, delta), self.top + 1
        log_delta = math.log(delta)
        guess = self._index(guess_eps(self.q, delta))
        _, b = _bracket(lambda j: self.upper_at(j) - log_delta, guess + self.drift, self.floor, self.top + 1)
        self.drift = b - guess  # the guess's error at this delta predicts the next one's
        return (self.q.eps0, b) if b > self.top else (min(self.q.eps0, self.eps(b)), b)

    def lower_bound(self, delta: float, above: int) -> float:
        """Largest ladder eps below index ``above`` where a lower pair's delta exceeds ``delta``."""
        log_delta = math.log(delta)
        a, _ = _bracket(lambda j: 1.0 if self.lower_exceeds(j, log_delta) else -1.0,
                        above + self.lower_drift, self.floor, above)
        self.lower_drift = a - above
        return self.eps(a) if a >= self.floor else 0.0  # a was evaluated: its lower delta exceeds delta

    def _index(self, eps: float) -> int:
        return min(self.top, max(self.floor, round(math.log(eps) / math.log(LADDER))))


def _bracket(excess: Callable[[int], float], start: int, lo: int, hi: int) -> tuple[int, int]:
    """(a, b) with excess(a) > 0 (or a = lo - 1) and excess(b) <= 0 (or b = hi, assumed and not
    evaluated), b - a = 1 unless MAX_STEPS ran out: growing steps from ``start``, then bisection.

    ``excess`` need not be monotone: both ends were evaluated (or are the stated sentinels),
    which is all certification needs; monotonicity only makes b the smallest such index.
    """
    a, b = lo - 1, hi  # excess(a) > 0 (a = lo - 1 virtual), excess(b) <= 0
    j, step = min(max(start, lo), hi - 1), 1
    for _ in range(MAX_STEPS):
        if b - a <= 1:
            break
        if excess(j) > 0:
            a, j = j, j + step
        else:
            b, j = j, j - step
        step *= 2
        if not a < j < b:
            j = (a + b) // 2
    return a, b


def _log(value: float, nan: float) -> float:
    if math.isnan(value):
        return nan
    return math.log(value) if value > 0 else -math.inf
