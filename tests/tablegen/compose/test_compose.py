"""Composition of shuffled rounds against values computed independently of it.

* n = 1: the shuffled round is one eps0-randomized-response report (binary RR: k-RR with k = 2,
  and the generic bound at n = 1).  T rounds have privacy loss eps0 (T - 2K), K ~ Bin(T, q),
  q = 1/(1 + e^eps0) under P, so the exact profile is the binomial sum
      delta_T(eps) = sum_k P(K = k) (1 - e^(eps - eps0 (T - 2k)))_+
  and the exact eps(delta) is found by bisection on it (here, with math.comb and logs).
  Different eps0 per round: the loss is a sum over the kinds, enumerated the same way.
* a small pair of distributions P, Q with Q a permutation of P (a symmetric profile): the
  connect-the-dots PLD built from the exact profile at grid points dominates the exact profile
  at negative and positive eps (the mirror argument of tablegen/compose/profile.py).
"""

from __future__ import annotations

import itertools
import json
import math
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from tablegen import compose
from tablegen.cli import main
from tablegen.compose import pld
from tablegen.compose.profile import envelope


def binomial_pmf(t: int, q: float) -> list[float]:
    return [math.comb(t, k) * q**k * (1 - q) ** (t - k) for k in range(t + 1)]


def rr_losses(kinds: list[tuple[float, int]]) -> dict[float, float]:
    """Exact law of the total privacy loss of RR rounds: kinds = [(eps0, times), ...]."""
    law = {0.0: 1.0}
    for eps0, times in kinds:
        q = 1 / (1 + math.exp(eps0))
        step = {eps0 * (times - 2 * k): p for k, p in enumerate(binomial_pmf(times, q))}
        out: dict[float, float] = {}
        for (a, pa), (b, pb) in itertools.product(law.items(), step.items()):
            out[a + b] = out.get(a + b, 0.0) + pa * pb
        law = out
    return law


def exact_eps(law: dict[float, float], delta: float) -> float:
    def profile(eps: float) -> float:
        return sum(p * -math.expm1(eps - loss) for loss, p in law.items() if loss > eps)

    lo, hi = 0.0, max(law)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if profile(mid) > delta else (lo, mid)
    return hi


@pytest.mark.parametrize("eps0", [0.5, 1.0])
@pytest.mark.parametrize("rounds", [1, 10, 100, 1000])
def test_n1_is_randomized_response_composed_exactly(eps0: float, rounds: int) -> None:
    exact = exact_eps(rr_losses([(eps0, rounds)]), 1e-8)
    ours = compose.eps("krr", eps0=eps0, n=1, rounds=rounds, delta=1e-8, k=2).eps
    assert exact <= ours <= exact * 1.01


def test_sequence_of_different_rr_rounds() -> None:
    kinds = [(1.0, 3), (0.5, 4), (0.25, 5)]
    exact = exact_eps(rr_losses(kinds), 1e-6)
    rounds = [compose.Round("generic", e0, 1, times=t) for e0, t in kinds]
    c = compose.eps_sequence(rounds, delta=1e-6)
    assert c.rounds == 12
    assert exact <= c.eps <= exact * 1.01


def test_sequence_of_identical_rounds_is_self_composition() -> None:
    one = compose.eps("generic", eps0=1.0, n=100, rounds=6, delta=1e-6).eps
    seq = compose.eps_sequence([compose.Round("generic", 1.0, 100, times=2)] * 3, delta=1e-6).eps
    assert seq == pytest.approx(one, rel=1e-9)


@pytest.mark.parametrize("mechanism,params,n", [("krr", {"k": 10}, 10**4), ("generic", {}, 1000)])
def test_one_round_gives_back_the_single_round_certified_eps(mechanism: str, params: dict, n: int) -> None:
    from tablegen.engine import eps_bounds

    single = eps_bounds(mechanism, eps0=1.0, n=n, delta=1e-6, lower=False, **params).upper
    ours = compose.eps(mechanism, eps0=1.0, n=n, rounds=1, delta=1e-6, **params).eps
    # the engine's value is the evaluated end of a bracket of relative width 1e-4
    assert single * (1 - 1e-4) <= ours <= single * 1.005


def test_monotone_in_rounds_n_and_eps0() -> None:
    def value(eps0: float, n: int, rounds: int) -> float:
        return compose.eps("generic", eps0=eps0, n=n, rounds=rounds, delta=1e-6).eps

    by_rounds = [value(1.0, 200, t) for t in (1, 3, 10, 30)]
    by_n = [value(1.0, n, 10) for n in (50, 200, 800)]
    by_eps0 = [value(e0, 200, 10) for e0 in (0.5, 1.0, 2.0)]
    assert by_rounds == sorted(by_rounds)
    assert by_n == sorted(by_n, reverse=True)
    assert by_eps0 == sorted(by_eps0)


def test_connect_dots_dominates_exact_profile_at_negative_and_positive_eps() -> None:
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(6))
    q = p[::-1]  # Q is P reversed: delta_{P||Q} = delta_{Q||P}

    def exact(e: float) -> float:
        return float(np.maximum(p - math.exp(e) * q, 0).sum())

    top = float(np.log(p / q).max())
    d = top / 40
    index = np.arange(41)
    pmf = pld.connect_dots(envelope(index, np.array([exact(i * d) for i in index]), d)).pmf
    for e in np.linspace(-1.5 * top, 1.5 * top, 301):
        assert pmf.get_delta_for_epsilon(float(e)) >= exact(float(e)) - 1e-14


def test_rounds_max_and_eps0_max_against_exact_rr() -> None:
    budget, delta = 10.5, 1e-8
    fits = [t for t in range(1, 20) if exact_eps(rr_losses([(1.0, t)]), delta) <= budget]
    b = compose.rounds_max("krr", eps0=1.0, n=1, eps=budget, delta=delta, k=2)
    assert b.rounds == max(fits) and b.eps <= budget and not b.capped
    e0 = compose.eps0_max("krr", rounds=10, eps=budget, n=1, delta=delta, k=2)
    assert exact_eps(rr_losses([(e0, 10)]), delta) <= budget
    assert exact_eps(rr_losses([(e0 * 1.01, 10)]), delta) > budget


def test_bad_input_names_the_parameter() -> None:
    for rounds in (0, 2.5, -3, "x"):
        with pytest.raises(ValueError, match="rounds"):
            compose.eps("generic", eps0=1.0, n=10, rounds=rounds, delta=1e-6)
    with pytest.raises(ValueError, match="eps=0.5 is below"):
        compose.rounds_max("krr", eps0=1.0, n=1, eps=0.5, delta=1e-8, k=2)
    with pytest.raises(ValueError, match="delta"):
        compose.eps("generic", eps0=1.0, n=10, rounds=3, delta=0)
    with pytest.raises(ValueError, match="no eps0 meets it"):
        compose.eps0_max("krr", rounds=10, eps=1e-9, n=1, delta=1e-8, k=2)


def test_cli_json_and_errors() -> None:
    def run(*args: str):
        return CliRunner().invoke(main, ["compose", "--mechanism", "krr", "--k", "2", "--n", "1", "--delta", "1e-8",
                                         *args])

    out = run("--eps0", "1", "--rounds", "10", "--json", "--compare")
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["rounds"] == 10 and data["certified"] is True
    assert data["eps"] <= data["basic"] <= 10 * 1.0001 and data["advanced"] > data["eps"]
    out = run("--eps0", "1", "--rounds-max", "--eps", "10.5", "--json")
    assert json.loads(out.output)["rounds_max"] == 10
    for args, name in [(["--eps0", "1", "--rounds", "0"], "rounds"), (["--eps0", "1", "--rounds", "1.5"], "rounds"),
                       (["--eps0", "1", "--rounds-max", "--eps", "0.1"], "eps=0.1"), (["--rounds", "3"], "--eps0")]:
        out = run(*args)
        assert out.exit_code == 2 and name in out.output and "Traceback" not in out.output, (args, out.output)
    seq = '[{"mechanism": "generic", "eps0": 1, "n": 1, "times": 2}]'
    out = CliRunner().invoke(main, ["compose-sequence", "--rounds", seq, "--delta", "1e-6", "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["rounds"] == 2, out.output


def test_missing_dp_accounting_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    monkeypatch.setitem(sys.modules, "dp_accounting.pld", None)
    with pytest.raises(ImportError, match=r"shuffle-eps\[compose\]"):
        pld.pld_module()
    out = CliRunner().invoke(main, ["compose", "--mechanism", "generic", "--eps0", "1", "--n", "1", "--rounds", "2",
                                    "--delta", "1e-6"])
    assert out.exit_code == 1 and "shuffle-eps[compose]" in out.output and "Traceback" not in out.output


def test_approximate_dp_rounds_keep_their_delta_term() -> None:
    # (eps0, delta0)-LDP: the certified profile never reaches 0; its value at eps0 becomes infinity mass
    pure = compose.eps("generic", eps0=1.0, n=50, rounds=3, delta=1e-4).eps
    approx = compose.eps("generic", eps0=1.0, n=50, rounds=3, delta=1e-4, delta0=1e-7).eps
    assert pure <= approx < math.inf
    with pytest.raises(ValueError, match="too small to certify"):
        compose.eps("generic", eps0=1.0, n=50, rounds=3, delta=1e-7, delta0=1e-7)
