"""``tablegen build --dry-run``: a build sized without writing anything, from a sample of its
slices timed on local processes and kept in a scratch staging store (docs/tables.md, "Sizing
with `--dry-run`")."""

from __future__ import annotations

import itertools
import math
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tablegen import store
from tablegen.build import accept, compute_slice, header
from tablegen.cluster import usable_cores
from tablegen.spec import Spec
from tablegen.tasks import BuildFailed, SliceResult, task

DRY_RUN_BUDGET = 90.0  # seconds a dry run spends timing its sample (the full spec's within 2 minutes on 2 cores)
# the client's publish (python -m bench table --only publish, docs/cluster.md): peak RSS = CLIENT_BASE_BYTES +
# CLIENT_ROW_COPIES x one float32 row, at least CLIENT_MIN_BYTES; time = float64 bytes of the staging store /
# MERGE_BYTES_PER_SECOND (read, rounded, encoded, hashed for the manifest and decoded again to verify: 4.05 GB
# in 127 s, 2.09 GB in 44 s, 2.50 GB of full.toml's rows in 56 s)
CLIENT_BASE_BYTES = 300e6  # the publishing process with its modules (one row of 32 MB: 302 MiB)
CLIENT_ROW_COPIES = 4  # 2 rows of full.toml's 312 MB: 1374 MiB (2026-11-26, shared 2-core machine)
CLIENT_MIN_BYTES = 600e6  # rows of 32 MB: 556 MiB at 16 rows, 474 MiB at 31
MERGE_BYTES_PER_SECOND = 30e6


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
    then the merge.

    Args:
        spec: the grid spec.
        out: the table's path, whose finished staged slices are left out (None: none).
        sample: slices to time.
        cores: the cores to size the wall time for.
        seed: the sample's seed.
        log: where the lines go.
        budget: seconds spent timing the sample.
        processes: local processes that time it (None: this machine's cores).

    Returns:
        The figures, by name (``core_hours``, ``wall_hours``, ``published_bytes``, ...).

    Raises:
        BuildFailed: no sampled slice finished within ``budget``.
    """
    done = store.finished(store.staging_path(out), spec.n.size) if out else set()
    left = spec.slice_count - len(done)
    strata = _strata(spec, done, sample, seed)
    # the strata's picks taken in turn, so a budget that stops the sample leaves no stratum untimed
    picks = [p for turn in itertools.zip_longest(*(stratum for _, stratum in strata)) for p in turn if p is not None]
    log(f"{spec.source}: {math.prod(spec.shape)} cells in {spec.slice_count} slices of {spec.n.size} curves "
        f"({len(spec.rows)} mechanisms x {spec.eps0.size} eps0 x {spec.n.size} n x {spec.delta.size} delta); "
        f"{left} to compute; timing {len(picks)} sampled slices on {processes or len(usable_cores())} local "
        f"processes, at most {budget:g} s")
    timed: dict[tuple[int, int], tuple[float, bool]] = {}
    with tempfile.TemporaryDirectory() as scratch:  # each result kept as a build keeps it, in a scratch staging store
        staging = store.open_staging(Path(scratch) / "dry-run.zarr", header(spec), spec.shape, log)
        for pick, seconds, result in _time_in_pool(spec, picks, processes or len(usable_cores()), budget):
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
