"""``tablegen export --device``: the part of a table one deployment needs, as a compact device file.

The layout is documented in ``lookup/device.py`` (which reads it with the standard library).
A file holds the rows of one mechanism family (optionally one parameter set) and, optionally,
a cut of the axes (``cut``):

* eps0: the grid values asked for, exactly (a query's eps0 is rounded up to a kept value, which
  is sound for any subset: the kept values are the monotone surface's, each an upper bound for
  every eps0 below it);
* n: the grid points covering [n_min, n_max]: the largest one <= n_min (so a query at n_min,
  rounded down, is answered) through the smallest one >= n_max (the slack estimate's neighbour);
* delta: for each asked delta the grid deltas bracketing it (the chord between two grid deltas
  is certified whichever two are kept; the bracketing pair gives the table's own answer).

Certified eps are rounded UP to float32 and lower bounds DOWN (``store.round_float32``); the
exported surfaces are the monotone ones of ``lookup.table``, so a reader needs no preprocessing.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lookup.device import FORMAT, encode
from lookup.table import Table, canonical_params, open_table
from tablegen.store import round_float32


def _grid_text(values: np.ndarray) -> str:
    return ", ".join(repr(float(v)) for v in values)  # shortest text that reads back exactly


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def _numbers(values: Sequence[float] | None) -> list[float] | None:
    return None if values is None else [float(v) for v in values]


def eps0_indices(grid: np.ndarray, wanted: Sequence[float] | None) -> np.ndarray:
    """Indices of the grid eps0 equal to the ``wanted`` ones (all if None); ValueError naming a
    value that is not a grid value, with the grid."""
    if wanted is None:
        return np.arange(grid.size)
    missing = [v for v in wanted if v not in grid]
    if missing:
        raise ValueError(f"eps0={missing[0]!r} is not an eps0 of the table; its eps0 grid: {_grid_text(grid)}")
    return np.unique(np.searchsorted(grid, np.asarray(wanted, float)))


def n_indices(grid: np.ndarray, n_min: float | None, n_max: float | None) -> np.ndarray:
    """Indices of the grid n covering [n_min, n_max]: from the largest grid n <= n_min (the
    first if None) to the smallest grid n >= n_max (the last if None or above the grid)."""
    if n_min is not None and n_max is not None and n_min > n_max:
        raise ValueError(f"n_min must be <= n_max, got n_min={n_min:g} n_max={n_max:g}")
    lo = 0
    if n_min is not None:
        if n_min < grid[0]:
            raise ValueError(f"n_min={n_min:g} is below the table's smallest n ({grid[0]:g}): a query there "
                             f"cannot be rounded down to a grid n; n grid: {grid[0]:g} to {grid[-1]:g}")
        lo = int(np.searchsorted(grid, n_min, side="right")) - 1
    hi = grid.size - 1 if n_max is None else min(int(np.searchsorted(grid, n_max, side="left")), grid.size - 1)
    return np.arange(lo, max(hi, lo) + 1)


def delta_indices(grid: np.ndarray, wanted: Sequence[float] | None) -> np.ndarray:
    """Indices of the grid deltas bracketing each ``wanted`` delta (the grid delta itself when it
    is one, the largest when above the grid; all if None); ValueError below the grid."""
    if wanted is None:
        return np.arange(grid.size)
    keep: set[int] = set()
    for d in wanted:
        if not 0 < d < 1:
            raise ValueError(f"delta must be in (0, 1), got delta={d!r}")
        if d < grid[0]:
            raise ValueError(f"delta={d:g} is below the table's smallest delta ({grid[0]:g}); its delta grid: "
                             f"{_grid_text(grid)}")
        hi = min(int(np.searchsorted(grid, d, side="left")), grid.size - 1)
        keep.update({hi - 1, hi} if grid[hi] > d else {hi})
    return np.array(sorted(keep))


SLACK_FLOOR = 1e-4  # eps below this at the larger n: the relative slack says nothing (eps reaches 0 once the
# total variation drops below delta, and x / 0 is infinite); such cells are reported by their absolute excess


def worst_slack(upper: np.ndarray) -> tuple[float, tuple[int, int, int, int] | None, float]:
    """(max over cells of upper[r, e, j, d] / upper[r, e, j + 1, d] - 1 where the value at the next
    larger n (same eps0 and delta) is at least ``SLACK_FLOOR``, where it is, and the largest
    absolute excess upper[r, e, j, d] - upper[r, e, j + 1, d] where it is below): how far an
    answer between two n points of the file can be above the value at the larger one (NaN, None
    and NaN with a single n)."""
    if upper.shape[2] < 2:
        return float("nan"), None, float("nan")
    here, nxt = upper[:, :, :-1].astype(float), upper[:, :, 1:].astype(float)
    small = nxt < SLACK_FLOOR
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(small | (here == nxt), 0.0, here / nxt - 1)
    excess = float(np.max(np.where(small, here - nxt, 0.0)))
    index = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    return float(ratio[index]), tuple(int(i) for i in index), excess


def export_device(out: str | Path, family: str, params: dict[str, Any], table: str | Table | None = None, *,
                  eps0: Sequence[float] | None = None, n_min: float | None = None, n_max: float | None = None,
                  delta: Sequence[float] | None = None) -> dict[str, Any]:
    """Write the rows of ``family`` matching ``params`` (all rows of the family if empty), cut
    to the ``eps0`` values, the n range [``n_min``, ``n_max``] and the deltas bracketing
    ``delta`` (each None: the whole axis); returns what was written (size, axes, worst slack)."""
    t = table if isinstance(table, Table) else open_table(table)
    want = json.loads(canonical_params(params))
    rows = [i for i, (f, p) in enumerate(zip(t.families, t.params, strict=True))
            if f == family and all(json.loads(canonical_params(p)).get(k) == v for k, v in want.items())]
    if not rows:
        labels = ", ".join(t.labels())
        raise ValueError(f"no row of mechanism={family!r} with {want or 'any parameters'} in {t.path}; "
                         f"the table has: {labels}")
    e, j, d = eps0_indices(t.eps0, eps0), n_indices(t.n, n_min, n_max), delta_indices(t.delta, delta)
    cut = np.ix_(rows, e, j, d)
    upper, lower = round_float32(t.upper[cut], up=True), round_float32(t.lower[cut], up=False)
    axes = {"eps0": t.eps0[e].tolist(), "n": t.n[j].tolist(), "delta": t.delta[d].tolist()}
    header = {
        "format": FORMAT,
        "family": family,
        "rows": [t.params[i] for i in rows],
        "eps0_monotone": [bool(t.eps0_monotone[i]) for i in rows],
        **axes,
        "shape": list(upper.shape),
        "dtype": "<f4",
        "rounding": "eps rounded up, lower bounds rounded down to float32",
        "cut": {"eps0": _numbers(eps0), "n_min": _number(n_min), "n_max": _number(n_max), "delta": _numbers(delta)},
        "source": {k: t.attrs.get(k) for k in ("title", "spec_sha256", "engine_version", "date_created")},
    }
    payload = upper.astype("<f4").tobytes() + lower.astype("<f4").tobytes()
    data = encode(header, payload)  # the header with its SHA-256 last, as format 2 has it (lookup.device)
    (header_bytes,) = struct.unpack_from("<I", data, 8)
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, out)
    slack, where, excess = worst_slack(upper)
    return {
        "file": str(out), "bytes": out.stat().st_size, "header_bytes": header_bytes,
        "rows": [t.labels()[i] for i in rows], "shape": list(upper.shape), **axes,
        "worst_slack": slack, "slack_floor": SLACK_FLOOR, "worst_excess_below_floor": excess,
        "worst_slack_at": None if where is None else {
            "mechanism": t.labels()[rows[where[0]]], "eps0": axes["eps0"][where[1]], "n": axes["n"][where[2]],
            "n_next": axes["n"][where[2] + 1], "delta": axes["delta"][where[3]]},
    }
