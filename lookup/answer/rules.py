"""The conservative rules: answers from a table that can only be larger (eps, delta) or smaller
(eps0_max) than the certified value at the query.  Pure, vectorised over queries.

Why each rule is safe (docs/lookup.md has the argument in full): the exact eps of these
analyses is non-decreasing in eps0 and non-increasing in n and in delta, and the table surface
was made monotone on load (``table.py``), so

* eps0 rounded UP to the grid and n rounded DOWN give a table value >= the exact eps at the
  query; beyond the grid in these directions (eps0 below the smallest, n above the largest) the
  edge value is still an upper bound;
* between two grid deltas d1 < d2 with certified eps u1 >= u2, the true curve delta(x),
  x = e^eps, is convex (the hockey-stick divergence is convex in its parameter), and
  delta(e^u1) <= d1, delta(e^u2) <= d2, so delta(x) lies below the chord through (e^u1, d1),
  (e^u2, d2).  The chord's eps at a query delta is therefore certified, and so is the chord's
  delta at a query eps.  Above the largest grid delta, the eps at the largest is an upper bound;
* every eps is also capped by the query's eps0 (an eps0-LDP randomizer is (eps0, 0)-DP after
  shuffling);
* lower bounds go the other way: eps0 rounded down, n and delta rounded up;
* k-RR with a k the table lacks is answered from the row of the largest grid k below it (its lower
  bounds from the smallest grid k above it): the exact eps of k-RR is non-increasing in k
  (``rows`` has the proof).

The floating-point error of the chord (a few ulps; log1p/expm1 keep it relative for small eps)
is pushed outward by ``FLOAT_SLACK``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lookup.chord import chord_eps
from lookup.format import FLOAT_SLACK, UNIT_ROUNDOFF, exact_worst_case
from lookup.store.table import Table


@dataclass(frozen=True)
class Corner:
    """Grid indices of a query and where it falls outside the grid."""

    eps0_up: np.ndarray  # smallest grid eps0 >= query (clipped to the grid)
    eps0_down: np.ndarray  # largest grid eps0 <= query (-1 if none)
    n_down: np.ndarray  # largest grid n <= query (clipped)
    n_up: np.ndarray  # smallest grid n >= query (n.size if none)
    outside: np.ndarray  # eps0 above the grid or n below it: the table cannot answer
    edge: np.ndarray  # eps0 below the grid or n above it: answered from the edge
    unordered: np.ndarray  # off-grid eps0 of a row answered at grid eps0 only (part of outside)


@dataclass(frozen=True)
class Rows:
    """The table rows a query is answered from: ``upper`` (certified values), ``lower`` (lower
    bounds; None: none), ``opposite`` (the far corner of the slack estimate; None: unknown).  For
    the query's own row all three are that row; for k-RR at a k between grid values ``k`` is the
    grid k of ``upper`` and ``blend`` the query's position between ``upper`` and ``opposite`` in
    log k (used by estimates only).  ``tighter_live``: the engine certifies the row's mechanism
    more tightly than the analysis the row holds (``lookup.format.exact_worst_case``: binary RR),
    so slack is measured against the row's lower bound (``slack_to_lower``), not the opposite corner."""

    upper: int
    lower: int | None
    opposite: int | None
    k: float | None = None
    blend: float = 0.0
    tighter_live: bool = False


def tighter_live(table: Table, row: int) -> bool:
    """Whether the live engine certifies the table row ``row`` more tightly than the row's analysis
    (its family and parameters: ``lookup.format.exact_worst_case``, binary RR, whose table rows hold
    the blanket bound, 20-43% above the exact value the engine certifies within 0.5%)."""
    return exact_worst_case(table.families[row], table.params[row])


def slack_to_lower(value: np.ndarray, lower: np.ndarray, unknown: np.ndarray) -> np.ndarray:
    """value / lower - 1, the slack of an answer whose live value may be far below the table's
    (``Rows.tighter_live``): the live certified value is at least the exact one, which is at least
    the lower bound, so this is an upper bound on the answer's ratio to the live value, minus 1,
    whatever analysis the row holds.  NaN (unknown) where ``unknown`` or no positive lower bound;
    0 where the value is 0 (delta at eps >= eps0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(value > 0, value / np.minimum(lower, value) - 1, 0.0)
    return np.where(unknown | ((value > 0) & ~(lower > 0)), np.nan, ratio)


def rows(table: Table, mechanism: str, params: dict[str, Any]) -> Rows | None:
    """The rows answering ``mechanism`` with ``params``; None when the table has none.

    A k-RR query with a k between the table's k values is answered from the largest grid k
    below it, because the exact delta(eps) of k-RR (the blanket analysis, arXiv:2504.07414
    Example 4.0) is non-increasing in k, hence so is eps(delta).  Proof: with beta = e^eps0,
    alpha = e^eps and p_k = 1/(beta + k - 1), G_k takes beta - alpha and 1 - alpha beta with
    probability p_k each, 1 - alpha with (k - 2) p_k and 0 otherwise.  Going from k to k + 1
    removes mass D = p_k - p_{k+1} from each of beta - alpha and 1 - alpha beta and (beta - 1) D
    from 0, and puts the total (beta + 1) D on 1 - alpha, which is exactly the mean of the mass
    removed ((beta - alpha) + (1 - alpha beta) = (beta + 1)(1 - alpha)).  So G_{k+1} is a
    mean-preserving contraction of G_k (G_{k+1} <= G_k in convex order), the convex order is
    kept by sums of independent copies, and x -> x_+ is convex: E[(G_1 + ... + G_n)_+] can only
    fall from k to k + 1, for every n and eps.  The same holds for real k >= 2, so the table's
    certified value at a smaller grid k bounds the exact value at k, and a lower bound at a
    larger grid k is a lower bound at k.  Above the largest grid k the largest answers (an edge).
    """
    own = table.row(mechanism, params)
    if own is not None:
        return Rows(own, own, own, tighter_live=tighter_live(table, own))
    k = params.get("k")
    if mechanism != "krr" or set(params) != {"k"} or not isinstance(k, int | float) or k != int(k) or k < 2:
        return None
    grid = sorted((float(p["k"]), i) for i, (f, p) in enumerate(zip(table.families, table.params, strict=True))
                  if f == "krr" and set(p) == {"k"})
    below = [g for g in grid if g[0] < k]
    above = [g for g in grid if g[0] > k]
    if not below:
        return None
    (k_down, down), up = below[-1], (above[0] if above else None)
    if up is None:
        return Rows(down, None, None, k_down)
    return Rows(down, up[1], up[1], k_down, math.log(k / k_down) / math.log(up[0] / k_down))


def corner(table: Table, eps0: np.ndarray, n: np.ndarray, row: int | None = None) -> Corner:
    """Grid indices of the queries; for a row that is not one randomizer family in eps0 (OLH
    with its eps0-dependent default g) only grid eps0 are answered, others are outside."""
    grid_eps0, grid_n = table.eps0, table.n
    up = np.searchsorted(grid_eps0, eps0, side="left")
    down_n = np.searchsorted(grid_n, n, side="right") - 1
    outside = (up >= grid_eps0.size) | (down_n < 0)
    edge = (eps0 < grid_eps0[0]) | (n > grid_n[-1])
    unordered = np.zeros(eps0.shape, bool)
    if row is not None and not table.eps0_monotone[row]:
        unordered = grid_eps0[np.minimum(up, grid_eps0.size - 1)] != eps0
    return Corner(
        np.minimum(up, grid_eps0.size - 1),
        np.searchsorted(grid_eps0, eps0, side="right") - 1,
        np.maximum(down_n, 0),
        np.searchsorted(grid_n, n, side="left"),
        outside | unordered,
        edge,
        unordered,
    )


def delta_bracket(grid: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (lo, hi) of the grid deltas of each query's chord: hi the first grid delta >= the
    query (the largest above the grid), lo = hi on a grid delta or above the grid, else hi - 1."""
    hi = np.minimum(np.searchsorted(grid, delta, side="left"), grid.size - 1)
    return np.where(grid[hi] > delta, np.maximum(hi - 1, 0), hi), hi


def log_log_eps(u_small: np.ndarray, u_large: np.ndarray, d_small: np.ndarray, d_large: np.ndarray,
                delta: np.ndarray) -> np.ndarray:
    """An estimate (NOT certified) of eps at ``delta`` in [d_small, d_large]: log eps linear in
    log delta between (d_small, u_small) and (d_large, u_large)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(d_large > d_small, np.log(d_large / delta) / np.log(d_large / d_small), 0.0)
    return u_small ** w * u_large ** (1 - w)


def eps_at(table: Table, rows: Rows, c: Corner, eps0: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, ...]:
    """(certified eps, lower bound, slack estimate, outside, edge) for eps0/n/delta queries."""
    grid = table.delta
    outside = c.outside | (delta < grid[0])
    edge = c.edge | (delta > grid[-1]) | (rows.opposite is None)
    lo, hi = delta_bracket(grid, delta)
    d_hi = np.minimum(delta, grid[hi])  # above the grid: the largest delta's value

    def ends(row: int, e_index: np.ndarray, n_index: np.ndarray) -> tuple[np.ndarray, ...]:
        surface = table.upper[row]
        return surface[e_index, n_index, lo], surface[e_index, n_index, hi], grid[lo], grid[hi], d_hi

    value = np.minimum(chord_eps(*ends(rows.upper, c.eps0_up, c.n_down)), eps0)
    # the slack estimate: the answer over an estimate of the truth at the opposite corner (eps0
    # down, n up, k up; below the truth at the query), read between the grid deltas in log-log
    # (closer to the truth than the chord, which can be far above it where eps varies fast)
    opposite = log_log_eps(*ends(rows.upper if rows.opposite is None else rows.opposite, *_far(table, c)))
    with np.errstate(divide="ignore", invalid="ignore"):
        slack = np.where(edge, np.nan, value / np.minimum(opposite, eps0) - 1)
    lower = lower_eps(table, rows.lower, c, delta)
    if rows.tighter_live:  # the row's own values are no measure of the engine's: its lower bound is
        slack = slack_to_lower(value, lower, edge)
    return value, np.minimum(lower, value), slack, outside, edge


def _far(table: Table, c: Corner) -> tuple[np.ndarray, np.ndarray]:
    """Grid indices of the opposite corner: eps0 rounded down, n up (clipped to the grid)."""
    return np.clip(c.eps0_down, 0, None), np.clip(c.n_up, None, table.n.size - 1)


def lower_eps(table: Table, row: int | None, c: Corner, delta: np.ndarray) -> np.ndarray:
    """Lower bound at (eps0 down, n up, delta up); NaN where the table has none."""
    if row is None:
        return np.full(delta.shape, np.nan)
    d_up = np.searchsorted(table.delta, delta, side="left")
    ok = (c.eps0_down >= 0) & (c.n_up < table.n.size) & (d_up < table.delta.size)
    e, j = _far(table, c)
    d = np.clip(d_up, None, table.delta.size - 1)
    return np.where(ok, table.lower[row, e, j, d], np.nan)


def delta_at(table: Table, rows: Rows, c: Corner, eps0: np.ndarray, eps: np.ndarray) -> tuple[np.ndarray, ...]:
    """(certified delta, lower bound, slack estimate, outside, edge) at eps: the chord of the
    corner's curve; the slack estimate is the ratio to the same chord at the opposite corner."""
    grid = table.delta
    value, first = chord_delta(grid, table.upper[rows.upper][c.eps0_up, c.n_down], eps)
    # eps below the table's eps at the largest delta (and not >= eps0, where delta = 0)
    outside = c.outside | ((first == grid.size) & (eps < eps0))
    value = np.where(eps >= eps0, 0.0, value)  # (eps0, 0)-DP after shuffling
    edge = c.edge | ((first == 0) & (eps < eps0)) | (rows.opposite is None)  # could be below the smallest grid delta
    far = _far(table, c)
    opposite, _ = chord_delta(grid, table.upper[rows.upper if rows.opposite is None else rows.opposite][far], eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        slack = np.where(edge, np.nan, np.where(value > 0, value / opposite - 1, 0.0))
    lower = np.zeros(eps.shape)
    if rows.lower is not None:
        lower_curve = table.lower[rows.lower][far]
        ok = ((c.eps0_down >= 0) & (c.n_up < table.n.size))[:, None] & (lower_curve > eps[:, None])
        lower = np.where(ok, grid[None, :], 0.0).max(axis=1)  # the exact eps at that delta exceeds eps
    if rows.tighter_live:  # measured against the lower bound (a grid delta): unknown where there is none
        slack = slack_to_lower(value, lower, edge)
    return np.where(outside, np.nan, value), np.minimum(lower, value), slack, outside, edge


def chord_delta(grid: np.ndarray, curve: np.ndarray, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(delta on the chord of each certified ``curve`` (queries, grid deltas; non-increasing) at
    ``eps``, rounded up; index of the first grid delta whose eps is <= the query's, grid.size if
    none).  Below the curve's smallest delta the answer is that delta (its eps is <= the query's)."""
    below = curve <= eps[:, None]
    first = np.where(below.any(axis=1), below.argmax(axis=1), grid.size)
    k = np.minimum(first, grid.size - 1)
    prev = np.maximum(k - 1, 0)
    u_small, u_large = np.take_along_axis(curve, prev[:, None], 1)[:, 0], curve[np.arange(k.size), k]
    x, a, b = np.expm1(eps), np.expm1(u_small), np.expm1(u_large)
    with np.errstate(divide="ignore", invalid="ignore"):
        # t = (a - x) / (a - b), widened by its rounding bound (a and b may nearly coincide)
        t = np.where(u_small > u_large, ((a - x) + 8 * UNIT_ROUNDOFF * (abs(a) + abs(b) + abs(x))) / (a - b), 1.0)
    t = np.where(k == 0, 1.0, np.clip(np.nan_to_num(t, nan=1.0), 0.0, 1.0))
    return (grid[prev] + t * (grid[k] - grid[prev])) * (1 + FLOAT_SLACK), first


def eps0_max_at(table: Table, rows: Rows, n: np.ndarray, eps: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, ...]:
    """(largest grid eps0 whose certified eps <= target, slack estimate, outside, edge).

    The slack estimate is b / value - 1 for b the first grid eps0 whose opposite-corner value
    (n rounded up) exceeds the target: the live answer is expected below b (NaN if no grid
    eps0 exceeds it).  For a ``Rows.tighter_live`` row the value ``eps_at``'s slack measures
    against is the lower bound: b is the first grid eps0 where the exact eps is proved above the
    target, so every certified eps0_max is below b."""
    grid = table.eps0
    columns = [eps_at(table, rows, corner(table, np.full_like(n, e0), n, rows.upper), np.full_like(n, e0), delta)
               for e0 in grid]
    ok = np.stack([col[0] <= eps for col in columns], axis=1)  # (queries, eps0)
    ok &= ~np.stack([col[3] for col in columns], axis=1)
    # the largest grid eps0 whose certified eps is <= the target (a prefix on monotone rows)
    found = ok.any(axis=1)
    last = grid.size - 1 - np.argmax(ok[:, ::-1], axis=1)
    value = np.where(found, np.maximum(grid[last], eps), np.nan)  # eps0 = eps is always certified
    with np.errstate(invalid="ignore"):  # the opposite corner's value: value / (1 + slack)
        beyond = np.stack([col[0] / (1 + col[2]) > eps for col in columns], axis=1) & (grid > value[:, None])
    bound = np.where(beyond.any(axis=1), grid[np.argmax(beyond, axis=1)], np.nan)
    edge = found & ((last == grid.size - 1) | (rows.opposite is None))
    return value, np.where(edge, np.nan, bound / value - 1), ~found, edge
