"""Benchmark of composition (tablegen.compose): whole-process time, and tightness against basic
and advanced composition.

Run as ``python bench/compose_bench.py [--repeat 3] [--no-tightness]``; prints Markdown
(bench/RESULTS.md holds its output).

1. ``tablegen compose --mechanism krr --k 10 --eps0 1 --n 1e6 --rounds 365 --delta 1e-8 --json``
   as a fresh process (wall time around it, best and median of --repeat), and in-process the
   split: import, engine profile evaluations (their count), PLD composition.
2. ``tablegen compose-sequence`` of 30 different rounds (k-RR k=10 and generic alternating,
   eps0 from 0.5 to 2, n from 1e5 to 1e7, geometric), whole process.
3. Tightness: composed eps at T = 10, 100, 1000 (delta = 1e-8 in total) for three settings,
   beside basic (T * eps1 at delta/T) and advanced composition (delta' = delta/2, delta1 = delta/(2T)).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SINGLE = ["compose", "--mechanism", "krr", "--k", "10", "--eps0", "1", "--n", "1e6", "--rounds", "365",
          "--delta", "1e-8", "--json"]
TIGHTNESS = [("krr", 1.0, 10**6, {"k": 10}), ("krr", 4.0, 10**5, {"k": 10}), ("generic", 1.0, 10**6, {})]


def sequence() -> list[dict]:
    rounds = []
    for i in range(30):
        t = i / 29
        entry = {"mechanism": "krr" if i % 2 == 0 else "generic", "eps0": round(0.5 * 4**t, 4),
                 "n": int(round(1e5 * 100**t))}
        if i % 2 == 0:
            entry["k"] = 10
        rounds.append(entry)
    return rounds


def whole_process(args: list[str], repeat: int) -> tuple[list[float], dict]:
    times, out = [], {}
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "tablegen.cli", *args], capture_output=True, text=True,
                              cwd=ROOT, check=True)
        times.append(time.perf_counter() - start)
        out = json.loads(done.stdout)
    return times, out


def split() -> dict:
    """Import, profile evaluations and composition of section 1, in this process."""
    t0 = time.perf_counter()
    from tablegen import compose
    from tablegen.compose import pld
    from tablegen.engine import accountant

    t1 = time.perf_counter()
    calls = {"n": 0, "s": 0.0}
    original = accountant.delta_curve

    def counted(*a, **k):
        start = time.perf_counter()
        out = original(*a, **k)
        calls["n"] += len(k["eps"])
        calls["s"] += time.perf_counter() - start
        return out

    import tablegen.engine as engine

    engine.delta_curve = counted
    try:
        single = compose.one_round("krr", eps0=1.0, n=10**6, k=10)
    finally:
        engine.delta_curve = original
    t2 = time.perf_counter()
    value = pld.eps_for_delta(pld.self_composed(single, 365), 1e-8)
    t3 = time.perf_counter()
    return {"import_s": t1 - t0, "profile_points": calls["n"], "profile_s": calls["s"], "one_round_s": t2 - t1,
            "compose_s": t3 - t2, "eps": value}


def tightness() -> list[str]:
    from tablegen import compose
    from tablegen.compose.baselines import advanced_eps, basic_eps

    rows = []
    for family, eps0, n, params in TIGHTNESS:
        for t in (10, 100, 1000):
            ours = compose.eps(family, eps0=eps0, n=n, rounds=t, delta=1e-8, **params).eps
            basic = basic_eps(family, eps0=eps0, n=n, rounds=t, delta=1e-8, **params)
            adv = advanced_eps(family, eps0=eps0, n=n, rounds=t, delta=1e-8, **params)
            label = f"{family}{' k=' + str(params['k']) if params else ''} eps0={eps0:g} n={n:.0e}"
            rows.append(f"| {label} | {t} | {ours:.4g} | {basic:.4g} | {adv:.4g} | {basic / ours:.1f}x | "
                        f"{min(basic, adv) / ours:.1f}x |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per whole-process timing")
    parser.add_argument("--no-tightness", action="store_true", help="skip section 3")
    args = parser.parse_args()
    head = subprocess.run(["git", "log", "-1", "--format=%h %cs"], capture_output=True, text=True, cwd=ROOT)
    print(f"## Composition benchmark (commit {head.stdout.strip()})\n")
    times, out = whole_process(SINGLE, args.repeat)
    print(f"- `tablegen {' '.join(SINGLE)}`: eps = {out['eps']:.6g}; whole process best {min(times):.2f} s, "
          f"median {statistics.median(times):.2f} s (target <= 2 s)")
    s = split()
    print(f"- in-process split: import {s['import_s']:.2f} s; one-round PLD {s['one_round_s']:.2f} s of which "
          f"{s['profile_points']} certified profile points {s['profile_s']:.2f} s; 365-fold composition and "
          f"eps {s['compose_s']:.3f} s")
    seq = json.dumps(sequence())
    times, out = whole_process(["compose-sequence", "--rounds", seq, "--delta", "1e-8", "--json"], args.repeat)
    print(f"- `tablegen compose-sequence` of 30 different rounds (k-RR k=10 / generic, eps0 0.5..2, n 1e5..1e7): "
          f"eps = {out['eps']:.6g}; whole process best {min(times):.2f} s, median {statistics.median(times):.2f} s "
          f"(target <= 10 s)")
    if not args.no_tightness:
        print("\n| setting | T | ours | basic | advanced | basic / ours | best classical / ours |\n"
              "|---|---|---|---|---|---|---|")
        print("\n".join(tightness()))


if __name__ == "__main__":
    main()
