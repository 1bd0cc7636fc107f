"""The table build: one task per (mechanism, eps0) slice, on a dask cluster or in this process.

``build(spec, out)`` computes every slice not finished yet and keeps it in the staging store
(``store.py``), then publishes the table atomically at ``out``, streaming slice by slice (the
client holds one mechanism row at a time, whatever the number of rows), and removes the staging
store.  Killed at any moment, the same call finishes the table with identical values,
recomputing only the slices that had no marker.

The tasks and their results are in ``tasks.py``, the connection to dask in ``cluster.py``, the
``--dry-run`` sizing in ``dryrun.py``; docs/tables.md and docs/cluster.md tell the whole story.
"""

from __future__ import annotations

import functools
import json
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from tablegen import ENGINE_VERSION, __version__, allocator, store
from tablegen.cluster import (
    CONNECT_SECONDS,
    RETRIES,
    SchedulerLost,
    SchedulerUnreachable,
    client_security,
    connected,
    current_worker,
    stopped_when_cancelled,
    worker_label,
)
from tablegen.cluster import results as cluster_results
from tablegen.mechanisms import get_mechanism
from tablegen.spec import Spec
from tablegen.tasks import (
    BuildFailed,
    BuildInterrupted,
    EngineMismatch,
    SliceError,
    SliceResult,
    Task,
    check_provenance,
    provenance,
    task,
    todo,
)

__all__ = [
    "CONNECT_SECONDS", "RETRIES", "BuildFailed", "BuildInterrupted", "EngineMismatch", "Report", "SchedulerLost",
    "SchedulerUnreachable", "SliceError", "SliceResult", "Task", "accept", "build", "check_provenance",
    "client_security", "compute_slice", "dataset", "header", "progress_bar", "provenance", "publish",
    "slice_values", "task", "todo",
]

REFERENCES = (
    "Su, Cheng, Wang, arXiv:2504.07414 (Theorems 4-5, Table 1); Feldman, McMillan, Talwar: "
    "Feldman-McMillan-Talwar (arXiv:2012.12803) (Theorems 3.1, 3.8); shuffle-eps docs/engine.md"
)


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


def compute_slice(task: Task) -> SliceResult:
    """Compute a task's slice and return it (never writes anything).  Runs on a worker, whose
    allocator keeps freed arrays during the slice and hands them back after it (``allocator.py``),
    and which stops it once dask cancels its task (``stopped_when_cancelled``); any error comes
    back as one line naming the worker (``SliceError``)."""
    worker = current_worker()
    name = "this process" if worker is None else worker_label(worker.name, worker.address)
    allocator.keep_freed_memory()
    try:
        start = time.perf_counter()
        with stopped_when_cancelled(worker):
            eps, eps_lower = slice_values(task)
        return SliceResult(task.slice, eps, eps_lower, time.perf_counter() - start, provenance(), name,
                           "" if worker is None else worker.address)
    except Exception as err:  # noqa: BLE001 - any error of the engine: one line, retried by dask
        raise SliceError(f"worker {name}: {type(err).__name__}: {err}") from None
    finally:
        allocator.release_freed_memory()


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

    The cluster is ``client`` if given, else a ``scheduler``'s, else a LocalCluster of ``workers``
    processes; workers=0 computes in this process without dask.  One build per ``out`` at a time
    (``store.build_lock``).

    Args:
        spec: the grid spec (``spec.load_spec``).
        out: the published table's path (a published table or nothing).
        scheduler: address of a running dask scheduler (tcp:// or tls://).
        workers: single-threaded worker processes of a LocalCluster (None: this machine's cores;
            0: no dask, this process).
        client: a connected ``distributed.Client`` of any cluster (dask-jobqueue, the Kubernetes
            operator, ...), left open.
        progress: a progress bar on stderr.
        fresh: discard an unfinished build of ``out`` and start over.
        log: where the build's lines go.
        sign_key: an Ed25519 private key (PEM) that signs the published table
            (``lookup.trust.origin``), also when it is already up to date.
        security: the ``distributed.security.Security`` of a tls:// scheduler (``client_security``).

    Returns:
        ``Report(computed, skipped, seconds)``: curves computed and already finished.

    Raises:
        BuildFailed: a slice failing on every try, no worker running this engine, the scheduler lost
            (``SchedulerLost``); the finished slices stay in the staging store.
        BuildInterrupted: SIGINT or SIGTERM; the finished slices stay in the staging store.
        SchedulerUnreachable: no dask scheduler answers at ``scheduler`` (nothing written).
    """
    out = Path(out)
    connect = functools.partial(connected, client, scheduler, workers, log, security)
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


def _results(client: Any, tasks: Iterator[Task], prefix: str, log: Callable[[str], None]) -> Iterator[SliceResult]:
    """Every task's SliceResult, in this process (``client`` None) or on the cluster."""
    if client is None:
        for t in tasks:
            try:
                yield compute_slice(t)
            except SliceError as err:
                raise BuildFailed(f"slice {t.label} failed: {err}") from None
        return
    yield from cluster_results(client, tasks, prefix, log, compute_slice)


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
