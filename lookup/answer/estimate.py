"""Smooth estimates from a table: monotone cubic (PCHIP) interpolation of log eps.

An estimate is NOT certified and is never published as such: ``lookup.answer.api`` inflates it and
publishes it only after one engine evaluation certifies it (``tablegen.engine.certifies``).
No certified interpolation stronger than monotone rounding is known (docs/lookup.md), which is
why the estimate is only a candidate.

The estimate at (eps0, n, delta) is the tensor product of one-dimensional PCHIP interpolants
(Fritsch and Carlson 1980, with the endpoint rule of Moler's ``pchip``) of log eps in log delta,
then in log n (at every grid eps0 at once), then in log eps0.  PCHIP's slope at a node uses
only its two neighbours, so the 4 grid points around the query on each axis give the
interpolant of the whole axis.  Pure numpy, vectorised over queries.
"""

from __future__ import annotations

import numpy as np

from lookup.answer.rules import Rows
from lookup.store.table import Table

STENCIL = 4  # nodes per axis
BISECTIONS = 24  # eps0_estimate: bracket narrowed 2^24-fold (to ~1e-7 in log eps0)


def eps_estimate(table: Table, rows: Rows, eps0: np.ndarray, n: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Estimated eps at each query (clamped to the grid's ranges), capped at eps0."""
    return np.minimum(np.exp(along_eps0(table, log_eps_curve(table, rows, n, delta), eps0)), eps0)


def lower_ratio(table: Table, row: int, eps0: float, n: float, delta: float) -> float:
    """Estimated ratio of the engine's lower bound to its certified eps at a query: the table's
    lower / upper at the nearest grid point where lower bounds were computed (spec setting
    ``lower_every``; in log eps0, log n and log delta), capped at 1; NaN where the table has none."""
    every = table.lower_every
    if not every:
        return float("nan")
    e = _nearest_multiple(table.eps0, eps0, every[0])
    j = _nearest_multiple(table.n, n, every[1])
    d = int(np.argmin(np.abs(np.log(table.delta / delta))))
    upper = float(table.upper[row, e, j, d])
    return min(float(table.lower[row, e, j, d]) / upper, 1.0) if upper > 0 else float("nan")


def _nearest_multiple(axis: np.ndarray, x: float, every: int) -> int:
    """Index of the axis point nearest x in log among the indices that are multiples of ``every``."""
    candidates = np.arange(0, axis.size, every)
    return int(candidates[np.argmin(np.abs(np.log(axis[candidates] / x)))])


def eps0_estimate(table: Table, rows: Rows, n: np.ndarray, eps: np.ndarray, delta: np.ndarray, low: np.ndarray,
                  high: np.ndarray) -> np.ndarray:
    """Estimated largest eps0 in [low, high] whose estimated eps is <= ``eps`` (bisection in
    log eps0; ``high`` where the estimate stays below ``eps``)."""
    curve = log_eps_curve(table, rows, n, delta)
    low, high = np.log(low), np.log(high)
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        below = np.minimum(along_eps0(table, curve, np.exp(middle)), middle) <= np.log(eps)
        low, high = np.where(below, middle, low), np.where(below, high, middle)
    return np.exp(low)


def log_eps_curve(table: Table, rows: Rows, n: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Estimated log eps at every grid eps0 (queries, eps0 axis) at each query's (n, delta): PCHIP
    in log delta, then in log n; for k-RR between two grid k, linear in log k between the rows."""
    curve = _row_curve(table, rows.upper, n, delta)
    if rows.blend and rows.opposite is not None:
        curve = (1 - rows.blend) * curve + rows.blend * _row_curve(table, rows.opposite, n, delta)
    return curve


def _row_curve(table: Table, row: int, n: np.ndarray, delta: np.ndarray) -> np.ndarray:
    n_axis, delta_axis = np.log(table.n), np.log(table.delta)
    log_n, log_delta = np.log(n), np.log(delta)
    j, d = stencil(n_axis, log_n), stencil(delta_axis, log_delta)
    cube = np.moveaxis(table.upper[row][:, j[:, :, None], d[:, None, :]], 0, 1)  # (queries, eps0, n, delta)
    values = pchip(delta_axis[d], np.log(np.maximum(cube, np.finfo(float).tiny)), log_delta)
    return pchip(n_axis[j], values, log_n)


def along_eps0(table: Table, curve: np.ndarray, eps0: np.ndarray) -> np.ndarray:
    """PCHIP in log eps0 of ``curve`` (queries, eps0 axis) at each query's eps0."""
    axis, x = np.log(table.eps0), np.log(eps0)
    e = stencil(axis, x)
    return pchip(axis[e], np.take_along_axis(curve, e, axis=1), x)


def stencil(axis: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Indices (queries, min(4, axis size)) of the nodes around each x: the interval holding x
    and one more node on each side where the axis has one."""
    width = min(STENCIL, axis.size)
    interval = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, max(axis.size - 2, 0))
    return np.clip(interval - 1, 0, axis.size - width)[:, None] + np.arange(width)


def pchip(x: np.ndarray, y: np.ndarray, t: np.ndarray) -> np.ndarray:
    """PCHIP interpolant through nodes ``x`` (queries, k), ascending, and values ``y``
    (queries, ..., k) at ``t`` (queries,), clamped to [x_0, x_{k-1}]: shape (queries, ...)."""
    k = x.shape[1]
    if k == 1:
        return y[..., 0]
    lead = (x.shape[0],) + (1,) * (y.ndim - 2)
    h = np.diff(x, axis=1).reshape(lead + (k - 1,))
    m = np.diff(y, axis=-1) / h
    d = slopes(h, m)
    rows = np.arange(x.shape[0])
    i = np.clip(np.sum(x[:, 1:-1] <= t[:, None], axis=1), 0, k - 2)
    width = (x[rows, i + 1] - x[rows, i]).reshape(lead)
    s = np.clip((t - x[rows, i]).reshape(lead) / width, 0.0, 1.0)

    def at(a: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.take_along_axis(a, np.broadcast_to(index.reshape(lead + (1,)), a.shape[:-1] + (1,)), -1)[..., 0]

    # cubic Hermite basis on the interval [x_i, x_{i+1}]
    return ((1 + 2 * s) * (1 - s) ** 2 * at(y, i) + s * (1 - s) ** 2 * width * at(d, i)
            + s * s * (3 - 2 * s) * at(y, i + 1) + s * s * (s - 1) * width * at(d, i + 1))


def slopes(h: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Fritsch-Carlson node slopes from interval widths ``h`` and secants ``m`` (last axis):
    interior, the weighted harmonic mean of the neighbouring secants (0 where they differ in
    sign, so the interpolant is monotone wherever the data are); ends, the three-point rule
    limited to keep the same shape."""
    if m.shape[-1] == 1:
        return np.concatenate([m, m], axis=-1)
    h = np.broadcast_to(h, m.shape)
    w1, w2 = 2 * h[..., 1:] + h[..., :-1], h[..., 1:] + 2 * h[..., :-1]
    same = m[..., :-1] * m[..., 1:] > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = np.where(same, (w1 + w2) / (w1 / m[..., :-1] + w2 / m[..., 1:]), 0.0)
    first = _end(h[..., 0], h[..., 1], m[..., 0], m[..., 1])
    last = _end(h[..., -1], h[..., -2], m[..., -1], m[..., -2])
    return np.concatenate([first[..., None], inner, last[..., None]], axis=-1)


def _end(h0: np.ndarray, h1: np.ndarray, m0: np.ndarray, m1: np.ndarray) -> np.ndarray:
    d = ((2 * h0 + h1) * m0 - h0 * m1) / (h0 + h1)
    d = np.where(np.sign(d) != np.sign(m0), 0.0, d)
    return np.where((np.sign(m0) != np.sign(m1)) & (np.abs(d) > 3 * np.abs(m0)), 3 * m0, d)
