"""Certified bounds for the shuffled Gaussian on bits (``tablegen.mechanisms.gaussian``).

Upper bound: the privacy-blanket bound (1/n) E[(G_1 + ... + G_n)_+] of the pair (0, 1).  G has a
lognormal upper tail, so it is split at a clip U = e^L of its likelihood ratio u: X = min(u, U) - alpha
v, Y = (u - U)_+ >= 0, and for every s >= 0, with b = n s (alpha - 1),

    delta <= (1/n) E[(sum (X_i + s (alpha - 1)))_+]                          (A: the spectral engine)
           + sum_k P(J' = k) E[(Y - b / (k + 1))_+] + P(J' >= K) E[Y]        (B: closed forms)

J' ~ Bin(n - 1, P(Y > 0)).  Every plan (L, s) gives a bound; so does E[G_+] (the n = 1 value); the
smallest is answered.  Lower bound: the exact pair "others at 0" (Theorem 5 of arXiv:2504.07414) on
the spectral lower path, the largest report of that pair exceeding a threshold (closed form), and the
sum of the outputs (a Gaussian mechanism).  Proofs:
docs/soundness.md, "Shuffled Gaussian".
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import gammaln

from lookup.format import FLOAT_SLACK
from tablegen import limits, validate
from tablegen.engine import lower as spectral_lower
from tablegen.engine import spectral
from tablegen.engine.bounds import DELTA_FLOOR, Bounds, chord_eps
from tablegen.engine.search import shrink_bracket
from tablegen.mechanisms import gaussian as law

TAIL_SHARE = 1e-3  # the clip of plain plans leaves an excess E[Y] of at most this share of delta
PLAIN_SHARES = (1.0, 10.0, 100.0, 300.0, 600.0, 970.0)  # eps_bounds' plain plans: excess up to these x 1e-3 delta
CLIP_STEP = 0.25  # clips are multiples of this (in log u)
CLIP_MAX = 20.0  # no clip above this: the spectral path loses its tilt there (docs/soundness.md)
ENGINE_CLIPS = (3.0, 5.0, 7.0, 9.0, 11.0)  # clips of the shifted plans (where the excess needs the jump series)
HIGH_CLIPS = (13.0, 15.0, 17.0, 19.0)  # added in turn while more than CROWDED_TAIL others are expected beyond
CROWDED_TAIL = 1e-2  # the clip below (there the jump series' terms run out: small sigma, large n)
SHIFTS = (0.1, 0.5, 0.85)
FINER_SHIFTS = (0.02, 0.3, 0.7, 0.95)  # tried beside the best plan's clip in the second round
JUMPS = 40  # terms of the jump series before its remainder
USELESS_TILT = 30.0  # the spectral path declines a plan whose tilt factor x step / n exceeds e^this (spectral
# declines at e^100): on the 360 points of docs/mechanisms.md's live sweep none above e^30 bounded delta below
# 5e3, and one such evaluation cost 1 s (sigma 0.7, n 100, clip 8.75 at the closed-form lower eps)
GRID, GRID_CHUNK = 8, 2  # eps points of the first round of a search, evaluated this many at a time
SECOND_GRID = 5  # and of the second, inside the first's bracket (8 cost 0.2 s more at sigma 0.25-0.4, n 1e9,
# where round two is half of an answer; 13 bench points the same, one 6.7e-5 looser)
SEARCH_FLOOR = 1e-9  # the search starts at this fraction of the single-user eps
SECOND_ROUND = 4  # plans (the best at the bracket's ends, alternately) evaluated again inside the bracket
RTOL = 1e-4
LOWER_SPAN, LOWER_RTOL = 4.0, 1e-3  # the lower bound is searched on [upper / LOWER_SPAN, upper], to this width
DELTA_LADDER = (1e-3, 1e-6, 1e-9, 1e-12, 1e-15)  # delta_bounds tries the plain clips of these deltas
CURVE_POINTS = 16  # eps points of eps_curve's first grid
CURVE_HEADROOM, CURVE_BELOW = 4.0, 4  # eps_curve's first grid (_first_grid)
CURVE_NUDGE = 0.005  # refinement points this far past the predicted crossing
CURVE_WIDE = 0.1  # brackets wider than this (relative) are also halved
CURVE_TOL = 0.01  # a delta whose answer is predicted this close to its crossing is not refined further
CURVE_ROUNDS = 3  # rounds of them
CURVE_NEAR = 2.0  # the refinement evaluates a plan only where it can be the smallest bound (``_near_plans``)
CURVE_LOWER_ROUNDS = 2  # and for the lower bounds
NEAR_CELLS_USERS = 10**5  # the exact pairs on nearer cells from here on: below it the largest report decides
# every lower bound of the shipped sigma file (the 132 cells they raise have n >= 5.6e5), and they cost about
# 0.5 s an answer (sigma 0.5-0.7, n 1e3)


def plain_clip(sigma: float, delta: float) -> float:
    """The smallest clip (a multiple of CLIP_STEP, at most CLIP_MAX) whose excess E[Y] is at most
    TAIL_SHARE delta (CLIP_MAX where none is)."""
    clips = np.arange(CLIP_STEP, CLIP_MAX + CLIP_STEP / 2, CLIP_STEP)
    ok = law.excess(sigma, clips) <= TAIL_SHARE * delta
    return float(clips[np.argmax(ok)]) if ok.any() else CLIP_MAX


def plans(sigma: float, *deltas: float, n: int = 1) -> list[tuple[float, float]]:
    """(clip, shift) pairs tried: the plain clips of ``deltas`` unshifted, and the shifted ones below them:
    ENGINE_CLIPS, then each of HIGH_CLIPS while the n - 1 other users' expected reports beyond the clip
    before it exceed CROWDED_TAIL (the jump series' JUMPS terms cover too few of them there, so it falls to
    E[Y]: at sigma 0.3, n 1e9, delta 1e-6 the eps was 20.96 with ENGINE_CLIPS alone, 0.80 with these)."""
    tops = sorted({plain_clip(sigma, d) for d in deltas})
    clips = list(ENGINE_CLIPS)
    for clip in HIGH_CLIPS:
        if (n - 1) * law.tail_mass(sigma, clips[-1]) <= CROWDED_TAIL:
            break
        clips.append(clip)
    return [(top, 0.0) for top in tops] + [(clip, s) for clip in clips if clip < tops[-1] for s in SHIFTS]


def jump_series(sigma: float, clip: float, n: int, b: np.ndarray) -> np.ndarray:
    """Term B: sum_k P(J' = k) E[(Y - b/(k+1))_+] + P(J' >= K) E[Y], each probability bounded above
    (C(N, k) p^k (1-p)^(N-k) <= (N p)^k / k! e^(-(N-k) p), P(J' >= K) <= (N p)^K / K!), N = n - 1,
    with p rounded up in the powers and down in the exponential."""
    p_low = law.tail_mass(sigma, clip)
    p_high, users = p_low * (1 + 2 * law.NORMAL_RTOL) / (1 - law.NORMAL_RTOL), n - 1
    b = np.asarray(b, dtype=float)
    if users == 0 or p_high == 0:
        return law.excess(sigma, clip, b)
    k = np.arange(JUMPS)
    log_np = math.log(users * p_high)
    value, error = law.exp_with_error(k * log_np - gammaln(k + 1) - np.maximum(users - k, 0) * p_low)
    weight = value * (1 + error)
    terms = law.excess(sigma, clip, b[..., None] / (k + 1)) * weight
    tail, tail_error = law.exp_with_error(min(JUMPS * log_np - float(gammaln(JUMPS + 1)), 0.0))
    rest = min(float(tail) * (1 + float(tail_error)), 1.0) * float(law.excess(sigma, clip))
    return terms.sum(axis=-1) + rest


def single_user(sigma: float, eps: np.ndarray) -> np.ndarray:
    """E[G_+] of the unclipped blanket law: the Gaussian mechanism's delta at mu = 1 / sigma, pushed up;
    (1/n) E[(sum G_i)_+] <= E[G_+] for every n."""
    return law.gaussian_mechanism_delta(1.0 / sigma, eps, up=True)


def plan_delta(sigma: float, n: int, eps: np.ndarray, clip: float, shift: float) -> np.ndarray:
    """A + B of one plan at each eps (inf where the spectral path declines)."""
    d = law.blanket(sigma, clip, shift)
    main = spectral.delta_upper(d, eps, np.full(eps.shape, n), useless_log=USELESS_TILT, phase_products=True)
    main = np.where(np.isfinite(main), main, np.inf)
    return main + jump_series(sigma, clip, n, n * shift * np.expm1(eps))


def plan_values(sigma: float, n: int, eps: np.ndarray, tried: list[tuple[float, float]],
                wanted: np.ndarray | None = None) -> np.ndarray:
    """Each plan's bound at each eps (rows: ``tried``, then E[G_+]); a NaN proves nothing: infinite.  Where
    E[G_+] is at most DELTA_FLOOR, to which every answer is raised, the plans are not evaluated (infinite),
    nor where ``wanted`` (plans x eps) is False."""
    single = single_user(sigma, eps)
    values = np.full((len(tried) + 1, eps.size), np.inf)
    values[-1] = single
    for row, (clip, shift) in enumerate(tried):
        live = (single > DELTA_FLOOR) & (True if wanted is None else wanted[row])
        if live.any():
            values[row, live] = plan_delta(sigma, n, eps[live], clip, shift)
    return np.where(np.isnan(values), np.inf, values)


def delta_upper(sigma: float, n: int, eps: np.ndarray, tried: list[tuple[float, float]]
                ) -> tuple[np.ndarray, np.ndarray]:
    """The smallest bound over the plans ``tried`` and E[G_+] at each eps, with the index of the plan
    that gave it (-1: E[G_+]); pushed up by FLOAT_SLACK.  A NaN proves nothing: counted infinite."""
    values = plan_values(sigma, n, eps, tried)
    best = np.argmin(values, axis=0)
    return _smallest(values), np.where(best == len(tried), -1, best)


def delta_lower(sigma: float, n: int, eps: np.ndarray) -> np.ndarray:
    """The largest of the sum of the outputs' delta, the largest report's (``law.largest_report_delta`` on
    ``law.LARGEST_Z``) and the exact pairs' lower bounds on the spectral lower path (a pair it declines
    counts 0: a lower bound too, in milliseconds; the FFT path would take seconds there), answered up to the
    slices' rounding bracket, ``lower.SLICE_MAX_GAP``, whose lower end is certified at any width (at the
    live 5% the pairs were declined from eps 0.011 on at sigma 0.5, n 1e5, where delta 1e-3's lower eps was
    0.0177 instead of 0.031, upper 0.049), their cells ending at the first of ``law.pair_clips``, then, from
    NEAR_CELLS_USERS users on, at the next ones for the eps where every pair was declined (at sigma 0.5, n 1e9,
    delta 1e-6 the lower eps rises from 1.1e-4 to 5.0e-4, upper 7.7e-4)."""
    out = law.sum_delta(sigma, n, eps)
    if n == 1:
        return out
    out = np.maximum(out, law.largest_report_delta(sigma, n, eps[None, :], law.LARGEST_Z[:, None]).max(axis=0))
    pending = np.ones(eps.shape, dtype=bool)
    for clip in law.pair_clips(sigma)[:None if n >= NEAR_CELLS_USERS else 1]:
        proved = np.zeros(int(pending.sum()), dtype=bool)
        for d in law.exact_pairs(sigma, clip=clip):
            try:
                value = spectral_lower.delta_lower(d, eps[pending], np.full(proved.shape, n),
                                                   max_gap=spectral_lower.SLICE_MAX_GAP, phase_products=True)
            except ValueError:  # a plan the spectral path cannot size (sigma 10, n 1e9, eps 3e-5): proves nothing
                continue
            out[pending] = np.maximum(out[pending], np.nan_to_num(value, nan=0.0))
            proved |= np.isfinite(value)
        pending[pending] = ~proved
        if not pending.any():
            break
    return out


def _checked(sigma: float, n: int) -> tuple[float, int]:
    return law.check_sigma(sigma), limits.checked_n(n)


def delta_bounds(sigma: float, n: int, eps: float, lower: bool = True) -> Bounds:
    """Certified delta at eps for n users reporting bits with Gaussian noise of sd ``sigma``.

    Args:
        sigma: the noise's standard deviation in units of the input range, in [SIGMA_MIN, SIGMA_MAX].
        n: users.
        eps: eps >= 0.
        lower: also the lower bound (``delta_lower``).
    """
    sigma, n = _checked(sigma, n)
    eps = validate.nonnegative_finite("eps", eps)
    grid = np.array([eps])
    tried = plans(sigma, *DELTA_LADDER, n=n)
    upper, plan = delta_upper(sigma, n, grid, tried)
    low = float(delta_lower(sigma, n, grid)[0]) if lower else None
    # the Gaussian's delta is never 0: a bound that underflowed is reported as DELTA_FLOOR (larger)
    return Bounds(max(float(upper[0]), DELTA_FLOOR), low, _detail(tried, int(plan[0])))


def _detail(tried: list[tuple[float, float]], plan: int) -> dict[str, object]:
    if plan < 0:
        return {"bound": "E[G_+] (the n = 1 value)"}
    clip, shift = tried[plan]
    return {"bound": f"blanket, u clipped at e^{clip:g}" + (f", shifted by {shift:g} (alpha - 1)" if shift else "")}


def eps_bounds(sigma: float, n: int, delta: float, lower: bool = True, rtol: float = RTOL) -> Bounds:
    """Certified eps at delta for n users reporting bits with Gaussian noise of sd ``sigma``.

    The first round evaluates every plan on a grid of eps; the bracket found is narrowed with the plan
    that certified its upper end, and the answer is the chord of the two evaluated ends (the blanket
    bound is convex in e^eps, so the chord of upper bounds lies above it: docs/soundness.md).

    Args:
        sigma: the noise's standard deviation in units of the input range, in [SIGMA_MIN, SIGMA_MAX].
        n: users.
        delta: target delta in (0, 1).
        lower: also the lower bound.
        rtol: relative width of the final bracket.

    Raises:
        ValueError: a parameter out of range, or no eps up to the search's top is certified.
    """
    sigma, n = _checked(sigma, n)
    delta = _checked_delta(delta)
    tried = plans(sigma, *(delta * share for share in PLAIN_SHARES), n=n)
    top = single_user_eps(sigma, delta)
    # no upper bound lies below a lower bound: the first grid starts at the closed forms' eps (at sigma 0.7,
    # n 1e3, delta 1e-6: 0.95 against the answer 0.985), where the plans decline far less than near 0
    low = min(max(SEARCH_FLOOR * top, _closed_form_eps_lower(sigma, n, delta)), top / 2)
    a, da, b, db, narrowing, ranked, ends = _bracket(sigma, n, delta, tried, np.geomspace(low, top, GRID))
    if a > 0:  # a second round inside the bracket: the plans best at its ends, the best at finer shifts, the
        # plain ones; of those evaluated, only the ones that proved something at an end (a plan declined at
        # both, e.g. a high clip whose lattice outgrows the spectral path, cost up to 1 s there for nothing)
        best = [tried[i] for i in ranked[:SECOND_ROUND]]
        if best and best[0][1] > 0:
            best += [(best[0][0], s) for s in FINER_SHIFTS]
        plain = [i for i, p in enumerate(tried) if p[1] == 0 and i in ranked]
        tried = list(dict.fromkeys(best + [tried[i] for i in narrowing + plain]))
        grid = np.concatenate([[a], np.geomspace(a, b, SECOND_GRID)[1:-1], [b]])
        a, da, b, db, narrowing, _, _ = _bracket(sigma, n, delta, tried, grid, ends, (a, da))
    chosen = [tried[i] for i in narrowing]

    def log_over(eps: float) -> float:  # log(bound / delta): the sign of bound - delta, and near linear
        # in eps where the bound spans decades (regula falsi on bound - delta crept by 2% of the bracket
        # a step there: 16 evaluations at sigma 0.5, n 1e4, delta 1e-12)
        with np.errstate(divide="ignore"):
            return float(np.log(delta_upper(sigma, n, np.array([eps]), chosen)[0][0] / delta))

    if a > 0:
        with np.errstate(divide="ignore"):
            a, b = shrink_bracket(log_over, a, float(np.log(da / delta)), b, float(np.log(db / delta)), rtol)
        da, db = (float(delta_upper(sigma, n, np.array([e]), chosen)[0][0]) for e in (a, b))
    upper = float(chord_eps(a, da, b, db, delta)) if a > 0 else b  # the engine's one chord rule, capped at b
    plan = int(delta_upper(sigma, n, np.array([b]), chosen)[1][0])
    return Bounds(upper, _eps_lower(sigma, n, delta, upper) if lower else None, _detail(chosen, plan))


def _bracket(sigma: float, n: int, delta: float, tried: list[tuple[float, float]], grid: np.ndarray,
             known: dict[tuple[float, float], np.ndarray] | None = None, below: tuple[float, float] = (0.0, math.inf)
             ) -> tuple[float, float, float, float, list[int], list[int], dict[tuple[float, float], np.ndarray]]:
    """(a, delta at a, b, delta at b, the plans to narrow [a, b] with, the plans ranked, each plan's values at
    a and b) from the points ``grid`` with every plan: b the first point certified, a the point before it
    (``below`` where b is the first point).  Narrowing: the plan smallest at b and, of those certifying b,
    the one smallest at a; ranked: the best at a and at b, alternately, of the plans finite at a or b.
    ``known``: plans' values at the grid's ends, evaluated before (a second round's ends are the first's
    bracket; at sigma 1, n 100 one plan cost 0.4 s there again)."""
    each = _grid_values(sigma, n, grid, tried, known) if known else _up_to_certified(sigma, n, delta, grid, tried)
    values = _smallest(each)
    ok = np.flatnonzero(values <= delta)
    if not ok.size:
        raise ValueError(f"no eps up to {grid[-1]:g} is certified at delta={delta:g} for sigma={sigma:g}, n={n}")
    j = int(ok[0])
    a, da = (float(grid[j - 1]), float(values[j - 1])) if j else below
    before = j - 1 if j else j
    certifying = np.flatnonzero(each[:, j] * (1 + FLOAT_SLACK) <= delta)
    narrowing = {int(np.argmin(each[:, j])), int(certifying[np.argmin(each[certifying, before])])}
    at_a, at_b = (np.argsort(each[:-1, k], kind="stable") for k in (before, j))
    finite = np.isfinite(each[:-1, before]) | np.isfinite(each[:-1, j])
    ranked = list(dict.fromkeys(int(i) for pair in zip(at_a, at_b, strict=True) for i in pair if finite[i]))
    ends = {plan: each[i, [before, j]] for i, plan in enumerate(tried)}
    return a, da, float(grid[j]), float(values[j]), sorted(i for i in narrowing if i < len(tried)), ranked, ends


def _up_to_certified(sigma: float, n: int, delta: float, grid: np.ndarray, tried: list[tuple[float, float]]
                     ) -> np.ndarray:
    """``plan_values`` on ``grid``, GRID_CHUNK points at a time from the smallest eps, up to the first chunk
    with a certified point (infinite beyond it: ``_bracket`` reads only that point and the one before it).
    At sigma 0.7, n 1e9 the plain plans' points at 10-1000x the answer cost 0.5 s and were never read."""
    each = np.full((len(tried) + 1, grid.size), np.inf)
    for start in range(0, grid.size, GRID_CHUNK):
        chunk = slice(start, start + GRID_CHUNK)
        each[:, chunk] = plan_values(sigma, n, grid[chunk], tried)
        if np.any(_smallest(each[:, chunk]) <= delta):
            break
    return each


def _smallest(each: np.ndarray) -> np.ndarray:
    """Each eps's smallest bound over the plans (rows of ``each``), pushed up by FLOAT_SLACK: what a grid
    point certifies."""
    return each.min(axis=0) * (1 + FLOAT_SLACK)


def _grid_values(sigma: float, n: int, grid: np.ndarray, tried: list[tuple[float, float]],
                 known: dict[tuple[float, float], np.ndarray]) -> np.ndarray:
    """``plan_values`` on ``grid``, taking the plans' values at its two ends from ``known`` where there."""
    each = np.empty((len(tried) + 1, grid.size))
    each[:, 1:-1] = plan_values(sigma, n, grid[1:-1], tried)
    new = [plan for plan in tried if plan not in known]
    fresh = dict(zip(new, plan_values(sigma, n, grid[[0, -1]], new)[:-1], strict=True))
    each[:-1, [0, -1]] = [known.get(plan, fresh.get(plan)) for plan in tried]
    each[-1, [0, -1]] = single_user(sigma, grid[[0, -1]])
    return each


def delta_curve(sigma: float, n: int, eps: np.ndarray, smallest: float = DELTA_LADDER[-1]) -> np.ndarray:
    """Certified delta at each eps (the smallest bound over the plain clips of ``DELTA_LADDER``'s deltas and,
    down to ``smallest``, of every fifth decade below it, the shifted plans and E[G_+]): the round's privacy
    profile, which bounds both orders of the pair (y -> 1 - y exchanges them and maps the blanket law to
    itself).  A composition's profile must reach its tail cut (1e-30): without clips for such deltas the
    bound stalls at the largest clip's excess (about 1e-20 at sigma 4), so ``compose`` asks for 1e-35."""
    sigma, n = _checked(sigma, n)
    return _floored(delta_upper(sigma, n, np.asarray(eps, dtype=float), curve_plans(sigma, n, smallest))[0])


def curve_plans(sigma: float, n: int, smallest: float = DELTA_LADDER[-1]) -> list[tuple[float, float]]:
    """``delta_curve``'s plans: those of DELTA_LADDER's deltas and the plain clips of every fifth decade below
    it down to ``smallest`` (plain only: they reach the tail, 5.9e-40 at sigma 4, and the shifted plans below
    them would cost a third more)."""
    deeper = 10.0 ** np.arange(math.log10(DELTA_LADDER[-1]) - 5, math.log10(smallest) - 5 + 1e-9, -5)
    tried = plans(sigma, *DELTA_LADDER, n=n)
    return tried + [plan for plan in {(plain_clip(sigma, d), 0.0) for d in deeper} if plan not in tried]


def _floored(delta: np.ndarray) -> np.ndarray:
    """Certified deltas raised to DELTA_FLOOR (never 0)."""
    return np.maximum(delta, DELTA_FLOOR)


def eps_curve(sigma: float, n: int, deltas: np.ndarray | list[float]) -> tuple[np.ndarray, np.ndarray]:
    """(certified eps, lower bound) at each of ``deltas`` from the privacy profile, for a table's slice.

    ``delta_curve`` (the plans of DELTA_LADDER's deltas, shifted plans, E[G_+]) on ``_first_grid`` (around the
    closed-form lower eps, extended to the single-user eps at the smallest delta, certified by E[G_+] alone,
    where some delta is not certified yet), ``delta_lower`` on its part below the largest answer, then each
    on one point per delta per round where its answer is predicted (``_refined``); at each delta the
    certified eps is the chord of the evaluated points around it (the exact delta is convex in e^eps, so
    the chord of two upper bounds lies above it: docs/soundness.md, "Shuffled Gaussian", step 5), the
    lower bound the largest point whose lower bound is above it, or the closed forms (largest report,
    sum of the outputs).  Every delta at the cost of about two rounds of ``eps_bounds``' search, looser
    than it by the plans it does not tune to each delta."""
    sigma, n = _checked(sigma, n)
    deltas = np.array([_checked_delta(d) for d in np.atleast_1d(np.asarray(deltas, dtype=float))])
    closed = np.array([_closed_form_eps_lower(sigma, n, float(d)) for d in deltas])
    top = single_user_eps(sigma, float(deltas.min()))
    grid = _first_grid(closed, SEARCH_FLOOR * top, top)
    tried = curve_plans(sigma, n)
    each = plan_values(sigma, n, grid, tried)
    if _floored(_smallest(each)).min() > deltas.min():  # a delta no point certifies yet: on to the single-user
        more = np.geomspace(grid[-1], top, CURVE_POINTS // 2)[1:]  # eps, which does
        grid, each = np.append(grid, more), np.append(each, plan_values(sigma, n, more, tried), axis=1)
    upper = _floored(_smallest(each))
    grid_up, upper = _refined(lambda eps: _floored(_smallest(plan_values(sigma, n, eps, tried,
                                                                         _near_plans(grid, each, eps)))),
                              grid, upper, deltas, CURVE_ROUNDS, 1.0)
    j = np.array(_crossings(upper, deltas))
    if np.any(upper[j] > deltas):  # cannot happen: the grid ends at single_user_eps, which certifies every delta
        raise ValueError(f"no eps up to {grid_up[-1]:g} is certified at some delta for sigma={sigma:g}, n={n}")
    certified = np.where(upper[j - 1] <= deltas, grid_up[j - 1],
                         chord_eps(grid_up[j - 1], upper[j - 1], grid_up[j], upper[j], deltas))
    # no lower bound exceeds a delta where an upper bound is at most it: the lower grid stops at the largest answer
    grid = grid[: np.searchsorted(grid, certified.max()) + 1]
    grid_low, lower = _refined(lambda eps: delta_lower(sigma, n, eps), grid, delta_lower(sigma, n, grid), deltas,
                               CURVE_LOWER_ROUNDS, -1.0)
    above = lower[None, :] > deltas[:, None]
    from_grid = np.where(above.any(axis=1), grid_low[grid_low.size - 1 - np.argmax(above[:, ::-1], axis=1)], 0.0)
    return np.asarray(certified, dtype=float), np.minimum(np.maximum(from_grid, closed), certified)


def _near_plans(grid: np.ndarray, each: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Which plans (rows of ``each``, the plans' bounds on ``grid``, E[G_+] last) to evaluate at each of
    ``eps`` (inside the grid): those whose bound at one of the grid points around it is within CURVE_NEAR
    of the smallest bound at the point below.  The smallest bound falls with eps, so that one bounds the
    smallest at eps; a plan's bound falls with eps too, then rises for the shifted plans (their jump
    series' cost grows with e^eps), so between the grid points it stays near the lower of its two ends
    (CURVE_NEAR covers a shallow dip).  Only tightness rests on this: a plan left out can only leave a
    point's bound higher."""
    above = np.searchsorted(grid, eps)  # grid[above - 1] < eps <= grid[above]
    ends = np.minimum(each[:-1, above - 1], each[:-1, above])
    return ends <= CURVE_NEAR * _smallest(each)[above - 1]


def _first_grid(closed: np.ndarray, floor: float, top: float) -> np.ndarray:
    """eps_curve's first grid: CURVE_POINTS geometric from the smallest closed-form lower eps (no answer lies
    below its delta's) to CURVE_HEADROOM times the largest (the answers were at most 2.2 times it over a sample
    of 40 profiles), and CURVE_BELOW more down to ``floor`` where a closed form is 0."""
    positive = closed[closed > 0]
    low = max(float(positive.min()), floor) if positive.size else floor
    high = min(top, CURVE_HEADROOM * float(positive.max())) if positive.size else top
    grid = np.geomspace(low, high if high > 2 * low else top, CURVE_POINTS)
    if low > floor and positive.size < closed.size:
        grid = np.append(np.geomspace(floor, low, CURVE_BELOW + 1)[:-1], grid)
    return grid


def _refined(bound: Callable[[np.ndarray], np.ndarray], grid: np.ndarray, values: np.ndarray, deltas: np.ndarray,
             rounds: int, side: float) -> tuple[np.ndarray, np.ndarray]:
    """``grid`` and ``bound`` on it (``values``), then ``rounds`` times one more point per delta inside its
    bracket (``_bracket_ends``) where sqrt(-log bound), linear in eps between the bracket's ends (as for the
    Gaussian mechanism, whose delta is about Phi(-eps / mu), far out), meets sqrt(-log delta), moved by
    CURVE_NUDGE toward ``side`` (+1: the upper bounds' side, -1: the lower's), or the bracket's geometric
    middle where the ends do not say; from the second round a bracket wider than CURVE_WIDE also gets its
    middle (the prediction missed), and a delta whose answer is predicted within CURVE_TOL of its crossing
    or whose bracket is narrower than 1 + RTOL gets none.
    Where the points go decides only tightness and cost: every answer is read off evaluated bounds."""
    for round_ in range(rounds):
        j, target = _bracket_ends(values, deltas, side)
        a, b = grid[j - 1], grid[j]
        with np.errstate(divide="ignore", invalid="ignore"):
            z_a, z_b, z = (np.sqrt(np.maximum(-np.log(v), 0.0)) for v in (values[j - 1], values[j], target))
            t = (z - z_a) / (z_b - z_a)
        known = (t > 0) & (t < 1)
        guess = np.where(known, (a + t * (b - a)) * (1 + side * CURVE_NUDGE), np.sqrt(a * b))
        # the answer is read at the end on ``side``: its predicted distance from the crossing, relative
        off = np.where(side > 0, (1 - t) * (b - a) / b, t * (b - a) / a)
        open_ = (b > a * (1 + RTOL)) & ~(known & (off < CURVE_TOL))
        wide = open_ & (b > a * (1 + CURVE_WIDE)) & (round_ > 0)  # a prediction that missed once: halved too
        inside = np.clip(guess, a * (1 + RTOL / 4), b / (1 + RTOL / 4))
        points = np.unique(np.append(inside[open_], np.sqrt(a * b)[wide]))
        if not points.size:
            break
        grid, values = np.concatenate([grid, points]), np.concatenate([values, bound(points)])
        order = np.argsort(grid)
        grid, values = grid[order], values[order]
    return grid, values


def _bracket_ends(values: np.ndarray, deltas: np.ndarray, side: float) -> tuple[np.ndarray, np.ndarray]:
    """(j, delta) for each delta where its answer is read: the upper bounds' first point at most delta
    (``_crossings``), the lower bounds' point after the last one above delta (none where no point is above
    it, or the last is)."""
    if side > 0:
        return np.array(_crossings(values, deltas)), deltas
    above = values[None, :] > deltas[:, None]
    found = above.any(axis=1) & ~above[:, -1]
    return values.size - np.argmax(above[found, ::-1], axis=1), deltas[found]


def _crossings(values: np.ndarray, deltas: np.ndarray) -> list[int]:
    """For each delta, the first index j >= 1 whose value is at most delta (the last index where none is)."""
    below = values[None, :] <= deltas[:, None]
    first = np.where(below.any(axis=1), np.argmax(below, axis=1), values.size - 1)
    return [int(j) for j in np.maximum(first, 1)]


def _checked_delta(delta: float) -> float:
    delta = validate.open_unit("delta", delta)
    if delta < DELTA_FLOOR:  # bounds are raised to it, and a term below every double is counted 0
        raise ValueError(f"delta must be in [{DELTA_FLOOR:g}, 1) for the Gaussian, got delta={delta!r}")
    return delta


def _closed_form_eps_lower(sigma: float, n: int, delta: float) -> float:
    """The larger of the largest report's and the sum of the outputs' eps (milliseconds)."""
    return max(largest_report_eps(sigma, n, delta) if n > 1 else 0.0,
               sum_eps_lower(sigma, n, delta, single_user_eps(sigma, delta)))


def single_user_eps(sigma: float, delta: float) -> float:
    """An eps where E[G_+] <= delta (certified for every n): the top of a search.  With the FLOAT_SLACK that
    ``delta_upper`` adds, so that the top a search or a profile ends on certifies every delta."""
    eps = 1.0
    while single_user(sigma, np.array([eps]))[0] * (1 + FLOAT_SLACK) > delta:
        eps *= 2
    return eps


def _eps_lower(sigma: float, n: int, delta: float, upper: float) -> float:
    """The largest eps found in (0, upper] whose lower bound on delta is above delta (0 if none), at
    least the sum of the outputs' eps and the largest report's."""
    closed = max(sum_eps_lower(sigma, n, delta, upper), largest_report_eps(sigma, n, delta) if n > 1 else 0.0)
    return max(_pairs_eps_lower(sigma, n, delta, upper, closed), closed)


def largest_report_eps(sigma: float, n: int, delta: float) -> float:
    """The largest eps found whose ``law.largest_report_delta`` is above delta at some threshold (0 if
    none): at each threshold the bound is A (t1 - alpha t0) - (alpha - 1) (1 - A), so delta is reached at
    alpha = (A t1 + 1 - A - delta) / (A t0 + 1 - A) (in floating point: only to choose the threshold, on
    LARGEST_Z and twice on finer grids around the best); the answer is then checked with the bound itself,
    stepped down until it holds."""
    z = law.LARGEST_Z
    for _ in range(3):
        t0, t1 = law.normal_mass(z, np.inf), law.normal_mass(z - 1.0 / sigma, np.inf)
        log_a = (n - 1.0) * np.log1p(-t0)
        a, not_a = np.exp(log_a), -np.expm1(log_a)
        with np.errstate(divide="ignore", invalid="ignore"):
            eps = np.log((a * t1 + not_a - delta) / (a * t0 + not_a))
        eps = np.where(np.isfinite(eps), eps, -np.inf)
        best = int(np.argmax(eps))
        step = z[1] - z[0]
        z = np.linspace(z[best] - step, z[best] + step, 41)
    z_best, eps_best = float(z[20]), float(eps[best])
    for shrink in (1e-9, 1e-6, 1e-3, 3e-2):
        trial = eps_best * (1 - shrink)
        if trial > 0 and law.largest_report_delta(sigma, n, trial, z_best)[()] > delta:
            return trial
    return 0.0


def sum_eps_lower(sigma: float, n: int, delta: float, upper: float) -> float:
    """The largest eps found in [0, upper] whose sum-of-outputs delta is above delta (0 if none): the
    evaluated lower end of a bracket (``shrink_bracket``)."""
    def above(eps: float) -> float:
        return float(law.sum_delta(sigma, n, eps)) - delta

    at_zero, at_upper = above(0.0), above(upper)
    if at_zero <= 0 or at_upper > 0:
        return 0.0 if at_zero <= 0 else upper
    return shrink_bracket(above, 0.0, at_zero, upper, at_upper, rtol=1e-12, max_evals=200)[0]


def _pairs_eps_lower(sigma: float, n: int, delta: float, upper: float, floor: float = 0.0) -> float:
    """The largest eps found on [max(upper / LOWER_SPAN, floor), upper] whose exact pairs' bound is above
    delta (0 if none): regula falsi on log(bound / delta), near linear in eps, from the span's ends (none
    where the bound is not above delta at its lower end).  ``floor``: a lower eps already proved (the closed
    forms'); only larger ones are searched.  Each evaluation costs about 0.06 s at sigma 0.7, n 1e5 whatever
    the number of eps in a call, so the search takes as few as it can (a grid of 12 first took 17, 1 s)."""
    low = max(upper / LOWER_SPAN, floor)
    if low >= upper:
        return 0.0

    def log_over(eps: float) -> float:  # > 0 only where the bound is above delta (division rounds monotonely)
        with np.errstate(divide="ignore"):
            return float(np.log(delta_lower(sigma, n, np.array([eps]))[0] / delta))

    at_low = log_over(low)
    if at_low <= 0:
        return 0.0
    at_upper = log_over(upper)
    if at_upper > 0:
        return upper
    return shrink_bracket(log_over, low, at_low, upper, at_upper, LOWER_RTOL)[0]


def sigma_min(eps: float, delta: float, n: int, rtol: float = 1e-3) -> float:
    """The smallest sigma found (within ``rtol``, rounded toward more noise) whose certified eps at
    (n, delta) is at most ``eps``: the noise to add for a target (eps, delta).  The answer is itself
    evaluated and certified; a bisection in log sigma over [SIGMA_MIN, SIGMA_MAX].

    Raises:
        ValueError: a parameter out of range, or not even SIGMA_MAX is certified.
    """
    eps = validate.positive_finite("eps", eps)
    delta = validate.open_unit("delta", delta)
    n = limits.checked_n(n)

    def certified(sigma: float) -> bool:
        return eps_bounds(sigma, n, delta, lower=False).upper <= eps

    low, high = law.SIGMA_MIN, law.SIGMA_MAX
    if not certified(high):
        raise ValueError(f"no sigma up to {high:g} is certified for eps={eps:g} at delta={delta:g}, n={n}")
    if certified(low):
        return low
    while high / low > 1 + rtol:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if certified(middle) else (middle, high)
    return high
