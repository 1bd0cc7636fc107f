"""Estimate, then certify: table answers whose slack estimate exceeds ``max_slack``, refined.

For eps: the smooth estimate of ``estimate.py`` is raised by 1% and checked by one engine
evaluation (``tablegen.engine.certifies``: the certified delta at that eps is <= delta).  If the
check passes, that eps is certified by the engine itself, and it is published with source
``"certified estimate"``; if not, the estimate raised by 3% is checked; if that fails too, the
engine's full certified search answers (``"live"``).  The raw estimate is never published.  The
answer is never above the table's own certified value (both are certified; the smaller is
kept), and when the engine cannot answer the table value stands.  eps0_max is the mirror image
(the estimate lowered by 1%, then 3%, then the engine's search; the larger certified eps0 is
kept); delta needs no estimate: the engine's certified delta is itself one evaluation.

Each function takes one query and the table's certified answer and returns (value, slack
estimate, source).  Engine results are cached by ``live.py``.
"""

from __future__ import annotations

from typing import Any

from lookup import live

INFLATION = (0.01, 0.03)  # the estimate is raised (eps) or lowered (eps0_max) by these, in turn
CERTIFIED = "certified estimate"
Refined = tuple[float, float, str]


def eps(mechanism: str, point: dict[str, float], params: dict[str, Any], table: float, slack: float,
        estimate: float) -> Refined:
    """Certified eps at ``point`` (eps0, n, delta) no larger than the table's ``table``;
    ``estimate``: the smooth estimate (NaN off the grid: straight to the engine's search)."""
    try:
        for raise_by in INFLATION if estimate > 0 else ():
            candidate = min(estimate * (1 + raise_by), point["eps0"])
            if candidate >= table:  # the table is already within this of the estimate
                return table, max(table / estimate - 1, 0.0), "table"
            if live.certifies(mechanism, {**point, "eps": candidate}, params):
                return candidate, raise_by, CERTIFIED
        found = live.eps_upper(mechanism, point, params)
    except ValueError:  # the engine cannot answer: the table's certified value stands
        return table, slack, "table"
    return (found, 0.0, "live") if found < table else (table, 0.0, "table")


def delta(mechanism: str, point: dict[str, float], params: dict[str, Any], table: float, slack: float) -> Refined:
    """Certified delta at ``point`` (eps0, n, eps) no larger than the table's ``table``: one
    engine evaluation."""
    try:
        found = live.delta_upper(mechanism, point, params)
    except ValueError:
        return table, slack, "table"
    return (found, 0.0, "live") if found < table else (table, 0.0, "table")


def eps0_max(mechanism: str, point: dict[str, float], params: dict[str, Any], table: float, slack: float,
             estimate: float) -> Refined:
    """Certified eps0_max at ``point`` (eps, n, delta) no smaller than the table's ``table``:
    the largest eps0 found whose certified eps at (n, delta) is <= eps (any eps0 the engine
    certifies is a valid answer, whether or not eps is monotone in eps0)."""
    try:
        for lower_by in INFLATION if estimate > 0 else ():
            candidate = estimate * (1 - lower_by)
            if candidate <= table:
                return table, max(estimate / table - 1, 0.0), "table"
            if live.certifies(mechanism, {"eps0": candidate, "n": point["n"], "eps": point["eps"],
                                          "delta": point["delta"]}, params):
                return candidate, lower_by, CERTIFIED
        found = live.eps0_max(mechanism, point, params)
    except ValueError:
        return table, slack, "table"
    return (found, 0.0, "live") if found > table else (table, 0.0, "table")
