"""``lookup.eps(..., rounds=T)``: from the table's curve when it covers the slice, live otherwise.

The table here holds the exact eps of binary randomized response at n = 1 (closed form:
delta(eps) = (e^eps0 - e^eps)/(e^eps0 + 1)), so the composed answer from it must be >= the exact
binomial composition (computed independently in tests/tablegen/compose/test_compose.py's way).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

import lookup
from lookup.cli.commands import main
from lookup.store.table import from_arrays

EPS0 = np.array([0.5, 1.0, 2.0])
DELTAS = np.array([1e-9, 1e-6, 1e-3, 0.05, 0.2])


def rr_table(vouch: bool = True) -> lookup.Table:
    b = np.exp(EPS0)[:, None]
    eps = np.log(b - DELTAS[None, :] * (b + 1))  # exact n = 1 binary RR eps(delta), eps0 x delta
    eps = np.maximum(eps, 0.0)[None, :, None, :] * (1 + 1e-12)
    # the test vouches for these values (the closed form above, rounded up): certified answers
    return from_arrays("rr", ["krr"], [{"k": 2}], EPS0, np.array([1.0]), DELTAS, eps, np.full_like(eps, np.nan), {},
                       vouch=vouch)


def eps_of_loss_law(law: list[tuple[float, float]], delta: float, top: float) -> float:
    """The exact eps at delta of a privacy-loss law [(loss, probability)] on [0, top], by bisection:
    delta(e) = sum over loss > e of p (1 - e^(e - loss))."""
    def profile(e: float) -> float:
        return sum(p * -math.expm1(e - loss) for loss, p in law if loss > e)

    lo, hi = 0.0, top
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if profile(mid) > delta else (lo, mid)
    return hi


def exact_rr_eps(eps0: float, rounds: int, delta: float) -> float:
    q = 1 / (1 + math.exp(eps0))
    law = [(eps0 * (rounds - 2 * k), math.comb(rounds, k) * q**k * (1 - q) ** (rounds - k)) for k in range(rounds + 1)]
    return eps_of_loss_law(law, delta, eps0 * rounds)


@pytest.mark.parametrize("eps0,rounds", [(1.0, 1), (1.0, 10), (0.8, 30), (2.0, 5)])
def test_table_answer_is_certified_against_exact_composition(eps0: float, rounds: int) -> None:
    a = lookup.eps("krr", eps0=eps0, n=1, delta=1e-6, rounds=rounds, k=2, table=rr_table(), live=False)
    assert a.source == "table" and a.certified and a.corner["eps0"] == EPS0[np.searchsorted(EPS0, eps0)]
    exact = exact_rr_eps(eps0, rounds, 1e-6)
    assert exact <= a.value <= 1.3 * exact_rr_eps(a.corner["eps0"], rounds, 1e-6)


def test_a_composed_answer_from_a_table_nothing_vouches_for_is_not_certified() -> None:
    """Issue 37 review (N4): arrays made in Python, never vouched for, answered "certified": true."""
    a = lookup.eps("krr", eps0=1.0, n=1, delta=1e-6, rounds=10, k=2, table=rr_table(vouch=False), live=False)
    assert a.source == "table" and a.certified is False


def test_off_the_table_goes_live_or_fails_without_live() -> None:
    t = rr_table()
    with pytest.raises(lookup.TableError):
        lookup.eps("krr", eps0=3.0, n=1, delta=1e-6, rounds=4, k=2, table=t, live=False)
    a = lookup.eps("krr", eps0=3.0, n=1, delta=1e-6, rounds=4, k=2, table=t)
    assert a.source == "live"
    assert exact_rr_eps(3.0, 4, 1e-6) <= a.value <= 1.01 * exact_rr_eps(3.0, 4, 1e-6)


@pytest.mark.parametrize("eps0,rounds", [(1.0, 10), (0.8, 30), (2.0, 5)])
def test_an_answer_inside_the_table_is_the_engines_composition(eps0: float, rounds: int) -> None:
    """Issue 46: inside the table, by default, the engine's composition (what ``tablegen compose``
    answers), within 1% of the exact composition of binary randomized response (n = 1: T rounds have
    loss eps0 (T - 2K), K ~ Bin(T, 1 / (1 + e^eps0))) and never below it; the table's own route
    (max_slack=None) is certified too and never tighter."""
    t = rr_table()
    a = lookup.eps("krr", eps0=eps0, n=1, delta=1e-6, rounds=rounds, k=2, table=t)
    table = lookup.eps("krr", eps0=eps0, n=1, delta=1e-6, rounds=rounds, k=2, table=t, max_slack=None)
    exact = exact_rr_eps(eps0, rounds, 1e-6)
    assert a.source == "live" and exact <= a.value <= 1.01 * exact
    assert table.source == "table" and a.value <= table.value


def test_bad_rounds_and_arrays_named() -> None:
    for rounds in (0, 1.5, -2):
        with pytest.raises(ValueError, match="rounds"):
            lookup.eps("krr", eps0=1.0, n=1, delta=1e-6, rounds=rounds, k=2, table=rr_table())
    with pytest.raises(ValueError, match="rounds takes scalar"):
        lookup.eps("krr", eps0=[1.0, 2.0], n=1, delta=1e-6, rounds=3, k=2, table=rr_table())


def test_cli_rounds(table_path) -> None:
    args = ["eps", "--mechanism", "krr", "--k", "3", "--eps0", "1", "--n", "40", "--delta", "1e-6", "--table",
            str(table_path), "--json"]
    out = CliRunner().invoke(main, [*args, "--rounds", "5"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["rounds"] == 5 and data["source"] == "live" and data["certified"] is True  # precise by default
    table = json.loads(CliRunner().invoke(main, [*args, "--rounds", "5", "--max-slack", "none"]).output)
    assert table["source"] == "table" and table["eps"] >= data["eps"]
    single = json.loads(CliRunner().invoke(main, args).output)["eps"]
    assert single < data["eps"] <= 5 * single
    out = CliRunner().invoke(main, [*args, "--rounds", "0"])
    assert out.exit_code == 2 and "rounds" in out.output and "Traceback" not in out.output
