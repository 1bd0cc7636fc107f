"""Benchmark of the lookup: import, open, latency, throughput, HTTP, and slack against live.

Run as ``python bench/lookup_bench.py [--table data/default.zarr] [--queries 300] [--inverse 40]
[--seed S] [--max-slack 0.02] [--lower 40] [--slack-only] [--cli-only] [--trust-only] [--runs 15]``; prints Markdown.

0. The command line, whole process: the README query (``lookup eps --mechanism krr --k 10 --eps0 2
   --n 1e6 --delta 1e-8``, the interpreter with ``-m lookup.cli``) against ``python -c "import
   numpy"``, run in turn ``--runs`` times each: wall time and peak RSS (``/usr/bin/time``) as
   min / median / max, and the ratio of the two wall times pair by pair (target: <= 2, and
   <= 120 MB).  ``--cli-only`` prints this section alone.
1. ``import lookup`` in a fresh process: time and whether any heavy module came with it.
2. Table open (manifest, file set, metadata and axes) and the first query (one row's chunks
   read, verified and decoded) in a fresh process.
3. Scalar ``lookup.eps`` latency once the table is open (p50, p90 over 20000 calls), and
   vectorised throughput (10^6 random queries in one call).
4. (HTTP: ``bench/serve_bench.py``, the real server under load.)
5. Slack: random queries inside the table's ranges (eps0 uniform, n and delta log-uniform, every
   row in turn), and a quarter as many with eps0 on a grid value: per family, the table-only
   answer (``max_slack=None``) and the default route (``max_slack`` 0.02: table, certified
   estimate or live) against the live certified value (``eps_bounds`` upper): median, 95th
   percentile and max of answer / live - 1, the share of each source, the default route's time
   per query (cold cache), and answers below the live value (must be none beyond 1e-3).
6. Inverse questions: ``lookup.eps0_max`` and ``lookup.delta`` against the engine.
8. (``--trust-only``, or with the rest) A custom table (a copy of ``--table`` with one row raised
   by 0.1%, published with its own manifest, so not pinned): its first open in a fresh process
   (spot-certified by the engine, ``lookup/trust.py``) and its later opens (remembered), wall and
   peak RSS, against the pinned shipped table's open, each a whole process answering one query.
7. Lower bounds: the table's (``max_slack=None``) and the default route's against the engine's
   live lower bound, and whether each is within the engine's own gap (live upper - live lower) of it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tablegen.engine.curve import FLOOR  # the live search's smallest eps, relative to eps0

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("dask", "distributed", "xarray", "scipy", "pandas", "tablegen", "zarr")
README_QUERY = ["eps", "--mechanism", "krr", "--k", "10", "--eps0", "2", "--n", "1e6", "--delta", "1e-8"]


def fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.strip()


GNU_TIME = Path("/usr/bin/time")


def child(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident memory (MiB; NaN without GNU time) of one process run to its
    end, its output thrown away.  The memory is read by ``/usr/bin/time -f %M``: a child's own
    rusage would count this (larger) process's memory, which a fork takes along until the exec."""
    with tempfile.NamedTemporaryFile("r") as report:
        prefix = [str(GNU_TIME), "-f", "%M", "-o", report.name] if GNU_TIME.exists() else []
        start = time.perf_counter()
        subprocess.run(prefix + argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, check=True)
        wall = time.perf_counter() - start
        peak = report.read().split()
    return wall, int(peak[-1]) / 1024 if peak else float("nan")


def command_line(table: str, runs: int) -> list[str]:
    """Section 0: the README query as a whole process against ``python -c "import numpy"``."""
    query = [sys.executable, "-m", "lookup.cli", *README_QUERY]
    if Path(table).resolve() != (ROOT / "data" / "default.zarr").resolve():
        query += ["--table", table]
    numpy_only = [sys.executable, "-c", "import numpy"]
    child(query), child(numpy_only)  # warm-up: the page cache
    lookups, numpys = [], []
    for _ in range(runs):  # in turn, so a drift of the machine's speed moves both
        lookups.append(child(query))
        numpys.append(child(numpy_only))

    def spread(values: list[float], unit: str, scale: float = 1.0) -> str:
        return f"{min(values) * scale:.3g} / {statistics.median(values) * scale:.3g} / {max(values) * scale:.3g}" + (
            f" {unit}" if unit else "")

    ratios = [a[0] / b[0] for a, b in zip(lookups, numpys, strict=True)]
    return ["### 0. The command line, whole process (min / median / max)", "",
            f"`python -m lookup.cli {' '.join(query[3:])}` against `python -c \"import numpy\"`, {runs} runs each "
            "in turn:", "",
            f"- README query: wall {spread([w for w, _ in lookups], 'ms', 1e3)}, peak RSS "
            f"{spread([m for _, m in lookups], 'MiB')}",
            f"- `import numpy`: wall {spread([w for w, _ in numpys], 'ms', 1e3)}, peak RSS "
            f"{spread([m for _, m in numpys], 'MiB')}",
            f"- ratio of the wall times, pair by pair: {spread(ratios, '')} (target <= 2; peak RSS <= 120 MB)", ""]


def import_and_open(table: str) -> list[str]:
    imp = json.loads(fresh(
        "import time, sys; t = time.perf_counter(); import lookup; dt = time.perf_counter() - t; import json; "
        f"print(json.dumps([dt, [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]]))"))
    opened = json.loads(fresh(
        "import time, json, lookup; t = time.perf_counter(); "
        f"table = lookup.open_table({table!r}); t1 = time.perf_counter(); "
        "lookup.eps('krr', eps0=2.0, n=10**6, delta=1e-8, k=10, table=table, max_slack=None); "
        "print(json.dumps([t1 - t, time.perf_counter() - t1]))"))
    return [f"- `import lookup`: {imp[0] * 1e3:.1f} ms; heavy modules pulled: {imp[1] or 'none'}",
            f"- table open (manifest, file set, metadata and axes, each file read checked against its SHA-256): "
            f"{opened[0] * 1e3:.0f} ms; then the first query (its row's two chunks read, checked, decoded, made "
            f"monotone): {opened[1] * 1e3:.0f} ms"]


def latency(table: str) -> list[str]:
    import lookup

    t = lookup.open_table(table)
    rng = np.random.default_rng(0)
    eps0 = rng.uniform(0.05, 8, 20000).tolist()
    n = np.round(10 ** rng.uniform(2, 8, 20000)).tolist()
    delta = (10 ** rng.uniform(-12, -3, 20000)).tolist()
    times, grid_times = [], []
    grid = [rng.choice(axis, 20000).tolist() for axis in (t.eps0, t.n, t.delta)]
    for i in range(20000):
        start = time.perf_counter()
        lookup.eps("krr", eps0=eps0[i], n=n[i], delta=delta[i], table=t, max_slack=None, k=10)
        times.append(time.perf_counter() - start)
        start = time.perf_counter()  # the default max_slack, inside it (grid points: slack 0)
        lookup.eps("krr", eps0=grid[0][i], n=grid[1][i], delta=grid[2][i], table=t, k=10)
        grid_times.append(time.perf_counter() - start)
    times.sort()
    grid_times.sort()
    size = 10**6
    e, m, d = rng.uniform(0.05, 8, size), np.round(10 ** rng.uniform(2, 8, size)), 10 ** rng.uniform(-12, -3, size)
    start = time.perf_counter()
    lookup.eps("krr", eps0=e, n=m, delta=d, table=t, max_slack=None, k=10)
    rate = size / (time.perf_counter() - start)
    return [f"- scalar `lookup.eps` (krr k=10, random in-grid queries, table open, max_slack=None): p50 "
            f"{statistics.median(times) * 1e6:.1f} us, p90 {times[int(0.9 * len(times))] * 1e6:.1f} us "
            "(target p50 < 20 us)",
            f"- the same with the default max_slack, queries within it (grid points): p50 "
            f"{statistics.median(grid_times) * 1e6:.1f} us, p90 {grid_times[int(0.9 * len(grid_times))] * 1e6:.1f} us",
            f"- vectorised: {rate:.3g} queries/s for 10^6 queries in one call, max_slack=None (target > 1e6)"]


def _random_queries(t: Any, count: int, rng: np.random.Generator, grid_eps0: bool) -> list[tuple]:
    """``count`` queries inside the table's ranges, the rows in turn (every row), random eps0
    (or grid eps0), log-uniform n and delta."""
    rows = rng.permutation(np.resize(np.arange(len(t.families)), count))
    return [(t.families[r], t.params[r], *_point(t, rng, grid_eps0)) for r in rows]


def _point(t: Any, rng: np.random.Generator, grid_eps0: bool) -> tuple[float, int, float]:
    eps0 = float(rng.choice(t.eps0)) if grid_eps0 else float(rng.uniform(t.eps0[0], t.eps0[-1]))
    n = int(round(10 ** rng.uniform(np.log10(t.n[0]), np.log10(t.n[-1]))))
    return eps0, n, float(10 ** rng.uniform(np.log10(t.delta[0]), np.log10(t.delta[-1])))


def _other_k(t: Any, count: int, rng: np.random.Generator) -> list[tuple]:
    """k-RR queries at a k between the table's k values (answered from the next smaller k)."""
    grid = sorted(p["k"] for f, p in zip(t.families, t.params, strict=True) if f == "krr")
    between = [k for k in range(grid[0], grid[-1]) if k not in grid] if grid else []
    return [("krr", {"k": int(rng.choice(between))}, *_point(t, rng, False)) for _ in range(count if between else 0)]


def _measure(t: Any, queries: list[tuple], max_slack: float) -> list[dict[str, Any]]:
    """Per query: table-only answer, the default route (cold cache, timed) and the live
    certified value (``eps_bounds`` upper)."""
    import lookup
    import lookup.live
    from tablegen.engine import eps_bounds

    records = []
    for family, params, eps0, n, delta in queries:
        table = lookup.eps(family, eps0=eps0, n=n, delta=delta, table=t, max_slack=None, **params)
        lookup.live._MEMORY.clear()
        start = time.perf_counter()
        route = lookup.eps(family, eps0=eps0, n=n, delta=delta, table=t, max_slack=max_slack, **params)
        route_s = time.perf_counter() - start
        start = time.perf_counter()
        live = eps_bounds(family, eps0=eps0, n=n, delta=delta, lower=False, **params).upper
        name = family if t.row(family, params) is not None else f"{family} (k not in the table)"
        records.append({"family": name, "table": table.value / live - 1, "table_source": table.source,
                        "route": route.value / live - 1, "source": route.source, "route_s": route_s,
                        "live_s": time.perf_counter() - start, "query": (family, params, eps0, n, delta),
                        "zero": live <= eps0 * FLOOR * (1 + 1e-6), "live_eps": live})
    return records


def _q(values: list[float]) -> str:
    if not values:
        return "- | - | -"
    v = np.array(values)
    return f"{np.median(v):.2%} | {np.quantile(v, 0.95):.2%} | {v.max():.2%}"


def _slack_table(records: list[dict[str, Any]]) -> list[str]:
    lines = ["| family | queries | table only: median | 95% | max | default route: median | 95% | max | "
             "table / certified estimate / live | route ms/query: median | mean | live search ms: median |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    families = list(dict.fromkeys(r["family"] for r in records)) + ["all"]
    for family in families:
        rs = [r for r in records if family in ("all", r["family"]) and not r["zero"]]
        table = [r["table"] for r in rs if r["table_source"] == "table"]  # OLH off grid eps0: live either way
        shares = "/".join(f"{sum(r['source'] == s for r in rs)}" for s in ("table", "certified estimate", "live"))
        ms = [1e3 * r["route_s"] for r in rs]
        lines.append(f"| {family} | {len(rs)} | {_q(table)} | {_q([r['route'] for r in rs])} | {shares} | "
                     f"{np.median(ms):.1f} | {np.mean(ms):.1f} | {1e3 * np.median([r['live_s'] for r in rs]):.1f} |")
    zero = [r for r in records if r["zero"]]
    if zero:
        lines += ["", f"Left out above: {len(zero)} queries whose delta is met at eps = 0 (the live answer is the "
                  f"search floor eps0 * {FLOOR:g}; a ratio to it means nothing): table answers at most "
                  f"{max((1 + r['table']) * r['live_eps'] for r in zero):.2g}, default route at most "
                  f"{max((1 + r['route']) * r['live_eps'] for r in zero):.2g} (absolute eps)."]
    return lines


def _region_table(records: list[dict[str, Any]]) -> list[str]:
    """Table-only slack (median / 95th percentile, queries) by n band and eps0 band."""
    n_bands, eps0_bands = [1e2, 1e4, 1e6, 1e9 + 1], [0.0, 0.5, 2.0, 8.0 + 1e-9]
    eps0_pairs = list(zip(eps0_bands[:-1], eps0_bands[1:], strict=True))
    lines = ["| n \\ eps0 | " + " | ".join(f"[{a:g}, {b:.3g})" for a, b in eps0_pairs) + " |",
             "|---|" + "---|" * len(eps0_pairs)]
    for lo, hi in zip(n_bands[:-1], n_bands[1:], strict=True):
        cells = []
        for a, b in eps0_pairs:
            v = [r["table"] for r in records if r["table_source"] == "table"
                 and lo <= r["query"][3] < hi and a <= r["query"][2] < b]
            cells.append(f"{np.median(v):.1%} / {np.quantile(v, 0.95):.1%} ({len(v)})" if v else "-")
        lines.append(f"| [{lo:.0e}, {min(hi, 1e9):.0e}] | " + " | ".join(cells) + " |")
    return lines


def slack_against_live(table: str, count: int, seed: int, max_slack: float) -> list[str]:
    """Section 5: the table alone and the default route against the live certified value."""
    import lookup

    t = lookup.open_table(table)
    rng = np.random.default_rng(seed)
    random_eps0 = _measure(t, _random_queries(t, count, rng, False), max_slack)
    grid_eps0 = _measure(t, _random_queries(t, max(count // 4, len(t.families)), rng, True), max_slack)
    out = [f"### 5. Slack against the live certified value (seed {seed}, max_slack {max_slack:g})", "",
           f"Queries inside the table's ranges (eps0 {t.eps0[0]:g}..{t.eps0[-1]:g}, n {t.n[0]:g}..{t.n[-1]:g} "
           f"log-uniform, delta {t.delta[0]:g}..{t.delta[-1]:g} log-uniform), rows in turn. Slack = answer / "
           "`eps_bounds(..., lower=False).upper` - 1 (negative: below the live search, which stops at rtol 1e-4). "
           "'table only': `max_slack=None` (OLH rows at off-grid eps0 are live either way and left out); "
           "'default route': `max_slack` as given, live cache cleared before each query. Timings on a shared, "
           "noisy 2-core machine.", "", f"Random eps0 ({len(random_eps0)} queries):", ""]
    out += _slack_table(random_eps0) + ["", "Table only by region (random eps0): median / p95 (queries)", ""]
    out += _region_table(random_eps0) + ["", f"eps0 on a grid value ({len(grid_eps0)} queries):", ""]
    out += _slack_table(grid_eps0)
    other_k = _measure(t, _other_k(t, max(count // 10, 1), rng), max_slack)
    if other_k:
        out += ["", f"k-RR at a k the table lacks ({len(other_k)} queries, random eps0):", ""] + _slack_table(other_k)
    everything = random_eps0 + grid_eps0 + other_k
    below = [r["query"] for r in everything if min(r["table"], r["route"]) < -1e-3]
    missed = [r for r in everything if r["route"] > max_slack]
    out += ["", f"Answers more than 0.1% below the live certified value: {len(below)} {below[:3] if below else ''}",
            f"Default-route answers above max_slack (the slack estimate missed): {len(missed)} of {len(everything)}"
            + "".join(f"; {r['source']} {r['route']:.1%} at {r['query']}" for r in missed[:3])]
    return out


def inverse_against_live(table: str, count: int, seed: int) -> list[str]:
    """Section 6: ``lookup.eps0_max`` and ``lookup.delta`` (default route) against the engine."""
    import lookup
    import lookup.live
    from tablegen.engine import delta_bounds, eps0_max

    t = lookup.open_table(table)
    rng = np.random.default_rng(seed + 1)
    budget, delta, sources = [], [], []
    for family, params, eps0, n, d in _random_queries(t, count, rng, False):
        eps = float(lookup.eps(family, eps0=eps0, n=n, delta=d, table=t, max_slack=None, **params).value)
        lookup.live._MEMORY.clear()
        a = lookup.eps0_max(family, eps=eps, n=n, delta=d, table=t, **params)
        budget.append(a.value / eps0_max(family, eps=eps, n=n, delta=d, **params) - 1)
        sources.append(a.source)
        live = delta_bounds(family, eps0=eps0, n=n, eps=eps, lower=False, **params).upper
        if live > 0:  # eps < eps0
            delta.append(lookup.delta(family, eps0=eps0, n=n, eps=eps, table=t, **params).value / live - 1)
    shares = ", ".join(f"{s} {sources.count(s)}" for s in ("table", "certified estimate", "live"))
    return ["", f"### 6. Inverse questions, default route against the engine ({count} queries, eps = the table's "
            "answer at a random query)", "",
            f"- `lookup.eps0_max` / `tablegen eps0-max` - 1: median {np.median(budget):.2%}, min {min(budget):.2%}, "
            f"max {max(budget):.2%} (target: within 1% below; answers {shares})",
            f"- `lookup.delta` / live certified delta - 1: median {np.median(delta):.2%}, max {max(delta):.2%}"]


def lower_against_live(table: str, count: int, seed: int, max_slack: float) -> list[str]:
    """Section 7: the lower bound of the table alone and of the default route against the live
    one (``eps_bounds`` with its lower bound)."""
    import lookup
    from tablegen.engine import eps_bounds

    t = lookup.open_table(table)
    rng = np.random.default_rng(seed + 2)
    routes = {"table alone": None, f"default route (max_slack {max_slack:g})": max_slack}
    found: dict[str, list[tuple[float, Any, tuple]]] = {name: [] for name in routes}
    for family, params, eps0, n, d in _random_queries(t, count, rng, False):
        live = eps_bounds(family, eps0=eps0, n=n, delta=d, **params)
        for name, slack in routes.items():
            mine = float(lookup.eps(family, eps0=eps0, n=n, delta=d, table=t, max_slack=slack, **params).lower)
            if np.isfinite(mine) and live.lower is not None:
                found[name].append((mine, live, (family, params, eps0, n, d)))
    out = ["", f"### 7. Lower bounds against the live lower bound ({count} random queries)", ""]
    for name, rows in found.items():
        ratio = [mine / live.lower if live.lower > 0 else 1.0 for mine, live, _ in rows]
        within = sum(mine >= live.lower - (live.upper - live.lower) for mine, live, _ in rows)
        above = [q for mine, live, q in rows if mine > live.upper]
        out += [f"- {name}: {len(rows)} queries with a lower bound; lower / live lower: median "
                f"{np.median(ratio):.3f}, 5th percentile {np.quantile(ratio, 0.05):.3f}, min {min(ratio):.3f}; "
                f"within the engine's own gap of the live lower bound (>= live lower - (live upper - live "
                f"lower)): {within} of {len(rows)}; above the live certified upper bound (must be none): "
                f"{len(above)} {above[:3]}"]
    return out


def trust_first_open(table: str, runs: int) -> list[str]:
    """Section 8: the first and later opens of a custom (not pinned) copy of ``table``."""
    import os

    import xarray as xr

    from tablegen import store

    with tempfile.TemporaryDirectory() as scratch:
        custom = Path(scratch) / "custom.zarr"
        with xr.open_zarr(table, consolidated=True) as ds:
            ds = ds.load().drop_encoding()
        ds["eps"][1] = np.minimum(ds["eps"][1] * 1.001, ds["eps0"])  # larger: still certified
        store.publish(ds, custom, store.CERTIFIED_ROUNDING)
        code = ("import lookup; t = lookup.open_table({!r}); "
                "lookup.eps('krr', eps0=2.0, n=10**6, delta=1e-8, k=10, table=t, max_slack=None)")
        firsts, laters, pinned = [], [], []
        for i in range(runs):
            os.environ["XDG_CACHE_HOME"] = str(Path(scratch) / f"cache-{i}")  # nothing remembered yet
            firsts.append(child([sys.executable, "-c", code.format(str(custom))]))
            laters.append(child([sys.executable, "-c", code.format(str(custom))]))
            pinned.append(child([sys.executable, "-c", code.format(table)]))
        del os.environ["XDG_CACHE_HOME"]

    def spread(values: list[tuple[float, float]]) -> str:
        walls, peaks = [w for w, _ in values], [m for _, m in values]
        return (f"wall {min(walls):.2f} / {statistics.median(walls):.2f} / {max(walls):.2f} s, peak RSS "
                f"{statistics.median(peaks):.0f} MiB")

    return ["### 8. First open of a custom table (spot certification) and later opens (min / median / max)", "",
            f"- custom table, first open (spot-certified): {spread(firsts)} (target <= 2 s)",
            f"- custom table, later opens (remembered by its digest): {spread(laters)}",
            f"- the shipped table (pinned): {spread(pinned)}", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(ROOT / "data" / "default.zarr"))
    parser.add_argument("--queries", type=int, default=300, help="random queries of section 5")
    parser.add_argument("--inverse", type=int, default=40, help="queries of section 6 (0: skip it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-slack", type=float, default=0.02)
    parser.add_argument("--lower", type=int, default=40, help="queries of section 7 (0: skip it)")
    parser.add_argument("--slack-only", action="store_true", help="sections 5 to 7 only")
    parser.add_argument("--cli-only", action="store_true", help="section 0 only")
    parser.add_argument("--runs", type=int, default=15, help="runs of each command in section 0")
    parser.add_argument("--trust-only", action="store_true", help="section 8 only")
    args = parser.parse_args()
    out = ["## Lookup benchmark", ""]
    if args.trust_only:
        print("\n".join(out + trust_first_open(args.table, max(args.runs // 3, 1))))
        return
    if not args.slack_only:
        out += command_line(args.table, args.runs)
    if args.cli_only:
        print("\n".join(out))
        return
    if not args.slack_only:
        out += import_and_open(args.table) + latency(args.table) + [""]
    out += slack_against_live(args.table, args.queries, args.seed, args.max_slack)
    out += inverse_against_live(args.table, args.inverse, args.seed) if args.inverse else []
    out += lower_against_live(args.table, args.lower, args.seed, args.max_slack) if args.lower else []
    out += trust_first_open(args.table, 3) if not args.slack_only else []
    print("\n".join(out))


if __name__ == "__main__":
    main()
