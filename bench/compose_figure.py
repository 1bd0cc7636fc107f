"""Figure for docs/composition.md: total certified eps versus the number of rounds T.

Run as ``python bench/compose_figure.py [--out docs/figures/composition.png] [--points 9]
[--max-rounds 10000] [--delta 1e-6] [--settings 'krr k=10 eps0=1 n=1e6;generic eps0=1 n=1e6;...']``.
For each setting (one panel): ours (``tablegen.compose``: the certified PLD of one round,
self-composed), basic composition (T times the single-round certified eps at delta/T) and
advanced composition (Dwork-Rothblum-Vadhan with delta' = delta/2, delta1 = delta/(2T)), at
T = 1 .. --max-rounds (geometric).  Prints a Markdown table of the plotted values.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from tablegen.compose import one_round, pld
from tablegen.compose.baselines import advanced_eps, basic_eps

SETTINGS = "krr k=10 eps0=1 n=1e6;krr k=10 eps0=4 n=1e5;generic eps0=1 n=1e6;generic eps0=2 n=1e4"


def parse_setting(text: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """'krr k=10 eps0=1 n=1e6' -> ('krr', {'eps0': 1.0, 'n': 1000000}, {'k': 10})."""
    family, *pairs = text.split()
    values = {k: float(v) for k, v in (p.split("=") for p in pairs)}
    where = {"eps0": values.pop("eps0"), "n": int(values.pop("n"))}
    return family, where, {k: int(v) if v.is_integer() else v for k, v in values.items()}


def curves(setting: str, rounds: list[int], delta: float) -> dict[str, list[float]]:
    """Ours, basic and advanced total eps at each T."""
    family, where, params = parse_setting(setting)
    single = one_round(family, **where, **params)
    ours = [pld.eps_for_delta(pld.self_composed(single, t), delta) for t in rounds]
    basic = [basic_eps(family, **where, rounds=t, delta=delta, **params) for t in rounds]
    advanced = [advanced_eps(family, **where, rounds=t, delta=delta, **params) for t in rounds]
    return {"ours (PLD)": ours, "basic T*eps": basic, "advanced (DRV)": advanced}


def plot(results: dict[str, dict[str, list[float]]], rounds: list[int], delta: float, out: str) -> None:
    import matplotlib.pyplot as plt

    columns = min(2, len(results))
    rows = -(-len(results) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.0 * rows), squeeze=False)
    for ax in axes.flat[len(results):]:
        ax.set_visible(False)
    for ax, (setting, lines) in zip(axes.flat, results.items(), strict=False):
        for (label, values), style in zip(lines.items(), ("-o", "--", ":"), strict=True):
            ax.loglog(rounds, values, style, label=label, markersize=3)
        ax.set_title(setting, fontsize=9)
        ax.set_xlabel("rounds T")
        ax.set_ylabel(f"total certified eps (delta={delta:g})")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/figures/composition.png")
    parser.add_argument("--points", type=int, default=9, help="values of T (geometric)")
    parser.add_argument("--max-rounds", type=int, default=10_000)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--settings", default=SETTINGS, help="';'-separated 'family [k=..] eps0=.. n=..'")
    args = parser.parse_args()
    rounds = sorted({int(round(t)) for t in np.geomspace(1, args.max_rounds, args.points)})
    results = {s.strip(): curves(s.strip(), rounds, args.delta) for s in args.settings.split(";") if s.strip()}
    plot(results, rounds, args.delta, args.out)
    print(f"wrote {args.out}\n\n| setting | T | ours | basic | advanced | basic / ours |\n|---|---|---|---|---|---|")
    for setting, lines in results.items():
        for i, t in enumerate(rounds):
            ours, basic, adv = (lines[k][i] for k in lines)
            print(f"| {setting} | {t} | {ours:.4g} | {basic:.4g} | {adv:.4g} | {basic / ours:.1f} |")


if __name__ == "__main__":
    main()
