"""Shuffled-histogram protocols (Balcer-Cheu): the calibrated noise against the paper's, and the
simulated error at the calibrated p against Theorem 3.1's bound, with its figure (docs/protocols.md
holds the output of the defaults).

Parts (``python -m bench protocols [--only PART ...] [--quick] [--n-values N ...]``):

* ``noise``: for the binary-sum and histogram protocols at delta = 1e-6, n = 1e4..1e7 and eps 0.25, 0.5, 1:
  1 - p (noise per user) calibrated by the certified accountant against the paper's, and the certified
  delta at the calibrated p.
* ``error``: the histogram protocol at (eps, delta) = (1, 1e-6), d = 10, uniform values, ``--repeats`` runs
  per n: median and worst max error against Theorem 3.1's bound at the calibrated and at the paper's p
  (beta = 0.05 / d); the figure goes to ``--plot`` (docs/figures/protocols_error.png; ``--quick``: none).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bench import common

NOISE_N = (10**4, 10**5, 10**6, 10**7)
ERROR_N = (10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6)
QUICK_N = (10**3, 3 * 10**3)


def _n_values(args: argparse.Namespace, default: tuple[int, ...]) -> tuple[int, ...]:
    if args.n_values:
        return tuple(int(n) for n in args.n_values)
    return QUICK_N if args.quick else default


def noise(args: argparse.Namespace) -> list[str]:
    from tablegen.protocols.accounting import calibrate, delta_bounds, paper_p

    delta, lines = 1e-6, []
    for protocol in ("binary-sum", "histogram"):
        rows = []
        for n in _n_values(args, NOISE_N):
            for eps in (0.25, 0.5, 1.0):
                paper = paper_p(protocol, eps=eps, delta=delta, n=n)
                try:
                    p = calibrate(protocol, eps=eps, delta=delta, n=n)
                except ValueError:
                    rows.append([f"{n:.0e}", eps, "(no p in (1/2, 1))", f"{1 - paper:.3g}", "-", "-"])
                    continue
                check = delta_bounds(protocol, eps=eps, n=n, p=p)[0]
                paper_text = f"{1 - paper:.3g}" if paper > 0.5 else f"{1 - paper:.3g} (outside (0, 1/2))"
                ratio = f"{(1 - paper) / (1 - p):.1f}x" if paper > 0.5 else "-"
                rows.append([f"{n:.0e}", eps, f"{1 - p:.3g}", paper_text, ratio, f"{check:.6g}"])
        lines += [f"#### {protocol}, delta = {delta:g}: 1 - p (noise per user), calibrated vs paper", "",
                  *common.table(["n", "eps", "calibrated 1 - p", "paper 1 - p", "noise reduction",
                                 "certified delta at calibrated p"], rows), ""]
    return lines[:-1]


def error(args: argparse.Namespace) -> list[str]:
    from tablegen.protocols import simulate
    from tablegen.protocols.accounting import calibrate, paper_p

    eps, delta, d, seed = 1.0, 1e-6, 10, 0
    repeats = 2 if args.quick and args.repeats is None else args.repeats or 20
    rng = np.random.default_rng(seed)
    rows, points = [], []
    for n in _n_values(args, ERROR_N):
        p = calibrate("histogram", eps=eps, delta=delta, n=n)
        paper = paper_p("histogram", eps=eps, delta=delta, n=n)
        errors = []
        for _ in range(repeats):
            x = rng.integers(0, d, n)
            est = simulate.histogram_analyzer(
                simulate.shuffle(simulate.histogram_randomizer(x, d, p, rng), rng), n, d, p)
            errors.append(np.abs(est - np.bincount(x, minlength=d) / n).max())
        bound_cal = simulate.paper_error_bound(n, p, 0.05 / d)
        bound_paper = simulate.paper_error_bound(n, paper, 0.05 / d) if paper > 0.5 else np.nan
        rows.append([f"{n:.0e}", f"{1 - p:.3g}", f"{np.median(errors):.3g}", f"{max(errors):.3g}", f"{bound_cal:.3g}",
                     f"{bound_paper:.3g}"])
        points.append((n, np.median(errors), max(errors), bound_cal, bound_paper))
    plot = args.plot or (None if args.quick else common.ROOT / "docs" / "figures" / "protocols_error.png")
    if plot is not None:
        _plot(np.array(points), repeats, Path(plot))
    return ["#### Histogram protocol at the calibrated p: simulated error vs Theorem 3.1 (beta = 0.05 / d)", "",
            f"eps = {eps}, delta = {delta}, d = {d}, uniform values, {repeats} runs per n, seed {seed}.", "",
            *common.table(["n", "calibrated 1 - p", "median max error", "worst max error", "bound (calibrated p)",
                           "bound (paper p)"], rows)]


def _plot(a: np.ndarray, repeats: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(a[:, 0], a[:, 1], "o-", label=f"simulated max error (median of {repeats} runs)")
    ax.loglog(a[:, 0], a[:, 2], "s--", label=f"simulated max error (worst of {repeats} runs)")
    ax.loglog(a[:, 0], a[:, 3], "-", label="Theorem 3.1 bound at the calibrated p")
    ax.loglog(a[:, 0], a[:, 4], ":", label="Theorem 3.1 bound at the paper's p")
    ax.set_xlabel("n (users)")
    ax.set_ylabel("max |estimated - true frequency| over d = 10 bins")
    ax.set_title("Histogram protocol, (eps, delta) = (1, 1e-6)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


PARTS: dict[str, common.Part] = {"noise": noise, "error": error}


def main(argv: list[str] | None = None) -> None:
    p = common.parser("protocols", __doc__, PARTS)
    p.add_argument("--n-values", nargs="+", type=float, default=None, help="n of both parts (a small case)")
    p.add_argument("--repeats", type=int, default=None, help="error: simulated runs per n (default 20; --quick 2)")
    p.add_argument("--plot", default=None, help="error: the figure to write (default "
                   "docs/figures/protocols_error.png; --quick: none)")
    common.run("protocols", PARTS, p.parse_args(argv), argv)


if __name__ == "__main__":
    main()
