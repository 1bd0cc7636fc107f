"""How both command lines print a result: one JSON object, or one line per key in words.

Numbers a user may rely on (eps, delta, p, bounds) are printed in full (``repr``), never
rounded, so the text never shows less than the certified value; the estimates and labels
around them (slack, corner, axis ranges, yes/no) are put in words and units.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import click

from lookup.answer.api import number_text

AXES = ("eps0", "n", "delta", "eps")  # ``lookup info``: [smallest, largest, count]


def emit(result: dict[str, Any], as_json: bool) -> None:
    """Print ``result`` as one JSON object or as ``key: value in words`` lines."""
    if as_json:
        click.echo(json.dumps(result))
        return
    for key, value in result.items():
        click.echo(f"{key}: {words(key, value, result)}")


def words(key: str, value: Any, result: dict[str, Any]) -> str:
    """``value`` of ``key`` in words (``result``: the whole answer, for context)."""
    special: dict[str, Callable[[Any, dict[str, Any]], str]] = {
        "slack": _slack, "corner": _corner, "source": _source, "edge": _edge}
    if key in special:
        return special[key](value, result)
    if key in AXES and isinstance(value, list) and len(value) == 3:
        return f"{number_text(value[0])} to {number_text(value[1])} ({value[2]} grid values)"
    return _plain(value)


def _plain(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {_plain(v)}" for k, v in value.items())
    return number_text(value)




def _slack(value: Any, result: dict[str, Any]) -> str:
    source = result.get("source")
    if source == "live":
        return "none (computed live: this is the certified value)"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown (answered from the edge of the grid)" if result.get("edge") else "not estimated for this query"
    budget = "eps0" in result and "eps" not in result  # eps0-max: the answer errs low
    if source == "certified estimate" and budget:
        return (f"about {100 * value:.3g}% below the live certified eps0-max (the engine refused an eps0 "
                f"{100 * value:.3g}% larger)")
    if source == "certified estimate":
        return (f"at most {100 * value:.3g}% above the live certified value (the engine refused an eps "
                f"{100 * value:.3g}% smaller)")
    if value <= 0:
        return "none estimated (grid values, or no larger than the engine's live value)"
    if budget:
        return (f"the live certified eps0-max may be up to {1 + value:.3g}x this answer (+{100 * value:.3g}%, "
                "estimated from the table)")
    return (f"the table answer may be up to {1 + value:.3g}x the live certified value (+{100 * value:.3g}%, "
            "estimated from the table)")


def _corner(value: Any, result: dict[str, Any]) -> str:
    if not value:
        return "not reported for this query"
    if all(v is None for v in value.values()):
        return "none (computed live)"
    parts = [f"{name} {_label(v)}" for name, v in value.items() if name not in ("delta", "delta_upper")]
    low, high = value.get("delta"), value.get("delta_upper", value.get("delta"))
    if low is not None and low != high:
        parts.append(f"delta on the chord between {_label(low)} and {_label(high)}")
    elif low is not None:
        parts.append(f"delta {_label(low)}")
    return "grid point " + ", ".join(parts)


def _label(value: Any) -> str:
    """A grid value as a label, the way a person writes it (1e-05, 3.16228e-05, 1000000, 0.693147):
    it names a grid point (exact in the JSON), it is no certified number."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return f"{value:.6g}" if isinstance(value, float) else _plain(value)


def _source(value: Any, result: dict[str, Any]) -> str:
    return {"table": "table (precomputed)", "live": "live (computed by the engine's certified search)",
            "certified estimate": "certified estimate (interpolated from the table, then certified by the engine)",
            }.get(value, _plain(value))


def _edge(value: Any, result: dict[str, Any]) -> str:
    return "yes (beyond the grid in a safe direction: answered from its edge)" if value else "no"
