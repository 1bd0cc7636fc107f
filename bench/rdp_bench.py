"""Rényi DP of shuffled rounds (docs/renyi.md): cost per call, the analogues of Feldman-McMillan-Talwar
2023's Figures 2 and 3, and PLD composition against the RDP route.

    python -m bench.rdp_bench                        # every part
    python -m bench.rdp_bench --parts time --quick   # smoke run

Parts:
* ``time``: seconds per ``rdp_bounds`` call (all default orders, with the lower bound) for every
  family at n = 1e4, 1e6, 1e8 and eps0 = 1, 4;
* ``alpha``: RDP against alpha (ours, our lower bound, the pure-DP bound eps0), figure
  docs/figures/rdp_alpha.png;
* ``rounds``: eps after T rounds at delta = 1e-6: our RDP curve composed and converted by
  dp-accounting, our PLD composition (``tablegen.compose.eps``), advanced composition of our
  single-round eps; figure docs/figures/rdp_rounds.png;
* ``table``: the PLD route against the RDP route on a grid of (n, eps0, T), Markdown.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench import tightness

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
MATRIX = [[0.5, 0.3, 0.2], [0.3, 0.5, 0.2], [0.25, 0.25, 0.5]]  # a 3-input randomizer, log(2.5)-LDP
SIMPLE = ("generic", "krr k=10", "blh", "olh", "rappor", "oue", "hr", "laplace")
FAMILIES: list[tuple[str, str, dict[str, Any]]] = [
    *(case for case in tightness.CASES if case[0] in SIMPLE),  # the tightness grid's rows, same labels
    ("finite 3x3", "finite", {"matrix": MATRIX}),
    ("joint krr k=10 parts=2", "joint", {"base": "krr", "k": 10, "parts": 2}),
    ("parallel krr,blh k=10", "parallel", {"bases": "krr,blh", "weights": "0.5,0.5", "k": 10}),
]
DELTA = 1e-6
ROUNDS = [1, 3, 10, 30, 100, 300, 1000, 3000, 10000]


def timing(quick: bool) -> list[str]:
    """Seconds per call (wall clock, and this process's CPU time: the machine is shared), every
    family, all default orders, with the lower bound."""
    from tablegen.engine import rdp_bounds

    ns = [10**4] if quick else [10**4, 10**6, 10**8]
    eps0s = [1.0] if quick else [1.0, 4.0]
    families = FAMILIES[:2] if quick else FAMILIES
    lines = ["| family | " + " | ".join(f"n={n:.0e} eps0={e:g}" for n in ns for e in eps0s) + " |",
             "|---|" + "---|" * (len(ns) * len(eps0s))]
    worst = 0.0
    for label, name, params in families:
        cells = []
        for n in ns:
            for eps0 in eps0s:
                start, cpu = time.perf_counter(), time.process_time()
                rdp_bounds(name, eps0=eps0, n=n, **params)
                seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
                worst = max(worst, seconds)
                cells.append(f"{seconds:.2f} ({cpu:.2f})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    lines.append(f"\nwall clock (CPU) seconds; slowest call: {worst:.2f} s")
    return lines


def alpha_figure(quick: bool) -> list[str]:
    """RDP against alpha: ours, the lower bound, eps0 (the seed's Figure 2, our analyses)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tablegen.engine import rdp_bounds

    panels = [("generic", {}, 1.0, 10**4), ("generic", {}, 4.0, 10**4), ("krr", {"k": 10}, 4.0, 10**4),
              ("generic", {}, 4.0, 10**6)]
    if quick:
        panels = panels[:1]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    lines = ["| setting | alpha | ours | lower | eps0 |", "|---|---|---|---|---|"]
    for ax, (name, params, eps0, n) in zip(axes[0], panels, strict=True):
        r = rdp_bounds(name, eps0=eps0, n=n, **params)
        label = f"{name}{' k=' + str(params['k']) if params else ''} eps0={eps0:g} n={n:.0e}"
        ax.loglog(r.orders, r.rdp, label="ours (certified)")
        ax.loglog(r.orders, r.rdp_lower, "--", label="our lower bound")
        ax.axhline(eps0, color="k", lw=0.8, ls=":", label="pure DP: eps0")
        ax.set(title=label, xlabel="order alpha", ylabel="RDP epsilon(alpha)")
        ax.legend(fontsize=7)
        for alpha in (2.0, 8.0, 32.0, 128.0, 1024.0):
            i = r.orders.index(alpha)
            lines.append(f"| {label} | {alpha:g} | {r.rdp[i]:.4g} | {r.rdp_lower[i]:.4g} | {eps0:g} |")
    fig.tight_layout()
    fig.savefig(FIGURES / "rdp_alpha.png", dpi=110)
    return lines


def routes(name: str, params: dict[str, Any], eps0: float, n: int, rounds: list[int],
           advanced: bool) -> dict[str, list[float]]:
    """eps at DELTA after each T: RDP + dp-accounting conversion, PLD composition, advanced."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    from tablegen import compose
    from tablegen.compose import baselines
    from tablegen.engine import rdp_bounds

    r = rdp_bounds(name, eps0=eps0, n=n, lower=False, **params)
    out: dict[str, list[float]] = {"rdp": [], "pld": [], "advanced": []}
    for t in rounds:
        out["rdp"].append(compute_epsilon(r.orders, [t * x for x in r.rdp], DELTA)[0])
        out["pld"].append(compose.eps(name, eps0=eps0, n=n, rounds=t, delta=DELTA, **params).eps)
        if advanced:
            out["advanced"].append(baselines.advanced_eps(name, eps0=eps0, n=n, rounds=t, delta=DELTA, **params))
    return out


def rounds_figure(quick: bool) -> list[str]:
    """eps after T rounds by the three routes (the seed's Figure 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [("generic", {}, 1.0, 10**4), ("krr", {"k": 10}, 1.0, 10**6)]
    rounds = [1, 10, 100] if quick else ROUNDS
    if quick:
        settings = settings[:1]
    fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 3.8), squeeze=False)
    lines = ["| setting | T | RDP + conversion | PLD (ours) | advanced |", "|---|---|---|---|---|"]
    for ax, (name, params, eps0, n) in zip(axes[0], settings, strict=True):
        got = routes(name, params, eps0, n, rounds, advanced=True)
        label = f"{name}{' k=' + str(params['k']) if params else ''} eps0={eps0:g} n={n:.0e}"
        ax.loglog(rounds, got["pld"], label="PLD composition (tablegen compose)")
        ax.loglog(rounds, got["rdp"], label="RDP (tablegen rdp) + dp-accounting conversion")
        ax.loglog(rounds, got["advanced"], label="advanced composition of the round's eps")
        ax.set(title=label, xlabel="rounds T", ylabel=f"eps at delta = {DELTA:g}")
        ax.legend(fontsize=7)
        lines += [f"| {label} | {t} | {a:.4g} | {b:.4g} | {c:.4g} |"
                  for t, a, b, c in zip(rounds, got["rdp"], got["pld"], got["advanced"], strict=True)]
    fig.tight_layout()
    fig.savefig(FIGURES / "rdp_rounds.png", dpi=110)
    return lines


def table(quick: bool) -> list[str]:
    """PLD composition against the RDP route on a grid of (n, eps0, T), delta = 1e-6."""
    ns = [10**4] if quick else [10**3, 10**4, 10**6]
    eps0s = [1.0] if quick else [0.5, 2.0, 4.0]
    rounds = [1, 100] if quick else [1, 10, 100, 1000]
    lines = ["| mechanism | n | eps0 | T | PLD | RDP + conversion | RDP / PLD |", "|---|---|---|---|---|---|---|"]
    for name, params in [("generic", {}), ("krr", {"k": 10})]:
        for n in ns:
            for eps0 in eps0s:
                got = routes(name, params, eps0, n, rounds, advanced=False)
                for t, a, b in zip(rounds, got["rdp"], got["pld"], strict=True):
                    lines.append(f"| {name}{' k=10' if params else ''} | {n:.0e} | {eps0:g} | {t} | {b:.4g} | "
                                 f"{a:.4g} | {a / b:.2f} |")
                    print(lines[-1], flush=True)
    return lines


PARTS = {"time": timing, "alpha": alpha_figure, "rounds": rounds_figure, "table": table}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", nargs="+", choices=sorted(PARTS), default=list(PARTS))
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer settings")
    args = p.parse_args(argv)
    for part in args.parts:
        print(f"## {part}")
        print("\n".join(PARTS[part](args.quick)))
        print(flush=True)


if __name__ == "__main__":
    main()
