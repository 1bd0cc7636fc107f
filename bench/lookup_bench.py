"""Lookup: the command line as a whole process, import / open / latency / throughput, answers
against the live engine (slack, inverse questions, lower bounds), the first open of a custom table,
and the HTTP service under load.

Parts (``python -m bench lookup [--only PART ...] [--quick] [--table PATH]``):

* ``cli``: the README query (``python -m lookup.cli eps --mechanism krr --k 10 --eps0 2 --n 1e6 --delta
  1e-8``) against ``python -c "import numpy"``, in turn ``--runs`` times each: wall and peak RSS (min /
  median / max) and the ratio of the two walls pair by pair (target: <= 2, and <= 120 MB).
* ``open``: ``import lookup`` in a fresh process (time, heavy modules pulled), table open and first query
  in a fresh process, scalar ``lookup.eps`` p50 / p90 over 20,000 random in-grid queries (table open;
  ``max_slack=None``, and the default max_slack at grid points), vectorised throughput (10^6 queries).
* ``slack``: ``--queries`` random queries inside the table's ranges (eps0 uniform, n and delta
  log-uniform, every row in turn), a quarter as many at grid eps0, a tenth at a k-RR k the table lacks:
  the table alone (``max_slack=None``) and the default route (``--max-slack``: table, certified estimate
  or live) against the live certified value (``eps_bounds`` upper): median / 95% / max of answer / live -
  1 per family, the share of each source, the route's time per query (cold cache), answers below live.
* ``inverse``: ``lookup.eps0_max`` and ``lookup.delta`` (default route) against the engine at
  ``--inverse`` random queries; then the engine's own ``eps0_max`` for every family at n 1e2..1e9
  (each family one process: slowest and median call, peak RSS; target <= 2 s and <= 1 GB a call).
* ``lower``: the lower bound of the table alone and of the default route against the live lower bound
  (``--lower`` random queries), and whether each lies within the engine's own gap of it.
* ``trust``: a custom table (a copy of ``--table`` with one row raised by 0.1%, its own manifest, so not
  pinned): its first open in a fresh process (spot-certified, ``lookup/trust/origin.py``) and later opens
  (remembered), against the pinned table's open, each a process answering one query.
* ``serve``: ``lookup serve --no-access-log`` on a free loopback port, asyncio clients with one keep-alive
  HTTP/1.1 connection each: (1) ``--clients`` connections asking table answers for ``--seconds``:
  requests/s and latency; (2) 4 such connections while ``--live-clients`` force live work (new off-grid
  questions, 503 once the queue is full): the table answers' latency, the live clients' statuses, the
  server's peak RSS (its process and workers); (3) with ``--soak S``: S seconds of ``--clients``
  connections with 40% bad requests beside the live clients: statuses (no 5xx) and RSS every 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from tablegen.engine.dense import FLOOR  # the live search's smallest eps, relative to eps0

HEAVY = ("dask", "distributed", "xarray", "scipy", "pandas", "tablegen", "zarr")
README_QUERY = ["eps", "--mechanism", "krr", "--k", "10", "--eps0", "2", "--n", "1e6", "--delta", "1e-8"]


def _fresh(code: str) -> Any:
    """The JSON a ``python -c code`` process prints."""
    run = common.child([sys.executable, "-c", code])
    if run.error:
        raise RuntimeError(run.error)
    return json.loads(run.stdout)


def cli(args: argparse.Namespace) -> list[str]:
    query = [sys.executable, "-m", "lookup.cli", *README_QUERY]
    if Path(args.table).resolve() != (common.ROOT / "data" / "default.zarr").resolve():
        query += ["--table", args.table]
    numpy_only = [sys.executable, "-c", "import numpy"]
    common.child(query), common.child(numpy_only)  # warm-up: the page cache
    lookups, numpys = [], []
    for _ in range(2 if args.quick else args.runs):  # in turn, so a drift of the machine's speed moves both
        lookups.append(common.child(query))
        numpys.append(common.child(numpy_only))
    ratios = [a.wall_s / b.wall_s for a, b in zip(lookups, numpys, strict=True)]
    return ["### The command line, whole process (min / median / max)", "",
            f"`python -m lookup.cli {' '.join(query[3:])}` against `python -c \"import numpy\"`, {len(ratios)} runs "
            "each in turn:", "",
            f"- README query: wall {common.spread([r.wall_s for r in lookups], 1e3, 'ms')}, peak RSS "
            f"{common.spread([r.rss_mib for r in lookups], 1, 'MiB')}",
            f"- `import numpy`: wall {common.spread([r.wall_s for r in numpys], 1e3, 'ms')}, peak RSS "
            f"{common.spread([r.rss_mib for r in numpys], 1, 'MiB')}",
            f"- ratio of the wall times, pair by pair: {common.spread(ratios)} (target <= 2; peak RSS <= 120 MB)"]


def opening(args: argparse.Namespace) -> list[str]:
    import lookup

    imported = _fresh("import time, sys; t = time.perf_counter(); import lookup; dt = time.perf_counter() - t; "
                      f"import json; print(json.dumps([dt, [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]]))")
    opened = _fresh("import time, json, lookup; t = time.perf_counter(); "
                    f"table = lookup.open_table({args.table!r}); t1 = time.perf_counter(); "
                    "lookup.eps('krr', eps0=2.0, n=10**6, delta=1e-8, k=10, table=table, max_slack=None); "
                    "print(json.dumps([t1 - t, time.perf_counter() - t1]))")
    t = lookup.open_table(args.table)
    count, size = (2000, 10**5) if args.quick else (20000, 10**6)
    rng = np.random.default_rng(0)
    eps0 = rng.uniform(0.05, 8, count).tolist()
    n = np.round(10 ** rng.uniform(2, 8, count)).tolist()
    delta = (10 ** rng.uniform(-12, -3, count)).tolist()
    grid = [rng.choice(axis, count).tolist() for axis in (t.eps0, t.n, t.delta)]
    times, grid_times = [], []
    for i in range(count):
        start = time.perf_counter()
        lookup.eps("krr", eps0=eps0[i], n=n[i], delta=delta[i], table=t, max_slack=None, k=10)
        times.append(time.perf_counter() - start)
        start = time.perf_counter()  # the default max_slack, inside it (grid points: slack 0)
        lookup.eps("krr", eps0=grid[0][i], n=grid[1][i], delta=grid[2][i], table=t, k=10)
        grid_times.append(time.perf_counter() - start)
    times.sort()
    grid_times.sort()
    e, m, d = rng.uniform(0.05, 8, size), np.round(10 ** rng.uniform(2, 8, size)), 10 ** rng.uniform(-12, -3, size)
    start = time.perf_counter()
    lookup.eps("krr", eps0=e, n=m, delta=d, table=t, max_slack=None, k=10)
    rate = size / (time.perf_counter() - start)
    return ["### Import, open, latency, throughput", "",
            f"- `import lookup`: {imported[0] * 1e3:.1f} ms; heavy modules pulled: {imported[1] or 'none'}",
            f"- table open (manifest, file set, metadata and axes, each file read checked against its SHA-256): "
            f"{opened[0] * 1e3:.0f} ms; then the first query (its row's two chunks read, checked, decoded, made "
            f"monotone): {opened[1] * 1e3:.0f} ms",
            f"- scalar `lookup.eps` (krr k=10, {count} random in-grid queries, table open, max_slack=None): p50 "
            f"{np.median(times) * 1e6:.1f} us, p90 {times[int(0.9 * count)] * 1e6:.1f} us (target p50 < 20 us)",
            f"- the same with the default max_slack, queries within it (grid points): p50 "
            f"{np.median(grid_times) * 1e6:.1f} us, p90 {grid_times[int(0.9 * count)] * 1e6:.1f} us",
            f"- vectorised: {rate:.3g} queries/s for {size:.0e} queries in one call, max_slack=None (target > 1e6)"]


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
    import lookup.answer.live
    from tablegen.engine import eps_bounds

    records = []
    for family, params, eps0, n, delta in queries:
        table = lookup.eps(family, eps0=eps0, n=n, delta=delta, table=t, max_slack=None, **params)
        lookup.answer.live._MEMORY.clear()
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
        if not rs:
            continue
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


def slack(args: argparse.Namespace) -> list[str]:
    import lookup

    t = lookup.open_table(args.table)
    count = 16 if args.quick else args.queries
    rng = np.random.default_rng(args.seed)
    random_eps0 = _measure(t, _random_queries(t, count, rng, False), args.max_slack)
    grid_eps0 = _measure(t, _random_queries(t, max(count // 4, len(t.families)), rng, True), args.max_slack)
    other_k = _measure(t, _other_k(t, max(count // 10, 1), rng), args.max_slack)
    out = [f"### Slack against the live certified value (seed {args.seed}, max_slack {args.max_slack:g})", "",
           f"Queries inside the table's ranges (eps0 {t.eps0[0]:g}..{t.eps0[-1]:g}, n {t.n[0]:g}..{t.n[-1]:g} "
           f"log-uniform, delta {t.delta[0]:g}..{t.delta[-1]:g} log-uniform), rows in turn. Slack = answer / "
           "`eps_bounds(..., lower=False).upper` - 1 (negative: below the live search, which stops at rtol 1e-4). "
           "'table only': `max_slack=None` (OLH rows at off-grid eps0 are live either way and left out); "
           "'default route': `max_slack` as given, live cache cleared before each query.", "",
           f"Random eps0 ({len(random_eps0)} queries):", "", *_slack_table(random_eps0), "",
           "Table only by region (random eps0): median / p95 (queries)", "", *_region_table(random_eps0), "",
           f"eps0 on a grid value ({len(grid_eps0)} queries):", "", *_slack_table(grid_eps0)]
    if other_k:
        out += ["", f"k-RR at a k the table lacks ({len(other_k)} queries, random eps0):", "", *_slack_table(other_k)]
    everything = random_eps0 + grid_eps0 + other_k
    below = [r["query"] for r in everything if min(r["table"], r["route"]) < -1e-3]
    missed = [r for r in everything if r["route"] > args.max_slack]
    return out + ["", f"Answers more than 0.1% below the live certified value: {len(below)} {below[:3]}",
                  f"Default-route answers above max_slack (the slack estimate missed): {len(missed)} of "
                  f"{len(everything)}" + "".join(f"; {r['source']} {r['route']:.1%} at {r['query']}"
                                                 for r in missed[:3])]


INVERSE_FAMILIES = {"generic": {}, "krr k=10": {"k": 10}, "blh": {}, "olh": {}, "rappor": {}, "oue": {}, "hr": {},
                    "laplace": {}, "joint krr k=10 x2": {"base": "krr", "k": 10, "parts": 2}}
INVERSE_QUERIES = [(0.5, 1e-8), (1.569, 2.058e-6)]  # the second: the service's worst case reported in issue 27
INVERSE_CHILD = """
import json, sys, time
from tablegen.engine import eps0_max
family, params, ns, queries = json.loads(sys.argv[1])
rows = []
for n in ns:
    for eps, delta in queries:
        start = time.perf_counter()
        try:
            eps0_max(family.split()[0], eps=eps, n=n, delta=delta, **params)
        except ValueError:
            pass
        rows.append([n, eps, delta, time.perf_counter() - start])
print(json.dumps(rows))
"""


def inverse(args: argparse.Namespace) -> list[str]:
    """``lookup.eps0_max`` and ``lookup.delta`` (default route) against the engine, then the engine's
    ``eps0_max`` timed per family."""
    import lookup
    import lookup.answer.live
    from tablegen.engine import delta_bounds, eps0_max

    t = lookup.open_table(args.table)
    count = 3 if args.quick else args.inverse
    rng = np.random.default_rng(args.seed + 1)
    budget, delta, sources = [], [], []
    for family, params, eps0, n, d in _random_queries(t, count, rng, False):
        eps = float(lookup.eps(family, eps0=eps0, n=n, delta=d, table=t, max_slack=None, **params).value)
        lookup.answer.live._MEMORY.clear()
        a = lookup.eps0_max(family, eps=eps, n=n, delta=d, table=t, **params)
        budget.append(a.value / eps0_max(family, eps=eps, n=n, delta=d, **params) - 1)
        sources.append(a.source)
        live = delta_bounds(family, eps0=eps0, n=n, eps=eps, lower=False, **params).upper
        if live > 0:  # eps < eps0
            delta.append(lookup.delta(family, eps0=eps0, n=n, eps=eps, table=t, **params).value / live - 1)
    shares = ", ".join(f"{s} {sources.count(s)}" for s in ("table", "certified estimate", "live"))
    out = [f"### Inverse questions, default route against the engine ({count} queries, eps = the table's answer at "
           "a random query)", "",
           f"- `lookup.eps0_max` / `tablegen eps0-max` - 1: median {np.median(budget):.2%}, min {min(budget):.2%}, "
           f"max {max(budget):.2%} (target: within 1% below; answers {shares})",
           f"- `lookup.delta` / live certified delta - 1: median {np.median(delta):.2%}, max {max(delta):.2%}"
           if delta else "- `lookup.delta`: no query with eps below eps0"]
    families = dict(list(INVERSE_FAMILIES.items())[:2]) if args.quick else INVERSE_FAMILIES
    ns = (10**4,) if args.quick else (100, 10**4, 10**6, 10**9)
    rows = []
    for family, params in families.items():
        run = common.child([sys.executable, "-c", INVERSE_CHILD, json.dumps([family, params, ns, INVERSE_QUERIES])])
        if run.error:
            rows.append([family, f"**{run.error}**", "", "", ""])
            continue
        calls = json.loads(run.stdout)
        slow = max(calls, key=lambda r: r[3])
        rows.append([family, f"{slow[3]:.2f} s", f"{slow[0]:g}, {slow[1]}, {slow[2]:g}",
                     f"{sorted(r[3] for r in calls)[len(calls) // 2]:.2f} s", f"{run.rss_mib:.0f} MiB"])
    return out + ["", "### The engine's eps0_max, live: eps, delta in " + ", ".join(
        f"({e}, {d:g})" for e, d in INVERSE_QUERIES) + f" at n in {ns}, each call timed alone; peak RSS of the "
        "family's process", "", *common.table(["family", "slowest call", "its query (n, eps, delta)", "median call",
                                               "peak RSS"], rows)]


def lower(args: argparse.Namespace) -> list[str]:
    """The lower bound of the table alone and of the default route against the live
    one (``eps_bounds`` with its lower bound)."""
    import lookup
    from tablegen.engine import eps_bounds

    t = lookup.open_table(args.table)
    count = 4 if args.quick else args.lower
    rng = np.random.default_rng(args.seed + 2)
    routes = {"table alone": None, f"default route (max_slack {args.max_slack:g})": args.max_slack}
    found: dict[str, list[tuple[float, Any, tuple]]] = {name: [] for name in routes}
    for family, params, eps0, n, d in _random_queries(t, count, rng, False):
        live = eps_bounds(family, eps0=eps0, n=n, delta=d, **params)
        for name, max_slack in routes.items():
            mine = float(lookup.eps(family, eps0=eps0, n=n, delta=d, table=t, max_slack=max_slack, **params).lower)
            if np.isfinite(mine) and live.lower is not None:
                found[name].append((mine, live, (family, params, eps0, n, d)))
    out = [f"### Lower bounds against the live lower bound ({count} random queries)", ""]
    for name, rows in found.items():
        if not rows:
            out.append(f"- {name}: no query with a lower bound")
            continue
        ratio = [mine / live.lower if live.lower > 0 else 1.0 for mine, live, _ in rows]
        within = sum(mine >= live.lower - (live.upper - live.lower) for mine, live, _ in rows)
        above = [q for mine, live, q in rows if mine > live.upper]
        out += [f"- {name}: {len(rows)} queries with a lower bound; lower / live lower: median "
                f"{np.median(ratio):.3f}, 5th percentile {np.quantile(ratio, 0.05):.3f}, min {min(ratio):.3f}; "
                f"within the engine's own gap of the live lower bound (>= live lower - (live upper - live "
                f"lower)): {within} of {len(rows)}; above the live certified upper bound (must be none): "
                f"{len(above)} {above[:3]}"]
    return out


def trust(args: argparse.Namespace) -> list[str]:
    """The first and later opens of a custom (not pinned) copy of ``--table``."""
    import xarray as xr

    from lookup.trust.origin import ENV_CACHE
    from tablegen import store

    code = ("import lookup; t = lookup.open_table({!r}); "
            "lookup.eps('krr', eps0=2.0, n=10**6, delta=1e-8, k=10, table=t, max_slack=None)")
    firsts, laters, pinned = [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        custom = Path(scratch) / "custom.zarr"
        with xr.open_zarr(args.table, consolidated=True) as ds:
            ds = ds.load().drop_encoding()
        ds["eps"][1] = np.minimum(ds["eps"][1] * 1.001, ds["eps0"])  # larger: still certified
        store.publish(ds, custom, store.CERTIFIED_ROUNDING)
        for i in range(1 if args.quick else max(args.runs // 3, 1)):
            cache = {ENV_CACHE: str(Path(scratch) / f"cache-{i}")}  # nothing remembered yet
            firsts.append(common.child([sys.executable, "-c", code.format(str(custom))], env=cache))
            laters.append(common.child([sys.executable, "-c", code.format(str(custom))], env=cache))
            pinned.append(common.child([sys.executable, "-c", code.format(args.table)], env=cache))

    def spread(runs: list[common.Child]) -> str:
        return (f"wall {common.spread([r.wall_s for r in runs], 1, 's')}, peak RSS "
                f"{common.spread([r.rss_mib for r in runs], 1, 'MiB')}")

    return ["### First open of a custom table (spot certification) and later opens (min / median / max)", "",
            f"- custom table, first open (spot-certified): {spread(firsts)} (target <= 2 s)",
            f"- custom table, later opens (remembered by its digest): {spread(laters)}",
            f"- the shipped table (pinned): {spread(pinned)}"]


BAD_QUERIES = ["/v1/eps?mechanism=nope&eps0=1&n=1e6&delta=1e-8",
               "/v1/eps?mechanism=krr&k=-3&eps0=1&n=1e6&delta=1e-8",
               "/v1/eps?mechanism=krr&k=10&eps0=abc&n=1e6&delta=1e-8",
               "/v1/eps?mechanism=krr&k=10&eps0=1&n=1e6&delta=2",
               "/v1/eps?mechanism=krr&k=10&eps0=1&n=1e6&delta=1e-8&colour=red"]
TABLE_QUERIES = [f"/v1/eps?mechanism=krr&k=10&eps0={e}&n={n}&delta=1e-8&max_slack=none"
                 for e in (0.5, 1, 2, 4) for n in ("1e4", "1e5", "1e6")]
Results = tuple[list[float], collections.Counter]


async def _client(port: int, paths: list[str], stop: float, latencies: list[float],
                  statuses: collections.Counter) -> None:
    """One keep-alive connection sending ``paths`` in turn (or new live questions if empty) until ``stop``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while time.perf_counter() < stop:
            path = paths[i % len(paths)] if paths else _live_path()
            i += 1
            start = time.perf_counter()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - start)
            statuses[int(head.split(b" ", 2)[1])] += 1
            if b"connection: close" in head.lower():
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
    finally:
        writer.close()


def _live_path() -> str:
    """A new off-grid question each time (no cache hit): a live or refined computation."""
    eps0 = round(random.uniform(0.6, 3.9), 6)
    return f"/v1/eps?mechanism=krr&k=10&eps0={eps0}&n={random.randint(10**4, 10**7)}&delta=1e-8"


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1e3 if values else float("nan")


def _rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, MiB (from /proc)."""
    total = 0
    for p in [pid, *_descendants(pid)]:
        try:
            total += next(int(line.split()[1]) for line in Path(f"/proc/{p}/status").read_text().splitlines()
                          if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def _descendants(pid: int) -> list[int]:
    try:
        direct = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return direct + [g for c in direct for g in _descendants(c)]


async def _phase(port: int, groups: list[tuple[int, list[str]]], seconds: float) -> list[Results]:
    """Each group (connections, paths) for ``seconds``: its latencies and status counts."""
    stop = time.perf_counter() + seconds
    results = [([], collections.Counter()) for _ in groups]
    await asyncio.gather(*(_client(port, paths, stop, *results[g])
                           for g, (count, paths) in enumerate(groups) for _ in range(count)))
    return results


def _soak(port: int, pid: int, seconds: float, clients: int, live_clients: int) -> list[str]:
    """Bad requests (40%), table answers and live work together, the server's RSS every 10 s."""
    mixed = [*TABLE_QUERIES, *TABLE_QUERIES[:3], *BAD_QUERIES * 2]  # 15 good, 10 bad: 40% bad
    samples: list[float] = []

    async def run() -> list[Results]:
        async def sample() -> None:
            while True:
                samples.append(_rss_mib(pid))
                await asyncio.sleep(10)

        sampler = asyncio.create_task(sample())
        try:
            return await _phase(port, [(clients, mixed), (live_clients, [])], seconds)
        finally:
            sampler.cancel()

    (ml, ms), (_, ls) = asyncio.run(run())
    return [f"- soak {seconds:.0f} s: {clients} connections (40% bad requests): statuses {dict(ms)}, p99 "
            f"{_pct(ml, 0.99):.2f} ms; {live_clients} live clients: statuses {dict(ls)}",
            f"- server RSS every 10 s (MiB): {', '.join(f'{v:.0f}' for v in samples)}"]


def serve(args: argparse.Namespace) -> list[str]:
    seconds = 2.0 if args.quick else args.seconds
    clients, live_clients = (4, 2) if args.quick else (args.clients, args.live_clients)
    log = open(os.devnull, "w")
    server = subprocess.Popen([sys.executable, "-m", "lookup.cli", "serve", "--port", "0", "--no-access-log",
                               "--http", args.http, "--table", args.table], stderr=subprocess.PIPE, stdout=log,
                              text=True, cwd=common.ROOT)
    drain = None
    try:
        port = int(server.stderr.readline().split()[1].rsplit(":", 1)[1])
        drain = subprocess.Popen(["cat"], stdin=server.stderr, stdout=log)  # the server's log, until it exits
        time.sleep(3)  # the live workers start
        (lat, st), = asyncio.run(_phase(port, [(clients, TABLE_QUERIES)], seconds))
        peak = _rss_mib(server.pid)
        (tl, ts), (ll, ls) = asyncio.run(_phase(port, [(4, TABLE_QUERIES), (live_clients, [])], seconds))
        peak = max(peak, _rss_mib(server.pid))
        out = [f"### `lookup serve` under load ({seconds:g} s per phase, http={args.http}, {os.cpu_count()} cores "
               "shared by client and server)", "",
               f"- keep-alive table answers: {clients} connections, {sum(st.values()) / seconds:.0f} requests/s, "
               f"p50 {_pct(lat, 0.5):.2f} ms, p99 {_pct(lat, 0.99):.2f} ms, statuses {dict(st)}",
               f"- table answers while {live_clients} clients force live work: {len(tl)} answers, p50 "
               f"{_pct(tl, 0.5):.2f} ms, p99 {_pct(tl, 0.99):.2f} ms, max {_pct(tl, 1.0):.2f} ms, statuses {dict(ts)}",
               f"- live clients: statuses {dict(ls)}, p50 {_pct(ll, 0.5):.1f} ms",
               f"- server RSS (process and workers) after the phases: {peak:.0f} MiB"]
        if args.soak:
            out += _soak(port, server.pid, args.soak, clients, live_clients)
        return out
    finally:
        server.terminate()
        server.wait(30)
        if drain is not None:
            drain.wait(30)
        log.close()


PARTS: dict[str, common.Part] = {"cli": cli, "open": opening, "slack": slack, "inverse": inverse, "lower": lower,
                                 "trust": trust, "serve": serve}


def main(argv: list[str] | None = None) -> None:
    p = common.parser("lookup", __doc__, PARTS)
    p.add_argument("--table", default=str(common.ROOT / "data" / "default.zarr"))
    p.add_argument("--runs", type=int, default=15, help="cli: runs of each command; trust: a third as many")
    p.add_argument("--queries", type=int, default=300, help="slack: random queries")
    p.add_argument("--inverse", type=int, default=40, help="inverse: random queries against the engine")
    p.add_argument("--lower", type=int, default=40, help="lower: random queries")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-slack", type=float, default=0.02, help="slack, lower: the default route's max_slack")
    p.add_argument("--seconds", type=float, default=10, help="serve: seconds per phase")
    p.add_argument("--clients", type=int, default=16, help="serve: keep-alive table connections")
    p.add_argument("--live-clients", type=int, default=8, help="serve: connections forcing live work")
    p.add_argument("--http", default="h11", help="serve: uvicorn's HTTP implementation (h11, httptools)")
    p.add_argument("--soak", type=float, default=0, help="serve: seconds of the soak phase (0: none)")
    common.run("lookup", PARTS, p.parse_args(argv), argv)


if __name__ == "__main__":
    main()
