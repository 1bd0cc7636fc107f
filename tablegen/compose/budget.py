"""The inverse questions of composition: how many rounds a total (eps, delta) allows, and the
largest eps0 per round for T rounds.

Both return an evaluated point on the safe side: ``rounds_max`` the largest T found whose
certified composed eps is <= the budget (composed eps is non-decreasing in T: T+1 rounds are
T rounds plus a post-processable extra one), ``eps0_max`` the largest eps0 found whose certified
T-round eps is <= the budget (the lower end of a bracket whose both ends were evaluated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tablegen import validate
from tablegen.compose import pld
from tablegen.compose.core import MAX_ROUNDS, checked_rounds, one_round
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


def rounds_max(mechanism: str, *, eps0: float, n: int, eps: float, delta: float, points: int = POINTS,
               sample_rate: float = 1.0, **params: Any) -> Budget:
    """Largest T whose certified composed eps at ``delta`` is <= ``eps`` (each user taking part
    in each round with probability ``sample_rate``)."""
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
