"""Binary randomized response (k-RR, k = 2): the exact worst case certified (docs/soundness.md, "Binary
randomized response"; tablegen/engine/binary.py).

Parts (``python -m bench binary [--only PART ...] [--quick]``):

* ``table``: at delta = 1e-8, eps0 1 / 2 / 4 and n 1e4 / 1e5 (and 1e7, 1e9 in a full run), the exact eps
  (an independent oracle's, quoted in issue 54: log-space pmfs over every m, checked at 60 digits; "-" where
  none), the blanket bound (engine before the exact path), ours certified now and our lower bound.
* ``time``: whole-process ``tablegen compute --mechanism krr --k 2 ... --json`` at n = 1e4, 1e7 and 1e9
  (targets: 2 s at n <= 1e7, 10 s at 1e9), eps0 1 and 4, delta 1e-8.
* ``compose``: 10 rounds at eps0 2, delta 1e-8, n 1e4 / 1e7 / 1e9 (``--quick``: 1e4): ``compose.eps`` with the
  exact profile (``binary.delta_profile``) against the blanket's profile, and the seconds of the first in-process
  (the blanket's curve is then cached).
"""

from __future__ import annotations

import time

from bench import common

DELTA = 1e-8
# (eps0, n) -> exact eps at delta 1e-8 from the oracle
EXACT = {(1.0, 10**4): 0.0470123, (2.0, 10**4): 0.112655, (4.0, 10**4): 0.404521, (1.0, 10**5): 0.0138795,
         (2.0, 10**5): 0.0328278, (4.0, 10**5): 0.109727}


def part_table(quick: bool) -> None:
    from tablegen.engine import eps_bounds

    ns = (10**4, 10**5) if quick else (10**4, 10**5, 10**7, 10**9)
    print(f"## k-RR k = 2, delta = {DELTA:g}: exact, blanket (before), ours certified (now), our lower bound\n")
    print("| eps0 | n | exact | blanket | blanket / exact | ours | ours / exact | lower | lower / exact | seconds |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for n in ns:
        for eps0 in (1.0, 2.0, 4.0):
            start = time.perf_counter()
            b = eps_bounds("krr", eps0=eps0, n=n, delta=DELTA, k=2)
            seconds = time.perf_counter() - start
            blanket = common.blanket_eps_bounds("krr", eps0=eps0, n=n, delta=DELTA, k=2).upper
            exact = EXACT.get((eps0, n))
            ratios = [f"{v / exact:.4f}" if exact else "-" for v in (blanket, b.upper, b.lower)]
            print(f"| {eps0:g} | {n:.0e} | {exact or '-'} | {blanket:.6g} | {ratios[0]} | {b.upper:.6g} "
                  f"| {ratios[1]} | {b.lower:.6g} | {ratios[2]} | {seconds:.2f} |")
    print()


def part_time(quick: bool) -> None:
    print("## whole-process `tablegen compute --mechanism krr --k 2` (2-core machine)\n")
    print("| n | eps0 | seconds | target | eps | eps_lower |\n|---|---|---|---|---|---|")
    for n in ((10**4,) if quick else (10**4, 10**7, 10**9)):
        for eps0 in (1.0, 4.0):
            seconds, answer = common.timed_compute("--mechanism", "krr", "--k", "2", "--eps0", str(eps0), "--n", str(n),
                                                   "--delta", str(DELTA))
            print(f"| {n:.0e} | {eps0:g} | {seconds:.2f} | <= {10 if n > 10**7 else 2} | {answer['eps']:.6g} "
                  f"| {answer['eps_lower']:.6g} |")
    print()


def part_compose(quick: bool) -> None:
    from tablegen import compose
    from tablegen.engine import binary

    print("## 10 rounds composed, eps0 2, delta 1e-8: the exact profile against the blanket's (in-process)\n")
    print("| n | exact profile | seconds | blanket profile | change |\n|---|---|---|---|---|")
    applies = binary.applies
    for n in (10**4,) if quick else (10**4, 10**7, 10**9):
        start = time.perf_counter()
        exact = compose.eps("krr", eps0=2.0, n=n, rounds=10, delta=DELTA, k=2).eps
        seconds = time.perf_counter() - start
        binary.applies = lambda q: False  # the engine without the exact path
        try:
            blanket = compose.eps("krr", eps0=2.0, n=n, rounds=10, delta=DELTA, k=2).eps
        finally:
            binary.applies = applies
        print(f"| {n:.0e} | {exact:.6g} | {seconds:.1f} | {blanket:.6g} | {exact / blanket - 1:+.1%} |")
    print()


def main(argv: list[str] | None = None) -> None:
    common.print_parts("binary", __doc__, {"table": part_table, "time": part_time, "compose": part_compose}, argv)


if __name__ == "__main__":
    main()
