"""``lookup.eps(..., rounds=T)``: certified eps of T identical shuffled rounds composed.

Imported only when ``rounds`` is given (it needs the heavy side: ``tablegen.compose`` and
dp-accounting, the ``compose`` extra).  From the table when it covers the query's slice: the
table's certified curve at the corner (eps0 rounded up, n rounded down; rules.py) gives points
(eps_d, delta_d) with delta(eps_d) <= delta_d for the query's (eps0, n), in both orders of the
neighbouring pair (the certified analysis is a supremum over neighbouring pairs), and
delta(eps0) = 0 for these pure eps0-LDP rows; ``tablegen.compose.eps_from_points`` turns them into a
certified privacy-loss distribution (convex envelope in e^eps, connect-the-dots) and composes it.
The table's curve stops at its largest delta (1e-3 for the default table), so below that eps the
profile is only bounded by the chord to (e^eps = 0, delta = 1): certified, but looser than live
(docs/composition.md measures by how much).  Unless eps0 is within twice the curve's largest eps,
the profile is cut there: the table's smallest delta becomes infinity mass.  Live otherwise, or
when the table's composed eps is infinite (that infinity mass, times T, exceeds delta), and
always for subsampled rounds (``sample_rate`` below 1: the tables hold rounds of every user).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from lookup.answer import live as live_engine
from lookup.answer import rules
from lookup.store.table import Table, TableError

CELLS = 400  # lattice cells from 0 to the table curve's largest eps (each point's eps is rounded up to one)


def eps(mechanism: str, table: Table, params: dict[str, Any], point: dict[str, float], live: bool,
        precise: bool = False) -> dict[str, Any]:
    """(value, source, corner) of the composed eps of ``point`` (eps0, n, delta, rounds and
    optionally sample_rate); ``precise`` (and ``live``): the engine's composition first, the table's
    only where the engine cannot answer."""
    from tablegen import validate
    from tablegen.compose import checked_rounds

    rate = validate.sample_rate("sample_rate", point.get("sample_rate", 1.0))
    point = {**point, "rounds": checked_rounds(point["rounds"])}
    point.pop("sample_rate", None)
    if rate < 1:  # a subsampled round: live only, its rate part of the point (and of the cache key)
        point["sample_rate"] = rate
    engine = live and live_engine.available()
    if precise and engine:
        with contextlib.suppress(ValueError):  # e.g. delta too small for the engine's bound: the table's
            return _live(mechanism, params, point)
    row = table.row(mechanism, params)
    if row is not None and "delta0" not in params and rate == 1:
        c = rules.corner(table, np.array([point["eps0"]]), np.array([point["n"]]), row)
        if not c.outside[0]:
            value = _from_table(table, row, int(c.eps0_up[0]), int(c.n_down[0]), point)
            if math.isfinite(value):
                return {"value": value, "source": "table",
                        "corner": {"eps0": float(table.eps0[c.eps0_up[0]]), "n": float(table.n[c.n_down[0]])}}
    if not engine:
        why = "live computation is off (live=False)" if not live else "the engine (tablegen) is not installed"
        raise TableError(f"the table cannot answer {mechanism} {params or ''} {point} with rounds and {why}")
    return _live(mechanism, params, point)


def _live(mechanism: str, params: dict[str, Any], point: dict[str, float]) -> dict[str, Any]:
    return {"value": live_engine.composed_eps(mechanism, point, params), "source": "live",
            "corner": {"eps0": math.nan, "n": math.nan}}


def _from_table(table: Table, row: int, e: int, j: int, point: dict[str, float]) -> float:
    from tablegen.compose import eps_from_points

    curve = np.minimum(table.upper[row, e, j, :], point["eps0"])  # eps at each grid delta, capped by eps0
    top = float(curve.max())
    discretization = top / CELLS
    eps_points, deltas = curve, table.delta  # cut at the last point: its delta becomes infinity mass
    if point["eps0"] <= 2 * top:  # short enough to keep delta(eps0) = 0 ((eps0, 0)-DP after shuffling)
        eps_points, deltas = np.append(curve, point["eps0"]), np.append(table.delta, 0.0)
    return eps_from_points(eps_points, deltas, rounds=point["rounds"], delta=point["delta"],
                           discretization=discretization).eps
