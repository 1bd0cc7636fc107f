"""eps of T identical shuffled rounds through dp-accounting's accountant (``ShufflePLDAccountant``,
lattice 1e-4) against ``tablegen compose`` (its own lattice, FFT bound subtracted): the grid of
tests/tablegen/compose/test_compose_accountants.py, at delta = 1e-8.

    pip install 'shuffle-eps[compose]'
    python examples/accountant_vs_compose.py
"""

from __future__ import annotations

from dp_accounting import NeighboringRelation

from tablegen import compose

GRID = [("krr", 1.0, 10**6, {"k": 10}, 1.0), ("krr", 2.0, 10**4, {"k": 3}, 1.0), ("generic", 1.0, 1000, {}, 1.0),
        ("krr", 3.0, 10**5, {"k": 10}, 0.05), ("krr", 0.3, 10**6, {"k": 10}, 1.0)]
DELTA = 1e-8


def main() -> None:
    print("| mechanism | eps0 | n | q | T | compose | accountant | accountant / compose |")
    print("|---|---|---|---|---|---|---|---|")
    for mechanism, eps0, n, params, q in GRID:
        for rounds in (1, 10, 365):
            ours = compose.eps(mechanism, eps0=eps0, n=n, rounds=rounds, delta=DELTA, sample_rate=q, **params).eps
            acc = compose.ShufflePLDAccountant(NeighboringRelation.REPLACE_SPECIAL)
            theirs = acc.compose(compose.ShuffledRoundEvent(mechanism, eps0, n, params, q), rounds).get_epsilon(DELTA)
            label = mechanism + "".join(f" {k}={v}" for k, v in params.items())
            print(f"| {label} | {eps0:g} | {n:.0e} | {q:g} | {rounds} | {ours:.5g} | {theirs:.5g} "
                  f"| {theirs / ours:.5f} |")


if __name__ == "__main__":
    main()
