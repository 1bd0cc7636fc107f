"""Certified eps for a whole slice: every n of an axis and every delta of an axis at once.

For one (mechanism, eps0) the table needs eps(n, delta) on a dense grid (e.g. 700 n x 25 delta).
Every eps is taken from one geometric ladder e_j = eps0 * LADDER^-j shared by all n, so the
per-eps work of the spectral path (rounding, tilting, bounds on |psi|, ``spectral.py``) is done
once per ladder point and reused by every n that needs it.

1. Rows are solved level by level (``LEVELS``): every 64th n of the axis first, by bisection
   over the whole ladder, then every 8th, then all.  A row of a later level starts from a
   one-step bracket predicted from the rows already solved (ladder position linear in log n
   between them), checks both ends, pushes a wrong end out by a doubling stride (the failed
   point becomes the other end) and bisects until delta_up(e_j) <= delta < delta_up(e_{j+1}):
   about 2.6 evaluations per (n, delta) on a 100-per-decade axis.
2. Every evaluation is the spectral path's certified upper bound (``spectral.py``); one it
   declines goes to the FFT path for n <= ``FFT_N_MAX`` and counts as failing (inf) beyond.
3. The answer is where the chord through the two evaluated upper points, in (alpha = e^eps,
   delta), meets delta: the exact delta is convex in alpha, so the chord lies above it and the
   answer is certified (DESIGN.md section 3); it is at most e_j, and within about 0.1% of the
   curve for a 1% ladder.

Mechanisms the spectral path does not cover (an extra delta term, laws with more than
``SPECTRAL_COMPONENTS`` components, n = 1) are answered per n by ``eps_bounds``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tablegen import validate
from tablegen.engine import spectral
from tablegen.engine.accountant import RESOLUTION, SPECTRAL_COMPONENTS, Query, chord_eps, eps_bounds
from tablegen.mechanisms import Mechanism

LADDER = 1.01
LEVELS = (64, 8, 1)  # rows solved per level: every 64th (whole-ladder bisection), every 8th, all
FLOOR = 1e-9  # smallest eps tried, relative to eps0
FFT_N_MAX = 100_000  # declined evaluations go to the FFT path only up to this n


def eps_slice(mechanism: str | Mechanism, *, eps0: float, ns: Sequence[int], deltas: Sequence[float],
              resolution: float = RESOLUTION, **params: Any) -> np.ndarray:
    """Certified eps(n, delta), shape (len(ns), len(deltas)), each capped at eps0."""
    q = Query(mechanism, eps0, 1, params, resolution)
    n_axis = np.array([validate.integer_at_least("n", n, 1) for n in ns], dtype=np.int64)
    targets = np.array([validate.open_unit("delta", d) for d in deltas], dtype=float)
    if q.extra_delta(0.0) > 0 or any(d.c.size > SPECTRAL_COMPONENTS for d in q.upper):  # delta0 > 0: per n
        return _per_n(q, n_axis, targets, params)
    ladder = _Ladder(q, n_axis, resolution)
    out = np.full((n_axis.size, targets.size), q.eps0)
    small = n_axis < 2
    if small.any():
        out[small] = _per_n(q, n_axis[small], targets, params)
    big = np.flatnonzero(~small)
    if big.size:
        out[big] = ladder.solve(big, targets)
    return out


def _per_n(q: Query, ns: np.ndarray, targets: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    return np.array([[eps_bounds(q.mechanism, eps0=q.eps0, n=int(n), delta=float(d), lower=False,
                                 **params).upper for d in targets] for n in ns])


class _Ladder:
    """Memoised certified delta_up(e_j) for ladder indices j and n-axis indices i."""

    def __init__(self, q: Query, ns: np.ndarray, resolution: float) -> None:
        self.q, self.ns, self.resolution = q, ns, resolution
        self.top = math.ceil(math.log(1 / FLOOR) / math.log(LADDER))
        self.eps = q.eps0 * LADDER ** -np.arange(self.top + 1, dtype=float)
        self.cache = np.full((self.top + 1, ns.size), np.nan)
        self.cache[0] = 0.0  # delta(eps0) = 0 for an eps0-LDP randomizer

    def values(self, j: np.ndarray, i: np.ndarray) -> np.ndarray:
        """delta_up(e_j, n_i) for index arrays, evaluating (once) what is not cached."""
        missing = np.isnan(self.cache[j, i])
        if missing.any():
            keys = np.unique(np.stack([j[missing], i[missing]]), axis=1)
            self.cache[keys[0], keys[1]] = self._evaluate(keys[0], keys[1])
        return self.cache[j, i]

    def _evaluate(self, j: np.ndarray, i: np.ndarray) -> np.ndarray:
        rows, row = np.unique(j, return_inverse=True)
        n = self.ns[i]
        out = np.max([spectral.delta_pairs(d, self.eps[rows], row.ravel(), n, self.resolution) for d in self.q.upper],
                     axis=0)
        # declined by the spectral path (tiny eps: lambda -> 0 and K explodes; or small n): the
        # FFT where it is cheap, else "not certified" (inf), which can only make answers larger
        queries: dict[int, Query] = {}
        for k in np.flatnonzero(np.isnan(out) & (n <= FFT_N_MAX)):
            users = int(n[k])
            if users not in queries:
                queries[users] = Query(self.q.mechanism, self.q.eps0, users, self.q.params, self.resolution)
            out[k] = queries[users].delta_upper(float(self.eps[j[k]]))
        return np.where(np.isnan(out), np.inf, out)  # never NaN: an unknown value certifies nothing

    def solve(self, rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Certified eps for n-axis indices ``rows`` (each >= 2 users) and every delta.

        Level by level (every ``LEVELS[0]``-th row, then every ``LEVELS[1]``-th, then all), each
        row's bracket is predicted from the rows already solved (ladder position linear in
        log n) and closed by ``_close``; the first level bisects the whole ladder.
        """
        known = np.zeros(0, dtype=np.int64)
        position = np.zeros((0, targets.size))
        ok_all = np.zeros((rows.size, targets.size), dtype=np.int64)
        fail_all = np.zeros_like(ok_all)
        for stride in LEVELS:
            level = np.setdiff1d(np.unique(np.append(np.arange(0, rows.size, stride), rows.size - 1)), known)
            if not level.size:
                continue
            if known.size:
                guess = np.stack([np.interp(np.log(self.ns[rows[level]]), np.log(self.ns[rows[known]]), position[:, d])
                                  for d in range(targets.size)], axis=1)
                ok = np.clip(np.floor(guess).astype(np.int64), 0, self.top - 1)
                fail = ok + 1
            else:
                ok, fail = np.zeros((level.size, targets.size), np.int64), np.full((level.size, targets.size), self.top)
            i = np.repeat(rows[level], targets.size)
            delta = np.tile(targets, level.size)
            ok, fail = self._close(i, delta, ok.ravel(), fail.ravel())
            ok_all[level], fail_all[level] = ok.reshape(-1, targets.size), fail.reshape(-1, targets.size)
            eps = self._chord(ok, fail, i, delta).reshape(-1, targets.size)
            known = np.append(known, level)
            position = np.concatenate([position, np.log(self.q.eps0 / eps) / math.log(LADDER)])
            order = np.argsort(known)
            known, position = known[order], position[order]
        i = np.repeat(rows, targets.size)
        eps = self._chord(ok_all.ravel(), fail_all.ravel(), i, np.tile(targets, rows.size))
        return np.minimum(eps, self.q.eps0).reshape(rows.size, targets.size)

    def _chord(self, ok: np.ndarray, fail: np.ndarray, i: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Where the chord through the bracket's upper points meets delta (the floor where the
        last ladder point itself certifies)."""
        d_ok, d_fail = self.values(ok, i), self.values(fail, i)
        return np.array([chord_eps(float(self.eps[f]), float(df), float(self.eps[o]), float(do), float(dl))
                         if df > dl else float(self.eps[f])
                         for o, f, do, df, dl in zip(ok, fail, d_ok, d_fail, delta, strict=True)])

    def _close(self, i: np.ndarray, delta: np.ndarray, ok: np.ndarray,
               fail: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Move each bracket until delta_up(e_ok) <= delta < delta_up(e_fail) with fail = ok + 1:
        a wrong end is pushed out by a doubling stride (the failed point becomes the other
        end), a right bracket is bisected.  fail = top is accepted as failing (the floor)."""
        grow_ok, grow_fail = np.ones_like(ok), np.ones_like(fail)
        for _ in range(8 * int(math.log2(self.top + 1)) + 8):
            ok_good = self.values(ok, i) <= delta
            fail_good = (fail >= self.top) | ~(self.values(fail, i) <= delta)
            new_ok = np.where(ok_good, np.where(fail_good, ok, fail), np.maximum(ok - grow_ok, 0))
            new_fail = np.where(fail_good, np.where(ok_good, fail, ok), np.minimum(fail + grow_fail, self.top))
            grow_ok = np.where(ok_good, grow_ok, 2 * grow_ok)
            grow_fail = np.where(fail_good, grow_fail, 2 * grow_fail)
            ok, fail = new_ok, np.maximum(new_fail, new_ok + 1)
            settled = ok_good & fail_good
            open_ = settled & (fail - ok > 1)
            if open_.any():
                mid = (ok[open_] + fail[open_]) // 2
                mid_ok = self.values(mid, i[open_]) <= delta[open_]
                ok[open_] = np.where(mid_ok, mid, ok[open_])
                fail[open_] = np.where(mid_ok, fail[open_], mid)
            if settled.all() and np.all(fail - ok <= 1):
                return ok, fail
        raise RuntimeError("slice search did not converge")  # cannot happen: brackets only shrink or grow to the ends
