"""Certified eps for a whole slice: every n of an axis and every delta of an axis at once.

Every eps of one (mechanism, eps0) is taken from one geometric ladder e_j = eps0 * LADDER^-j shared
by all n, so the spectral path's per-eps work is done once per ladder point.  Rows are solved level
by level (``LEVELS``) from brackets predicted by the rows already solved; the answer is the chord
through the two evaluated upper points in (e^eps, delta), certified because the exact delta is
convex in e^eps.  ``lower_slice`` runs the same search on the lower bounds of ``lower.py``, each
cell's proof carried past its ladder point by convexity.  Laws the spectral path does not cover
are answered per n by ``eps_bounds``.  docs/engine.md, "Slices"; docs/soundness.md for the chords.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tablegen import validate
from tablegen.engine import lower as spectral_lower
from tablegen.engine import spectral
from tablegen.engine.bounds import RESOLUTION, SPECTRAL_COMPONENTS, Query, chord_eps, eps_bounds
from tablegen.mechanisms import Mechanism

# delta at (eps, n) pairs, which decomposition gave each, and that decomposition's certified upper
# delta from the same evaluation where the bound is a lower one (NaN where not known)
Values = tuple[np.ndarray, np.ndarray, np.ndarray]
LADDER = 1.01
LEVELS = (64, 8, 1)  # rows solved per level: every 64th (whole-ladder bisection), every 8th, all
FLOOR = 1e-9  # smallest eps tried, relative to eps0
PAIR_SAMPLE = 500  # lower slices: points evaluated on every lower-bound pair before keeping the winners
FFT_N_MAX = 100_000  # declined evaluations go to the FFT path only up to this n


def eps_slice(mechanism: str | Mechanism, *, eps0: float, ns: Sequence[int], deltas: Sequence[float],
              resolution: float = RESOLUTION, **params: Any) -> np.ndarray:
    """Certified eps(n, delta), shape (len(ns), len(deltas)), each capped at eps0."""
    q = Query(mechanism, eps0, 1, params, resolution)
    n_axis = np.array([validate.integer_at_least("n", n, 1) for n in ns], dtype=np.int64)
    targets = np.array([validate.open_unit("delta", d) for d in deltas], dtype=float)
    if q.extra_delta(0.0) > 0 or any(d.c.size > SPECTRAL_COMPONENTS for d in q.upper):  # delta0 > 0: per n
        return _per_n(q, n_axis, targets, params)
    ladder = _Ladder(q, n_axis, LADDER, _upper_values(q, n_axis, resolution))
    out = np.full((n_axis.size, targets.size), q.eps0)
    small = n_axis < 2
    if small.any():
        out[small] = _per_n(q, n_axis[small], targets, params)
    big = np.flatnonzero(~small)
    if big.size:
        ok, fail = ladder.solve(big, targets, ladder.chord_position)
        i = np.repeat(big, targets.size)
        eps = ladder.chord(ok.ravel(), fail.ravel(), i, np.tile(targets, big.size))
        out[big] = np.minimum(eps, q.eps0).reshape(big.size, targets.size)
    return out


def lower_slice(mechanism: str | Mechanism, *, eps0: float, ns: Sequence[int], deltas: Sequence[float],
                upper: np.ndarray | None = None, resolution: float = spectral_lower.RESOLUTION,
                **params: Any) -> np.ndarray:
    """Certified lower bounds on the exact eps(n, delta), shape (len(ns), len(deltas)): NaN where
    the mechanism has no lower-bound pair (or n < 2), 0 where nothing was proved.

    ``upper``: certified eps of the same slice (``eps_slice``, computed when not given).  No
    lower pair can prove anything at eps at or above the largest of a row (the exact delta is
    below every target there), so the search takes delta_low = 0 there without evaluating: the
    spectral lower path declines near eps0 (astronomically small delta), and those declines
    must not be mistaken for proofs by the search."""
    q = Query(mechanism, eps0, 1, params)
    n_axis = np.array([validate.integer_at_least("n", n, 1) for n in ns], dtype=np.int64)
    targets = np.array([validate.open_unit("delta", d) for d in deltas], dtype=float)
    out = np.full((n_axis.size, targets.size), np.nan)
    rows = np.flatnonzero(n_axis >= 2)
    if not q.lower or not rows.size or any(d.c.size > SPECTRAL_COMPONENTS for d in q.lower):
        return out
    # n where every pair's evaluations decline (comb-like sums): nothing provable, no search
    provable = np.any([spectral.spread(d, n_axis[rows]) for d in q.lower], axis=0)
    out[rows[~provable]] = 0.0
    rows = rows[provable]
    if not rows.size:
        return out
    if upper is None:
        upper = eps_slice(q.mechanism, eps0=eps0, ns=n_axis, deltas=targets, **params)
    ladder = _Ladder(q, n_axis, LADDER, _lower_values(q, n_axis, resolution))
    upper = np.asarray(upper, dtype=float)[rows]
    for i, eps in zip(rows, np.max(upper, axis=1), strict=True):
        ladder.set(slice(0, int(math.log(q.eps0 / eps) / math.log(ladder.ratio)) + 1), i, 0.0)  # e_j >= eps
    ok, fail = ladder.solve(rows, targets, lambda ok, fail, i, delta: fail - 0.5, settled=upper)
    i, delta = np.repeat(rows, targets.size), np.tile(targets, rows.size)
    fail = np.minimum(ladder.probe(i, delta, fail.ravel()), ladder.first_proofs(rows, targets).ravel())
    out[rows] = _past_proofs(q, ladder, i, delta, fail).reshape(rows.size, targets.size)
    return out


def _past_proofs(q: Query, ladder: _Ladder, i: np.ndarray, delta: np.ndarray, proof: np.ndarray) -> np.ndarray:
    """Lower bounds on eps(delta) for n = ns[i], each past its ladder proof e_j (j = ``proof``:
    delta_low(e_j) > delta; ``top``: none, 0) by convexity.  Every lower-bound pair's delta is
    convex in alpha = e^eps (its G is linear in alpha), so beyond alpha_j it lies above the line
    through (alpha_j, delta(alpha_j)) and (alpha_b, delta(alpha_b)), alpha_b = e^(e_(j+1)) below;
    with L = delta_low(e_j) (the largest over the pairs, so at most that pair's delta) and U >= the
    delta of every pair at e_(j+1) (the spectral UPPER path on each pair, the largest) the line
    through (alpha_j, L) and (alpha_b, U) is steeper, so delta > target up to where that line
    meets the target: alpha* = alpha_j + (L - target) (alpha_j - alpha_b) / (U - L).  The exact
    eps is above e* = log alpha* (docs/soundness.md); e_j where U is not known."""
    found = proof < ladder.top
    out = np.zeros(proof.size)
    j, cells = proof[found], np.flatnonzero(found)
    if not cells.size:
        return out
    out[cells] = ladder.eps[j]
    below = _pair_uppers(q, ladder, j, i[cells])
    low = ladder.cache[j, i[cells]]
    # in alpha - 1 (expm1, log1p): eps can be 1e-7 of eps0, where alpha itself keeps 9 digits of it;
    # the step shrunk by 1e-9 and the eps by 1e-12 cover every rounding (a few ulps each)
    beta, beta_b = np.expm1(ladder.eps[j]), np.expm1(ladder.eps[j + 1])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        step = (low - delta[cells]) * (beta - beta_b) / (below - low)
        star = np.log1p(beta + step * (1 - 1e-9)) * (1 - 1e-12)
    usable = np.isfinite(star) & (below > low) & (low > delta[cells])
    out[cells[usable]] = np.maximum(out[cells[usable]], star[usable])
    return out


def _pair_uppers(q: Query, ladder: _Ladder, j: np.ndarray, i: np.ndarray) -> np.ndarray:
    """The certified UPPER delta at (e_(j+1), n_i) of the lower-bound pair whose lower bound
    ``ladder`` holds at (e_j, n_i): the one the lower path computed with it where the search
    evaluated (e_(j+1), n_i) and the same pair won there, else the spectral path at the upper
    resolution (inf where it declines), each distinct (pair, j, i) evaluated once."""
    winner = ladder.winner[j, i]
    out = ladder.pair_upper[j + 1, i]
    out = np.where(ladder.winner[j + 1, i] == winner, out, np.nan)
    for p in np.unique(winner):
        mine = np.flatnonzero((winner == p) & np.isnan(out))
        if not mine.size:
            continue
        keys, where = np.unique(np.stack([j[mine] + 1, i[mine]]), axis=1, return_inverse=True)
        used, row = np.unique(ladder.eps[keys[0]], return_inverse=True)
        values = spectral.delta_pairs(q.lower[p], used, row.ravel(), ladder.ns[keys[1]], RESOLUTION)
        out[mine] = np.where(np.isnan(values), np.inf, values)[where.ravel()]
    return out


def _upper_values(q: Query, ns: np.ndarray, resolution: float) -> Callable[[np.ndarray, np.ndarray], Values]:
    """delta_up(eps, n_i) for pairs (the largest over the upper decompositions): the spectral
    path, the FFT path where it declines for n <= FFT_N_MAX, inf (certifies nothing) beyond
    (which decomposition gave it is not recorded: 0)."""

    def values(eps: np.ndarray, i: np.ndarray) -> Values:
        rows, row = np.unique(eps, return_inverse=True)
        n = ns[i]
        out = np.max([spectral.delta_pairs(d, rows, row.ravel(), n, resolution) for d in q.upper], axis=0)
        # declined by the spectral path (tiny eps: lambda -> 0 and K explodes; or small n): the
        # FFT where it is cheap, else "not certified" (inf), which can only make answers larger
        queries: dict[int, Query] = {}
        for k in np.flatnonzero(np.isnan(out) & (n <= FFT_N_MAX)):
            users = int(n[k])
            if users not in queries:
                queries[users] = Query(q.mechanism, q.eps0, users, q.params, resolution)
            out[k] = queries[users].delta_upper(float(eps[k]))
        unknown = np.full(out.size, np.nan)
        return np.where(np.isnan(out), np.inf, out), np.zeros(out.size, np.int8), unknown  # inf: certifies nothing

    return values


def _lower_values(q: Query, ns: np.ndarray, resolution: float) -> Callable[[np.ndarray, np.ndarray], Values]:
    """delta_low(eps, n_i) for pairs, the lower-bound pair that gave it and that pair's upper delta
    from the same sums: the largest over the pairs on the spectral lower path, NaN where every pair
    declines (the search then treats the point like a proof, so that declines at tiny eps do not
    pull it down; ``_Ladder.probe`` accepts only evaluated proofs).

    Every pair is evaluated until ``PAIR_SAMPLE`` points have a lower bound; from then on the
    pair that was the largest most often is evaluated everywhere and the others that were the
    largest somewhere only where it declined (any subset of the pairs still gives a lower bound:
    only tightness is at stake; for k-RR one of three pairs is 10^3 times the others wherever
    it answers)."""
    order = list(range(len(q.lower)))
    wins = np.zeros(len(q.lower), dtype=np.int64)

    def values(eps: np.ndarray, i: np.ndarray) -> Values:
        if wins.sum() < PAIR_SAMPLE:
            each, uppers = np.array([spectral_lower.delta_lower_upper(d, eps, ns[i], resolution) for d in q.lower]
                                    ).transpose(1, 0, 2)
            known = ~np.all(np.isnan(each), axis=0)
            winner = np.argmax(np.nan_to_num(each, nan=-1.0), axis=0)
            wins[:] += np.bincount(winner[known], minlength=wins.size)
            order[:] = [int(p) for p in np.argsort(-wins, kind="stable") if wins[p] > 0] or order
            return np.fmax.reduce(each), winner.astype(np.int8), uppers[winner, np.arange(eps.size)]
        out, upper = spectral_lower.delta_lower_upper(q.lower[order[0]], eps, ns[i], resolution)
        winner = np.full(out.size, order[0], np.int8)
        for p in order[1:]:
            declined = np.flatnonzero(np.isnan(out))
            if declined.size:
                out[declined], upper[declined] = spectral_lower.delta_lower_upper(q.lower[p], eps[declined],
                                                                                  ns[i[declined]], resolution)
                winner[declined] = p
        return out, winner, upper

    return values


def _per_n(q: Query, ns: np.ndarray, targets: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    return np.array([[eps_bounds(q.mechanism, eps0=q.eps0, n=int(n), delta=float(d), lower=False,
                                 **params).upper for d in targets] for n in ns])


class _Ladder:
    """Memoised delta(e_j, n_i) of one bound (``values``) at ladder points e_j = eps0 ratio^-j."""

    def __init__(self, q: Query, ns: np.ndarray, ratio: float,
                 values: Callable[[np.ndarray, np.ndarray], Values], top: int | None = None) -> None:
        self.q, self.ns, self.ratio, self._values = q, ns, ratio, values
        self.top = math.ceil(math.log(1 / FLOOR) / math.log(ratio)) if top is None else top
        self.eps = q.eps0 * ratio ** -np.arange(self.top + 1, dtype=float)
        self.cache = np.full((self.top + 1, ns.size), np.nan)  # NaN once evaluated: declined
        self.known = np.zeros(self.cache.shape, dtype=bool)
        self.winner = np.zeros(self.cache.shape, dtype=np.int8)  # the decomposition that gave each value
        self.pair_upper = np.full(self.cache.shape, np.nan)  # and its upper delta, where evaluated with it
        self.set(slice(0, 1), slice(None), 0.0)  # delta(eps0) = 0 for an eps0-LDP randomizer

    def set(self, j: Any, i: Any, value: Any) -> None:
        """Take ``value`` as delta(e_j, n_i) without evaluating it."""
        self.cache[j, i], self.known[j, i] = value, True

    def values(self, j: np.ndarray, i: np.ndarray) -> np.ndarray:
        """delta(e_j, n_i) for index arrays, evaluating (once) what is not cached."""
        missing = ~self.known[j, i]
        if missing.any():
            keys = np.unique(np.stack([j[missing], i[missing]]), axis=1)
            value, self.winner[keys[0], keys[1]], self.pair_upper[keys[0], keys[1]] = \
                self._values(self.eps[keys[0]], keys[1])
            self.set(keys[0], keys[1], value)
        return self.cache[j, i]

    def at_most(self, j: np.ndarray, i: np.ndarray, delta: np.ndarray, settled: np.ndarray | None) -> np.ndarray:
        """delta(e_j, n_i) <= delta, taken as true without evaluating where e_j >= ``settled``
        (per entry; for lower bounds the cell's certified eps: the exact delta, and so every
        lower bound on it, is at most delta there, the exact delta being non-increasing)."""
        if settled is None:
            return self.values(j, i) <= delta
        out = self.eps[j] >= settled
        ask = np.flatnonzero(~out)
        out[ask] = self.values(j[ask], i[ask]) <= delta[ask]
        return out

    def first_proofs(self, rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Per row of ``rows`` and target, the smallest ladder index (largest eps) evaluated for
        that row whose lower delta exceeds the target (``top`` where none): a proof there is one at
        every smaller eps too (the exact delta is non-increasing in eps), so this can only raise
        what the search found where the lower path's bounds are not monotone in eps (comb-like
        sums, e.g. k-RR with k = 512 at a few thousand users)."""
        out = np.full((rows.size, targets.size), self.top, dtype=np.int64)
        for r, i in enumerate(rows):
            j = np.flatnonzero(self.known[:, i] & (self.cache[:, i] > 0))  # evaluated, eps descending
            if j.size:
                best = np.maximum.accumulate(self.cache[j, i])  # the largest lower delta at eps >= e_j
                at = np.searchsorted(best, targets, side="right")  # the first with best > target
                out[r] = np.where(at < j.size, j[np.minimum(at, j.size - 1)], self.top)
        return out

    def probe(self, i: np.ndarray, delta: np.ndarray, fail: np.ndarray) -> np.ndarray:
        """Lower bounds: move each bracket's fail end down to an evaluated proof
        (delta_low(e_fail) > delta; the exact eps is above e_fail, the exact delta being
        non-increasing), ``top`` where none is found down to the floor.

        The search took a declined evaluation (NaN) for a proof, so a fail end can be a decline
        (e.g. a rounding bracket wider than ``lower.SLICE_MAX_GAP``, or a plan declined); below
        it the ladder is probed with doubling strides until a proof is evaluated, then bisected
        between the last point that is not one and that proof (declines count as not)."""
        def proof(j: np.ndarray, cells: np.ndarray) -> np.ndarray:
            out = j < self.top  # the floor proves nothing and is not evaluated
            out[out] = self.values(j[out], i[cells[out]]) > delta[cells[out]]
            return out

        fail = fail.copy()
        cells = np.flatnonzero(~proof(fail, np.arange(fail.size)))
        last, stride = fail[cells], 1
        while cells.size:
            j = np.minimum(fail[cells] + stride, self.top)
            hit = proof(j, cells)
            done = hit | (j >= self.top)
            fail[cells[done]] = np.where(hit[done], j[done], self.top)
            lo, hi = last[hit], j[hit]
            found = cells[hit]
            while np.any(hi - lo > 1):
                mid = (lo + hi) // 2
                ok = proof(mid, found)
                lo, hi = np.where(ok, lo, mid), np.where(ok, mid, hi)
            fail[found] = hi
            cells, last, stride = cells[~done], j[~done], 2 * stride
        return fail

    def chord_position(self, ok: np.ndarray, fail: np.ndarray, i: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Ladder position (fractional index) of the chord's answer."""
        return np.log(self.q.eps0 / self.chord(ok, fail, i, delta)) / math.log(self.ratio)

    def solve(self, rows: np.ndarray, targets: np.ndarray, position: Callable[..., np.ndarray],
              settled: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Brackets (ok, fail), each (len(rows), len(targets)), for n-axis indices ``rows`` (each
        >= 2 users) and every delta: delta(e_ok) <= delta < delta(e_fail), fail = ok + 1.

        Level by level (every ``LEVELS[0]``-th row, then every ``LEVELS[1]``-th, then all), each
        row's bracket is predicted from the rows already solved (their ``position``, linear in
        log n) and closed by ``close``; the first level bisects the whole ladder.  ``settled``
        (same shape, optional): per cell, the eps at and above which delta <= target is known
        (``at_most``); no bracket then starts above the ladder point just below it, and the
        first level starts there.
        """
        known = np.zeros(0, dtype=np.int64)
        solved = np.zeros((0, targets.size))
        ok_all = np.zeros((rows.size, targets.size), dtype=np.int64)
        fail_all = np.zeros_like(ok_all)
        highest = np.zeros(ok_all.shape, np.int64)  # the largest ok end worth trying: e_(j+1) < settled
        if settled is not None:
            with np.errstate(divide="ignore"):
                below = np.floor(np.log(self.q.eps0 / settled) / math.log(self.ratio))
            highest = np.clip(np.nan_to_num(below, nan=0.0, posinf=self.top - 1), 0, self.top - 1).astype(np.int64)
        for stride in LEVELS:
            level = np.setdiff1d(np.unique(np.append(np.arange(0, rows.size, stride), rows.size - 1)), known)
            if not level.size:
                continue
            if known.size:
                guess = np.stack([np.interp(np.log(self.ns[rows[level]]), np.log(self.ns[rows[known]]), solved[:, d])
                                  for d in range(targets.size)], axis=1)
                ok = np.clip(np.floor(guess).astype(np.int64), highest[level], self.top - 1)
                fail = ok + 1
            elif settled is not None:
                ok = highest[level]
                fail = ok + 1
            else:
                ok, fail = np.zeros((level.size, targets.size), np.int64), np.full((level.size, targets.size), self.top)
            i = np.repeat(rows[level], targets.size)
            delta = np.tile(targets, level.size)
            cell_settled = None if settled is None else settled[level].ravel()
            ok, fail = self.close(i, delta, ok.ravel(), fail.ravel(), cell_settled)
            ok_all[level], fail_all[level] = ok.reshape(-1, targets.size), fail.reshape(-1, targets.size)
            known = np.append(known, level)
            solved = np.concatenate([solved, position(ok, fail, i, delta).reshape(-1, targets.size)])
            order = np.argsort(known)
            known, solved = known[order], solved[order]
        return ok_all, fail_all

    def chord(self, ok: np.ndarray, fail: np.ndarray, i: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Where the chord through the bracket's upper points meets delta (the floor where the
        last ladder point itself certifies)."""
        d_ok, d_fail = self.values(ok, i), self.values(fail, i)
        return np.where(d_fail > delta, chord_eps(self.eps[fail], d_fail, self.eps[ok], d_ok, delta), self.eps[fail])

    def close(self, i: np.ndarray, delta: np.ndarray, ok: np.ndarray, fail: np.ndarray,
              settled: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Move each bracket until delta(e_ok) <= delta < delta(e_fail) with fail = ok + 1:
        a wrong end is pushed out by a doubling stride (the failed point becomes the other
        end), a right bracket is bisected.  fail = top is accepted as failing (the floor).
        ``settled``: see ``at_most``."""
        grow_ok, grow_fail = np.ones_like(ok), np.ones_like(fail)
        for _ in range(8 * int(math.log2(self.top + 1)) + 8):
            if settled is None:  # upper searches: each end its own evaluation (the lattice depends on
                # the batch: the certified eps of engines 3 to 5 stay bit for bit)
                ends = np.append(self.values(ok, i) <= delta, self.values(fail, i) <= delta)
            else:  # lower searches: both ends in one evaluation, one plan per eps
                ends = self.at_most(np.append(ok, fail), np.append(i, i), np.append(delta, delta),
                                    np.append(settled, settled))
            ok_good, fail_good = ends[: ok.size], (fail >= self.top) | ~ends[ok.size :]
            new_ok = np.where(ok_good, np.where(fail_good, ok, fail), np.maximum(ok - grow_ok, 0))
            new_fail = np.where(fail_good, np.where(ok_good, fail, ok), np.minimum(fail + grow_fail, self.top))
            grow_ok = np.where(ok_good, grow_ok, 2 * grow_ok)
            grow_fail = np.where(fail_good, grow_fail, 2 * grow_fail)
            ok, fail = new_ok, np.maximum(new_fail, new_ok + 1)
            done = ok_good & fail_good
            open_ = done & (fail - ok > 1)
            if open_.any():
                mid = (ok[open_] + fail[open_]) // 2
                mid_ok = self.at_most(mid, i[open_], delta[open_], None if settled is None else settled[open_])
                ok[open_] = np.where(mid_ok, mid, ok[open_])
                fail[open_] = np.where(mid_ok, fail[open_], mid)
            if done.all() and np.all(fail - ok <= 1):
                return ok, fail
        raise RuntimeError("slice search did not converge")  # cannot happen: brackets only shrink or grow to the ends
