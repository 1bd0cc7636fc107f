"""Cost and tightness of the certified lower bound on eps: spectral path vs the FFT path.

Section 1 (in-process, this tree): for each mechanism, eps0 and n, the certified eps (upper),
the lower bound, their relative gap, and the time of the lower-bound search alone (after the
upper bound; targets: <= 0.2 s at any n <= 1e9).
Section 2 (whole processes): `tablegen compute ... --delta 1e-8 --json` (lower bound included)
from this tree and from ``--base`` (default ``main``: the FFT lower path), extracted with
`git archive` into a temporary folder; target <= 0.5 s at n = 1e8.  The eps_lower columns
compare the two lower bounds (relative difference, new minus old).

Usage: python bench/lower_bench.py [--quick] [--base REV]   (prints markdown for bench/RESULTS.md)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tablegen.engine import eps_bounds  # noqa: E402

DELTA = 1e-8
MECHANISMS = [("krr", {"k": 10}), ("krr", {"k": 100}), ("generic", {}), ("oue", {}), ("rappor", {}),
              ("blh", {}), ("hr", {}), ("laplace", {})]


def _label(name: str, params: dict) -> str:
    return name + "".join(f" {k}={v}" for k, v in params.items())


def section_in_process(ns: list[int], eps0s: list[float]) -> None:
    print("### 1. Lower bound of one certified eps, in-process (this tree)\n")
    print(f"delta = {DELTA:g}; 'lower s' is the lower-bound search (rounds of 8 evaluations): "
          "eps_bounds with the lower bound minus without.\n")
    print("| mechanism | eps0 | n | eps (certified) | eps_lower | rel. gap | upper s | lower s |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for name, params in MECHANISMS:
        for eps0 in eps0s:
            for n in ns:
                t0 = time.perf_counter()
                eps_bounds(name, eps0=eps0, n=n, delta=DELTA, lower=False, **params)
                t1 = time.perf_counter()
                b = eps_bounds(name, eps0=eps0, n=n, delta=DELTA, **params)
                t2 = time.perf_counter()
                lower_s = max(t2 - t1 - (t1 - t0), 0.0)
                worst = max(worst, lower_s)
                print(f"| {_label(name, params)} | {eps0:g} | {n:.0e} | {b.upper:.6g} | {b.lower:.6g} | "
                      f"{(b.upper - b.lower) / b.upper:.2e} | {t1 - t0:.3f} | {lower_s:.3f} |", flush=True)
    print(f"\nslowest lower-bound search: {worst:.3f} s\n")


def _compute(pythonpath: Path, name: str, params: dict, eps0: float, n: int) -> tuple[float, dict]:
    args = [sys.executable, "-m", "tablegen.cli", "compute", "--mechanism", name, "--eps0", str(eps0),
            "--n", str(n), "--delta", str(DELTA), "--json"]
    for key, value in params.items():
        args += [f"--{key}", str(value)]
    env = dict(os.environ, PYTHONPATH=str(pythonpath), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    start = time.perf_counter()
    out = subprocess.run(args, env=env, cwd=pythonpath, capture_output=True, text=True, timeout=900, check=True)
    return time.perf_counter() - start, json.loads(out.stdout)


def section_processes(base: str, ns: list[int], eps0: float) -> None:
    print(f"### 2. `tablegen compute --json` (lower bound included), whole process: this tree vs {base}\n")
    print(f"eps0 = {eps0:g}, delta = {DELTA:g}; OMP/OPENBLAS threads 1.\n")
    print("| mechanism | n | process s (new) | process s (base) | eps_lower new | eps_lower base | rel. diff |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", base, "tablegen"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        for name, params in MECHANISMS[:1] + MECHANISMS[2:3]:
            for n in ns:
                t_new, new = _compute(ROOT, name, params, eps0, n)
                t_old, old = _compute(Path(tmp), name, params, eps0, n)
                diff = (new["eps_lower"] - old["eps_lower"]) / old["eps_lower"]
                print(f"| {_label(name, params)} | {n:.0e} | {t_new:.2f} | {t_old:.2f} | {new['eps_lower']:.6g} | "
                      f"{old['eps_lower']:.6g} | {diff:+.1e} |", flush=True)
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows, no n = 1e8 base run")
    parser.add_argument("--base", default="main", help="git revision with the previous (FFT) lower path")
    args = parser.parse_args()
    print("## Lower-bound benchmark (bench/lower_bench.py)\n")
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; python {sys.version.split()[0]}; "
          f"{os.cpu_count()} logical cores shared with other jobs (timings noisy)\n")
    if args.quick:
        section_in_process([10**6, 10**8], [4.0])
        section_processes(args.base, [10**6], 4.0)
    else:
        section_in_process([10**4, 10**6, 10**8, 10**9], [0.5, 4.0])
        section_processes(args.base, [10**6, 10**8], 4.0)


if __name__ == "__main__":
    main()
