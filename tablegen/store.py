"""Table stores on disk: the resumable staging store, the published zarr store, its manifest.

The staging store (``OUT.staging/``: the spec's stamp, a chunk per slice, a marker per finished
slice, each carrying an HMAC so that only slices made here are resumed and published), the
published store written row by row beside ``OUT``, verified and swapped in atomically
(``publish_rows``), its compact float32 variables rounded the safe way (``round_float32``), the
manifest, and the build lock (``build_lock``).  docs/tables.md, "Resume, worker failure, atomic
publish" and "Store format"; what the HMACs defend: docs/trust.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import hmac
import json
import math
import os
import secrets
import shutil
import socket
import stat
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lookup.format import MANIFEST, SIGNATURE
from lookup.store.manifest import read_manifest
from lookup.store.reader import read_bounded
from lookup.store.table import manifest_mismatches, store_files
from lookup.trust import origin as trust
from lookup.trust.origin import atomic_write  # the one writer of whole files (exclusive temporary, renamed)
from tablegen import SAME_CERTIFIED_EPS

CELLS = "cells.zarr"
VARIABLES = ("eps", "eps_lower")
CERTIFIED_ROUNDING = {"eps": True, "eps_lower": False}  # variable -> rounded up (True) or down
# 12 of float32's 23 mantissa bits: a certified eps moves up by less than 2^-12 = 0.024% of itself
# (a tenth of the engine's 0.2% ladder step), and the store is half the size of plain float32
# (python -m bench table --only store, docs/tables.md)
MANTISSA_BITS = 12
FLOAT32_BITS = 23
N_INNERMOST = (0, 3, 1, 2)  # chunk (mechanism, eps0, n, delta) encoded as (mechanism, delta, eps0, n)


class StoreError(ValueError):
    """A store that is missing, corrupted, or from another spec."""


def staging_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".staging")


STAMP = ("spec_sha256", "engine_version")  # what makes two builds the same build
STAGING_MAC = "shuffle-eps staging"  # begins what a staging HMAC covers (records and cache entries cover other texts)
_PROCESS_KEY = os.urandom(32)  # the staging HMAC's key where no per-user secret can be made (``staging_mac``)


def same_build(stamp: dict[str, Any], header: dict[str, Any]) -> bool:
    """Whether ``stamp`` (a staging stamp or a table's attributes) is of the build ``header`` names."""
    return all(stamp.get(key) == header[key] for key in STAMP)


def up_to_date(out: str | Path, header: dict[str, Any]) -> bool:
    """A table of the build ``header`` is published at ``out`` and no build of it is unfinished: the
    same spec, and the same engine or one whose certified eps are the same (``SAME_CERTIFIED_EPS``:
    the published lower bounds of such an engine are still lower bounds, which ``verify`` checks)."""
    stamp = root_attributes(out)
    engines = {stamp.get("engine_version"), header["engine_version"]}
    same = same_build(stamp, header) or (stamp.get("spec_sha256") == header["spec_sha256"]
                                         and engines <= set(SAME_CERTIFIED_EPS))
    return same and not staging_path(out).exists()


def claim_staging(out: str | Path, header: dict[str, Any], setup: Callable[[Path], None],
                  log: Callable[[str], None] = print) -> Path:
    """The staging directory of ``out``: reopened if it was made here (``made_here``) by the same
    spec and engine (``header``'s spec_sha256 and engine_version), else created (mode 0700),
    prepared by ``setup`` and only then stamped with ``header`` and its HMAC.  A directory without
    an authentic stamp (a kill during ``setup`` or during the removal after a publish, or one
    planted, copied or made under another user's secret) is discarded first, the log saying so."""
    staging = staging_path(out)
    spec_file = staging / "spec.json"
    if made_here(staging):
        old = json.loads(spec_file.read_text())
        if not same_build(old, header):
            raise StoreError(
                f"{staging} was started by another spec or engine version "
                f"(spec {old.get('spec_sha256', '?')[:12]}, engine {old.get('engine_version')}); "
                "remove it or pass --fresh to start over"
            )
        return staging
    if os.path.lexists(spec_file):
        log(f"{staging} was not made here (its stamp has no HMAC of this user's secret, or the directory is not this "
            "user's alone): discarded; every slice staged in it is recomputed")
    _discard(staging)
    staging.mkdir(parents=True, mode=0o700)
    setup(staging)
    atomic_write(spec_file, json.dumps({**header, "mac": staging_mac(_stamp_text(header))}, indent=1, sort_keys=True))
    return staging


def made_here(staging: Path) -> bool:
    """Whether ``staging`` is a directory of this user's alone (not a link, owned by this user,
    writable by no one else) whose stamp carries the HMAC of this user's secret (``lookup.trust.origin``)."""
    try:
        info = os.lstat(staging)
        owned = not hasattr(os, "getuid") or info.st_uid == os.getuid()
        if not (stat.S_ISDIR(info.st_mode) and owned and not info.st_mode & 0o022):
            return False
        stamp = json.loads((staging / "spec.json").read_text())
        return isinstance(stamp["mac"], str) and hmac.compare_digest(staging_mac(_stamp_text(stamp)), stamp["mac"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none, or no build's identity in it
        return False


def _discard(staging: Path) -> None:
    """Remove ``staging`` (a link itself, never what it points to); StoreError where it stays."""
    if staging.is_symlink() or (staging.exists() and not staging.is_dir()):
        staging.unlink()
    shutil.rmtree(staging, ignore_errors=True)
    if os.path.lexists(staging):
        raise StoreError(f"{staging} is not this build's staging and cannot be removed: remove it, then build again")


def _stamp_text(stamp: dict[str, Any]) -> str:
    """What a staging stamp's HMAC covers: the build's identity (``STAMP``)."""
    return json.dumps([STAGING_MAC, "stamp", *(stamp[key] for key in STAMP)])


def slice_mac(stamp: dict[str, Any], cell: tuple[int, int], name: str, values: np.ndarray) -> str:
    """HMAC of the values of variable ``name`` of staged slice ``cell`` of the build ``stamp``
    names: its identity, the slice, the variable, the shape and the SHA-256 of the float64 bytes
    (``staging_mac``)."""
    return staging_mac(_slice_text(stamp, cell, name, values))


def slice_authentic(stamp: dict[str, Any], cell: tuple[int, int], name: str, values: np.ndarray, tag: Any) -> bool:
    """Whether ``tag`` is ``slice_mac`` of these values: computed and staged by this user here."""
    return isinstance(tag, str) and hmac.compare_digest(slice_mac(stamp, cell, name, values), tag)


def staging_mac(text: str) -> str:
    """HMAC-SHA256 of ``text`` with the per-user secret of the trust records (``lookup.trust.origin.secret``),
    or, where none can be made (no writable cache home), a key of this process alone: its own
    slices are then published, and a later build recomputes them."""
    return hmac.new(trust.secret() or _PROCESS_KEY, text.encode(), hashlib.sha256).hexdigest()


def _slice_text(stamp: dict[str, Any], cell: tuple[int, int], name: str, values: np.ndarray) -> str:
    # NaN made canonical: zarr leaves out a chunk equal to its NaN fill value and reads back the
    # standard NaN, whatever NaN bits were written
    values = np.ascontiguousarray(np.where(np.isnan(values), np.nan, values), dtype="<f8")
    return json.dumps([STAGING_MAC, "slice", *(stamp[key] for key in STAMP), [int(i) for i in cell], name,
                       list(values.shape), hashlib.sha256(values.tobytes()).hexdigest()])


def remove_staging(staging: Path) -> None:
    """Remove a staging directory after its publish: the stamp first, so a kill midway leaves a
    directory that the next build empties instead of trusting."""
    (staging / "spec.json").unlink(missing_ok=True)
    shutil.rmtree(staging)


def open_staging(out: str | Path, header: dict[str, Any], shape: tuple[int, ...],
                 log: Callable[[str], None] = print) -> Path:
    """Create (or reopen, if made here by the same spec and engine: ``claim_staging``) the
    staging store of ``out``."""

    def setup(staging: Path) -> None:
        import zarr
        from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec

        (staging / "done").mkdir(exist_ok=True)
        group = zarr.open_group(staging / CELLS, mode="w", zarr_format=3)
        for name in VARIABLES:  # a chunk per slice: two files per task (a file per curve cost seconds a slice)
            group.create_array(name, shape=shape, chunks=(1, 1, *shape[2:]), dtype="f8", fill_value=np.nan,
                               serializer=BytesCodec(), compressors=[ZstdCodec(level=3), Crc32cCodec()])

    return claim_staging(out, header, setup, log)


def finished(staging: Path, n_count: int) -> set[tuple[int, int]]:
    """The (row, eps0) slices whose marker exists (or, in a staging store begun with a marker per
    curve, whose ``n_count`` curves all have one)."""
    done = staging / "done"
    if not done.is_dir():
        return set()
    slices = set()
    for row_eps0 in os.listdir(done):
        parts = row_eps0.split("_")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            continue  # a stray file (.nfs*, editor droppings): not a marker
        markers = os.listdir(done / row_eps0)
        if "all" in markers or sum(n.isdigit() for n in markers) == n_count:
            slices.add((int(parts[0]), int(parts[1])))
    return slices


def write_slice(staging: str | Path, cell: tuple[int, int], eps: np.ndarray, eps_lower: np.ndarray,
                stamp: dict[str, Any]) -> None:
    """Write slice ``cell`` = (row, eps0) whole (both arrays, every n and delta), then its marker
    holding each array's ``slice_mac`` for the build ``stamp`` names."""
    import zarr

    staging = Path(staging)
    r, e = cell
    tags = {}
    for name, values in zip(VARIABLES, (eps, eps_lower), strict=True):
        zarr.open_array(staging / CELLS / name, mode="r+")[r, e] = values
        tags[name] = slice_mac(stamp, cell, name, values)
    marker = staging / "done" / f"{r}_{e}" / "all"
    marker.parent.mkdir(exist_ok=True)
    atomic_write(marker, json.dumps(tags))


def slice_reader(staging: Path, stamp: dict[str, Any]) -> Callable[[str, int, int], np.ndarray]:
    """``read(name, r, e)``: variable ``name`` (n, delta) of finished slice (``r``, ``e``), the
    arrays opened once, as written by this user here for the build ``stamp`` names: values whose
    ``slice_mac`` is not the one their marker holds (staged elsewhere, planted, edited, or a chunk
    lost to a power cut after its marker reached the disk) are refused with StoreError and that
    slice's marker is removed, so the next build recomputes it."""
    import zarr

    arrays = {name: zarr.open_array(staging / CELLS / name, mode="r") for name in VARIABLES}

    def read(name: str, r: int, e: int) -> np.ndarray:
        values = arrays[name][r, e]
        try:
            tag = json.loads(trust.read_small(staging / "done" / f"{r}_{e}" / "all")).get(name)
        except (OSError, ValueError, AttributeError):
            tag = None
        if not slice_authentic(stamp, (r, e), name, values, tag):
            shutil.rmtree(staging / "done" / f"{r}_{e}", ignore_errors=True)
            raise StoreError(f"{staging}: slice {r}_{e} was not staged here (no HMAC of this machine's over its "
                             "values); its marker was removed, run the build again to recompute it")
        return values

    return read


def sealed_slices(staging: Path, stamp: dict[str, Any], n_count: int,
                  log: Callable[[str], None] = print) -> set[tuple[int, int]]:
    """The finished slices (``finished``) whose values this user staged here for the build
    ``stamp`` names (``slice_reader``); the markers of the others are removed, so they are
    recomputed, and the log says how many."""
    read = slice_reader(staging, stamp)
    done, sealed = finished(staging, n_count), set()
    for r, e in sorted(done):
        try:
            for name in VARIABLES:
                read(name, r, e)
        except StoreError:
            continue
        sealed.add((r, e))
    if len(done) > len(sealed):
        log(f"{len(done) - len(sealed)} staged slices not made here: recomputed (no HMAC of this machine's over "
            "their values)")
    return sealed


def root_attributes(out: str | Path) -> dict[str, Any]:
    """The root attributes of the table published at ``out`` (empty if there is none)."""
    try:
        meta = json.loads((Path(out) / "zarr.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta.get("attributes", {})


def lock_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".lock")


@contextlib.contextmanager
def build_lock(out: str | Path, command: str = "") -> Iterator[None]:
    """Hold ``OUT.lock`` while the body runs; StoreError naming the holder if another build has it."""
    lock = lock_path(out)
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:  # never through a link planted at OUT.lock (it would truncate what it points to)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as err:
            raise StoreError(f"cannot open the build lock {lock}: {err.strerror or err} (a symbolic link there is "
                             "refused: remove it)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StoreError(f"{out} is being built by {holder} (lock {lock}); wait for that build to finish, "
                             "or stop it") from None
        if _same_file(fd, lock):  # not a lock file its last holder unlinked after we opened it
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "command": command,
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode())
        yield
    finally:
        lock.unlink(missing_ok=True)  # before the unlock: a build that opened it retries on the new file
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _clear_leftovers(out: Path) -> None:
    """Folders left by an interrupted publish of a dead process on this host (``OUT.publish-PID``
    removed; ``OUT.old-PID``: the old table, put back if the swap stopped between its renames,
    else removed); those of live processes are left alone."""
    for stale in sorted([*out.parent.glob(f"{out.name}.publish-*"), *out.parent.glob(f"{out.name}.old-*")]):
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or (int(pid) != os.getpid() and _process_alive(int(pid))):
            continue
        if stale.is_symlink():  # planted: removed itself, never followed
            stale.unlink()
        elif stale.lstat().st_uid != os.geteuid():  # planted by another account: not ours to remove or restore
            continue
        elif stale.name.startswith(f"{out.name}.old-") and not out.exists() and (stale / MANIFEST).is_file():
            os.rename(stale, out)
        else:
            shutil.rmtree(stale)


def check_replaceable(out: str | Path) -> None:
    """Refuse to build over anything but a published table (never swap away a user's directory)."""
    out = Path(out)
    if out.is_symlink():
        raise StoreError(f"{out} is a symbolic link; give the real path of the table")
    if out.exists() and not (out.is_dir() and (out / MANIFEST).is_file() and (out / "zarr.json").is_file()):
        raise StoreError(f"{out} exists and is not a published table (no {MANIFEST}); choose another --out")


def round_float32(values: np.ndarray, up: bool, bits: int = FLOAT32_BITS) -> np.ndarray:
    """float32 values with ``bits`` mantissa bits, >= (``up``) or <= (not ``up``) the float64 ones.

    The result is the nearest such value in the asked direction, so it never crosses the input
    the unsafe way: for a value x in the normal float32 range it is less than 2^-bits * |x|
    away.  First the float32 cast, moved one step with ``nextafter`` where it went the wrong
    way (``astype`` rounds to nearest, i.e. about half of the values down); then the low
    23 - bits mantissa bits are cleared, and where any was set and the direction is away
    from zero (up for x > 0, down for x < 0) the bit pattern goes up by 2^(23 - bits): for
    floats of one sign consecutive patterns are consecutive values, so this is the next value
    of the coarser grid (carrying into the exponent at a power of two, to inf beyond the
    largest float, both still the safe way).  NaN, +-inf and +-0 are unchanged.
    """
    if not 0 <= bits <= FLOAT32_BITS:
        raise ValueError(f"bits must be in [0, {FLOAT32_BITS}], got {bits}")
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):  # beyond the float32 range: inf (moved back below when rounding down)
        single = values.astype("<f4")
        widened = single.astype(np.float64)
        wrong = widened < values if up else widened > values
        single[wrong] = np.nextafter(single[wrong], np.float32(np.inf if up else -np.inf))
    pattern = single.view("<u4")
    low = np.uint32((1 << (FLOAT32_BITS - bits)) - 1)
    finite = np.isfinite(single)
    away = finite & ((pattern & low) != 0) & ((single > 0) == up)
    pattern[finite] &= ~low
    pattern[away] += low + np.uint32(1)
    return single


def quantization_attributes(up: bool, bits: int) -> dict[str, Any]:
    """The attributes stating a compact variable's rounding (``round_float32`` with ``bits``)."""
    way, side = ("up", ">=") if up else ("down", "<=")
    return {
        "quantization": f"float32 with {bits} mantissa bits, each value rounded {way} from the computed float64 "
                        f"(decoded {side} it, by less than 2^-{bits} of it); NaN, inf and 0 kept",
        "quantization_bits": bits,
        "quantization_rounding": way,
        "quantization_max_relative_cost": 2.0 ** -bits,
    }


def compact(dataset: Any, rounding: dict[str, bool], bits: int = MANTISSA_BITS) -> Any:
    """``dataset`` with each variable of ``rounding`` as float32 rounded to ``bits`` mantissa bits
    (up where True, down where False: ``round_float32``), the rounding stated in its attributes."""
    out = dataset.copy()
    for name, up in rounding.items():
        var = dataset[name]
        out[name] = var.copy(data=round_float32(var.values, up, bits))
        out[name].attrs.update(quantization_attributes(up, bits))
    return out


def _encoding(var: Any, compacted: bool) -> dict[str, Any]:
    """Chunks per mechanism row; compact variables float32 through transpose + blosc, others zstd."""
    from zarr.codecs import BloscCodec, Crc32cCodec, TransposeCodec, ZstdCodec

    chunks = (1, *var.shape[1:]) if var.dims and var.dims[0] == "mechanism" and var.ndim > 1 else var.shape
    if not compacted:
        return {"compressors": [ZstdCodec(level=9), Crc32cCodec()], "chunks": chunks}
    # one blosc block per chunk (blosc's default block of a few hundred kB compresses ~30% worse)
    blosc = BloscCodec(cname="zstd", clevel=6, shuffle="shuffle", typesize=4, blocksize=4 * math.prod(chunks))
    filters = [TransposeCodec(order=N_INNERMOST)] if var.ndim == len(N_INNERMOST) else []
    return {"dtype": "float32", "filters": filters, "compressors": [blosc, Crc32cCodec()], "chunks": chunks}


def encoded_bytes(values: np.ndarray, up: bool, bits: int = MANTISSA_BITS) -> int:
    """Bytes of ``values`` (eps0, n, delta) stored as one row chunk of a compact variable
    (``round_float32``, ``_encoding``'s codecs), encoded in memory."""
    import xarray as xr
    import zarr

    var = xr.Variable(("mechanism", "eps0", "n", "delta"), round_float32(values, up, bits)[None])
    encoding = _encoding(var, compacted=True)
    files: dict[str, Any] = {}
    array = zarr.create_array(zarr.storage.MemoryStore(files), shape=var.shape, chunks=encoding["chunks"],
                              dtype="float32", fill_value=np.nan, filters=encoding["filters"],
                              compressors=encoding["compressors"])
    array[...] = var.values
    return sum(len(data) for key, data in files.items() if key.startswith("c/"))


def publish(dataset: Any, out: str | Path, compact_variables: dict[str, bool] | None = None,
            bits: int = MANTISSA_BITS, sign_key: str | Path | None = None) -> str:
    """Write ``dataset`` beside ``out``, add the manifest (and its signature by ``sign_key``,
    ``lookup.store.signing.sign``), verify, and swap it in atomically; the variables of
    ``compact_variables`` are written compact (``compact`` with ``bits``).  Returns the
    published table's digest (``lookup.trust.origin.listing_digest`` of the manifest written)."""
    compacted = compact_variables or {}
    if compacted:
        dataset = compact(dataset, compacted, bits)
    return _publish_with(out, lambda tmp: _write_dataset(dataset, tmp, compacted), sign_key)


def publish_rows(template: Any, out: str | Path, read_slice: Callable[[str, int, int], np.ndarray],
                 rounding: dict[str, bool], bits: int = MANTISSA_BITS, sign_key: str | Path | None = None) -> str:
    """``publish`` of a table whose variables of ``rounding`` (mechanism, eps0, n, delta) are
    streamed: ``template`` holds them as lazy (dask) arrays, never computed; each mechanism row
    is filled from ``read_slice(name, r, e)`` (float64, (n, delta)), rounded slice by
    slice into one float32 row (``round_float32``, so the bytes are those ``publish`` writes) and
    written as its chunk.  Memory: one row of one variable (4 bytes x eps0 x n x delta) and the
    codecs' copies of it, whatever the number of rows."""
    import dask.array

    template = template.copy()
    for name, up in rounding.items():
        var = template[name]
        template[name] = var.copy(data=dask.array.zeros(var.shape, chunks=(1, *var.shape[1:]), dtype="f4"))
        template[name].attrs.update(quantization_attributes(up, bits))

    def write(tmp: Any) -> None:
        import zarr

        _write_dataset(template, tmp, rounding)  # coordinates and metadata; lazy variables left unwritten
        rows, eps0 = template[next(iter(rounding))].shape[:2]
        for name, up in rounding.items():
            array = zarr.open_array(tmp, path=name, mode="r+")
            row = np.empty(array.shape[1:], dtype="<f4")
            for r in range(rows):
                for e in range(eps0):
                    row[e] = round_float32(read_slice(name, r, e), up, bits)
                array[r] = row

    return _publish_with(out, write, sign_key)


def _write_dataset(dataset: Any, tmp: Any, compacted: dict[str, bool]) -> None:
    """``dataset`` to a new zarr v3 store ``tmp`` (a path or a zarr store; lazy variables:
    metadata only), ``_encoding``."""
    encoding = {name: _encoding(var, name in compacted) for name, var in dataset.variables.items()}
    with warnings.catch_warnings():
        # zarr warns that consolidated metadata is not (yet) in the v3 spec; we consolidate on purpose
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        dataset.to_zarr(tmp, mode="w-", encoding=encoding, consolidated=True, zarr_format=3, compute=False)


class PrivateFolder:
    """A new folder beside ``out`` that only this account can enter (``tempfile.mkdtemp``: mode
    0700, a random name ``OUT.publish-RANDOM-PID``), held open by descriptor from its creation: every
    file and subfolder is made relative to that descriptor (``O_CREAT | O_EXCL | O_NOFOLLOW``
    temporaries, renamed; each subfolder opened without following links and checked to be this
    account's, writable by no one else), never through the path, so a folder swapped in under its
    name by someone who can write the parent receives nothing.  ``written`` holds the SHA-256 of
    the bytes of each file written, computed in memory, never read back."""

    def __init__(self, out: Path) -> None:
        import tempfile

        self.path = Path(tempfile.mkdtemp(prefix=f"{out.name}.publish-", suffix=f"-{os.getpid()}", dir=out.parent))
        self.written: dict[str, str] = {}
        self._dirs: dict[str, int] = {}
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as err:
            raise StoreError(f"{self.path}: the folder made to publish in was replaced at once ({err})") from None
        self._dirs[""] = self.fd
        try:
            _check_private(self.fd, self.path, private=True)
        except StoreError:
            os.close(self.fd)  # not ours: left where it is
            raise
        self.key = secrets.token_hex(16)
        _FOLDERS[self.key] = self

    # zarr, xarray and dask copy or pickle the store that holds this folder: every copy is this one
    def __copy__(self) -> PrivateFolder:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> PrivateFolder:
        return self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _open_folder, (self.key,)

    def _folder(self, rel: str) -> int:
        """The descriptor of subfolder ``rel`` (made where missing), each component this account's."""
        if rel in self._dirs:
            return self._dirs[rel]
        head, _, name = rel.rpartition("/")
        parent = self._folder(head)
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        self._dirs[rel] = fd
        _check_private(fd, self.path / rel, private=False)
        return fd

    def write(self, rel: str, data: bytes, listed: bool = True) -> None:
        """Write ``data`` as ``rel`` (all or nothing, replacing an earlier write of it); with
        ``listed``, its SHA-256 is what the manifest will list."""
        if not rel or rel.startswith("/") or any(part in ("", ".", "..") for part in rel.split("/")):
            raise StoreError(f"refusing to write {rel!r} outside the publish folder")
        head, _, name = rel.rpartition("/")
        folder = self._folder(head)
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o644, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
        if listed:
            self.written[rel] = hashlib.sha256(data).hexdigest()

    def delete(self, rel: str) -> None:
        """Remove file ``rel``, or every file written under folder ``rel``."""
        for key in [key for key in self.written if key == rel or key.startswith(rel.rstrip("/") + "/")]:
            head, _, name = key.rpartition("/")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self._folder(head))
            del self.written[key]

    def still_here(self, path: Path) -> bool:
        """Whether ``path`` names this folder (not one swapped in under its name)."""
        try:
            seen = os.lstat(path)
        except OSError:
            return False
        mine = os.fstat(self.fd)
        return (seen.st_dev, seen.st_ino) == (mine.st_dev, mine.st_ino) and stat.S_ISDIR(seen.st_mode)

    def close(self) -> None:
        _FOLDERS.pop(self.key, None)
        for fd in self._dirs.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._dirs.clear()


_FOLDERS: dict[str, PrivateFolder] = {}  # the open publish folders of this process, by key


def _open_folder(key: str) -> PrivateFolder:
    """The open ``PrivateFolder`` of ``key`` (a copy of it, unpickled, is the folder itself)."""
    try:
        return _FOLDERS[key]
    except KeyError:
        raise StoreError("a publish folder was used outside the process or publish that made it") from None


def _check_private(fd: int, where: Path, private: bool) -> None:
    """Refuse a folder not owned by this account, writable by others (or, ``private``, enterable)."""
    seen = os.fstat(fd)
    others = 0o077 if private else 0o022
    if seen.st_uid != os.geteuid() or seen.st_mode & others:
        raise StoreError(f"{where}: the folder to publish in is not this account's alone (owner {seen.st_uid}, "
                         f"mode {stat.S_IMODE(seen.st_mode):04o}): was it replaced? nothing published")


def _written_store(folder: PrivateFolder) -> Any:
    """A zarr ``LocalStore`` at ``folder.path`` whose writes go through ``folder`` (by descriptor,
    hashed in memory); reads, used to verify, go through the path (any other way zarr may write
    is caught there: a file not written through ``folder`` is refused)."""
    import asyncio

    from zarr.storage import LocalStore

    class WrittenStore(LocalStore):
        async def _set(self, key: str, value: Any, exclusive: bool = False) -> None:
            if not self._is_open:
                await self._open()
            self._check_writable()
            if exclusive and key in folder.written:
                raise FileExistsError(key)
            await asyncio.to_thread(folder.write, key, value.to_bytes())

        def set_sync(self, key: str, value: Any) -> None:
            self._ensure_open_sync()
            self._check_writable()
            folder.write(key, value.to_bytes())

        async def delete(self, key: str) -> None:
            self._check_writable()
            folder.delete(key)

        def delete_sync(self, key: str) -> None:
            self._check_writable()
            folder.delete(key)

        async def delete_dir(self, prefix: str) -> None:
            self._check_writable()
            folder.delete(prefix)

        def with_read_only(self, read_only: bool = False) -> Any:
            return WrittenStore(self.root, read_only=read_only)

    return WrittenStore(folder.path)


def _publish_with(out: str | Path, write: Callable[[Any], None], sign_key: str | Path | None) -> str:
    """Run ``write`` on a zarr store in a new folder beside ``out`` that only this account can
    enter (``PrivateFolder``: written by descriptor, each file hashed as written), add the manifest
    of those digests (and the signature of their listing), verify what is on disk against them,
    open the folder to readers (0755) and swap it in atomically; the folder is removed if any step
    fails.  Returns the digest of the listing written: computed from the bytes written, in memory,
    never read back, so a folder or file swapped in by someone who can write beside ``out`` is
    refused here (its files differ from the listing) and, published, is vouched for by nothing."""
    from lookup.format import listing_digest

    out = Path(out)
    _clear_leftovers(out)
    check_replaceable(out)
    folder = PrivateFolder(out)
    tmp = folder.path
    try:
        write(_written_store(folder))
        listed = dict(sorted(folder.written.items()))
        digest = listing_digest(listed)
        folder.write(MANIFEST, "".join(f"{sha}  {rel}\n" for rel, sha in listed.items()).encode(), listed=False)
        unlisted, missing, bad = manifest_mismatches(tmp, listed, _FilesRead(tmp, listed))
        problems = ([f"{rel}: a file this publish did not write" for rel in unlisted]
                    + [f"{rel}: missing" for rel in missing] + [f"{rel}: not the bytes written" for rel in bad])
        problems = problems or check_chunks(tmp)
        if problems:
            raise StoreError(f"the new table failed verification before publishing: {problems[0]}")
        if sign_key is not None:
            from lookup.store.signing import signature_text

            folder.write(SIGNATURE, signature_text(sign_key, digest).encode(), listed=False)  # the digest written
        os.fchmod(folder.fd, 0o755)  # readers may enter now; nothing in it is writable but by this account
        if not folder.still_here(tmp):
            raise StoreError(f"{tmp} was replaced while this build was publishing; nothing published")
        _swap_into_place(tmp, out)
        if not folder.still_here(out):
            raise StoreError(f"{out} is not the folder this build wrote (replaced while publishing); "
                             "it is not recorded as built here")
    except BaseException:
        if folder.still_here(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        folder.close()
    return digest


def write_manifest(store: Path) -> dict[str, str]:
    """Write ``store``'s SHA-256 manifest; returns the listing written (path -> SHA-256)."""
    listed = {rel: hashlib.sha256((store / rel).read_bytes()).hexdigest() for rel in store_files(store)}
    atomic_write(store / MANIFEST, "".join(f"{digest}  {rel}\n" for rel, digest in listed.items()))
    return listed


def check_manifest(store: str | Path) -> list[str]:
    """Problems found comparing every file of ``store`` with its SHA-256 manifest."""
    store = Path(store)
    if not (store / MANIFEST).is_file():
        return [f"{store}: no {MANIFEST} (not a published table?)"]
    listed = read_manifest(store)
    unlisted, missing, bad = manifest_mismatches(store, listed, _FilesRead(store, listed))
    return ([f"{rel}: file not in the manifest" for rel in unlisted]
            + [f"{rel}: listed in the manifest but missing" for rel in missing]
            + [f"{rel}: SHA-256 does not match the manifest" for rel in bad])


class _FilesRead(Mapping[str, bytes]):
    """The listed files of a store that exist, each read when asked for (one in memory at a time)."""

    def __init__(self, store: Path, listed: dict[str, str]) -> None:
        self.store, self.names = store, {rel: None for rel in listed if (store / rel).is_file()}

    def __getitem__(self, rel: str) -> bytes:
        if rel not in self.names:
            raise KeyError(rel)
        with (self.store / rel).open("rb") as handle:  # a file over its limit is refused unread
            return read_bounded(rel, handle)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def check_chunks(store: str | Path) -> list[str]:
    """Decode every chunk of every array (the crc32c codec checks each one)."""
    import zarr

    problems = []
    group = zarr.open_group(store, mode="r")
    for name, array in group.arrays():
        for index in np.ndindex(*array.cdata_shape):
            region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, array.chunks, strict=True))
            try:
                array[region]
            except Exception as err:  # noqa: BLE001 - any decode failure is a corrupted chunk
                problems.append(f"{name} chunk {index}: {type(err).__name__}: {err}")
    return problems


def _swap_into_place(new: Path, out: Path) -> None:
    """Make ``new`` appear at ``out`` in one step; readers see the old or the new table."""
    if not out.exists():
        os.rename(new, out)
        return
    if _exchange(new, out):
        shutil.rmtree(new)  # now holds the old table
        return
    old = out.with_name(out.name + f".old-{os.getpid()}")  # no renameat2: two renames
    os.rename(out, old)
    os.rename(new, out)
    shutil.rmtree(old)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux renameat2 RENAME_EXCHANGE); False if unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):  # kernel or file system without the flag
        return False
    raise OSError(err, f"cannot swap {a} into {b}: {os.strerror(err)}")
