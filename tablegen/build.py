"""The table build: one task per (mechanism, eps0) slice on a dask.distributed cluster.

``build(spec, out)`` computes every slice not finished yet and keeps it in the staging store
(``store.py``), then publishes the table atomically at ``out``, streaming slice by slice (the
client holds one mechanism row at a time, whatever the number of rows), and removes the staging
store.  Killed at any moment, the same call finishes the table with identical values,
recomputing only the slices that had no marker.

Workers need nothing but the package: a task returns its slice (both arrays) with the worker's
package version, engine version and the SHA-256 of the engine's code (``provenance``); the
client refuses a result whose provenance differs from its own (naming the worker, whose later
tasks go to other workers) and writes every accepted slice to its own staging store.  No worker
reads or writes the client's disk, so workers on other hosts, pods or scratch disks, and a
relative ``--out``, all work; a task that raises is retried (``RETRIES``) and a slice that fails
on every try ends the build with one message naming the slice, the worker and its error.  A
build that stops (a signal, a failure, the client killed) leaves no task computing: its futures
are cancelled and a task whose future dask cancelled stops within ``CANCEL_POLL_SECONDS``
(``_stopped_when_cancelled``); a scheduler that goes away mid-build ends it with one line.

A slice is every n and delta of one (mechanism, eps0): ``engine.dense.eps_slice`` at the spec's
resolution, and ``lower_slice`` below it on the n the spec wants lower bounds for, so a cell
equals the engine called directly.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import tablegen
from tablegen import ENGINE_VERSION, __version__, allocator, store
from tablegen.mechanisms import get_mechanism
from tablegen.spec import Row, Spec

IN_FLIGHT_PER_THREAD = 4  # tasks queued per worker thread
RETRIES = 2  # a task that raises runs up to 1 + RETRIES times (dask's retries), then ends the build
CANCEL_POLL_SECONDS = 0.2  # a running slice checks this often whether dask has cancelled its task
CONNECT_SECONDS = 5  # an unreachable --scheduler is reported after this long, before anything is written
STATUS_SECONDS = 30  # no slice finished for this long: the build says what the workers are doing
DRY_RUN_BUDGET = 90.0  # seconds a dry run spends timing its sample (the full spec's within 2 minutes on 2 cores)
# the client's publish (python -m bench table --only publish, docs/cluster.md): peak RSS = CLIENT_BASE_BYTES +
# CLIENT_ROW_COPIES x one float32 row, at least CLIENT_MIN_BYTES; time = float64 bytes of the staging store /
# MERGE_BYTES_PER_SECOND (read, rounded, encoded, hashed for the manifest and decoded again to verify: 4.05 GB
# in 127 s, 2.09 GB in 44 s, 2.50 GB of full.toml's rows in 56 s)
CLIENT_BASE_BYTES = 300e6  # the publishing process with its modules (one row of 32 MB: 302 MiB)
CLIENT_ROW_COPIES = 4  # 2 rows of full.toml's 312 MB: 1374 MiB (2026-11-26, shared 2-core machine)
CLIENT_MIN_BYTES = 600e6  # rows of 32 MB: 556 MiB at 16 rows, 474 MiB at 31
MERGE_BYTES_PER_SECOND = 30e6
# the code a slice's values depend on, digested into every result's provenance (relative to tablegen/)
ENGINE_CODE = ("__init__.py", "engine", "mechanisms", "protocols", "decomposition.py", "limits.py", "validate.py")
REFERENCES = (
    "Su, Cheng, Wang, arXiv:2504.07414 (Theorems 4-5, Table 1); Feldman, McMillan, Talwar: "
    "Feldman-McMillan-Talwar (arXiv:2012.12803) (Theorems 3.1, 3.8); shuffle-eps docs/engine.md"
)


@dataclass(frozen=True)
class Task:
    """What a worker needs for one (mechanism, eps0) slice: every n of the axis.  Plain data,
    cheap to ship; nothing in it refers to the client's disk."""

    slice: tuple[int, int]  # (row, eps0) indices
    family: str
    params: dict[str, Any]
    eps0: float
    ns: tuple[int, ...]
    deltas: list[float]
    lower: tuple[bool, ...]  # per n: lower bounds wanted
    resolution: float
    lower_resolution: float

    @property
    def label(self) -> str:
        return f"{Row(self.family, self.params).label} eps0 {self.eps0:g} (slice {self.slice[0]}_{self.slice[1]})"


@dataclass(frozen=True)
class SliceResult:
    """A computed slice as a task returns it: both arrays (n, delta), the compute seconds, the
    provenance of the code that computed it and the worker that ran it."""

    slice: tuple[int, int]
    eps: np.ndarray
    eps_lower: np.ndarray
    seconds: float
    provenance: dict[str, str]
    worker: str  # as messages name it (``worker_label``)
    address: str = ""  # the worker's address, by which the client leaves it out of later tasks


class BuildInterrupted(Exception):
    """A build stopped by SIGINT or SIGTERM; its finished slices stay in the staging store."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message or f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class BuildFailed(RuntimeError):
    """A build that cannot finish (a slice failing on every try, no worker running this engine);
    the message is one line, the finished slices stay in the staging store."""


class SchedulerUnreachable(ValueError):
    """``--scheduler`` names no dask scheduler that answers (checked before anything is written)."""


class SchedulerLost(BuildFailed):
    """The dask scheduler of a build went away mid-build (its client lost the connection)."""


class SliceError(RuntimeError):
    """A task's error, raised on the worker with the worker's name and the error in one line."""


class SliceCancelled(BaseException):
    """Raised in a running slice's thread once dask has cancelled its task (``_stopped_when_cancelled``);
    a BaseException, so that no ``except Exception`` of the engine swallows it."""


class EngineMismatch(ValueError):
    """A result computed by other code than the client's (``provenance``)."""


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise BuildInterrupted in the main thread while the body runs (dask's
    event loop otherwise swallows them and a stopped build exits 0, like a finished one)."""
    def stop(signum: int, _frame: Any) -> None:
        raise BuildInterrupted(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass(frozen=True)
class Report:
    computed: int
    skipped: int
    seconds: float


def task(spec: Spec, r: int, e: int) -> Task:
    """The task computing slice (row ``r``, eps0 ``e``)."""
    s = spec.settings
    return Task((r, e), spec.rows[r].family, spec.rows[r].params, float(spec.eps0[e]),
                tuple(int(n) for n in spec.n), spec.delta.tolist(),
                tuple(spec.wants_lower(e, j) for j in range(spec.n.size)), s["resolution"], s["lower_resolution"])


def todo(spec: Spec, done: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (row, eps0) slices not in ``done``, the longest first (longest-processing-time order,
    so the stragglers do not start last and set the wall time): those with lower bounds, then
    by eps0 from the largest.  Timed on a stratified sample of ``full.toml`` (docs/cluster.md):
    slices with lower bounds 40-387 s at eps0 5.54 and 71-183 s at 0.83, the others 7-31 s (engine 3;
    engine 4's lower slices take about half that: 28-83 s in a 32-slice dry run here, the others 4-11 s;
    engine 5's 10-28 s, the others 4-13 s)."""
    slices = [(r, e) for r in range(spec.shape[0]) for e in range(spec.shape[1]) if (r, e) not in done]
    lower = [any(spec.wants_lower(e, j) for j in range(spec.n.size)) for e in range(spec.shape[1])]
    return sorted(slices, key=lambda s: (not lower[s[1]], -s[1], s[0]))


def slice_values(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """Certified eps and lower bounds (NaN where not wanted), shape (len(ns), len(deltas)): the
    slice engine's upper bounds, and its lower bounds below them on the wanted n."""
    from tablegen.engine.dense import eps_slice, lower_slice

    upper = eps_slice(task.family, eps0=task.eps0, ns=task.ns, deltas=task.deltas, resolution=task.resolution,
                      **task.params)
    lower = np.full_like(upper, np.nan)
    wanted = np.flatnonzero(task.lower)
    if wanted.size:
        lower[wanted] = lower_slice(task.family, eps0=task.eps0, ns=[task.ns[i] for i in wanted], deltas=task.deltas,
                                    upper=upper[wanted], resolution=task.lower_resolution, **task.params)
    return upper, lower


@functools.cache
def engine_digest() -> str:
    """SHA-256 over the path and bytes of every file of ``ENGINE_CODE`` (the same for every install
    of the same source; any edit of the engine, a mechanism or the version constants changes it)."""
    root = Path(tablegen.__file__).parent
    files = sorted(p for name in ENGINE_CODE
                   for p in ((root / name).rglob("*.py") if (root / name).is_dir() else [root / name]))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def provenance() -> dict[str, str]:
    """What computed a slice in this process: package and engine versions (read from the module
    at call time) and ``engine_digest``."""
    return {"package_version": tablegen.__version__, "engine_version": tablegen.ENGINE_VERSION,
            "engine_sha256": engine_digest()}


def worker_label(name: Any, address: str) -> str:
    """A worker as messages name it: its name (``dask worker --name``) and address, or the address
    alone where it has no name of its own (dask then names it by its address)."""
    return address if name is None or str(name) in ("", address) else f"{name} ({address})"


def _current_worker() -> Any:
    """The dask worker running this task, or None outside a worker."""
    if "distributed" in sys.modules:
        from distributed import get_worker

        try:
            return get_worker()
        except ValueError:  # not in a worker
            pass
    return None


def compute_slice(task: Task) -> SliceResult:
    """Compute a task's slice and return it (never writes anything).  Runs on a worker, whose
    allocator keeps freed arrays during the slice and hands them back after it (``allocator.py``),
    and which stops it once dask cancels its task (``_stopped_when_cancelled``); any error comes
    back as one line naming the worker (``SliceError``)."""
    worker = _current_worker()
    name = "this process" if worker is None else worker_label(worker.name, worker.address)
    allocator.keep_freed_memory()
    try:
        start = time.perf_counter()
        with _stopped_when_cancelled(worker):
            eps, eps_lower = slice_values(task)
        return SliceResult(task.slice, eps, eps_lower, time.perf_counter() - start, provenance(), name,
                           "" if worker is None else worker.address)
    except Exception as err:  # noqa: BLE001 - any error of the engine: one line, retried by dask
        raise SliceError(f"worker {name}: {type(err).__name__}: {err}") from None
    finally:
        allocator.release_freed_memory()


@contextmanager
def _stopped_when_cancelled(worker: Any) -> Iterator[None]:
    """Run the body in a dask ``worker``'s task thread (None: as is) and stop it once dask has
    cancelled its task (the client cancelled it, went away or lost its scheduler): dask cannot
    interrupt a running task, which would compute on for minutes.  A watcher thread reads the
    worker's state of the task every CANCEL_POLL_SECONDS and then raises SliceCancelled in the
    body's thread (``PyThreadState_SetAsyncExc``: at its next bytecode, so between two numpy
    calls of the engine).  A task cancelled and then asked for again (state "resumed", a build
    resubmitting it) runs on.  No exception is left pending once the body has ended."""
    key = _task_key(worker)
    if key is None:
        yield
        return
    body, lock, done, fired = threading.get_ident(), threading.Lock(), threading.Event(), []

    def watch() -> None:
        while not done.wait(CANCEL_POLL_SECONDS):
            state = worker.state.tasks.get(key)
            if state is None or state.state == "cancelled":
                with lock:
                    if not done.is_set():
                        fired.append(_raise_in_thread(body, SliceCancelled))
                return

    watcher = threading.Thread(target=watch, name=f"cancel-watch-{key}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            done.set()
            if fired:
                _raise_in_thread(body, None)  # clears it where the body ended before it was raised
        watcher.join()


def _task_key(worker: Any) -> Any:
    """The key of the task this thread runs on ``worker`` (None: not in a worker's task thread)."""
    try:
        return None if worker is None else worker.get_current_task()
    except (KeyError, AttributeError):  # a worker's other threads; distributed without get_current_task
        return None


def _raise_in_thread(ident: int, exception: type[BaseException] | None) -> int:
    """Raise ``exception`` in the thread ``ident`` at its next bytecode (None: clear one pending)."""
    import ctypes

    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                                      None if exception is None else ctypes.py_object(exception))


def check_provenance(result: SliceResult, expected: dict[str, str]) -> None:
    """EngineMismatch naming the worker and what differs unless ``result`` was computed by the
    ``expected`` code (``provenance``)."""
    got = result.provenance
    if got != expected:
        differs = ", ".join(f"{key} {got.get(key)!s:.12} (client: {want:.12})" for key, want in expected.items()
                            if got.get(key) != want)
        raise EngineMismatch(f"worker {result.worker} runs other code: {differs}; its result for slice "
                             f"{result.slice[0]}_{result.slice[1]} was refused")


def accept(staging: Path, result: SliceResult, stamp: dict[str, Any]) -> None:
    """Write ``result`` to the staging store of the build ``stamp`` names (slice, then its marker
    with the values' HMACs: ``store.write_slice``) once its provenance is this process's own
    (``check_provenance``)."""
    check_provenance(result, provenance())
    store.write_slice(staging, result.slice, result.eps, result.eps_lower, stamp)


def header(spec: Spec) -> dict[str, Any]:
    return {
        "spec": spec.canonical(),
        "spec_sha256": spec.digest(),
        "engine_version": ENGINE_VERSION,
        "package_version": __version__,
    }


def build(spec: Spec, out: str | Path, *, scheduler: str | None = None, workers: int | None = None,
          client: Any = None, progress: bool = True, fresh: bool = False, log: Callable[[str], None] = print,
          sign_key: str | Path | None = None, security: Any = None) -> Report:
    """Build (or finish building) the table of ``spec`` at ``out``.

    ``client``: a connected ``distributed.Client`` of any cluster (dask-jobqueue, the Kubernetes
    operator, ...; left open); else ``scheduler``: address of a running dask scheduler (over TLS:
    a tls:// address and ``security``, a ``distributed.security.Security``, see ``client_security``);
    else a LocalCluster with ``workers`` single-threaded worker processes (default: this machine's
    cores); workers=0 computes in this process without dask.  One build per ``out`` at a time
    (``store.build_lock``).  ``sign_key``: an Ed25519 private key (PEM) that signs the published
    table (``lookup.trust.origin``), also when it is already up to date.
    """
    out = Path(out)
    connect = functools.partial(_connected, client, scheduler, workers, log, security)
    with store.build_lock(out, f"tablegen build --spec {spec.source} --out {out}"):
        return _build_locked(spec, out, connect, workers == 0 and client is None and scheduler is None, progress,
                             fresh, log, sign_key)


def _build_locked(spec: Spec, out: Path, connect: Callable[[], Any], in_process: bool, progress: bool, fresh: bool,
                  log: Callable[[str], None], sign_key: str | Path | None) -> Report:
    store.check_replaceable(out)
    if fresh:
        shutil.rmtree(store.staging_path(out), ignore_errors=True)
    total = spec.curve_count
    if store.up_to_date(out, header(spec)):
        log(f"{out} is up to date (spec {spec.digest()[:12]}): computed 0 curves, skipped {total}")
        if sign_key is not None:
            log(f"signed: {_sign_vouched(out, sign_key)}")
        return Report(0, total, 0.0)
    _import_build_extra(distributed=not in_process, progress=progress)
    start = time.perf_counter()
    left: list[tuple[int, int]] = []
    try:
        with _stopped_by_signals(), connect() as cluster:
            staging = store.open_staging(out, header(spec), spec.shape, log)  # only once the cluster answers
            done = store.sealed_slices(staging, header(spec), spec.n.size, log)  # made here: the others recomputed
            left = todo(spec, done)
            log(f"{spec.slice_count} slices ({total} curves): {len(done)} already finished, {len(left)} to compute")
            # closed before the client: a build that stops cancels its tasks on the cluster
            with closing(_results(cluster, (task(spec, r, e) for r, e in left), spec.digest()[:12], log)) as results:
                for result in progress_bar(results, len(left), progress):
                    accept(staging, result, header(spec))
    except (BuildInterrupted, BuildFailed) as stop:
        kept = len(store.finished(store.staging_path(out), spec.n.size))
        where = f"{kept} of {spec.slice_count} slices are kept in {store.staging_path(out)}: the same command resumes"
        if isinstance(stop, BuildFailed):
            raise BuildFailed(f"{stop}; {where}") from None
        raise BuildInterrupted(stop.signum, f"build stopped by {signal.Signals(stop.signum).name}: {where}") from None
    if len(store.finished(staging, spec.n.size)) != spec.slice_count:
        raise store.StoreError(f"{staging}: some slices have no marker after the build; run it again")
    publish(spec, staging, out, _history(spec, out), sign_key)
    store.remove_staging(staging)
    per_slice = spec.n.size
    report = Report(per_slice * len(left), total - per_slice * len(left), time.perf_counter() - start)
    log(f"published {out}: computed {report.computed} curves, skipped {report.skipped} "
        f"(already finished) in {report.seconds:.1f} s")
    return report


def _sign_vouched(out: Path, sign_key: str | Path) -> Path:
    """Sign the table at ``out`` (already up to date) only where this machine vouches for the digest
    of its files as read and checked against its manifest in one pass (``lookup.trust.origin.vouched_here``:
    shipped, built or fully verified here), so that a copy with the same spec header but other
    values is never signed with the operator's key; ``store.StoreError`` otherwise."""
    from lookup.format import listing_digest
    from lookup.store.signing import sign
    from lookup.store.table import TableError, read_verified_listing
    from lookup.trust.origin import vouched_here

    try:
        digest = listing_digest(read_verified_listing(out)[1])
    except TableError as err:
        raise store.StoreError(f"--sign-key: {err}") from None
    if vouched_here(digest) is None:
        raise store.StoreError(f"--sign-key: {out} is up to date but not shipped, built or fully verified on this "
                               "machine, so it is not signed (its values may not be the spec's): remove it and "
                               f"build it again here, or run `tablegen verify --full {out}` first")
    return sign(out, sign_key, digest)


def publish(spec: Spec, staging: Path, out: Path, history: str, sign_key: str | Path | None = None) -> None:
    """Publish the finished staging store as the table at ``out``, one mechanism row at a time
    (``store.publish_rows``: the client holds one row of one variable, whatever the row count),
    and record it as built on this machine (``lookup.trust.origin.record_built``, by the digest of the
    bytes written) so that ``lookup`` answers from it here: every value published was read with
    its HMAC verified (``store.slice_reader``), i.e. computed by this machine's build."""
    import dask.array

    from lookup.trust.origin import record_built

    chunks = (1, *spec.shape[1:])
    lazy = {name: dask.array.zeros(spec.shape, chunks=chunks, dtype="f8") for name in store.VARIABLES}
    digest = store.publish_rows(dataset(spec, lazy, history), out, store.slice_reader(staging, header(spec)),
                                store.CERTIFIED_ROUNDING, sign_key=sign_key)
    record_built(out, digest)


def client_security(scheduler: str | None, ca_file: str | None = None, cert: str | None = None,
                    key: str | None = None) -> Any:
    """The ``distributed.security.Security`` of a build's client for ``scheduler`` (None where it
    needs none): for a tls:// address the CA (``ca_file``), the client's certificate (``cert``) and
    key (``key``; None where the key is in the certificate's file), or where none of them is given
    dask's own configuration (``distributed.comm.tls.ca-file``, ``distributed.comm.tls.client.cert``
    and ``.key``).  The files are loaded here: a missing or bad one is a ValueError naming it."""
    given = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
    if not str(scheduler or "").startswith("tls://"):
        if any(given.values()):
            raise ValueError(f"{', '.join(k for k, v in given.items() if v)}: only for a --scheduler tls://HOST:PORT "
                             "(a dask scheduler started with --tls-ca-file, --tls-cert and --tls-key)")
        return None
    import ssl

    from distributed.security import Security

    security = Security(tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True) \
        if any(given.values()) else Security(require_encryption=True)
    if not (security.tls_ca_file and security.tls_client_cert):
        raise ValueError(f"--scheduler {scheduler} needs the client's TLS files: --tls-ca-file and --tls-cert (and "
                         "--tls-key unless the key is in the certificate's file), or dask's configuration "
                         "distributed.comm.tls.ca-file and distributed.comm.tls.client.cert")
    try:
        security.get_connection_args("client")  # loads the CA, the certificate and the key
    except (OSError, ssl.SSLError) as err:
        raise ValueError(f"cannot load the client's TLS files (--tls-ca-file {security.tls_ca_file}, --tls-cert "
                         f"{security.tls_client_cert}, --tls-key {security.tls_client_key}): "
                         f"{' '.join(str(err).split())}") from None
    return security


@contextmanager
def _connected(client: Any, scheduler: str | None, workers: int | None, log: Callable[[str], None],
               security: Any = None) -> Iterator[Any]:
    """The dask client of this build: ``client`` itself (left open), one connected to
    ``scheduler`` with ``security`` (SchedulerUnreachable within CONNECT_SECONDS if none answers
    there), one of a new LocalCluster of ``workers`` processes, or None for workers=0 (in this
    process)."""
    if client is not None:
        log(f"dask dashboard: {client.dashboard_link}")
        yield client
        return
    if scheduler is None and workers == 0:
        yield None
        return
    from distributed import Client, LocalCluster

    if scheduler is not None:
        _probe(scheduler, security)
        own = Client(scheduler, timeout=CONNECT_SECONDS, security=security)
        try:
            log(f"dask dashboard: {own.dashboard_link}")
            yield own
        finally:
            with _client_logs_silenced(own.status != "running"):  # the scheduler gone: see SchedulerLost
                own.close()
        return
    cluster = LocalCluster(n_workers=workers or len(_usable_cores()), threads_per_worker=1, processes=True,
                           dashboard_address=":0", silence_logs=40)
    try:
        with Client(cluster, set_as_default=False) as own:
            log(f"dask dashboard: {own.dashboard_link}")
            yield own
    finally:
        cluster.close()


@contextmanager
def _client_logs_silenced(silenced: bool) -> Iterator[None]:
    """dask's client logs silenced while the body runs, where ``silenced``: closing a client whose
    scheduler went away cancels its attempts to reconnect, which it logs as a 30-line traceback
    after the build's own one-line message."""
    import logging

    logger = logging.getLogger("distributed.client")
    level = logger.level
    if silenced:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def _probe(address: str, security: Any = None) -> None:
    """SchedulerUnreachable unless a dask scheduler at ``address`` answers its identity call within
    CONNECT_SECONDS, over TLS with ``security`` for a tls:// address (asked in a thread of its
    own, so a caller's running event loop is no matter; a failed ``Client`` would leave a half-made
    client whose close prints a traceback at exit)."""
    import asyncio
    import concurrent.futures
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.core import rpc

    arguments = security.get_connection_args("client") if security is not None else {}

    async def identity() -> dict[str, Any]:
        async with rpc(address, timeout=CONNECT_SECONDS, connection_args=arguments) as scheduler:
            return await asyncio.wait_for(scheduler.identity(), CONNECT_SECONDS)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            scheme, location = parse_address(address)
            if scheme in ("tcp", "tls"):  # a refused connection at once (dask's connect retries it until its timeout)
                socket.create_connection(parse_host_port(location), timeout=CONNECT_SECONDS).close()
            answer = pool.submit(asyncio.run, identity()).result()
        except Exception as err:  # noqa: BLE001 - refused, timed out, another protocol: all one answer
            answer = {"error": " ".join(str(err).split()) or type(err).__name__}
    if not isinstance(answer, dict) or answer.get("type") != "Scheduler":
        reason = answer.get("error", "not a dask scheduler") if isinstance(answer, dict) else "not a dask scheduler"
        raise SchedulerUnreachable(f"no dask scheduler answered at --scheduler {address} within {CONNECT_SECONDS} s "
                                   f"({reason[:200]}); start one with `dask scheduler` and check the address (tls:// "
                                   "and --tls-* files for a scheduler started with --tls-cert: docs/cluster.md)")


def _usable_cores() -> set[int]:
    import os

    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def _results(client: Any, tasks: Iterator[Task], prefix: str, log: Callable[[str], None]) -> Iterator[SliceResult]:
    """Every task's SliceResult, in this process (``client`` None) or on the cluster."""
    if client is None:
        for t in tasks:
            try:
                yield compute_slice(t)
            except SliceError as err:
                raise BuildFailed(f"slice {t.label} failed: {err}") from None
        return
    yield from _cluster_results(client, tasks, prefix, log)


def _cluster_results(client: Any, tasks: Iterator[Task], prefix: str,
                     log: Callable[[str], None]) -> Iterator[SliceResult]:
    """Run the tasks (made lazily: a cluster spec's would not fit in memory at once) on the
    cluster, a bounded window in flight (resized as workers join), and yield their results.

    A task that raises is retried by dask (``RETRIES``; a task lost with its worker is rerun by
    the scheduler); one failing every try raises BuildFailed naming the slice and the error.  A
    result the client refuses (``accept``: EngineMismatch) is logged, its worker left out of the
    later tasks and the slice resubmitted; BuildFailed when no worker is left; SchedulerLost when
    the scheduler goes away.  Pending tasks are cancelled when the caller stops, however it stops
    (tasks write nothing, and a running one stops: ``_stopped_when_cancelled``)."""
    import queue

    pending: dict[Any, Task] = {}
    completed: queue.Queue[Any] = queue.Queue()  # futures put here by dask as they finish, in any state
    refused: dict[str, str] = {}  # worker address -> why
    tries = itertools.count(1)
    scheduler = client.scheduler.address

    def submit(t: Task, key: str = "") -> None:
        allowed = None
        if refused:
            allowed = [w for w in _workers(client) if w not in refused]
            if not allowed:
                raise BuildFailed("no worker left that runs this client's code: " + "; ".join(refused.values()))
        key = key or f"slice-{prefix}-{t.slice[0]}-{t.slice[1]}"
        future = client.submit(compute_slice, t, key=key, pure=False, retries=RETRIES, workers=allowed)
        pending[future] = t
        future.add_done_callback(completed.put)

    def fill() -> None:
        window = IN_FLIGHT_PER_THREAD * max(sum(client.nthreads().values()), 1)
        for t in itertools.islice(tasks, max(window - len(pending), 0)):
            submit(t)

    try:
        fill()
        while pending:
            try:
                future = completed.get(timeout=STATUS_SECONDS)
            except queue.Empty:
                log(_stalled(client, len(pending)))
                continue
            t = pending.pop(future)
            result = _finished(client, scheduler, future, t)
            try:
                check_provenance(result, provenance())
            except EngineMismatch as err:
                refused.setdefault(result.address or result.worker, str(err))
                log(f"refused: {err}; its later tasks go to the other workers")
                submit(t, f"slice-{prefix}-{t.slice[0]}-{t.slice[1]}-retry{next(tries)}")
                continue
            yield result
            fill()
    except (BuildFailed, BuildInterrupted):
        raise
    except Exception:  # noqa: BLE001 - a call to a scheduler that went away: one line naming it
        if client.status == "running":
            raise
        raise SchedulerLost(f"the dask scheduler {scheduler} went away mid-build") from None
    finally:
        if pending and client.status == "running":
            client.cancel(list(pending), force=True)


def _finished(client: Any, scheduler: str, future: Any, t: Task) -> SliceResult:
    """The result of task ``t``'s ``future``, done in any state; BuildFailed naming the slice and
    the error where it failed on every try (dask's ``retries``: 1 + RETRIES tries), SchedulerLost
    where it was cancelled because the client lost its ``scheduler``."""
    if future.status == "cancelled" and client.status != "running":  # the client cancels them all then
        raise SchedulerLost(f"the dask scheduler {scheduler} went away mid-build")
    if future.status != "finished":
        error = " ".join(str(future.exception()).split()) if future.status == "error" else future.status
        raise BuildFailed(f"slice {t.label} failed on every one of its {1 + RETRIES} tries (retries={RETRIES}): "
                          f"{error}")
    result = future.result()
    future.release()
    return result


def _workers(client: Any) -> dict[str, dict[str, Any]]:
    """Every worker the scheduler knows, by address (recent distributed lists 5 unless asked for all)."""
    try:
        return client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:  # distributed before the n_workers argument: it lists them all
        return client.scheduler_info()["workers"]


def _stalled(client: Any, running: int) -> str:
    """One line on why no slice finished lately: workers connected, paused (over their memory
    limit's pause fraction, ``distributed.worker.memory.pause``) or gone."""
    workers = _workers(client)
    if not workers:
        return f"no slice finished in {STATUS_SECONDS} s: no worker is connected to the scheduler"
    paused = sorted(worker_label(info.get("name"), w) for w, info in workers.items() if info.get("status") == "paused")
    line = f"no slice finished in {STATUS_SECONDS} s: {running} slices submitted, {len(workers)} workers"
    if paused:
        names = ", ".join(paused[:3]) + (", ..." if len(paused) > 3 else "")
        line += f", {len(paused)} paused by dask for memory ({names}): raise their --memory-limit"
    return line


def progress_bar(items: Iterable[Any], total: int, enabled: bool, unit: str = "slice") -> Iterable[Any]:
    """``items`` with a tqdm bar (rate and ETA) on stderr when ``enabled``."""
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, total=total, unit=unit, file=sys.stderr, smoothing=0.05)


def _history(spec: Spec, out: Path) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{now} tablegen build --spec {spec.source} --out {out} (shuffle-eps {__version__})"


def dataset(spec: Spec, values: dict[str, np.ndarray], history: str) -> Any:
    """The published xarray Dataset: variables, coordinates and CF-style attributes."""
    import xarray as xr

    from tablegen.engine import dense
    from tablegen.engine.fourier import FOLD_TOLERANCE, FP_SAFETY

    dims = ("mechanism", "eps0", "n", "delta")
    certification = {
        "rule": "every eps is >= the exact eps of the analysis named by the mechanism (rounded up)",
        "method": "slice",  # tablegen verify recomputes tables of this engine only
        "eps_ladder_ratio": dense.LADDER,
        "resolution": spec.settings["resolution"],
        "lower_resolution": spec.settings["lower_resolution"],
        "lower_every": spec.settings["lower_every"],
        "lower_n_max": spec.settings["lower_n_max"],
        "fold_tolerance": FOLD_TOLERANCE,
        "fp_safety_factor": FP_SAFETY,
    }
    ds = xr.Dataset(
        {
            "eps": (dims, values["eps"], {
                "long_name": "certified upper bound on the shuffled eps (eps, delta)-DP",
                "units": "1", "certified": "upper bound"}),
            "eps_lower": (dims, values["eps_lower"], {
                "long_name": "lower bound on the exact eps of the analysis (NaN: not computed)",
                "units": "1"}),
        },
        coords={
            "mechanism": ("mechanism", np.array([r.label for r in spec.rows], dtype=object),
                          {"long_name": "local randomizer and its parameters"}),
            "family": ("mechanism", np.array([r.family for r in spec.rows], dtype=object),
                       {"long_name": "mechanism family (tablegen registry name)"}),
            "params": ("mechanism", np.array([json.dumps(r.params, sort_keys=True) for r in spec.rows],
                                             dtype=object), {"long_name": "family parameters as JSON"}),
            "eps0_monotone": ("mechanism", np.array([get_mechanism(r.family).eps0_monotone(r.params)
                                                     for r in spec.rows]),
                              {"long_name": "1: eps is non-decreasing in eps0 along the row (rounding eps0 up "
                                            "is safe); 0: the randomizer changes with eps0 (e.g. OLH's default "
                                            "g), only grid eps0 are answered"}),
            "eps0": ("eps0", spec.eps0, {"long_name": "local privacy parameter eps0", "units": "1"}),
            "n": ("n", spec.n.astype(np.int64), {"long_name": "number of users", "units": "1"}),
            "delta": ("delta", spec.delta, {"long_name": "target delta", "units": "1"}),
        },
        attrs={
            "title": spec.title,
            "Conventions": "CF-1.10",
            "institution": "shuffle-eps",
            "source": f"shuffle-eps {__version__} tablegen, engine {ENGINE_VERSION}",
            "history": history,
            "references": REFERENCES,
            "date_created": history.split(" ", 1)[0],
            "spec": json.dumps(spec.canonical(), sort_keys=True),
            "spec_sha256": spec.digest(),
            "engine_version": ENGINE_VERSION,
            "certification": json.dumps(certification, sort_keys=True),
        },
    )
    return ds


def _import_build_extra(distributed: bool, progress: bool) -> None:
    """Import the modules of the ``[build]`` extra this build uses before it writes anything, so
    a missing one stops it at once (the CLI names the extra to install)."""
    import importlib

    for name in ("xarray", "dask.array", *(["distributed"] if distributed else []), *(["tqdm"] if progress else [])):
        importlib.import_module(name)


def dry_run(spec: Spec, out: str | Path | None, sample: int, cores: int, seed: int = 0,
            log: Callable[[str], None] = print, budget: float = DRY_RUN_BUDGET,
            processes: int | None = None) -> dict[str, Any]:
    """Size a build without writing anything: cells, slices still to compute, estimated core-hours
    (``sample`` slices timed, see ``_strata``) with a two-standard-error range, the slowest slice,
    the wall time on ``cores`` including the merge, the staging and published sizes and the
    client's memory during the publish (``_sizes``).

    The sampled slices run on ``processes`` local processes (default: this machine's cores) for
    at most ``budget`` seconds: a slice still running then counts at its time so far (a lower
    bound, flagged), one not started is left out; where no sampled slice finished, nothing is
    estimated (BuildFailed saying so and naming a larger ``--budget``).  Wall time on ``cores``:
    Graham's bound for greedy scheduling (Graham 1969), core-seconds / cores + the slowest slice,
    then the merge."""
    done = store.finished(store.staging_path(out), spec.n.size) if out else set()
    left = spec.slice_count - len(done)
    strata = _strata(spec, done, sample, seed)
    # the strata's picks taken in turn, so a budget that stops the sample leaves no stratum untimed
    picks = [p for turn in itertools.zip_longest(*(stratum for _, stratum in strata)) for p in turn if p is not None]
    log(f"{spec.source}: {math.prod(spec.shape)} cells in {spec.slice_count} slices of {spec.n.size} curves "
        f"({len(spec.rows)} mechanisms x {spec.eps0.size} eps0 x {spec.n.size} n x {spec.delta.size} delta); "
        f"{left} to compute; timing {len(picks)} sampled slices on {processes or len(_usable_cores())} local "
        f"processes, at most {budget:g} s")
    timed: dict[tuple[int, int], tuple[float, bool]] = {}
    with tempfile.TemporaryDirectory() as scratch:  # each result kept as a build keeps it, in a scratch staging store
        staging = store.open_staging(Path(scratch) / "dry-run.zarr", header(spec), spec.shape, log)
        for pick, seconds, result in _time_in_pool(spec, picks, processes or len(_usable_cores()), budget):
            timed[pick] = (seconds, result is None)
            if result is not None:
                accept(staging, result, header(spec))
            log(f"  timed {_pick_label(spec, pick)}: {'>= ' if result is None else ''}{seconds:.2f} s")
        sizes = _sizes(spec, staging, store.finished(staging, spec.n.size))
    _check_measured(timed, budget)
    per_stratum = [[timed[p][0] for p in stratum if p in timed] for _, stratum in strata]
    seconds = [t for times in per_stratum for t in times]
    if any(not times for times in per_stratum):
        log("  a stratum (slices with or without lower bounds) has no slice timed within the budget: its slices "
            "count at the others' mean; raise --budget")
    # stratified estimate: each stratum's mean times its number of tasks, standard errors combined
    # (a stratum timed once has no spread to go by: its standard error is taken as its mean)
    pairs = [(count, times) for (count, _), times in zip(strata, per_stratum, strict=True) if times]
    seconds_left = sum(count * float(np.mean(times)) for count, times in pairs)
    variance = sum(count**2 * (float(np.var(times, ddof=1)) / len(times) if len(times) > 1 else times[0] ** 2)
                   for count, times in pairs)
    tasks_left = max(sum(count for count, _ in pairs), 1)
    per_slice, error = seconds_left / tasks_left, math.sqrt(variance) / tasks_left
    seconds_left = per_slice * left  # strata without a timed slice at their overall mean
    core_hours = seconds_left / 3600
    slowest = max(timed, key=lambda p: timed[p][0])
    wall_s = seconds_left / max(cores, 1) + timed[slowest][0] + sizes["merge_seconds"]
    figures = {
        "cells": math.prod(spec.shape), "curves": spec.curve_count, "slices": spec.slice_count,
        "slices_to_compute": left, "sampled_slices": len(seconds), "seconds_per_slice": per_slice,
        "core_hours": core_hours,
        "core_hours_low": max(per_slice - 2 * error, min(seconds)) * core_hours / max(per_slice, 1e-300),
        "core_hours_high": (per_slice + 2 * error) * core_hours / max(per_slice, 1e-300),
        "seconds_min": min(seconds), "seconds_max": max(seconds), "seconds_median": float(np.median(seconds)),
        "slowest_slice": _pick_label(spec, slowest), "slowest_censored": timed[slowest][1],
        "censored_slices": sum(c for _, c in timed.values()),
        "wall_hours": wall_s / 3600, "cores": cores, "raw_bytes": 2 * 8 * math.prod(spec.shape), **sizes,
    }
    _log_figures(figures, log)
    return figures


def _check_measured(timed: dict[tuple[int, int], tuple[float, bool]], budget: float) -> None:
    """BuildFailed unless a sampled slice finished within the budget (``timed``: seconds and
    whether it was stopped by the budget): with none, the time per slice has no spread to go by
    and the store sizes nothing to compress, so nothing is estimated and the message says how to
    measure them."""
    if any(not stopped for _, stopped in timed.values()):
        return
    ran = f"{len(timed)} stopped at the budget after {min(s for s, _ in timed.values()):.2f} s or more, so a slice " \
        "takes longer than that" if timed else "none started"
    raise BuildFailed(f"no sampled slice finished within --budget {budget:g} s ({ran}): the core-hours, the wall "
                      "time and the store sizes cannot be measured; run the dry run again with a larger --budget, "
                      f"e.g. --budget {max(10 * budget, DRY_RUN_BUDGET):g}")


def _log_figures(f: dict[str, Any], log: Callable[[str], None]) -> None:
    at_least = ">= " if f["slowest_censored"] else ""
    log(f"measured {f['seconds_per_slice']:.2f} s per slice on {f['sampled_slices']} slices ({f['seconds_min']:.2f} "
        f"to {f['seconds_max']:.2f} s, median {f['seconds_median']:.2f} s"
        + (f"; {f['censored_slices']} stopped at the budget, counted at their time so far" if f['censored_slices']
           else "") + f") -> {f['core_hours']:.2f} core-hours (two standard errors: {f['core_hours_low']:.2f} to "
        f"{f['core_hours_high']:.2f}; a larger --sample narrows it)")
    log(f"slowest slice: {f['slowest_slice']}, {at_least}{f['seconds_max']:.1f} s (the critical path: no build "
        "finishes sooner)")
    log(f"wall time on {f['cores']} cores: {_duration(f['wall_hours'] * 3600)} (core-seconds / cores + the slowest "
        f"slice + the merge, {_duration(f['merge_seconds'])} on the client)")
    log(f"staging store: {_megabytes(f['staging_bytes'])} on the client's disk (zstd float64; "
        f"{_megabytes(f['raw_bytes'])} raw); published table: {_megabytes(f['published_bytes'])} (the sampled "
        "slices compressed side by side; a row of neighbouring eps0 compresses better)")
    log(f"client memory during the publish: about {_megabytes(f['client_bytes'])} (one float32 row of "
        f"{_megabytes(f['row_bytes'])} and the codecs' copies of it, whatever the number of rows)")


def _megabytes(size: float) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min" if seconds >= 60 else \
        f"{seconds:.1f} s"


def _pick_label(spec: Spec, pick: tuple[int, int]) -> str:
    r, e = pick
    return f"{spec.rows[r].label} eps0 {spec.eps0[e]:g} ({spec.n.size} curves)"


def _time_in_pool(spec: Spec, picks: list[tuple[int, int]], processes: int,
                  budget: float) -> Iterator[tuple[tuple[int, int], float, SliceResult | None]]:
    """(pick, seconds, result) of each sampled slice run on ``processes`` fresh processes, as they
    finish; at ``budget`` seconds those still running come with their time so far and no result,
    and the pool is stopped."""
    import multiprocessing

    queue = list(picks)
    deadline = time.monotonic() + budget
    pool = multiprocessing.get_context("spawn").Pool(max(1, min(processes, len(picks))))
    running: dict[tuple[int, int], tuple[Any, float]] = {}
    try:
        while queue or running:
            while queue and len(running) < pool._processes and time.monotonic() < deadline:  # noqa: SLF001
                pick = queue.pop(0)
                running[pick] = (pool.apply_async(compute_slice, (task(spec, *pick),)), time.monotonic())
            ready = [pick for pick, (job, _) in running.items() if job.ready()]
            for pick in ready:
                job, _ = running.pop(pick)
                result = job.get()
                yield pick, result.seconds, result
            if time.monotonic() >= deadline:
                for pick, (_, started) in running.items():
                    yield pick, time.monotonic() - started, None
                return
            if not ready:
                time.sleep(0.05)
    finally:
        pool.terminate()
        pool.join()


def _sizes(spec: Spec, staging: Path, timed: set[tuple[int, int]]) -> dict[str, float]:
    """Staging and published bytes from the timed slices kept in ``staging`` (read back, rounded
    and encoded side by side with the published store's codecs, ``store.encoded_bytes``), scaled
    to every slice of the spec; the merge's seconds and the client's memory from the publish
    bench's figures (``MERGE_BYTES_PER_SECOND``, ``CLIENT_ROW_COPIES``)."""
    row_bytes = 4 * math.prod(spec.shape[1:])
    sizes = {"staging_bytes": 0.0, "published_bytes": 0.0, "row_bytes": float(row_bytes),
             "merge_seconds": 2 * 8 * math.prod(spec.shape) / MERGE_BYTES_PER_SECOND,
             "client_bytes": max(CLIENT_MIN_BYTES, CLIENT_BASE_BYTES + CLIENT_ROW_COPIES * row_bytes)}
    if not timed:
        return sizes
    read = store.slice_reader(staging, header(spec))
    staged = published = 0.0
    for name in store.VARIABLES:
        chunks = [staging / store.CELLS / name / "c" / str(r) / str(e) for r, e in timed]
        staged += sum(f.stat().st_size for chunk in chunks for f in chunk.rglob("*") if f.is_file())
        published += store.encoded_bytes(np.stack([read(name, r, e) for r, e in sorted(timed)]),
                                         store.CERTIFIED_ROUNDING[name])  # side by side, as in a row
    scale = spec.slice_count / len(timed)
    sizes.update(staging_bytes=staged * scale, published_bytes=published * scale)
    return sizes


def _strata(spec: Spec, done: set[tuple[int, int]], sample: int,
            seed: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """(unfinished slices, sampled (row, eps0) slices) for the slices without lower bounds and
    those with (a few eps0 of the spec; a lower slice costs several upper ones, so a plain sample
    that catches one or none of them misjudges the build): where both are left, a quarter of the
    sample, at least one, goes to the second; each is drawn as a Latin hypercube over (row, eps0)
    of its stratum (the cost grows steeply with eps0 and differs between rows)."""
    rows = spec.shape[0]
    has_lower = np.array([any(spec.wants_lower(e, j) for j in range(spec.shape[2])) for e in range(spec.shape[1])])
    groups = [np.flatnonzero(~has_lower), np.flatnonzero(has_lower)]
    lefts = [[(r, int(e)) for r in range(rows) for e in columns if (r, int(e)) not in done] for columns in groups]
    shares = (sample - max(1, sample // 4), max(1, sample // 4)) if all(lefts) else (sample, sample)
    rng = random.Random(seed)
    strata = []
    for columns, left, share in zip(groups, lefts, shares, strict=True):
        if left:
            picks = _latin((rows, columns.size), max(share, 1), rng)
            strata.append((len(left), list(dict.fromkeys((r, int(columns[i])) for r, i in picks))))
    return strata


def _latin(sizes: tuple[int, ...], sample: int, rng: random.Random) -> list[tuple[int, ...]]:
    """``sample`` index tuples of a Latin hypercube over axes of ``sizes``: each axis cut into
    ``sample`` equal strata, each stratum used once."""
    order = [rng.sample(range(sample), sample) for _ in sizes]
    return [tuple(int((order[a][i] + rng.random()) * size / sample) for a, size in enumerate(sizes))
            for i in range(sample)]
