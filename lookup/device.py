"""Device files: one mechanism family of a table in one compact file, readable with the Python
standard library alone (this module imports nothing else at load).

Layout (all little-endian)::

    offset 0   8 bytes  magic b"SHEPSDV1"
    offset 8   4 bytes  uint32 H, length of the header
    offset 12  H bytes  header, UTF-8 JSON (below)
    then       R*E*N*D float32 certified eps, C order (row, eps0, n, delta), each rounded UP
    then       R*E*N*D float32 lower bounds, rounded DOWN (NaN: none)

Header keys: ``format`` (1), ``family``, ``rows`` (the parameters of each row),
``eps0_monotone`` (per row; false: only grid eps0 may be answered), ``eps0``, ``n``, ``delta``
(ascending axes), ``shape`` [R, E, N, D], ``dtype`` ("<f4"), ``source`` (the table, its spec
SHA-256, engine version and date), and ``sha256``: the SHA-256 of the header without this key
(JSON, keys sorted, separators "," and ":") followed by the payload.  The surfaces are already
monotone (``lookup.table``), so a reader applies the rules of ``lookup.rules`` directly;
``DeviceTable.eps`` does so for one query.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import struct
import sys
from array import array
from typing import Any

MAGIC = b"SHEPSDV1"
FORMAT = 1
FLOAT_SLACK = 1e-12  # as lookup.rules: the chord's rounding pushed up


class DeviceFileError(ValueError):
    """A device file that is malformed or fails its checksum."""


class DeviceTable:
    """A parsed device file: header and the two float32 surfaces as flat arrays."""

    def __init__(self, header: dict[str, Any], upper: array, lower: array) -> None:
        self.header = header
        self.upper = upper
        self.lower = lower
        self.shape = tuple(header["shape"])

    def row(self, params: dict[str, Any]) -> int | None:
        want = canonical(params)
        rows = [canonical(p) for p in self.header["rows"]]
        return rows.index(want) if want in rows else None

    def value(self, r: int, e: int, j: int, d: int) -> float:
        _, n_eps0, n_n, n_delta = self.shape
        return self.upper[((r * n_eps0 + e) * n_n + j) * n_delta + d]

    def eps(self, params: dict[str, Any], eps0: float, n: float, delta: float) -> float:
        """Certified eps (the rules of ``lookup.rules`` for one query); ValueError when the file
        cannot answer (row absent, eps0 above the grid, n or delta below it)."""
        if not (0 < eps0 < math.inf and 1 <= n < math.inf and 0 < delta < 1):
            raise ValueError(f"need eps0 > 0, n >= 1 and delta in (0, 1), got eps0={eps0} n={n} delta={delta}")
        r = self.row(params)
        cell = locate(self.header["eps0"], self.header["n"], self.header["delta"], eps0, n, delta)
        if (r is None or cell is None
                or (not self.header["eps0_monotone"][r] and self.header["eps0"][cell.eps0_up] != eps0)):
            raise ValueError(f"the device file does not cover {params} eps0={eps0} n={n} delta={delta}")
        return min(chord(lambda d: self.value(r, cell.eps0_up, cell.n_down, d), cell), eps0)


class Cell:
    """Where one query falls in the grid: indices and the chord weight (see ``locate``)."""

    __slots__ = ("eps0_up", "eps0_down", "n_down", "n_up", "lo", "hi", "t", "edge")

    def __init__(self, *values: Any) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            setattr(self, name, value)


def locate(eps0_axis: list[float], n_axis: list[float], delta_axis: list[float], eps0: float, n: float,
           delta: float) -> Cell | None:
    """Grid indices of a query for the conservative rules, None outside the grid in an unsafe
    direction: eps0 rounded up, n down, and the bracketing deltas lo <= hi with the chord weight
    t of the smaller one (t = 0 on a grid delta or above the largest)."""
    e = bisect.bisect_left(eps0_axis, eps0)
    j = bisect.bisect_right(n_axis, n) - 1
    if e == len(eps0_axis) or j < 0 or delta < delta_axis[0]:
        return None
    hi = min(bisect.bisect_left(delta_axis, delta), len(delta_axis) - 1)
    lo, t = hi, 0.0
    if delta < delta_axis[hi]:
        lo = hi - 1
        t = (delta_axis[hi] - delta) / (delta_axis[hi] - delta_axis[lo])
    edge = eps0 < eps0_axis[0] or n > n_axis[-1] or delta > delta_axis[-1]
    return Cell(e, bisect.bisect_right(eps0_axis, eps0) - 1, j, bisect.bisect_left(n_axis, n), lo, hi, t, edge)


def chord(value: Any, cell: Cell) -> float:
    """eps on the chord in (e^eps, delta) between the cell's two grid deltas, rounded up;
    ``value(d)`` is the certified eps at grid delta index d."""
    if cell.t == 0.0:
        return value(cell.hi)
    x = cell.t * math.expm1(value(cell.lo)) + (1 - cell.t) * math.expm1(value(cell.hi))
    return math.log1p(x) * (1 + FLOAT_SLACK)


def canonical(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces; integral floats as ints for parameters)."""
    if isinstance(value, dict):
        value = {k: (int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in value.items()
                 if v is not None}
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def checksum(header: dict[str, Any], payload: bytes) -> str:
    """SHA-256 over the header (without its ``sha256`` key) and the payload."""
    rest = {k: v for k, v in header.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode() + payload).hexdigest()


HEADER_KEYS = {"family": str, "rows": list, "eps0_monotone": list, "eps0": list, "n": list, "delta": list,
               "shape": list, "dtype": str, "sha256": str}


def _check_header(path: str, header: dict[str, Any]) -> None:
    """Every header key present with its type, axes of finite numbers strictly increasing in
    their domain; DeviceFileError naming the key."""
    for key, kind in HEADER_KEYS.items():
        if not isinstance(header.get(key), kind):
            raise DeviceFileError(f"{path}: refused, header key {key!r} is missing or not a {kind.__name__}")
    if not all(isinstance(r, dict) for r in header["rows"]) or not all(
            isinstance(v, bool) for v in header["eps0_monotone"]):
        raise DeviceFileError(f"{path}: refused, header keys 'rows' / 'eps0_monotone' malformed")
    low = {"eps0": 0.0, "n": 1.0, "delta": 0.0}
    for key, lowest in low.items():
        axis = header[key]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in axis)
        if not (numbers and axis and all(a < b for a, b in zip(axis, axis[1:], strict=False))
                and axis[0] >= lowest and (axis[0] > 0 or key == "n") and (key != "delta" or axis[-1] < 1)):
            raise DeviceFileError(f"{path}: refused, header axis {key!r} is not finite numbers strictly increasing "
                                  "in its domain")


def read_device(path: str) -> DeviceTable:
    """Parse and check a device file (standard library only)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 12 or data[:8] != MAGIC:
        raise DeviceFileError(f"{path}: not a shuffle-eps device file (bad magic)")
    (length,) = struct.unpack_from("<I", data, 8)
    try:
        header = json.loads(data[12:12 + length].decode())
    except (UnicodeDecodeError, ValueError):
        raise DeviceFileError(f"{path}: malformed header") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise DeviceFileError(f"{path}: unsupported format (this reader: {FORMAT})")
    payload = data[12 + length:]
    if checksum(header, payload) != header.get("sha256"):
        raise DeviceFileError(f"{path}: refused, header and payload do not match their SHA-256 "
                              "(corrupted or modified)")
    _check_header(path, header)
    shape = header["shape"]
    axes = [len(header["rows"]), len(header["eps0"]), len(header["n"]), len(header["delta"])]
    if shape != axes or header.get("dtype") != "<f4" or len(header["eps0_monotone"]) != shape[0]:
        raise DeviceFileError(f"{path}: header shape {shape} or dtype does not match its axes {axes}")
    count = math.prod(shape)
    if len(payload) != 8 * count:
        raise DeviceFileError(f"{path}: payload has {len(payload)} bytes, expected {8 * count}")
    values = array("f")
    values.frombytes(payload)
    if sys.byteorder == "big":
        values.byteswap()
    return DeviceTable(header, values[:count], values[count:])
