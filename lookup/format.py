"""The public format both sides share: what tablegen writes and lookup reads.  Standard library
only (a device-file reader and the C reader's tests import it without numpy).

It holds the file names of a published table, the listing digest, canonical JSON, the domain
limits every entry point checks, the tolerances of the invariants, the device file's magic and
format, and the one conservative chord rule (scalar here, vectorised in ``lookup.chord``).  Why
the chord is certified: docs/soundness.md and docs/lookup.md.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

# a published table: its manifest (sha256sum format), the optional signature beside it
MANIFEST = "MANIFEST.sha256"
SIGNATURE = "SIGNATURE.ed25519"
UNLISTED = (MANIFEST, SIGNATURE)  # the files of a store its manifest does not list
MAX_LISTED_FILES = 4096  # a table of R rows lists 2 R + 17 files
MAX_MANIFEST_BYTES = 1 << 20

# the domain answered anywhere (lookup and the engine alike)
N_LIMIT = 10**18  # the largest n
EPS0_MIN = 1e-6  # the smallest eps0: below it the engine's double-precision laws are not certified
EPS0_MIN_TEXT = f">= {EPS0_MIN:g}"  # how every message and help text states it
SIGMA_MIN, SIGMA_MAX = 0.2, 50.0  # the Gaussian's noise sd answered (units of the input range)

# the mechanisms a query names -> (required, optional) parameters: the engine's registry
# (tablegen.mechanisms) and the closed form (a test keeps them equal)
MECHANISM_PARAMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "krr": (("k",), ()), "generic": ((), ("delta0",)), "generic-closed-form": ((), ()), "blh": ((), ("domain",)),
    "olh": ((), ("g", "domain")), "rappor": ((), ("domain",)), "oue": ((), ("domain",)), "hr": ((), ("domain",)),
    "laplace": ((), ()), "finite": (("matrix",), ()), "joint": (("base",), ("parts", "k", "g")),
    "parallel": (("bases", "weights"), ("k", "g")),
}

# the multi-message protocols (noise parameter p, not eps0-LDP randomizers: tablegen.protocols.accounting),
# named here so that the registry and the engine can tell a user who names one where to go
PROTOCOLS = ("binary-sum", "histogram")

# rows whose live analysis is tighter than the one a table row holds: the engine certifies binary
# randomized response (k-RR with k = 2) at the exact worst case over datasets (tablegen/engine/binary.py,
# docs/soundness.md), 20-43% below the blanket bound the tables' k = 2 rows hold; lookup measures the
# slack of such rows against the row's stored lower bound (docs/lookup.md, "slack of rows the engine
# certifies more tightly")


def exact_worst_case(family: str, params: dict[str, Any]) -> bool:
    """Whether the engine certifies ``family`` with ``params`` at the exact worst case over datasets
    (binary randomized response: k-RR with k = 2), tighter than the blanket bound a table row of it
    holds.  ``tablegen.engine.binary.applies`` decides by it (the engine side), ``lookup.answer.rules``
    (the table side) by the same test on a table row's family and parameters."""
    given = {name: value for name, value in params.items() if value is not None}
    return family == "krr" and set(given) == {"k"} and given["k"] == 2


# floating point
UNIT_ROUNDOFF = 2.0**-53  # of float64
FLOAT_SLACK = 1e-12  # relative: the chord's few roundings (log1p/expm1 keep them relative) pushed outward

# the invariants of a stored surface (lookup.store.checks with numpy, lookup.device.files without)
MONOTONE_RTOL = 0.03  # the largest stored step against the exact eps's monotonicity (docs/lookup.md)
MONOTONE_ATOL = 1e-7  # eps this small says nothing by its relative step
CAP_RTOL = 2.0**-11  # eps <= eps0 up to float32 rounding

# device files (docs/device-format.md)
MAGIC = b"SHEPSDV1"
FORMAT = 2  # written for an eps0 axis, readable by every reader since 2026-11-25
FORMAT_AXIS = 3  # written for a sigma axis: the header names its first axis (``axis``); a format-2 reader refuses it
FORMATS = (1, 2, 3)  # readable: 1, the re-serialised checksum; 2, the byte-exact one; 3, 2 with a named first axis
AXES = ("eps0", "sigma")  # a format-3 file's first axis: the LDP eps0 (answered rounded up) or the Gaussian's noise
# sd sigma (answered rounded DOWN: the exact eps is non-increasing in sigma, docs/device-format.md)
DIGEST_KEY = b',"sha256":"'  # format 2: the header ends with DIGEST_KEY + 64 hex digits + DIGEST_TAIL
DIGEST_TAIL = b'"}'
MAX_HEADER_BYTES = 1 << 20
MAX_FILE_BYTES = 256 << 20
SIGNED_DEVICE = b"shuffle-eps device file 2\n"  # begins what a device file's signature signs
SIGNED_TABLE = b"shuffle-eps table digest "  # a table's signature signs this, then the digest's hex digits


class TableError(ValueError):
    """A table that is missing, corrupted, tampered with, or does not cover a query."""


def _clean(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters with None dropped and integral floats as ints (10.0 == 10)."""
    return {k: (int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in params.items() if v is not None}


def canonical(value: Any) -> str:
    """Canonical compact JSON (sorted keys, no spaces; for a dict, parameters cleaned as
    ``canonical_params``): how device files name their rows."""
    if isinstance(value, dict):
        value = _clean(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def canonical_params(params: dict[str, Any]) -> str:
    """Parameters as sorted JSON, None dropped, integral floats as ints: how tables name their rows."""
    return json.dumps(_clean(params), sort_keys=True)


def listing_digest(listed: dict[str, str]) -> str:
    """SHA-256 of a manifest listing (relative path -> SHA-256 of the file) in its canonical
    text, one ``digest  path`` line per file sorted by path: it fixes every file's content."""
    text = "".join(f"{digest}  {rel}\n" for rel, digest in sorted(listed.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def chord_weight(d_small: float, d_large: float, delta: float) -> float:
    """The chord's weight of the smaller grid delta for ``delta`` in [d_small, d_large] (0 at
    d_large, 1 at d_small; 0 where the two coincide)."""
    return (d_large - delta) / (d_large - d_small) if d_large > d_small else 0.0


def chord_eps(t: float, u_small: float, u_large: float) -> float:
    """THE conservative chord rule: eps on the chord in (e^eps, delta) through (e^u_small,
    d_small) and (e^u_large, d_large), at the point of weight ``t`` of the first
    (``chord_weight``), rounded up by ``FLOAT_SLACK``; ``u_large`` exactly at t = 0.

    The exact delta(e^eps) is convex, so the chord between two certified points lies above it
    and its eps at a delta between them is certified (docs/soundness.md)."""
    if t == 0.0:
        return u_large
    return math.log1p(t * math.expm1(u_small) + (1 - t) * math.expm1(u_large)) * (1 + FLOAT_SLACK)
