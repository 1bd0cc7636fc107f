"""Unary encodings (RAPPOR) and the binary sandwich (docs/mechanisms.md, "Unary encodings"): the
per-coordinate counts, computed from binomial pmfs, against the engine's bounds for the shuffled vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tablegen.engine import eps_bounds


def _rappor_counts_eps(eps0: float, n: int, delta: float) -> float:
    """Exact eps of the per-coordinate counts of shuffled RAPPOR (each bit kept w.p. e^(eps0/2) /
    (1 + e^(eps0/2))), the target's value v against v', every other user at a third value: the counts of
    v and v' are independent, Bin(n-1, q) + Bern(p or q); delta of the product pair by direct sums."""
    p = math.exp(eps0 / 2) / (1 + math.exp(eps0 / 2))
    others = stats.binom.pmf(np.arange(n), n - 1, 1 - p)
    holds, lacks = np.convolve(others, [1 - p, p]), np.convolve(others, [p, 1 - p])
    joint_p, joint_q = np.outer(holds, lacks), np.outer(lacks, holds)

    def delta_at(eps: float) -> float:
        return float(np.maximum(joint_p - math.exp(eps) * joint_q, 0).sum())

    lo, hi = 0.0, eps0
    for _ in range(40):
        lo, hi = ((lo + hi) / 2, hi) if delta_at((lo + hi) / 2) > delta else (lo, (lo + hi) / 2)
    return hi


def test_unary_encoding_counts_are_below_what_the_vectors_shuffle_proves() -> None:
    """The counts are a post-processing of the shuffled vectors: their exact eps (docs/mechanisms.md: 0.2226)
    lies below our lower bound for RAPPOR (0.3270), the exact divergence of a concrete pair of vector
    datasets, so a bound certified from the counts would not be certified for single-message RAPPOR."""
    counts = _rappor_counts_eps(2.0, 1000, 1e-8)
    b = eps_bounds("rappor", eps0=2.0, n=1000, delta=1e-8)
    assert counts == pytest.approx(0.2226, abs=5e-4)
    assert b.lower == pytest.approx(0.3270, abs=5e-4) and b.upper == pytest.approx(0.3802, abs=5e-4)
    assert counts < 0.9 * b.lower
