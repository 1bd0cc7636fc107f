"""The inverse questions live: ``eps0_max`` for every family at n from 1e2 to 1e9 (target: <= 2 s
and <= 1 GB a call on 2 cores, issue 27), the service's worst case among them.

Run as ``python bench/inverse_bench.py``; prints Markdown.  Each family runs in its own process
(its peak RSS is that process's, read from ``resource.getrusage``), every call timed alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

FAMILIES = {"generic": {}, "krr k=10": {"k": 10}, "blh": {}, "olh": {}, "rappor": {}, "oue": {}, "hr": {},
            "laplace": {}, "joint krr k=10 x2": {"base": "krr", "k": 10, "parts": 2}}
NS = (100, 10**4, 10**6, 10**9)
QUERIES = [(0.5, 1e-8), (1.569, 2.058e-6)]  # the second: the service's worst case reported in issue 27
CHILD = """
import json, resource, sys, time
from tablegen.engine import eps0_max
family, params, ns, queries = json.loads(sys.argv[1])
family = family.split()[0]
rows = []
for n in ns:
    for eps, delta in queries:
        start = time.perf_counter()
        try:
            value = eps0_max(family, eps=eps, n=n, delta=delta, **params)
        except ValueError as err:
            value = str(err)
        rows.append([n, eps, delta, value, time.perf_counter() - start])
print(json.dumps([rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))
"""


def main() -> None:
    lines = [f"## Inverse questions live ({time.strftime('%Y-%m-%d')}): `python bench/inverse_bench.py`", "",
             "eps0_max for eps, delta in " + ", ".join(f"({e}, {d:g})" for e, d in QUERIES) + f" at n in {NS}, "
             "each call timed alone; peak RSS of the family's process.", "",
             "| family | slowest call | its query (n, eps, delta) | median call | peak RSS |", "|---|---|---|---|---|"]
    for family, params in FAMILIES.items():
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([family, params, NS, QUERIES])],
                             capture_output=True, text=True, check=True).stdout
        rows, peak = json.loads(out)
        slow = max(rows, key=lambda r: r[4])
        times = sorted(r[4] for r in rows)
        lines.append(f"| {family} | {slow[4]:.2f} s | {slow[0]:g}, {slow[1]}, {slow[2]:g} | "
                     f"{times[len(times) // 2]:.2f} s | {peak:.0f} MiB |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
