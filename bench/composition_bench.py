"""Joint compositions: size of the merged product decomposition, time and peak memory.

Run as ``python bench/composition_bench.py [--mem-gib 8] [--timeout 300]``; prints Markdown
(bench/RESULTS.md holds its output).  Each row is a fresh one-core child process (engine_bench's
``run_child``): build the upper and lower decompositions of a k-joint composition (k parts, eps0/k
each; tablegen/decomposition.py merges products above 100,000 components), then one certified
eps(delta) query with its lower bound at n = 1e6, delta = 1e-6.  Before the merge, 4-joint Laplace
(194^4 = 1.4e9 product components, ~34 GB of arrays) was killed for memory on a 24 GiB machine.
"""

from __future__ import annotations

import argparse

from engine_bench import run_child

CHILD = """
import json, time
from tablegen.mechanisms import get_mechanism
from tablegen.engine.accountant import eps_bounds
m = get_mechanism("joint")
params = m.resolve({params!r})
t0 = time.perf_counter()
upper, lower = m.upper({eps0!r}, **params), m.lower({eps0!r}, **params)
t1 = time.perf_counter()
b = eps_bounds("joint", eps0={eps0!r}, n=10**6, delta=1e-6, **{params!r})
t2 = time.perf_counter()
print(json.dumps({{"upper_components": max(d.c.size for d in upper), "lower_components": max(d.c.size for d in lower),
                  "build_s": t1 - t0, "query_s": t2 - t1, "eps": b.upper, "eps_lower": b.lower}}))
"""
CASES = [("laplace", {}), ("krr", {"k": 10}), ("rappor", {})]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mem-gib", type=float, default=8.0, help="address-space cap per child")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per child")
    args = parser.parse_args()
    print("## Joint compositions (n = 1e6, delta = 1e-6, one core per row)\n")
    print("| base | parts | eps0 | upper / lower components | build s | query s | eps (lower) | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for base, extra in CASES:
        for parts in (2, 3, 4):
            for eps0 in (0.1, 4.0):
                r = run_child(CHILD.format(params={"base": base, "parts": parts, **extra}, eps0=eps0),
                              args.mem_gib, args.timeout)
                row = f"| {base}{''.join(f' {k}={v}' for k, v in extra.items())} | {parts} | {eps0:g} |"
                if "error" in r:
                    print(f"{row} **{r['error']}** | | | | {r['maxrss_mib']:.0f} |", flush=True)
                    continue
                print(f"{row} {r['upper_components']} / {r['lower_components']} | "
                      f"{r['build_s']:.2f} | {r['query_s']:.2f} | {r['eps']:.4g} ({r['eps_lower']:.4g}) | "
                      f"{r['maxrss_mib']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
