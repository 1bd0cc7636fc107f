"""The table build: one task per (mechanism, eps0) slice on a dask.distributed cluster.

``build(spec, out)`` fills the staging store (``store.py``) with every slice not finished yet,
then assembles the xarray Dataset, publishes it atomically at ``out`` and removes the staging
store.  Killed at any moment, the same call finishes the table with identical values,
recomputing only the slices that had no marker.  A slice is every n and delta of one
(mechanism, eps0): ``engine.dense.eps_slice`` at the spec's resolution, and ``lower_slice``
below it on the n the spec wants lower bounds for, so a cell equals the engine called directly.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from tablegen import ENGINE_VERSION, __version__, allocator, store
from tablegen.mechanisms import get_mechanism
from tablegen.spec import Spec

IN_FLIGHT_PER_THREAD = 4  # tasks queued per worker thread
REFERENCES = (
    "Su, Cheng, Wang, arXiv:2504.07414 (Theorems 4-5, Table 1); Feldman, McMillan, Talwar: "
    "Feldman-McMillan-Talwar (arXiv:2012.12803) (Theorems 3.1, 3.8); shuffle-eps docs/engine.md"
)


@dataclass(frozen=True)
class Task:
    """What a worker needs for one (mechanism, eps0) slice: every n of the axis.  Plain data,
    cheap to ship."""

    staging: str
    slice: tuple[int, int]  # (row, eps0) indices
    family: str
    params: dict[str, Any]
    eps0: float
    ns: tuple[int, ...]
    deltas: list[float]
    lower: tuple[bool, ...]  # per n: lower bounds wanted
    resolution: float
    lower_resolution: float


class BuildInterrupted(Exception):
    """A build stopped by SIGINT or SIGTERM; its finished slices stay in the staging store."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message or f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


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


def task(spec: Spec, staging: Path, r: int, e: int) -> Task:
    """The task computing slice (row ``r``, eps0 ``e``)."""
    s = spec.settings
    return Task(str(staging), (r, e), spec.rows[r].family, spec.rows[r].params, float(spec.eps0[e]),
                tuple(int(n) for n in spec.n), spec.delta.tolist(),
                tuple(spec.wants_lower(e, j) for j in range(spec.n.size)), s["resolution"], s["lower_resolution"])


def todo(spec: Spec, done: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (row, eps0) slices not in ``done``, row by row."""
    return [(r, e) for r in range(spec.shape[0]) for e in range(spec.shape[1]) if (r, e) not in done]


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


def run_task(task: Task) -> float:
    """Compute a task's slice and write it; returns the compute seconds.  Runs on a worker,
    whose allocator it sets first (``allocator.py``: a dask worker otherwise spends a third of
    its time mapping and unmapping the engine's arrays)."""
    allocator.keep_freed_memory()
    start = time.perf_counter()
    eps, eps_lower = slice_values(task)
    seconds = time.perf_counter() - start
    store.write_slice(task.staging, task.slice, eps, eps_lower)
    return seconds


def header(spec: Spec) -> dict[str, Any]:
    return {
        "spec": spec.canonical(),
        "spec_sha256": spec.digest(),
        "engine_version": ENGINE_VERSION,
        "package_version": __version__,
    }


def build(spec: Spec, out: str | Path, *, scheduler: str | None = None, workers: int | None = None,
          progress: bool = True, fresh: bool = False, log: Callable[[str], None] = print,
          sign_key: str | Path | None = None) -> Report:
    """Build (or finish building) the table of ``spec`` at ``out``.

    ``scheduler``: address of an existing dask scheduler; None starts a LocalCluster with
    ``workers`` single-threaded worker processes (default: this machine's cores); workers=0
    computes in this process without dask.  One build per ``out`` at a time (``store.build_lock``).
    ``sign_key``: an Ed25519 private key (PEM) that signs the published table (``lookup.trust``),
    also when it is already up to date.
    """
    out = Path(out)
    with store.build_lock(out, f"tablegen build --spec {spec.source} --out {out}"):
        return _build_locked(spec, out, scheduler, workers, progress, fresh, log, sign_key)


def _build_locked(spec: Spec, out: Path, scheduler: str | None, workers: int | None, progress: bool, fresh: bool,
                  log: Callable[[str], None], sign_key: str | Path | None) -> Report:
    store.check_replaceable(out)
    if fresh:
        shutil.rmtree(store.staging_path(out), ignore_errors=True)
    total = spec.curve_count
    if store.up_to_date(out, header(spec)):
        log(f"{out} is up to date (spec {spec.digest()[:12]}): computed 0 curves, skipped {total}")
        if sign_key is not None:
            from lookup.trust import sign

            log(f"signed: {sign(out, sign_key)}")
        return Report(0, total, 0.0)
    _import_build_extra(distributed=scheduler is not None or workers != 0, progress=progress)
    start = time.perf_counter()
    staging = store.open_staging(out, header(spec), spec.shape)
    done = store.finished(staging, spec.n.size)
    left = todo(spec, done)
    log(f"{spec.slice_count} slices ({total} curves): {len(done)} already finished, {len(left)} to compute")
    try:
        with _stopped_by_signals():
            _execute((task(spec, staging, r, e) for r, e in left), len(left), scheduler, workers, progress,
                     spec.digest()[:12])
    except BuildInterrupted as stop:
        kept = len(store.finished(staging, spec.n.size))
        raise BuildInterrupted(stop.signum, f"build stopped by {signal.Signals(stop.signum).name}: {kept} of "
                               f"{spec.slice_count} slices finished, kept in {staging}; the same command "
                               "resumes") from None
    if len(store.finished(staging, spec.n.size)) != spec.slice_count:
        raise store.StoreError(f"{staging}: some slices have no marker after the build; run it again")
    store.publish(dataset(spec, store.read_staging(staging), _history(spec, out)), out, store.CERTIFIED_ROUNDING,
                  sign_key=sign_key)
    store.remove_staging(staging)
    per_slice = spec.n.size
    report = Report(per_slice * len(left), per_slice * len(done), time.perf_counter() - start)
    log(f"published {out}: computed {report.computed} curves, skipped {report.skipped} "
        f"(already finished) in {report.seconds:.1f} s")
    return report


def _execute(tasks: Iterator[Task], count: int, scheduler: str | None, workers: int | None, progress: bool,
             prefix: str = "") -> None:
    """Run ``count`` tasks, made lazily (a task carries its slice's axes: a cluster spec's would not
    fit in memory at once)."""
    if count == 0:
        return
    if scheduler is None and workers == 0:
        for _ in progress_bar((run_task(t) for t in tasks), count, progress):
            pass
        return
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=":0", silence_logs=40)
    try:
        with Client(scheduler or cluster) as client:
            # a bounded window of tasks in flight, resized as workers join; a task lost with its
            # worker is rerun by the scheduler
            def window() -> int:
                return IN_FLIGHT_PER_THREAD * max(sum(client.nthreads().values()), 1)

            def submit(t: Task) -> Any:
                return client.submit(run_task, t, key=f"slice-{prefix}-{t.slice[0]}-{t.slice[1]}", pure=False)

            running = as_completed([submit(t) for t in itertools.islice(tasks, window())])
            for future in progress_bar(running, count, progress):
                future.result()  # re-raises a task's error here
                for t in itertools.islice(tasks, max(window() - running.count(), 1)):
                    running.add(submit(t))
    finally:
        if cluster is not None:
            cluster.close()


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

    for name in ("xarray", *(["distributed"] if distributed else []), *(["tqdm"] if progress else [])):
        importlib.import_module(name)


def dry_run(spec: Spec, out: str | Path | None, sample: int, cores: int, seed: int = 0,
            log: Callable[[str], None] = print) -> dict[str, float]:
    """Cells, slices still to compute, estimated core-hours (timed on ``sample`` slices, see
    ``_strata``) with a two-standard-error range, and store size; nothing is written."""
    done = store.finished(store.staging_path(out), spec.n.size) if out else set()
    left = spec.slice_count - len(done)
    strata = _strata(spec, done, sample, seed)
    log(f"{spec.source}: {math.prod(spec.shape)} cells in {spec.slice_count} slices of {spec.n.size} curves "
        f"({len(spec.rows)} mechanisms x {spec.eps0.size} eps0 x {spec.n.size} n x {spec.delta.size} delta); "
        f"{left} to compute; timing {sum(len(picks) for _, picks in strata)} sampled slices")
    with tempfile.TemporaryDirectory() as scratch:  # tasks run as in a build, writes to a scratch staging store
        staging = store.open_staging(Path(scratch) / "dry-run.zarr", header(spec), spec.shape)
        timed = [[_time_logged(spec, staging, r, e, log) for r, e in picks] for _, picks in strata]
    seconds = [t for times in timed for t in times]
    # stratified estimate: each stratum's mean times its number of tasks, standard errors combined
    # (a stratum timed once has no spread to go by: its standard error is taken as its mean)
    seconds_left = sum(count * float(np.mean(times)) for (count, _), times in zip(strata, timed, strict=True) if times)
    variance = sum(count**2 * (float(np.var(times, ddof=1)) / len(times) if len(times) > 1 else times[0] ** 2)
                   for (count, _), times in zip(strata, timed, strict=True) if times)
    tasks_left = max(sum(count for count, _ in strata), 1)
    per_slice = seconds_left / tasks_left
    error = math.sqrt(variance) / tasks_left
    core_hours = seconds_left / 3600
    raw_bytes = 2 * 8 * math.prod(spec.shape)
    figures = {
        "cells": math.prod(spec.shape), "curves": spec.curve_count, "slices": spec.slice_count,
        "slices_to_compute": left, "sampled_slices": len(seconds), "seconds_per_slice": per_slice,
        "core_hours": core_hours,
        "core_hours_low": max(per_slice - 2 * error, min(seconds, default=0.0)) * core_hours / max(per_slice, 1e-300),
        "core_hours_high": (per_slice + 2 * error) * core_hours / max(per_slice, 1e-300),
        "seconds_min": min(seconds, default=0.0), "seconds_max": max(seconds, default=0.0),
        "wall_hours": core_hours / max(cores, 1), "cores": cores, "raw_bytes": raw_bytes,
    }
    log(f"measured {per_slice:.2f} s per slice on {len(seconds)} slices ({figures['seconds_min']:.2f} to "
        f"{figures['seconds_max']:.2f} s) -> {core_hours:.2f} core-hours (two standard errors: "
        f"{figures['core_hours_low']:.2f} to {figures['core_hours_high']:.2f}; a larger --sample narrows it), "
        f"{figures['wall_hours']:.2f} h on {cores} cores")
    log(f"store size: {raw_bytes / 1e6:.1f} MB of float64 before compression (zstd, NaN lower bounds "
        "compress to almost nothing)")
    return figures


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


def _time_logged(spec: Spec, staging: Path, r: int, e: int, log: Callable[[str], None]) -> float:
    """Wall seconds of slice (``r``, ``e``) as a worker runs it (its engine calls and its write to
    the staging store), logged as it finishes (a sampled slice of a fine spec takes minutes)."""
    start = time.perf_counter()
    run_task(task(spec, staging, r, e))
    seconds = time.perf_counter() - start
    log(f"  timed {spec.rows[r].label} eps0 {spec.eps0[e]:g} ({spec.n.size} curves): {seconds:.2f} s")
    return seconds
