"""``lookup.eps(..., rounds=T, sample_rate=q)``: subsampled rounds, always live.

Independent reference: at n = 1 a subsampled binary-RR round has privacy loss +eps0, 0, -eps0
with probabilities q e^eps0/(e^eps0 + 1), 1 - q, q/(e^eps0 + 1) (the user sends nothing with
probability 1 - q), so T rounds have loss eps0 (A - B), (A, B) trinomial, and the exact composed
profile is a finite sum (docs/composition.md, "Subsampled rounds").
"""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from test_lookup_compose import eps_of_loss_law, rr_table

import lookup
from lookup.cli.commands import main


def exact_subsampled_rr_eps(eps0: float, q: float, rounds: int, delta: float) -> float:
    up, down = q * math.exp(eps0) / (math.exp(eps0) + 1), q / (math.exp(eps0) + 1)
    law = []
    for a in range(rounds + 1):
        for b in range(rounds + 1 - a):
            p = math.comb(rounds, a) * math.comb(rounds - a, b) * up**a * down**b * (1 - q) ** (rounds - a - b)
            law.append((eps0 * (a - b), p))
    return eps_of_loss_law(law, delta, eps0 * rounds)


@pytest.mark.parametrize(("q", "rounds"), [(0.1, 20), (0.5, 40)])
def test_live_and_above_the_exact_composition(q: float, rounds: int) -> None:
    a = lookup.eps("krr", eps0=1.0, n=1, delta=1e-6, k=2, rounds=rounds, sample_rate=q, table=rr_table())
    exact = exact_subsampled_rr_eps(1.0, q, rounds, 1e-6)
    assert a.source == "live"
    assert exact <= a.value <= exact * 1.01, (a.value, exact)


@pytest.mark.parametrize(("max_slack", "source"), [(0.02, "live"), (None, "table")])
def test_rate_one_is_every_users_answer(max_slack: float | None, source: str) -> None:
    table = rr_table()
    plain = lookup.eps("krr", eps0=1.0, n=1, delta=1e-6, k=2, rounds=10, table=table, max_slack=max_slack)
    rated = lookup.eps("krr", eps0=1.0, n=1, delta=1e-6, k=2, rounds=10, sample_rate=1, table=table,
                       max_slack=max_slack)
    assert plain.source == source and rated == plain


def test_refused() -> None:
    with pytest.raises(ValueError, match="sample_rate needs rounds"):
        lookup.eps("krr", eps0=1.0, n=1, delta=1e-6, k=2, sample_rate=0.5, table=rr_table())
    for bad in (0, 1.5, "x"):
        with pytest.raises(ValueError, match="sample_rate"):
            lookup.eps("krr", eps0=1.0, n=1, delta=1e-6, k=2, rounds=3, sample_rate=bad, table=rr_table())


def test_cli(tmp_path) -> None:
    args = ["eps", "--mechanism", "krr", "--k", "2", "--eps0", "1", "--n", "1", "--delta", "1e-6", "--rounds", "5",
            "--json"]
    out = CliRunner().invoke(main, [*args, "--sample-rate", "0.5"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["sample_rate"] == 0.5 and data["source"] == "live" and data["rounds"] == 5
    assert data["eps"] >= exact_subsampled_rr_eps(1.0, 0.5, 5, 1e-6)
    for bad in ("0", "2", "abc"):
        out = CliRunner().invoke(main, [*args, "--sample-rate", bad])
        assert out.exit_code == 2 and "sample" in out.output and "Traceback" not in out.output, out.output
