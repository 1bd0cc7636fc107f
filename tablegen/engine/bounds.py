"""Certified delta(eps), eps(delta) and eps0_max for a mechanism (arXiv:2504.07414 Thm 4;
docs/engine.md, docs/soundness.md).

    delta(eps) = (1/n) E[(G_1 + ... + G_n)_+]

with G from the mechanism's decompositions; the certified value is the largest over its
upper decompositions (plus, for approximate-DP randomizers, arXiv:2012.12803
Theorem 3.8's n delta0 term), the lower bound the largest over its lower-bound pairs.

eps(delta): delta(eps) is non-increasing with delta(eps0) = 0, so the certified eps is the
upper end b of a bracket [a, b] with delta_upper(a) > delta >= delta_upper(b) (b itself was
evaluated); the lower bound is the lower end of a bracket of the lower-bound curve.  The
brackets are narrowed to a relative width ``rtol`` (default 1e-4).  Every certified eps is
also capped by eps0 (an eps0-LDP randomizer is (eps0, 0)-DP after shuffling).

eps0_max(eps, delta, n): the largest eps0 found whose certified delta at eps is <= delta,
again the evaluated (safe) end of a bracket.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lookup.chord import chord_eps as _chord
from lookup.format import UNIT_ROUNDOFF
from tablegen import limits, validate
from tablegen.decomposition import Decomposition
from tablegen.engine import binary, closed_form, spectral
from tablegen.engine import lower as spectral_lower
from tablegen.engine.fourier import log_expected_positive_part
from tablegen.engine.lattice import (
    AtomLaw,
    Grid,
    randomized_rounding,
    refine_step,
    tilted_moments,
)
from tablegen.engine.search import shrink_bracket
from tablegen.limits import CellBudget
from tablegen.mechanisms import Mechanism, get_mechanism

RESOLUTION = spectral.RESOLUTION  # lattice cells per standard deviation of G, upper bound
LOWER_RESOLUTION = 60.0  # finer for the lower bound, which pays for the rounding noise
# the lower bound's finer lattices where the bound is still growing (refined_lower): 4 and 16 times
# finer, windows of at most 2^18 cells (a few ms; comb-like sums at small n, where it matters)
LOWER_REFINE = (4.0, 16.0)
LOWER_REFINE_CELLS = 2**18
LOWER_REFINE_GAIN = 1.02
RTOL = 1e-4
SPECTRAL_COMPONENTS = 400  # laws with more components (large joint products) use the FFT path
SEARCH_POINTS = 8  # eps values evaluated together per round of the vectorised search
GUESS_GRIDS = (40, 16)  # eps grid sizes of the two rounds of the starting guess
GUESS_SPAN = 1.03  # the first round spans guess / GUESS_SPAN .. guess * GUESS_SPAN (guesses are within ~1.5%)
EPS0_CAP = limits.EPS0_MAX  # eps0_max searches eps0 in [eps, EPS0_CAP] (the engine's range)
FLOAT_SLACK = 1e-9  # relative slack for the last exp/log of a bound
# a certified delta below this is reported as this (larger: still an upper bound): far below it the
# bound underflows to subnormal doubles (5e-324 at eps = 0.2, eps0 = 1, n = 1e5), a number nobody can use
DELTA_FLOOR = 1e-300


@dataclass(frozen=True)
class Bounds:
    """A certified upper bound and a lower bound (None where the mechanism has none)."""

    upper: float
    lower: float | None
    detail: dict[str, Any] = field(default_factory=dict)


def delta_of_decomposition(
    d: Decomposition, eps: float, n: int, pessimistic: bool = True, resolution: float | None = None,
    budget: CellBudget | None = None,
) -> float:
    """(1/n) E[(G_1+...+G_n)_+] for G of ``d`` at eps: upper bound or (False) lower bound.

    With a ``budget`` (live queries) the FFT window is bounded (``limits.CellBudget``): a window
    over the per-call cap is retried on a coarser lattice (the randomized rounding certifies at
    any step, both ways; only tightness is lost), and where none fits or the query's budget is
    spent the evaluation is declined: the upper bound is then E[G_+] (``(sum G_i)_+ <=
    sum (G_i)_+``: valid for every n, the n = 1 value), the lower bound 0.
    """
    values, probs = d.law(eps)
    if values.max() <= 0:
        return 0.0
    # E[G_+]: the value at n = 1 and a bound for every n, with the atoms' rounding error either way
    single = _positive_part_mean(d, np.array([eps]), pessimistic)[0]
    if n == 1:
        return single
    step = _lattice_step(values, probs, n, resolution or (RESOLUTION if pessimistic else LOWER_RESOLUTION))
    for _ in range(limits.COARSEN_TRIES + 1):
        try:
            return _delta_on_lattice(values, probs, step, n, pessimistic, budget)
        except limits.WindowTooLarge as big:
            if big.exhausted:
                break
            # the window's cells scale like 1/step: coarsen by the power of two the size asks for
            step *= 2.0 ** math.ceil(math.log2(big.cells / budget.per_call) + 0.1)
    return single if pessimistic else 0.0  # declined


def _lattice_step(values: np.ndarray, probs: np.ndarray, n: int, res: float) -> float:
    """The FFT path's lattice step for G's atoms: sd(G) / res, refined where the law tilted to
    mean 0 is much narrower than G (lattice.refine_step); two atoms lie on the lattice of their
    gap (Grid.aligned anchors them): no rounding at all, and S on the fewest cells (k-RR with
    k = 2: sqrt(n p q) cells per sd instead of res sqrt(n))."""
    if np.count_nonzero(probs > 0) == 2:
        return float(np.ptp(values[probs > 0]))
    sd = math.sqrt(AtomLaw(values, probs).variance())
    return float(refine_step(values[None, :], probs, np.array([sd / res if sd > 0 else 1.0]), False, res,
                             np.array([n]))[0])


def refined_lower(d: Decomposition, eps: float, n: int, resolution: float, budget: CellBudget | None) -> float:
    """The FFT path's lower bound at ``resolution``; where it is 0, on lattices LOWER_REFINE times finer
    while their windows fit ``LOWER_REFINE_CELLS`` and the bound still grows by more than 2%: the largest.

    Every lattice gives a lower bound (the rounding correction is subtracted whatever the step), so
    the largest is one.  Where S is comb-like (few users off the heaviest atom: small n, large
    eps0) the rounding noise is first order and the correction can exceed the main term: HR at
    eps0 = 8, n = 100 proves nothing on eps 4.1-4.7 at 60 cells per sd, delta 1e-2 .. 6e-5 at 240
    (the search then stopped at 4.08 although 5.0 is provable).  Windows stay small there."""
    value = delta_of_decomposition(d, eps, n, False, resolution, budget)
    values, probs = d.law(eps)
    if value > 0 or n == 1 or values.max() <= 0:
        return value  # refined only where the correction swallowed the bound (costly elsewhere)
    for factor in LOWER_REFINE:
        cap = CellBudget(per_call=LOWER_REFINE_CELLS, total=budget.left if budget is not None else None)
        try:
            finer = _delta_on_lattice(values, probs, _lattice_step(values, probs, n, resolution * factor), n, False,
                                      cap)
        except limits.WindowTooLarge:
            break
        if budget is not None:
            budget.left = cap.left
        if finer <= value * LOWER_REFINE_GAIN:
            return max(value, finer)
        value = finer
    return value


def _delta_on_lattice(values: np.ndarray, probs: np.ndarray, step: float, n: int, pessimistic: bool,
                      budget: CellBudget | None) -> float:
    """``delta_of_decomposition`` on the lattice of (at most) ``step``: randomized rounding, then
    the FFT path (``fourier.log_expected_positive_part``)."""
    grid = Grid.aligned(values, probs, step)
    x, anchor_error = _pushed(grid, values, probs, pessimistic)
    law, off_lattice = randomized_rounding(x, probs)
    # S = step (K + shift); the shift's own rounding error and the anchors' error (kept on the
    # lattice, so moved into the threshold instead, at most n users) are pushed the safe way
    shift = n * grid.offset / grid.step
    shift += (1 if pessimistic else -1) * (4 * UNIT_ROUNDOFF * abs(shift) + n * anchor_error)
    log_e = log_expected_positive_part(law, n, pessimistic, shift, off_lattice, budget)
    value = math.exp(log_e + math.log(grid.step) - math.log(n)) if log_e > -math.inf else 0.0
    if pessimistic:
        return max(value * (1 + FLOAT_SLACK), math.ulp(0.0))
    return value * (1 - FLOAT_SLACK)


def _pushed(grid: Grid, values: np.ndarray, probs: np.ndarray, up: bool) -> tuple[np.ndarray, float]:
    """Lattice coordinates moved by their floating-point error bound toward larger (up) or
    smaller G, so the rounded law still dominates (or is dominated by) the exact one.

    The anchors (the two heaviest atoms) stay on the lattice; their error bound (0 for the
    offset atom, a few ulps for the other) is returned, to be moved into the threshold.
    """
    raw = (values - grid.offset) / grid.step
    x = grid.coordinates(values)
    error = np.abs(x - raw) + 4 * UNIT_ROUNDOFF * np.abs(x)
    anchors = np.argsort(probs)[::-1][:2]
    on_lattice = anchors[x[anchors] == np.round(x[anchors])]
    anchor_error = float(error[on_lattice].max(initial=0.0))
    error[on_lattice] = 0.0
    return (x + error if up else x - error), anchor_error


class Query:
    """A validated (mechanism, eps0, n, params) with its decompositions built once."""

    def __init__(self, mechanism: str | Mechanism, eps0: float, n: int, params: dict[str, Any],
                 resolution: float = RESOLUTION, lower_resolution: float = LOWER_RESOLUTION,
                 spectral: bool = True, budget: CellBudget | None = None) -> None:
        self.spectral = spectral  # False: every upper bound on the FFT path (table builds)
        # the FFT-path cells this query may use (limits.CellBudget); FFT-path evaluations with
        # spectral=False are sized by their caller instead
        self.budget = budget if budget is not None or not spectral else CellBudget()
        self.resolution = validate.positive_finite("resolution", resolution)
        self.lower_resolution = validate.positive_finite("lower_resolution", lower_resolution)
        self.mechanism = mechanism if isinstance(mechanism, Mechanism) else get_mechanism(mechanism)
        self.params = self.mechanism.resolve(params)
        self.eps0 = limits.engine_eps0(eps0)
        self.n = limits.checked_n(n)
        # the n the engine evaluates: n itself up to limits.N_MAX; above it the engine's value at
        # N_MAX (certified at n: eps is non-increasing in n) and the closed-form bound at n, the
        # smaller (``delta_upper_many``), and no lower bound
        self.n_engine = limits.engine_n(self.n)
        self.upper = self.mechanism.upper(self.eps0, **self.params)
        wants_lower = self.mechanism.lower is not None and self.n == self.n_engine
        self.lower = self.mechanism.lower(self.eps0, **self.params) if wants_lower else []

    def delta_upper(self, eps: float) -> float:
        return float(self.delta_upper_many(np.array([eps]))[0])

    def delta_upper_many(self, eps: np.ndarray) -> np.ndarray:
        """Certified delta at each eps: the largest over the upper decompositions (spectral path,
        FFT where it declines), plus the mechanism's extra delta, at n (at ``limits.N_MAX`` above
        it); for n above ``limits.CLOSED_FORM_N`` the smaller of that and of the closed-form bound
        at n (``closed_delta``)."""
        eps = np.asarray(eps, dtype=float)
        base = np.max([self._decomposition_upper(d, eps) for d in self.upper], axis=0)
        value = base + np.array([self.extra_delta(float(e), self.n_engine) for e in eps])
        if self.n > limits.CLOSED_FORM_N:
            value = np.minimum(value, self.closed_delta(eps))
        return value

    def closed_delta(self, eps: np.ndarray) -> np.ndarray:
        """The closed-form bound at n itself (Chernoff or Berry-Esseen, ``closed_form.far_n_delta``;
        no lattice) plus the extra delta at n: joins the engine's from ``limits.CLOSED_FORM_N`` on."""
        return closed_form.far_n_delta(self.upper, eps, self.n) + np.array([self.extra_delta(float(e)) for e in eps])

    def _decomposition_upper(self, d: Decomposition, eps: np.ndarray) -> np.ndarray:
        n = self.n_engine
        if not self.spectral or n == 1 or d.c.size > SPECTRAL_COMPONENTS:
            return np.array([delta_of_decomposition(d, float(e), n, resolution=self.resolution, budget=self.budget)
                             for e in eps])
        out = spectral.delta_upper(d, eps, np.full(eps.shape, n), self.resolution)
        # (1/n) E[(sum G_i)_+] <= E[G_+] (the n = 1 value) for every n: a spectral value above it is
        # valid but useless (its error bounds swamp it where almost all the mass is on one atom and
        # few users leave it: 3-RR subsampled at q = 0.001, n = 100 gave delta up to 5e8), so such
        # an evaluation is declined and goes to the FFT path below, and the answer is capped by it
        single = _positive_part_mean(d, eps)
        out[out > single] = np.nan
        if n > limits.CLOSED_FORM_N:
            # the closed-form bound at n answers there too (delta_upper_many), and an FFT window at
            # such n would be coarsened far beyond use: a declined evaluation certifies nothing
            out = np.where(np.isnan(out), np.inf, out)
        else:
            out = _fft_where_declined(out, eps, lambda e: delta_of_decomposition(
                d, e, n, resolution=self.resolution, budget=self.budget))
        return np.minimum(out, single)

    def delta_is_zero(self, eps: np.ndarray | float) -> np.ndarray | bool:
        """Where delta is exactly 0: eps >= eps0 for an eps0-LDP randomizer (no extra delta term)."""
        return (np.asarray(eps) >= self.eps0) & (self.mechanism.extra_delta is None)

    def far_n_detail(self, eps: float, delta: float) -> dict[str, Any]:
        """How an answer for n above ``limits.CLOSED_FORM_N`` is certified (empty below it):
        ``bound``, the bound that gives a delta <= ``delta`` at eps, and above ``limits.N_MAX``
        ``n_engine``, the n the engine evaluated."""
        if self.n <= limits.CLOSED_FORM_N:
            return {}
        if eps >= self.eps0:
            bound = "eps0: the local guarantee eps <= eps0"
        elif float(self.closed_delta(np.array([eps]))[0]) <= delta:
            bound = "closed-form bound at n (Chernoff / Berry-Esseen)"
        elif self.n > self.n_engine:
            bound = "engine value at n_engine (eps is non-increasing in n)"
        else:
            bound = "engine"
        return {"bound": bound, **({"n_engine": self.n_engine} if self.n > self.n_engine else {})}

    def extra_delta(self, eps: float, n: int | None = None) -> float:
        """The mechanism's extra delta at eps for n users (default: the query's n)."""
        if self.mechanism.extra_delta is None:
            return 0.0
        return self.mechanism.extra_delta(eps, self.eps0, self.n if n is None else n, **self.params)

    def delta0_note(self, delta: float) -> str | None:
        """Why eps0 is the certified eps where the extra delta (Theorem 3.8's n delta0 term) at eps0,
        where the engine evaluates it, is alone above ``delta``: the certified delta at eps0 is then
        above delta and ``_eps_upper`` answers eps0 without a search.  None elsewhere."""
        term = self.extra_delta(self.eps0, self.n_engine)
        if not term > delta:
            return None
        return (f"the n * delta0 term of Theorem 3.8 (arXiv:2012.12803) is {term:.3e} at eps = eps0, above "
                f"delta = {delta:g}: it uses up delta, so the answer is eps0 (no amplification certified)")

    def delta_lower(self, eps: float) -> float | None:
        if not self.lower:
            return None
        return float(self.delta_lower_many(np.array([eps]))[0])

    def delta_lower_many(self, eps: np.ndarray) -> np.ndarray:
        """Lower bound on delta at each eps: the largest over the lower-bound pairs, each on the
        spectral path (``lower.py``) where it answers, else on the FFT path (``_with_fft``), and
        the few-users bound (``few_users_delta``)."""
        eps = np.asarray(eps, dtype=float)
        return np.maximum(self._with_fft(eps, *self._spectral_lower(eps)), self.few_users_delta(eps))

    def delta_lower_spectral(self, eps: np.ndarray, resolution: float = spectral_lower.RESOLUTION) -> np.ndarray:
        """Lower bound on delta at each eps from the spectral path alone (at ``resolution``),
        declined pairs counted as 0 (a lower bound too: milliseconds, never the FFT's seconds), and
        the few-users bound."""
        eps = np.asarray(eps, dtype=float)
        return np.maximum(self._spectral_lower(eps, resolution)[2], self.few_users_delta(eps))

    def few_users_delta(self, eps: np.ndarray) -> np.ndarray:
        """The closed-form lower bound of ``closed_form.few_users_delta`` (at most one user off the
        heaviest component), the largest over the lower-bound pairs: microseconds, near-exact
        where n e^-eps0 is small, 0 where many users leave that component."""
        return np.array([max((closed_form.few_users_delta(d, float(e), self.n) for d in self.lower), default=0.0)
                         for e in np.atleast_1d(eps)])

    def delta_lower_round(self, points: np.ndarray, delta: float) -> np.ndarray:
        """Lower bounds on delta at the sorted ``points`` for one round of ``_eps_lower``: the
        spectral lower path at every point (vectorised), then the FFT where a pair declined and
        could raise the value, one point at a time by bisection over the points not yet above
        delta: a point proved above makes the smaller ones useless (the search keeps the largest
        proved point) and one that is not narrows the search below it.  About log2 of the
        points' FFT evaluations instead of all of them, and none where no declined pair's Chernoff
        bound exceeds delta (the FFT could not prove the point: near eps_upper at large n); every
        value is a lower bound at its point."""
        values, reach, best = self._spectral_lower(points)
        pending = np.any([np.isnan(v) & (r >= best) & (r > delta) for v, r in zip(values, reach, strict=True)],
                         axis=0)
        out = best.copy()
        proved = np.flatnonzero(out > delta)
        lo, hi = (int(proved.max()) if proved.size else -1), points.size  # lo proved, hi not (or past the end)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if pending[mid]:
                one = slice(mid, mid + 1)
                out[mid] = self._with_fft(points[one], [v[one].copy() for v in values], [r[one] for r in reach],
                                          best[one])[0]
            lo, hi = (mid, hi) if out[mid] > delta else (lo, mid)
        return out

    def _with_fft(self, eps: np.ndarray, values: list[np.ndarray], reach: list[np.ndarray],
                  best: np.ndarray) -> np.ndarray:
        """The largest lower bound over the pairs, their declined evaluations on the FFT path
        pair by pair, the pair with the largest Chernoff upper bound first, a pair's evaluation
        skipped where that bound cannot reach the largest lower bound found so far (it cannot
        change the maximum; any subset of the pairs still gives a lower bound)."""
        for i in sorted(range(len(values)), key=lambda i: -float(np.max(reach[i], initial=-np.inf))):
            out = values[i]
            out[np.isnan(out) & (reach[i] < best)] = 0.0  # cannot be the largest
            _fft_where_declined(out, eps, lambda e, i=i: self.delta_of_lower_pair(i, e))
            best = np.maximum(best, out)
        return np.max(values, axis=0)

    def _spectral_lower(self, eps: np.ndarray, resolution: float = spectral_lower.RESOLUTION
                        ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """Per lower-bound pair, its spectral lower bound at each eps (NaN where declined) and a
        Chernoff upper bound where it declined (-inf where it answered, inf where no bound), and
        the largest answered value."""
        fast = self.spectral and self.n > 1
        small = [fast and d.c.size <= SPECTRAL_COMPONENTS for d in self.lower]
        values = [spectral_lower.delta_lower(d, eps, np.full(eps.shape, self.n), resolution) if ok
                  else np.full(eps.shape, np.nan) for d, ok in zip(self.lower, small, strict=True)]
        reach = []
        for d, ok, out in zip(self.lower, small, values, strict=True):
            declined = np.isnan(out)
            reach.append(np.full(eps.shape, -np.inf if ok else np.inf))
            if ok and declined.any():
                reach[-1][declined] = spectral_lower.chernoff_upper(d, eps[declined], self.n)
        return values, reach, np.max(np.nan_to_num(values, nan=0.0), axis=0)

    def delta_of_lower_pair(self, index: int, eps: float) -> float:
        """The FFT path's lower bound for one pair; 0 (declined: proves nothing) from
        ``limits.CLOSED_FORM_N`` on, where its window is coarsened far beyond use (measured on 24
        queries at n = 2e9..1e11: the same lower bounds but for the generic clone at delta = 1e-300,
        for 10-25 s of FFTs each)."""
        if self.spectral and self.n > limits.CLOSED_FORM_N:
            return 0.0
        return refined_lower(self.lower[index], eps, self.n, self.lower_resolution, self.budget)


class FarEps0:
    """eps0 above the engine's range (``limits.EPS0_MAX``, up to ``limits.EPS0_LIMIT``): no lattice,
    no FFT.  An eps0-LDP randomizer is (eps0, 0)-DP after shuffling, so eps0 is a certified eps
    and delta(eps) <= 1 - e^(eps - eps0) (P <= e^eps0 Q: the hockey-stick sum over P > e^eps Q
    is at most sum P (1 - e^(eps - eps0))); these are answered where the few-users lower bound of
    ``closed_form.py`` (on the mechanism's lower-bound pairs) proves them within
    ``limits.EPS0_NEAR``, and refused otherwise (ValueError naming eps0 and the range)."""

    def __init__(self, mechanism: Mechanism, eps0: float, n: int, params: dict[str, Any]) -> None:
        self.mechanism, self.eps0, self.n, self.params = mechanism, eps0, n, params
        self.delta0 = float(params.get("delta0") or 0.0)
        self.pairs = mechanism.lower(eps0, **params) if mechanism.lower is not None else []

    @classmethod
    def of(cls, mechanism: str | Mechanism, eps0: float, n: int, params: dict[str, Any]) -> FarEps0 | None:
        """The far-eps0 answerer for these arguments (validated: mechanism and parameters first,
        then eps0 <= EPS0_LIMIT and n), or None where eps0 is inside the engine's range."""
        m = mechanism if isinstance(mechanism, Mechanism) else get_mechanism(mechanism)
        resolved = m.resolve(params)
        value = limits.checked_eps0(eps0)
        users = limits.checked_n(n)
        return cls(m, value, users, resolved) if limits.beyond_eps0(value) else None

    def eps_bounds(self, delta: float) -> Bounds:
        """(eps0, few-users lower bound) where that bound is within EPS0_NEAR of eps0."""
        if self.delta0 > delta:
            raise ValueError(f"delta={delta!r} is below delta0={self.delta0!r}: eps0={self.eps0!r} is above the live "
                             f"engine's range eps0 <= {limits.EPS0_MAX:g}, where only eps0 itself is answered, and it "
                             "is certified only for delta >= delta0")
        low = closed_form.few_users_eps_lower(self.pairs, self.eps0, self.n, delta)
        if low < (1 - limits.EPS0_NEAR) * self.eps0:
            raise limits.far_eps0_error(self.eps0, low)
        return Bounds(self.eps0, low, {"bound": "eps0: the local guarantee eps <= eps0 (eps0 above the engine's "
                                                f"range, eps0 <= {limits.EPS0_MAX:g})"})

    def trivial_delta(self, eps: float) -> float:
        """1 - e^(eps - eps0) (0 from eps0 on), pushed up; 1 with a delta0 term (no bound here)."""
        if self.delta0 > 0:
            return 1.0
        return max(-math.expm1(eps - self.eps0), 0.0) * (1 + FLOAT_SLACK)

    def delta_lower(self, eps: float) -> float:
        """The few-users lower bound on delta at eps (the largest over the lower-bound pairs)."""
        return max((closed_form.few_users_delta(d, eps, self.n) for d in self.pairs), default=0.0)

    def delta_bounds(self, eps: float, lower: bool) -> Bounds:
        """(1 - e^(eps - eps0), few-users lower bound) where the lower is within EPS0_NEAR of it."""
        upper = self.trivial_delta(eps)
        low = self.delta_lower(eps) if upper > 0 else 0.0
        if upper > 0 and (self.delta0 > 0 or low < (1 - limits.EPS0_NEAR) * upper):
            raise limits.far_eps0_error(self.eps0, None, "delta")
        detail = {"bound": "1 - e^(eps - eps0): the local guarantee (eps0 above the engine's range, "
                           f"eps0 <= {limits.EPS0_MAX:g})"}
        return Bounds(upper, (low if self.pairs else None) if lower else None, detail)


def _positive_part_mean(d: Decomposition, eps: np.ndarray, up: bool = True) -> np.ndarray:
    """E[G_+] at each eps, rounded up (``up``) or down: the delta at n = 1, a bound at every n.  Each
    atom u - e^eps v is computed within 4 u (|u| + e^eps |v|) (UNIT_ROUNDOFF u: e^eps, the product,
    the difference; it matters near eps0, where the difference cancels: k-RR k = 2, eps0 = 2,
    eps = eps0 - 2e-14 was 0.15% low without it), moved per atom; the sum carries FLOAT_SLACK."""
    values, probs = d.atoms(eps)
    scale = np.append(np.abs(d.u), 0.0) + np.exp(np.asarray(eps, dtype=float))[..., None] * np.append(np.abs(d.v), 0.0)
    slack = 4 * UNIT_ROUNDOFF * (scale @ probs)
    mean = np.maximum(values, 0.0) @ probs
    if up:
        return (mean + slack) * (1 + FLOAT_SLACK)
    return np.maximum(mean - slack, 0.0) * (1 - FLOAT_SLACK)


def _fft_where_declined(out: np.ndarray, eps: np.ndarray, fft: Callable[[float], float]) -> np.ndarray:
    """``out`` with its NaN entries (evaluations the spectral path declined) from the FFT path."""
    for i in np.flatnonzero(np.isnan(out)):
        out[i] = fft(float(eps[i]))
    return out


def delta_bounds(mechanism: str | Mechanism, *, eps0: float, n: int, eps: float, lower: bool = True,
                 **params: Any) -> Bounds:
    """Certified delta at eps (and the lower bound) for n users of ``mechanism``; a certified
    delta below ``DELTA_FLOOR`` is reported as ``DELTA_FLOOR`` (rounded up).

    Args:
        mechanism, eps0, n, **params: as for ``eps_bounds``.
        eps: >= 0.
        lower: also compute the lower bound.

    Returns:
        ``Bounds(upper, lower, detail)`` on the exact delta at eps.
    """
    far = FarEps0.of(mechanism, eps0, n, params)
    if far is not None:
        return far.delta_bounds(validate.nonnegative_finite("eps", eps), lower)
    q = Query(mechanism, eps0, n, params)
    eps = validate.nonnegative_finite("eps", eps)
    if q.delta_is_zero(eps):
        return Bounds(0.0, 0.0 if q.lower else None)
    value = q.delta_upper(eps)
    low = q.delta_lower(eps) if lower else None
    if binary.applies(q) and value > 0:  # binary RR: the exact worst case over datasets
        value, exact_low = binary.delta_bounds(q.n, q.eps0, eps, value)
        low = max(low or 0.0, exact_low) if lower else None
    reported = max(value, DELTA_FLOOR) if value > 0 else value  # an exact 0 (e.g. eps near eps0) stays 0
    return Bounds(reported, low, q.far_n_detail(eps, value))


def delta_curve(mechanism: str | Mechanism, *, eps0: float, n: int, eps: np.ndarray | list[float],
                **params: Any) -> np.ndarray:
    """Certified delta_upper(eps) for every eps of an array (the privacy profile's upper bound).

    Each entry is an upper bound on the exact delta(eps) of the analysis; 0 at eps >= eps0 when
    the mechanism has no extra delta term.  For binary RR (k-RR with k = 2, ``binary.applies``) the
    smaller of that and ``binary.delta_profile``, the exact worst case over datasets (within about
    ``binary.PROFILE_TOL`` in eps), which is symmetric: it covers both orders of every neighbouring pair.

    Args:
        mechanism, eps0, n, **params: as for ``eps_bounds``.
        eps: the eps at which to evaluate, each >= 0.

    Returns:
        An array of certified deltas, one per eps.
    """
    q = Query(mechanism, eps0, n, params)
    values = np.asarray(eps, dtype=float)
    for e in values.ravel():
        validate.nonnegative_finite("eps", float(e))
    out = np.zeros(values.shape, dtype=float)
    live = ~q.delta_is_zero(values)
    if live.any():
        out[live] = q.delta_upper_many(values[live])
        if binary.applies(q):  # binary RR: the exact worst case over datasets, both bounds certified
            out[live] = np.minimum(out[live], binary.delta_profile(q.n, q.eps0, values[live]))
    return out


def certifies(mechanism: str | Mechanism, *, eps0: float, n: int, eps: float, delta: float,
              **params: Any) -> bool:
    """Whether (eps, delta) is certified: one evaluation of delta_upper(eps) <= delta.

    A True answer makes eps a certified value for delta (e.g. a smooth estimate from a table,
    checked here instead of searched); False proves nothing about the exact value.

    Args:
        mechanism, eps0, n, **params: as for ``eps_bounds``.
        eps: the candidate eps, >= 0.
        delta: in (0, 1).

    Returns:
        True where the certified delta at ``eps`` is at most ``delta``.
    """
    delta = validate.open_unit("delta", delta)
    far = FarEps0.of(mechanism, eps0, n, params)
    if far is not None:  # eps0 above the engine's range: the local guarantee alone
        return far.trivial_delta(validate.nonnegative_finite("eps", eps)) <= delta
    q = Query(mechanism, eps0, n, params)
    eps = validate.nonnegative_finite("eps", eps)
    if q.delta_is_zero(eps) or q.delta_upper(eps) <= delta:
        return True
    return binary.applies(q) and binary.certifies(q.n, q.eps0, eps, delta)[0]


def proves_above(mechanism: str | Mechanism, *, eps0: float, n: int, eps: float, delta: float,
                 resolution: float = spectral_lower.RESOLUTION, **params: Any) -> bool:
    """Whether the exact eps(delta) is proved above ``eps``: delta_lower(eps) > delta (the exact
    delta at eps exceeds delta, and delta is non-increasing in eps), by one evaluation on the
    spectral lower path at ``resolution`` cells per sd (declined pairs count as 0: milliseconds;
    a finer one proves thinner margins, the rounding term falling like 1/resolution^2).  The
    lower-bound mirror of ``certifies``: a True answer makes eps a lower bound on the exact eps;
    False proves nothing.

    Args:
        mechanism, eps0, n, **params: as for ``eps_bounds``.
        eps: the candidate lower bound, >= 0.
        delta: in (0, 1).
        resolution: cells per standard deviation of the spectral lower path.

    Returns:
        True where the exact eps(delta) is proved above ``eps``.
    """
    far = FarEps0.of(mechanism, eps0, n, params)
    delta = validate.open_unit("delta", delta)
    eps = validate.nonnegative_finite("eps", eps)
    if far is not None:  # eps0 above the engine's range: the few-users bound alone
        return far.delta_lower(eps) > delta
    q = Query(mechanism, eps0, n, params)
    if bool(q.lower) and bool(q.delta_lower_spectral(np.array([eps]), resolution)[0] > delta):
        return True
    return binary.applies(q) and binary.proves_above(q.n, q.eps0, float(eps), delta)


def eps_bounds(mechanism: str | Mechanism, *, eps0: float, n: int, delta: float, lower: bool = True,
               rtol: float = RTOL, **params: Any) -> Bounds:
    """Certified eps(delta) (smallest certified eps found) and the lower bound.

    Beyond the engine's range (``tablegen/limits.py``): for n above ``limits.N_MAX`` the smaller
    of the engine's value at N_MAX and the closed-form bound at n (Chernoff or Berry-Esseen),
    without a lower bound; for eps0 above ``limits.EPS0_MAX`` eps0 itself where a lower bound
    proves it close (``FarEps0``), else a ValueError.  ``detail`` then says which
    (``far_n_detail``, ``FarEps0.eps_bounds``); its ``note`` says why the answer is eps0 where
    an n delta0 term uses up delta (``Query.delta0_note``).  Binary RR (k-RR, k = 2) is certified at
    the exact worst case over datasets (``binary.py``; docs/soundness.md).

    Args:
        mechanism: a registry name or a ``Mechanism``.
        eps0: the local randomizer's eps0.
        n: the number of users.
        delta: in (0, 1).
        lower: also search the lower bound (else ``Bounds.lower`` is None).
        rtol: the search's relative width.
        **params: the family's parameters (``k``, ``g``, ``delta0``, ...).

    Returns:
        ``Bounds(upper, lower, detail)``: upper never below the exact eps of the analysis.
    """
    far = FarEps0.of(mechanism, eps0, n, params)
    delta = validate.open_unit("delta", delta)
    if far is not None:
        return far.eps_bounds(delta)
    q = Query(mechanism, eps0, n, params)
    upper = _eps_upper(q, delta, rtol)
    low = None
    exact = binary.applies(q)  # binary RR: the exact worst case, bracketed by the bounds below
    if (lower or exact) and q.lower:
        # the few-users bound (closed_form.py, milliseconds) is near-exact where n e^-eps0 is small
        # (large eps0), where the lattice paths are weakest; the larger of the two lower bounds is
        # kept, and the search is skipped where the closed form is already within rtol
        low = closed_form.few_users_eps_lower(q.lower, q.eps0, q.n, delta)
        if low < upper * (1 - rtol):
            low = max(low, _eps_lower(q, delta, upper, rtol))
        low = min(low, upper)
    if exact and low is not None and upper > q.eps0 * 1e-6:  # (below: the search floor, exact eps 0)
        tight = binary.eps_bounds(q.n, q.eps0, delta, (low, upper))
        upper, low = tight.upper, tight.lower
    low = low if lower else None
    note = q.delta0_note(delta)
    return Bounds(upper, low, {**q.far_n_detail(upper, delta), **({"note": note} if note else {})})


def delta0_note(mechanism: str | Mechanism, *, eps0: float, n: int, delta: float, **params: Any) -> str | None:
    """The ``note`` of ``eps_bounds`` at these arguments, without its search (``Query.delta0_note``:
    why eps0 is the answer where the n delta0 term uses up delta; None elsewhere).

    Args:
        mechanism, eps0, n, delta, **params: as for ``eps_bounds``.

    Returns:
        The note, or None.
    """
    if FarEps0.of(mechanism, eps0, n, params) is not None:
        return None
    return Query(mechanism, eps0, n, params).delta0_note(validate.open_unit("delta", delta))


def eps0_max(mechanism: str | Mechanism, *, eps: float, n: int, delta: float, rtol: float = RTOL,
             **params: Any) -> float:
    """Largest eps0 (found) whose certified eps at (n, delta) is <= eps: the local budget.

    eps0 is searched up to ``EPS0_CAP`` (the engine's range, ``limits.EPS0_MAX``); for eps at or
    above it the answer is eps itself (eps0 = eps is certified: an eps0-LDP randomizer is
    (eps0, 0)-DP after shuffling).  Not so for an (eps0, delta0)-LDP randomizer, whose extra
    n delta0 term (Theorem 3.8) stays at eps0 = eps: there eps0 = eps is evaluated like any
    other, and no eps0 is answered where even it is not certified.

    Args:
        mechanism: a registry name or a ``Mechanism``.
        eps: the target shuffled eps, > 0.
        n: the number of users.
        delta: in (0, 1).
        rtol: the search's relative width.
        **params: the family's parameters (``k``, ``g``, ``delta0``, ...).

    Returns:
        The largest eps0 found whose certified eps at (n, delta) is at most ``eps``.

    Raises:
        ValueError: a parameter out of its range, or no eps0 certified.
    """
    eps = validate.positive_finite("eps", eps)
    delta = validate.open_unit("delta", delta)
    first = Query(mechanism, min(eps, EPS0_CAP), n, params)  # validates mechanism, n and params up front
    extra = first.mechanism.extra_delta is not None
    if eps >= EPS0_CAP and not extra:
        return eps

    def excess(e0: float) -> float:
        return _log_ratio(Query(mechanism, e0, n, params).delta_upper(eps), delta)

    if eps >= EPS0_CAP:  # with the extra term: eps0 = eps would have to be evaluated, beyond the range
        raise ValueError(f"eps must be below {EPS0_CAP:g} for the eps0-max of a randomizer with delta0 > 0, "
                         f"got eps={eps!r}")
    a, fa = eps, (excess(eps) if extra else -math.inf)  # without an extra term, delta(eps0 = eps) = 0
    if fa > 0:
        raise ValueError(f"no eps0 is certified for eps={eps!r} at delta={delta!r}: even eps0 = eps leaves the "
                         "n * delta0 term of Theorem 3.8 above delta")
    b = min(EPS0_CAP, 2.0 * eps)
    fb = excess(b)
    while fb <= 0 and b < EPS0_CAP:
        a, fa = b, fb
        b = min(EPS0_CAP, 2.0 * b)
        fb = excess(b)
    if fb <= 0:
        return b
    a, _ = shrink_bracket(lambda e0: -excess(e0), a, -fa, b, -fb, rtol)
    if binary.applies(Query(mechanism, a, n, params)):  # binary RR: its exact path certifies larger eps0
        a = binary.eps0_max(first.n, eps, delta, a, EPS0_CAP, max(rtol, 1e-3))
    return a


def _log_ratio(value: float, target: float) -> float:
    if math.isnan(value):
        return math.inf  # a failed evaluation certifies nothing
    return math.log(value / target) if value > 0 else -math.inf


def _eps_upper(q: Query, delta: float, rtol: float) -> float:
    """Certified eps(delta): chord of an evaluated bracket, capped at eps0.

    Rounds of SEARCH_POINTS evaluations at once narrow a bracket [a, b] with
    delta_up(a) > delta >= delta_up(b): the first round spans the Bahadur-Rao guess by a factor
    GUESS_SPAN, later ones cluster around the crossing predicted by log delta linear in eps
    between the ends (``_refine``), so two rounds usually close it to rtol.  The exact delta is
    convex in alpha = e^eps (a hockey-stick divergence; for each decomposition
    (1/n) E[(sum_i U_i - alpha V_i)_+] is an expectation of a convex function of alpha, and the
    extra delta0 term is linear in alpha), so the chord through the two evaluated upper points
    lies above it: where the chord meets delta is certified (docs/soundness.md) and at most b.
    It is returned when its own evaluation certifies it too (so that delta_bounds at the answer
    is <= delta, as users check), else b.
    """
    if q.extra_delta(q.eps0) > 0 and q.delta_upper(q.eps0) > delta:
        # only possible with an n * delta0 term: eps0 itself is still certified when delta >= delta0
        return trivial_eps0(q, delta)
    floor = q.eps0 * 1e-9
    guess = min(max(guess_eps(q, delta), floor), q.eps0)
    a, da, b, db = floor, math.inf, q.eps0, 0.0
    points = _near_top(np.geomspace(max(floor, guess / GUESS_SPAN), min(q.eps0, guess * GUESS_SPAN), SEARCH_POINTS),
                       q.eps0, rtol)
    for _ in range(40):
        values = q.delta_upper_many(points)
        above = ~(values <= delta)  # NaN certifies nothing
        if above.any():
            i = int(np.flatnonzero(above).max())
            if points[i] >= a:
                a, da = float(points[i]), float(values[i])
        if (~above).any():
            j = int(np.flatnonzero(~above).min())
            if points[j] <= b:
                b, db = float(points[j]), float(values[j])
        if b - a <= rtol * b:
            break
        if a == floor and not above.any():  # everything tried certifies: look lower
            if points.min() <= floor:
                return floor
            points = np.unique(np.append(np.geomspace(max(floor, points.min() / 100), points.min(), SEARCH_POINTS),
                                         _extrapolated(points[:2], values[:2], delta, floor)))
            continue
        if b == q.eps0 and above.all():  # nothing tried certifies: look higher
            extra = _extrapolated(points[-2:], values[-2:], delta, floor)
            points = _higher(points.max(), q.eps0)
            points = _near_top(np.unique(np.append(points, extra[extra < q.eps0])), q.eps0, rtol)
            continue
        points = _refine(a, da, b, db, delta, rtol, q.eps0)
    chord = chord_eps(a, da, b, db, delta)
    if b == q.eps0 and chord >= b * (1 - rtol):
        # within rtol of eps0: eps0 itself, without evaluating the chord (where delta falls to 0
        # at eps0 the plan there needs ~10^5 nodes, and it usually does not certify anyway)
        return q.eps0
    if chord < b and q.delta_upper(chord) <= delta:  # certified by convexity and by evaluation
        return min(q.eps0, chord)
    return min(q.eps0, b)


def _higher(start: float, eps0: float) -> np.ndarray:
    """Points above ``start`` up to 100 times it: geometric in eps, and where that reaches
    eps0 half of them geometric in eps0 - eps down to 1e-4 of it instead (delta drops to 0 at
    eps0, so an answer near eps0 is within a few 1e-3 of it)."""
    if start * 100 < eps0:
        return np.geomspace(start, start * 100, SEARCH_POINTS)
    half = SEARCH_POINTS // 2
    return np.unique(np.concatenate([np.geomspace(start, eps0, half + 1)[:-1],
                                     eps0 - (eps0 - start) * np.geomspace(1.0, 1e-4, half + 1)[1:]]))


def _near_top(points: np.ndarray, eps0: float, rtol: float) -> np.ndarray:
    """``points``, and eps0 (1 - rtol/2) where they reach eps0: where even that point is not
    certified (small n, large eps0) the answer is eps0 after this round, not after a dozen rounds
    shrinking [a, eps0] to rtol (only there: near eps0 the saddlepoint is slow to find)."""
    if points.max() < eps0:
        return points
    return np.unique(np.append(points, eps0 * (1 - rtol / 2)))


def _extrapolated(points: np.ndarray, values: np.ndarray, delta: float, floor: float) -> np.ndarray:
    """Where log delta, linear in eps through the two points (both on one side of delta,
    decreasing), meets delta beyond them, with points 0.1%, 0.3% and 1% either side (the
    curvature over a guess off by 10% moves it by ~0.2%); none where the values are not finite
    and decreasing."""
    if not (np.all(np.isfinite(values)) and values[0] > values[1] > 0):
        return np.zeros(0)
    centre = points[0] - (points[1] - points[0]) * math.log(delta / values[0]) / math.log(values[0] / values[1])
    return np.maximum(centre * (1 + np.array([-1e-2, -3e-3, -1e-3, 1e-3, 3e-3, 1e-2])), floor)


def _refine(a: float, da: float, b: float, db: float, delta: float, rtol: float, top: float = math.inf) -> np.ndarray:
    """Next points inside (a, b): a cluster at relative distances rtol/4, rtol and 4 rtol around
    the crossing predicted by log delta linear in eps (where both ends are finite and
    positive), plus two geometric points so a poor prediction still shrinks the bracket.  In
    the upper half below ``top`` (eps0, where delta drops to 0 and log delta bends down) two
    more at rtol either side of the crossing predicted by log delta linear in log(top - eps)."""
    centre = math.sqrt(a * b)
    extra = np.zeros(0)
    if math.isfinite(da) and db > 0 and da > db:
        centre = a + (b - a) * math.log(da / delta) / math.log(da / db)
        if 2 * a > top:
            power = math.log(da / db) / math.log((top - a) / (top - b))
            extra = (top - (top - a) * (delta / da) ** (1 / power)) * (1 + rtol * np.array([-1.0, 1.0]))
    cluster = centre * (1 + rtol * np.array([-4.0, -1.0, -0.25, 0.25, 1.0, 4.0]))
    points = np.concatenate([cluster, extra, np.geomspace(a, b, 4)[1:3]])
    return np.unique(points[(points > a) & (points < b)])


def chord_eps(a: Any, da: Any, b: Any, db: Any, delta: Any) -> Any:
    """eps where the chord from (e^a, da) to (e^b, db) in (alpha, delta) meets delta (<= b; b
    where da is not finite or not above db); floats or arrays (elementwise).  The one chord
    rule, ``lookup.chord.chord_eps``, capped at the certified b."""
    a, da, b, db, delta = (np.asarray(x, dtype=float) for x in (a, da, b, db, delta))
    bracket = np.isfinite(da) & (da > db)
    with np.errstate(invalid="ignore", over="ignore"):
        chord = np.minimum(b, _chord(b, np.where(bracket, a, b), db, np.where(bracket, da, db), delta))
    out = np.where(bracket, chord, b)
    return float(out) if out.ndim == 0 else out


def _eps_lower(q: Query, delta: float, eps_upper: float, rtol: float) -> float:
    """Lower end a of a bracket [a, b] of the lower-bound curve's crossing of delta (0 if none).

    delta_low(a) > delta proves exact delta(a) > delta, so the exact eps(delta) is above a
    (delta is non-increasing); b = eps_upper needs no evaluation (delta_low <= delta_up <= delta
    there).  Rounds of SEARCH_POINTS evaluations at once: first at fixed relative distances below
    eps_upper, then geometrically further down until the curve is above delta, then clustered
    around the predicted crossing (``_refine``), until the bracket is narrower than rtol.
    """
    floor = q.eps0 * 1e-9
    if eps_upper <= floor:
        # nothing below the floor is searched, and delta_low(floor) <= delta_up(floor) <= delta:
        # no evaluation can prove more than 0 (each would cost an FFT at tiny eps, seconds at n = 1e9)
        return 0.0
    a, da, b, db = 0.0, math.inf, eps_upper, 0.0
    points = eps_upper * (1 - np.array([1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3]))
    for _ in range(60):
        points = np.unique(np.clip(points, floor, b))
        values = q.delta_lower_round(points, delta)
        above = ~(values <= delta)
        if above.any():
            i = int(np.flatnonzero(above).max())
            if points[i] > a:
                a, da = float(points[i]), float(values[i])
        below = ~above & (points > a)
        if below.any():
            j = int(np.flatnonzero(below).min())
            if points[j] < b:
                b, db = float(points[j]), float(values[j])
        if a == 0.0:
            if points.min() <= floor:
                return 0.0  # the lower curve is below delta down to eps0 * 1e-9
            points = np.geomspace(max(floor, points.min() / 4), points.min(), SEARCH_POINTS + 1)[:-1]
            continue
        if b - a <= rtol * b:
            break
        points = _refine(a, da, b, db, delta, rtol)
    return a


def trivial_eps0(q: Query, delta: float) -> float:
    delta0 = q.params.get("delta0") or 0.0
    if delta >= delta0:
        return q.eps0
    raise ValueError(
        f"delta={delta!r} is below what this analysis can certify for delta0={delta0!r} and n={q.n}: "
        "the n * delta0 term of Theorem 3.8 alone exceeds it"
    )


def guess_eps(q: Query, delta: float) -> float:
    """Starting point of the search: where the Bahadur-Rao approximation of the first upper law,
    log delta ~ n Lambda(lambda) - log(n lambda^2 sd_lambda sqrt(2 pi n)), meets delta, found on two
    geometric grids of eps (vectorised) and read linearly between the last two grid points.

    An estimate only: no certified value depends on it (it only places the first round)."""
    lo, hi = q.eps0 * 1e-6, q.eps0 * (1 - 1e-6)
    for size in GUESS_GRIDS:
        grid = np.geomspace(lo, hi, size)
        excess = _bahadur_rao_excess(q.upper[0], grid, q.n, delta)
        change = np.flatnonzero((excess[:-1] > 0) & ~(excess[1:] > 0))
        if not change.size:
            return 0.5 * q.eps0
        i = int(change[0])
        lo, hi, f_lo, f_hi = grid[i], grid[i + 1], excess[i], excess[i + 1]
    if not math.isfinite(f_hi):
        return hi
    return lo + (hi - lo) * f_lo / (f_lo - f_hi)


def _bahadur_rao_excess(d: Decomposition, eps: np.ndarray, n: int, delta: float) -> np.ndarray:
    """log(Bahadur-Rao estimate of delta / delta) at each eps (+1 where E[G] >= 0, -inf where G <= 0)."""
    values, probs = d.atoms(eps)
    probs = np.broadcast_to(probs, values.shape)
    positive = np.max(values, axis=1) > 0
    lam, log_m, _, var = tilted_moments(values, probs)
    var = np.maximum(var, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = n * log_m - np.log(n * lam**2 * np.sqrt(2 * np.pi * n * var)) - math.log(delta)
    return np.where(~positive, -np.inf, np.where(lam > 0, excess, 1.0))
