"""Engine: one live certified eps(delta), its lower bound and certification check, the whole
`tablegen compute` process, the spectral path against the FFT path, and slices.

Parts (``python -m bench engine [--only PART ...] [--quick]``):

* ``query``: per mechanism, eps0 and n (``--eps0``, ``--n`` override the grid), in this process after a
  warm-up: ``eps_bounds(..., lower=False)`` (mean of 3), ``certifies`` at its answer (mean of 3) and
  ``eps_bounds`` with the lower bound (one call), CPU ms; then ``tablegen compute --json`` (lower bound
  included) as a whole process on one core: wall s and peak RSS.  With ``--base REV`` the same command
  also runs from revision REV's tablegen (``git archive`` into a temporary folder) and the table sets
  its eps and eps_lower beside this tree's: the before/after of an engine change.
* ``sweep``: distribution (median, p90, p99, max) of the wall time of one certified eps, of the
  certification check at its answer and of eps with its lower bound over 9 families x eps0 0.5/2/5/8
  x n x delta 1e-12, 1e-6 (best of 2, after a warm-up), with the slowest queries named.
* ``paths``: one certified delta(eps) at eps = 3 eps0 / sqrt(n), and one certified eps(delta = 1e-8),
  by the spectral path and by the FFT path (``SPECTRAL_COMPONENTS = -1`` sends every law there): values
  and CPU ms; the FFT path up to n = 1e8.
* ``slice``: ``eps_slice`` over 701 n (1e2..1e9, 100 per decade) x 25 deltas (1e-12..1e-3) at
  resolution 10, with the allocator of a build worker: CPU s, and the peak of memory traced (numpy's
  arrays included) during a second run.
* ``laplace``: Laplace's lower bound, eps0 1/2/4/8 x n 1e3..1e6 at delta 1e-6 (and eps0 4/8 at 1e-12):
  the certified eps, the lower bound of the pair x2 = 1/2 alone (before the exact pairs) and of all three
  pairs (docs/soundness.md, "Laplace: the exact pairs"), upper / lower, and the CPU s of each lower search
  (``eps_bounds`` with the lower bound, less the same call without it).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench import common

QUERY_ROWS = [("krr", {"k": 10}), ("krr", {"k": 1024}), ("generic", {}), ("rappor", {}), ("oue", {}), ("hr", {}),
              ("blh", {}), ("laplace", {})]
SWEEP_ROWS = [("krr", {"k": 2}), ("krr", {"k": 10}), ("krr", {"k": 1024}), ("generic", {}), ("rappor", {}),
              ("oue", {}), ("hr", {}), ("blh", {}), ("laplace", {})]
PATH_ROWS = [("krr", {"k": 10}, 1.0), ("generic", {}, 1.0), ("rappor", {}, 2.0), ("laplace", {}, 1.0)]
SLICE_ROWS = [("krr", {"k": 2}, 1.0), ("krr", {"k": 10}, 1.0), ("krr", {"k": 1024}, 0.5), ("generic", {}, 1.0),
              ("rappor", {}, 2.0), ("oue", {}, 1.0), ("hr", {}, 4.0), ("laplace", {}, 1.0), ("laplace", {}, 4.0),
              ("laplace", {}, 8.0)]
DELTA = 1e-8


def _cpu(func: Callable[[], object], repeat: int = 3) -> tuple[float, object]:
    """(mean CPU seconds of ``repeat`` calls after a warm-up call, the last result)."""
    out = func()
    start = time.process_time()
    for _ in range(repeat):
        out = func()
    return (time.process_time() - start) / repeat, out


def _wall(func: Callable[[], object], repeat: int = 2) -> tuple[float, object]:
    """(best wall seconds of ``repeat`` calls, the last result)."""
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = func()
        best = min(best, time.perf_counter() - start)
    return best, out


def _compute(pythonpath: Path, family: str, params: dict, eps0: float, n: int) -> common.Child:
    """``tablegen compute --json`` (lower bound included) from the tablegen under ``pythonpath``."""
    argv = [sys.executable, "-m", "tablegen.cli", "compute", "--mechanism", family, "--eps0", repr(eps0),
            "--n", str(n), "--delta", repr(DELTA), "--json"]
    argv += [f"--{key}={value}" for key, value in params.items()]
    return common.child(argv, one_core=True, timeout=900, cwd=pythonpath, env={"PYTHONPATH": str(pythonpath)})


def _eps(run: common.Child) -> tuple[str, str]:
    if run.error:
        return f"**{run.error}**", ""
    out = json.loads(run.stdout)
    return f"{out['eps']:.6g}", "-" if out["eps_lower"] is None else f"{out['eps_lower']:.6g}"


def query(args: argparse.Namespace) -> list[str]:
    from tablegen.engine import certifies, eps_bounds

    rows = QUERY_ROWS[:3:2] if args.quick else QUERY_ROWS
    eps0s = args.eps0 or ([1.0] if args.quick else [0.5, 4.0, 8.0])
    ns = [int(n) for n in args.n] if args.n else ([10**4] if args.quick else [10**2, 10**4, 10**6, 10**8])
    header = ["mechanism", "eps0", "n", "eps", "eps_lower", "rel. gap", "upper ms", "check ms", "upper+lower ms",
              "compute --json wall s", "peak RSS MiB"]
    if args.base:
        header += [f"eps ({args.base})", f"eps_lower ({args.base})"]
    out = [f"### One certified eps(delta = {DELTA:g}): CPU ms in-process, `tablegen compute --json` whole "
           "process on one core", ""]
    base = tempfile.TemporaryDirectory() if args.base else None
    if base:
        archive = subprocess.run(["git", "-C", str(common.ROOT), "archive", args.base, "tablegen", "lookup"],
                                 capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", base.name], input=archive.stdout, check=True)
    table = []
    for family, params in rows:
        for eps0 in eps0s:
            for n in ns:
                t_up, b = _cpu(functools.partial(eps_bounds, family, eps0=eps0, n=n, delta=DELTA, lower=False,
                                                 **params))
                t_check, _ = _cpu(functools.partial(certifies, family, eps0=eps0, n=n, eps=b.upper, delta=DELTA,
                                                    **params))
                t_both, both = _cpu(functools.partial(eps_bounds, family, eps0=eps0, n=n, delta=DELTA, **params),
                                    1)
                whole = _compute(common.ROOT, family, params, eps0, n)
                low = both.lower
                gap = "-" if not low else f"{(both.upper - low) / low:.2e}"
                row = [common.label(family, params), f"{eps0:g}", f"{n:.0e}", f"{both.upper:.6g}",
                       "-" if low is None else f"{low:.6g}", gap, f"{t_up * 1e3:.1f}", f"{t_check * 1e3:.1f}",
                       f"{t_both * 1e3:.0f}", "-" if whole.error else f"{whole.wall_s:.2f}", f"{whole.rss_mib:.0f}"]
                if base:
                    row += _eps(_compute(Path(base.name), family, params, eps0, n))
                table.append(row)
    if base:
        base.cleanup()
    return out + common.table(header, table)


def _percentiles(values: Sequence[float]) -> str:
    v = np.array(values) * 1e3
    return f"{np.median(v):.1f} / {np.quantile(v, 0.9):.1f} / {np.quantile(v, 0.99):.1f} / {v.max():.1f}"


def sweep(args: argparse.Namespace) -> list[str]:
    from tablegen.engine import certifies, eps_bounds

    rows = SWEEP_ROWS[1:4:2] if args.quick else SWEEP_ROWS
    eps0s = [2.0] if args.quick else [0.5, 2.0, 5.0, 8.0]
    ns = [10**4] if args.quick else [10**2, 10**3, 10**4, 10**5, 10**6, 10**8]
    deltas = [1e-6] if args.quick else [1e-12, 1e-6]
    eps_bounds("krr", eps0=1.0, n=10**4, delta=DELTA, k=10)  # warm-up: imports, caches
    upper, check, both = [], [], []
    for family, params in rows:
        for eps0 in eps0s:
            for n in ns:
                for delta in deltas:
                    where = (common.label(family, params), eps0, n, delta)
                    kw = dict(eps0=eps0, n=n, delta=delta, **params)
                    t, b = _wall(lambda kw=kw, family=family: eps_bounds(family, lower=False, **kw))
                    upper.append((t, where))
                    kw_check = {**kw, "eps": b.upper}
                    del kw_check["delta"]
                    t, _ = _wall(lambda kw=kw_check, family=family, delta=delta: certifies(family, delta=delta, **kw))
                    check.append((t, where))
                    both.append((_wall(lambda kw=kw, family=family: eps_bounds(family, **kw))[0], where))
    out = [f"### Wall ms over {len(upper)} queries ({len(rows)} families, eps0 {'/'.join(f'{e:g}' for e in eps0s)}, "
           f"n {'/'.join(f'{n:.0e}' for n in ns)}, delta {'/'.join(f'{d:g}' for d in deltas)}; best of 2)", ""]
    out += common.table(["what", "median / p90 / p99 / max ms", "slowest three (mechanism, eps0, n, delta: ms)"],
                        [[what, _percentiles([t for t, _ in times]),
                          "; ".join(f"{w[0]}, {w[1]:g}, {w[2]:.0e}, {w[3]:g}: {t * 1e3:.0f}"
                                    for t, w in sorted(times, key=lambda x: x[0], reverse=True)[:3])]
                         for what, times in (("one certified eps", upper), ("certification check", check),
                                             ("eps with its lower bound", both))])
    return out


def paths(args: argparse.Namespace) -> list[str]:
    from tablegen.engine import bounds as accountant
    from tablegen.engine import eps_bounds
    from tablegen.engine.spectral import delta_upper
    from tablegen.mechanisms import get_mechanism

    rows = PATH_ROWS[:2] if args.quick else PATH_ROWS
    ns = [10**4] if args.quick else [10**4, 10**6, 10**8, 10**9]
    evaluations, queries = [], []
    for family, params, eps0 in rows:
        mech = get_mechanism(family)
        law = mech.upper(eps0, **mech.resolve(params))[0]
        for n in ns:
            eps = 3 * eps0 / math.sqrt(n)
            evaluate = functools.partial(accountant.delta_of_decomposition, law, eps, n)
            search = functools.partial(eps_bounds, family, eps0=eps0, n=n, delta=DELTA, lower=False, **params)
            ts, s = _cpu(lambda law=law, eps=eps, n=n: float(delta_upper(law, np.array([eps]), np.array([n]))[0]))
            tq, b = _cpu(search)
            fft_eval = fft_query = ["-"] * 3
            if n <= 10**8:
                saved = accountant.SPECTRAL_COMPONENTS
                accountant.SPECTRAL_COMPONENTS = -1  # every law goes to the FFT path
                try:
                    tf, f = _cpu(evaluate, 1)
                    tfq, bf = _cpu(search, 1)
                finally:
                    accountant.SPECTRAL_COMPONENTS = saved
                fft_eval = [f"{f:.6e}", f"{s / f:.5f}", f"{tf * 1e3:.0f}"]
                fft_query = [f"{bf.upper:.6g}", f"{b.upper / bf.upper - 1:+.2e}", f"{tfq * 1e3:.0f}"]
            name = common.label(family, params)
            evaluations.append([name, f"{n:.0e}", f"{s:.6e}", *fft_eval, f"{ts * 1e3:.1f}"])
            queries.append([name, f"{n:.0e}", f"{b.upper:.6g}", *fft_query, f"{tq * 1e3:.0f}"])
    return ["### One certified delta(eps), eps = 3 eps0 / sqrt(n): spectral against FFT path (CPU ms)", "",
            *common.table(["mechanism", "n", "spectral delta", "FFT delta", "ratio", "FFT ms", "spectral ms"],
                          evaluations),
            "", f"### One certified eps(delta = {DELTA:g}): spectral against FFT path (CPU ms)", "",
            *common.table(["mechanism", "n", "eps (spectral)", "eps (FFT)", "rel. diff", "FFT query ms", "query ms"],
                          queries)]


def slices(args: argparse.Namespace) -> list[str]:
    from tablegen import allocator
    from tablegen.engine.dense import eps_slice

    per_decade, count = (2, 5) if args.quick else (100, 25)
    rows = SLICE_ROWS[1:4:2] if args.quick else SLICE_ROWS
    ns = np.unique(np.round(np.geomspace(1e2, 1e9, 7 * per_decade + 1)).astype(np.int64))
    deltas = np.geomspace(1e-12, 1e-3, count)
    i, j = min(int(np.searchsorted(ns, 10**6)), ns.size - 1), int(np.searchsorted(deltas, 1e-8))
    allocator.keep_freed_memory()  # as a build worker runs a slice (tablegen/allocator.py)
    table = []
    for family, params, eps0 in rows:
        start = time.process_time()
        values = eps_slice(family, eps0=eps0, ns=ns, deltas=deltas, resolution=10.0, **params)
        took = time.process_time() - start
        tracemalloc.start()  # memory on a second run: tracing slows numpy's allocations down
        eps_slice(family, eps0=eps0, ns=ns, deltas=deltas, resolution=10.0, **params)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        table.append([common.label(family, params), f"{eps0:g}", f"{took:.2f}", f"{peak:.0f}",
                      f"{values[i, j]:.6g}"])
    return [f"### One slice: {ns.size} n (1e2..1e9) x {deltas.size} deltas (1e-12..1e-3), upper bounds, "
            f"resolution 10 ({os.cpu_count()} cores, one used)", "",
            *common.table(["mechanism", "eps0", "slice CPU s", "peak MiB", f"eps at n {ns[i]:.0e}, delta "
                           f"{deltas[j]:.2g}"], table)]


def laplace(args: argparse.Namespace) -> list[str]:
    from dataclasses import replace

    from tablegen.engine import eps_bounds
    from tablegen.mechanisms import get_mechanism

    mech = get_mechanism("laplace")
    before = replace(mech, lower=lambda eps0: mech.lower(eps0)[-1:])  # the pair x2 = 1/2 alone
    grid = [(1e-6, e, n) for e in (1.0, 2.0, 4.0, 8.0) for n in (10**3, 10**4, 10**5, 10**6)]
    grid += [(1e-12, e, n) for e in (4.0, 8.0) for n in (10**4, 10**5)]
    rows = []
    for delta, eps0, n in (grid[:2] if args.quick else grid):
        t_up, up = _cpu(lambda e=eps0, n=n, d=delta: eps_bounds(mech, eps0=e, n=n, delta=d, lower=False), 1)
        t_old, old = _cpu(lambda e=eps0, n=n, d=delta: eps_bounds(before, eps0=e, n=n, delta=d), 1)
        t_new, new = _cpu(lambda e=eps0, n=n, d=delta: eps_bounds(mech, eps0=e, n=n, delta=d), 1)
        rows.append([f"{delta:g}", f"{eps0:g}", f"{n:.0e}", f"{up.upper:.4g}", f"{old.lower:.4g}", f"{new.lower:.4g}",
                     f"{up.upper / old.lower:.2f}x", f"{up.upper / new.lower:.2f}x", f"{max(t_old - t_up, 0):.2f}",
                     f"{max(t_new - t_up, 0):.2f}"])
    return ["### Laplace: certified eps, lower bound before (pair x2 = 1/2) and with the exact pairs "
            "(CPU s of the lower search)", "",
            *common.table(["delta", "eps0", "n", "certified", "lower before", "lower now", "ratio before",
                           "ratio now", "s before", "s now"], rows)]


PARTS: dict[str, common.Part] = {"query": query, "sweep": sweep, "paths": paths, "slice": slices,
                                 "laplace": laplace}


def main(argv: list[str] | None = None) -> None:
    p = common.parser("engine", __doc__, PARTS)
    p.add_argument("--eps0", type=float, nargs="+", help="query: eps0 values")
    p.add_argument("--n", type=float, nargs="+", help="query: n values")
    p.add_argument("--base", help="query: also run `tablegen compute` from this git revision")
    common.run("engine", PARTS, p.parse_args(argv), argv)


if __name__ == "__main__":
    main()
