"""The shuffled Gaussian, inputs in [0, 1] or bits (docs/soundness.md; tablegen/engine/gaussian.py).

Parts (``python -m bench gaussian [--only PART ...] [--quick]``):

* ``compare``: sigma 1 and 2, delta 1e-6, n 1e4 / 1e5 / 1e6: the published routes (FMT21 Theorem 3.8 through
  (eps0, delta0)-LDP, arXiv:2012.12803; the Renyi route of arXiv:2206.03151; an approximate, uncertified
  evaluation of the blanket bound), as measured and published in the issue that asked for this mechanism,
  beside ours certified, our lower bound and the sum of the outputs' eps (a lower bound too).
* ``table``: sigma 0.5-10 and n 1e3-1e9 at delta 1e-6 (and 1e-12): ours, lower, their ratio, seconds.
* ``time``: whole-process ``tablegen compute --mechanism gaussian`` at sigma 0.2-50, n 1e3-1e9, delta 1e-6
  (target: 1 s).
* ``sweep``: in-process ``eps_bounds`` with its lower bound over 360 points (sigma 0.2, 0.25, 0.3, 0.4, 0.5,
  0.7, 1, 2, 5, 50 x n 2, 1e2, ..., 1e9 x delta 1e-3, 1e-6, 1e-9, 1e-12; ``--quick``: 8 of them), after one
  answer that warms the process: median, 90th percentile, largest seconds and the slowest points (target 1 s).
* ``file``: the shipped sigma file (data/gaussian.sheps) against the live engine on 40 random queries (seed 7;
  sigma log-uniform in [0.5, 50], n in [1e2, 1e9], delta in [1e-12, 1e-3]; ``--quick``: 5): the file's answer
  over the live certified eps (median, quartiles, largest), whether every answer is at or above the engine's
  certified lower bound, and the microseconds of one answer from the file.
"""

from __future__ import annotations

import time

from bench import common

# (sigma, n) -> (FMT21 Thm 3.8, Renyi route arXiv:2206.03151, blanket approximate), delta 1e-6, as published
PUBLISHED = {(1.0, 10**4): ("infeasible", 0.589, 0.062), (1.0, 10**5): ("infeasible", 0.464, 0.017),
             (1.0, 10**6): ("infeasible", 0.367, 0.0049), (2.0, 10**4): (0.925, "-", "-"),
             (2.0, 10**5): (0.419, "-", "-"), (2.0, 10**6): (0.165, "-", "-")}


def part_compare(quick: bool) -> None:
    from tablegen.engine import gaussian

    print("## sigma, n at delta = 1e-6: published routes, ours certified, our lower bound, the sum of outputs\n")
    print("| sigma | n | FMT21 Thm 3.8 | RDP route | blanket (approx.) | ours certified | our lower bound "
          "| sum of outputs |\n|---|---|---|---|---|---|---|---|")
    for (sigma, n), (fmt, rdp, approx) in PUBLISHED.items():
        if quick and n > 10**4:
            continue
        b = gaussian.eps_bounds(sigma, n, 1e-6)
        print(f"| {sigma:g} | {n:.0e} | {fmt} | {rdp} | {approx} | {b.upper:.6g} | {b.lower:.6g} "
              f"| {gaussian.sum_eps_lower(sigma, n, 1e-6, b.upper):.4g} |")
    print()


def part_table(quick: bool) -> None:
    from tablegen.engine import gaussian

    sigmas = (1.0,) if quick else (0.5, 0.7, 1.0, 2.0, 4.0, 10.0)
    ns = (10**4,) if quick else (10**3, 10**4, 10**5, 10**6, 10**9)
    for delta in ((1e-6,) if quick else (1e-6, 1e-12)):
        print(f"## delta = {delta:g}: ours certified / our lower bound / ratio / seconds (in-process)\n")
        print("| sigma | " + " | ".join(f"n = {n:.0e}" for n in ns) + " |\n|---|" + "---|" * len(ns))
        for sigma in sigmas:
            cells = []
            for n in ns:
                start = time.perf_counter()
                b = gaussian.eps_bounds(sigma, n, delta)
                seconds = time.perf_counter() - start
                ratio = f"{b.upper / b.lower:.2f}x" if b.lower > 0 else "-"
                cells.append(f"{b.upper:.4g} / {b.lower:.4g} / {ratio} / {seconds:.2f}")
            print(f"| {sigma:g} | " + " | ".join(cells) + " |")
        print()


def part_time(quick: bool) -> None:
    print("## whole-process `tablegen compute --mechanism gaussian` at delta 1e-6 (2-core machine; target 1 s)\n")
    print("| sigma | n | seconds | eps | eps_lower | bound |\n|---|---|---|---|---|---|")
    for sigma in ((1.0,) if quick else (0.2, 0.5, 1.0, 10.0, 50.0)):
        for n in ((10**4,) if quick else (10**3, 10**6, 10**9)):
            seconds, answer = common.timed_compute("--mechanism", "gaussian", "--sigma", str(sigma), "--n", str(n),
                                                   "--delta", "1e-6")
            print(f"| {sigma:g} | {n:.0e} | {seconds:.2f} | {answer['eps']:.6g} | {answer['eps_lower']:.6g} "
                  f"| {answer['bound']} |")
    print()


def part_sweep(quick: bool) -> None:
    import numpy as np

    from tablegen.engine import gaussian

    sigmas = (0.7, 1.0) if quick else (0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 1.0, 2.0, 5.0, 50.0)
    ns = (100, 10**5) if quick else (2, *(10**k for k in range(2, 10)))
    deltas = (1e-3, 1e-6) if quick else (1e-3, 1e-6, 1e-9, 1e-12)
    gaussian.eps_bounds(1.0, 1000, 1e-6)  # the process's first answer pays numpy's and scipy's first calls
    points = []
    for sigma in sigmas:
        for n in ns:
            for delta in deltas:
                start = time.perf_counter()
                gaussian.eps_bounds(sigma, n, delta)
                points.append((time.perf_counter() - start, sigma, n, delta))
    seconds = np.array([p[0] for p in points])
    print(f"## live answers in-process with their lower bound, {len(points)} points (2-core machine; target 1 s)\n")
    print(f"- median {np.median(seconds):.3f} s, 90th percentile {np.quantile(seconds, 0.9):.3f} s, largest "
          f"{seconds.max():.3f} s; above 1 s: {int((seconds > 1).sum())}")
    print("- slowest: " + ", ".join(f"sigma {s:g}, n {n:.0e}, delta {d:.0e}: {t:.2f} s"
                                     for t, s, n, d in sorted(points, reverse=True)[:5]) + "\n")


def part_file(quick: bool) -> None:
    import math
    import random

    import numpy as np

    import lookup
    from lookup.answer import gaussian as answers
    from lookup.device.files import read_device
    from lookup.store.table import shipped_table
    from tablegen.engine import gaussian

    rng = random.Random(7)
    queries = [(math.exp(rng.uniform(math.log(0.5), math.log(50))), int(10 ** rng.uniform(2, 9)),
                10 ** rng.uniform(-12, -3)) for _ in range(5 if quick else 40)]
    ratios, above = [], True
    for sigma, n, delta in queries:
        stored = lookup.eps("gaussian", sigma=sigma, n=n, delta=delta, live=False)
        live = gaussian.eps_bounds(sigma, n, delta)
        ratios.append(stored.value / live.upper)
        above &= stored.value >= live.lower
    device = read_device(str(shipped_table(answers.SHIPPED)))
    start = time.perf_counter()
    for sigma, n, delta in queries * 50:
        device.eps_sigma(answers.ROW, sigma, n, delta)
    micro = (time.perf_counter() - start) / (50 * len(queries)) * 1e6
    q = np.percentile(ratios, [25, 50, 75])
    print(f"## the shipped sigma file against the live engine ({len(queries)} random queries, seed 7)\n")
    print(f"- file / live certified eps: median {q[1]:.3f}, quartiles {q[0]:.3f}-{q[2]:.3f}, largest "
          f"{max(ratios):.4g} (where the exact eps is near 0 the file holds its larger neighbour)")
    print(f"- every file answer at or above the engine's certified lower bound: {above}")
    print(f"- one answer from the file (DeviceTable.eps_sigma, in-process): {micro:.1f} us\n")


def main(argv: list[str] | None = None) -> None:
    common.print_parts("gaussian", __doc__, {"compare": part_compare, "table": part_table, "time": part_time,
                                             "sweep": part_sweep, "file": part_file}, argv)


if __name__ == "__main__":
    main()
