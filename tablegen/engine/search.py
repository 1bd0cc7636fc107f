"""Bracketed root search that returns the final bracket, so callers pick the safe end.

``shrink_bracket(F, a, Fa, b, Fb)`` keeps F(a) > 0 >= F(b) (F may be -inf) and narrows [a, b]
by Illinois-modified regula falsi, falling back to bisection, until b - a <= rtol * |b|.
Certification never depends on convergence: each end has been evaluated, and callers return
the end on the safe side (e.g. the upper end for a certified eps).
"""

from __future__ import annotations

import math
from collections.abc import Callable


def shrink_bracket(
    func: Callable[[float], float],
    a: float,
    fa: float,
    b: float,
    fb: float,
    rtol: float = 1e-4,
    max_evals: int = 60,
) -> tuple[float, float]:
    """Narrow [a, b] with func(a) > 0 >= func(b); return the final (a, b)."""
    side = 0
    for _ in range(max_evals):
        if b - a <= rtol * max(abs(a), abs(b)):
            break
        if math.isfinite(fa) and math.isfinite(fb) and fa != fb:
            x = b - fb * (b - a) / (fb - fa)
            lo, hi = a + 0.02 * (b - a), b - 0.02 * (b - a)
            x = min(max(x, lo), hi)
        else:
            x = 0.5 * (a + b)
        fx = func(x)
        if fx > 0:
            a, fa = x, fx
            if side == -1 and math.isfinite(fb):
                fb *= 0.5  # Illinois: halve the stale end so the next step moves it
            side = -1
        else:
            b, fb = x, fx
            if side == 1 and math.isfinite(fa):
                fa *= 0.5
            side = 1
    return a, b


def root(func: Callable[[float], float], a: float, b: float, rtol: float = 1e-10) -> float:
    """A root of ``func`` in [a, b] where func(a) > 0 >= func(b): the midpoint of the final bracket.

    For estimates only (a saddlepoint, a starting point): no certified value depends on it.
    """
    lo, hi = shrink_bracket(func, a, func(a), b, func(b), rtol, max_evals=200)
    return 0.5 * (lo + hi)
