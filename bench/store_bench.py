"""Size and load time of the compact table store on a synthetic table shaped like the dense default.

Run as ``python bench/store_bench.py [--rows 20] [--eps0 80] [--per-decade 100] [--deltas 25]
[--bits 12 14] [--lower-every 4 10] [--lower-n-max 1e6] [--keep DIR]``; prints Markdown.

The table: log eps of ``data/default.zarr`` interpolated linearly in (log eps0, log n, log delta)
onto dense axes (eps0 0.05..8 geometric, n 1e2..1e9 at ``--per-decade``, extrapolated above
1e8, delta 1e-12..1e-3 geometric), capped at eps0: smooth surfaces like a dense build, NOT
certified values (only sizes and timings are measured).  Lower bounds (0.99 eps) on every
i-th eps0 and j-th n up to ``--lower-n-max``, NaN elsewhere, as a table spec's ``lower_every``.

1. published size (every file) of the compact store for each ``--bits``, eps and eps_lower
   separately, and of the float64 form (tables before the compact store);
2. ``lookup.open_table`` in a fresh process (manifest SHA-256, decode, monotone surfaces):
   time and peak RSS;
3. scalar ``lookup.eps`` once the table is open (p50, p90 over 20000 random in-grid queries),
   and the same on the shipped ``data/default.zarr`` for comparison under the same load.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tablegen import store  # noqa: E402
from tablegen.build import dataset  # noqa: E402
from tablegen.spec import spec_from_dict  # noqa: E402


def synthetic(rows: int, n_eps0: int, per_decade: int, n_delta: int, lower_every: tuple[int, int],
              lower_n_max: float) -> tuple[object, dict[str, np.ndarray]]:
    """(spec, values) of the synthetic table (see the module docstring)."""
    import xarray as xr
    from scipy.interpolate import RegularGridInterpolator

    with xr.open_zarr(ROOT / "data" / "default.zarr") as ds:
        coarse = np.log(ds["eps"].values[:rows].astype(float))
        axes = (np.log(ds["eps0"].values), np.log(ds["n"].values.astype(float)), np.log(ds["delta"].values))
        mechanisms = [{"family": str(f), **json.loads(str(p))}
                      for f, p in zip(ds["family"].values[:rows], ds["params"].values[:rows], strict=True)]
    eps0 = np.geomspace(0.05, 8, n_eps0)
    deltas = np.geomspace(1e-12, 1e-3, n_delta)
    spec = spec_from_dict({
        "title": "synthetic dense table (bench/store_bench.py)",
        "axes": {"eps0": eps0.tolist(), "n": {"start": 1e2, "stop": 1e9, "per_decade": per_decade},
                 "delta": deltas.tolist()},
        "mechanism": mechanisms,
    }, "store-bench")
    grid = np.meshgrid(np.log(spec.eps0), np.log(spec.n.astype(float)), np.log(spec.delta), indexing="ij")
    points = np.stack([g.ravel() for g in grid], axis=-1)
    eps = np.empty(spec.shape)
    for r in range(rows):
        f = RegularGridInterpolator(axes, coarse[r], bounds_error=False, fill_value=None)
        eps[r] = np.exp(f(points)).reshape(grid[0].shape)
    eps = np.minimum(eps, spec.eps0[None, :, None, None])
    lower = np.full_like(eps, np.nan)
    i, j = lower_every
    wanted = np.flatnonzero((np.arange(spec.n.size) % j == 0) & (spec.n <= lower_n_max))
    lower[:, ::i, wanted] = 0.99 * eps[:, ::i, wanted]
    return spec, {"eps": eps, "eps_lower": lower}


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def open_in_fresh_process(path: Path) -> tuple[float, float]:
    code = (f"import time, resource, sys, json; sys.path.insert(0, {str(ROOT)!r}); import lookup; "
            f"t = time.perf_counter(); lookup.open_table({str(path)!r}); dt = time.perf_counter() - t; "
            "print(json.dumps([dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))")
    seconds, rss = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                             check=True).stdout)
    return seconds, rss


def scalar_latency(path: Path) -> tuple[float, float]:
    import lookup

    t = lookup.open_table(path)
    family, params = t.families[1], t.params[1]
    rng = np.random.default_rng(0)
    queries = zip(rng.uniform(0.05, 8, 20000).tolist(), np.round(10 ** rng.uniform(2, 9, 20000)).tolist(),
                  (10 ** rng.uniform(-12, -3, 20000)).tolist(), strict=True)
    times = []
    for eps0, n, delta in queries:
        start = time.perf_counter()
        lookup.eps(family, eps0=eps0, n=n, delta=delta, table=t, live=False, **params)
        times.append(time.perf_counter() - start)
    times.sort()
    return statistics.median(times) * 1e6, times[int(0.9 * len(times))] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--eps0", type=int, default=80)
    parser.add_argument("--per-decade", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=25)
    parser.add_argument("--bits", type=int, nargs="+", default=[12])
    parser.add_argument("--lower-every", type=int, nargs=2, default=[4, 10])
    parser.add_argument("--lower-n-max", type=float, default=1e6)
    parser.add_argument("--float64", action="store_true", help="also write the float64 form (slow, large)")
    parser.add_argument("--keep", type=Path, default=None, help="write the stores here and keep them")
    args = parser.parse_args()
    start = time.perf_counter()
    spec, values = synthetic(args.rows, args.eps0, args.per_decade, args.deltas, tuple(args.lower_every),
                             args.lower_n_max)
    ds = dataset(spec, values, "bench/store_bench.py")
    print("## Compact store: size and load time (bench/store_bench.py)\n")
    print(f"- synthetic table {' x '.join(map(str, spec.shape))} (mechanism, eps0, n, delta) = "
          f"{math.prod(spec.shape) / 1e6:.1f} M cells; lower bounds on every {args.lower_every[0]}th eps0 and "
          f"{args.lower_every[1]}th n up to n = {args.lower_n_max:g} "
          f"({np.isfinite(values['eps_lower']).mean():.1%} of cells); made in {time.perf_counter() - start:.0f} s\n")
    print("| form | store MB | eps MB | eps_lower MB | publish s | open_table s (fresh process) | peak RSS MiB "
          "| scalar lookup.eps p50 / p90 us |")
    print("|---|---|---|---|---|---|---|---|")
    root = args.keep or Path(tempfile.mkdtemp(prefix="store-bench-"))
    forms = [(f"float32, {b} mantissa bits, rounded up / down", b) for b in args.bits]
    forms += [("float64 (before)", None)] if args.float64 else []
    for label, bits in forms:
        out = root / (f"m{bits}.zarr" if bits else "f64.zarr")
        shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        if bits is None:
            store.publish(ds, out)
        else:
            store.publish(ds, out, store.CERTIFIED_ROUNDING, bits)
        written = time.perf_counter() - start
        seconds, rss = open_in_fresh_process(out)
        p50, p90 = scalar_latency(out)
        print(f"| {label} | {size(out) / 1e6:.2f} | {size(out / 'eps') / 1e6:.2f} | "
              f"{size(out / 'eps_lower') / 1e6:.2f} | {written:.1f} | {seconds:.2f} | {rss:.0f} | "
              f"{p50:.1f} / {p90:.1f} |", flush=True)
    p50, p90 = scalar_latency(ROOT / "data" / "default.zarr")
    print(f"\n- the same scalar queries on `data/default.zarr` (21 x 13 x 13 x 13), same conditions: "
          f"p50 {p50:.1f} us, p90 {p90:.1f} us")
    if args.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
