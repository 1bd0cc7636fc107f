"""engine.curve.eps_curve against exact sums of the papers' laws (independent of the engine)."""

from __future__ import annotations

import numpy as np
import pytest
from shuffle_reference import exact_delta, krr_lower_laws, krr_upper_law

from tablegen.engine import eps_bounds
from tablegen.engine.curve import LADDER, eps_curve

DELTAS = [1e-9, 1e-6, 1e-4, 1e-3, 1e-2]


@pytest.mark.parametrize(("eps0", "k", "n"), [(1.0, 3, 40), (2.0, 10, 60), (0.5, 2, 30)])
def test_certified_and_tight_against_exact_sums(eps0: float, k: int, n: int) -> None:
    curve = eps_curve("krr", eps0=eps0, n=n, deltas=DELTAS, k=k)
    for delta, upper, lower in zip(DELTAS, curve.upper, curve.lower, strict=True):
        assert exact_delta(*krr_upper_law(eps0, upper, k), n) <= delta  # certified
        assert upper <= eps0
        if upper < eps0:  # tight: one ladder step (plus margin) lower is no longer certified
            assert exact_delta(*krr_upper_law(eps0, upper / LADDER**3, k), n) > delta
        if lower > 0:  # some Theorem 5 pair still has delta above the target at the lower bound
            assert max(exact_delta(*law, n) for law in krr_lower_laws(eps0, lower, k)) > delta
        assert lower <= upper


def test_monotone_in_delta_and_close_to_the_single_search() -> None:
    deltas = np.geomspace(1e-12, 1e-3, 12)
    curve = eps_curve("generic", eps0=2.0, n=10_000, deltas=deltas[::-1], lower=False)
    upper = curve.upper[::-1]
    assert np.all(np.diff(upper) <= 0)
    assert np.all(np.isnan(curve.lower))
    for delta, value in zip(deltas[::4], upper[::4], strict=True):
        single = eps_bounds("generic", eps0=2.0, n=10_000, delta=float(delta), lower=False).upper
        assert single * (1 - 1e-3) <= value <= single * LADDER**2


def test_rejects_bad_delta() -> None:
    with pytest.raises(ValueError, match="delta"):
        eps_curve("krr", eps0=1.0, n=10, deltas=[1e-6, 1.5], k=3)
