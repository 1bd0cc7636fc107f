"""Report for the shuffled-histogram protocols: calibrated p against the paper's, and the
simulated error at the calibrated p against Theorem 3.1's bound (with a plot).

Run as ``python bench/protocols_report.py [--plot docs/figures/protocols_error.png]
[--n-values N ...] [--repeats R]``; prints Markdown (docs/protocols.md holds the output of the
defaults; ``--n-values`` replaces the n of both studies, for a small case).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from tablegen.protocols import simulate
from tablegen.protocols.accounting import calibrate, delta_bounds, paper_p

ROOT = Path(__file__).resolve().parents[1]


NOISE_N = (10**4, 10**5, 10**6, 10**7)
ERROR_N = (10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6)


def noise_table(protocol: str, delta: float, n_values: tuple[int, ...] = NOISE_N) -> list[str]:
    lines = [f"#### {protocol}, delta = {delta:g}: 1 - p (noise per user), calibrated vs paper", "",
             "| n | eps | calibrated 1 - p | paper 1 - p | noise reduction | certified delta at calibrated p |",
             "|---|---|---|---|---|---|"]
    for n in n_values:
        for eps in (0.25, 0.5, 1.0):
            paper = paper_p(protocol, eps=eps, delta=delta, n=n)
            try:
                p = calibrate(protocol, eps=eps, delta=delta, n=n)
            except ValueError:
                lines.append(f"| {n:.0e} | {eps} | (no p in (1/2, 1)) | {1 - paper:.3g} | - | - |")
                continue
            check = delta_bounds(protocol, eps=eps, n=n, p=p)[0]
            paper_text = f"{1 - paper:.3g}" if paper > 0.5 else f"{1 - paper:.3g} (outside (0, 1/2))"
            ratio = f"{(1 - paper) / (1 - p):.1f}x" if paper > 0.5 else "-"
            lines.append(f"| {n:.0e} | {eps} | {1 - p:.3g} | {paper_text} | {ratio} | {check:.6g} |")
    return lines


def error_study(plot: Path | None, n_values: tuple[int, ...] = ERROR_N, repeats: int = 20,
                seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    eps, delta, d = 1.0, 1e-6, 10
    rows, points = [], []
    for n in n_values:
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
        rows.append(f"| {n:.0e} | {1 - p:.3g} | {np.median(errors):.3g} | {max(errors):.3g} | {bound_cal:.3g} | "
                    f"{bound_paper:.3g} |")
        points.append((n, np.median(errors), max(errors), bound_cal, bound_paper))
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        a = np.array(points)
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
        plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(plot, dpi=120)
    return ["#### Histogram protocol at the calibrated p: simulated error vs Theorem 3.1 (beta = 0.05 / d)", "",
            f"eps = {eps}, delta = {delta}, d = {d}, uniform values, {repeats} runs per n, seed {seed}.", "",
            "| n | calibrated 1 - p | median max error | worst max error | bound (calibrated p) | bound (paper p) |",
            "|---|---|---|---|---|---|", *rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", default=str(ROOT / "docs" / "figures" / "protocols_error.png"))
    parser.add_argument("--n-values", nargs="+", type=float, default=None, help="n of both studies")
    parser.add_argument("--repeats", type=int, default=20, help="simulated runs per n")
    args = parser.parse_args()
    noise_n, error_n = (NOISE_N, ERROR_N) if args.n_values is None else (tuple(int(n) for n in args.n_values),) * 2
    out = []
    for protocol in ("binary-sum", "histogram"):
        out += noise_table(protocol, 1e-6, noise_n) + [""]
    out += error_study(Path(args.plot) if args.plot else None, error_n, args.repeats)
    print("\n".join(out))


if __name__ == "__main__":
    main()
