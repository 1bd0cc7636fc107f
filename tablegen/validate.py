"""Argument checks shared by the engine, the mechanisms and the CLI.

Every check raises ``ValueError`` naming the parameter, the allowed range and the value.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable


def positive_finite(name: str, value: float) -> float:
    """Return ``value`` as float if it is finite and > 0."""
    x = _as_float(name, value)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be finite and > 0, got {name}={value!r}")
    return x


def nonnegative_finite(name: str, value: float) -> float:
    """Return ``value`` as float if it is finite and >= 0."""
    x = _as_float(name, value)
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {name}={value!r}")
    return x


def open_unit(name: str, value: float) -> float:
    """Return ``value`` as float if it lies in the open interval (0, 1)."""
    x = _as_float(name, value)
    if not (0 < x < 1):
        raise ValueError(f"{name} must lie in (0, 1), got {name}={value!r}")
    return x


def unit_interval(name: str, value: float) -> float:
    """Return ``value`` as float if it lies in [0, 1)."""
    x = _as_float(name, value)
    if not (0 <= x < 1):
        raise ValueError(f"{name} must lie in [0, 1), got {name}={value!r}")
    return x


def integer_at_least(name: str, value: float, minimum: int, maximum: int | None = None) -> int:
    """Return ``value`` as int if it is an integer (possibly given as 1e6) >= ``minimum`` (and
    <= ``maximum`` when given)."""
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    shown = int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**63 else value
    if isinstance(value, bool):
        raise ValueError(f"{name} must be {allowed}, got {name}={value!r}")
    if isinstance(value, numbers.Integral):
        out = int(value)
    else:
        x = _as_float(name, value)
        if not (math.isfinite(x) and x == math.floor(x)):
            raise ValueError(f"{name} must be {allowed}, got {name}={shown!r}")
        out = int(x)
    if out < minimum or (maximum is not None and out > maximum):
        raise ValueError(f"{name} must be {allowed}, got {name}={shown!r}")
    return out


def finite_list_above(name: str, values: Iterable[float], lower: float, maximum: int) -> tuple[float, ...]:
    """Return ``values`` as a tuple of floats if there are 1 to ``maximum`` of them, each finite
    and > ``lower`` (e.g. Rényi orders, > 1)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a list of numbers, got {name}={values!r}")
    out = tuple(_as_float(name, v) for v in values)
    if not 1 <= len(out) <= maximum:
        raise ValueError(f"{name} must hold 1 to {maximum} numbers, got {len(out)}")
    for x in out:
        if not (math.isfinite(x) and x > lower):
            raise ValueError(f"{name} must all be finite and > {lower:g}, got {x!r} in {name}")
    return out


def number(name: str, value: float) -> float:
    """Return ``value`` as float (any float: the caller checks its range)."""
    return _as_float(name, value)


def _as_float(name: str, value: float) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {name}={value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {name}={value!r}") from None


def unknown_name(kind: str, name: object, known: Iterable[str]) -> ValueError:
    """The error for an unknown ``kind`` name: the closest known name suggested, all of them listed."""
    known = sorted(known)
    close = difflib.get_close_matches(str(name).lower(), known, n=1, cutoff=0.6)  # names are lower case
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ValueError(f"unknown {kind}={name!r}; {hint}known: {', '.join(known)}")


def rate(name: str, value: float) -> float:
    """Return ``value`` as float if it lies in the half-open interval (0, 1] (a probability that
    may be 1, e.g. a sampling rate)."""
    x = _as_float(name, value)
    if not (0 < x <= 1):
        raise ValueError(f"{name} must lie in (0, 1], got {name}={value!r}")
    return x


SAMPLE_RATE_MIN = 1e-12  # below it the engine's subsampled composition overflowed (q = 1e-300: an
# OverflowError, an HTTP 500); eps does not decrease with q, so a smaller rate is answered
# safely at this one


def sample_rate(name: str, value: float) -> float:
    """``rate`` of a subsampled round, at least ``SAMPLE_RATE_MIN``; ValueError naming ``name``
    and the allowed range."""
    x = rate(name, value)
    if x < SAMPLE_RATE_MIN:
        raise ValueError(f"{name} must lie in [{SAMPLE_RATE_MIN:g}, 1], got {name}={value!r} (a smaller rate is "
                         f"answered safely at {SAMPLE_RATE_MIN:g}: eps does not decrease with the rate)")
    return x
