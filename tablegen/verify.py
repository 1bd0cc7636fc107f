"""``tablegen verify``: checksums, certification invariants, and live recomputation of slices.

A sampled (mechanism, eps0) slice is recomputed as the build computed it (``build.slice_values``:
every n and delta at once, at the table's recorded settings) and rounded as the store rounds, so
with the engine that built the table, on the machine that built it, it equals the stored values
bit for bit; elsewhere a different floating-point path may move a crossing of the engine's 1% eps
ladder by one step, which is the tolerance (plus one quantum of the compact store).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from tablegen import store
from tablegen.build import Task, slice_values
from tablegen.engine import dense
from tablegen.spec import wants_lower

# one step of the slice engine's eps ladder: a recomputed slice may differ by that much where
# floating point differs across machines; on the machine that built the table it is identical
RECOMPUTE_RTOL = (dense.LADDER - 1) + 1e-12


def verify(path: str | Path, sample: int = 0, seed: int = 0) -> list[str]:
    """Problems found in the table at ``path`` (empty list: verified)."""
    import xarray as xr

    path = Path(path)
    if not path.is_dir():
        return [f"{path}: no such table"]
    problems = store.check_manifest(path) + store.check_chunks(path)
    if problems:
        return problems
    ds = xr.open_zarr(path, consolidated=True)
    if "p" in ds.variables and "protocol" in ds.coords:
        return _verify_calibration(ds, sample, seed)
    missing = [k for k in ("certification", "spec_sha256") if k not in ds.attrs]
    missing += [v for v in ("eps", "eps_lower", "family", "params") if v not in ds.variables]
    if missing:
        return [f"{path}: not a tablegen table (no {', '.join(missing)})"]
    problems += reader_checks(path)
    if problems:
        return problems
    eps, low = ds["eps"].values, ds["eps_lower"].values
    eps0 = stored_like(ds, "eps", ds["eps0"].values)[None, :, None, None]  # eps = eps0 stored rounded up
    if not np.all(np.isfinite(eps)):
        problems.append("eps: missing (NaN) values")
    if np.any(eps > eps0):
        problems.append("eps: values above eps0 (never certified beyond the local guarantee)")
    if np.any(low > eps):
        problems.append("eps_lower: values above the certified eps")
    settings = json.loads(ds.attrs["certification"])
    slices = list(np.ndindex(*eps.shape[:2]))
    if sample and settings.get("method") != "slice":
        return problems + [f"{path}: built by the per-curve engine (removed): its cells cannot be recomputed the "
                           "way they were built; rebuild the table (tablegen build)"]
    for r, e in random.Random(seed).sample(slices, min(sample, len(slices))):
        problems += _recompute(ds, r, e, settings)
    return problems


def reader_checks(path: Path) -> list[str]:
    """What every reader checks (``lookup.checks``: structure, the recorded spec, each row's
    invariants), and the engine's certification at the spot cells (``lookup.trust``), pinned
    table or not."""
    from lookup import trust
    from lookup.table import TableError, open_table
    from tablegen.engine import certifies

    try:
        table = open_table(path)
        np.asarray(table.upper)  # every row checked
    except TableError as err:
        return [str(err)]
    problem = trust.spot_certify(table, certifies)
    return [f"{path}: {problem}"] if problem else []


def _verify_calibration(ds, sample: int, seed: int) -> list[str]:  # noqa: ANN001
    """Calibration tables: p in (1/2, 1) or NaN, and ``sample`` random cells recalibrated live."""
    from tablegen.protocols.accounting import calibrate

    p = ds["p"].values
    problems = [] if np.all(np.isnan(p) | ((p > 0.5) & (p < 1))) else ["p: values outside (1/2, 1)"]
    for r, e, j, d in random.Random(seed).sample(list(np.ndindex(*p.shape)), min(sample, p.size)):
        protocol = str(ds["protocol"].values[r])
        eps, n, delta = float(ds["eps"].values[e]), int(ds["n"].values[j]), float(ds["delta"].values[d])
        try:
            live = calibrate(protocol, eps=eps, delta=delta, n=n)
        except ValueError:
            live = np.nan
        if not (np.isnan(live) and np.isnan(p[r, e, j, d])) and live != p[r, e, j, d]:
            problems.append(f"{protocol} eps={eps:g} n={n} delta={delta:g}: stored p={p[r, e, j, d]!r}, live {live!r}")
    return problems


def stored_like(ds, name: str, values: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """``values`` rounded as variable ``name`` of ``ds`` was when stored (its ``quantization_*``
    attributes; unchanged for a float64 store)."""
    attrs = ds[name].attrs
    if "quantization_bits" not in attrs:
        return np.asarray(values, dtype=float)
    up = attrs["quantization_rounding"] == "up"
    return store.round_float32(values, up, int(attrs["quantization_bits"])).astype(float)


def _recompute(ds, r: int, e: int, settings: dict) -> list[str]:  # noqa: ANN001
    """Problems of slice (row ``r``, eps0 ``e``) against its live recomputation (none: equal
    within ``RECOMPUTE_RTOL`` plus one quantum of the store)."""
    ns = [int(n) for n in ds["n"].values]
    task = Task("", (r, e), str(ds["family"].values[r]), json.loads(str(ds["params"].values[r])),
                float(ds["eps0"].values[e]), tuple(ns), ds["delta"].values.tolist(),
                tuple(wants_lower(settings, e, j, float(n)) for j, n in enumerate(ns)), settings["resolution"],
                settings["lower_resolution"])
    live = slice_values(task)
    stored = (ds["eps"].values[r, e], ds["eps_lower"].values[r, e])
    label = f"{ds['mechanism'].values[r]} eps0={task.eps0:g}"
    problems = []
    for name, got, want in zip(store.VARIABLES, stored, live, strict=True):
        want = stored_like(ds, name, want)  # on the building machine: equal bit for bit
        tolerance = RECOMPUTE_RTOL + 2.0 ** -ds[name].attrs.get("quantization_bits", 52)  # plus one quantum
        close = np.isclose(got, want, rtol=tolerance, atol=0.0) | (np.isnan(got) & np.isnan(want))
        if not np.all(close):
            j, d = np.unravel_index(int(np.argmin(close)), close.shape)
            problems.append(f"{label} n={ns[j]} delta={task.deltas[d]:g}: stored {name}={got[j, d]!r}, "
                            f"live {want[j, d]!r}")
    return problems
