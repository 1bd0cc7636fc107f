"""Tables of the calibrated p of the shuffled-histogram protocols, over (protocol, eps, n, delta).

Variable ``p``: the largest noise parameter certified (eps, delta)-DP for n users
(``accounting.calibrate``), NaN where no p in (1/2, 1) exists.  Same store format as the eps
tables (CF attributes, zstd + crc32c chunks, SHA-256 manifest, atomic publish).  The build is
resumable: each (protocol, eps) slice is written to ``OUT.staging/`` atomically as it finishes,
with the HMAC of its values (``store.slice_mac``: the per-user secret of the trust records), and a
rerun of the same spec computes only the missing slices; a staging store or slice not made here
(``store.claim_staging``, no valid HMAC) is recomputed, the log saying so.  A published table is
recorded as built on this machine (``lookup.trust.origin.record_built``, by the digest ``store.publish``
returns), every value in it computed here, so ``lookup.calibrate`` answers from it here
(docs/trust.md).  Spec::

    title = "..."
    [axes]
    eps = {start = 0.05, stop = 4, per_decade = 20}
    n = {start = 1e3, stop = 1e8, per_decade = 8}
    delta = [1e-12, 1e-10, 1e-8, 1e-6, 1e-4]
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import shutil
import tomllib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from lookup.trust.origin import read_small, record_built
from tablegen import __version__, store
from tablegen.build import progress_bar
from tablegen.protocols.accounting import PROTOCOLS, VERSION, calibrate
from tablegen.spec import SpecError, parse_axis

REFERENCE = "Balcer, Cheu, arXiv:1911.06879 section 3; shuffle-eps docs/protocols.md"


def load_axes(path: str | Path) -> dict[str, np.ndarray]:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (FileNotFoundError, tomllib.TOMLDecodeError) as err:
        raise SpecError(f"{path}: cannot read spec: {err}") from None
    axes = raw.get("axes", {})
    out = {name: parse_axis(axes.get(name), f"axes.{name}", str(path)) for name in ("eps", "n", "delta")}
    out["n"] = np.unique(np.round(out["n"]))  # geometric axes round to integers
    checks = {"eps": out["eps"][0] > 0, "n": out["n"][0] >= 1,
              "delta": out["delta"][0] > 0 and out["delta"][-1] < 1}
    for name, ok in checks.items():
        if not ok:
            raise SpecError(f"{path}: axes.{name}: values outside the domain "
                            "(eps > 0, integer n >= 1, delta in (0, 1))")
    out["title"] = raw.get("title", "shuffle-eps calibrated p")
    out["written"] = {name: axes.get(name) for name in ("eps", "n", "delta")}  # as parsed from TOML, for the hash
    return out


def slice_values(protocol: str, eps: float, n: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """p[n, delta] of one protocol at one eps (NaN where no p in (1/2, 1) is certified)."""
    p = np.full((n.size, delta.size), np.nan)
    for j, d in np.ndindex(*p.shape):
        try:
            p[j, d] = calibrate(protocol, eps=eps, delta=float(delta[d]), n=int(n[j]))
        except ValueError:
            pass  # no certified p: too few users for this target
    return p


def build_calibration(spec_path: str | Path, out: str | Path, progress: bool = False,
                      fresh: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Compute (or finish computing) and publish the calibration table of ``spec_path``.

    Args:
        spec_path: the protocols' spec (``workflows/protocols.toml``).
        out: the published table's path.
        progress: a progress bar on stderr.
        fresh: discard an unfinished build of ``out`` and start over.
        log: where the lines go.

    Returns:
        ``out``, the cells, the slices computed and skipped, the cells without a p.
    """
    out = Path(out)
    with store.build_lock(out, f"tablegen build-calibration --spec {spec_path} --out {out}"):
        return _build_locked(load_axes(spec_path), spec_path, out, progress, fresh, log)


def _build_locked(axes: dict[str, Any], spec_path: str | Path, out: Path, progress: bool,
                  fresh: bool, log: Callable[[str], None]) -> dict[str, Any]:
    store.check_replaceable(out)
    if fresh:
        shutil.rmtree(store.staging_path(out), ignore_errors=True)
    written = axes.pop("written")
    spec = json.dumps({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in axes.items()}, sort_keys=True)
    # stamped with the protocol accounting's version (it does not use the lattice engine), under
    # the key every store uses for "what computed it"; the hash covers the spec's text (axes as
    # written), never the generated floats, which may differ in the last digit between machines
    canonical = json.dumps({"title": axes["title"], "axes": written}, sort_keys=True, separators=(",", ":"))
    header = {"spec_sha256": hashlib.sha256(canonical.encode()).hexdigest(), "engine_version": VERSION}
    slices = list(itertools.product(range(len(PROTOCOLS)), range(axes["eps"].size)))
    if store.up_to_date(out, header):
        return {"out": str(out), "cells": len(slices) * axes["n"].size * axes["delta"].size, "computed": 0,
                "skipped": len(slices), "without_p": None}
    staging = store.claim_staging(out, header, lambda path: None, log)
    kept = _staged(staging, header, slices, log)
    todo = [cell for cell in slices if cell not in kept]
    for r, e in progress_bar(todo, len(todo), progress, unit="slice"):
        kept[r, e] = slice_values(PROTOCOLS[r], float(axes["eps"][e]), axes["n"], axes["delta"])
        buffer = io.BytesIO()
        np.save(buffer, kept[r, e])
        store.atomic_write(staging / f"{r}_{e}.mac", store.slice_mac(header, (r, e), "p", kept[r, e]))
        store.atomic_write(staging / f"{r}_{e}.npy", buffer.getvalue())  # the slice counts from here on
    values = np.stack([kept[cell] for cell in slices])  # as computed or read with their HMAC: never re-read
    values = values.reshape(len(PROTOCOLS), axes["eps"].size, axes["n"].size, axes["delta"].size)
    digest = store.publish(_dataset(values, axes, spec, header,
                                    f"tablegen build-calibration --spec {spec_path} --out {out}"), out)
    record_built(out, digest)  # lookup.trust.origin: the digest of what publish wrote, never re-read from out
    store.remove_staging(staging)
    return {"out": str(out), "cells": int(values.size), "computed": len(todo), "skipped": len(slices) - len(todo),
            "without_p": int(np.isnan(values).sum())}


def _staged(staging: Path, header: dict[str, str], slices: list[tuple[int, int]],
            log: Callable[[str], None]) -> dict[tuple[int, int], np.ndarray]:
    """The staged slices whose values carry this machine's HMAC (``store.slice_authentic``), by
    (protocol, eps); the others are left to recompute, the log saying how many were staged."""
    kept, foreign = {}, 0
    for r, e in slices:
        path = staging / f"{r}_{e}.npy"
        if not path.exists():
            continue
        try:
            values, tag = np.load(path, allow_pickle=False), read_small(staging / f"{r}_{e}.mac")
        except (OSError, ValueError, EOFError):  # written atomically, so only outside damage: recomputed
            values, tag = None, None
        if values is not None and store.slice_authentic(header, (r, e), "p", values, tag):
            kept[r, e] = values
        else:
            foreign += 1
    if foreign:
        log(f"{foreign} staged slices not made here: recomputed (no HMAC of this machine's over their values)")
    return kept


def _dataset(values: np.ndarray, axes: dict[str, Any], spec: str, header: dict[str, str], command: str) -> Any:
    import xarray as xr

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    dims = ("protocol", "eps", "n", "delta")
    return xr.Dataset(
        {"p": (dims, values, {"long_name": "largest Bernoulli noise parameter certified (eps, delta)-DP "
                              "(NaN: none in (1/2, 1))", "units": "1", "certified": "rounded toward more noise"})},
        coords={"protocol": ("protocol", np.array(PROTOCOLS, dtype=object)),
                "eps": ("eps", axes["eps"], {"long_name": "target eps", "units": "1"}),
                "n": ("n", axes["n"].astype(np.int64), {"long_name": "number of users", "units": "1"}),
                "delta": ("delta", axes["delta"], {"long_name": "target delta", "units": "1"})},
        attrs={"title": axes["title"], "Conventions": "CF-1.10", "institution": "shuffle-eps",
               "source": f"shuffle-eps {__version__} tablegen, protocol accounting {VERSION}",
               "history": f"{now} {command}", "references": REFERENCE, "date_created": now, "spec": spec, **header},
    )
