"""Benchmark of the lookup: import, open, latency, throughput, HTTP, and slack against live.

Run as ``python bench/lookup_bench.py [--table data/default.zarr] [--queries Q] [--seed S]``;
prints Markdown.

1. ``import lookup`` in a fresh process: time and whether any heavy module came with it.
2. Table open (manifest check + load) in a fresh process.
3. Scalar ``lookup.eps`` latency once the table is open (p50, p90 over 20000 calls), and
   vectorised throughput (10^6 random queries in one call).
4. HTTP requests per second on loopback (``lookup serve`` in a thread, 4 client threads,
   one connection per request).
5. Random off-grid queries (log-uniform n in [1e2, 1e8], eps0 uniform in [0.05, 8], delta
   log-uniform in [1e-12, 1e-3], mechanisms of the table): the table answer against the live
   certified value of the engine: median and quantiles of the slack, and how many table answers
   fall below the live value (must be none, up to the engine's own precision of 1e-3).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("dask", "distributed", "xarray", "scipy", "pandas", "tablegen", "zarr")


def fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.strip()


def import_and_open(table: str) -> list[str]:
    imp = json.loads(fresh(
        "import time, sys; t = time.perf_counter(); import lookup; dt = time.perf_counter() - t; import json; "
        f"print(json.dumps([dt, [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]]))"))
    opened = json.loads(fresh(
        "import time, json, lookup; t = time.perf_counter(); "
        f"lookup.open_table({table!r}); print(json.dumps(time.perf_counter() - t))"))
    return [f"- `import lookup`: {imp[0] * 1e3:.1f} ms; heavy modules pulled: {imp[1] or 'none'}",
            f"- table open (manifest SHA-256 over every file, load, monotone surfaces): {opened * 1e3:.0f} ms"]


def latency(table: str) -> list[str]:
    import lookup

    t = lookup.open_table(table)
    rng = np.random.default_rng(0)
    eps0 = rng.uniform(0.05, 8, 20000).tolist()
    n = np.round(10 ** rng.uniform(2, 8, 20000)).tolist()
    delta = (10 ** rng.uniform(-12, -3, 20000)).tolist()
    times = []
    for i in range(20000):
        start = time.perf_counter()
        lookup.eps("krr", eps0=eps0[i], n=n[i], delta=delta[i], table=t, k=10)
        times.append(time.perf_counter() - start)
    times.sort()
    size = 10**6
    e, m, d = rng.uniform(0.05, 8, size), np.round(10 ** rng.uniform(2, 8, size)), 10 ** rng.uniform(-12, -3, size)
    start = time.perf_counter()
    lookup.eps("krr", eps0=e, n=m, delta=d, table=t, live=False, k=10)
    rate = size / (time.perf_counter() - start)
    return [f"- scalar `lookup.eps` (krr k=10, random in-grid queries, table open): p50 "
            f"{statistics.median(times) * 1e6:.1f} us, p90 {times[int(0.9 * len(times))] * 1e6:.1f} us "
            "(target p50 < 20 us)",
            f"- vectorised: {rate:.3g} queries/s for 10^6 queries in one call (target > 1e6)"]


def http_rate(table: str, seconds: float = 5.0) -> list[str]:
    from lookup.serve import make_server

    server = make_server("127.0.0.1", 0, table)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/eps?mechanism=krr&k=10&eps0=2&n=1e6&delta=1e-8"
    counts = [0] * 4
    stop = time.perf_counter() + seconds

    def client(i: int) -> None:
        while time.perf_counter() < stop:
            with urllib.request.urlopen(url) as response:
                response.read()
            counts[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    server.shutdown()
    return [f"- HTTP `GET /v1/eps` on loopback: {sum(counts) / seconds:.0f} requests/s "
            "(4 client threads, one connection per request, table answers)"]


def slack_against_live(table: str, count: int, seed: int) -> list[str]:
    import lookup
    from tablegen.engine import eps_bounds

    t = lookup.open_table(table)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(t.families), count)
    slack, below, live_count = [], [], 0
    for r in rows:
        family, params = t.families[r], t.params[r]
        eps0 = float(rng.uniform(0.05, 8))
        n = int(round(10 ** rng.uniform(2, 8)))
        delta = float(10 ** rng.uniform(-12, -3))
        a = lookup.eps(family, eps0=eps0, n=n, delta=delta, table=t, **params)
        if a.source == "live":  # rows answered at grid eps0 only (OLH's eps0-dependent g)
            live_count += 1
            continue
        live = eps_bounds(family, eps0=eps0, n=n, delta=delta, lower=False, **params).upper
        slack.append(a.value / live - 1)
        if a.value < live * (1 - 1e-3):
            below.append((family, params, eps0, n, delta, a.value, live))
    s = np.array(slack)
    return [f"- {count} random queries (seed {seed}) over the table's mechanisms, eps0 in [0.05, 8], n in [1e2, 1e8], "
            "delta in [1e-12, 1e-3]: table / live certified - 1:",
            f"  median {np.median(s):.1%}, 75% {np.quantile(s, 0.75):.1%}, 90% {np.quantile(s, 0.9):.1%}, "
            f"max {s.max():.1%} over {s.size} table answers; answers below live (beyond 1e-3): {len(below)} "
            f"{below[:3] if below else ''}; {live_count} queries answered live (OLH off grid eps0)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(ROOT / "data" / "default.zarr"))
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = ["## Lookup benchmark", ""]
    out += import_and_open(args.table) + latency(args.table) + http_rate(args.table)
    out += slack_against_live(args.table, args.queries, args.seed)
    print("\n".join(out))


if __name__ == "__main__":
    main()
