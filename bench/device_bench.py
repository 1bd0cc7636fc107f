"""Benchmark of device files computed for one deployment (``tablegen export --device``, issue 26).

Run as ``python bench/device_bench.py [--queries 40] [--seed 0] [--slacks 0.001,0.005,0.02]``; prints Markdown.

1. Size and export time against ``--max-slack`` for three deployments (k-RR k = 10 at eps0 1.37,
   n 1e3..1e8, deltas 1e-8 and 1e-6; the generic randomizer at eps0 2.2, n 1e4..1e9, delta 1e-9;
   Laplace at eps0 1, n 1e3..1e8, delta 1e-8): each export a whole process under ``/usr/bin/time``
   (wall seconds and peak RSS), with the file's size, stored n and worst slack (the report's).
2. Answers against the live engine: for the files at max-slack 0.005, ``--queries`` random n
   (log-uniform inside the range, each stored delta in turn) answered by the standard-library
   reader (``lookup.device``) against ``tablegen.engine.eps_bounds(..., lower=False)``: min,
   median and max of answer / live (target: within [1, 1.005]).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

DEPLOYMENTS = [
    ("k-RR k=10", "krr", {"k": 10}, 1.37, 1e3, 1e8, [1e-8, 1e-6]),
    ("generic", "generic", {}, 2.2, 1e4, 1e9, [1e-9]),
    ("Laplace", "laplace", {}, 1.0, 1e3, 1e8, [1e-8]),
]


def export(out: Path, family: str, params: dict, eps0: float, n_min: float, n_max: float, deltas: list[float],
           slack: float) -> tuple[dict, float, float]:
    """One export as a whole process: its --json report, wall seconds and peak RSS in MB."""
    args = ["tablegen", "export", "--device", "--mechanism", family, "--eps0", repr(eps0), "--n-min", f"{n_min:g}",
            "--n-max", f"{n_max:g}", "--delta", ",".join(f"{d:g}" for d in deltas), "--max-slack", repr(slack),
            "--out", str(out), "--json"]
    for name, value in params.items():
        args += [f"--{name}", str(value)]
    done = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *args], capture_output=True, text=True, check=True)
    wall, rss = next(line.split()[1:] for line in done.stderr.splitlines() if line.startswith("TIME "))
    return json.loads(done.stdout), float(wall), float(rss) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slacks", default="0.001,0.005,0.02")
    args = parser.parse_args()
    slacks = [float(s) for s in args.slacks.split(",")]
    tmp = Path(tempfile.mkdtemp())
    files = {}
    print("### 1. Device file size and export time against --max-slack (whole process, /usr/bin/time)\n")
    print("| deployment | max-slack | stored n | file bytes (KiB) | worst slack | export wall s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for label, family, params, eps0, n_min, n_max, deltas in DEPLOYMENTS:
        for slack in slacks:
            out = tmp / f"{family}-{slack}.dev"
            report, wall, rss = export(out, family, params, eps0, n_min, n_max, deltas, slack)
            files[label, slack] = out
            print(f"| {label}, eps0 {eps0:g}, n {n_min:g}..{n_max:g}, delta {', '.join(f'{d:g}' for d in deltas)} "
                  f"| {slack:.1%} | {len(report['n'])} | {report['bytes']} ({report['bytes'] / 1024:.1f}) "
                  f"| {report['worst_slack']:.3%} | {wall:.1f} | {rss:.0f} |")
            sys.stdout.flush()
    if 0.005 not in slacks or args.queries <= 0:
        return
    from lookup.device import read_device
    from tablegen.engine import eps_bounds

    print(f"\n### 2. Answers from the max-slack 0.5% files against the live certified value ({args.queries} random n "
          f"per deployment, seed {args.seed})\n")
    print("| deployment | min answer/live | median | max | below live |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(args.seed)
    for label, family, params, eps0, n_min, n_max, deltas in DEPLOYMENTS:
        device = read_device(str(files[label, 0.005]))
        ratios = []
        for i in range(args.queries):
            n = int(10 ** rng.uniform(math.log10(n_min), math.log10(n_max)))
            delta = deltas[i % len(deltas)]
            live = eps_bounds(family, eps0=eps0, n=n, delta=delta, lower=False, **params).upper
            ratios.append(device.eps(params, eps0, n, delta) / live)
        r = np.array(ratios)
        print(f"| {label} | {r.min():.5f} | {np.median(r):.5f} | {r.max():.5f} | {int(np.sum(r < 1))} |")


if __name__ == "__main__":
    main()
