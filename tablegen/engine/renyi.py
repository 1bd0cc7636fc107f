"""Certified Rényi DP of a shuffled round from its certified hockey-stick profile (docs/renyi.md).

For P, Q mutually absolutely continuous (an eps0-LDP randomizer, shuffled: P <= e^eps0 Q and
Q <= e^eps0 P), Taylor's formula with integral remainder for f(t) = t^alpha - 1 gives

    E_Q[(P/Q)^alpha] = 1 + alpha (alpha-1) [ int_0^eps0 e^((alpha-1) e) delta_{P||Q}(e) de
                                            + int_0^eps0 e^(-alpha e) delta_{Q||P}(e) de ],
    D_alpha(P||Q) = log E_Q[(P/Q)^alpha] / (alpha - 1).

Both integrands grow with the curves, so the engine's certified profile u >= delta (both orders,
docs/composition.md step 1) gives an upper bound; between grid points the exact curve is below
the chord in g = e^e (convex, non-increasing), integrated in closed form in log space.  The
lower bound integrates each Theorem-5 lower-bound pair's certified lower curves (both orders of
the pair) as step functions and keeps the largest over the pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import logsumexp

from lookup.format import PROTOCOLS
from lookup.format import UNIT_ROUNDOFF as U
from tablegen import limits, validate
from tablegen.decomposition import Decomposition
from tablegen.engine import closed_form
from tablegen.engine import lower as spectral_lower
from tablegen.engine.bounds import FLOAT_SLACK, SPECTRAL_COMPONENTS, Query, delta_of_decomposition
from tablegen.mechanisms import Mechanism

# dp-accounting's RdpAccountant default orders (DEFAULT_RDP_ORDERS in
# dp_accounting/rdp/rdp_privacy_accountant.py, version 0.6), copied: dp-accounting is optional
DEFAULT_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024])
MAX_ORDERS = 1024
ORDER_MAX = 1e6  # the largest order (alpha (alpha - 1) overflows near 1.3e154; dp-accounting's largest is 1024)
SWAP_PUSH = 2.0**-40  # relative push of a swapped lower pair (_FftLower.curve)
TAIL = 1e-200  # below this the profile is also bounded by Chernoff in log space (no underflow)
GAP_TOL = 1e-2  # refine until chord and step bounds differ by < 1% of D_alpha for every order
GAP_SHARE = 64  # an interval is refined when it alone holds more than GAP_TOL / GAP_SHARE
REFINE_ROUNDS = 8
REFINE_POINTS = 96  # new points per round at most (one vectorised profile evaluation each)
# FFT-path work for profile points the spectral path declines (large eps0): past it the engine
# answers E[G_+] there, the n = 1 value, still an upper bound for every n (bounds.py)
UPPER_FFT_CELLS = 2 * 10**6
LOWER_POINTS = 100  # the lower bound's grid: at most this many of the upper grid's points
LOWER_FFT_CELLS = 2 * 10**6  # FFT-path work for lower points the spectral path declines (< 1 s)
LOWER_FFT_CALLS = 6  # FFT-path lower points in all, shared out over the distinct laws


@dataclass(frozen=True)
class RenyiBounds:
    """Certified RDP (``rdp``) and its lower bound (``rdp_lower``, None where there is none), one
    value per order, for ``rounds`` identical rounds."""

    orders: tuple[float, ...]
    rdp: tuple[float, ...]
    rdp_lower: tuple[float, ...] | None
    rounds: int
    detail: dict[str, Any] = field(default_factory=dict)


def rdp_bounds(mechanism: str | Mechanism, *, eps0: float, n: int, orders: Any = None, rounds: int = 1,
               lower: bool = True, **params: Any) -> RenyiBounds:
    """Certified Rényi divergences of orders ``orders`` (default ``DEFAULT_ORDERS``) between the
    shuffled outputs on neighbouring datasets (both orders of every pair), for ``rounds`` rounds
    (RDP adds up), each also capped by the pure-DP bound eps0; and the lower bound.

    Args:
        mechanism: a registry name or a ``Mechanism``.
        eps0: the local randomizer's eps0.
        n: the number of users.
        orders: the Rényi orders, each in (1, ``ORDER_MAX``] (None: ``DEFAULT_ORDERS``).
        rounds: the number of identical rounds composed, >= 1.
        lower: also compute the lower bounds.
        **params: the family's parameters.

    Returns:
        ``RenyiBounds`` with the orders, the certified divergences and the lower bounds.
    """
    alphas = np.array(validate.finite_list_above("orders", DEFAULT_ORDERS if orders is None else orders, 1.0,
                                                 MAX_ORDERS))
    if alphas.max() > ORDER_MAX:
        raise ValueError(f"every orders value must be in (1, {ORDER_MAX:g}], got {alphas.max()!r} in orders")
    rounds = validate.integer_at_least("rounds", rounds, 1)
    q = _query(mechanism, eps0, n, params)
    grid, log_u = _refined_grid(q, alphas)
    upper = np.minimum(_log_moment(alphas, grid, log_u, both=True) / (alphas - 1) * (1 + FLOAT_SLACK), q.eps0)
    low = None
    if lower and q.lower:
        bound = _lower(q, alphas, grid, log_u)
        low = np.minimum(np.where(np.isfinite(bound), bound, 0.0), upper)  # a non-finite value proves nothing
    detail = {"reference_pure_dp": q.eps0, "grid_points": int(grid.size)}
    return RenyiBounds(tuple(float(x) for x in alphas), tuple(float(x) * rounds for x in upper),
                       None if low is None else tuple(float(x) * rounds for x in low), rounds, detail)


def _query(mechanism: str | Mechanism, eps0: float, n: int, params: dict[str, Any]) -> Query:
    """The engine's query, refusing what has no Rényi reduction here."""
    if mechanism == "generic-closed-form":
        raise ValueError("mechanism='generic-closed-form' is a closed form for (eps, delta) with no privacy curve: "
                         "no Rényi bound; use mechanism='generic' (the standard clone)")
    if mechanism in PROTOCOLS:
        raise ValueError(f"mechanism={mechanism!r} is a multi-message protocol: no Rényi reduction here; use an "
                         "eps0-LDP randomizer (generic, krr, ...)")
    q = Query(mechanism, eps0, n, params, budget=limits.CellBudget(total=UPPER_FFT_CELLS))
    if q.extra_delta(q.eps0) > 0:
        raise ValueError(f"delta0={q.params.get('delta0')!r}: the Rényi divergence of an (eps0, delta0)-LDP "
                         "randomizer can be infinite (no reduction); delta0 must be 0 for rdp")
    return q


def _log_upper(q: Query, eps: np.ndarray) -> np.ndarray:
    """log of a certified upper bound on delta at each eps, both orders: the engine's profile,
    1 - e^(eps - eps0) (P <= e^eps0 Q), and below TAIL the Chernoff bound in log space (also
    where the profile reads 0 before eps0: a double that underflowed would certify nothing
    here, where a tail weighs e^((alpha - 1) eps))."""
    u = np.zeros(eps.shape)
    live = ~np.asarray(q.delta_is_zero(eps))
    u[live] = q.delta_upper_many(eps[live])
    trivial = np.maximum(-np.expm1(eps - q.eps0), 0.0) * (1 + FLOAT_SLACK)
    u = np.minimum(np.where(np.isnan(u), 1.0, u), np.minimum(trivial, 1.0))  # NaN certifies nothing
    with np.errstate(divide="ignore"):
        out = np.log(u)
    for i in np.flatnonzero(live & (u < TAIL)):
        chernoff = max(closed_form.chernoff_log_delta(d, float(eps[i]), q.n) for d in q.upper)
        out[i] = chernoff if u[i] == 0 else min(out[i], chernoff)
    return out


def _weights(c: np.ndarray, a: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For weight e^(c e) on [a, a + h] (c: orders x 1, a and h: intervals; c != 0, c != -1):
    (shift, J, W) with int e^(c e) de = e^shift J and int e^(c e) (e^(a+h) - e^e)/(e^(a+h) - e^a) de
    <= e^shift W (W <= J): the chord's two weights, scaled by e^-shift (shift = c (a + h) for
    c > 0, c a for c < 0) so that nothing overflows.

    W = L / expm1(h), L = int_0^h e^(c s)(e^h - e^s) ds = e^h J - T2 (scaled alike), a difference
    of two nearly equal terms for small h: its rounding error (each term within 5 roundings) is
    bounded by 16 u (e^h J + T2) and added; W is capped by J (the chord's weight is <= 1)."""
    up = c > 0
    ch = c * h
    with np.errstate(over="ignore"):  # each branch is finite where it is selected
        j = np.where(up, -np.expm1(-ch), np.expm1(ch)) / c
        # T2 = expm1((c+1) h)/(c+1), scaled for c > 0: (e^h - e^(-c h))/(c+1) = (expm1(h) - expm1(-c h))/(c+1)
        t2 = np.where(up, (np.expm1(h) - np.expm1(-ch)) / (c + 1), np.expm1((c + 1) * h) / (c + 1))
    t1 = np.exp(h) * j
    ell = np.maximum(t1 - t2, 0.0) + 16 * U * (t1 + t2)
    w = np.minimum(ell / np.expm1(h), j)
    shift = np.where(up, c * (a + h), c * a)
    return shift, j, w


def _interval_logs(c: np.ndarray, grid: np.ndarray, log_u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per order (rows) and interval (columns): log of the chord bound's integral with weight
    e^(c e), and log of its excess over the step bound u_{i+1} (what refining can gain)."""
    shift, j, w = _weights(c[:, None], grid[None, :-1], np.diff(grid)[None, :])
    hi, lo = log_u[:-1], log_u[1:]
    finite = np.isfinite(hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(finite, np.exp(lo - hi), 0.0)  # u_{i+1}/u_i in [0, 1] (running minimum)
        base = np.where(finite, shift + hi, -np.inf)
        chord = base + np.log(r * j + (1 - r) * w)
        gap = base + np.log1p(-r) + np.log(w)
    return chord, gap


def _log_moment(alphas: np.ndarray, grid: np.ndarray, log_u: np.ndarray, both: bool) -> np.ndarray:
    """log E_Q[(P/Q)^alpha] bounded with the chord (``both``: both integrals, the upper bound)."""
    first, _ = _interval_logs(alphas - 1, grid, log_u)
    total = logsumexp(first, axis=1)
    if both:
        second, _ = _interval_logs(-alphas, grid, log_u)
        total = np.logaddexp(total, logsumexp(second, axis=1))
    return np.logaddexp(0.0, np.log(alphas * (alphas - 1)) + total)


def _refined_grid(q: Query, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The grid on [0, eps0] and log u there (running minimum): the starting points, then rounds
    bisecting the intervals whose chord-minus-step gap weighs most on some order's D_alpha."""
    grid = q.eps0 * np.unique(np.concatenate([[0.0], np.geomspace(1e-6, 1.0, 40), np.linspace(0.0, 1.0, 21)]))
    log_u = _log_upper(q, grid)
    for _ in range(REFINE_ROUNDS):
        log_u = np.minimum.accumulate(log_u)
        share = _gap_shares(alphas, grid, log_u, q.eps0)
        if share.sum(axis=1).max(initial=0.0) <= GAP_TOL:
            break
        key = share.max(axis=0)
        pick = np.argsort(key)[::-1][:REFINE_POINTS]
        pick = pick[key[pick] > GAP_TOL / GAP_SHARE]
        if pick.size == 0:
            break
        new = 0.5 * (grid[pick] + grid[pick + 1])
        grid, order = np.unique(np.concatenate([grid, new]), return_index=True)
        log_u = np.concatenate([log_u, _log_upper(q, new)])[order]
    return grid, np.minimum.accumulate(log_u)


def _gap_shares(alphas: np.ndarray, grid: np.ndarray, log_u: np.ndarray, eps0: float) -> np.ndarray:
    """Per order and interval: the chord-minus-step gap's effect on D_alpha relative to D_alpha,
    alpha (alpha - 1) gap / (E log E); 0 for orders already capped at eps0."""
    _, gap1 = _interval_logs(alphas - 1, grid, log_u)
    _, gap2 = _interval_logs(-alphas, grid, log_u)
    log_e = _log_moment(alphas, grid, log_u, both=True)
    active = (log_e > 0) & (log_e / (alphas - 1) < eps0)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.log(alphas * (alphas - 1)) - log_e - np.log(log_e)
        share = np.exp(np.logaddexp(gap1, gap2) + scale[:, None])
    return np.where(active[:, None], np.nan_to_num(share), 0.0)


def _lower(q: Query, alphas: np.ndarray, grid: np.ndarray, log_u: np.ndarray) -> np.ndarray:
    """Largest over the lower-bound pairs of the pair's D_alpha lower bound: its certified lower
    curves (both orders) on at most LOWER_POINTS of the upper grid's points, integrated as step
    functions (``_step_integral``), pushed down by FLOAT_SLACK."""
    keep = np.unique(np.round(np.linspace(0, grid.size - 1, min(grid.size, LOWER_POINTS))).astype(int))
    points = grid[keep]
    fft = _FftLower(q, _priority(alphas, points, log_u[keep]))
    best = np.zeros(alphas.shape)
    for d in q.lower:
        forward, backward = fft.curve(d, points, False), fft.curve(_swapped(d), points, True)
        total = np.logaddexp(_step_integral(alphas - 1, points, forward), _step_integral(-alphas, points, backward))
        log_e = np.logaddexp(0.0, np.log(alphas * (alphas - 1)) + total)
        best = np.maximum(best, log_e / (alphas - 1) * (1 - FLOAT_SLACK))
    return best


def _priority(alphas: np.ndarray, points: np.ndarray, log_u: np.ndarray) -> np.ndarray:
    """Points in the order the FFT path should prove them: a value proved at e_j counts on all of
    [0, e_j] (``_step_integral``), so by the largest share, over the orders, of the upper bound's
    first integral that u(e_j) int_0^e_j e^((alpha-1) e) de would make (an estimate: it only
    orders the points)."""
    c = (alphas - 1)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_j = c * points[None, :] + np.log(-np.expm1(-c * points[None, :])) - np.log(c)
        total = logsumexp(_interval_logs(alphas - 1, points, log_u)[0], axis=1)
        share = np.nan_to_num(log_j + log_u[None, :] - total[:, None], nan=-np.inf).max(axis=0)
    return np.argsort(share)[::-1]


def _step_integral(c: np.ndarray, points: np.ndarray, curve: np.ndarray) -> np.ndarray:
    """log int e^(c e) delta(e) de >= log of the same with delta(e) >= max_{e_j >= e} l(e_j) (delta
    is non-increasing): on [e_i, e_{i+1}] the largest lower value at or after e_{i+1}, so that
    points the lower paths declined (l = 0) take the next proved value; per order (c: one each)."""
    shift, j, _ = _weights(c[:, None], points[None, :-1], np.diff(points)[None, :])
    after = np.maximum.accumulate(curve[::-1])[::-1]
    with np.errstate(divide="ignore"):
        return logsumexp(shift + np.log(j) + np.log(after[1:])[None, :], axis=1)


def _swapped(d: Decomposition) -> Decomposition:
    """The same Theorem-5 pair in the other order (x0 and x1 swapped: u and v swap)."""
    return Decomposition(d.v, d.u, d.c)


class _FftLower:
    """Certified lower curves of lower-bound pairs, the FFT path filling in where the spectral
    path declines: at most ``per_law`` points per law, the first declined ones in ``priority``
    order, within LOWER_FFT_CELLS in all.  A law met twice (k-RR's pairs x2 = x1 and x2 = x0 are
    each other's swap) is evaluated once."""

    def __init__(self, q: Query, priority: np.ndarray) -> None:
        self.q, self.priority = q, priority
        self.budget = limits.CellBudget(total=LOWER_FFT_CELLS)
        laws = {_key(d) for d in q.lower} | {_key(_swapped(d)) for d in q.lower}
        # no FFT lower bound beyond CLOSED_FORM_N (bounds.py, delta_of_lower_pair)
        self.per_law = max(1, LOWER_FFT_CALLS // len(laws)) if q.n <= limits.CLOSED_FORM_N else 0
        self.done: dict[bytes, np.ndarray] = {}

    def curve(self, d: Decomposition, eps: np.ndarray, swapped: bool) -> np.ndarray:
        """The pair's lower curve at ``eps`` (``_raw``).  For the ``swapped`` order less SWAP_PUSH (max u +
        e^eps max v): merged components of a lower pair are pushed (u down, v up) for the first
        order only, by (m + 4) 2^-52 per merge of m components, adding up over the merge rounds of
        a joint product (82 u measured for 6 parts of k-RR's pair; 2^-40 = 8192 u bounds it with
        room), and (1/n) (S)_+ moves by at most the largest change of one atom."""
        key = _key(d)
        if key not in self.done:
            self.done[key] = self._raw(d, eps)
        push = SWAP_PUSH * (np.max(np.abs(d.u)) + np.exp(eps) * np.max(np.abs(d.v))) if swapped else 0.0
        return np.maximum(self.done[key] - push, 0.0)

    def _raw(self, d: Decomposition, eps: np.ndarray) -> np.ndarray:
        """Spectral (where it answers) or FFT (where budgeted) and few-users lower bounds, the
        larger, 0 where none answers."""
        q = self.q
        spectral = np.full(eps.shape, np.nan)
        if q.n > 1 and d.c.size <= SPECTRAL_COMPONENTS:
            spectral = spectral_lower.delta_lower(d, eps, np.full(eps.shape, q.n))
        declined = [i for i in self.priority if i > 0 and np.isnan(spectral[i])]  # eps = 0 ends no interval
        for i in declined[:self.per_law]:
            if self.budget.left > limits.FFT_CALL_CELLS:
                spectral[i] = delta_of_decomposition(d, float(eps[i]), q.n, False, q.lower_resolution, self.budget)
        few = np.array([closed_form.few_users_delta(d, float(e), q.n) for e in eps])
        return np.maximum(np.nan_to_num(spectral, nan=0.0), few)


def _key(d: Decomposition) -> bytes:
    """The law of G of ``d`` (its components in a canonical order), as a dictionary key."""
    table = np.stack([d.u, d.v, d.c])
    return table[:, np.lexsort(table)].tobytes()
