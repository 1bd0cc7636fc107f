"""Rounds of the shuffled Gaussian on bits composed with the others, against bounds computed independently.

* Lower: the exact pair "others at 0, the target's bit 0 vs 1".  For k-RR with k = 2 its shuffled
  output is the count of ones, Bin(n - 1, q) + Bern(q) against Bin(n - 1, q) + Bern(p) (enumerated
  here); for the Gaussian it is post-processed to the sum of the outputs, the Gaussian mechanism at
  mu = 1 / (sigma sqrt n), whose T rounds are one at mu sqrt(T) and whose delta at any real e is
  Phi(mu/2 - e/mu) - e^e Phi(-mu/2 - e/mu) (arXiv:1805.06530 Theorem 8, scipy here).  The product of
  the two pairs: delta(eps) = sum_y P(y) delta_G(eps - L(y)) with L the discrete pair's privacy loss.
* Upper: basic composition of each round's certified one-round eps (the engine's, not the PLD's).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from tablegen import compose
from tablegen.cli import main
from tablegen.compose import budget
from tablegen.engine import eps_bounds, gaussian
from tablegen.mechanisms import get_mechanism

SIGMA, N_GAUSS, EPS0, N_KRR, DELTA = 2.0, 10_000, 2.0, 200, 1e-6


def gaussian_delta(mu: float, e: np.ndarray) -> np.ndarray:
    """Hockey-stick divergence of N(mu, 1) against N(0, 1) at each real e (arXiv:1805.06530 Thm 8)."""
    return stats.norm.cdf(mu / 2 - e / mu) - np.exp(e) * stats.norm.cdf(-mu / 2 - e / mu)


def krr2_losses(eps0: float, n: int, times: int) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities under P, privacy losses) of ``times`` rounds of the exact k = 2 pair, target 1 (P)
    against target 0 (Q), the other n - 1 users at 0."""
    q = 1 / (1 + math.exp(eps0))
    others = stats.binom.pmf(np.arange(n), n - 1, q)
    p_law = np.convolve(others, [q, 1 - q])  # the target's 1 is reported as 1 with probability 1 - q
    q_law = np.convolve(others, [1 - q, q])
    prob, loss = np.ones(1), np.zeros(1)
    for _ in range(times):
        prob, loss = np.outer(prob, p_law).ravel(), np.add.outer(loss, np.log(p_law / q_law)).ravel()
    return prob, loss


def exact_pair_eps(delta: float, gauss_times: int, krr_times: int) -> float:
    """eps of the product pair at ``delta`` (bisection; the lower end, where delta is still above)."""
    mu = math.sqrt(gauss_times) / (SIGMA * math.sqrt(N_GAUSS))
    prob, loss = krr2_losses(EPS0, N_KRR, krr_times)

    def product_delta(eps: float) -> float:
        return float(np.sum(prob * gaussian_delta(mu, eps - loss)))

    lo, hi = 0.0, 10.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if product_delta(mid) > delta else (lo, mid)
    return lo


def test_a_mixed_sequence_lies_between_the_exact_pair_and_basic_composition() -> None:
    gauss_times, krr_times = 4, 2
    rounds = [compose.Round.gaussian(SIGMA, N_GAUSS, times=gauss_times), compose.Round("krr", EPS0, N_KRR, {"k": 2},
                                                                                        times=krr_times)]
    c = compose.eps_sequence(rounds, delta=DELTA)
    assert c.rounds == gauss_times + krr_times
    lower = exact_pair_eps(DELTA, gauss_times, krr_times)
    share = DELTA / (gauss_times + krr_times)
    basic = (gauss_times * gaussian.eps_bounds(SIGMA, N_GAUSS, share, lower=False).upper
             + krr_times * eps_bounds(get_mechanism("krr"), eps0=EPS0, n=N_KRR, delta=share, lower=False, k=2).upper)
    assert lower < c.eps < basic
    alone = compose.gaussian_eps(sigma=SIGMA, n=N_GAUSS, rounds=gauss_times, delta=DELTA).eps
    assert exact_pair_eps(DELTA, gauss_times, 0) < alone < c.eps  # a round more never lowers eps


def test_the_sequence_cli_takes_a_gaussian_round() -> None:
    rounds = json.dumps([{"mechanism": "gaussian", "sigma": SIGMA, "n": N_GAUSS, "times": 3},
                         {"mechanism": "krr", "k": 2, "eps0": EPS0, "n": N_KRR}])
    out = CliRunner().invoke(main, ["compose-sequence", "--rounds", rounds, "--delta", "1e-6", "--json"])
    assert out.exit_code == 0, out.output
    expected = compose.eps_sequence([compose.Round.gaussian(SIGMA, N_GAUSS, 3), compose.Round("krr", EPS0, N_KRR,
                                                                                              {"k": 2})], delta=1e-6)
    assert json.loads(out.output)["eps"] == expected.eps and json.loads(out.output)["rounds"] == 4
    bad = json.dumps([{"mechanism": "gaussian", "n": 100}])
    refused = CliRunner().invoke(main, ["compose-sequence", "--rounds", bad, "--delta", "1e-6"])
    assert refused.exit_code == 2 and "gaussian: sigma" in refused.output


def test_rounds_max_certifies_t_and_not_t_plus_one() -> None:
    sigma, n, eps, delta = 4.0, 10_000, 0.2, 1e-6
    b = compose.rounds_max("gaussian", n=n, eps=eps, delta=delta, sigma=sigma)
    assert not b.capped and b.rounds > 1
    at = {t: compose.gaussian_eps(sigma=sigma, n=n, rounds=t, delta=delta).eps for t in (b.rounds, b.rounds + 1)}
    assert at[b.rounds] <= eps < at[b.rounds + 1] and b.eps == at[b.rounds]
    out = CliRunner().invoke(main, ["compose", "--mechanism", "gaussian", "--sigma", "4", "--n", "1e4", "--eps", "0.2",
                                    "--delta", "1e-6", "--rounds-max", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["rounds_max"] == b.rounds


def test_sigma_min_certifies_grows_with_rounds_and_is_tight_to_its_tolerance() -> None:
    eps, delta, n, rtol = 0.02, 1e-6, 10_000, 0.05
    found = {t: budget.sigma_min(rounds=t, eps=eps, delta=delta, n=n, rtol=rtol) for t in (1, 4)}
    for t, noise in found.items():
        assert noise.rtol <= rtol and noise.rounds == t
        assert compose.gaussian_eps(sigma=noise.sigma, n=n, rounds=t, delta=delta).eps == noise.eps <= eps
        assert compose.gaussian_eps(sigma=noise.sigma * (1 - rtol), n=n, rounds=t, delta=delta).eps > eps
        mu = math.sqrt(t) / (noise.sigma * math.sqrt(n))  # the sums of the outputs alone fit too
        assert gaussian_delta(mu, np.array(eps)) <= delta
    assert found[1].sigma < found[4].sigma


def test_calibrate_cli_with_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "RTOL", 0.05)  # the command's tolerance: a short search
    runner = CliRunner()
    out = runner.invoke(main, ["calibrate", "--mechanism", "gaussian", "--eps", "0.2", "--delta", "1e-6", "--n", "1e4",
                               "--rounds", "37", "--json"])
    assert out.exit_code == 0, out.output
    answer = json.loads(out.output)
    assert answer["rounds"] == 37 and answer["rtol"] <= 0.05 and answer["eps_spent"] <= 0.2
    assert answer["sigma"] <= 4.0  # 37 rounds at sigma 4 fit (test_rounds_max_certifies_t_and_not_t_plus_one)
    for args, word in [(["--rounds", "0"], "rounds must be an integer in [1, 1000000]"),
                       (["--eps", "1e-4", "--rounds", "10"], "no sigma up to 50"),
                       (["--eps", "-1", "--rounds", "10"], "eps must be")]:
        base = {"--eps": "0.2", "--delta": "1e-6", "--n": "1e4"}
        base.update(dict(zip(args[::2], args[1::2], strict=True)))
        refused = runner.invoke(main, ["calibrate", "--mechanism", "gaussian", *sum(base.items(), ())])
        assert refused.exit_code == 2 and word in refused.output, refused.output
    protocol = runner.invoke(main, ["calibrate", "--mechanism", "binary-sum", "--eps", "1", "--delta", "1e-6", "--n",
                                    "1e4", "--rounds", "3"])
    assert protocol.exit_code == 2 and "--rounds" in protocol.output


@pytest.mark.parametrize("make,word", [
    (lambda: compose.Round("gaussian", 1.0, 100, {"sigma": 1.0}), "takes no eps0"),
    (lambda: compose.Round.gaussian(0.1, 100), "sigma must be a number in [0.2, 50]"),
    (lambda: compose.Round("gaussian", None, 100, {"sigma": 1.0, "k": 2}), "takes no k"),
    (lambda: compose.Round("gaussian", None, 100, {}), "needs sigma"),
    (lambda: compose.Round("gaussian", None, 100, {"sigma": 1.0, "inputs": "reals"}), "one of unit, bits"),
    (lambda: compose.Round("gaussian", None, 100, {"sigma": 1.0}, sample_rate=0.5), "takes no sample_rate"),
    (lambda: compose.Round.gaussian(1.0, 0), "n must be an integer"),
    (lambda: compose.Round("krr", None, 100, {"k": 2}), "needs eps0"),
])
def test_bad_rounds_name_the_parameter(make, word: str) -> None:
    with pytest.raises(ValueError) as error:
        compose.eps_sequence([make()], delta=1e-6)
    assert word in str(error.value)


def test_bad_questions_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="no eps0"):
        compose.eps0_max("gaussian", rounds=3, eps=1.0, n=100, delta=1e-6)
    for kwargs, word in [({"rounds": 0}, "rounds must be"), ({"eps": math.inf}, "eps must be"),
                         ({"delta": 1.0}, "delta must"), ({"n": 0.5}, "n must be"), ({"rtol": 1.0}, "rtol must")]:
        with pytest.raises(ValueError, match=word):
            budget.sigma_min(**{"rounds": 2, "eps": 1.0, "delta": 1e-6, "n": 100, **kwargs})
    runner = CliRunner()
    base = ["compose", "--mechanism", "gaussian", "--sigma", "4", "--n", "1e4", "--delta", "1e-6"]
    for extra, word in [(["--rounds-max"], "--eps is the budget"), (["--rounds", "3", "--rounds-max", "--eps", "1"],
                                                                     "exactly one of --rounds"),
                        (["--rounds", "3", "--eps", "1"], "--eps is the budget"), ([], "exactly one of --rounds"),
                        (["--eps0-max", "--rounds", "3", "--eps", "1"], "tablegen calibrate")]:
        out = runner.invoke(main, [*base, *extra])
        assert out.exit_code == 2 and word in out.output, (extra, out.output)


@pytest.mark.parametrize("sigma", [2.0, 4.0, 8.0])
def test_one_gaussian_round_composed_reaches_the_tail_and_the_engine(sigma: float) -> None:
    """The profile falls below the tail cut 1e-30 well before the single-user eps (it stalled near 1e-20 at
    sigma 4, making the lattice coarser than the answer: 3.4x the engine's eps), and one round composed is
    within 1% of the engine's certified eps and above the sum of the outputs' exact eps."""
    r = compose.Round.gaussian(sigma, N_GAUSS)
    assert r.profile(np.array([r.top() / 4]))[0] <= 1e-30
    one = compose.gaussian_eps(sigma=sigma, n=N_GAUSS, rounds=1, delta=DELTA).eps
    engine = gaussian.eps_bounds(sigma, N_GAUSS, DELTA).upper
    assert one <= engine * 1.01
    assert gaussian_delta(1 / (sigma * math.sqrt(N_GAUSS)), np.array([one]))[0] <= DELTA


def test_one_round_at_sigma_1_is_within_2_percent_of_the_engine() -> None:
    """Where the profile's tail cut e_hi (2.83) is 47x the eps asked (sigma 1, n 1e4, delta 1e-6), the
    round is sampled geometrically near 0 on a 16x finer lattice: within 2% of the engine's certified eps
    (1.20x on 100 uniform points), and above the sum of the outputs' exact eps."""
    one = compose.gaussian_eps(sigma=1.0, n=N_GAUSS, rounds=1, delta=DELTA).eps
    engine = gaussian.eps_bounds(1.0, N_GAUSS, DELTA, lower=False).upper
    assert engine * 0.98 <= one <= engine * 1.02
    assert gaussian_delta(1 / math.sqrt(N_GAUSS), np.array([one]))[0] <= DELTA
