"""The FFT path's rounding correction (tablegen/engine/fourier.py): block bounds against cell sums."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tablegen.engine.fourier import _Blocks, _inside_cells


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    size=st.integers(1, 200_000),
    low=st.integers(-30_000, 10_000),
    shift=st.floats(-3.0, 3.0),
    lam=st.floats(-0.5, 0.5),
    m=st.integers(1, 10**6),
    r_scale=st.sampled_from([0.0, 0.5, 1.0, 2.0, 5.0]),
    fp_l2=st.sampled_from([0.0, 1e-12, 1e-6]),
    seed=st.integers(0, 2**32 - 1),
)
def test_block_bound_never_below_the_cell_sum(size, low, shift, lam, m, r_scale, fp_l2, seed):
    """Each block bounds the weight by its largest value there: the sum can only grow."""
    rng = np.random.default_rng(seed)
    y = low + np.arange(size, dtype=float) + shift
    centre = rng.uniform(y[0], y[-1])
    p = np.exp(-0.5 * ((y - centre) / max(size / 20, 1.0)) ** 2) + rng.normal(0, 1e-9, size)
    p_pos = np.maximum(p / p.sum(), 0.0)
    r = r_scale * math.sqrt(m)
    cells = _inside_cells(y, p_pos, m, r, lam, fp_l2)
    blocks = _Blocks(y, p_pos, fp_l2).inside(m, r, lam)
    assert blocks >= cells * (1 - 1e-12), (blocks, cells)
