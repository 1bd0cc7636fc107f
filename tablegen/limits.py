"""The live engine's supported domain: every limit on an input or on the work it causes, in one place.

An input inside these limits is answered in bounded memory and time; one outside them is refused
with a ``ValueError`` naming the parameter and its allowed range before anything large is
allocated.  ``n`` up to ``N_LIMIT`` and ``eps0`` up to ``EPS0_LIMIT`` are answered beyond the
engine's own range with certified values (``engine/bounds.py``), and ``CellBudget`` bounds one
query's FFT work.  Why each limit is sound, and what it costs: docs/engine.md ("Supported
domain"); each constant's comment says how it was measured.
"""

from __future__ import annotations

import math

from lookup.format import EPS0_MIN, EPS0_MIN_TEXT, N_LIMIT  # noqa: F401  (tablegen.limits.X)
from tablegen import validate

# the engine evaluates n up to N_MAX itself: beyond, the spectral path's period K (about 20 sd of
# the rounded sum, in cells) passes its exact-integer limit spectral.MAX_PERIOD = 1e9 (k-RR k = 10,
# eps0 = 1: K = 1.07e9 at n = 1e12 for the smallest eps of a search, 1.06e9-3.4e9 everywhere at
# 1e13) and its floating-point terms (n times the error of log M) pass 1e-3
N_MAX = 10**12
# from this n on the closed-form bound at n (engine/closed_form.py: Chernoff, Berry-Esseen) joins the
# engine's, the smaller answered: it rescues evaluations the spectral path declines at large n (k-RR
# k = 1024, eps0 = 0.5, n = 3e11, delta = 1e-12: 0.2427 from the engine alone, 2.148e-7 with it);
# the tables stop at 1e9 and are not affected
CLOSED_FORM_N = 10**9
# n above N_MAX is answered by the two bounds above up to N_LIMIT (the closed-form bounds keep
# log M exact to its own size, so n times its error stays far below 1e-3, and n fits an int64):
# N_LIMIT, lookup.format's
# the engine evaluates eps0 up to EPS0_MAX itself: a sweep of 500 queries (10 families, eps0 up to
# 20, n 2 to 1e12, delta 1e-8 and 1e-300, with lower bounds) answered all in at most 16.2 s and
# 758 MB.  Beyond it is not swept, and its answers stop being informative for several families
# (HR / BLH certify only eps0 itself at eps0 = 20 for n <= 1e9; Laplace at eps0 = 24, n = 1e6:
# eps0 with the lower bound 2.6), while the k-RR-like ones reach eps0 itself, which the few-users
# bound proves without any lattice (FarEps0 in engine/bounds.py)
EPS0_MAX = 20.0
# above EPS0_MAX only eps0 itself is answered, up to EPS0_LIMIT: the mechanisms' laws are built in
# doubles, and complements such as RAPPOR's 1 - h/(h + 1) (h = e^(eps0/2)) carry a relative error
# U e^(eps0/2): 5e-8 at eps0 = 40, all digits at 73 (measured: RAPPOR's lower-bound pair divides by 0
# at eps0 = 300)
EPS0_LIMIT = 40.0
# below EPS0_MIN the engine is not certified: its laws are built from e^eps0 in doubles, which
# loses e^eps0 - 1 as eps0 falls (measured 2026-11-26, generic and binary k-RR at n = 1 against the
# exact eps = log1p(expm1(eps0) - delta (e^eps0 + 1)), delta 1e-300: 0.2% below it at eps0 = 1e-13,
# 1.2% at 1e-14, 1e-9 of it from 1e-16 on; exact to 1e-9 relative from 1e-12 up).  1e-6 keeps six
# orders of margin, and an eps0 below it is of no practical use (eps < eps0 < 1e-6): EPS0_MIN and
# EPS0_MIN_TEXT, lookup.format's
# eps0 itself is answered above EPS0_MAX when the lower bound is at least (1 - EPS0_NEAR) eps0
EPS0_NEAR = 0.01
# k of k-RR, g of OLH and the finite domain size (tablegen/mechanisms/frequency.py): k = 1e8 took at
# most 7.9 s and 689 MB in the sweep above (n = 1e3, delta = 1e-300); 1e10 had exhausted memory
CATEGORIES_MAX = 10**8
# one FFT-path evaluation allocates about 45 (upper) to 80 (lower, with its rounding correction)
# bytes per window cell: 2^23 cells stay below 0.7 GB (measured: k-RR k = 10, eps0 = 1, n = 1e9,
# a lower evaluation on 3.0e7 cells peaked at 2.4 GB and took 9.8 s)
FFT_MAX_CELLS = 2**23
# the spectral path reads psi from one FFT per (law row, period) only for periods up to this (longer
# ones are summed in the pair form, in passes of spectral.BATCH_NODES), and at most SPECTRUM_CELLS
# (rows x period, 24 bytes each) per FFT call
SPECTRUM_MAX_PERIOD = 2**22
SPECTRUM_CELLS = 2**24
# the FFT-path work one query may do in all, in cells, each call charged FFT_CALL_CELLS more for its
# fixed costs (saddlepoint, window search, the lower bound's rounding candidates): measured 0.3 us per
# cell on large windows and 0.05-0.2 s per call on small ones, so at most ~45 s; the 240 queries of a
# regression set (10 families, eps0 0.5-8, n 1e2-1e9, delta 1e-12 and 1e-6) use at most 4.7e6 cells
# in 40 calls, the heaviest FFT-path queries of the docs (paper-figures.md: joint Laplace, 2 and 4
# parts, eps0 0.1, n 1e7, delta 1e-6, with lower bounds) 5.8e7 and 6.4e7 (9.5 and 18 s, 0.32 GB):
# none of them is affected (at 2e7 they lost 17% in eps and their lower bound)
FFT_BUDGET_CELLS = 15 * 10**7
FFT_CALL_CELLS = 2 * 10**5
# an FFT window too large is coarsened (step doubled as often as the size asks) at most this often
COARSEN_TRIES = 3
# a joint composition's product is built part by part, merged after each factor to at most
# decomposition.MAX_COMPONENTS components (decomposition.joint): its cost is the work
# sum over the parts of (components so far) x (components of the part), about 0.15 us a unit and
# ~10 bytes each at the peak.  Measured for eps with its lower bound (both products built), Laplace
# base (193-194 components): parts = 4 / 5 / 6 / 8 / 16 / 32: 10.5 / 16.9 / 19.8 / 34.7 / 64 / 118 s,
# 1.16 / 1.24 / 1.45 / 1.71 / 1.81 / 1.86 GB.  The cap admits Laplace up to parts = 6 (work 6.6e7);
# bases of 2-8 components (k-RR, RAPPOR, OUE, HR, BLH, OLH, the clone) every parts up to 32 (k-RR
# k = 1e8, 32 parts, eps0 = 20, n = 1e12, delta = 1e-300: 6.5 s, 413 MB; RAPPOR, 32 parts: 11 s,
# 690 MB)
JOINT_WORK_MAX = 7 * 10**7


class WindowTooLarge(Exception):
    """An FFT window larger than one evaluation may use (``per_call``) or than the query has
    left (``exhausted``): raised before the window is allocated."""

    def __init__(self, cells: int, exhausted: bool) -> None:
        super().__init__(f"FFT window of {cells} cells ({'budget spent' if exhausted else 'over the per-call cap'})")
        self.cells = cells
        self.exhausted = exhausted


class CellBudget:
    """The FFT-path cells one query may still use: ``spend`` admits a window or raises
    ``WindowTooLarge`` (per-call cap ``per_call``, total ``total``)."""

    def __init__(self, total: float | None = None, per_call: float | None = None) -> None:
        self.left = FFT_BUDGET_CELLS if total is None else total
        self.per_call = FFT_MAX_CELLS if per_call is None else per_call

    def spend(self, cells: int) -> None:
        """Admit a window of ``cells`` cells (charged ``FFT_CALL_CELLS`` more) or raise."""
        if cells > self.per_call:
            raise WindowTooLarge(cells, exhausted=False)
        if cells + FFT_CALL_CELLS > self.left:
            raise WindowTooLarge(cells, exhausted=True)
        self.left -= cells + FFT_CALL_CELLS


def joint_work(size: int, parts: int, cap: int) -> int:
    """The work of a product of ``parts`` factors of ``size`` components each, the product merged
    to at most ``cap`` components after every factor: sum_i min(size^(i-1), cap) size."""
    total, current = 0, 1
    for _ in range(parts):
        total += current * size
        current = min(current * size, cap)
    return total


def check_joint(base: str, parts: int, size: int, cap: int) -> None:
    """ValueError naming parts and its allowed range where a joint product of ``parts`` factors of
    ``size`` components (merged to ``cap``) would exceed ``JOINT_WORK_MAX`` (before it is built)."""
    if joint_work(size, parts, cap) <= JOINT_WORK_MAX:
        return
    allowed = max((p for p in range(1, parts) if joint_work(size, p, cap) <= JOINT_WORK_MAX), default=1)
    raise ValueError(f"parts must be an integer in [1, {allowed}] for a joint composition of {base!r} "
                     f"({size} components a part): a larger product is too costly to build live, got parts={parts}")


def checked_n(n: float) -> int:
    """n as an int in [1, N_LIMIT] (ValueError naming n and the range otherwise)."""
    return validate.integer_at_least("n", n, 1, N_LIMIT)


def checked_eps0(eps0: float) -> float:
    """eps0 as a float in [EPS0_MIN, EPS0_LIMIT] (ValueError naming eps0 and the range otherwise)."""
    value = minimum_eps0(eps0)
    if value > EPS0_LIMIT:
        raise ValueError(f"eps0 must be in [{EPS0_MIN:g}, {EPS0_LIMIT:g}] (the engine evaluates eps0 <= "
                         f"{EPS0_MAX:g}; above it only eps0 itself is answered, where a lower bound proves it close), "
                         f"got eps0={eps0!r}")
    return value


def minimum_eps0(eps0: float) -> float:
    """eps0 as a finite float >= EPS0_MIN (ValueError otherwise, stating the minimum as lookup and
    every help text do: ``EPS0_MIN_TEXT``)."""
    value = validate.number("eps0", eps0)
    if not (math.isfinite(value) and value >= EPS0_MIN):
        raise ValueError(f"eps0 must be {EPS0_MIN_TEXT} and finite (below {EPS0_MIN:g} the engine's double-precision "
                         f"laws are not certified; docs/engine.md, Supported domain), got eps0={eps0!r}")
    return value


def engine_eps0(eps0: float) -> float:
    """eps0 as a float in [EPS0_MIN, EPS0_MAX], the engine's own range (ValueError naming eps0 and
    the range otherwise; the public functions answer some eps0 above it first, ``bounds.py``)."""
    value = minimum_eps0(eps0)
    if value > EPS0_MAX:
        raise ValueError(f"eps0 must be in [{EPS0_MIN:g}, {EPS0_MAX:g}] for the live engine, got eps0={eps0!r}")
    return value


def engine_n(n: int) -> int:
    """The n the engine evaluates for n users: n itself up to N_MAX, else N_MAX (certified by
    monotonicity in n)."""
    return min(n, N_MAX)


def beyond_eps0(eps0: float) -> bool:
    """Whether eps0 is above the engine's own range (answered only near eps0, or refused)."""
    return eps0 > EPS0_MAX


def far_eps0_error(eps0: float, lower: float | None, answer: str = "eps") -> ValueError:
    """The refusal for eps0 above EPS0_MAX where no lower bound proves the local guarantee close:
    ``answer`` "eps" (eps0 itself, ``lower`` the proved lower bound on eps) or "delta"
    (1 - e^(eps - eps0))."""
    if answer == "eps":
        what, proved = "eps0 itself (eps <= eps0 always holds)", "the exact eps"
        found = "no lower bound is" if lower is None or lower <= 0 else f"only eps >= {lower:.6g} is"
    else:
        what, proved = "1 - e^(eps - eps0) (the local guarantee)", "the exact delta"
        found = "no lower bound that close is"
    return ValueError(
        f"eps0={eps0!r} is above the live engine's range eps0 <= {EPS0_MAX:g}; above it (up to {EPS0_LIMIT:g}) the "
        f"answer is {what}, given only where a lower bound proves {proved} within {EPS0_NEAR:.0%} of it, and here "
        f"{found} proved (many users outside the most likely report: n e^-eps0 not small): use eps0 <= {EPS0_MAX:g}")
