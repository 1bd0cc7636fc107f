"""Grid specs (``workflows/*.toml``): which curves a table holds, validated before any work.

A spec names the mechanisms (a family with lists of parameter values, expanded into one table
row per combination), the eps0, n and delta axes (explicit lists, or geometric and linear
segments) and the engine settings; ``Spec.digest`` hashes its canonical text.  Every error names
the file, the key and the reason (``SpecError``).  The keys, their defaults and the axes'
decimal arithmetic: docs/tables.md ("Specs").
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import tomllib
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Context, Decimal, localcontext
from pathlib import Path
from typing import Any

import numpy as np

from tablegen import limits
from tablegen.engine.lower import RESOLUTION as LOWER_RESOLUTION
from tablegen.mechanisms import get_mechanism

AXES = ("eps0", "n", "delta")
# the engine that builds every table (the slice engine, upper and lower bounds: engine/dense.py),
# added to every canonical text and so to the digest: the tables built by slices record these
# settings, so a spec (which may not name them: one spelling per spec) has its table's digest
# (docs/tables.md, "Specs")
BUILT_BY = {"method": "slice", "lower_method": "slice"}
# default cells per sd of G of a table's upper bounds: the shipped tables' (certified at any value;
# a k-RR slice at 10 is within +0.04% of one at 20 on median, docs/engine.md "Slices", and about
# 15% faster); the lower bounds' default is the spectral lower path's own (lower.RESOLUTION)
RESOLUTION = 10.0
MAX_PER_DECADE = 1000
MAX_POINTS = 100_000
_EXACT = Context(prec=40)  # decimal digits for axis values: far past float's 17, so one rounding decides
_COUNT_SLACK = Decimal("1e-9")  # a stop meant to be on the axis (1e9 from 1e2 at 50 per decade) stays on it


class SpecError(ValueError):
    """A spec that cannot be built; the message names the file, key and reason."""


@dataclass(frozen=True)
class Row:
    """One mechanism row of a table: family name, its parameters, and a label."""

    family: str
    params: dict[str, Any]

    @property
    def label(self) -> str:
        return " ".join([self.family, *(f"{k}={v}" for k, v in sorted(self.params.items()))])


@dataclass(frozen=True)
class Spec:
    """A validated grid spec."""

    title: str
    rows: list[Row]
    eps0: np.ndarray
    n: np.ndarray
    delta: np.ndarray
    settings: dict[str, Any] = field(default_factory=dict)
    source: str = "<spec>"
    axes_written: dict[str, Any] = field(default_factory=dict)  # the [axes] table as written (parsed TOML)

    def canonical(self) -> dict[str, Any]:
        """JSON-ready content with the expanded axes (recorded in a table's ``spec`` attribute);
        the settings name the engine that builds the table (``BUILT_BY``)."""
        return {
            "title": self.title,
            "mechanisms": [{"family": r.family, **r.params} for r in self.rows],
            "eps0": self.eps0.tolist(),
            "n": self.n.tolist(),
            "delta": self.delta.tolist(),
            "settings": {**self.settings, **BUILT_BY},
        }

    def digest(self) -> str:
        """SHA-256 of the spec's canonical text: title, mechanism rows, the axes as written (numbers
        as parsed from TOML, which every machine reads alike) and the settings; never of generated
        floats, so a table built on one machine is up to date on another."""
        written = {name: self.axes_written[name] for name in AXES if name in self.axes_written}
        content = {**self.canonical(), **written}  # a Spec built without them: its expanded (exact) axes
        text = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.rows), self.eps0.size, self.n.size, self.delta.size)

    @property
    def curve_count(self) -> int:
        """(row, eps0, n) curves: cells of every delta."""
        return math.prod(self.shape[:3])

    @property
    def slice_count(self) -> int:
        """(row, eps0) slices: one build task each."""
        return math.prod(self.shape[:2])

    def wants_lower(self, i_eps0: int, i_n: int) -> bool:
        return wants_lower(self.settings, i_eps0, i_n, float(self.n[i_n]))


def wants_lower(settings: dict[str, Any], i_eps0: int, i_n: int, n: float) -> bool:
    """Whether the curve at (eps0 index, n index, n) gets lower bounds under ``settings``
    (none where ``lower_every`` is not set)."""
    if settings.get("lower_every") is None:
        return False
    every_eps0, every_n = settings["lower_every"]
    n_max = settings.get("lower_n_max")
    return i_eps0 % every_eps0 == 0 and i_n % every_n == 0 and (n_max is None or n <= n_max)


def load_spec(path: str | Path) -> Spec:
    """Parse and validate a TOML spec; SpecError naming the file, key and reason."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path}: not valid TOML: {err}") from None
    return spec_from_dict(raw, str(path))


def spec_from_dict(raw: dict[str, Any], source: str = "<spec>") -> Spec:
    """Validate a parsed spec (its keys: docs/tables.md, "Specs")."""
    def fail(key: str, reason: str) -> SpecError:
        return SpecError(f"{source}: {key}: {reason}")

    unknown = set(raw) - {"title", "axes", "settings", "mechanism"}
    if unknown:
        raise fail(sorted(unknown)[0], "unknown key (allowed: title, axes, settings, mechanism)")
    axes = raw.get("axes")
    if not isinstance(axes, dict):
        raise fail("axes", "missing [axes] table with eps0, n and delta")
    values = {name: _axis(axes.get(name), f"axes.{name}", fail) for name in AXES}
    _check_domain(values, fail)
    settings = _settings(raw.get("settings", {}), fail)
    rows = _rows(raw.get("mechanism"), values["eps0"], fail)
    return Spec(str(raw.get("title", "shuffle-eps table")), rows, values["eps0"], values["n"],
                values["delta"], settings, source, {name: axes[name] for name in AXES})


def parse_axis(value: Any, key: str, source: str) -> np.ndarray:
    """One axis (list or segments, docs/tables.md "Specs"), SpecError naming ``source`` and ``key``."""
    return _axis(value, key, lambda k, reason: SpecError(f"{source}: {k}: {reason}"))


def _axis(value: Any, key: str, fail: Any) -> np.ndarray:
    if value is None:
        raise fail(key, "missing axis")
    if isinstance(value, dict):
        exact = _segment(value, key, fail)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        exact = [x for i, v in enumerate(value) for x in _segment(v, f"{key}[{i}]", fail)]
    elif isinstance(value, list):
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise fail(key, "axis values must be numbers")
        if key == "axes.n" and not all(float(v).is_integer() for v in value):
            raise fail(key, f"explicit n values must be integers, got {value}")
        exact = [Decimal(repr(v)) for v in value]
    else:
        raise fail(key, "an axis is a list of numbers, {start, stop, per_decade}, {start, stop, step} "
                   "or a list of such segments")
    if not exact:
        raise fail(key, "empty axis")
    if not all(x.is_finite() for x in exact):
        raise fail(key, "axis values must be finite")
    if any(b <= a for a, b in itertools.pairwise(exact)):
        raise fail(key, "axis must be strictly ascending")
    if key == "axes.n":  # a count: each exact value rounded to the nearest integer (ties to even), once;
        exact = [x.to_integral_value(ROUND_HALF_EVEN) for x in exact]  # _check_domain merges repeats
    return np.array([float(x) for x in exact])  # Decimal -> float is correctly rounded


def _segment(value: dict[str, Any], key: str, fail: Any) -> list[Decimal]:
    """Geometric {start, stop, per_decade} or linear {start, stop, step}; stop is included.

    Exact arithmetic: each value is computed in decimal (``_EXACT``, 40 digits) from the numbers
    as written (``Decimal(repr(x))``: 1e-12 is 10^-12, not its binary neighbour), so
    start * 10^(i / per_decade) and start + i * step are the same numbers on every machine; they
    are rounded to float once, by ``_axis`` (correctly rounded).  Floating-point powers rounded
    differently across numpy builds (3.162277660168379e-10 against ...795e-10), which changed a
    table's axes, and so its spec hash, from one machine to the next."""
    kind = "per_decade" if "per_decade" in value else "step"
    if set(value) != {"start", "stop", kind}:
        raise fail(key, "a segment has exactly the keys start, stop and per_decade (geometric) or step (linear)")
    start, stop, density = (value[k] for k in ("start", "stop", kind))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, stop, density)):
        raise fail(key, f"start, stop and {kind} must be numbers")
    if not (0 < start < stop and math.isfinite(stop)):
        raise fail(key, f"need 0 < start < stop, got start={start}, stop={stop}")
    with localcontext(_EXACT):
        first, last, step = (Decimal(repr(v)) for v in (start, stop, density))
        if kind == "per_decade":
            if not 0 < density <= MAX_PER_DECADE:
                raise fail(key, f"per_decade must be in (0, {MAX_PER_DECADE}], got {density}")
            count = int(step * (last / first).log10() + _COUNT_SLACK)
            axis = [first * Decimal(10) ** (Decimal(i) / step) for i in range(count + 1)]
        else:
            if not (0 < density and (stop - start) / density <= MAX_POINTS):
                raise fail(key, f"step must be > 0 with at most {MAX_POINTS} points, got step={density}")
            count = int((last - first) / step + _COUNT_SLACK)
            axis = [first + i * step for i in range(count + 1)]
        return axis if axis[-1] >= last * (1 - _COUNT_SLACK) else [*axis, last]


def _check_domain(values: dict[str, np.ndarray], fail: Any) -> None:
    try:
        limits.minimum_eps0(float(values["eps0"][0]))
    except ValueError as err:
        raise fail("axes.eps0", str(err)) from None
    n = values["n"]
    if n[0] < 1:
        raise fail("axes.n", f"n must be >= 1, got {n[0]}")
    rounded = np.unique(np.round(n))  # geometric axes round to integers (duplicates merge)
    values["n"] = rounded
    delta = values["delta"]
    if delta[0] <= 0 or delta[-1] >= 1:
        raise fail("axes.delta", f"delta must be in (0, 1), got range [{delta[0]}, {delta[-1]}]")


def _settings(raw: Any, fail: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise fail("settings", "must be a table")
    for name in BUILT_BY:
        if name in raw:
            raise fail(f"settings.{name}", "no longer needed: every table is built by slices (one task per "
                       "(mechanism, eps0), every n at once; upper and lower bounds); remove the setting")
    allowed = {"resolution": RESOLUTION, "lower_resolution": LOWER_RESOLUTION, "lower_every": None,
               "lower_n_max": None}
    unknown = set(raw) - set(allowed)
    if unknown:
        raise fail(f"settings.{sorted(unknown)[0]}", f"unknown setting (allowed: {', '.join(allowed)})")
    settings = {**allowed, **raw}
    for name in ("resolution", "lower_resolution"):
        value = settings[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= 1000:
            raise fail(f"settings.{name}", f"must be a number in [1, 1000], got {value!r}")
        settings[name] = float(value)
    n_max = settings["lower_n_max"]
    if n_max is not None:
        if isinstance(n_max, bool) or not isinstance(n_max, (int, float)) or not n_max >= 1:
            raise fail("settings.lower_n_max", f"must be a number >= 1, got {n_max!r}")
        settings["lower_n_max"] = float(n_max)
    every = settings["lower_every"]
    if every is not None and not (isinstance(every, list) and len(every) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in every)):
        raise fail("settings.lower_every", f"must be two integers >= 1 (eps0, n strides), got {every!r}")
    return settings


def _rows(raw: Any, eps0: np.ndarray, fail: Any) -> list[Row]:
    if not isinstance(raw, list) or not raw:
        raise fail("mechanism", "at least one [[mechanism]] entry with a family")
    rows: list[Row] = []
    for i, entry in enumerate(raw):
        key = f"mechanism[{i}]"
        if not isinstance(entry, dict) or "family" not in entry:
            raise fail(key, "needs a family, e.g. family = \"krr\"")
        for row in _expand(entry, key, fail):
            _check_row(row, eps0, f"{key} ({row.label})", fail)
            if any(r.label == row.label for r in rows):
                raise fail(key, f"duplicate mechanism row {row.label!r}")
            rows.append(row)
    return rows


def _expand(entry: dict[str, Any], key: str, fail: Any) -> list[Row]:
    try:
        family = get_mechanism(entry["family"]).name  # in any case, stored as the registry spells it
    except ValueError as err:
        raise fail(f"{key}.family", str(err)) from None
    names = sorted(k for k in entry if k != "family")
    choices = []
    for name in names:
        value = entry[name]
        # a list of scalars is a list of choices; a nested list (a matrix) is one value
        scalars = isinstance(value, list) and all(not isinstance(v, (list, dict)) for v in value)
        options = value if scalars else [value]
        if not options:
            raise fail(f"{key}.{name}", "empty parameter list")
        choices.append(options)
    return [Row(family, dict(zip(names, combo, strict=True))) for combo in itertools.product(*choices)]


def _check_row(row: Row, eps0: np.ndarray, key: str, fail: Any) -> None:
    """Resolve the parameters and build the decompositions at both ends of the eps0 axis."""
    mechanism = get_mechanism(row.family)
    delta0 = row.params.get("delta0")
    if isinstance(delta0, (int, float)) and delta0 > 0:
        raise fail(key, "delta0 > 0 rows are not tabulated (the n * delta0 term of Theorem 3.8 depends on the "
                   "query); use the live engine for them")
    try:
        params = mechanism.resolve(row.params)
        for e0 in (float(eps0[0]), float(eps0[-1])):
            mechanism.upper(e0, **params)
            if mechanism.lower:
                mechanism.lower(e0, **params)
    except (ValueError, TypeError, OverflowError) as err:
        raise fail(key, str(err)) from None
