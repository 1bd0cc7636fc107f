"""Tables of the calibrated p of the shuffled-histogram protocols, over (protocol, eps, n, delta).

Variable ``p``: the largest noise parameter certified (eps, delta)-DP for n users
(``accounting.calibrate``), NaN where no p in (1/2, 1) exists.  Same store format as the eps
tables (CF attributes, zstd + crc32c chunks, SHA-256 manifest, atomic publish).  Spec::

    title = "..."
    [axes]
    eps = {start = 0.05, stop = 4, per_decade = 20}
    n = {start = 1e3, stop = 1e8, per_decade = 8}
    delta = [1e-12, 1e-10, 1e-8, 1e-6, 1e-4]
"""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from tablegen import ENGINE_VERSION, __version__, store
from tablegen.protocols.accounting import PROTOCOLS, calibrate
from tablegen.spec import SpecError, parse_axis

REFERENCE = "Balcer, Cheu: shuffled-histograms.txt section 3; shuffle-eps docs/protocols.md"


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
    return out


def calibration_values(eps: np.ndarray, n: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """p[protocol, eps, n, delta] (NaN where no p in (1/2, 1) is certified)."""
    p = np.full((len(PROTOCOLS), eps.size, n.size, delta.size), np.nan)
    for index in np.ndindex(*p.shape):
        r, e, j, d = index
        try:
            p[index] = calibrate(PROTOCOLS[r], eps=float(eps[e]), delta=float(delta[d]), n=int(n[j]))
        except ValueError:
            pass  # no certified p: too few users for this target
    return p


def build_calibration(spec_path: str | Path, out: str | Path) -> dict[str, Any]:
    """Compute and publish the table of ``spec_path`` at ``out`` (atomically, with manifest)."""
    import xarray as xr

    axes = load_axes(spec_path)
    store.check_replaceable(out)
    values = calibration_values(axes["eps"], axes["n"], axes["delta"])
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    dims = ("protocol", "eps", "n", "delta")
    ds = xr.Dataset(
        {"p": (dims, values, {"long_name": "largest Bernoulli noise parameter certified (eps, delta)-DP "
                              "(NaN: none in (1/2, 1))", "units": "1", "certified": "rounded toward more noise"})},
        coords={"protocol": ("protocol", np.array(PROTOCOLS, dtype=object)),
                "eps": ("eps", axes["eps"], {"long_name": "target eps", "units": "1"}),
                "n": ("n", axes["n"].astype(np.int64), {"long_name": "number of users", "units": "1"}),
                "delta": ("delta", axes["delta"], {"long_name": "target delta", "units": "1"})},
        attrs={"title": axes["title"], "Conventions": "CF-1.10", "institution": "shuffle-eps",
               "source": f"shuffle-eps {__version__} tablegen, engine {ENGINE_VERSION}",
               "history": f"{now} tablegen build-calibration --spec {spec_path} --out {out}",
               "references": REFERENCE, "date_created": now, "engine_version": ENGINE_VERSION,
               "spec": json.dumps({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in axes.items()})},
    )
    store.publish(ds, out)
    return {"out": str(out), "cells": int(values.size), "without_p": int(np.isnan(values).sum())}
