"""The dask side of a build: the client's connection (a client given, a scheduler's address, over
TLS, or a local cluster), the tasks in flight on it, the workers' state in one line, and a running
task stopped once dask has cancelled it.

No worker reads or writes the client's disk: a task returns its slice and the client writes it
(``build.accept``), so workers on other hosts, pods or scratch disks all work (docs/cluster.md)."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tablegen.tasks import (
    BuildFailed,
    BuildInterrupted,
    EngineMismatch,
    SliceResult,
    Task,
    check_provenance,
    provenance,
)

IN_FLIGHT_PER_THREAD = 4  # tasks queued per worker thread
RETRIES = 2  # a task that raises runs up to 1 + RETRIES times (dask's retries), then ends the build
CANCEL_POLL_SECONDS = 0.2  # a running slice checks this often whether dask has cancelled its task
CONNECT_SECONDS = 5  # an unreachable --scheduler is reported after this long, before anything is written
STATUS_SECONDS = 30  # no slice finished for this long: the build says what the workers are doing


class SchedulerUnreachable(ValueError):
    """``--scheduler`` names no dask scheduler that answers (checked before anything is written)."""


class SchedulerLost(BuildFailed):
    """The dask scheduler of a build went away mid-build (its client lost the connection)."""


class SliceCancelled(BaseException):
    """Raised in a running slice's thread once dask has cancelled its task (``stopped_when_cancelled``);
    a BaseException, so that no ``except Exception`` of the engine swallows it."""


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
def connected(client: Any, scheduler: str | None, workers: int | None, log: Callable[[str], None],
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
    cluster = LocalCluster(n_workers=workers or len(usable_cores()), threads_per_worker=1, processes=True,
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


def usable_cores() -> set[int]:
    import os

    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def results(client: Any, tasks: Iterator[Task], prefix: str, log: Callable[[str], None],
            compute: Callable[[Task], SliceResult]) -> Iterator[SliceResult]:
    """Run ``compute`` on the tasks (made lazily: a cluster spec's would not fit in memory at once)
    on the cluster, a bounded window in flight (resized as workers join), and yield their results.

    A task that raises is retried by dask (``RETRIES``; a task lost with its worker is rerun by
    the scheduler); one failing every try raises BuildFailed naming the slice and the error.  A
    result the client refuses (``accept``: EngineMismatch) is logged, its worker left out of the
    later tasks and the slice resubmitted; BuildFailed when no worker is left; SchedulerLost when
    the scheduler goes away.  Pending tasks are cancelled when the caller stops, however it stops
    (tasks write nothing, and a running one stops: ``stopped_when_cancelled``)."""
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
        future = client.submit(compute, t, key=key, pure=False, retries=RETRIES, workers=allowed)
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
    except Exception as err:  # noqa: BLE001 - a call to a scheduler that went away: one line naming it
        if not _scheduler_gone(client, err):
            raise
        raise SchedulerLost(f"the dask scheduler {scheduler} went away mid-build") from None
    finally:
        if pending and client.status == "running":
            client.cancel(list(pending), force=True)


def _scheduler_gone(client: Any, err: Exception) -> bool:
    """Whether ``err``, raised by a call to the scheduler, means that the client has lost it: the
    client says so, or the call found its connection closed (``CommClosedError``) and the client
    says so within CONNECT_SECONDS (it notices a moment after the call that ran into it)."""
    if client.status != "running":
        return True
    from distributed.comm.core import CommClosedError

    if not isinstance(err, CommClosedError):
        return False
    deadline = time.monotonic() + CONNECT_SECONDS
    while client.status == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    return client.status != "running"


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


def worker_label(name: Any, address: str) -> str:
    """A worker as messages name it: its name (``dask worker --name``) and address, or the address
    alone where it has no name of its own (dask then names it by its address)."""
    return address if name is None or str(name) in ("", address) else f"{name} ({address})"


def current_worker() -> Any:
    """The dask worker running this task, or None outside a worker."""
    if "distributed" in sys.modules:
        from distributed import get_worker

        try:
            return get_worker()
        except ValueError:  # not in a worker
            pass
    return None


@contextmanager
def stopped_when_cancelled(worker: Any) -> Iterator[None]:
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
