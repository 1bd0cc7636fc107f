"""Shuffled rounds inside dp-accounting's accountants (tablegen/compose/accountants.py, issue 39).

Independent references: the exact profile of k-RR at n = 1 (one report, closed form) and its
exact Rényi divergence; dp-accounting's own Gaussian PLD; basic composition; ``tablegen compose``
(FFT bound and all) on the same lattice.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

dp_accounting = pytest.importorskip("dp_accounting")

from dp_accounting import (  # noqa: E402
    ComposedDpEvent,
    GaussianDpEvent,
    NeighboringRelation,
    PoissonSampledDpEvent,
    SelfComposedDpEvent,
    UnsupportedEventError,
)
from dp_accounting.pld import PLDAccountant  # noqa: E402
from dp_accounting.rdp import RdpAccountant  # noqa: E402

from tablegen import compose  # noqa: E402
from tablegen.compose import core, pld  # noqa: E402
from tablegen.compose.profile import POINTS, sample, tail_edge  # noqa: E402

SPECIAL = NeighboringRelation.REPLACE_SPECIAL
DELTA = 1e-8
LATTICE = 1e-4  # dp-accounting's default value_discretization_interval
ROUNDS = [("krr", 1.0, 10**6, {"k": 10}, 1.0), ("krr", 2.0, 10**4, {"k": 3}, 1.0), ("generic", 1.0, 1000, {}, 1.0),
          ("krr", 3.0, 10**5, {"k": 10}, 0.05)]


def krr_exact(eps: np.ndarray, eps0: float, k: int) -> np.ndarray:
    """delta(eps) of k-RR on one report, inputs x0 != x1 (either order): outputs x0, x1, the k - 2 others."""
    e0, x = math.exp(eps0), np.exp(eps)
    return (np.maximum(e0 - x, 0) + np.maximum(1 - x * e0, 0) + (k - 2) * np.maximum(1 - x, 0)) / (e0 + k - 1)


def krr_renyi(alpha: float, eps0: float, k: int) -> float:
    """D_alpha(P||Q) of k-RR on one report (symmetric in the pair): sum_y P^alpha Q^(1-alpha)."""
    log_total = np.logaddexp.reduce([alpha * eps0, (1 - alpha) * eps0, math.log(k - 2)])  # log space: alpha <= 1024
    return float(log_total - math.log(math.exp(eps0) + k - 1)) / (alpha - 1)


@pytest.mark.parametrize("mechanism, eps0, n, params, q", ROUNDS)
@pytest.mark.parametrize("rounds", [1, 10, 365])
def test_rounds_alone_match_compose_within_the_lattice(mechanism: str, eps0: float, n: int, params: dict, q: float,
                                                       rounds: int) -> None:
    ours = compose.eps(mechanism, eps0=eps0, n=n, rounds=rounds, delta=DELTA, sample_rate=q, **params).eps
    event = compose.ShuffledRoundEvent(mechanism, eps0, n, params, sample_rate=q)
    theirs = compose.ShufflePLDAccountant(SPECIAL).compose(event, rounds).get_epsilon(DELTA)
    # the lattices differ (ours e_hi/100, dp-accounting's 1e-4): each round's losses move by < one step
    assert theirs - rounds * LATTICE <= ours <= theirs * (1 + 1e-3)


@pytest.mark.parametrize("mechanism, eps0, n, params, q", ROUNDS[:3])
def test_on_our_own_lattice_the_export_is_compose_less_its_fft_bound(mechanism: str, eps0: float, n: int,
                                                                     params: dict, q: float) -> None:
    r = core.Round(mechanism, eps0, n, params)
    lattice = tail_edge(r.profile, eps0) / POINTS  # what compose_rounds picks for one kind of round
    ours = compose.eps(mechanism, eps0=eps0, n=n, rounds=100, delta=DELTA, **params)
    loss = compose.round_pld(mechanism, eps0=eps0, n=n, value_discretization_interval=lattice, **params)
    composed = loss.self_compose(100)
    # the same pmf and FFT: the export differs only by its lift, eta (1 - delta) <= 4 CURVE_ROUNDING per round
    lift = 100 * 4 * pld.CURVE_ROUNDING
    assert composed.get_epsilon_for_delta(DELTA - ours.fp_delta_bound + lift) <= ours.eps * (1 + 1e-12)
    assert ours.eps <= composed.get_epsilon_for_delta(DELTA - ours.fp_delta_bound) * (1 + 1e-12)


@pytest.mark.parametrize("mechanism, eps0, n, params, q", ROUNDS)
def test_exported_pld_is_above_the_certified_profile_at_every_stored_eps(mechanism: str, eps0: float, n: int,
                                                                         params: dict, q: float) -> None:
    r = core.Round(mechanism, eps0, n, params, sample_rate=q)
    index, upper = sample(r.profile, tail_edge(r.profile, eps0), LATTICE)
    loss = compose.round_pld(mechanism, eps0=eps0, n=n, sample_rate=q, **params)
    eps = index * LATTICE
    for direction in (loss._pmf_remove, loss._pmf_add):  # dp-accounting's REMOVE and ADD
        assert np.all(np.asarray(direction.get_delta_for_epsilon(eps)) >= upper)


@pytest.mark.parametrize("eps0, k", [(0.5, 2), (1.0, 10), (3.0, 4)])
def test_exported_pld_dominates_the_exact_round_at_negative_and_positive_eps(eps0: float, k: int) -> None:
    loss = compose.round_pld("krr", eps0=eps0, n=1, k=k)
    eps = np.linspace(-1.5 * eps0, 1.5 * eps0, 301)
    exact = krr_exact(eps, eps0, k)
    for direction in (loss._pmf_remove, loss._pmf_add):
        got = np.asarray(direction.get_delta_for_epsilon(eps))
        assert np.all(got[eps >= 0] >= exact[eps >= 0])
        assert np.all(got >= exact - pld.CURVE_ROUNDING)  # eps < 0: the accountants add it (docs/accounting.md)
        assert float(direction.get_delta_for_epsilon(0.0)) <= krr_exact(np.zeros(1), eps0, k)[0] + 1e-3


def test_round_with_gaussian_is_between_each_alone_and_basic_composition() -> None:
    event, gaussian = compose.ShuffledRoundEvent("krr", 1.0, 10**5, {"k": 10}), GaussianDpEvent(5.0)

    def eps(delta: float, *events: tuple) -> float:
        acc = compose.ShufflePLDAccountant(SPECIAL)
        for e, count in events:
            acc.compose(e, count)
        return acc.get_epsilon(delta)

    both = eps(DELTA, (event, 30), (gaussian, 1))
    alone = eps(DELTA, (event, 30)), eps(DELTA, (gaussian, 1))
    reference = PLDAccountant(SPECIAL).compose(gaussian).get_epsilon(DELTA)  # the parent's own Gaussian
    assert alone[1] == reference
    assert max(alone) <= both <= eps(DELTA / 2, (event, 30)) + eps(DELTA / 2, (gaussian, 1))


def test_nested_events_compose_like_sequential_ones() -> None:
    event = compose.ShuffledRoundEvent("krr", 1.0, 10**5, {"k": 10})
    sgd = PoissonSampledDpEvent(0.01, GaussianDpEvent(1.0))
    nested = compose.ShufflePLDAccountant(SPECIAL).compose(ComposedDpEvent([SelfComposedDpEvent(event, 5), sgd]), 2)
    flat = compose.ShufflePLDAccountant(SPECIAL).compose(event, 5).compose(sgd).compose(event, 5).compose(sgd)
    assert nested.get_epsilon(DELTA) == pytest.approx(flat.get_epsilon(DELTA), rel=1e-6)
    assert nested.supports(ComposedDpEvent([event, sgd]))


def test_rdp_accountant_is_certified_and_looser_than_the_pld_one() -> None:
    eps0, k, rounds = 1.0, 10, 50
    event = compose.ShuffledRoundEvent("krr", eps0, 1, {"k": k})
    rdp = compose.ShuffleRDPAccountant(neighboring_relation=SPECIAL).compose(event, rounds)
    exact = np.array([rounds * krr_renyi(a, eps0, k) for a in rdp._orders])
    assert np.all(np.asarray(rdp._rdp) >= exact * (1 - 1e-12))
    big = compose.ShuffledRoundEvent("krr", eps0, 10**6, {"k": k})
    via_rdp = compose.ShuffleRDPAccountant(neighboring_relation=SPECIAL).compose(big, 365).get_epsilon(DELTA)
    via_pld = compose.ShufflePLDAccountant(SPECIAL).compose(big, 365).get_epsilon(DELTA)
    assert via_pld <= via_rdp <= 5 * via_pld
    sgd = PoissonSampledDpEvent(0.01, GaussianDpEvent(1.0))
    assert (compose.ShuffleRDPAccountant(neighboring_relation=SPECIAL).compose(sgd, 100).get_epsilon(DELTA)
            == RdpAccountant(neighboring_relation=SPECIAL).compose(sgd, 100).get_epsilon(DELTA))


@pytest.mark.parametrize("accountant", ["ShufflePLDAccountant", "ShuffleRDPAccountant"])
def test_refusals_name_the_way_out(accountant: str) -> None:
    cls = getattr(compose, accountant)
    event = compose.ShuffledRoundEvent("krr", 1.0, 1000, {"k": 10})
    with pytest.raises(UnsupportedEventError, match=r"sample_rate=q"):
        cls(neighboring_relation=SPECIAL).compose(ComposedDpEvent([PoissonSampledDpEvent(0.1, event)]))
    with pytest.raises(UnsupportedEventError, match="REPLACE_SPECIAL"):
        cls(neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE).compose(event)  # the parents' default
    acc = cls(neighboring_relation=SPECIAL)
    with pytest.raises(ValueError, match="eps0"):
        acc.compose(compose.ShuffledRoundEvent("krr", -1.0, 1000, {"k": 10}))
    with pytest.raises(ValueError, match="sample_rate"):
        acc.compose(compose.ShuffledRoundEvent("krr", 1.0, 1000, {"k": 10}, sample_rate=1.5))
    with pytest.raises(ValueError, match="params must be a dict"):  # once a TypeError from ** deep inside
        acc.compose(compose.ShuffledRoundEvent("krr", 1.0, 1000, [("k", 10)]))  # type: ignore[arg-type]
    assert acc.ledger == dp_accounting.NoOpDpEvent() and acc.get_epsilon(DELTA) == 0  # nothing half-written


@pytest.mark.parametrize("accountant", ["ShufflePLDAccountant", "ShuffleRDPAccountant"])
def test_defaults_to_substitution_and_takes_parameters_as_round_pld_does(accountant: str) -> None:
    """No argument: REPLACE_SPECIAL (dp-accounting's own default, add/remove, refuses every round);
    k=10 as round_pld takes it is the event of params={"k": 10}; a parameter given both ways is refused."""
    cls = getattr(compose, accountant)
    keywords, as_dict = compose.ShuffledRoundEvent("krr", 1.0, 1000, k=10), compose.ShuffledRoundEvent(
        "krr", 1.0, 1000, {"k": 10})
    assert keywords == as_dict and cls().neighboring_relation == SPECIAL
    assert cls().compose(keywords, 3).get_epsilon(DELTA) == cls(neighboring_relation=SPECIAL).compose(
        as_dict, 3).get_epsilon(DELTA)
    with pytest.raises(ValueError, match="'k' given twice"):
        compose.ShuffledRoundEvent("krr", 1.0, 1000, {"k": 10}, k=3)


def test_a_lattice_too_fine_is_refused_before_allocating() -> None:
    """1e-12 once asked numpy for 3 TiB (a MemoryError); 1e-10, 33 GB the machine may grant."""
    start = time.perf_counter()
    with pytest.raises(ValueError, match="value_discretization_interval=1e-10 is too fine"):
        compose.round_pld("krr", eps0=1.0, n=1000, k=10, value_discretization_interval=1e-10)
    with pytest.raises(ValueError, match="too fine"):
        compose.ShufflePLDAccountant(SPECIAL, 1e-12).compose(compose.ShuffledRoundEvent("krr", 1.0, 1000, {"k": 10}))
    assert time.perf_counter() - start < 10


def test_without_dp_accounting_the_message_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.startswith("dp_accounting")] + ["tablegen.compose.accountants"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"pip install 'shuffle-eps\[compose\]'"):
        compose.round_pld("krr", eps0=1.0, n=10, k=2)
    code = ("import sys; sys.modules['dp_accounting'] = None\n"
            "import tablegen.compose as c; from tablegen.compose import *\n"
            "try:\n    c.ShufflePLDAccountant\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "pip install 'shuffle-eps[compose]'" in out.stdout, out.stderr


def test_worked_example_runs_and_its_budget_is_consistent() -> None:
    script = Path(__file__).resolve().parents[3] / "examples" / "shuffle_and_dpsgd.py"
    out = subprocess.run([sys.executable, str(script), "--days", "5", "--steps", "20", "--n", "1000", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pld_route, rdp_route = json.loads(out.stdout)["routes"]
    for r in (pld_route, rdp_route):
        # the sum of the parts at delta each is basic composition at 2 delta: above eps at delta as well
        assert max(r["eps_telemetry_alone"], r["eps_dpsgd_alone"]) <= r["eps"] <= r["basic_composition"]
    assert pld_route["eps"] <= rdp_route["eps"]


def test_event_survives_dp_accountings_named_tuple_round_trip() -> None:
    event = ComposedDpEvent([compose.ShuffledRoundEvent("krr", 1.0, 1000, {"k": 10}, 0.5), GaussianDpEvent(1.0)])
    form = event.to_named_tuple()
    assert form.events[0].mechanism == "krr"
    assert dp_accounting.DpEvent.from_named_tuple(form) == event


def test_gaussian_rounds_in_the_pld_accountant_and_refused_elsewhere() -> None:
    """Ten rounds of the shuffled Gaussian on bits: above the T sums of the reports (one Gaussian mechanism at
    mu sqrt(T), exact delta from math.erfc), within 1% of tablegen's own composition of the same profile;
    the RDP accountant and add/remove neighbours refuse the event by name."""
    from tablegen.compose import ShuffledGaussianRoundEvent, ShufflePLDAccountant, ShuffleRDPAccountant

    sigma, n, t, delta = 2.0, 100_000, 10, 1e-6
    accountant = ShufflePLDAccountant()
    accountant.compose(ShuffledGaussianRoundEvent(sigma, n), t)
    value = accountant.get_epsilon(delta)
    mu = math.sqrt(t) / (sigma * math.sqrt(n))

    def phi_bar(x: float) -> float:
        return 0.5 * math.erfc(x / math.sqrt(2))

    assert phi_bar(value / mu - mu / 2) - math.exp(value) * phi_bar(value / mu + mu / 2) <= delta
    assert value == pytest.approx(compose.gaussian_eps(sigma=sigma, n=n, rounds=t, delta=delta).eps, rel=0.01)
    assert not ShuffleRDPAccountant().supports(ShuffledGaussianRoundEvent(sigma, n))
    add_remove = ShufflePLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert not add_remove.supports(ShuffledGaussianRoundEvent(sigma, n))
