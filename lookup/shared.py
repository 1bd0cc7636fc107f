"""The served table's monotone rows in memory once: written by the server, mapped read-only by its workers.

``lookup serve`` runs a dozen processes that all answer from the same table.  Each used to decode
and make monotone every row it touched (``lookup.table.Surface``: about 5.6 MB per row and surface
for the shipped table, 21 rows, both surfaces: 235 MB), so a refinement worker, which touches every
row as it warms up, held a private copy of the whole table (about 280 of its 364 MB at rest).

Here the server, once it has read and checked every row (``lookup.app._warm``), writes each row's
two surfaces as ``.npy`` files into a private directory (``publish``: ``tempfile.mkdtemp``, mode
0700, named after the server's pid, in ``/dev/shm`` where it is writable and has room, else the
default temporary directory; each file created exclusively, never through a link, and read-only;
``rows.json``, written last, names the table's digest and shape) and answers from read-only maps of
those files itself, its decoded rows freed.  Each worker, given the directory by its pool
(``lookup.pool.worker_start``), answers from a copy of its own opened table whose rows are the same
files mapped read-only (``mapped``; ``np.load(..., mmap_mode="r")``: nothing can write into the
shared pages), each mapped when first used, after checking that the directory is private to this
user and that ``rows.json`` names its own table's digest and shape; otherwise (another table, no
directory, a file that does not read back as that row's shape) it decodes its rows itself, as
before: never an answer from another table's rows.  The values are the server's rows byte for byte
(float64 written and read back as stored), so every answer is the same.

The directory is removed when the application stops (``remove``) and, at the next start, if its
server died without removing it (``remove_stale``: the pid in its name no longer runs).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from lookup.table import Surface, Table

PREFIX = "shuffle-eps-rows-"  # then the server's pid, a dash and mkdtemp's random part
RECORD = "rows.json"  # written last: the table's digest and shape
SHM = Path("/dev/shm")
ROOM = 64 * 2**20  # bytes a place must keep free beyond the rows (a tmpfs that fills up fails the whole machine)
SURFACES = ("upper", "lower")


def places() -> list[Path]:
    """Where the directory may go: ``/dev/shm`` (memory the kernel shares between the processes
    that map a file) where it exists and is writable, then the default temporary directory."""
    shm = [SHM] if SHM.is_dir() and os.access(SHM, os.W_OK | os.X_OK) else []
    return [*shm, Path(tempfile.gettempdir())]


def publish(table: Table) -> Path | None:
    """The directory holding ``table``'s rows (every row built now, if not yet), the table's own
    surfaces then read from it (read-only maps; its decoded rows freed); None, and the table
    unchanged, where no place has room or the table has no digest to name it by."""
    remove_stale()
    if not table.digest:
        return None
    need = 2 * table.upper.shape[0] * _row_bytes(table) + ROOM
    for place in places():
        if _free(place) < need:
            continue
        directory = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=place))  # mode 0700
        try:
            _write(table, directory)
            surfaces = _surfaces(table, _load_all(table, directory))
        except OSError:  # no room after all (another process filled the place): the next place
            remove(directory)
            continue
        except BaseException:
            remove(directory)
            raise
        table.upper, table.lower = surfaces
        release_freed()
        return directory
    return None


def mapped(table: Table, directory: str | Path | None) -> Table:
    """A copy of ``table`` whose rows are read-only maps of the files in ``directory`` (each
    mapped when first used; a row whose file does not read back as its shape is decoded from
    ``table``); ``table`` itself where ``directory`` is None, not private to this user, or not
    written for this table (its digest and shape)."""
    if directory is None or not _written_for(table, Path(directory)):
        return table
    directory = Path(directory)
    fallback = {name: getattr(table, name).__getitem__ for name in SURFACES}

    def load(name: str, r: int) -> np.ndarray:
        try:
            return _load(directory, name, r, table.upper.shape[1:])
        except (OSError, ValueError):
            return fallback[name](r)

    return replace(table, **dict(zip(SURFACES, _surfaces(table, load), strict=True)))


def remove(directory: str | Path) -> None:
    """``directory`` and its files gone (maps of them stay valid until their processes drop them)."""
    shutil.rmtree(directory, ignore_errors=True)


def remove_stale() -> list[Path]:
    """The directories of this user's servers that died without removing theirs, removed."""
    removed = []
    for place in places():
        for entry in place.glob(f"{PREFIX}*"):
            pid = entry.name[len(PREFIX):].split("-", 1)[0]
            if pid.isdigit() and _private(entry) and not _running(int(pid)):
                remove(entry)
                removed.append(entry)
    return removed


def _surfaces(table: Table, load: Callable[[str, int], np.ndarray]) -> tuple[Surface, Surface]:
    """``table``'s two surfaces, row r of each read by ``load(surface name, r)``."""
    upper, lower = (Surface(table.upper.shape, functools.partial(load, name)) for name in SURFACES)
    return upper, lower


def _write(table: Table, directory: Path) -> None:
    """Each row's surfaces as ``<surface>-<row>.npy`` (exclusive, read-only), then ``RECORD``."""
    from lookup.trust import atomic_write

    for r in range(table.upper.shape[0]):
        for name in SURFACES:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            with os.fdopen(os.open(directory / f"{name}-{r}.npy", flags, 0o400), "wb") as handle:
                np.save(handle, np.ascontiguousarray(getattr(table, name)[r], dtype="<f8"), allow_pickle=False)
    record = {"digest": table.digest, "shape": list(table.upper.shape), "dtype": "<f8", "pid": os.getpid()}
    atomic_write(directory / RECORD, json.dumps(record), mode=0o400, durable=False)


def _load_all(table: Table, directory: Path) -> Callable[[str, int], np.ndarray]:
    """Every row mapped now (the server: its directory may be removed before it last answers)."""
    rows = {(name, r): _load(directory, name, r, table.upper.shape[1:])
            for name in SURFACES for r in range(table.upper.shape[0])}
    return lambda name, r: rows[name, r]


def _load(directory: Path, name: str, r: int, shape: tuple[int, ...]) -> np.ndarray:
    """Row ``r`` of surface ``name``: a read-only map of its file (a plain ndarray whose base is the
    ``np.memmap``); ValueError unless it is float64 of ``shape`` in C order."""
    row = np.load(directory / f"{name}-{r}.npy", mmap_mode="r", allow_pickle=False)
    if row.shape != tuple(shape) or row.dtype != np.dtype("<f8") or not row.flags.c_contiguous:
        raise ValueError(f"{directory}/{name}-{r}.npy: {row.dtype} {row.shape}, not the table's row {shape}")
    return np.asarray(row)


def _written_for(table: Table, directory: Path) -> bool:
    """Whether ``directory`` is private to this user and its record names ``table``'s digest and shape."""
    from lookup.trust import read_small

    if not (table.digest and _private(directory)):
        return False
    try:
        record: Any = json.loads(read_small(directory / RECORD))
    except (OSError, ValueError):
        return False
    return (isinstance(record, dict) and record.get("digest") == table.digest
            and record.get("shape") == list(table.upper.shape) and record.get("dtype") == "<f8")


def _private(directory: Path) -> bool:
    """A directory (not a link) of this user that no one else may enter."""
    try:
        info = os.lstat(directory)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: it runs
        return True
    return True


def release_freed() -> None:
    """Memory freed in this process returned to the system (glibc's ``malloc_trim``): its allocator
    keeps freed blocks in its heap (measured: the server's decoded rows, 209 MB, stayed resident
    after they were replaced by maps; 34 MB after this); nothing where the C library has no such call."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def _row_bytes(table: Table) -> int:
    return int(np.prod(table.upper.shape[1:])) * 8


def _free(place: Path) -> int:
    with contextlib.suppress(OSError):
        info = os.statvfs(place)
        return info.f_bavail * info.f_frsize
    return 0
