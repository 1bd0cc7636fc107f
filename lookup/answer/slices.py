"""eps0 slices: the engine's certified eps(n, delta) at one query eps0, computed once in a worker
and kept, so that every later question at that eps0 is answered refined in microseconds.

An application asks at its own eps0 over and over (its randomizer is fixed; n and delta vary).
The table rounds such an eps0 up to its grid, which is where most of a table answer's slack
comes from.  A slice removes it: ``compute`` runs ``tablegen.engine.dense.eps_slice`` (the
build's own path, the same certified values a table stores) at the exact eps0 over the table's
n and delta axes made ``DENSITY`` times finer (geometric midpoints), a few seconds in a worker.
``answer`` then reads it with the table's conservative rules (``lookup/answer/rules.py``):

* the slice is made monotone first: a running minimum along n and along delta.  The exact eps
  is non-increasing in n and in delta, so the certified value at a smaller n (or delta) is an
  upper bound at a larger one too, and the minimum of upper bounds is one;
* n is rounded DOWN to the slice's grid (above its largest n: the largest);
* between two grid deltas, the chord in (e^eps, delta) (``device.chord``: the hockey-stick
  divergence is convex in e^eps), rounded up; above the largest delta, the largest delta's eps;
  below the smallest, no answer (the table's, or the engine's);
* eps0 is the query's own: no rounding.

The answer's slack estimate is its ratio to the same chord read at the next grid n up (the
estimate ``rules.eps_at`` makes from the opposite corner).  Slices are kept in an LRU of
``size`` entries (a slice of the default table: 701 x 37 float64, 0.2 MB), keyed by the table's
digest, the engine version, the mechanism, its parameters and eps0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lookup.device.files import chord, locate
from lookup.store.table import Table

DENSITY = 2  # slice axes: the table's n and delta axes with DENSITY - 1 geometric midpoints per gap


def axes(table: Table) -> tuple[list[int], list[float]]:
    """The slice's n (integers) and delta axes: the table's, ``DENSITY`` times finer."""
    def finer(axis: np.ndarray) -> np.ndarray:
        logs = np.log(np.asarray(axis, float))
        steps = np.arange(0, (logs.size - 1) * DENSITY + 1) / DENSITY
        return np.exp(np.interp(steps, np.arange(logs.size), logs))

    ns, deltas = finer(table.n), finer(table.delta)
    ns[::DENSITY], deltas[::DENSITY] = table.n, table.delta  # the table's own grid values, exactly
    return np.unique(np.round(ns).astype(np.int64)).tolist(), deltas.tolist()


def compute(mechanism: str, params: dict[str, Any], eps0: float, ns: list[int], deltas: list[float]) -> np.ndarray:
    """Certified eps at (eps0, ns[i], deltas[j]) made monotone (runs in a worker process; the
    engine imported here)."""
    from tablegen.engine.dense import eps_slice

    values = eps_slice(mechanism, eps0=eps0, ns=ns, deltas=deltas, **params)
    values = np.minimum.accumulate(values, axis=0)  # upper bounds at smaller n hold at larger n
    return np.minimum.accumulate(values, axis=1)  # and at smaller delta, at larger delta


class Slice:
    """One computed slice and how to read it (see the module docstring)."""

    def __init__(self, eps0: float, ns: list[int], deltas: list[float], values: np.ndarray) -> None:
        self.eps0, self.ns, self.deltas, self.values = eps0, [float(n) for n in ns], deltas, values

    def answer(self, n: float, delta: float) -> tuple[float, float, dict[str, float]] | None:
        """(certified eps, slack estimate, the grid corner read) at (self.eps0, n, delta); None
        below the slice's smallest n or delta."""
        cell = locate([self.eps0], self.ns, self.deltas, self.eps0, n, delta)
        if cell is None:
            return None
        value = min(chord(lambda d: float(self.values[cell.n_down, d]), cell), self.eps0)
        corner = {"eps0": self.eps0, "n": self.ns[cell.n_down], "delta": self.deltas[cell.lo],
                  "delta_upper": self.deltas[cell.hi]}
        if cell.n_up >= len(self.ns):
            return value, math.nan, corner
        opposite = chord(lambda d: float(self.values[cell.n_up, d]), cell)
        return value, (value / opposite - 1 if opposite > 0 else math.nan), corner
