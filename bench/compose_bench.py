"""Composition of rounds (tablegen.compose): whole-process time, tightness against basic and
advanced composition (a table, and the figure of docs/composition.md), and joint compositions.

Parts (``python -m bench compose [--only PART ...] [--quick]``):

* ``time``: ``tablegen compose --mechanism krr --k 10 --eps0 1 --n 1e6 --rounds 365 --delta 1e-8 --json`` as a
  fresh process (best and median of ``--repeat``; target <= 2 s), in this process the split (import,
  engine profile evaluations and their count, PLD composition), and ``tablegen compose-sequence`` of 30
  different rounds (k-RR k = 10 and generic alternating, eps0 0.5 to 2, n 1e5 to 1e7, geometric; target
  <= 10 s).
* ``tightness``: total certified eps at T = 10, 100, 1000 (delta = 1e-8 in total) for three settings, beside
  basic (T * eps1 at delta / T) and advanced composition (Dwork-Rothblum-Vadhan, delta' = delta / 2,
  delta1 = delta / (2T)).
* ``figure``: the same three curves against T = 1 .. ``--max-rounds`` (``--points`` values, geometric,
  delta = ``--delta``) for each of ``--settings``, one panel each, written to ``--out``
  (docs/figures/composition.png), with the table of the plotted values.
* ``lookup``: ``lookup eps --rounds T`` (the route of ``/v1/eps?rounds=T`` and the page) against
  ``tablegen compose`` on ``--questions`` random questions inside the default table (k-RR k = 10 and 100,
  generic, RAPPOR; eps0 0.2-4, n 1e4-1e8, delta 1e-10-1e-5, T 2-1000, log-uniform; seeded): the default
  route (the engine's composition) and the table's own (``max_slack=None``), their ratios to compose,
  the time of each in a warm process, and ``lookup eps --rounds 365`` as a whole process.
* ``gaussian``: rounds of the shuffled Gaussian on bits at eps 1, delta 1e-6, n 1e5 in total: the smallest
  certified sigma for T = 1, 10, 100 rounds (``compose.sigma_min``; T = 1 also by the engine alone, tighter),
  beside the sigma below which the T sums of the outputs alone exceed eps (``sum_floor``: no analysis
  certifies less), with the eps spent, the bracket's width and the seconds of each search; and
  ``rounds_max`` at sigma 0.5, 1, 2 with a mixed sequence (10 Gaussian rounds at sigma 1 and 10 of k-RR
  k = 10, eps0 1, n 1e5).  ``--quick``: eps 0.02, n 1e4, T = 1, 4, tolerance 5%, sigma 8 (rounds_max)
  and 4 (the sequence).
* ``joint``: k-joint compositions (k parts, eps0 / k each) of Laplace, k-RR k = 10 and RAPPOR, k = 2, 3, 4,
  each in a fresh one-core process capped at ``--mem-gib``: components of the merged upper and lower
  decompositions, build time, one certified eps(delta = 1e-6) at n = 1e6 with its lower bound, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np

from bench import common

SINGLE = ["compose", "--mechanism", "krr", "--k", "10", "--eps0", "1", "--n", "1e6", "--rounds", "365",
          "--delta", "1e-8", "--json"]
TIGHTNESS = "krr k=10 eps0=1 n=1e6;krr k=10 eps0=4 n=1e5;generic eps0=1 n=1e6"
FIGURE = "krr k=10 eps0=1 n=1e6;krr k=10 eps0=4 n=1e5;generic eps0=1 n=1e6;generic eps0=2 n=1e4"
QUICK = "generic eps0=1 n=100"
JOINT_CHILD = """
import json, time
from tablegen.mechanisms import get_mechanism
from tablegen.engine import eps_bounds
m = get_mechanism("joint")
params = m.resolve({params!r})
t0 = time.perf_counter()
upper, lower = m.upper({eps0!r}, **params), m.lower({eps0!r}, **params)
t1 = time.perf_counter()
b = eps_bounds("joint", eps0={eps0!r}, n=10**6, delta=1e-6, **{params!r})
t2 = time.perf_counter()
print(json.dumps({{"upper": max(d.c.size for d in upper), "lower": max(d.c.size for d in lower),
                  "build_s": t1 - t0, "query_s": t2 - t1, "eps": b.upper, "eps_lower": b.lower}}))
"""


def _sequence(count: int) -> list[dict]:
    rounds = []
    for i in range(count):
        t = i / max(count - 1, 1)
        entry = {"mechanism": "krr" if i % 2 == 0 else "generic", "eps0": round(0.5 * 4**t, 4),
                 "n": int(round(1e5 * 100**t))}
        rounds.append({**entry, "k": 10} if i % 2 == 0 else entry)
    return rounds


def _whole_process(argv: list[str], repeat: int, cli: str = "tablegen.cli") -> tuple[list[float], dict]:
    runs = [common.child([sys.executable, "-m", cli, *argv]) for _ in range(repeat)]
    failed = [r.error for r in runs if r.error]
    if failed:
        raise RuntimeError(failed[0])
    return [r.wall_s for r in runs], json.loads(runs[-1].stdout)


def _split(rounds: int) -> dict:
    """Import, profile evaluations and composition of ``SINGLE``, in this process."""
    t0 = time.perf_counter()
    import tablegen.engine as engine
    from tablegen import compose
    from tablegen.compose import pld

    t1 = time.perf_counter()
    calls = {"n": 0, "s": 0.0}
    original = engine.delta_curve

    def counted(*a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        out = original(*a, **k)
        calls["n"] += len(k["eps"])
        calls["s"] += time.perf_counter() - start
        return out

    engine.delta_curve = counted
    try:
        single = compose.one_round("krr", eps0=1.0, n=10**6, k=10)
    finally:
        engine.delta_curve = original
    t2 = time.perf_counter()
    value = pld.eps_for_delta(pld.self_composed(single, rounds), 1e-8)
    return {"import_s": t1 - t0, "points": calls["n"], "profile_s": calls["s"], "one_round_s": t2 - t1,
            "compose_s": time.perf_counter() - t2, "eps": value}


def timing(args: argparse.Namespace) -> list[str]:
    repeat, count = (1, 3) if args.quick else (args.repeat, 30)
    times, out = _whole_process(SINGLE, repeat)
    s = _split(365)
    seq_times, seq = _whole_process(["compose-sequence", "--rounds", json.dumps(_sequence(count)), "--delta", "1e-8",
                                     "--json"], repeat)
    return ["### Composition: time", "",
            f"- `tablegen {' '.join(SINGLE)}`: eps = {out['eps']:.6g}; whole process best {min(times):.2f} s, "
            f"median {statistics.median(times):.2f} s (target <= 2 s)",
            f"- in-process split: import {s['import_s']:.2f} s; one-round PLD {s['one_round_s']:.2f} s of which "
            f"{s['points']} certified profile points {s['profile_s']:.2f} s; 365-fold composition and eps "
            f"{s['compose_s']:.3f} s",
            f"- `tablegen compose-sequence` of {count} different rounds (k-RR k=10 / generic, eps0 0.5..2, n "
            f"1e5..1e7): eps = {seq['eps']:.6g}; whole process best {min(seq_times):.2f} s, median "
            f"{statistics.median(seq_times):.2f} s (target <= 10 s)"]


def parse_setting(text: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """'krr k=10 eps0=1 n=1e6' -> ('krr', {'eps0': 1.0, 'n': 1000000}, {'k': 10})."""
    family, *pairs = text.split()
    values = {k: float(v) for k, v in (p.split("=") for p in pairs)}
    where = {"eps0": values.pop("eps0"), "n": int(values.pop("n"))}
    return family, where, {k: int(v) if v.is_integer() else v for k, v in values.items()}


def curves(setting: str, rounds: list[int], delta: float) -> dict[str, list[float]]:
    """Ours (the certified PLD of one round, self-composed), basic and advanced total eps at each T."""
    from tablegen.compose import one_round, pld
    from tablegen.compose.baselines import advanced_eps, basic_eps

    family, where, params = parse_setting(setting)
    single = one_round(family, **where, **params)
    return {"ours (PLD)": [pld.eps_for_delta(pld.self_composed(single, t), delta) for t in rounds],
            "basic T*eps": [basic_eps(family, **where, rounds=t, delta=delta, **params) for t in rounds],
            "advanced (DRV)": [advanced_eps(family, **where, rounds=t, delta=delta, **params) for t in rounds]}


def _rows(results: dict[str, dict[str, list[float]]], rounds: list[int]) -> list[list[object]]:
    rows = []
    for setting, lines in results.items():
        for i, t in enumerate(rounds):
            ours, basic, advanced = (values[i] for values in lines.values())
            rows.append([setting, t, f"{ours:.4g}", f"{basic:.4g}", f"{advanced:.4g}", f"{basic / ours:.1f}x",
                         f"{min(basic, advanced) / ours:.1f}x"])
    return rows


HEADER = ["setting", "T", "ours", "basic", "advanced", "basic / ours", "best classical / ours"]


def tightness(args: argparse.Namespace) -> list[str]:
    rounds = [1, 20] if args.quick else [10, 100, 1000]
    settings = [QUICK] if args.quick else TIGHTNESS.split(";")
    results = {s: curves(s, rounds, 1e-8) for s in settings}
    return ["### Composition: total certified eps at delta = 1e-8 against basic and advanced composition", "",
            *common.table(HEADER, _rows(results, rounds))]


def figure(args: argparse.Namespace) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, max_rounds = (2, 20) if args.quick else (args.points, args.max_rounds)
    rounds = sorted({int(round(t)) for t in np.geomspace(1, max_rounds, points)})
    settings = args.settings or (QUICK if args.quick else FIGURE)
    results = {s.strip(): curves(s.strip(), rounds, args.delta) for s in settings.split(";") if s.strip()}
    columns = min(2, len(results))
    rows = -(-len(results) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.0 * rows), squeeze=False)
    for ax in axes.flat[len(results):]:
        ax.set_visible(False)
    for ax, (setting, lines) in zip(axes.flat, results.items(), strict=False):
        for (name, values), style in zip(lines.items(), ("-o", "--", ":"), strict=True):
            ax.loglog(rounds, values, style, label=name, markersize=3)
        ax.set_title(setting, fontsize=9)
        ax.set_xlabel("rounds T")
        ax.set_ylabel(f"total certified eps (delta={args.delta:g})")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    out = args.out or ("" if args.quick else str(common.ROOT / "docs" / "figures" / "composition.png"))
    if out:
        fig.savefig(out, dpi=110)
    return [f"### Composition figure ({'wrote ' + out if out else 'not written'}), delta = {args.delta:g}", "",
            *common.table(HEADER, _rows(results, rounds))]


def gaussian_rounds(args: argparse.Namespace) -> list[str]:
    from tablegen import compose
    from tablegen.compose import budget
    from tablegen.engine import gaussian

    eps, delta, n = (0.02, 1e-6, 10**4) if args.quick else (1.0, 1e-6, 10**5)
    rtol = 0.05 if args.quick else budget.RTOL
    rows = []
    for t in (1, 4) if args.quick else (1, 10, 100):
        start = time.perf_counter()
        noise = budget.sigma_min(rounds=t, eps=eps, delta=delta, n=n, rtol=rtol)
        seconds = time.perf_counter() - start
        floor = budget.sum_floor(rounds=t, eps=eps, delta=delta, n=n)
        rows.append([t, f"{noise.sigma:.4g}", f"{noise.eps:.4g}", f"{noise.rtol:.1e}", f"{floor:.4g}",
                     f"{seconds:.0f}"])
    start = time.perf_counter()
    engine = gaussian.sigma_min(eps, delta, n, rtol=rtol)
    lines = [f"### Gaussian rounds: the smallest certified sigma for eps {eps:g}, delta {delta:g}, n {n:.0e} in total",
             "", *common.table(["T", "sigma (composed)", "eps spent", "bracket width", "sum-of-outputs floor",
                                "seconds"], rows), "",
             f"- one round by the engine alone (`tablegen calibrate` without --rounds): sigma {engine:.4g} "
             f"({time.perf_counter() - start:.0f} s)"]
    for sigma in (8.0,) if args.quick else (0.5, 1.0, 2.0):
        start = time.perf_counter()
        b = compose.rounds_max("gaussian", n=n, eps=eps, delta=delta, sigma=sigma)
        lines.append(f"- `rounds_max` at sigma {sigma:g}: {b.rounds}{'+' if b.capped else ''} rounds (eps spent "
                     f"{b.eps:.4g}; {time.perf_counter() - start:.1f} s)")
    mixed = [compose.Round.gaussian(4.0 if args.quick else 1.0, n, times=10),
             compose.Round("krr", 1.0, n, {"k": 10}, times=10)]
    start = time.perf_counter()
    c = compose.eps_sequence(mixed, delta=delta)
    lines.append(f"- 10 Gaussian rounds (sigma {mixed[0].params['sigma']:g}) and 10 of k-RR (k 10, eps0 1), n {n:.0e}: "
                 f"eps {c.eps:.4g} at delta "
                 f"{delta:g} ({time.perf_counter() - start:.1f} s)")
    return lines


def joint(args: argparse.Namespace) -> list[str]:
    cases = [("krr", {"k": 10})] if args.quick else [("laplace", {}), ("krr", {"k": 10}), ("rappor", {})]
    rows = []
    for base, extra in cases:
        for parts in (2,) if args.quick else (2, 3, 4):
            for eps0 in (0.1,) if args.quick else (0.1, 4.0):
                code = JOINT_CHILD.format(params={"base": base, "parts": parts, **extra}, eps0=eps0)
                run = common.child([sys.executable, "-c", code], mem_gib=args.mem_gib, timeout=args.timeout,
                                   one_core=True)
                row = [common.label(base, extra), parts, f"{eps0:g}"]
                if run.error:
                    rows.append([*row, f"**{run.error}**", "", "", "", f"{run.rss_mib:.0f}"])
                    continue
                r = json.loads(run.stdout)
                rows.append([*row, f"{r['upper']} / {r['lower']}", f"{r['build_s']:.2f}", f"{r['query_s']:.2f}",
                             f"{r['eps']:.4g} ({r['eps_lower']:.4g})", f"{run.rss_mib:.0f}"])
    return ["### Joint compositions (n = 1e6, delta = 1e-6, one core per row; 'query s' rebuilds the "
            "decompositions inside `eps_bounds` and includes the lower bound)", "",
            *common.table(["base", "parts", "eps0", "upper / lower components", "build s", "query s", "eps (lower)",
                           "peak RSS MiB"], rows)]


def _random_rounds(count: int) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    rng = np.random.default_rng(46)
    rows = [("krr", {"k": 10}), ("krr", {"k": 100}), ("generic", {}), ("rappor", {})]

    def log_uniform(low: float, high: float) -> float:
        return float(np.exp(rng.uniform(np.log(low), np.log(high))))

    return [(*rows[int(rng.integers(len(rows)))], {
        "eps0": round(log_uniform(0.2, 4), 4), "n": int(log_uniform(1e4, 1e8)),
        "delta": float(f"{log_uniform(1e-10, 1e-5):.3g}"), "rounds": int(log_uniform(2, 1000))})
        for _ in range(count)]


def lookup_rounds(args: argparse.Namespace) -> list[str]:
    import lookup
    from tablegen import compose

    table = lookup.open_table()
    lookup.eps("krr", eps0=1.0, n=10**6, delta=1e-8, rounds=2, k=10, table=table)  # imports, outside the timing
    ratios: dict[str, list[float]] = {"default": [], "table": []}
    seconds: dict[str, list[float]] = {"default": [], "table": []}
    for mechanism, params, q in _random_rounds(4 if args.quick else args.questions):
        reference = compose.eps(mechanism, **q, **params).eps
        for route, slack in (("default", 0.02), ("table", None)):
            start = time.perf_counter()
            value = lookup.eps(mechanism, **q, **params, table=table, max_slack=slack).value
            seconds[route].append(time.perf_counter() - start)
            ratios[route].append(value / reference - 1)
    times, out = _whole_process(["eps", "--mechanism", "krr", "--k", "10", "--eps0", "1", "--n", "1e6", "--delta",
                                 "1e-8", "--rounds", "365", "--json"], 1 if args.quick else args.repeat, "lookup.cli")
    lines = ["### `lookup eps --rounds T` against `tablegen compose`", ""]
    for route, label in (("default", "default route (the engine's composition)"),
                         ("table", "the table's route (max_slack=None)")):
        r, t = sorted(ratios[route]), sorted(seconds[route])
        within = sum(x <= 0.02 for x in r)
        lines.append(f"- {label}: within 2% of compose {within} of {len(r)}, none below it: {min(r) >= -1e-12}; "
                     f"ratio - 1 median {100 * statistics.median(r):+.2f}%, max {100 * r[-1]:+.2f}%; "
                     f"{1000 * statistics.median(t):.0f} ms median, {1000 * t[-1]:.0f} ms max in a warm process")
    lines.append(f"- `lookup eps --mechanism krr --k 10 --eps0 1 --n 1e6 --delta 1e-8 --rounds 365 --json` as a "
                 f"whole process: eps {out['eps']:.6g} ({out['source']}); best {min(times):.2f} s, median "
                 f"{statistics.median(times):.2f} s")
    return lines


PARTS: dict[str, common.Part] = {"time": timing, "tightness": tightness, "figure": figure, "lookup": lookup_rounds,
                                 "gaussian": gaussian_rounds, "joint": joint}


def main(argv: list[str] | None = None) -> None:
    p = common.parser("compose", __doc__, PARTS)
    p.add_argument("--repeat", type=int, default=3, help="time: fresh processes per whole-process timing")
    p.add_argument("--out", default=None, help="figure: the PNG to write (default docs/figures/composition.png; "
                   "--quick: none)")
    p.add_argument("--points", type=int, default=9, help="figure: values of T (geometric)")
    p.add_argument("--max-rounds", type=int, default=10_000, help="figure: the largest T")
    p.add_argument("--delta", type=float, default=1e-6, help="figure: delta in total")
    p.add_argument("--settings", default=None, help="figure: ';'-separated 'family [k=..] eps0=.. n=..'")
    p.add_argument("--questions", type=int, default=40, help="lookup: random rounds questions")
    p.add_argument("--mem-gib", type=float, default=8.0, help="joint: address-space cap per child, GiB")
    p.add_argument("--timeout", type=float, default=300.0, help="joint: seconds per child")
    common.run("compose", PARTS, p.parse_args(argv), argv)


if __name__ == "__main__":
    main()
