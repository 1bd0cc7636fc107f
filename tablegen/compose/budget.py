"""The inverse questions of composition: how many rounds a total (eps, delta) allows, the
largest eps0 per round for T rounds, and (the shuffled Gaussian) the smallest sigma for T rounds.

Each returns an evaluated point on the safe side: ``rounds_max`` the largest T found whose
certified composed eps is <= the budget (composed eps is non-decreasing in T: T+1 rounds are
T rounds plus a post-processable extra one), ``eps0_max`` the largest eps0 found whose certified
T-round eps is <= the budget (the lower end of a bracket whose both ends were evaluated),
``sigma_min`` the smallest sigma found whose certified T-round eps is <= the budget (the upper end
of such a bracket).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tablegen import limits, validate
from tablegen.compose import pld
from tablegen.compose.core import GAUSSIAN, MAX_ROUNDS, checked_rounds, one_round
from tablegen.compose.profile import POINTS

EPS0_CAP = 30.0  # eps0_max searches eps0 in [EPS0_FLOOR, EPS0_CAP], as tablegen.engine.eps0_max
EPS0_FLOOR = 1e-6
RTOL = 1e-3  # relative width of the final eps0 bracket


@dataclass(frozen=True)
class Budget:
    """Largest number of rounds within (eps, delta), the certified eps it spends, and whether the
    search stopped at MAX_ROUNDS (then at least that many fit)."""

    rounds: int
    eps: float
    capped: bool


def rounds_max(mechanism: str, *, eps0: float | None = None, n: int, eps: float, delta: float,
               points: int = POINTS, sample_rate: float = 1.0, **params: Any) -> Budget:
    """Largest T whose certified composed eps at ``delta`` is <= ``eps`` (each user taking part
    in each round with probability ``sample_rate``; the Gaussian: no eps0, ``sigma=`` in params)."""
    budget = validate.positive_finite("eps", eps)
    delta = validate.open_unit("delta", delta)
    single = one_round(mechanism, eps0=eps0, n=n, points=points, sample_rate=sample_rate, **params)

    def spent(t: int) -> float:
        return pld.eps_for_delta(pld.self_composed(single, t), delta)

    first = spent(1)
    if first > budget:
        raise ValueError(f"eps={eps!r} is below the certified eps of a single round at delta={delta!r} "
                         f"({first:.6g}): no number of rounds meets it")
    good, good_eps, bad = 1, first, None
    while bad is None and good < MAX_ROUNDS:
        t = min(MAX_ROUNDS, 2 * good)
        value = spent(t)
        if value <= budget:
            good, good_eps = t, value
        else:
            bad = t
    if bad is None:
        return Budget(good, good_eps, True)
    while bad - good > 1:
        t = (good + bad) // 2
        value = spent(t)
        if value <= budget:
            good, good_eps = t, value
        else:
            bad = t
    return Budget(good, good_eps, False)


def eps0_max(mechanism: str, *, rounds: int, eps: float, n: int, delta: float, points: int = POINTS,
             sample_rate: float = 1.0, **params: Any) -> float:
    """Largest eps0 (found) whose certified eps for ``rounds`` rounds at ``delta`` is <= ``eps``
    (each user taking part in each round with probability ``sample_rate``)."""
    if mechanism == GAUSSIAN:
        raise ValueError("mechanism 'gaussian' has no eps0 (its privacy comes from sigma): its budget's inverse is "
                         "sigma_min, the smallest sigma for T rounds")
    budget = validate.positive_finite("eps", eps)
    delta = validate.open_unit("delta", delta)
    rounds = checked_rounds(rounds)
    sample_rate = validate.rate("sample_rate", sample_rate)

    def fits(e0: float) -> bool:
        single = one_round(mechanism, eps0=e0, n=n, points=points, sample_rate=sample_rate, **params)
        return pld.eps_for_delta(pld.self_composed(single, rounds), delta) <= budget

    lo, hi = _bracket(fits, min(EPS0_CAP, max(EPS0_FLOOR, budget)))
    if lo is None:
        raise ValueError(f"eps={eps!r} is below the certified eps of {rounds} rounds at any eps0 >= {EPS0_FLOOR} "
                         f"(n={n}, delta={delta!r}): no eps0 meets it")
    while hi is not None and hi / lo > 1 + RTOL:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _bracket(fits: Any, start: float) -> tuple[float | None, float | None]:
    """(lo, hi): lo fits (None if nothing down to EPS0_FLOOR does), hi does not (None: EPS0_CAP fits)."""
    if fits(start):
        lo = start
        while lo < EPS0_CAP:
            hi = min(EPS0_CAP, 2 * lo)
            if not fits(hi):
                return lo, hi
            lo = hi
        return lo, None
    hi = start
    while hi > EPS0_FLOOR:
        lo = max(EPS0_FLOOR, hi / 2)
        if fits(lo):
            return lo, hi
        hi = lo
    return None, hi


@dataclass(frozen=True)
class Noise:
    """Smallest sigma found whose certified eps for that many rounds is <= the budget, that eps, and the
    relative width of the final bracket: sigma (1 - rtol) or less was evaluated and not certified."""

    sigma: float
    eps: float
    rounds: int
    rtol: float


def sigma_min(*, rounds: int, eps: float, delta: float, n: int, points: int = POINTS, rtol: float = RTOL) -> Noise:
    """Smallest sigma found (to relative width ``rtol``, the certified end) whose certified eps for
    ``rounds`` rounds of the shuffled Gaussian on bits at ``delta`` is <= ``eps``: the noise to add
    for a target (eps, delta) over T rounds.

    The search starts at ``sum_floor``, below which the sum of the outputs alone rules ``eps`` out,
    doubles sigma until certified, and narrows the bracket by regula falsi (``shrink_bracket``); the
    answer is its evaluated, certified upper end.

    Raises:
        ValueError: a parameter out of range, or not even SIGMA_MAX is certified.
    """
    from tablegen.engine.search import shrink_bracket
    from tablegen.mechanisms import gaussian as law

    budget = validate.positive_finite("eps", eps)
    delta = validate.open_unit("delta", delta)
    n, rounds = limits.checked_n(n), checked_rounds(rounds)
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must lie in (0, 1), got rtol={rtol!r}")

    spent: dict[float, float] = {}

    def excess(sigma: float) -> float:
        """log(certified eps / budget): its sign decides, and it is nearly linear in sigma near the root."""
        if sigma not in spent:
            single = one_round(GAUSSIAN, n=n, points=points, sigma=sigma)
            spent[sigma] = pld.eps_for_delta(pld.self_composed(single, rounds), delta)
        return math.log(spent[sigma] / budget) if spent[sigma] > 0 else -math.inf

    refusal = (f"no sigma up to {law.SIGMA_MAX:g} is certified for eps={eps!r} over {rounds} rounds at "
               f"delta={delta!r}, n={n}")
    floor = sum_floor(rounds=rounds, eps=budget, delta=delta, n=n)
    if floor is None:
        raise ValueError(f"{refusal}: the sum of the outputs alone exceeds eps there")
    a = max(law.SIGMA_MIN, floor)
    fa = excess(a)
    if fa <= 0:  # a = SIGMA_MIN: above it the sum of the outputs exceeds eps
        return Noise(a, spent[a], rounds, 0.0)
    b, fb = a, fa
    while fb > 0:
        if b >= law.SIGMA_MAX:
            raise ValueError(refusal)
        a, fa = b, fb
        b = min(2 * b, law.SIGMA_MAX)
        fb = excess(b)
    a, b = shrink_bracket(excess, a, fa, b, fb, rtol)
    return Noise(b, spent[b], rounds, (b - a) / b)


def sum_floor(*, rounds: int, eps: float, delta: float, n: int) -> float | None:
    """A sigma below which no certified eps for ``rounds`` rounds is <= ``eps`` (None: not even SIGMA_MAX's).

    The sums of each round's outputs are a post-processing, N(sum x, n sigma^2) each; T of them for a user
    whose bit differs in every round are the Gaussian mechanism at mu = sqrt(T) / (sigma sqrt n), whose
    delta at eps is Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) (arXiv:1805.06530 Theorem 8).  The
    returned sigma is the lower end of a bracket on which that delta, pushed down, is above ``delta``:
    the exact eps there, and so any certified eps, exceeds ``eps``.  SIGMA_MIN where that holds nowhere
    above it."""
    from tablegen.engine.search import shrink_bracket
    from tablegen.mechanisms import gaussian as law

    def above(sigma: float) -> float:
        mu = math.sqrt(rounds) / (sigma * math.sqrt(n))
        return float(law.gaussian_mechanism_delta(mu, np.array(eps), up=False)) - delta

    low, high = above(law.SIGMA_MIN), above(law.SIGMA_MAX)
    if high > 0:
        return None
    if low <= 0:
        return law.SIGMA_MIN
    return shrink_bracket(above, law.SIGMA_MIN, low, law.SIGMA_MAX, high, rtol=1e-9, max_evals=200)[0]
