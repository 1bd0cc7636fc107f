"""The conservative chord rule of ``lookup.format.chord_eps``, vectorised with numpy: the one rule
that lookup's answers (``lookup.answer.rules``) and the engine's brackets (``tablegen.engine``) apply.
Why it is certified: docs/soundness.md."""

from __future__ import annotations

import numpy as np

from lookup.format import FLOAT_SLACK


def chord_eps(u_small: np.ndarray, u_large: np.ndarray, d_small: np.ndarray, d_large: np.ndarray,
              delta: np.ndarray) -> np.ndarray:
    """eps on the chord in (e^eps, delta) through (e^u_small, d_small), (e^u_large, d_large)
    at ``delta`` in [d_small, d_large], rounded up (``u_large`` exactly where the weight of the
    first point is 0: at d_large, or where d_large is not above d_small).

    Args:
        u_small: certified eps at the smaller delta ``d_small`` (the larger eps).
        u_large: certified eps at the larger delta ``d_large``.
        d_small, d_large: the two grid deltas.
        delta: the query deltas.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(d_large > d_small, (d_large - delta) / (d_large - d_small), 0.0)
    x_minus_one = t * np.expm1(u_small) + (1 - t) * np.expm1(u_large)
    return np.where(t == 0, u_large, np.log1p(x_minus_one) * (1 + FLOAT_SLACK))
