"""The served table's monotone rows in memory once: written by the server, mapped read-only by its workers.

The server, once it has read and checked every row, writes each row's two surfaces into one
anonymous memory file and seals it (``publish``: no process can write, truncate or grow it, nor lift
the seals); each worker maps it read-only (``mapped``) only if it is that very file, sealed, and
written for its own table's digest and shape, and otherwise decodes its rows itself: never an
answer from another table's rows or from writable pages, and the same answers either way.  Where
the system has no sealed memfd, ``publish`` returns None.  docs/lookup.md, "HTTP endpoint" (the
table in memory once); what the seals defend: docs/trust.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import mmap
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lookup.store.table import Surface, Table

NAME = "shuffle-eps-rows"  # the memfd's name (shown in /proc/PID/maps as /memfd:NAME)
SURFACES = ("upper", "lower")
SEALS = ("F_SEAL_WRITE", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_SEAL")


@dataclass
class Rows:
    """The server's sealed memory file of a table's rows (``publish``)."""

    fd: int
    handle: str  # what a worker is given (``mapped``): JSON of pid, fd, dev, ino, size, digest, shape
    view: mmap.mmap  # the server's own read-only map


def sealing() -> int | None:
    """The four seals' mask where this system can seal a memfd, else None."""
    if not hasattr(os, "memfd_create") or not all(hasattr(fcntl, name) for name in (*SEALS, "F_ADD_SEALS",
                                                                                      "F_GET_SEALS")):
        return None
    return functools.reduce(lambda mask, name: mask | getattr(fcntl, name), SEALS, 0)


def publish(table: Table) -> Rows | None:
    """``table``'s rows (every row built now, if not yet) in a sealed memfd, the table's own
    surfaces then read from it (read-only maps; its decoded rows freed); None, and the table
    unchanged, where the system cannot seal one, there is no room, or the table has no digest."""
    seals = sealing()
    if seals is None or not table.digest:
        return None
    shape, row_bytes = tuple(table.upper.shape), _row_bytes(table)
    size = len(SURFACES) * shape[0] * row_bytes
    fd = os.memfd_create(NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        for r in range(shape[0]):
            for s, name in enumerate(SURFACES):
                _write_all(fd, np.ascontiguousarray(getattr(table, name)[r], dtype="<f8").tobytes(),
                           _offset(r, s, row_bytes))
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        view = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) if size else None
        if view is None or not _sealed(fd, seals):
            raise OSError("the rows could not be sealed")
        rows = _rows_of(view, shape, row_bytes)
        for (name, r), row in rows.items():  # sealed now: what every process reads is what was checked
            if row.tobytes() != np.ascontiguousarray(getattr(table, name)[r], dtype="<f8").tobytes():
                raise OSError(f"row {r} of {name} changed before it was sealed")
    except OSError:  # no room, no sealing, or changed before sealing: each process decodes its own rows
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    info = os.fstat(fd)
    handle = json.dumps({"pid": os.getpid(), "fd": fd, "dev": info.st_dev, "ino": info.st_ino, "size": size,
                         "digest": table.digest, "shape": list(shape), "dtype": "<f8"})
    table.upper, table.lower = _surfaces(table, lambda name, r: rows[name, r])
    release_freed()
    return Rows(fd, handle, view)


def mapped(table: Table, handle: str | None) -> Table:
    """A copy of ``table`` whose rows are read-only maps of the server's sealed memfd described by
    ``handle`` (``Rows.handle``); ``table`` itself where ``handle`` is None, or the file is not the
    one described, not sealed with all four seals, or not written for this table (digest, shape)."""
    view = _open_sealed(table, handle)
    if view is None:
        return table
    rows = _rows_of(view, tuple(table.upper.shape), _row_bytes(table))
    return replace(table, **dict(zip(SURFACES, _surfaces(table, lambda name, r: rows[name, r]), strict=True)))


def remove(rows: Rows | None) -> None:
    """The server's descriptor closed (maps of the file stay valid until their processes drop them)."""
    if rows is not None:
        with contextlib.suppress(OSError):
            os.close(rows.fd)


def _open_sealed(table: Table, handle: str | None) -> mmap.mmap | None:
    seals = sealing()
    if handle is None or seals is None or not table.digest:
        return None
    try:
        record: Any = json.loads(handle)
        size = len(SURFACES) * table.upper.shape[0] * _row_bytes(table)
        if not (isinstance(record, dict) and record.get("digest") == table.digest and record.get("dtype") == "<f8"
                and record.get("shape") == list(table.upper.shape) and record.get("size") == size and size):
            return None
        fd = os.open(f"/proc/{int(record['pid'])}/fd/{int(record['fd'])}", os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    try:
        info = os.fstat(fd)
        if ((info.st_dev, info.st_ino, info.st_size) != (record["dev"], record["ino"], size)
                or not stat.S_ISREG(info.st_mode) or not _sealed(fd, seals)):
            return None
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _sealed(fd: int, seals: int) -> bool:
    try:
        return fcntl.fcntl(fd, fcntl.F_GET_SEALS) & seals == seals
    except OSError:
        return False


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _offset(r: int, s: int, row_bytes: int) -> int:
    return (len(SURFACES) * r + s) * row_bytes


def _rows_of(view: mmap.mmap, shape: tuple[int, ...], row_bytes: int) -> dict[tuple[str, int], np.ndarray]:
    """Each row of each surface: a read-only float64 array of ``shape[1:]`` over ``view``."""
    count = row_bytes // 8
    return {(name, r): np.frombuffer(view, dtype="<f8", count=count, offset=_offset(r, s, row_bytes))
            .reshape(shape[1:]) for r in range(shape[0]) for s, name in enumerate(SURFACES)}


def _surfaces(table: Table, load: Callable[[str, int], np.ndarray]) -> tuple[Surface, Surface]:
    """``table``'s two surfaces, row r of each read by ``load(surface name, r)``."""
    upper, lower = (Surface(table.upper.shape, functools.partial(load, name)) for name in SURFACES)
    return upper, lower


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
