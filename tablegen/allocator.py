"""glibc's allocator kept from handing the engine's freed arrays back to the kernel at once.

The engine builds and drops arrays of tens of MB many times per slice.  dask's nanny starts
every worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (its ``distributed.nanny.pre-spawn-environ``
default), which also switches off glibc's adaptive thresholds: each large array is then mapped,
zero-filled page by page and unmapped again, and a worker spends about a third of its CPU time in
the kernel (measured: docs/tables.md, "The default table and its slack").  Values are not affected.

The heap kept that way is handed back after each slice (``release_freed_memory``): a worker
under ``dask worker --memory-limit`` otherwise stays above its pause threshold between tasks,
paused for good (a second build on it hung).
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 512 * 2**20  # free heap kept by a process before it is given back
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest allowed value on 64-bit: arrays below come from the heap


def keep_freed_memory() -> bool:
    """Set this process's glibc trim and mmap thresholds (idempotent, microseconds); False where
    the C library has no ``mallopt`` (not glibc) or refuses the values."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this interpreter is linked to
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def release_freed_memory() -> bool:
    """Hand the free heap back to the kernel now (glibc ``malloc_trim(0)``); False where the C
    library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True
