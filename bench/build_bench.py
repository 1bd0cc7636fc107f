"""Benchmark of the table build: curves per second per core, 1 -> 2 local workers, sizing.

Run as ``python bench/build_bench.py [--sample S] [--table data/default.zarr]``; prints Markdown.

1. Throughput on the default spec: a slice of ``workflows/default.toml`` (every mechanism row,
   3 eps0 x 3 n spread over the axes, all deltas, the default settings and lower-bound subgrid)
   built from scratch with a LocalCluster of 1 and of 2 single-threaded workers (publish
   included): curves per second, per core, and the speed-up.
2. ``--dry-run`` estimates (timed on ``--sample`` random curves) for ``workflows/default.toml``
   and ``workflows/full.toml`` on 100 cores.
3. Grid slack of a built table (``--table``): for each cell of the (eps0, n) grid, the ratio of
   the conservative corner (eps0 rounded up, n rounded down) to the opposite corner bounds the
   slack of any lookup inside the cell in those two directions; the chord between bracketing
   deltas adds at most the ratio of neighbouring deltas' eps.  Reported as worst case and median
   over cells, per mechanism family.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tablegen.build import build, dry_run
from tablegen.spec import load_spec, spec_from_dict

ROOT = Path(__file__).resolve().parents[1]


def slice_of_default() -> dict:
    spec = load_spec(ROOT / "workflows" / "default.toml")
    raw = spec.canonical()
    pick = lambda axis: [axis[0], axis[len(axis) // 2], axis[-1]]  # noqa: E731
    return {
        "title": "bench slice of the default spec",
        "axes": {"eps0": pick(raw["eps0"]), "n": [100.0, 1e4], "delta": raw["delta"]},
        "settings": raw["settings"],
        "mechanism": raw["mechanisms"],
    }


def throughput() -> list[str]:
    raw = slice_of_default()
    spec = spec_from_dict(raw, "default.toml slice")
    lines = ["### 1. Build throughput (slice of the default spec)", "",
             f"{len(spec.rows)} mechanisms x eps0 {raw['axes']['eps0']} x n {raw['axes']['n']} x "
             f"{spec.delta.size} deltas = {spec.curve_count} curves, default settings; from scratch, publish included.",
             "", "| workers | wall s | curves/s | curves/s per core | speed-up |", "|---|---|---|---|---|"]
    base = None
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            build(spec, Path(tmp) / "t.zarr", workers=workers, progress=False, log=lambda _: None)
            wall = time.perf_counter() - start
        rate = spec.curve_count / wall
        base = base or rate
        lines.append(f"| {workers} | {wall:.1f} | {rate:.2f} | {rate / workers:.2f} | {rate / base:.2f} |")
    return lines


def sizing(sample: int) -> list[str]:
    lines = ["### 2. `--dry-run` sizing", "", "| spec | curves | cells | s/curve (sample) | core-hours | "
             "hours on 100 cores | raw MB |", "|---|---|---|---|---|---|---|"]
    for name in ("default", "full"):
        spec = load_spec(ROOT / "workflows" / f"{name}.toml")
        f = dry_run(spec, None, sample=sample, cores=100, log=lambda _: None)
        lines.append(f"| {name}.toml | {f['curves']} | {f['cells']} | {f['seconds_per_curve']:.2f} ({sample}) | "
                     f"{f['core_hours']:.1f} | {f['wall_hours']:.2f} | {f['raw_bytes'] / 1e6:.0f} |")
    return lines


def grid_slack(table: Path) -> list[str]:
    import xarray as xr

    ds = xr.open_zarr(table)
    eps = ds["eps"].values  # (mechanism, eps0, n, delta)
    corner = eps[:, 1:, :-1, :]  # eps0 rounded up, n rounded down
    opposite = eps[:, :-1, 1:, :]
    cell = corner / opposite - 1
    chord = eps[:, :, :, :-1] / eps[:, :, :, 1:] - 1  # smaller delta / larger delta
    families = ds["family"].values
    lines = [f"### 3. Grid slack of `{table}`", "",
             "Bound on the lookup's overshoot inside a grid cell (eps0 x n corners; the delta chord separately), "
             "over cells where the opposite corner is above 1e-6 and below eps0.", "",
             "| family | rows | eps0 x n cell: median | 90% | max | delta chord: median | max |",
             "|---|---|---|---|---|---|---|"]
    eps0 = ds["eps0"].values[None, :-1, None, None]
    for family in dict.fromkeys(families):
        rows = families == family
        ok = (opposite[rows] > 1e-6) & (opposite[rows] < eps0 * 0.999)
        c = cell[rows][ok]
        d = chord[rows][(eps[rows][..., 1:] > 1e-6)]
        lines.append(f"| {family} | {rows.sum()} | {np.median(c):.1%} | {np.quantile(c, 0.9):.1%} | {c.max():.1%} "
                     f"| {np.median(d):.1%} | {d.max():.1%} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=8)
    parser.add_argument("--table", default=str(ROOT / "data" / "default.zarr"))
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    out = ["## Build benchmark", "",
           f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; commit {commit}",
           f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, "
           f"Python {platform.python_version()}", ""]
    if not args.skip_throughput:
        out += throughput() + [""]
    out += sizing(args.sample) + [""]
    if Path(args.table).is_dir():
        out += grid_slack(Path(args.table)) + [""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
