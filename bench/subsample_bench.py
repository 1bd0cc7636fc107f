"""Subsampled rounds (each user takes part with probability q; docs/composition.md, "Subsampled rounds").

Parts (``python -m bench.subsample_bench [--only PART ...] [--quick]``, or ``python -m bench subsample``):

* ``time``: whole-process ``tablegen compose ... --sample-rate 0.01`` for T = 1000 rounds at n = 1e5 and 1e7
  (eps0 = 3, delta = 1e-5; target <= 30 s each), and T = 1 at n = 1e8 (``compose --rounds 1`` and
  ``compute``; target <= 10 s), generic and k-RR k = 10.
* ``table``: total certified eps of T = 1000 rounds (eps0 = 3, delta = 1e-5) for k-RR k = 10 and the generic
  randomizer at n = 1e5 and 1e7 and q = 0.001 .. 0.1: ours, the subsampling-lemma baseline (NOT certified:
  ``tablegen.compose.baselines.subsampling_lemma_eps``) and no subsampling (every user in every round).
* ``mechanisms``: ours for k-RR (k = 10), RAPPOR, OUE, HR and the generic randomizer at the same q (one round
  and T = 1000), and how much tighter each is than the generic bound.
* ``figure``: total eps against T (1 .. 10^4) for q = 0.001, 0.01, 0.1 and 1 (generic, eps0 = 3, n = 1e5,
  delta = 1e-5), ours solid and the baseline dashed, written to ``--out`` (docs/figures/subsampled.png).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import numpy as np

PARTS = ("time", "table", "mechanisms", "figure")
EPS0, DELTA, ROUNDS = 3.0, 1e-5, 1000
RATES = (0.001, 0.003, 0.01, 0.03, 0.1)
FAMILIES = {"krr k=10": ("krr", {"k": 10}), "rappor": ("rappor", {}), "oue": ("oue", {}), "hr": ("hr", {}),
            "generic": ("generic", {})}


def _process(args: list[str]) -> tuple[float, dict[str, Any]]:
    """Seconds of ``tablegen ARGS --json`` as a fresh process, and its answer."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tablegen.cli", *args, "--json"], capture_output=True, text=True,
                         check=True)
    return time.perf_counter() - start, json.loads(out.stdout)


def part_time(quick: bool) -> None:
    print("## whole-process time (2-core machine shared with other jobs)\n")
    print("| command | seconds | target | eps |\n|---|---|---|---|")
    common = ["--eps0", str(EPS0), "--delta", str(DELTA), "--sample-rate", "0.01"]
    runs = [(["compose", "--rounds", str(ROUNDS), "--n", n], 30) for n in (["1e5"] if quick else ["1e5", "1e7"])]
    runs += [] if quick else [(["compose", "--rounds", "1", "--n", "1e8"], 10), (["compute", "--n", "1e8"], 10)]
    for name, params in (("generic", []), ("krr", ["--k", "10"])):
        for args, target in runs:
            seconds, answer = _process([*args, "--mechanism", name, *params, *common])
            print(f"| tablegen {' '.join(args)} --mechanism {name} {' '.join(params)} {' '.join(common)} "
                  f"| {seconds:.2f} | <= {target} | {answer['eps']:.4g} |")
    print()


def part_table(quick: bool) -> None:
    from tablegen import compose
    from tablegen.compose.baselines import subsampling_lemma_eps

    print(f"## total eps of T = {ROUNDS} rounds, eps0 = {EPS0:g}, delta = {DELTA:g} in total\n")
    print("| mechanism | n | q | ours (certified) | baseline: subsampling lemma (not certified) | baseline / ours "
          "| no subsampling (q = 1) |\n|---|---|---|---|---|---|---|")
    for label in ("krr k=10", "generic"):
        name, params = FAMILIES[label]
        for n in ([10**5] if quick else [10**5, 10**7]):
            full = compose.eps(name, eps0=EPS0, n=n, rounds=ROUNDS, delta=DELTA, **params).eps
            for q in (RATES[2:3] if quick else RATES):
                ours = compose.eps(name, eps0=EPS0, n=n, rounds=ROUNDS, delta=DELTA, sample_rate=q, **params).eps
                lemma = subsampling_lemma_eps(name, eps0=EPS0, n=n, rounds=ROUNDS, delta=DELTA, sample_rate=q,
                                              **params)
                print(f"| {label} | {n:.0e} | {q:g} | {ours:.4g} | {lemma:.4g} | {lemma / ours:.1f}x | {full:.4g} |")
    print()


def part_mechanisms(quick: bool) -> None:
    from tablegen import compose
    from tablegen.engine import eps_bounds
    from tablegen.mechanisms import get_mechanism
    from tablegen.mechanisms.subsample import subsampled

    n = 10**5
    print(f"## mechanisms at the same q (eps0 = {EPS0:g}, n = {n:.0e}, delta = {DELTA:g})\n")
    print(f"| mechanism | q | one round | generic / it | T = {ROUNDS} | generic / it |\n|---|---|---|---|---|---|")
    for q in ((0.01,) if quick else (0.001, 0.01, 0.1)):
        rows = {}
        for label, (name, params) in FAMILIES.items():
            one = eps_bounds(subsampled(get_mechanism(name), q), eps0=EPS0, n=n, delta=DELTA, lower=False,
                             **params).upper
            many = compose.eps(name, eps0=EPS0, n=n, rounds=ROUNDS, delta=DELTA, sample_rate=q, **params).eps
            rows[label] = (one, many)
        g_one, g_many = rows["generic"]
        for label, (one, many) in rows.items():
            print(f"| {label} | {q:g} | {one:.4g} | {g_one / one:.2f}x | {many:.4g} | {g_many / many:.2f}x |")
    print()


def part_figure(quick: bool, out: str) -> None:
    from tablegen.compose import one_round, pld
    from tablegen.compose.baselines import subsampling_lemma_eps

    n = 10**5
    rounds = [int(t) for t in np.unique(np.geomspace(1, 10**4, 5 if quick else 9).round())]
    rates = (0.01, 1.0) if quick else (0.001, 0.01, 0.1, 1.0)
    print(f"## figure: generic, eps0 = {EPS0:g}, n = {n:.0e}, delta = {DELTA:g}\n")
    print("| q | " + " | ".join(f"T={t}" for t in rounds) + " |\n|---|" + "---|" * len(rounds))
    curves = {}
    for q in rates:
        single = one_round("generic", eps0=EPS0, n=n, sample_rate=q)
        ours = [pld.eps_for_delta(pld.self_composed(single, t), DELTA) for t in rounds]
        lemma = [subsampling_lemma_eps("generic", eps0=EPS0, n=n, rounds=t, delta=DELTA, sample_rate=q)
                 for t in rounds] if q < 1 else None
        curves[q] = (ours, lemma)
        print(f"| {q:g} ours | " + " | ".join(f"{v:.3g}" for v in ours) + " |")
        if lemma is not None:
            print(f"| {q:g} baseline | " + " | ".join(f"{v:.3g}" for v in lemma) + " |")
    print()
    if quick:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for (q, (ours, lemma)), color in zip(curves.items(), ("C0", "C1", "C2", "C3"), strict=False):
        ax.loglog(rounds, ours, "-o", color=color, ms=3, label=f"ours, q = {q:g}" + (" (every user)" if q == 1 else ""))
        if lemma is not None:
            ax.loglog(rounds, lemma, "--", color=color, label=f"subsampling lemma, q = {q:g} (not certified)")
    ax.set_xlabel("rounds T")
    ax.set_ylabel(f"total eps at delta = {DELTA:g}")
    ax.set_title(f"generic eps0 = {EPS0:g} randomizer, n = {n:.0e}, Poisson rate q")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="parts to run")
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer settings, no figure file")
    parser.add_argument("--out", default="docs/figures/subsampled.png", help="figure file")
    args = parser.parse_args(argv)
    for part in args.only:
        start = time.perf_counter()
        if part == "figure":
            part_figure(args.quick, args.out)
        else:
            {"time": part_time, "table": part_table, "mechanisms": part_mechanisms}[part](args.quick)
        print(f"({part}: {time.perf_counter() - start:.1f} s)\n")


if __name__ == "__main__":
    main()
