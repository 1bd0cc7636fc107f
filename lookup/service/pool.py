"""The service's worker processes: pebble's ``ProcessPool`` behind a bounded admission count.

pebble times each task from the moment a worker starts it (not while it waits in the queue) and,
past its limit, kills that worker alone: the task's future fails with ``TimeoutError``, the
pool starts a fresh worker, and the tasks queued or running beside it go on.  A worker that
dies (the address-space limit, a crash) fails its own task with ``ProcessExpired``.  So no
task ever fails because of another one, and a full queue is refused before anything is queued
(``Busy``: the service's 503 with Retry-After).

Two kinds of work, each admitted up to its own count: *answers* (live questions only the engine
can answer, a client waiting for each; at most ``queue``) and *background* work (refinements and
eps0 slices, ``lookup/answer/slices.py``, that improve table answers already given; at most
``background``, skipped rather than queued beyond it).  The service gives each kind of work a
pool of its own (live answers and rounds; refinements, a few milliseconds each; eps0 slices,
seconds each), so that none waits behind another, and a CPU priority of its own (``nice``: a
refinement's worker before live work, live work before slices).  Identical tasks in flight
share one future; finished results are kept in an LRU cache keyed by the caller's key.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
from collections.abc import Callable
from typing import Any

from lookup.answer.lru import LRU
from lookup.service.shared import mapped, release_freed
from lookup.store.table import Table, open_table

_WORKER_TABLE: Table | None = None
_WARMING = False  # True while this worker runs its warm-up (worker_start), before it takes any task
NICE = 10  # added to a live worker's niceness (the event loop's is 0)
REFINE_NICE = 2  # a refinement's worker: just below the event loop, well above live work
SLICE_NICE = 15  # an eps0 slice's worker: below live work
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # one core per worker


class Busy(Exception):
    """Live work refused or abandoned: answered 503 with Retry-After."""


def worker_start(table: str | None, memory_mb: int, nice: int = NICE, rows: str | None = None,
                 warm: Callable[[], Any] | None = None, warmed: Any = None) -> None:
    """A worker process: a lower CPU priority than the server's event loop (``nice``: table
    answers and refusals never wait behind an engine computation for the CPU), an address-space
    limit, the table opened once, its rows read-only maps of the server's sealed memory file that
    ``rows`` describes (``lookup.service.shared.Rows.handle``) where it was written for this table and is
    sealed (``lookup.service.shared.mapped``; else decoded here).
    Then, before the worker takes its first task, its warm-up ``warm()`` (the table's rows mapped,
    the engine imported, a first certification per row: ``lookup.service.app._worker_warm``); a failing
    warm-up is no failing worker (the work it would have made fast stays correct, only slower).
    pebble runs this initializer in every worker it starts, a worker restarted later (past a
    task's time limit, after a crash) included, so no worker takes work cold; ``warmed`` (a shared
    counter) counts the workers that finished, which is how the server knows each one did."""
    global _WORKER_TABLE, _WARMING
    os.nice(nice)
    if memory_mb:
        import resource

        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _WORKER_TABLE = mapped(open_table(table), rows)
    if warm is not None:
        _WARMING = True
        try:
            with contextlib.suppress(Exception):
                _trimmed(warm)
        finally:
            _WARMING = False
    if warmed is not None:
        with warmed.get_lock():
            warmed.value += 1


def warming() -> bool:
    """Whether this worker process is running its warm-up (no task of a client yet)."""
    return _WARMING


def worker_table() -> Table | None:
    """The table this worker process opened (``worker_start``)."""
    return _WORKER_TABLE


def _ready() -> int:
    return os.getpid()


def _trimmed(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a worker, then the memory its temporaries freed returned to the system
    (``lookup.service.shared.release_freed``): glibc keeps freed blocks in its heap, so a worker's resident
    memory rose to that of its largest task so far and stayed there (measured, 16 live questions and
    80 refinements in one process: 159 MB of heap after them, 66 MB with this, in the same time; the
    service's live worker at rest after 24 live questions: 145 MB RSS, 173 MB without.
    ``MALLOC_MMAP_THRESHOLD_=131072`` in the workers' environment freed as much, but mapping each
    large array apart took the live questions from 2.2 to 4.4 s)."""
    try:
        return function(*args)
    finally:
        release_freed()


class Pool:
    """pebble's ProcessPool with admission counts, shared in-flight tasks and an LRU of results."""

    def __init__(self, workers: int, queue: int, background: int, cache_size: int, table: str | None,
                 memory_mb: int, nice: int = NICE, warm: Callable[[], Any] | None = None) -> None:
        self.workers, self.queue, self.background = workers, queue, background
        self.table, self.memory_mb, self.nice, self.warm = table, memory_mb, nice, warm
        self.pool: Any = None
        self.started: list[Any] = []
        self.warmed: Any = None  # workers that finished worker_start (their warm-up), restarted ones included
        self.admitted = {"answer": 0, "background": 0}
        self.cache = LRU(cache_size)
        self.inflight: dict[str, asyncio.Future[Any]] = {}
        self.counts: collections.Counter[str] = collections.Counter()  # timeouts, deaths

    def start(self, rows: Any = None) -> None:
        """The workers started, their table's rows mapped from ``rows`` (``lookup.service.shared.publish``,
        a ``Rows``; None: each decodes its own)."""
        import multiprocessing

        from pebble import ProcessPool

        for name, value in THREADS.items():  # read by numpy's libraries when a (spawned) worker imports them
            os.environ.setdefault(name, value)
        context = multiprocessing.get_context("spawn")
        self.warmed = context.Value("i", 0)
        self.pool = ProcessPool(self.workers, initializer=worker_start,
                                initargs=(self.table, self.memory_mb, self.nice, None if rows is None else rows.handle,
                                          self.warm, self.warmed),
                                context=context)
        # start the workers now, not on the first question (each warms up in its initializer first)
        self.started = [self.pool.schedule(_ready) for _ in range(self.workers)]

    def warmed_total(self) -> int:
        """Workers that finished their start and warm-up so far (a restarted one counts again)."""
        return 0 if self.warmed is None else int(self.warmed.value)

    def ready(self) -> bool:
        """Whether every worker has started and finished its warm-up (``worker_start``): each worker
        counts itself once warm, so a pool of N is ready at N, whichever worker took which task.
        A worker restarted later warms up in its own initializer before it takes a task, while the
        others serve: the pool stays ready."""
        return self.pool is not None and self.warmed_total() >= self.workers

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.stop()
            with contextlib.suppress(Exception):
                self.pool.join(timeout=5)
            self.pool = None

    def cached(self, key: str) -> Any:
        """The finished result of ``key`` (None: not computed)."""
        return self.cache.get(key)

    def has_room(self, kind: str) -> bool:
        limit = self.queue if kind == "answer" else self.background
        return self.pool is not None and self.admitted[kind] < limit

    def submit(self, key: str, kind: str, timeout: float, function: Callable[..., Any], *args: Any,
               keep: bool = True) -> asyncio.Future:
        """The (shared) future of ``function(*args)`` in a worker, at most ``timeout`` seconds of
        run time (its result kept in the LRU if ``keep``); ``Busy`` when ``kind``'s places are
        all taken."""
        if key in self.inflight:
            return self.inflight[key]
        if not self.has_room(kind):
            raise Busy(f"all {self.queue} live computation places are taken; retry later" if kind == "answer"
                       else "background places taken")
        self.admitted[kind] += 1
        future = asyncio.wrap_future(self.pool.schedule(_trimmed, args=(function, *args), timeout=timeout))
        self.inflight[key] = future
        future.add_done_callback(lambda done: self._finished(key, kind, keep, done))
        return future

    def _finished(self, key: str, kind: str, keep: bool, future: asyncio.Future) -> None:
        self.admitted[kind] -= 1
        self.inflight.pop(key, None)
        if future.cancelled():
            return
        error = future.exception()
        if error is None and keep:
            self.cache.put(key, future.result())
        elif isinstance(error, TimeoutError):
            self.counts["timeouts"] += 1
        elif type(error).__name__ == "ProcessExpired":
            self.counts["deaths"] += 1

    async def result(self, key: str, kind: str, timeout: float, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``'s result (cached, shared, or computed now); ``Busy`` when refused,
        over ``timeout`` seconds of run time, or when its worker died; the engine's ValueError
        (a bad query) as raised."""
        hit = self.cached(key)
        if hit is not None:
            return hit
        future = self.submit(key, kind, timeout, function, *args)
        try:
            return await asyncio.shield(future)  # a client hanging up does not cancel the shared task
        except TimeoutError:
            raise Busy(f"live computation exceeded {timeout:g} s; retry later") from None
        except MemoryError:
            raise Busy(f"live computation exceeded the {self.memory_mb} MB memory limit") from None
        except Exception as err:
            if type(err).__name__ == "ProcessExpired":
                raise Busy("a live worker died (memory limit?); retry later") from None
            raise
