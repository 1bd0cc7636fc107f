"""``tablegen verify``: checksums, reading limits, certification invariants, random spot checks by
the engine, and live recomputation of slices (``--sample``, or every slice: ``--full``).

A (mechanism, eps0) slice is recomputed as the build computed it (``build.slice_values``: every n
and delta at once, at the table's recorded settings) and rounded as tablegen's store rounds (its
constants: ``store.MANTISSA_BITS``, ``store.CERTIFIED_ROUNDING``; never the table's own
attributes, and a table declaring any other quantization is refused: ``declared_rounding``), so with the
engine that built the table, on the machine that built it, it equals the stored values bit for
bit; elsewhere a different floating-point path may move a crossing of the engine's 1% eps ladder
by one step, which is the tolerance (plus one quantum of the compact store) in the safe direction:
a stored eps may be above the recomputed certified one by that much; below it only where one
engine evaluation certifies the stored value itself (``certifies``: the ladder's value here is
not the smallest certified eps, and another machine's can sit a step lower); a stored lower
bound may be below the recomputed proved one by any amount (it is only looser), above it only
where the engine proves the stored value itself (``proves_above``, else ``delta_bounds``' lower
bound: a table of an earlier engine version) (``--full`` makes what passes trusted).

The stored values compared are read through ``lookup.store.table.open_table`` (each file checked
against the manifest listing read in the same pass, within ``lookup.store.reader``'s limits), so
``--full``, finding every slice equal, records the digest of exactly what it compared
(``lookup.trust.origin.record_verified``): the fourth way a table earns trust (docs/trust.md).  Every
failure is a message, never a traceback.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tablegen import store
from tablegen.build import Task, slice_values
from tablegen.engine import dense
from tablegen.spec import wants_lower

# one step of the slice engine's eps ladder: a recomputed slice may differ by that much where
# floating point differs across machines; on the machine that built the table it is identical
RECOMPUTE_RTOL = (dense.LADDER - 1) + 1e-12
PROOF_RESOLUTION = 60.0  # the second try of _proved_above: cells per sd of the spectral lower path


def verify(path: str | Path, sample: int = 0, seed: int = 0, full: bool = False) -> list[str]:
    """Problems found in the table at ``path`` (empty list: verified; with ``full``, every slice
    recomputed and equal, and the table recorded as verified here).

    Args:
        path: the published table.
        sample: slices recomputed and compared (0: none).
        seed: the sample's seed.
        full: recompute every slice, and record the table as verified where all are equal.

    Returns:
        One line per problem found.
    """
    path = Path(path)
    if not path.is_dir():
        return [f"{path}: no such table"]
    try:
        return _verify(path, sample, seed, full)
    except ModuleNotFoundError:
        raise  # a missing extra: the command group names it (lookup.cli.extras)
    except Exception as err:  # noqa: BLE001 - whatever a forged or damaged store raises: a message
        return [f"{path}: cannot be verified ({type(err).__name__}: {err})"]


def _verify(path: Path, sample: int, seed: int, full: bool) -> list[str]:
    import xarray as xr

    from lookup.store.reader import check_declared
    from lookup.store.table import TableError, read_verified_listing

    problems = store.check_manifest(path)
    if problems:
        return problems
    try:
        check_declared(read_verified_listing(path)[0])  # before any chunk is decoded: no bomb goes off
    except TableError as err:
        return [str(err)]
    problems = store.check_chunks(path)
    if problems:
        return problems
    ds = xr.open_zarr(path, consolidated=True)
    if "p" in ds.variables and "protocol" in ds.coords:
        if full:  # nothing would be recomputed or recorded, yet the CLI would say so
            return [f"{path}: a calibration table: --full recomputes the slices of an eps table; check this one "
                    "with --sample N"]
        return _verify_calibration(ds, sample, seed)
    missing = [k for k in ("certification", "spec_sha256") if k not in ds.attrs]
    missing += [v for v in ("eps", "eps_lower", "family", "params") if v not in ds.variables]
    if missing:
        return [f"{path}: not a tablegen table (no {', '.join(missing)})"]
    table, problems = reader_checks(path)
    if problems:
        return problems
    problems = declared_rounding(table)
    if problems:
        return problems
    problems = monotone_flags(table)
    eps, low = np.asarray(table.upper), np.asarray(table.lower)
    if np.any(eps > stored_like(table, "eps", table.eps0)[None, :, None, None]):
        problems.append("eps: values above eps0 (never certified beyond the local guarantee)")
    if np.any(low > eps):
        problems.append("eps_lower: values above the certified eps")
    settings = json.loads(table.attrs["certification"])
    slices = list(np.ndindex(*eps.shape[:2]))
    if (sample or full) and settings.get("method") != "slice":
        return problems + [f"{path}: built by the per-curve engine (removed): its cells cannot be recomputed the "
                           "way they were built; rebuild the table (tablegen build)"]
    chosen = slices if full else random.Random(seed).sample(slices, min(sample, len(slices)))
    for r, e in chosen:
        problems += _recompute(table, r, e, settings)
    if full and not problems:
        from lookup.trust import origin as trust

        trust.record_verified(path, table.digest)
    return problems


def reader_checks(path: Path) -> tuple[Any, list[str]]:
    """(the table as every reader opens it, problems): ``lookup.store.checks`` (structure, the recorded
    spec, each row's invariants) and the engine at cells drawn at random (``lookup.trust.origin``,
    ``spot_check``), whatever the table's provenance."""
    from lookup.store.table import TableError, open_table
    from lookup.trust import origin as trust
    from tablegen.engine import certifies

    try:
        table = open_table(path, verified=False)  # provenance is not asked: verifying is the 4th way
        np.asarray(table.upper)  # every row checked
    except TableError as err:
        return None, [str(err)]
    problem = trust.spot_check(table, certifies) if table.provenance == "shipped" else ""  # others: at open
    return table, [f"{path}: {problem}"] if problem else []


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


def monotone_flags(table: Any) -> list[str]:
    """Rows flagged eps0-monotone (an eps0 between grid values answered at the one above) whose
    mechanism is not (``eps0_monotone`` of the registry, as the build writes it): the flag is no
    value the recomputation compares, yet answers below the exact eps follow from a forged one."""
    from tablegen.mechanisms import get_mechanism

    return [f"{table.path}: row {label} is flagged eps0-monotone, but its mechanism is not (eps0 between grid "
            "values would be answered at the grid eps0 above)"
            for label, family, params, flag in zip(table.labels(), table.families, table.params,
                                                   table.eps0_monotone, strict=True)
            if flag and not get_mechanism(family).eps0_monotone(params)]


def _certified_below(task: Task, ns: list[int], got: np.ndarray, want: np.ndarray, tolerance: float,
                     close: np.ndarray) -> np.ndarray:
    """Cells whose stored eps is below the recomputed one by at most ``tolerance`` and certified
    anyway by one engine evaluation there (``tablegen.engine.certifies``: the certified delta at
    the stored eps is <= the cell's delta).  The recomputation is the ladder's value on this
    machine, not the smallest certified eps: a table built on another machine can sit one step
    of its ladder (or one quantum) lower and still be certified, e.g. 29 cells of the shipped
    default table, 2026-11-26.  Checked in order up to the first cell that is not certified."""
    from tablegen.engine import certifies

    def certified(j: int, d: int) -> bool:
        return certifies(task.family, eps0=task.eps0, n=ns[j], eps=float(got[j, d]), delta=task.deltas[d],
                         **task.params)

    return _in_order_while(~close & (got < want) & (got * (1 + tolerance) >= want), certified)


def _proved_above(task: Task, ns: list[int], got: np.ndarray, want: np.ndarray, close: np.ndarray) -> np.ndarray:
    """Cells whose stored lower bound is above the recomputed one and proved anyway by the engine
    there: ``proves_above`` (one evaluation of the spectral lower path, milliseconds; then at
    ``PROOF_RESOLUTION``, where the rounding term is a quarter, for a bound stored with a thin
    margin: k-RR k=16 eps0 0.05 n 6310 delta 1e-12 at 0.0012417 is 0.99987 of delta at 30 cells
    per sd and 1.0071 at 60), else the lower bound of ``delta_bounds`` (the FFT path where the
    spectral one declines) exceeds the cell's delta; the mirror of ``_certified_below``.  A table
    of engine 3 (the shipped default table) stores points of a finer ladder than engine 4's and
    5's lower slices search, and where the lower path is weak (a few hundred users at large eps0)
    either engine's search can settle far below the other's (HR eps0 6.88, n 398: 3.52 stored,
    1.03 recomputed, and proved at 3.52); the live path that proves here keeps engine 4's
    settings (``lower.delta_lower``).  Checked in order up to the first cell that is not proved."""
    from tablegen.engine import delta_bounds, proves_above

    def proved(j: int, d: int) -> bool:
        where = dict(eps0=task.eps0, n=ns[j], eps=float(got[j, d]), **task.params)
        delta = task.deltas[d]
        return (proves_above(task.family, delta=delta, **where)
                or proves_above(task.family, delta=delta, resolution=PROOF_RESOLUTION, **where)
                or (delta_bounds(task.family, **where).lower or 0.0) > delta)

    return _in_order_while(~close & (got > want), proved)


def _in_order_while(cells: np.ndarray, holds: Callable[[int, int], bool]) -> np.ndarray:
    """The cells of the mask ``cells``, in order, for which ``holds(j, d)``, up to the first for
    which it does not (one engine evaluation each: a damaged slice is reported at its first cell,
    not evaluated whole)."""
    out = np.zeros(cells.shape, bool)
    for j, d in np.argwhere(cells):
        if not holds(int(j), int(d)):
            break
        out[j, d] = True
    return out


def declared_rounding(table: Any) -> list[str]:
    """Problems where variable ``eps`` or ``eps_lower`` of ``table`` declares a rounding other
    than the one tablegen writes (``store.quantization_attributes`` of ``store.CERTIFIED_ROUNDING``
    with ``store.MANTISSA_BITS``).  The check's rounding and tolerance are this code's constants,
    never the file's: a table declaring 0 mantissa bits rounded down would otherwise pass with
    every eps halved."""
    problems = []
    for name, up in store.CERTIFIED_ROUNDING.items():
        declared = {k: v for k, v in table.array_attrs.get(name, {}).items() if k.startswith("quantization")}
        ours = store.quantization_attributes(up, store.MANTISSA_BITS)
        if declared and declared != ours:
            problems.append(f"{table.path}: {name} declares the quantization {declared}, not tablegen's "
                            f"({ours['quantization_bits']} mantissa bits rounded {ours['quantization_rounding']}): "
                            "refused, its values cannot be checked as tablegen stores them")
    return problems


def _quantized(table: Any, name: str) -> bool:
    """Whether variable ``name`` is stored compact (it declares tablegen's quantization:
    ``declared_rounding`` refused any other); else float64, compared as it is."""
    return "quantization_bits" in table.array_attrs.get(name, {})


def stored_like(table: Any, name: str, values: np.ndarray) -> np.ndarray:
    """``values`` rounded as tablegen stores variable ``name`` of ``table`` (``round_float32`` in
    the direction of ``store.CERTIFIED_ROUNDING`` to ``store.MANTISSA_BITS`` where it is compact;
    unchanged for a float64 store): this code's constants, never the file's attributes."""
    if not _quantized(table, name):
        return np.asarray(values, dtype=float)
    return store.round_float32(values, store.CERTIFIED_ROUNDING[name], store.MANTISSA_BITS).astype(float)


def _recompute(table: Any, r: int, e: int, settings: dict[str, Any]) -> list[str]:
    """Problems of slice (row ``r``, eps0 ``e``) of ``table`` (a ``lookup.store.table.Table``) against its
    live recomputation (none: equal within ``RECOMPUTE_RTOL`` plus one quantum of the store, in the
    safe direction only: stored eps >= live eps unless the engine certifies it (``_certified_below``),
    stored lower bound <= live lower bound)."""
    ns = [int(n) for n in table.n]
    task = Task((r, e), table.families[r], table.params[r], float(table.eps0[e]), tuple(ns), table.delta.tolist(),
                tuple(wants_lower(settings, e, j, float(n)) for j, n in enumerate(ns)), settings["resolution"],
                settings["lower_resolution"])
    live = slice_values(task)
    stored = (np.asarray(table.stored_eps(r)[e], float), np.asarray(table.stored_lower(r)[e], float))
    label = f"{table.labels()[r]} eps0={task.eps0:g}"
    problems = []
    for name, got, want in zip(store.VARIABLES, stored, live, strict=True):
        want = stored_like(table, name, want)  # on the building machine: equal bit for bit
        quantum = 2.0 ** -(store.MANTISSA_BITS if _quantized(table, name) else 52)  # ours, never the file's
        tolerance = RECOMPUTE_RTOL + quantum  # plus one quantum
        if name == "eps":  # certified eps up: within the tolerance above the live one, or certified itself
            close = ((want <= got) & (got <= want * (1 + tolerance))) | (np.isnan(got) & np.isnan(want))
            close |= _certified_below(task, ns, got, want, tolerance, close)
        else:  # a proved lower bound: below the live one (by any amount: only looser), or proved itself
            close = (got <= want) | (np.isnan(got) & np.isnan(want))
            close |= _proved_above(task, ns, got, want, close)
        if not np.all(close):
            j, d = np.unravel_index(int(np.argmin(close)), close.shape)
            problems.append(f"{label} n={ns[j]} delta={task.deltas[d]:g}: stored {name}={got[j, d]!r}, "
                            f"live {want[j, d]!r}")
    return problems
