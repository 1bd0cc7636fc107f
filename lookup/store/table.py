"""Open a published table once: check its manifest, read what queries need, make it monotone.

``Table`` holds the axes, the labels and the monotone surfaces ``upper`` (running minima of
``eps``) and ``lower`` (running maxima of ``eps_lower``) that every rule reads by a plain gather,
rows read when first used.  Why the surfaces are safe: docs/lookup.md ("Why each rule is safe");
the store and its lazy, checked reading: docs/tables.md; provenance and ``verified=False``:
docs/trust.md.  A device file (docs/device-format.md) is accepted wherever a table path is.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from lookup.format import canonical_params
from lookup.store import checks
from lookup.store.manifest import MANIFEST, UNLISTED, TableError, read_manifest

ENV_TABLE = "SHUFFLE_EPS_TABLE"


@dataclass
class Table:
    """A loaded table: axes, row keys, monotone upper and lower surfaces."""

    path: str
    families: list[str]
    params: list[dict[str, Any]]
    eps0: np.ndarray
    n: np.ndarray
    delta: np.ndarray
    upper: Surface
    lower: Surface
    attrs: dict[str, Any] = field(default_factory=dict)
    eps0_monotone: np.ndarray | None = None  # per row; False: only grid eps0 are answered
    digest: str = ""  # what identifies its files (lookup.trust.origin.listing_digest, a device file's SHA-256)
    stored_eps: Callable[[int], np.ndarray] | None = None  # row r of eps as stored (before the monotone surface)
    stored_lower: Callable[[int], np.ndarray] | None = None  # row r of eps_lower as stored
    vouched: bool = False  # its provenance established and spot-checked (lookup.trust.origin.vouch)
    provenance: str = ""  # "shipped", "built", "signed", "verified", "unverified" (lookup.trust.origin); "caller"
    # True only once something vouches for its values: lookup.trust.origin (open_table), or the caller of
    # from_arrays(..., vouch=True); False for a table nothing vouches for (made in Python, or opened
    # with verified=False): its answers are labelled "certified": false
    certified: bool = False
    array_attrs: dict[str, dict[str, Any]] = field(default_factory=dict)  # eps and eps_lower's own attributes
    signed: bytes | None = None  # what a signature of it signs, where not trust.SIGNED + digest (a device file's)

    def __post_init__(self) -> None:
        if self.eps0_monotone is None:
            self.eps0_monotone = np.ones(len(self.families), dtype=bool)
        self.axis_lists = (self.eps0.tolist(), self.n.tolist(), self.delta.tolist())  # for bisect
        self._rows = {(f, canonical_params(p)): i for i, (f, p) in enumerate(zip(self.families, self.params,
                                                                                  strict=True))}

    @cached_property
    def lower_every(self) -> list[int] | None:
        """Spec setting ``lower_every`` (the eps0 and n strides of the grid points that carry
        lower bounds), from the certification attribute: parsed once per table."""
        return json.loads(self.attrs.get("certification", "{}")).get("lower_every")

    def row(self, family: str, params: dict[str, Any]) -> int | None:
        """Index of the row of ``family`` with exactly these parameters, None if absent."""
        return self._rows.get((family, canonical_params(params)))

    def labels(self) -> list[str]:
        return [" ".join([f, *(f"{k}={v}" for k, v in sorted(p.items()))])
                for f, p in zip(self.families, self.params, strict=True)]

    def coverage(self) -> dict[str, Any]:
        """What the table answers: rows and axis ranges (for errors, ``lookup info`` and /v1/info):
        the table named by its folder's name and digest, never by where it lives."""
        return {
            "table": Path(self.path).name if self.path else None,
            "digest": self.digest or None,
            "mechanisms": self.labels(),
            "eps0": [float(self.eps0[0]), float(self.eps0[-1]), int(self.eps0.size)],
            "n": [int(self.n[0]), int(self.n[-1]), int(self.n.size)],
            "delta": [float(self.delta[0]), float(self.delta[-1]), int(self.delta.size)],
            "engine_version": self.attrs.get("engine_version"),
            "date_created": self.attrs.get("date_created"),
            "title": self.attrs.get("title"),
        }


def shipped_table(name: str) -> Path:
    """The shipped table ``name`` (e.g. ``default.zarr``): the copy an installed wheel carries in
    ``lookup/_data/``, else ``data/`` of the source checkout (an editable install)."""
    package = Path(__file__).resolve().parents[1]  # lookup/
    installed, checkout = package / "_data" / name, package.parent / "data" / name
    if installed.is_dir() or not (package.parent / "pyproject.toml").is_file():
        return installed
    return checkout


def default_table_path() -> Path:
    """``$SHUFFLE_EPS_TABLE`` or the shipped ``default.zarr``."""
    env = os.environ.get(ENV_TABLE)
    if env:
        return Path(env)
    return shipped_table("default.zarr")


SHIPPED_HINT = ("the shipped table is missing from this installation (reinstall shuffle-eps, or run "
                "`tablegen build` in a source checkout)")


_OPEN: dict[tuple[str, float, str], Any] = {}


def open_table(path: str | Path | Table | None = None, verified: bool = True) -> Table:
    """The table at ``path`` (default: the shipped one), verified and loaded once per process,
    answered from only if ``lookup.trust.origin`` can say where it came from (``Table.provenance``);
    ``verified=False`` opens one nothing vouches for, with ``Table.certified`` False.

    Args:
        path: a table store or device file, an opened ``Table``, or None (``$SHUFFLE_EPS_TABLE``, else
            the shipped table).
        verified: refuse a table nothing vouches for (shipped, built here, signed by a trusted key or
            fully verified here); False opens it with ``certified`` False.

    Returns:
        The ``Table``. Raises ``TableError`` with the reason and the ways to vouch for it.
    """
    if isinstance(path, Table):
        return _vouched(path, verified)
    hint = "build one with `tablegen build`"
    if path is None:
        path = default_table_path()
        hint = (f"it is set by ${ENV_TABLE}: point ${ENV_TABLE} or --table at a table, or {hint}"
                if os.environ.get(ENV_TABLE) else f"{SHIPPED_HINT}; or point ${ENV_TABLE} or --table at a table")
    if os.path.islink(path) and not os.path.exists(path):
        raise TableError(f"{path}: a symbolic link to nothing; {hint}")
    if os.path.isfile(os.path.realpath(path)):
        table = _open_device(os.path.realpath(path), verified)
    else:
        table = open_store(path, _load_table, hint)
    return _vouched(table, verified)


def _vouched(table: Table, verified: bool) -> Table:
    """``table`` once ``lookup.trust.origin.vouch`` has established its provenance (once per table and
    process, again where it was opened unverified and is now wanted verified, or refuted since)."""
    from lookup.trust import origin as trust

    if table.provenance == "caller" and table.certified:
        return table  # from_arrays(..., vouch=True): its caller vouches for it, and no digest names it
    if not table.vouched or (verified and not table.certified) or table.digest in trust.refuted():
        trust.vouch(table, table.digest, verified)
        table.vouched = True
    return table


def open_store(path: str | Path, load: Callable[[str, Any], Any], hint: str) -> Any:
    """``load(path, group)`` of the published store at ``path``, cached per process until the
    store is republished.  ``group`` is a ``lookup.store.reader.StoreGroup`` (files read when first
    used, each verified against the manifest), or for a store that reader does not implement
    a zarr group of the whole store read in one verified pass (``read_verified``)."""
    from lookup.store.reader import Refused, Unsupported, open_group

    real = os.path.realpath(path)
    manifest = Path(real) / MANIFEST
    if not manifest.is_file():
        raise TableError(f"{path}: not a published table (no {MANIFEST}); {hint}")
    key = (real, manifest.stat().st_mtime, load.__qualname__)
    if key not in _OPEN:
        try:
            try:
                group = open_group(Path(real))
            except Unsupported:
                group = MemoryGroup(*read_verified_listing(Path(real)))
            _OPEN[key] = load(real, group)
        except Refused as err:
            raise TableError(f"{path}: refused, {err} (the reading limits of lookup/store/reader.py)") from None
        except TableError:
            raise
        except Exception as err:  # a chunk failing its crc32c, a missing array
            raise TableError(f"{path}: refused, cannot read the table: {err}") from None
    return _OPEN[key]


class MemoryGroup:
    """The zarr group held in ``files`` (relative path -> bytes, verified against ``listed``, the
    manifest listing read in the same pass), opened read-only in memory once its declared shapes
    and chunk sizes are within ``lookup.store.reader``'s limits (``check_declared``)."""

    def __init__(self, files: dict[str, bytes], listed: dict[str, str]) -> None:
        import zarr
        from zarr.core.buffer import cpu
        from zarr.storage import MemoryStore

        from lookup.store.reader import check_declared

        check_declared(files)
        self.listed = listed
        memory = MemoryStore({rel: cpu.Buffer.from_bytes(data) for rel, data in files.items()})
        self._group = zarr.open_group(memory, mode="r", use_consolidated=True)
        self.attrs = self._group.attrs

    def __getitem__(self, name: str) -> Any:
        return self._group[name]

    def __contains__(self, name: str) -> bool:
        return name in self._group


def _open_device(path: str, verified: bool) -> Table:
    """The Table of the device file at ``path``, its provenance asked (``verified``) before its payload is
    read (``read_device``; ``_vouched`` then vouches for it as for a store)."""
    from lookup.device.files import DeviceFileError, read_device

    key = (path, os.stat(path).st_mtime, "device")
    if key not in _OPEN:
        try:
            d = read_device(path, verified=verified)
        except DeviceFileError as err:
            raise TableError(str(err)) from None
        if d.axis != "eps0":  # a Table's first axis is eps0: a sigma file is never read as one
            raise TableError(f"{path}: a device file over sigma (mechanism gaussian) is not a table of eps0; "
                             "it answers lookup.eps('gaussian', ..., table=PATH) (lookup eps --table PATH)")
        shape = d.shape
        upper = np.asarray(d.upper, dtype=float).reshape(shape)
        lower = np.asarray(d.lower, dtype=float).reshape(shape)
        h = d.header
        table = from_arrays(path, [h["family"]] * shape[0], h["rows"], h["eps0"], h["n"], h["delta"],
                            upper, lower, h.get("source", {}), h["eps0_monotone"])
        table.digest, table.signed = h["sha256"], d.signed_message()
        _OPEN[key] = table
    return _OPEN[key]


def read_verified(store: Path, attempts: int = 2) -> dict[str, bytes]:
    """Every file of ``store`` read once into memory and checked against its manifest
    (``read_verified_listing``)."""
    return read_verified_listing(store, attempts)[0]


def read_verified_listing(store: Path, attempts: int = 2) -> tuple[dict[str, bytes], dict[str, str]]:
    """(every file of ``store`` read once into memory, the manifest listing read in the same pass
    and checked against them); the table is then parsed, and its digest taken, from these only, so
    a table published over this one mid-read is either seen whole or detected (and the read
    retried), never mixed.  Symbolic links and listed paths leaving the store are refused."""
    from lookup.store.reader import Refused, read_bounded, safe_relative

    problem = ""
    for _ in range(attempts):
        listed = read_manifest(store)
        files = {}
        for rel in listed:
            if not safe_relative(rel):
                raise TableError(f"{store}: refused, the manifest lists {rel!r}, a path leaving the store")
            target = store / rel
            if target.is_symlink():
                raise TableError(f"{store}: refused, {rel} is a symbolic link (a store holds plain files only)")
            try:
                with open(target, "rb") as handle:  # one at a time, its size asked before it is read
                    files[rel] = read_bounded(rel, handle)
            except OSError:
                pass  # reported as missing below
            except Refused as err:
                raise TableError(f"{store}: refused, {err} (the reading limits of lookup/store/reader.py)") from None
        unlisted, missing, bad = manifest_mismatches(store, listed, files)
        if not (unlisted or missing or bad):
            return files, listed
        problem = (f"{bad[0]} does not match its SHA-256 in the manifest" if bad
                   else f"file set differs from the manifest ({(unlisted + missing)[0]})")
    raise TableError(f"{store}: refused, {problem} (corrupted or modified); rebuild or re-download it")


def store_files(store: Path) -> list[str]:
    """Relative paths of every file of ``store`` except the manifest and its signature, sorted."""
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file() and p.name not in UNLISTED)


def manifest_mismatches(store: Path, listed: dict[str, str],
                        files: dict[str, bytes]) -> tuple[list[str], list[str], list[str]]:
    """(files not in the manifest, listed files not read, files whose SHA-256 differs), sorted."""
    present = set(store_files(store))
    unlisted = sorted(present - set(listed))
    missing = sorted(rel for rel in listed if rel not in present or rel not in files)
    bad = sorted(rel for rel, data in files.items() if hashlib.sha256(data).hexdigest() != listed[rel])
    return unlisted, missing, bad


def _load_table(path: str, group: Any) -> Table:
    """The Table of a store's group: axes and labels read now, ``eps`` and ``eps_lower`` row by
    row when a row is first used (a zarr group, the fallback, is decoded whole here)."""
    from lookup.format import listing_digest
    from lookup.store.reader import StoreGroup

    eps, eps_lower = group["eps"], group["eps_lower"]
    if eps.shape != eps_lower.shape:
        raise TableError(f"{path}: refused, eps {eps.shape} and eps_lower {eps_lower.shape} differ in shape")
    listed = group.listed  # read in the same pass as the files: the digest of what was verified
    if not isinstance(group, StoreGroup):
        eps, eps_lower = eps[...], eps_lower[...]
    table = from_rows(
        path, [str(f) for f in group["family"][...]], [json.loads(str(p)) for p in group["params"][...]],
        group["eps0"][...], group["n"][...], group["delta"][...], eps.shape, eps.__getitem__, eps_lower.__getitem__,
        dict(group.attrs), group["eps0_monotone"][...] if "eps0_monotone" in group else None,
    )
    table.digest = listing_digest(listed)
    table.array_attrs = {name: dict(getattr(group[name], "attrs", {})) for name in ("eps", "eps_lower")}
    return table


def from_arrays(path: str, families: list[str], params: list[dict[str, Any]], eps0: np.ndarray, n: np.ndarray,
                delta: np.ndarray, eps: np.ndarray, eps_lower: np.ndarray, attrs: dict[str, Any],
                eps0_monotone: np.ndarray | None = None, vouch: bool = False) -> Table:
    """A Table from raw arrays (eps: mechanism x eps0 x n x delta): ``from_rows`` of their rows.

    Nothing vouches for arrays made in Python: the table's answers are labelled ``"certified":
    false`` (``Table.certified`` False), unless ``vouch`` is True: **you vouch for these values**
    (each eps is at least the exact eps of the analysis its row names, each lower bound at most
    it); the table is then ``certified`` with provenance ``"caller"``, its answers labelled
    certified on your word alone (never recorded as built or verified: ``tablegen export`` does
    not record a device file made from it)."""
    eps, eps_lower = np.asarray(eps), np.asarray(eps_lower)
    if not np.all(np.isfinite(eps)):
        raise TableError(f"{path}: refused, eps has missing values")
    table = from_rows(path, families, params, eps0, n, delta, eps.shape, eps.__getitem__, eps_lower.__getitem__,
                      attrs, eps0_monotone)
    if vouch:
        table.certified, table.provenance = True, "caller"
    return table


def from_rows(path: str, families: list[str], params: list[dict[str, Any]], eps0: np.ndarray, n: np.ndarray,
              delta: np.ndarray, shape: tuple[int, ...], eps_row: Callable[[int], np.ndarray],
              lower_row: Callable[[int], np.ndarray], attrs: dict[str, Any],
              eps0_monotone: np.ndarray | None = None) -> Table:
    """A Table whose surfaces are made monotone (along eps0 only for rows that are one
    randomizer family in eps0), in float64 (a float32 store widens exactly), row by row when a
    row is first used (``Surface``): row r of each from ``eps_row(r)`` and ``lower_row(r)`` (the
    rows of ``eps`` and ``eps_lower``, eps0 x n x delta), read then.

    The upper surface is capped at its grid eps0: the exact eps never exceeds eps0 (the local
    guarantee; builds cap there too), and a compact store rounds a capped value up past it.
    Capping after the running minima gives the same surface as before them (eps0 grows along
    its axis), and it stays monotone."""
    eps0 = np.asarray(eps0, float)
    mono = np.ones(shape[0], bool) if eps0_monotone is None else np.asarray(eps0_monotone, bool)
    axes = {"eps0": eps0, "n": np.asarray(n, float), "delta": np.asarray(delta, float)}
    with refusing(path):
        checks.check_structure(families, params, axes, shape, attrs, mono)
    labels = [" ".join([f, *(f"{k}={v}" for k, v in sorted(p.items()))]) for f, p in zip(families, params,
                                                                                          strict=True)]

    def surfaces(r: int) -> tuple[np.ndarray, np.ndarray]:
        """Row r's two surfaces from its stored rows (copies: the running values are taken in
        place), checked first (``lookup.store.checks``): a damaged row is refused, never spread."""
        upper = np.array(eps_row(r), dtype=float, order="C")
        lower = np.array(lower_row(r), dtype=float, order="C")
        with refusing(path):
            checks.check_row(labels[r], eps0, upper, lower, bool(mono[r]), axes)
        _running(np.minimum, upper[::-1], mono[r])  # min over eps0' >= eps0, n' <= n, delta' <= delta
        np.minimum(upper, eps0[:, None, None], out=upper)  # capped at eps0
        _running(np.fmax, lower[:, ::-1, ::-1], mono[r])  # max over eps0' <= eps0, n' >= n, delta' >= delta
        return upper, lower

    pair = functools.cache(surfaces)
    return Table(path, families, params, eps0, axes["n"], axes["delta"], Surface(shape, lambda r: pair(r)[0]),
                 Surface(shape, lambda r: pair(r)[1]), attrs, mono, stored_eps=eps_row, stored_lower=lower_row)


@contextlib.contextmanager
def refusing(path: str) -> Iterator[None]:
    """``checks.DamagedTable`` raised in the body as the TableError that refuses ``path``."""
    try:
        yield
    except checks.DamagedTable as damage:
        raise TableError(f"{path}: refused, {damage}; rebuild or re-download it") from None


class Surface(np.lib.mixins.NDArrayOperatorsMixin):
    """A monotone surface (row x eps0 x n x delta) built one row at a time, when the row is
    first indexed: ``s[r]`` and ``s[r, e, j, d]`` with an integer row build row r only (a query
    needs one row; building all 21 rows of the default table at open took about a second);
    any other index, ``np.asarray(s)`` and comparisons build every row."""

    def __init__(self, shape: tuple[int, ...], make: Callable[[int], np.ndarray]) -> None:
        self.shape, self._make, self._rows = tuple(shape), make, {}

    def row(self, r: int) -> np.ndarray:
        r = range(self.shape[0])[r]  # negative rows as numpy counts them; IndexError past the end
        if r not in self._rows:
            self._rows[r] = self._make(r)
        return self._rows[r]

    def __getitem__(self, key: Any) -> Any:
        first, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if isinstance(first, int | np.integer):
            return self.row(int(first))[rest] if rest else self.row(int(first))
        return np.asarray(self)[key]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = np.stack([self.row(r) for r in range(self.shape[0])]) if self.shape[0] else np.zeros(self.shape)
        return whole if dtype is None else whole.astype(dtype)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """Operators and ufuncs (``==``, ``>=``, ``*``, ``np.isnan``...) act on the whole array."""
        inputs = tuple(np.asarray(x) if isinstance(x, Surface) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)


def _running(ufunc: np.ufunc, surface: np.ndarray, along_eps0: bool) -> None:
    """In place: ``ufunc``'s running value along axes 1 (n) and 2 (delta) of one row's
    ``surface`` (a view, reversed where the rule runs the other way), and along axis 0 (eps0)
    where ``along_eps0`` (rows that are one randomizer family in eps0).

    The same values as ``ufunc.accumulate`` along each axis (x[i] = ufunc(x[i-1], x[i]) in
    turn), written as one whole-slice operation per index: about twice as fast on a row of the
    default table, whose short delta axis is innermost."""
    for axis in (0, 1, 2) if along_eps0 else (1, 2):
        moved = np.moveaxis(surface, axis, 0)
        for i in range(1, moved.shape[0]):
            ufunc(moved[i - 1], moved[i], out=moved[i])
