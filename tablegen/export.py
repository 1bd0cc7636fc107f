"""``tablegen export --device``: one mechanism family of a table as a compact device file.

The layout is documented in ``lookup/device.py`` (which reads it with the standard library).
Certified eps are rounded UP to float32 (``astype`` alone rounds about half of them down, which
would break certification: each value below its float64 is moved one float32 step up with
``nextafter``); lower bounds are rounded DOWN the same way.  The exported surfaces are the
monotone ones of ``lookup.table``, so a reader needs no preprocessing.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from lookup.device import FORMAT, MAGIC, checksum
from lookup.table import canonical_params, open_table


def round_float32(values: np.ndarray, up: bool) -> np.ndarray:
    """float32 values >= (up) or <= (not up) the float64 ones; NaN stays NaN."""
    single = values.astype("<f4")
    widened = single.astype(np.float64)
    wrong = widened < values if up else widened > values
    target = np.float32(np.inf if up else -np.inf)
    single[wrong] = np.nextafter(single[wrong], target)
    return single


def export_device(out: str | Path, family: str, params: dict[str, Any], table: str | None = None) -> dict[str, Any]:
    """Write the rows of ``family`` matching ``params`` (all rows of the family if empty)."""
    t = open_table(table)
    want = json.loads(canonical_params(params))
    rows = [i for i, (f, p) in enumerate(zip(t.families, t.params, strict=True))
            if f == family and all(json.loads(canonical_params(p)).get(k) == v for k, v in want.items())]
    if not rows:
        labels = ", ".join(t.labels())
        raise ValueError(f"no row of mechanism={family!r} with {want or 'any parameters'} in {t.path}; "
                         f"the table has: {labels}")
    payload = round_float32(t.upper[rows], up=True).tobytes() + round_float32(t.lower[rows], up=False).tobytes()
    header = {
        "format": FORMAT,
        "family": family,
        "rows": [t.params[i] for i in rows],
        "eps0_monotone": [bool(t.eps0_monotone[i]) for i in rows],
        "eps0": t.eps0.tolist(),
        "n": t.n.tolist(),
        "delta": t.delta.tolist(),
        "shape": [len(rows), t.eps0.size, t.n.size, t.delta.size],
        "dtype": "<f4",
        "rounding": "eps rounded up, lower bounds rounded down to float32",
        "source": {k: t.attrs.get(k) for k in ("title", "spec_sha256", "engine_version", "date_created")},
    }
    header["sha256"] = checksum(header, payload)
    text = json.dumps(header, separators=(",", ":")).encode()
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(MAGIC + struct.pack("<I", len(text)) + text + payload)
    os.replace(tmp, out)
    return {"file": str(out), "bytes": out.stat().st_size, "rows": len(rows)}
