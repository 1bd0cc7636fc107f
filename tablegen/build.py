"""The table build: one task per (mechanism, eps0, n) curve on a dask.distributed cluster.

``build(spec, out)`` fills the staging store (``store.py``) with every curve not finished yet,
then assembles the xarray Dataset, publishes it atomically at ``out`` and removes the staging
store.  Killed at any moment, the same call finishes the table with identical values,
recomputing only the curves that had no marker.  Each curve is ``engine.curve.eps_curve`` at
the spec's settings, so a cell equals the engine called directly.
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
    """What a worker needs for some curves of one (mechanism, eps0): one curve (method
    "curve") or every unfinished n of the slice (method "slice").  Plain data, cheap to ship."""

    staging: str
    cells: tuple[tuple[int, int, int], ...]
    family: str
    params: dict[str, Any]
    eps0: float
    ns: tuple[int, ...]
    deltas: list[float]
    lower: tuple[bool, ...]
    resolution: float
    lower_resolution: float
    method: str = "curve"
    lower_method: str = "curve"


class BuildInterrupted(Exception):
    """A build stopped by SIGINT or SIGTERM; its finished curves stay in the staging store."""

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


def task(spec: Spec, staging: Path, cells: list[tuple[int, int, int]]) -> Task:
    """The task computing ``cells`` (all of one row and eps0)."""
    r, e, _ = cells[0]
    s = spec.settings
    return Task(str(staging), tuple(cells), spec.rows[r].family, spec.rows[r].params, float(spec.eps0[e]),
                tuple(int(spec.n[c[2]]) for c in cells), spec.delta.tolist(),
                tuple(spec.wants_lower(e, c[2]) for c in cells), s["resolution"], s["lower_resolution"],
                spec.method, spec.lower_method)


def tasks(spec: Spec, staging: Path, done: set[tuple[int, int, int]]) -> Iterator[Task]:
    """Tasks for every curve not in ``done``, lazily (a cluster spec has millions of curves)."""
    if spec.method == "curve":
        return (task(spec, staging, [cell]) for cell in spec.curves() if cell not in done)
    slices = itertools.product(range(spec.shape[0]), range(spec.shape[1]))
    groups = ([(r, e, j) for j in range(spec.shape[2]) if (r, e, j) not in done] for r, e in slices)
    return (task(spec, staging, cells) for cells in groups if cells)


def task_count(spec: Spec, done: set[tuple[int, int, int]]) -> int:
    if spec.method == "curve":
        return spec.curve_count - len(done)
    full = {(r, e) for r, e, _ in done if all((r, e, j) in done for j in range(spec.shape[2]))}
    return spec.shape[0] * spec.shape[1] - len(full)


def curve_values(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """Certified eps and lower bounds (NaN where not wanted), shape (len(ns), len(deltas))."""
    from tablegen.engine.curve import eps_curve, lower_curve
    from tablegen.engine.dense import eps_slice, lower_slice

    if task.method == "curve":
        curves = [eps_curve(task.family, eps0=task.eps0, n=n, deltas=task.deltas, lower=lower,
                            resolution=task.resolution, lower_resolution=task.lower_resolution, **task.params)
                  for n, lower in zip(task.ns, task.lower, strict=True)]
        return np.array([c.upper for c in curves]), np.array([c.lower for c in curves])
    upper = eps_slice(task.family, eps0=task.eps0, ns=task.ns, deltas=task.deltas, resolution=task.resolution,
                      **task.params)
    lower = np.full_like(upper, np.nan)
    wanted = np.flatnonzero(task.lower)
    if task.lower_method == "slice" and wanted.size:
        lower[wanted] = lower_slice(task.family, eps0=task.eps0, ns=[task.ns[i] for i in wanted], deltas=task.deltas,
                                    upper=upper[wanted], resolution=task.lower_resolution, **task.params)
        return upper, lower
    for i in wanted:
        lower[i] = lower_curve(task.family, eps0=task.eps0, n=task.ns[i], deltas=task.deltas, upper=upper[i],
                               lower_resolution=task.lower_resolution, **task.params)
    return upper, lower


def run_task(task: Task) -> float:
    """Compute a task's curves and write them; returns the compute seconds.  Runs on a worker,
    whose allocator it sets first (``allocator.py``: a dask worker otherwise spends a third of
    its time mapping and unmapping the engine's arrays)."""
    allocator.keep_freed_memory()
    start = time.perf_counter()
    eps, eps_lower = curve_values(task)
    seconds = time.perf_counter() - start
    for cell, upper, lower in zip(task.cells, eps, eps_lower, strict=True):
        store.write_curve(task.staging, cell, upper, lower)
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
    done = store.finished(staging)
    log(f"{total} curves: {len(done)} already finished, {total - len(done)} to compute"
        + (f" ({task_count(spec, done)} slices)" if spec.method == "slice" else ""))
    try:
        with _stopped_by_signals():
            _execute(tasks(spec, staging, done), task_count(spec, done), scheduler, workers, progress,
                     spec.digest()[:12], "curve" if spec.method == "curve" else "slice")
    except BuildInterrupted as stop:
        kept = len(store.finished(staging))
        raise BuildInterrupted(stop.signum, f"build stopped by {signal.Signals(stop.signum).name}: {kept} of "
                               f"{total} curves finished, kept in {staging}; the same command resumes") from None
    if len(store.finished(staging)) != total:
        raise store.StoreError(f"{staging}: some curves have no marker after the build; run it again")
    store.publish(dataset(spec, store.read_staging(staging), _history(spec, out)), out, store.CERTIFIED_ROUNDING,
                  sign_key=sign_key)
    store.remove_staging(staging)
    report = Report(total - len(done), len(done), time.perf_counter() - start)
    log(f"published {out}: computed {report.computed} curves, skipped {report.skipped} "
        f"(already finished) in {report.seconds:.1f} s")
    return report


def _execute(todo: Iterator[Task], count: int, scheduler: str | None, workers: int | None,
             progress: bool, prefix: str = "", unit: str = "curve") -> None:
    if count == 0:
        return
    if scheduler is None and workers == 0:
        for _ in progress_bar((run_task(t) for t in todo), count, progress, unit):
            pass
        return
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=":0", silence_logs=40)
    try:
        with Client(scheduler or cluster) as client:
            # a bounded window of tasks in flight (a cluster spec has millions of curves), resized
            # as workers join; a task lost with its worker is rerun by the scheduler
            def window() -> int:
                return IN_FLIGHT_PER_THREAD * max(sum(client.nthreads().values()), 1)

            def submit(t: Task) -> Any:
                return client.submit(run_task, t, key=f"{unit}-{prefix}-{'-'.join(map(str, t.cells[0]))}", pure=False)

            running = as_completed([submit(t) for t in itertools.islice(todo, window())])
            for future in progress_bar(running, count, progress, unit):
                future.result()  # re-raises a task's error here
                for t in itertools.islice(todo, max(window() - running.count(), 1)):
                    running.add(submit(t))
    finally:
        if cluster is not None:
            cluster.close()


def progress_bar(items: Iterable[Any], total: int, enabled: bool, unit: str = "curve") -> Iterable[Any]:
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

    from tablegen.engine import curve, dense
    from tablegen.engine.fourier import FOLD_TOLERANCE, FP_SAFETY

    dims = ("mechanism", "eps0", "n", "delta")
    certification = {
        "rule": "every eps is >= the exact eps of the analysis named by the mechanism (rounded up)",
        "method": spec.method,
        "eps_ladder_ratio": curve.LADDER if spec.method == "curve" else dense.LADDER,
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
    """Cells, curves still to compute, estimated core-hours (timed on ``sample`` curves spread
    over the rows, eps0 and n; see ``sample_curves``) with a two-standard-error range, and store
    size; nothing is written."""
    total = spec.curve_count
    done = store.finished(store.staging_path(out)) if out else set()
    todo = total - len(done)
    unit = "curve" if spec.method == "curve" else "slice"
    if unit == "slice":
        strata = _slice_strata(spec, done, sample, seed)
    else:
        strata = [(todo, [[cell] for cell in sample_curves(spec, sample, seed)])]
    log(f"{spec.source}: {math.prod(spec.shape)} cells in {total} curves "
        f"({len(spec.rows)} mechanisms x {spec.eps0.size} eps0 x {spec.n.size} n x {spec.delta.size} delta); "
        f"{todo} to compute; timing {sum(len(picks) for _, picks in strata)} sampled {unit}s")
    with tempfile.TemporaryDirectory() as scratch:  # tasks run as in a build, writes to a scratch staging store
        staging = store.open_staging(Path(scratch) / "dry-run.zarr", header(spec), spec.shape)
        timed = [[_time_logged(spec, staging, cells, log) for cells in picks] for _, picks in strata]
    seconds = [t for times in timed for t in times]
    # stratified estimate: each stratum's mean times its number of tasks, standard errors combined
    # (a stratum timed once has no spread to go by: its standard error is taken as its mean)
    seconds_left = sum(count * float(np.mean(times)) for (count, _), times in zip(strata, timed, strict=True) if times)
    variance = sum(count**2 * (float(np.var(times, ddof=1)) / len(times) if len(times) > 1 else times[0] ** 2)
                   for (count, _), times in zip(strata, timed, strict=True) if times)
    tasks_left = max(sum(count for count, _ in strata), 1)
    per_curve = seconds_left / tasks_left
    error = math.sqrt(variance) / tasks_left
    core_hours = seconds_left / 3600
    raw_bytes = 2 * 8 * math.prod(spec.shape)
    figures = {
        "cells": math.prod(spec.shape), "curves": total, "curves_to_compute": todo,
        "sampled_curves": len(seconds), "seconds_per_curve": per_curve, "core_hours": core_hours,
        "core_hours_low": max(per_curve - 2 * error, min(seconds, default=0.0)) * core_hours / max(per_curve, 1e-300),
        "core_hours_high": (per_curve + 2 * error) * core_hours / max(per_curve, 1e-300), "unit": unit,
        "seconds_min": min(seconds, default=0.0), "seconds_max": max(seconds, default=0.0),
        "wall_hours": core_hours / max(cores, 1), "cores": cores, "raw_bytes": raw_bytes,
    }
    log(f"measured {per_curve:.2f} s per {unit} on {len(seconds)} {unit}s ({figures['seconds_min']:.2f} to "
        f"{figures['seconds_max']:.2f} s) -> {core_hours:.2f} core-hours (two standard errors: "
        f"{figures['core_hours_low']:.2f} to {figures['core_hours_high']:.2f}; a larger --sample narrows it), "
        f"{figures['wall_hours']:.2f} h on {cores} cores")
    log(f"store size: {raw_bytes / 1e6:.1f} MB of float64 before compression (zstd, NaN lower bounds "
        "compress to almost nothing)")
    return figures


def _slice_strata(spec: Spec, done: set[tuple[int, int, int]], sample: int,
                  seed: int) -> list[tuple[int, list[list[tuple[int, int, int]]]]]:
    """(unfinished slices, sampled slices) for the slices without lower bounds and those with
    (a few eps0 of the spec; a lower slice costs several upper ones, so a plain sample that
    catches one or none of them misjudges the build): a quarter of the sample, at least one,
    goes to the second, each drawn as a Latin hypercube over (row, eps0) of its stratum."""
    cells = range(spec.shape[2])
    has_lower = np.array([any(spec.wants_lower(e, j) for j in cells) for e in range(spec.shape[1])])
    rng = random.Random(seed)
    strata = []
    for lower, share in ((False, sample - max(1, sample // 4)), (True, max(1, sample // 4))):
        columns = np.flatnonzero(has_lower == lower)
        left = [(r, int(e)) for r in range(spec.shape[0]) for e in columns
                if not all((r, int(e), j) in done for j in cells)]
        if not left:
            continue
        picks = _latin((spec.shape[0], columns.size), max(share, 1), rng)
        chosen = dict.fromkeys((r, int(columns[i])) for r, i in picks)
        strata.append((len(left), [[(r, e, j) for j in cells] for r, e in chosen]))
    return strata


def _latin(sizes: tuple[int, ...], sample: int, rng: random.Random) -> list[tuple[int, ...]]:
    """``sample`` index tuples of a Latin hypercube over axes of ``sizes``: each axis cut into
    ``sample`` equal strata, each stratum used once."""
    order = [rng.sample(range(sample), sample) for _ in sizes]
    return [tuple(int((order[a][i] + rng.random()) * size / sample) for a, size in enumerate(sizes))
            for i in range(sample)]


def sample_curves(spec: Spec, sample: int, seed: int = 0) -> list[tuple[int, int, int]]:
    """``sample`` (row, eps0, n) cells of a Latin hypercube over the three index axes: each axis
    cut into ``sample`` equal strata, each stratum used once.  The cost of a curve grows steeply
    with n and eps0 (seconds to minutes), so a uniform sample of a few curves misses or
    over-weights the expensive corner; this one spreads them evenly and stays unbiased."""
    return _latin(spec.shape[:3], sample, random.Random(seed))


def _time_logged(spec: Spec, staging: Path, cells: list[tuple[int, int, int]], log: Callable[[str], None]) -> float:
    """``_time_task`` of the task of ``cells``, logged as it finishes (a sampled slice of a fine
    spec takes minutes: the dry run shows its progress)."""
    seconds = _time_task(task(spec, staging, cells))
    r, e, _ = cells[0]
    log(f"  timed {spec.rows[r].label} eps0 {spec.eps0[e]:g} ({len(cells)} curves): {seconds:.2f} s")
    return seconds


def _time_task(task: Task) -> float:
    """Wall seconds of a task as a worker runs it: its curves and their writes to the staging
    store (a marker and two checksummed chunks per curve, about 1 s for a slice of 351 curves)."""
    start = time.perf_counter()
    run_task(task)
    return time.perf_counter() - start
