"""What a reader checks in a table before it answers from it (docs/trust.md, docs/soundness.md).

A table carries certified numbers only if it is the table its builder wrote; a manifest proves
that the files are those it lists, not that they are right (a manifest rewritten to match a
damaged file passes).  So every reader also checks what the numbers themselves must satisfy,
and refuses, naming the place, rather than repairing: a running minimum taken over a bad cell
would spread it over a whole region.

At open (``check_structure``): the axes finite, positive and strictly increasing (delta in
(0, 1), n integers >= 1), the shapes of the arrays and labels in agreement, and the rows and
axes equal to the spec recorded in the table's ``spec`` attribute (where it has one).

Per row, before its first answer (``check_row``): every eps finite and in [0, eps0 (1 +
``CAP_RTOL``)], every lower bound NaN or in [0, eps], and the stored surface already monotone as
the exact eps is (non-decreasing in eps0 for rows that are one randomizer in eps0, non-increasing
in n and in delta) up to ``MONOTONE_RTOL``.

``MONOTONE_RTOL`` is measured: on the shipped table (data/default.zarr, 2026-11-25) the stored
eps never decreases along eps0 nor increases along delta; along n it increases at 41 of 1.5
million steps, by 0.2% on median and at most 2.46% (hr and blh at eps0 7.12, k-RR k = 3, 4 at
eps0 >= 7.38: eps within 10-17% of eps0, where the slice engine's search ladder near eps0 is
coarse).  Each stored value is certified on its own, so these are sound (the running minimum
takes the smaller one); a larger step is refused as damage.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from lookup.format import CAP_RTOL, MONOTONE_ATOL, MONOTONE_RTOL, canonical_params

# the tolerances (defined once in lookup.device.files, whose standard-library reader checks the same):
# MONOTONE_RTOL = 0.03, the largest stored step against the exact eps's monotonicity (2.46% measured,
# above); MONOTONE_ATOL = 1e-7, eps this small says nothing by its relative step; CAP_RTOL = 2^-11,
# eps = eps0 stored rounded up to float32 (12 mantissa bits, docs/tables.md) and then some
DIRECTIONS = (("eps0", 0, +1), ("n", 1, -1), ("delta", 2, -1))  # axis name, row axis, sign of the exact slope


class DamagedTable(ValueError):
    """A table whose contents break an invariant of certified values: the message names the place."""


def check_structure(families: list[str], params: list[dict[str, Any]], axes: dict[str, np.ndarray],
                    shape: tuple[int, ...], attrs: dict[str, Any], monotone: np.ndarray) -> None:
    """Axes, shapes and labels, and the rows and axes against the recorded spec; DamagedTable."""
    for name, axis in axes.items():
        _check_axis(name, np.asarray(axis, dtype=float))
    want = (len(families), *(np.size(axes[a]) for a in ("eps0", "n", "delta")))
    if tuple(shape) != want or len(params) != len(families) or np.size(monotone) != len(families):
        raise DamagedTable(f"shapes disagree: eps {tuple(shape)}, rows {len(families)} (params {len(params)}, "
                           f"eps0_monotone {np.size(monotone)}), axes eps0 x n x delta {want[1:]}")
    _json_attribute(attrs, "certification")
    recorded = _json_attribute(attrs, "spec")
    if recorded is None:
        return
    stored = {name: [float(v) for v in axis] for name, axis in axes.items()}
    stored["mechanisms"] = [canonical_params({"family": f, **p}) for f, p in zip(families, params, strict=True)]
    for name, values in stored.items():
        if name not in recorded:
            continue
        spec = ([canonical_params(m) for m in recorded[name]] if name == "mechanisms"
                else [float(v) for v in recorded[name]])
        if values != spec:
            raise DamagedTable(f"the {name} {'rows' if name == 'mechanisms' else 'axis'} differ from the table's "
                               f"recorded spec ({_first_difference(values, spec)})")


def check_row(label: str, eps0: np.ndarray, eps: np.ndarray, lower: np.ndarray, along_eps0: bool,
              axes: dict[str, np.ndarray]) -> None:
    """One row's stored values (eps0 x n x delta) against the invariants; DamagedTable naming the cell."""
    def cell(index: tuple[int, ...]) -> str:
        e, j, d = (int(i) for i in index)
        return f"{label} at eps0 {axes['eps0'][e]:g}, n {axes['n'][j]:g}, delta {axes['delta'][d]:g}"

    cap = eps0[:, None, None] * (1 + CAP_RTOL)
    bad = ~(np.isfinite(eps) & (eps >= 0) & (eps <= cap))
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        raise DamagedTable(f"eps={float(eps[where])!r} outside [0, eps0] {cell(where)}")
    bad = ~(np.isnan(lower) | ((lower >= 0) & (lower <= eps)))
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        raise DamagedTable(f"lower bound {float(lower[where])!r} outside [0, eps={float(eps[where])!r}] "
                           f"{cell(where)}")
    for name, axis, sign in DIRECTIONS:
        if name == "eps0" and not along_eps0:
            continue
        step = sign * np.diff(eps, axis=axis)  # >= 0 where the surface moves as the exact eps does
        before = np.take(eps, range(eps.shape[axis] - 1), axis=axis)
        bad = step < -(MONOTONE_RTOL * before + MONOTONE_ATOL)
        if bad.any():
            where = tuple(np.argwhere(bad)[0])
            after = list(where)
            after[axis] += 1
            raise DamagedTable(f"eps not monotone in {name}: {float(eps[where])!r} {cell(where)}, then "
                               f"{float(eps[tuple(after)])!r} at the next {name} (more than {MONOTONE_RTOL:.0%} "
                               "against the direction the exact eps moves)")


def _check_axis(name: str, axis: np.ndarray) -> None:
    lowest = {"eps0": 0.0, "n": 1.0, "delta": 0.0}[name]
    if axis.ndim != 1 or axis.size == 0 or not np.all(np.isfinite(axis)):
        raise DamagedTable(f"the {name} axis is empty, not one-dimensional or not finite")
    if np.any(np.diff(axis) <= 0):
        i = int(np.argmax(np.diff(axis) <= 0))
        raise DamagedTable(f"the {name} axis is not strictly increasing ({axis[i]!r} then {axis[i + 1]!r})")
    low_ok = axis[0] >= lowest if name == "n" else axis[0] > lowest
    if not low_ok or (name == "delta" and axis[-1] >= 1) or (name == "n" and np.any(axis != np.round(axis))):
        raise DamagedTable(f"the {name} axis leaves its domain ({axis[0]!r}..{axis[-1]!r})")


def _json_attribute(attrs: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The JSON object in attribute ``name`` (None if absent); DamagedTable if it is malformed."""
    text = attrs.get(name)
    if text is None:
        return None
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except (TypeError, ValueError):
        raise DamagedTable(f"the {name} attribute is not valid JSON") from None
    if not isinstance(value, dict):
        raise DamagedTable(f"the {name} attribute is not a JSON object")
    return value


def _first_difference(got: list[Any], want: list[Any]) -> str:
    if len(got) != len(want):
        return f"{len(got)} values, the spec has {len(want)}"
    i = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
    return f"entry {i}: {got[i]!r}, the spec has {want[i]!r}"
