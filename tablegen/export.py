"""``tablegen export --device``: the numbers one deployment needs, as a compact device file.

The layout is documented in ``lookup/device/files.py`` (which reads it with the standard library) and,
byte by byte, in docs/device-format.md.  Three ways to fill it:

* ``export_deployment`` (the default of the command): computed with the slice engine for the
  deployment itself: its eps0 values exactly, its deltas exactly, and n from n_min to n_max at
  a spacing refined until two stored n are at most ``max_slack`` apart in eps (below);
* ``export_gaussian`` (``--mechanism gaussian``): the shuffled Gaussian on bits over a sigma axis (format 3,
  ``"axis": "sigma"``), one privacy profile per sigma and n (``tablegen.engine.gaussian.eps_curve``);
* ``export_device`` (``--cut``/``--table``): the rows of one mechanism family (optionally one
  parameter set) of an existing table, optionally cut to the axes a deployment needs (``cut``):

* eps0: the grid values asked for, exactly (a query's eps0 is rounded up to a kept value, which
  is sound for any subset: the kept values are the monotone surface's, each an upper bound for
  every eps0 below it);
* n: the grid points covering [n_min, n_max]: the largest one <= n_min (so a query at n_min,
  rounded down, is answered) through the smallest one >= n_max (the slack estimate's neighbour);
* delta: for each asked delta the grid deltas bracketing it (the chord between two grid deltas
  is certified whichever two are kept; the bracketing pair gives the table's own answer).

Certified eps are rounded UP to float32 and lower bounds DOWN (``store.round_float32``); the
exported surfaces are the monotone ones of ``lookup.store.table``, so a reader needs no preprocessing.
"""

from __future__ import annotations

import datetime
import json
import math
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lookup.answer.gaussian import ANALYSED, ROW
from lookup.device.files import digest_in, encode
from lookup.format import FORMAT, FORMAT_AXIS, SIGMA_MAX, SIGMA_MIN, canonical_params
from lookup.store.table import Table, open_table
from lookup.trust.origin import atomic_write, record_built
from tablegen import ENGINE_VERSION, __version__, allocator
from tablegen.limits import EPS0_MIN, EPS0_MIN_TEXT
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
    ``delta`` (each None: the whole axis), as the device file ``out``.

    Args:
        out: the device file's path.
        family: a mechanism family of the table.
        params: the rows' parameters to match (empty: every row of the family).
        table: a ``Table``, a path, or None for the shipped table.
        eps0: the grid eps0 to keep.
        n_min, n_max: the n range to keep.
        delta: the deltas to keep (with those bracketing them).

    Returns:
        What was written: size, axes, worst slack.

    Raises:
        ValueError: no row matches, or a value is off the table's grid.
    """
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
    # recorded as built only from a table lookup.trust.origin vouched for (a Table made in Python, e.g. by
    # lookup.store.table.from_arrays, is certified by nobody)
    header_bytes, out = _write(out, header, upper, lower, record=t.vouched and t.certified)
    slack, where, excess = worst_slack(upper)
    return {
        "file": str(out), "bytes": out.stat().st_size, "header_bytes": header_bytes,
        "rows": [t.labels()[i] for i in rows], "shape": list(upper.shape), **axes,
        "worst_slack": slack, "slack_floor": SLACK_FLOOR, "worst_excess_below_floor": excess,
        "worst_slack_at": None if where is None else {
            "mechanism": t.labels()[rows[where[0]]], "eps0": axes["eps0"][where[1]], "n": axes["n"][where[2]],
            "n_next": axes["n"][where[2] + 1], "delta": axes["delta"][where[3]]},
    }



def _write(out: str | Path, header: dict[str, Any], upper: np.ndarray, lower: np.ndarray,
           record: bool = True) -> tuple[int, Path]:
    """Write a device file (format 2, sealed by ``lookup.device.files.encode``) atomically: a reader
    never sees a half-written file, and nothing planted beside ``out`` is written through
    (``lookup.trust.origin.atomic_write``: a new temporary file, created exclusively, renamed); returns
    the header's length and the path.  With ``record`` (values from a trusted table or the
    engine), the SHA-256 of the bytes written is recorded as built here (``lookup.trust.origin``)."""
    payload = upper.astype("<f4").tobytes() + lower.astype("<f4").tobytes()
    data = encode(header, payload)  # the header with its SHA-256 last, as format 2 has it (lookup.device.files)
    (header_bytes,) = struct.unpack_from("<I", data, 8)
    out = Path(out)
    atomic_write(out, data)
    if record:
        record_built(out, digest_in(data[12:12 + header_bytes]))
    return header_bytes, out


# ------------------------------------------------------------------ computed for one deployment

MAX_SLACK = 0.005  # default: an answer between two stored n at most 0.5% above the value at the larger one
START_PER_DECADE = 20  # the first n axis (about 6% apart for eps ~ n^-1/2), refined where it is too coarse
UPPER_RESOLUTION = 10.0  # as workflows/default.toml (the shipped table): certified at any value; 20 is as fast
# but measured no tighter on the deployments (docs/lookup.md#device-files)
LOWER_RESOLUTION = 30.0  # as workflows/default.toml: the lower path's rounding term scales like 1/resolution^2
MAX_ROUNDS = 64  # refinement rounds: each at least halves every loose interval, 2^64 is beyond any n
LIVE_MARGIN = 0.001  # the stored steps are kept this much (at most half of max_slack) below max_slack: the slice
# engine's values sit up to 0.07% above the live engine's at the same point (its 1% ladder with a chord; measured on
# the deployments), so answers between stored n stay within max_slack of the LIVE certified value too
SPLIT_AIM = 0.97  # a split aims at 97% of max_slack per part (measured: 15% fewer n than halving, 3 rounds)


def start_axis(n_min: int, n_max: int, per_decade: int = START_PER_DECADE) -> np.ndarray:
    """Integers from n_min to n_max (both included) about 10^(1/per_decade) apart, ascending."""
    count = max(2, math.ceil(per_decade * math.log10(n_max / n_min)) + 1) if n_max > n_min else 1
    axis = np.unique(np.round(np.geomspace(n_min, n_max, count)).astype(np.int64))
    return np.unique(np.concatenate([[n_min], axis, [n_max]]))


def interval_slack(upper: np.ndarray) -> np.ndarray:
    """Per interval (n[j], n[j+1]) of a surface ``upper`` [eps0, n, delta], the largest
    upper(n_j) / upper(n_{j+1}) - 1 over eps0 and delta where the value at n_{j+1} is at least
    ``SLACK_FLOOR`` (0 where it is nowhere)."""
    here, nxt = upper[:, :-1].astype(float), upper[:, 1:].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where((nxt >= SLACK_FLOOR) & (here > nxt), here / nxt - 1, 0.0)
    return ratio.max(axis=(0, 2))


def loose(slack: np.ndarray, n: np.ndarray, max_slack: float) -> np.ndarray:
    """Which intervals (n[j], n[j+1]) must be split, given their ``interval_slack`` of the stored
    float32 values: those above max_slack (the reason: a query between them is read at n_j, and
    the exact eps there is at least the one at n_{j+1}, so this ratio is how far the answer can
    be above the certified value at the larger n; where the value at n_{j+1} is below
    ``SLACK_FLOOR`` a relative slack says nothing, eps reaches 0, and the absolute excess is
    reported instead), except where n_j and n_{j+1} are adjacent integers (nothing to insert)."""
    return (slack > max_slack) & (np.diff(n) > 1)


def insertions(n: np.ndarray, slack: np.ndarray, split: np.ndarray, max_slack: float) -> np.ndarray:
    """New integer n inside every split interval: p - 1 geometric points cutting it into p parts,
    p = ceil(log(1 + slack) / log(1 + SPLIT_AIM * max_slack)), at least 2 (eps varies locally like
    a power of n, so geometric points share the interval's slack about equally; aiming below
    max_slack leaves room for the engine's ladder, whose values are not exactly a power law);
    a part that is still loose is split again in the next round."""
    out = []
    for a, b, s in zip(n[:-1][split], n[1:][split], slack[split], strict=True):
        parts = max(2, math.ceil(math.log1p(s) / math.log1p(SPLIT_AIM * max_slack)))
        points = np.round(np.geomspace(float(a), float(b), parts + 1)[1:-1]).astype(np.int64)
        out.append(np.clip(points, a + 1, b - 1))
    return np.unique(np.concatenate(out)) if out else np.zeros(0, np.int64)


def _axis(name: str, values: Sequence[float] | None, check: Any, allowed: str) -> list[float]:
    """A deployment's axis: given, each value checked (``allowed`` says what passes), sorted,
    duplicates dropped."""
    if not values:
        raise ValueError(f"give the deployment's --{name} (one value or several, comma-separated)")
    for v in values:
        if not check(v):
            raise ValueError(f"{name} must be {allowed}, got {name}={v!r}")
    return sorted({float(v) for v in values})


def _binary_points(eps0s: list[float], ns: np.ndarray, deltas: list[float]) -> np.ndarray:
    """Certified eps [eps0, n, delta] of binary RR from ``tablegen.engine.eps_bounds`` (the exact worst
    case, docs/soundness.md), point by point."""
    from tablegen.engine import eps_bounds

    return np.array([[[eps_bounds("krr", eps0=e, n=int(v), delta=d, lower=False, k=2).upper for d in deltas]
                      for v in ns] for e in eps0s])


def _monotone(values: np.ndarray) -> np.ndarray:
    """Certified eps [eps0, n, delta] (each axis ascending) made monotone the way a certified value may be
    carried: one certified at n holds at every larger n, at eps0 at every smaller eps0, at delta at every
    larger delta (docs/soundness.md, "Facts used"), so running minima along each axis in that direction
    stay certified.  Binary RR's values sit up to 0.5% above the exact ones by its search step."""
    values = np.minimum.accumulate(values, axis=1)
    values = np.minimum.accumulate(values[::-1], axis=0)[::-1]
    return np.minimum.accumulate(values, axis=2)


def export_deployment(out: str | Path, family: str, params: dict[str, Any], *, eps0: Sequence[float],
                      delta: Sequence[float], n_min: float, n_max: float, max_slack: float = MAX_SLACK,
                      lower: bool = True, resolution: float = UPPER_RESOLUTION,
                      lower_resolution: float = LOWER_RESOLUTION,
                      per_decade: int = START_PER_DECADE) -> dict[str, Any]:
    """Compute and write the device file of one deployment: ``family`` with ``params`` at the
    ``eps0`` values and ``delta`` values given (exactly those), n from n_min (rounded down, so a
    query at n_min is answered) to n_max (rounded up) on an axis refined until every two
    consecutive stored n are within ``max_slack`` less ``LIVE_MARGIN`` (``loose``), so that an
    answer is within max_slack of the live certified value; returns what was written.

    Every stored eps is the engine's certified value at its (eps0, n, delta) (``eps_slice``)
    rounded UP to float32, every lower bound ``lower_slice``'s rounded DOWN (NaN where there is
    none, or all with ``lower=False``): nothing is interpolated or extrapolated.  The n axis
    starts ``per_decade`` per decade; each round inserts the integer geometric midpoint of every
    loose interval and computes only the new n (one slice per eps0).

    Args:
        out: the device file's path.
        family, params: the mechanism and its parameters.
        eps0, delta: the values stored, exactly those.
        n_min, n_max: the n range answered.
        max_slack: the largest relative step between consecutive stored n.
        lower: also store lower bounds.
        resolution, lower_resolution: the engine's cells per sd for the upper and lower bounds.
        per_decade: the n axis's first points per decade.

    Returns:
        What was written: size, axes, the worst slack and where, the refinement rounds, seconds.
    """
    from tablegen.engine.dense import eps_slice, lower_slice
    from tablegen.mechanisms import get_mechanism

    start = time.perf_counter()
    mechanism = get_mechanism(family)
    eps0s = _axis("eps0", eps0, lambda v: EPS0_MIN <= v < math.inf, f"{EPS0_MIN_TEXT} and finite")
    deltas = _axis("delta", delta, lambda v: 0 < v < 1, "in (0, 1)")
    if not (1 <= n_min <= n_max < math.inf):
        raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min:g} n_max={n_max:g}")
    if not 0 < max_slack < 1:
        raise ValueError(f"max_slack must be in (0, 1), got max_slack={max_slack!r}")
    lo, hi = int(math.floor(n_min)), int(math.ceil(n_max))
    aim = max_slack - min(LIVE_MARGIN, max_slack / 2)  # what the stored steps are refined to (LIVE_MARGIN)

    binary = family == "krr" and params.get("k") == 2  # one engine query per point, its exact path
    settle = _monotone if binary else (lambda values: values)  # slices come monotone; points are made so

    def compute(ns: np.ndarray) -> np.ndarray:
        """Certified eps [eps0, n, delta] in float64, one slice per eps0 (binary RR: ``_binary_points``)."""
        if binary:
            return _binary_points(eps0s, ns, deltas)
        return np.stack([eps_slice(mechanism, eps0=e, ns=ns.tolist(), deltas=deltas, resolution=resolution,
                                   **params) for e in eps0s])

    n = start_axis(lo, hi, per_decade)
    exact = settle(compute(n))
    rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):  # noqa: B007 (the count is reported)
        slack = interval_slack(round_float32(exact, up=True))  # of the values the file will store
        split = loose(slack, n, aim)
        if not split.any():
            break
        new = insertions(n, slack, split, aim)
        new = new[~np.isin(new, n)]
        n = np.concatenate([n, new])
        exact = np.concatenate([exact, compute(new)], axis=1)
        order = np.argsort(n, kind="stable")
        n, exact = n[order], settle(exact[:, order])
    upper = round_float32(exact, up=True)[None]
    lows = np.full_like(exact, np.nan)
    if lower:
        for i, e in enumerate(eps0s):
            lows[i] = lower_slice(mechanism, eps0=e, ns=n.tolist(), deltas=deltas, upper=exact[i],
                                  resolution=lower_resolution, **params)
    lows = round_float32(np.minimum(lows, exact), up=False)[None]  # a lower bound above the upper one proves
    # nothing more than the upper one does (the readers' invariant: lower <= eps)
    row = json.loads(canonical_params(params))
    axes = {"eps0": eps0s, "n": [int(v) for v in n], "delta": deltas}
    seconds_compute = time.perf_counter() - start
    header = {
        "format": FORMAT,
        "family": family,
        "rows": [row],
        "eps0_monotone": [bool(mechanism.eps0_monotone(params))],
        **axes,
        "shape": list(upper.shape),
        "dtype": "<f4",
        "rounding": "eps rounded up, lower bounds rounded down to float32",
        "deployment": {"eps0": eps0s, "n_min": float(n_min), "n_max": float(n_max), "delta": deltas,
                       "max_slack": float(max_slack), "resolution": float(resolution),
                       "lower_resolution": float(lower_resolution) if lower else None},
        "source": {"title": "computed for one deployment (tablegen export --device)", "spec_sha256": None,
                   "engine_version": ENGINE_VERSION, "package_version": __version__,
                   "date_created": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
    }
    header_bytes, path = _write(out, header, upper, lows)
    slack, where, excess = worst_slack(upper)
    label = " ".join([family, *(f"{k}={v}" for k, v in sorted(row.items()))])
    return {
        "file": str(path), "bytes": path.stat().st_size, "header_bytes": header_bytes, "computed": True,
        "rows": [label], "shape": list(upper.shape), **axes,
        "max_slack": float(max_slack), "slack_aim": aim, "worst_slack": slack, "slack_floor": SLACK_FLOOR,
        "worst_excess_below_floor": excess,
        "worst_slack_at": None if where is None else {
            "mechanism": label, "eps0": axes["eps0"][where[1]], "n": axes["n"][where[2]],
            "n_next": axes["n"][where[2] + 1], "delta": axes["delta"][where[3]]},
        "rounds": rounds, "engine_version": ENGINE_VERSION, "seconds": round(seconds_compute, 3),
    }


# ------------------------------------------------------------------ the shuffled Gaussian, over a sigma axis

GAUSSIAN_PER_DECADE = 2  # its n axis: n_min, about sqrt(10) apart, then n_max (0.1-11 s a profile, no refinement)


def _gaussian_points(sigmas: list[float], ns: np.ndarray, deltas: list[float], lower: bool, workers: int,
                     log: Callable[[str], None] | None) -> tuple[np.ndarray, np.ndarray]:
    """(certified eps, lower bounds or NaN) [sigma, n, delta], one privacy profile per (sigma, n) read at
    every delta (``tablegen.engine.gaussian.eps_curve``: the chord of evaluated upper bounds, certified
    because the exact delta is convex in e^eps), on ``workers`` processes; ``log`` told of each sigma done."""
    from concurrent.futures import ProcessPoolExecutor

    from tablegen.engine import gaussian

    shape = (len(sigmas), ns.size, len(deltas))
    upper, lows = np.empty(shape), np.full(shape, np.nan)
    cells = list(np.ndindex(*shape[:2]))
    # each process keeps its freed arrays, as the table build's workers do (``allocator``; its effect on this
    # build was within run-to-run noise)
    with ProcessPoolExecutor(max_workers=workers, initializer=allocator.keep_freed_memory) as pool:
        profiles = pool.map(gaussian.eps_curve, [sigmas[i] for i, _ in cells], [int(ns[j]) for _, j in cells],
                            [deltas] * len(cells))
        for (i, j), (certified, found) in zip(cells, profiles, strict=True):
            upper[i, j] = certified
            if lower:
                lows[i, j] = np.where(found > 0, found, np.nan)  # 0 proves nothing: no lower bound
            if log is not None and j == ns.size - 1:
                log(f"gaussian: sigma {sigmas[i]:g} done ({i + 1} of {len(sigmas)} sigma, {ns.size} profiles each)")
    return upper, lows


def monotone_in_sigma(upper: np.ndarray, lower: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Certified eps and lower bounds [sigma, n, delta] (each axis ascending) carried the way each may be:
    the exact eps is non-increasing in sigma (more noise is post-processing: add independent N(0, s^2)
    to each report), n and delta, so an upper bound at a point holds at every larger sigma, n and delta
    (running minima along each axis, ascending) and a lower bound at every smaller one (running maxima,
    descending); a lower bound above the upper one is lowered to it (the readers' invariant)."""
    for axis in range(3):
        upper = np.minimum.accumulate(upper, axis=axis)
        lower = np.flip(np.fmax.accumulate(np.flip(lower, axis), axis=axis), axis)
    return upper, np.minimum(lower, upper)  # NaN (no lower bound anywhere at or above) stays NaN


def export_gaussian(out: str | Path, *, sigma: Sequence[float], delta: Sequence[float], n_min: float,
                    n_max: float, lower: bool = True, per_decade: int = GAUSSIAN_PER_DECADE, workers: int = 1,
                    log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Compute and write the device file of the shuffled Gaussian on bits: format 3 with a sigma axis
    (docs/device-format.md), at the ``sigma`` and ``delta`` values given (exactly those) and n from
    n_min to n_max (both stored) ``per_decade`` apart; returns what was written.

    Every stored eps is ``tablegen.engine.gaussian.eps_curve``'s certified value at its (sigma, n,
    delta), made monotone by ``monotone_in_sigma`` and rounded UP to float32; every lower bound its
    lower bound, carried the other way and rounded DOWN (NaN with ``lower=False``).

    Args:
        out: the device file's path.
        sigma: the noise's standard deviations stored, in [SIGMA_MIN, SIGMA_MAX].
        delta: the deltas stored.
        n_min, n_max: the n range answered.
        lower: also store lower bounds.
        per_decade: n points per decade.
        workers: processes computing the profiles.
        log: told of the progress (one line per sigma).

    Returns:
        What was written: size, axes, the worst slack between stored n and where, seconds.
    """
    start = time.perf_counter()
    sigmas = _axis("sigma", sigma, lambda v: SIGMA_MIN <= v <= SIGMA_MAX, f"in [{SIGMA_MIN:g}, {SIGMA_MAX:g}]")
    deltas = _axis("delta", delta, lambda v: 0 < v < 1, "in (0, 1)")
    if not (1 <= n_min <= n_max < math.inf):
        raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min:g} n_max={n_max:g}")
    n = start_axis(int(math.floor(n_min)), int(math.ceil(n_max)), per_decade)
    exact, lows = monotone_in_sigma(*_gaussian_points(sigmas, n, deltas, lower, workers, log))
    upper, lows = round_float32(exact, up=True)[None], round_float32(lows, up=False)[None]
    axes = {"sigma": sigmas, "n": [int(v) for v in n], "delta": deltas}
    header = {
        "format": FORMAT_AXIS,
        "axis": "sigma",
        "family": "gaussian",
        "rows": [ROW],
        **axes,
        "shape": list(upper.shape),
        "dtype": "<f4",
        "rounding": "eps rounded up, lower bounds rounded down to float32",
        "deployment": {"sigma": sigmas, "n_min": float(n_min), "n_max": float(n_max), "delta": deltas,
                       "per_decade": per_decade},
        "source": {"title": "computed for one deployment (tablegen export --device)", "spec_sha256": None,
                   "engine_version": ENGINE_VERSION, "package_version": __version__,
                   "date_created": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
    }
    header_bytes, path = _write(out, header, upper, lows)
    slack, where, excess = worst_slack(upper)
    label = f"gaussian inputs={ANALYSED}"
    return {
        "file": str(path), "bytes": path.stat().st_size, "header_bytes": header_bytes, "computed": True,
        "rows": [label], "shape": list(upper.shape), **axes,
        "worst_slack": slack, "slack_floor": SLACK_FLOOR, "worst_excess_below_floor": excess,
        "worst_slack_at": None if where is None else {
            "mechanism": label, "sigma": axes["sigma"][where[1]], "n": axes["n"][where[2]],
            "n_next": axes["n"][where[2] + 1], "delta": axes["delta"][where[3]]},
        "engine_version": ENGINE_VERSION, "seconds": round(time.perf_counter() - start, 3),
    }
