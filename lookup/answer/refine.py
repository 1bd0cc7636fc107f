"""Estimate, then certify: table answers whose slack estimate exceeds ``max_slack``, refined.

A smooth estimate (``estimate.py``) is bracketed in steps of ``STEP`` (0.98%, or ``max_slack`` if
smaller) and published only where one engine evaluation certifies it; otherwise the engine's full
search answers, and where the engine cannot answer the table's value stands.  A refinement that
keeps the table's value also asks the engine's lower bounds whether the exact value is proved
beyond it, and raises ``Refuted`` where it is (a proof, never an estimate: a genuine table is never
refused).  Each function takes one query and the table's certified answer and returns (value,
slack, source); engine results and verdicts are cached by ``live.py``.  The steps and why each is
sound: docs/lookup.md, "max_slack: estimate, then certify"; refutation: docs/trust.md.
"""

from __future__ import annotations

import math
from typing import Any

from lookup.answer import live

STEP = 0.0098  # bracket of a certified eps estimate: published slack at most 0.98%
STEP_EPS0 = 0.0098  # the same for eps0_max: within 1% of the engine's eps0_max
LOWER_STEP = 0.02  # a refined answer's lower bound is tried at value / (1 + LOWER_STEP)
DOUBLINGS = 3  # eps0_max's bisection (binary RR) without a top: the table's eps0 doubled at most this often
TIERS = 2  # candidates checked beyond the refused value before the full search (eps0_max: one more)
CERTIFIED = "certified estimate"
Refined = tuple[float, float, str]


class Refuted(Exception):  # noqa: N818 - a finding, not a failure of the code
    """The table's certified eps at a query is proved below the exact eps: ``detail`` says where
    and by how much; ``refined`` is the engine's certified answer to publish instead."""

    def __init__(self, detail: str, refined: Refined) -> None:
        super().__init__(detail)
        self.detail, self.refined = detail, refined


def eps(mechanism: str, point: dict[str, float], params: dict[str, Any], table: float, slack: float,
        estimate: float, step: float, quick: bool = False) -> Refined:
    """Certified eps at ``point`` (eps0, n, delta) no larger than the table's ``table`` (inf:
    none); ``estimate``: the smooth estimate (NaN off the grid: straight to the engine's search);
    ``quick``: first the estimate inflated by half a step, published where the engine certifies it,
    its slack unknown (NaN: nothing was refused below it), one evaluation; else as without it."""
    def certified(e: float) -> bool:
        return e >= point["eps0"] or live.certifies(mechanism, {**point, "eps": e}, params)

    try:
        low = estimate / math.sqrt(1 + step) if estimate > 0 and step > 0 else math.nan
        first = min(low * (1 + step), point["eps0"])
        if quick and first < table and certified(first):
            return first, math.nan, CERTIFIED
        if low < table and not certified(low):
            for _ in range(TIERS):
                candidate = min(low * (1 + step), point["eps0"])
                if candidate >= table:  # the table is within the bracket already
                    return _checked(mechanism, point, params, table, table / low - 1)
                if certified(candidate):
                    return candidate, candidate / low - 1, CERTIFIED
                low = candidate
        elif low < table:  # certified: the estimate was high; down until the engine refuses
            for _ in range(TIERS):
                candidate = low / (1 + step)
                if not certified(candidate):
                    return low, low / candidate - 1, CERTIFIED
                low = candidate
        found = live.eps_upper(mechanism, point, params)
    except ValueError:  # the engine cannot answer: the table's certified value stands (if any)
        if math.isinf(table):
            raise
        return table, slack, "table"
    return (found, 0.0, "live") if found < table else _checked(mechanism, point, params, table, 0.0, found)


def _checked(mechanism: str, point: dict[str, float], params: dict[str, Any], table: float, slack: float,
             found: float = math.nan) -> Refined:
    """(the table's eps, ``slack``, "table") unless the engine proves the exact eps above it:
    one evaluation of its spectral lower path (``live.proves_above``), and where the engine's
    search was kept out by the table (``found``, its certified eps, given) and that does not
    prove it, the engine's own lower bound (``live.eps``: the few-users closed form, then its
    lower search; the spectral path alone is weak for few users: krr k=3 eps0 1.5 n 50 delta 1e-6,
    nothing proved above 0.5 where the lower bound is 1.17).  Where proved: ``Refuted``, with the
    engine's certified eps (``found``, or searched now)."""
    try:
        wrong = live.proves_above(mechanism, {**point, "eps": table}, params)
        if not wrong and not math.isnan(found):
            found, low = live.eps(mechanism, point, params)
            wrong = low > table
        if wrong and math.isnan(found):
            found = live.eps_upper(mechanism, point, params)
    except ValueError:  # the engine cannot answer: no proof either way
        return table, slack, "table"
    if not wrong:
        return table, slack, "table"
    raise Refuted(f"at {where(mechanism, params, point)} the table's eps {table!r} is below the exact eps (the "
                  f"engine proves it above; its certified eps {found!r})", (found, 0.0, "live"))


def lower_eps(mechanism: str, point: dict[str, float], params: dict[str, Any], value: float, lower: float,
              ratio: float) -> float:
    """A lower bound on the exact eps at ``point`` near the engine's own: ratio * value /
    (1 + LOWER_STEP), ``ratio`` the estimated ratio of the engine's lower bound to its certified
    eps (``estimate.lower_ratio``; 1 where unknown), where one evaluation of the engine's
    spectral lower path proves the exact eps above it (``live.proves_above``: delta_lower >
    delta there), else ``lower`` (the table's).  The candidate is only a candidate: what is
    published is what the engine proved."""
    candidate = (ratio if 0 < ratio <= 1 else 1.0) * value / (1 + LOWER_STEP)
    if not math.isfinite(candidate) or candidate <= 0 or candidate <= lower:
        return lower
    try:
        proved = live.proves_above(mechanism, {**point, "eps": candidate}, params)
    except ValueError:
        return lower
    return candidate if proved else lower


def delta(mechanism: str, point: dict[str, float], params: dict[str, Any], table: float, slack: float) -> Refined:
    """Certified delta at ``point`` (eps0, n, eps) no larger than the table's ``table``: one
    engine evaluation with its lower bound (``live.delta``); where the table's value is kept and
    the engine's lower bound on the exact delta is above it, the table is wrong (``Refuted``)."""
    try:
        found, low = live.delta(mechanism, point, params)
    except ValueError:
        return table, slack, "table"
    if found < table:
        return found, 0.0, "live"
    if low > table:
        raise Refuted(f"at {where(mechanism, params, point)} the table's delta {table!r} is below the engine's "
                      f"lower bound {low!r} on the exact delta (its certified delta {found!r})", (found, 0.0, "live"))
    return table, 0.0, "table"


def eps0_max(mechanism: str, point: dict[str, float], params: dict[str, Any], table: float, slack: float,
             estimate: float, step: float, bisect: bool = False) -> Refined:
    """Certified eps0_max at ``point`` (eps, n, delta) no smaller than the table's ``table``:
    an eps0 whose certified eps at (n, delta) is <= eps (any eps0 the engine certifies is a
    valid answer, whether or not eps is monotone in eps0).  The slack is the ratio of an eps0
    the engine refused to the answer (an estimate: a larger eps0 might pass again).  Where the
    table's eps0 is kept, it is checked (``_checked_eps0``).  ``bisect`` (binary RR, whose engine
    ``eps0_max`` search holds the blanket bound while its check ``certifies`` is exact): where the
    brackets do not settle it, a bisection with the check between the table's eps0 and
    ``table * (1 + slack)`` (an eps0 the table proves too large) instead of that search."""
    def certified(e0: float) -> bool:
        return live.certifies(mechanism, {"eps0": e0, "n": point["n"], "eps": point["eps"], "delta": point["delta"]},
                              params)

    try:
        high = estimate * math.sqrt(1 + step) if estimate > 0 and step > 0 else math.nan
        if high > table and not certified(high):
            for _ in range(TIERS + 1):
                candidate = high / (1 + step)
                if candidate <= table:
                    return _checked_eps0(mechanism, point, params, table, high / table - 1)
                if certified(candidate):
                    return candidate, high / candidate - 1, CERTIFIED
                high = candidate
        elif high > table:  # certified: the estimate was low; up until the engine refuses
            for _ in range(TIERS + 1):
                candidate = high * (1 + step)
                if not certified(candidate):
                    return high, candidate / high - 1, CERTIFIED
                high = candidate
        if bisect:
            return _bisected(certified, mechanism, point, params, table, table * (1 + slack), step)
        found = live.eps0_max(mechanism, point, params)
    except ValueError:
        return table, slack, "table"
    return (found, 0.0, "live") if found > table else _checked_eps0(mechanism, point, params, table, 0.0, found)


def _bisected(certified: Any, mechanism: str, point: dict[str, float], params: dict[str, Any], table: float,
              top: float, step: float) -> Refined:
    """The largest eps0 the engine's check certifies, found by bisection in log eps0 between the
    table's eps0 (certified) and ``top`` (NaN: unknown; then doubled from the table's until refused, at
    most ``DOUBLINGS`` times), to within ``step``: published with slack high / low - 1, its ratio to
    an eps0 the engine refused (or ``top``, proved too large by the table's lower bound)."""
    def passes(e0: float) -> bool:
        try:
            return certified(e0)
        except ValueError:  # beyond the engine's range: not certified here
            return False

    low, high = table, top
    if not high > low:
        high = math.nan
        for _ in range(DOUBLINGS):
            if not passes(2 * low):
                high = 2 * low
                break
            low *= 2
    if math.isnan(high):
        return (low, math.nan, CERTIFIED) if low > table else (table, math.nan, "table")
    while high / low > 1 + step:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if passes(middle) else (low, middle)
    if low > table:
        return low, high / low - 1, CERTIFIED
    return _checked_eps0(mechanism, point, params, table, high / table - 1)


def _checked_eps0(mechanism: str, point: dict[str, float], params: dict[str, Any], table: float, slack: float,
                  found: float = math.nan) -> Refined:
    """(the table's eps0_max, ``slack``, "table") unless the engine proves the exact eps at that
    eps0 above the asked eps: its lower bound on the exact delta at (that eps0, eps) above delta
    (one evaluation, ``live.delta``).  The table then claimed a certified eps it cannot have, and
    ``Refuted`` carries the engine's eps0_max (``found``, or searched now)."""
    at = {"eps0": table, "n": point["n"], "eps": point["eps"]}
    try:
        if not (table > 0 and live.delta(mechanism, at, params)[1] > point["delta"]):
            return table, slack, "table"
        if math.isnan(found):
            found = live.eps0_max(mechanism, point, params)
    except ValueError:  # the engine cannot answer: no proof either way
        return table, slack, "table"
    raise Refuted(f"at {where(mechanism, params, {**at, 'delta': point['delta']})} the table's eps0_max {table!r} "
                  f"has an exact eps above {point['eps']!r} (the engine's lower bound on the exact delta there is "
                  f"above {point['delta']!r}; its certified eps0_max {found!r})", (found, 0.0, "live"))


def where(mechanism: str, params: dict[str, Any], point: dict[str, float]) -> str:
    """A query point as a refutation names it: ``mechanism=krr k=3 eps0=1.5 n=50.0 delta=1e-06``."""
    return " ".join(f"{k}={v!r}" for k, v in {"mechanism": mechanism, **params, **point}.items())
