"""Device files: one mechanism family of a table in one compact file, readable with the Python
standard library alone (this module imports only ``lookup.format`` at load).

A magic, a strict-JSON header that carries its own SHA-256 (``encode``, ``header_sha256``), then the
certified eps rounded up and the lower bounds rounded down as float32; the surfaces are already
monotone, so ``DeviceTable.eps`` applies the rules of ``lookup.answer.rules`` directly, after
checking a row's values once.  The header is read first and the file's size checked against it
before the payload is read; a signature signs ``signed_message`` (the family and rows too).  Format 3
names the first axis (``axis_of``): a sigma file (the shuffled Gaussian) answers ``DeviceTable.eps_sigma``
only, sigma rounded down.  The format byte by byte, its bounds, and the C99 reader beside this one
(``lookup/device/c/``): docs/device-format.md.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import re
import stat
import struct
import sys
from array import array
from typing import Any, BinaryIO


def _format() -> Any:
    """``lookup.format``; where the lookup package cannot load (this file used alone, without
    numpy), ``lookup/format.py`` read from its path."""
    try:
        from lookup import format as shared
    except ImportError:
        import importlib.util
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "format.py")
        spec = importlib.util.spec_from_file_location("shuffle_eps_format", path)
        shared = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shared)
    return shared


_shared = _format()
MAGIC, FORMAT, FORMAT_AXIS = _shared.MAGIC, _shared.FORMAT, _shared.FORMAT_AXIS
FORMATS, AXES = _shared.FORMATS, _shared.AXES
SIGMA_MIN, SIGMA_MAX = _shared.SIGMA_MIN, _shared.SIGMA_MAX
FLOAT_SLACK = _shared.FLOAT_SLACK  # the chord's rounding pushed up (``chord``)
DIGEST_KEY, DIGEST_TAIL = _shared.DIGEST_KEY, _shared.DIGEST_TAIL
MONOTONE_RTOL, MONOTONE_ATOL, CAP_RTOL = _shared.MONOTONE_RTOL, _shared.MONOTONE_ATOL, _shared.CAP_RTOL
MAX_HEADER_BYTES, MAX_FILE_BYTES = _shared.MAX_HEADER_BYTES, _shared.MAX_FILE_BYTES
SIGNED = _shared.SIGNED_DEVICE  # what a signature of a device file signs (signed_message) begins so
canonical, chord_eps, chord_weight = _shared.canonical, _shared.chord_eps, _shared.chord_weight
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


class DeviceFileError(ValueError):
    """A device file that is malformed or fails its checksum."""


class DeviceTable:
    """A parsed device file: header and the two float32 surfaces as flat arrays."""

    def __init__(self, header: dict[str, Any], upper: array, lower: array, provenance: str = "", text: bytes = b"",
                 expected: int | None = None) -> None:
        self.header = header
        self.provenance = provenance  # why it is trusted (lookup.trust): "shipped", "built", "signed", "verified"
        self.certified = provenance not in ("", "unverified")
        self.upper = upper
        self.lower = lower
        self.shape = tuple(header["shape"])
        self.checked: set[int] = set()
        self.text = text  # the header as written in the file
        self.expected = expected  # the one row answered (read_device's ``expect`` named its parameters), else None
        self.axis = axis_of(header)  # the first axis: "eps0" or "sigma" (format 3 names it)

    def signed_message(self) -> bytes:
        """What a signature of this file signs (``signed_message``)."""
        return signed_message(self.header["family"], member_text(self.text, "rows"), self.header["sha256"])

    def row(self, params: dict[str, Any]) -> int | None:
        want = canonical(params)
        rows = [canonical(p) for p in self.header["rows"]]
        return rows.index(want) if want in rows else None

    def value(self, r: int, e: int, j: int, d: int) -> float:
        _, n_eps0, n_n, n_delta = self.shape
        return self.upper[((r * n_eps0 + e) * n_n + j) * n_delta + d]

    def _checked_row(self, params: dict[str, Any], axis: str, x: float, n: float, delta: float) -> int | None:
        """The row of ``params`` (None where absent), its values checked once (``check_row``), after
        refusing a query whose first axis ``axis`` is not the file's or whose numbers are out of range."""
        if axis != self.axis:
            raise ValueError(f"the device file's first axis is {self.axis}, not {axis}: it answers queries at a "
                             f"{self.axis} only")
        if not (0 < x < math.inf and 1 <= n < math.inf and 0 < delta < 1):
            raise ValueError(f"need {axis} > 0, n >= 1 and delta in (0, 1), got {axis}={x} n={n} delta={delta}")
        r = self.row(params)
        if self.expected is not None and r != self.expected:
            raise ValueError(f"the device file was opened for {canonical(self.header['rows'][self.expected])} only, "
                             f"not {canonical(params)}")
        if r is not None and r not in self.checked:
            check_row(self, r)
            self.checked.add(r)
        return r

    def eps(self, params: dict[str, Any], eps0: float, n: float, delta: float) -> float:
        """Certified eps (the rules of ``lookup.answer.rules`` for one query); ValueError when the file
        cannot answer (a sigma file, row absent, eps0 above the grid, n or delta below it),
        DeviceFileError when the row's values break an invariant (``check_row``, once per row)."""
        r = self._checked_row(params, "eps0", eps0, n, delta)
        cell = locate(self.header["eps0"], self.header["n"], self.header["delta"], eps0, n, delta)
        if (r is None or cell is None
                or (not self.header["eps0_monotone"][r] and self.header["eps0"][cell.eps0_up] != eps0)):
            raise ValueError(f"the device file does not cover {params} eps0={eps0} n={n} delta={delta}")
        return min(chord(lambda d: self.value(r, cell.eps0_up, cell.n_down, d), cell), eps0)

    def eps_sigma(self, params: dict[str, Any], sigma: float, n: float, delta: float) -> float:
        """Certified eps of a sigma file (the Gaussian): sigma rounded DOWN to the largest stored sigma
        <= the query's, n down, the delta chord as ``eps``, no eps0 cap.  Each rule can only raise the
        answer because the exact eps is non-increasing in sigma (more noise is post-processing: add
        independent N(0, s^2) to each report), in n and in delta.  ValueError when the file cannot
        answer (an eps0 file, row absent, sigma below the grid, n or delta below it)."""
        r = self._checked_row(params, "sigma", sigma, n, delta)
        k = bisect.bisect_right(self.header["sigma"], sigma) - 1  # sigma rounded down
        cell = locate([1.0], self.header["n"], self.header["delta"], 1.0, n, delta)  # n and delta as eps0 files
        if r is None or k < 0 or cell is None:
            why = "sigma is below the smallest sigma of the device file" if k < 0 else "not covered"
            raise ValueError(f"the device file does not cover {params} sigma={sigma} n={n} delta={delta} ({why})")
        return chord(lambda d: self.value(r, k, cell.n_down, d), cell)

    def sigma_lower(self, params: dict[str, Any], sigma: float, n: float, delta: float) -> float:
        """A certified lower bound on the exact eps at the query from a sigma file: the stored lower bound at
        sigma, n and delta rounded UP (each exact eps at a larger sigma, n or delta is at most the query's:
        the rules of ``eps_sigma`` the other way); NaN where none is stored or nothing lies above the query."""
        r = self._checked_row(params, "sigma", sigma, n, delta)
        k = bisect.bisect_left(self.header["sigma"], sigma)
        j = bisect.bisect_left(self.header["n"], n)
        d = bisect.bisect_left(self.header["delta"], delta)
        if r is None or k == len(self.header["sigma"]) or j == len(self.header["n"]) or d == len(self.header["delta"]):
            return math.nan
        _, n_first, n_n, n_delta = self.shape
        return self.lower[((r * n_first + k) * n_n + j) * n_delta + d]


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
        t = chord_weight(delta_axis[lo], delta_axis[hi], delta)
    edge = eps0 < eps0_axis[0] or n > n_axis[-1] or delta > delta_axis[-1]
    return Cell(e, bisect.bisect_right(eps0_axis, eps0) - 1, j, bisect.bisect_left(n_axis, n), lo, hi, t, edge)


def chord(value: Any, cell: Cell) -> float:
    """eps on the chord in (e^eps, delta) between the cell's two grid deltas, rounded up;
    ``value(d)`` is the certified eps at grid delta index d."""
    if cell.t == 0.0:
        return value(cell.hi)
    return chord_eps(cell.t, value(cell.lo), value(cell.hi))


def checksum_v1(header: dict[str, Any], payload: bytes) -> str:
    """Format 1's SHA-256: over the header (without its ``sha256`` key) re-serialised as sorted
    compact JSON, and the payload (read here for old files; format 2 is ``header_sha256``)."""
    return hashlib.sha256(_v1_sealed(header) + payload).hexdigest()


def header_sha256(text: bytes, payload: bytes) -> str:
    """Format 2's SHA-256 of a header ``text`` (as written in the file, ending with ``DIGEST_KEY``
    + 64 hex digits + ``DIGEST_TAIL``) with its 64 digest digits read as ASCII "0", followed by
    the payload."""
    return hashlib.sha256(_v2_sealed(text) + payload).hexdigest()


def _v1_sealed(header: dict[str, Any]) -> bytes:
    """What format 1's SHA-256 hashes before the payload."""
    rest = {k: v for k, v in header.items() if k != "sha256"}
    return json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()


def _v2_sealed(text: bytes) -> bytes:
    """What format 2's SHA-256 hashes before the payload: ``text`` with its digest digits as "0"."""
    end = len(text) - len(DIGEST_TAIL)
    return text[:end - 64] + b"0" * 64 + text[end:]


def signed_message(family: str, rows: bytes, digest: str) -> bytes:
    """What the signature of a device file signs (``tablegen sign``; docs/device-format.md): ``SIGNED``,
    then ``family <family>``, ``rows <SHA-256 of the header's rows as written>`` and ``sha256
    <the file's digest>``, one a line, so that it vouches for the file as that mechanism only."""
    return (SIGNED + b"family " + family.encode() + b"\nrows " + hashlib.sha256(rows).hexdigest().encode()
            + b"\nsha256 " + digest.encode())


def member_text(text: bytes, key: str) -> bytes:
    """The bytes of member ``key``'s value as written in ``text``, a header read (one strict JSON
    object holding ``key``): what the C reader finds there, without re-serialising."""
    s, decoder = text.decode(), json.JSONDecoder()
    at = _SPACE.match(s).end()  # at "{", then at each "," before a member
    while True:
        name, at = json.decoder.scanstring(s, _SPACE.match(s, at + 1).end() + 1)
        start = _SPACE.match(s, _SPACE.match(s, at).end() + 1).end()  # past ":"
        end = decoder.raw_decode(s, start)[1]
        if name == key:
            return s[start:end].encode()
        at = _SPACE.match(s, end).end()


def encode(header: dict[str, Any], payload: bytes) -> bytes:
    """The bytes of a device file (format 2) with ``header`` (its ``sha256`` key, if any, replaced)
    and ``payload``: the header as compact JSON with ``sha256`` last, sealed by ``header_sha256``."""
    sealed = {k: v for k, v in header.items() if k != "sha256"}
    sealed["sha256"] = "0" * 64
    text = json.dumps(sealed, separators=(",", ":"), allow_nan=False).encode()
    end = len(text) - len(DIGEST_TAIL)
    text = text[:end - 64] + header_sha256(text, payload).encode() + text[end:]
    return MAGIC + struct.pack("<I", len(text)) + text + payload


def digest_in(text: bytes) -> str | None:
    """The 64 lowercase hex digits a format-2 header ends with (None if it does not end so)."""
    end = len(text) - len(DIGEST_TAIL)
    digits = text[end - 64:end]
    if (text[end:] != DIGEST_TAIL or text[end - 64 - len(DIGEST_KEY):end - 64] != DIGEST_KEY
            or not all(c in b"0123456789abcdef" for c in digits)):
        return None
    return digits.decode()


HEADER_KEYS = {"family": str, "rows": list, "eps0_monotone": list, "eps0": list, "n": list, "delta": list,
               "shape": list, "dtype": str, "sha256": str}  # an eps0 file's; a sigma file's: ``required_keys``


def axis_of(header: dict[str, Any]) -> str:
    """The first axis of a parsed header: its ``axis`` in format 3, "eps0" in formats 1 and 2 (which
    know no other)."""
    return header.get("axis") if header.get("format") == FORMAT_AXIS else "eps0"


def required_keys(header: dict[str, Any]) -> dict[str, type]:
    """The keys a header of its format and first axis must hold, with their JSON types: ``HEADER_KEYS``
    (format 3: and ``axis``); a sigma file holds ``sigma`` in place of ``eps0`` and ``eps0_monotone``."""
    if header.get("format") != FORMAT_AXIS:
        return HEADER_KEYS
    keys = {"axis": str, **HEADER_KEYS}
    if header.get("axis") == "sigma":
        keys = {("sigma" if k == "eps0" else k): v for k, v in keys.items() if k != "eps0_monotone"}
    return keys


def _check_header(path: str, header: dict[str, Any]) -> None:
    """Every header key present with its type, axes of finite numbers strictly increasing in
    their domain; DeviceFileError naming the key."""
    if axis_of(header) not in AXES:
        raise DeviceFileError(f"{path}: refused, header key 'axis' is {header.get('axis')!r}, not one of "
                              f"{', '.join(AXES)}")
    for key, kind in required_keys(header).items():
        if not isinstance(header.get(key), kind):
            raise DeviceFileError(f"{path}: refused, header key {key!r} is missing or not a {kind.__name__}")
    if not all(isinstance(r, dict) for r in header["rows"]) or not all(
            isinstance(v, bool) for v in (header["eps0_monotone"] if axis_of(header) == "eps0" else [])):
        raise DeviceFileError(f"{path}: refused, header keys 'rows' / 'eps0_monotone' malformed")
    rows = [canonical(r) for r in header["rows"]]
    if len(set(rows)) != len(rows):  # answered from the first copy here and the last by open_table: refused
        twice = next(r for r in rows if rows.count(r) > 1)
        raise DeviceFileError(f"{path}: refused, header key 'rows' names the same parameters twice ({twice})")
    low = {axis_of(header): 0.0, "n": 1.0, "delta": 0.0}
    for key, lowest in low.items():
        axis = header[key]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in axis)
        if not (numbers and axis and all(a < b for a, b in zip(axis, axis[1:], strict=False))
                and axis[0] >= lowest and (axis[0] > 0 or key == "n") and (key != "delta" or axis[-1] < 1)
                and (key != "sigma" or SIGMA_MIN <= axis[0] <= axis[-1] <= SIGMA_MAX)):
            raise DeviceFileError(f"{path}: refused, header axis {key!r} is not finite numbers strictly increasing "
                                  "in its domain")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_device(path: str, verified: bool = True, expect: tuple[str, dict[str, Any] | None] | None = None
                ) -> DeviceTable:
    """Parse and check a device file (standard library only): magic, a header of at most
    ``MAX_HEADER_BYTES`` in strict JSON, format, every header key, the file's size (the one its header
    gives, at most ``MAX_FILE_BYTES``: checked before the payload is read), checksum; a row's values
    are checked before its first answer (``DeviceTable.eps``).

    ``expect`` = (family, parameters): the mechanism the caller answers.  A file of another family,
    or without a row of these parameters (None: any row of the family), is refused (DeviceFileError:
    "another mechanism"), and the file answers that row only.  A checksum proves the file intact, not
    who wrote it: with ``verified`` (the default) the file is answered from only where
    ``lookup.trust.origin.provenance`` vouches for its SHA-256 (shipped, built here by ``tablegen export``,
    signed by a trusted key: a signature of ``signed_message``, which binds the family and rows, or
    verified here), asked before the payload is read, else DeviceFileError naming the four ways;
    ``verified=False`` reads it with ``DeviceTable.certified`` False (its answers are not certified)."""
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        text = _header_text(path, f, info.st_size if stat.S_ISREG(info.st_mode) else -1)
        header = _parse_header(path, text)
        count = _check_layout(path, header, len(text), info.st_size)
        expected = _expected_row(path, header, expect)
        table = DeviceTable(header, array("f"), array("f"), text=text, expected=expected)
        provenance = _provenance(path, header["sha256"], verified, table.signed_message())
        sealed = hashlib.sha256(_v1_sealed(header) if header["format"] == 1 else _v2_sealed(text))
        table.upper = _read_values(path, f, count, sealed)
        table.lower = _read_values(path, f, count, sealed)
        if f.read(1):
            raise DeviceFileError(f"{path}: refused, it grew while it was read")
    if sealed.hexdigest() != header["sha256"]:
        raise DeviceFileError(f"{path}: refused, header and payload do not match their SHA-256 "
                              "(corrupted or modified)")
    table.provenance, table.certified = provenance, provenance != "unverified"
    return table


def read_header(path: str) -> dict[str, Any]:
    """The checked header of the device file at ``path`` (steps 1-6 of docs/device-format.md: magic,
    length, strict JSON, format, keys, axes), its payload not read: what a caller asks before choosing
    how to answer from the file (``axis_of``); DeviceFileError as ``read_device``."""
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        return _parse_header(path, _header_text(path, f, info.st_size if stat.S_ISREG(info.st_mode) else -1))


def _header_text(path: str, f: BinaryIO, size: int) -> bytes:
    """The header of the open device file ``f`` of ``size`` bytes (-1: not a regular file), read after
    its magic and length are checked (at most ``MAX_HEADER_BYTES``, within the file)."""
    preamble = f.read(12) if size >= 12 else b""
    if len(preamble) < 12 or preamble[:8] != MAGIC:
        raise DeviceFileError(f"{path}: not a shuffle-eps device file (bad magic)")
    (length,) = struct.unpack_from("<I", preamble, 8)
    if length > MAX_HEADER_BYTES:
        raise DeviceFileError(f"{path}: refused, a header of {length} bytes, more than the {MAX_HEADER_BYTES} "
                              "this reader reads")
    text = f.read(length) if 12 + length <= size else b""
    if len(text) < length:
        raise DeviceFileError(f"{path}: refused, truncated (a header of {length} bytes, {size - 12} follow)")
    return text


def _parse_header(path: str, text: bytes) -> dict[str, Any]:
    """The header ``text`` as strict JSON, of a format read here, its digest where format 2 puts it,
    every key present with its type (``_check_header``)."""
    try:
        header = json.loads(text.decode(), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise DeviceFileError(f"{path}: malformed header") from None
    fmt = header.get("format") if isinstance(header, dict) else None
    if isinstance(fmt, bool) or fmt not in FORMATS:
        raise DeviceFileError(f"{path}: unsupported format {fmt!r} (this reader: {', '.join(map(str, FORMATS))})")
    if fmt != 1 and (digest_in(text) is None or header.get("sha256") != digest_in(text)):
        raise DeviceFileError(f"{path}: refused, the header does not end with its SHA-256 "
                              '(,"sha256":"<64 lowercase hex digits>"})')
    _check_header(path, header)
    return header


def _check_layout(path: str, header: dict[str, Any], length: int, size: int) -> int:
    """The number of cells R E N D, where ``shape`` and ``dtype`` match the axes and rows and the file's
    ``size`` is the one its header (of ``length`` bytes) gives, 12 + H + 8 R E N D, at most ``MAX_FILE_BYTES``."""
    shape = header["shape"]
    axes = [len(header["rows"]), len(header[axis_of(header)]), len(header["n"]), len(header["delta"])]
    if (not all(type(v) is int for v in shape) or shape != axes or header.get("dtype") != "<f4"
            or (axis_of(header) == "eps0" and len(header["eps0_monotone"]) != len(header["rows"]))):
        raise DeviceFileError(f"{path}: header shape {shape} or dtype does not match its axes {axes}")
    count = math.prod(shape)
    if 12 + length + 8 * count > MAX_FILE_BYTES:
        raise DeviceFileError(f"{path}: refused, its header gives {12 + length + 8 * count} bytes, more than the "
                              f"{MAX_FILE_BYTES} this reader reads")
    if size != 12 + length + 8 * count:
        raise DeviceFileError(f"{path}: refused, {size} bytes where its header gives {12 + length + 8 * count} "
                              f"(a payload of {8 * count} bytes)")
    return count


def _expected_row(path: str, header: dict[str, Any], expect: tuple[str, dict[str, Any] | None] | None
                  ) -> int | None:
    """The row of the mechanism ``expect`` = (family, parameters) in the file (None where its
    parameters are None, or no ``expect``); DeviceFileError where the file is another mechanism's."""
    if expect is None:
        return None
    family, params = expect
    rows = [canonical(p) for p in header["rows"]]
    if header["family"] != family or (params is not None and canonical(params) not in rows):
        want = family if params is None else f"{family} {canonical(params)}"
        raise DeviceFileError(f"{path}: refused, a device file for another mechanism ({header['family']} "
                              f"{' '.join(rows)}), not for {want}")
    return None if params is None else rows.index(canonical(params))


def _read_values(path: str, f: BinaryIO, count: int, sealed: Any) -> array:
    """``count`` float32 values of ``f`` (little-endian in the file), their bytes hashed into ``sealed``."""
    values = array("f")
    try:
        values.fromfile(f, count)
    except EOFError:
        raise DeviceFileError(f"{path}: refused, truncated while it was read") from None
    sealed.update(values)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def _provenance(path: str, digest: str, verified: bool, message: bytes) -> str:
    """Why the device file with ``digest`` is trusted (``lookup.trust.origin.provenance``; a signature must sign
    ``message``); "unverified" where not ``verified`` (not asked: the standard library alone reads it
    then), DeviceFileError where nothing vouches for it."""
    if not verified:
        return "unverified"
    from lookup.trust import origin as trust

    try:
        how, why = trust.provenance(path, digest, message)
    except ValueError as err:  # a trusted key's signature that does not verify, an unreadable key
        raise DeviceFileError(str(err)) from None
    if how is None:
        raise DeviceFileError(f"{path}: refused, nothing vouches for it ({why}). A device file is answered from only "
                              f"if it was {trust.WAYS}")
    return how


def check_row(table: DeviceTable, r: int) -> None:
    """Row r's stored values against ``lookup.store.checks.check_row``'s invariants (the same
    comparisons in float64, standard library only): eps finite and in [0, eps0 (1 + CAP_RTOL)]
    (a sigma file: in [0, inf), the Gaussian has no eps0), lower bounds NaN or in [0, eps], eps
    monotone as the exact eps up to MONOTONE_RTOL (non-decreasing in eps0 for eps0-monotone rows,
    non-increasing in sigma, n and delta); DeviceFileError naming the first failing cell."""
    _, n_eps0, n_n, n_delta = table.shape
    h, first = table.header, table.axis
    base = r * n_eps0 * n_n * n_delta
    upper, lower = table.upper[base:base + n_eps0 * n_n * n_delta], table.lower[base:base + n_eps0 * n_n * n_delta]

    def refuse(i: int, what: str) -> None:
        e, rest = divmod(i, n_n * n_delta)
        j, d = divmod(rest, n_delta)
        raise DeviceFileError(f"refused, {h['family']} row {canonical(h['rows'][r])}: {what} at {first} "
                              f"{h[first][e]:g}, n {h['n'][j]:g}, delta {h['delta'][d]:g}; rebuild or re-export it")

    for i, u in enumerate(upper):
        cap = h["eps0"][i // (n_n * n_delta)] * (1 + CAP_RTOL) if first == "eps0" else math.inf
        if not (math.isfinite(u) and 0 <= u <= cap):
            refuse(i, f"eps={u!r} outside [0, eps0]" if first == "eps0" else f"eps={u!r} not finite and >= 0")
    for i, (u, lo) in enumerate(zip(upper, lower, strict=True)):
        if not (math.isnan(lo) or 0 <= lo <= u):
            refuse(i, f"lower bound {lo!r} outside [0, eps={u!r}]")
    strides = ((first, n_n * n_delta, n_eps0, +1 if first == "eps0" else -1), ("n", n_delta, n_n, -1),
               ("delta", 1, n_delta, -1))
    for name, stride, size, sign in strides:
        if name == "eps0" and not h["eps0_monotone"][r]:
            continue
        for i, u in enumerate(upper):
            if (i // stride) % size == size - 1:
                continue
            step = sign * (upper[i + stride] - u)
            if step < -(MONOTONE_RTOL * u + MONOTONE_ATOL):
                refuse(i, f"eps not monotone in {name} ({u!r}, then {upper[i + stride]!r} at the next {name})")
