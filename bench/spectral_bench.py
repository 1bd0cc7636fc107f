"""Spectral path against the FFT path, in one run: one evaluation, one certified eps, one slice.

    python bench/spectral_bench.py [--slice-per-decade 100] [--slice-deltas 25] [--slice-resolution 10] [--quick]

Prints markdown tables.  'FFT' forces the FFT path for every evaluation (the previous engine's
method, same search); times are CPU seconds of this process (``time.process_time``, robust to
other load on the machine), after a warm-up.  The slice table sets the slice beside the
previous engine's per-n curves (``eps_curve``, FFT), timed on a few n and scaled to the axis,
and reports the peak of memory traced during a second run of the slice (numpy's arrays
included); slices run with the allocator set as on a build worker (``tablegen/allocator.py``).
"""

from __future__ import annotations

import argparse
import functools
import math
import subprocess
import sys
import time
import tracemalloc

import numpy as np

from tablegen import allocator
from tablegen.engine import accountant, certifies, eps_bounds
from tablegen.engine.accountant import delta_of_decomposition
from tablegen.engine.curve import eps_curve
from tablegen.engine.dense import eps_slice
from tablegen.engine.spectral import delta_upper
from tablegen.mechanisms import get_mechanism

ROWS = [("krr", {"k": 10}, 1.0), ("generic", {}, 1.0), ("rappor", {}, 2.0), ("laplace", {}, 1.0)]


def _timed(func, repeat: int = 3) -> tuple[float, object]:
    func()
    start = time.process_time()
    for _ in range(repeat):
        out = func()
    return (time.process_time() - start) / repeat, out


def evaluations(ns: list[int]) -> None:
    print("\n### One certified delta(eps), eps = 3 eps0 / sqrt(n)\n")
    print("| mechanism | n | spectral delta | FFT delta | ratio | spectral ms | FFT ms |")
    print("|---|---|---|---|---|---|---|")
    for name, params, eps0 in ROWS:
        mech = get_mechanism(name)
        d = mech.upper(eps0, **mech.resolve(params))[0]
        for n in ns:
            eps = 3 * eps0 / math.sqrt(n)
            ts, s = _timed(lambda d=d, eps=eps, n=n: float(delta_upper(d, np.array([eps]), np.array([n]))[0]))
            if n <= 10**8:
                tf, f = _timed(lambda d=d, eps=eps, n=n: delta_of_decomposition(d, eps, n), 1)
                print(f"| {name} | {n:.0e} | {s:.6e} | {f:.6e} | {s / f:.5f} | {ts * 1e3:.1f} | {tf * 1e3:.0f} |")
            else:
                print(f"| {name} | {n:.0e} | {s:.6e} | - | - | {ts * 1e3:.1f} | - |")


def queries(ns: list[int], delta: float = 1e-8) -> None:
    print(f"\n### One certified eps(delta = {delta:g}) and one certification check\n")
    print("| mechanism | n | eps (spectral) | eps (FFT) | rel. diff | query ms | FFT query ms | check ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name, params, eps0 in ROWS:
        for n in ns:
            args = dict(eps0=eps0, n=n, delta=delta, lower=False, **params)
            query = functools.partial(eps_bounds, name, **args)
            tq, b = _timed(query)
            tc, _ = _timed(functools.partial(certifies, name, eps0=eps0, n=n, eps=b.upper, delta=delta, **params))
            if n <= 10**8:
                saved = accountant.SPECTRAL_COMPONENTS
                accountant.SPECTRAL_COMPONENTS = -1  # every law goes to the FFT path
                try:
                    tf, bf = _timed(query, 1)
                finally:
                    accountant.SPECTRAL_COMPONENTS = saved
                fft, rel, tf_ms = f"{bf.upper:.6g}", f"{b.upper / bf.upper - 1:+.2e}", f"{tf * 1e3:.0f}"
            else:
                fft = rel = tf_ms = "-"
            print(f"| {name} | {n:.0e} | {b.upper:.6g} | {fft} | {rel} | {tq * 1e3:.0f} | {tf_ms} | {tc * 1e3:.1f} |")


SLICE_ROWS = [("krr", {"k": 2}, 1.0), ("krr", {"k": 10}, 1.0), ("krr", {"k": 1024}, 0.5), ("generic", {}, 1.0),
              ("rappor", {}, 2.0), ("oue", {}, 1.0), ("hr", {}, 4.0), ("laplace", {}, 1.0), ("laplace", {}, 4.0),
              ("laplace", {}, 8.0)]


def slices(per_decade: int, count: int, resolution: float) -> None:
    ns = np.unique(np.round(np.geomspace(1e2, 1e9, 7 * per_decade + 1)).astype(np.int64))
    deltas = np.geomspace(1e-12, 1e-3, count)
    sample = ns[np.searchsorted(ns, [10**3, 10**5, 10**7])]  # the FFT curve's cost grows with n: the
    # mean of these understates the previous engine's cost of the whole axis (up to 1e9)
    print(f"\n### One slice: {ns.size} n (1e2..1e9) x {deltas.size} deltas (1e-12..1e-3), upper bounds, "
          f"resolution {resolution:g}\n")
    timed = ", ".join(f"{n:.0e}" for n in sample)
    print(f"| mechanism | eps0 | slice CPU s | peak MiB | per-n FFT curves, CPU s (>=, from n = {timed}) "
          "| eps(1e6, 1e-8-ish) |")
    print("|---|---|---|---|---|---|")
    allocator.keep_freed_memory()  # as a build worker runs a slice (tablegen/allocator.py)
    for name, params, eps0 in SLICE_ROWS:
        start = time.process_time()
        values = eps_slice(name, eps0=eps0, ns=ns, deltas=deltas, resolution=resolution, **params)
        took = time.process_time() - start
        tracemalloc.start()  # memory on a second run: tracing slows numpy's allocations down
        eps_slice(name, eps0=eps0, ns=ns, deltas=deltas, resolution=resolution, **params)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        start = time.process_time()
        for n in sample:
            eps_curve(name, eps0=eps0, n=int(n), deltas=deltas, lower=False, resolution=resolution, **params)
        previous = (time.process_time() - start) / sample.size * ns.size
        i, j = int(np.searchsorted(ns, 10**6)), int(np.searchsorted(deltas, 1e-8))
        print(f"| {name} {params or ''} | {eps0} | {took:.2f} | {peak:.0f} | {previous:.0f} | "
              f"{values[min(i, ns.size - 1), j]:.6g} |", flush=True)


def live(ns: list[int], delta: float = 1e-8) -> None:
    """One certified eps(delta) with its lower bound, in-process, and `tablegen compute --json`
    as a whole process (import included, lower bound included), wall seconds."""
    print(f"\n### One certified eps(delta = {delta:g}) with its lower bound; `tablegen compute --json`\n")
    print("| mechanism | n | eps | eps_lower | upper+lower ms | compute --json wall s |")
    print("|---|---|---|---|---|---|")
    for name, params, eps0 in ROWS:
        for n in ns:
            tq, b = _timed(functools.partial(eps_bounds, name, eps0=eps0, n=n, delta=delta, **params), 2)
            flags = [f"--{key}={value}" for key, value in params.items()]
            command = [sys.executable, "-m", "tablegen.cli", "compute", "--mechanism", name, *flags,
                       "--eps0", str(eps0), "--n", str(n), "--delta", str(delta), "--json"]
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            wall = time.perf_counter() - start
            print(f"| {name} | {n:.0e} | {b.upper:.6g} | {b.lower:.6g} | {tq * 1e3:.0f} | {wall:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slice-per-decade", type=int, default=100)
    parser.add_argument("--slice-deltas", type=int, default=25)
    parser.add_argument("--slice-resolution", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="fewer n, no slices")
    args = parser.parse_args()
    ns = [10**4, 10**6] if args.quick else [10**4, 10**6, 10**8, 10**9]
    evaluations(ns)
    queries(ns)
    live([10**2, 10**4, 10**8] if not args.quick else [10**4])
    if not args.quick:
        slices(args.slice_per_decade, args.slice_deltas, args.slice_resolution)


if __name__ == "__main__":
    main()
