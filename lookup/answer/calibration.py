"""``lookup.calibrate``: the noise parameter p of the shuffled-histogram protocols from a table.

The table (``tablegen build-calibration``) holds the calibrated p at grid targets.  A p
certified for a target (eps, n, delta) is also certified for any looser one: larger eps, larger
delta (weaker guarantees), and more users (n users' noise Bin(n, p) is Bin(n', p) plus
independent noise, a post-processing, for n' <= n).  So on loading p is made monotone
(maximum over stricter grid targets), and a query takes the grid value at (eps rounded DOWN,
n rounded DOWN, delta rounded DOWN): p can only be rounded toward more noise.  Targets below
the grid (or cells without a certified p) are calibrated live by the engine.

Provenance (issue 37, docs/trust.md): a calibration table is answered from only if
``lookup.trust.origin`` can say where it came from, as a mechanism table: shipped (its digest pinned
in ``lookup.trust.origin.PINNED``), built on this machine (``tablegen build-calibration`` records
what it wrote), or signed by a trusted key (``tablegen sign TABLE --key KEY``); ``tablegen
verify --full`` does not recompute calibration tables, so the fourth way is to rebuild it here.
Anything else is refused, or opened on request (``open_calibration(path, verified=False)``,
``lookup calibrate --unverified``) with its table answers labelled ``"certified": false``.
No spot check runs (no engine check of a stored p exists in ``lookup.trust.origin``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lookup.answer.api import Answer
from lookup.store.table import TableError, open_store, shipped_table
from lookup.trust import origin as trust

ENV_TABLE = "SHUFFLE_EPS_PROTOCOL_TABLE"


@dataclass
class CalibrationTable:
    path: str
    protocols: list[str]
    eps: np.ndarray
    n: np.ndarray
    delta: np.ndarray
    p: np.ndarray  # monotone: max over stricter grid targets, NaN where none
    digest: str = ""  # lookup.trust.origin.listing_digest of the manifest listing read with the files
    provenance: str = ""  # "shipped", "built", "signed", "verified" or "unverified" (lookup.trust.origin)
    certified: bool = False  # True once lookup.trust.origin vouches for it (open_calibration)


def open_calibration(path: str | Path | None = None, verified: bool = True) -> CalibrationTable:
    """The calibration table at ``path`` (default: ``$SHUFFLE_EPS_PROTOCOL_TABLE`` or the shipped
    one), answered from only if ``lookup.trust.origin`` vouches for it (shipped, built here, signed by a
    trusted key); else TableError naming the ways to make it trusted, or with ``verified=False``
    opened with ``certified`` False (its table answers labelled so)."""
    path = Path(path or os.environ.get(ENV_TABLE) or shipped_table("protocols.zarr"))
    table = open_store(path, _load, "build one with `tablegen build-calibration`")
    table.provenance = trust.established(path, table.digest, verified)
    table.certified = table.provenance != "unverified"
    return table


def _load(path: str, group: Any) -> CalibrationTable:
    p = np.asarray(group["p"][...], dtype=float)
    for axis in (1, 2, 3):  # p at a stricter target (smaller eps, n, delta) holds here too
        p = np.fmax.accumulate(p, axis=axis)
    return CalibrationTable(path, [str(x) for x in group["protocol"][...]], np.asarray(group["eps"][...], float),
                            np.asarray(group["n"][...], float), np.asarray(group["delta"][...], float), p,
                            trust.listing_digest(group.listed))  # the listing verified with the files


def calibrate(protocol: str, *, eps: Any, n: Any, delta: Any, table: Any = None, live: bool = True,
              verified: bool = True) -> Answer:
    """Largest certified p (least noise) for (eps, delta)-DP with n users; arrays broadcast.

    Args:
        protocol: a protocol of the calibration table.
        eps: the target eps, > 0 (scalar or array).
        n: the number of users, >= 1 (scalar or array).
        delta: in (0, 1) (scalar or array).
        table: a path, a ``CalibrationTable`` from ``open_calibration`` (one not from there,
            ``certified`` False, is answered from with its answers labelled so), or None for the
            shipped table.
        live: whether the engine may answer what the table cannot.
        verified: False answers from a table nothing vouches for, its table answers labelled
            ``certified`` False.

    Returns:
        An ``Answer`` whose ``value`` is the certified p.

    Raises:
        ValueError: an argument out of its range, or an unknown protocol.
        TableError: the table cannot answer and ``live`` is off.
    """
    t = table if isinstance(table, CalibrationTable) else open_calibration(table, verified)
    e, m, d = (np.asarray(v, dtype=float) for v in (eps, n, delta))
    shape = np.broadcast_shapes(e.shape, m.shape, d.shape)
    e, m, d = (np.broadcast_to(v, shape).ravel() for v in (e, m, d))
    if not (np.all(e > 0) and np.all(np.isfinite(e)) and np.all(m >= 1) and np.all((d > 0) & (d < 1))):
        raise ValueError("eps must be > 0, n >= 1 and delta in (0, 1)")
    if protocol not in t.protocols:
        raise ValueError(f"unknown protocol mechanism={protocol!r}; the table has {', '.join(t.protocols)}")
    idx = [np.searchsorted(axis, v, side="right") - 1 for axis, v in ((t.eps, e), (t.n, m), (t.delta, d))]
    outside = np.any([i < 0 for i in idx], axis=0)
    clipped = [np.clip(i, 0, None) for i in idx]
    value = np.where(outside, np.nan, t.p[t.protocols.index(protocol), clipped[0], clipped[1], clipped[2]])
    todo = np.isnan(value)
    if todo.any():
        if not live:
            raise TableError(f"the calibration table {t.path} cannot answer {protocol} eps={e[todo][0]:g} "
                             f"n={m[todo][0]:g} delta={d[todo][0]:g} and live computation is off; it covers "
                             f"eps {t.eps[0]:g}..{t.eps[-1]:g}, n {t.n[0]:g}..{t.n[-1]:g}, "
                             f"delta {t.delta[0]:g}..{t.delta[-1]:g}")
        from tablegen.protocols.accounting import calibrate as live_calibrate

        for i in np.flatnonzero(todo):
            value[i] = live_calibrate(protocol, eps=float(e[i]), delta=float(d[i]), n=int(m[i]))
    corner = {name: np.where(todo, np.nan, axis[c]) for name, axis, c in
              (("eps", t.eps, clipped[0]), ("n", t.n, clipped[1]), ("delta", t.delta, clipped[2]))}

    def out(a: np.ndarray) -> Any:
        return a.reshape(shape) if shape else a[0].item()

    source = np.where(todo, "live", "table")
    return Answer(out(value), out(np.full(value.size, np.nan)), out(source), {k: out(v) for k, v in corner.items()},
                  out(np.full(value.size, np.nan)), out(np.zeros(value.size, bool)), out(todo | t.certified))


__all__ = ["CalibrationTable", "calibrate", "open_calibration"]
