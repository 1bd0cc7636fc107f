"""The shuffled Gaussian on bits (``gaussian``, lookup/answer/gaussian.py) through the Python API:
answered live with the engine's values (``tablegen.engine.gaussian`` called directly), certified
properties of those values (lower <= value, eps decreasing in n, at n = 1 the Gaussian mechanism's
own delta, computed here with math.erfc), the disk cache, and every refusal by name."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lookup
from lookup.answer import gaussian
from lookup.answer import live as live_engine
from lookup.store.table import TableError
from tablegen.engine import gaussian as engine

POINTS = [(1.0, 10**5, 1e-6), (0.5, 1000, 1e-9), (4.0, 10**7, 1e-8)]


def phi(x: float) -> float:
    """The standard normal distribution function, from math.erfc (no scipy)."""
    return 0.5 * math.erfc(-x / math.sqrt(2))


def gaussian_mechanism_delta(sigma: float, eps: float) -> float:
    """delta(eps) of one user's x + N(0, sigma^2) for x in {0, 1}: sensitivity 1, noise sigma
    (Balle-Wang, arXiv:1805.06530, Theorem 8): the exact value at n = 1."""
    return phi(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * phi(-1 / (2 * sigma) - eps * sigma)


# ---------------------------------------------------------------- the Python API

@pytest.mark.parametrize(("sigma", "n", "delta"), POINTS)
def test_eps_is_the_engines(sigma: float, n: int, delta: float) -> None:
    """max_slack=0: never the shipped sigma file (its slack, answer over its lower bound, is above 0)."""
    a = lookup.eps("gaussian", n=n, delta=delta, sigma=sigma, max_slack=0.0)
    b = engine.eps_bounds(sigma, n, delta)
    assert (a.value, a.lower) == (b.upper, b.lower)
    assert a.source == "live" and a.slack == 0.0 and a.certified is True and a.edge is False and a.corner == {}
    assert 0 <= a.lower <= a.value


@pytest.mark.parametrize(("sigma", "n", "eps"), [(1.0, 10**5, 0.02), (0.5, 1000, 2.0), (2.0, 10, 0.5)])
def test_delta_is_the_engines(sigma: float, n: int, eps: float) -> None:
    a = lookup.delta("gaussian", n=n, eps=eps, sigma=sigma, inputs="bits")
    b = engine.delta_bounds(sigma, n, eps)
    assert (a.value, a.lower) == (b.upper, b.lower)
    assert a.source == "live" and a.slack == 0.0 and 0 <= a.lower <= a.value < 1


def test_inputs_unit_and_bits_are_answered_alike() -> None:
    """One analysis answers both (docs/soundness.md, "The worst pair of inputs in [0, 1]"): the same
    numbers live and from the shipped sigma file, for eps and delta, unit the default."""
    for kwargs in ({"max_slack": 0.0}, {"live": False}):
        got = [lookup.eps("gaussian", n=5000, delta=1e-7, sigma=1.5, **kwargs, **given)
               for given in ({}, {"inputs": "unit"}, {"inputs": "bits"})]
        assert len({(a.value, a.lower, a.source) for a in got}) == 1
    got = [lookup.delta("gaussian", n=5000, eps=0.1, sigma=1.5, inputs=inputs) for inputs in ("unit", "bits")]
    assert got[0].value == got[1].value and got[0].lower == got[1].lower


def test_eps_decreases_with_n() -> None:
    ns = [10, 10**3, 10**5, 10**7]
    a = lookup.eps("gaussian", n=ns, delta=1e-6, sigma=1.0)
    assert a.value.shape == (4,) and list(a.source) == ["live"] * 4
    assert np.all(np.diff(a.value) < 0) and np.all(a.lower <= a.value)


@pytest.mark.parametrize(("sigma", "eps"), [(0.2, 1.0), (1.0, 0.5), (1.0, 0.0), (5.0, 0.05), (50.0, 0.001)])
def test_one_user_is_the_gaussian_mechanism(sigma: float, eps: float) -> None:
    """n = 1: the shuffle is the identity, so delta(eps) is the Gaussian mechanism's, exactly."""
    exact = gaussian_mechanism_delta(sigma, eps)
    a = lookup.delta("gaussian", n=1, eps=eps, sigma=sigma)
    assert a.value >= exact * (1 - 1e-12) and a.lower <= exact * (1 + 1e-9)
    assert a.value <= exact * (1 + 1e-6)  # (the engine's n = 1 value is E[G_+] itself)


def test_one_user_eps_holds_the_gaussian_mechanism() -> None:
    a = lookup.eps("gaussian", n=1, delta=1e-6, sigma=1.0)
    assert gaussian_mechanism_delta(1.0, a.value) <= 1e-6 * (1 + 1e-9)  # certified: delta at the eps answered
    assert gaussian_mechanism_delta(1.0, a.lower) >= 1e-6 * (1 - 1e-9)  # a lower bound: delta still above


def test_arrays_broadcast_sigma_with_the_numbers() -> None:
    a = lookup.eps("gaussian", n=[[100], [10**4]], delta=1e-6, sigma=[0.5, 2.0])
    assert a.value.shape == (2, 2)
    assert a.value[1, 0] == engine.eps_bounds(0.5, 10**4, 1e-6).upper
    assert np.all(a.value[:, 1] < a.value[:, 0])  # more noise, less eps


def test_text_numbers_and_any_case() -> None:
    assert lookup.eps("Gaussian", n=1000, delta=1e-6, sigma="1").value == engine.eps_bounds(1.0, 1000, 1e-6).upper


def test_the_disk_cache_holds_gaussian_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer read back from $SHUFFLE_EPS_CACHE is the engine's (recertified, or recomputed)."""
    monkeypatch.setenv(live_engine.ENV_CACHE, str(tmp_path))
    monkeypatch.setattr(live_engine, "_MEMORY", {})
    first = lookup.eps("gaussian", n=321, delta=1e-7, sigma=1.5)
    assert list(tmp_path.glob("*.json"))
    monkeypatch.setattr(live_engine, "_MEMORY", {})
    again = lookup.eps("gaussian", n=321, delta=1e-7, sigma=1.5)
    assert (again.value, again.lower) == (first.value, first.lower)


def test_sigma_range_is_the_engines() -> None:
    from tablegen.mechanisms.gaussian import SIGMA_MAX, SIGMA_MIN

    assert (gaussian.SIGMA_MIN, gaussian.SIGMA_MAX) == (SIGMA_MIN, SIGMA_MAX)


# ---------------------------------------------------------------- rounds composed

def sum_bound_delta(sigma: float, n: int, rounds: int, eps: float) -> float:
    """The exact delta(eps) of the T rounds' sums of the reports, a post-processing of the T shuffled
    multisets: each sum is N(sum x, n sigma^2), so together they are the Gaussian mechanism at
    mu = sqrt(T) / (sigma sqrt(n)) (arXiv:1805.06530, Theorem 8), a lower bound on the composed delta."""
    return gaussian_mechanism_delta(sigma * math.sqrt(n / rounds), eps)


@pytest.mark.parametrize(("sigma", "n", "rounds", "delta"), [(2.0, 10**5, 10, 1e-6), (1.0, 1000, 10, 1e-6)])
def test_rounds_lie_between_the_sums_and_basic_composition(sigma: float, n: int, rounds: int, delta: float) -> None:
    """T rounds composed: at least the T sums' exact eps (their delta at the answer is within delta),
    at most basic composition of T rounds at delta / T each (each round's certified eps, times T)."""
    a = lookup.eps("gaussian", n=n, delta=delta, sigma=sigma, rounds=rounds)
    assert (a.source, a.certified, a.corner) == ("live", True, {}) and math.isnan(a.lower) and math.isnan(a.slack)
    assert sum_bound_delta(sigma, n, rounds, a.value) <= delta
    one_round = engine.eps_bounds(sigma, n, delta / rounds, lower=False).upper
    assert a.value <= rounds * one_round
    assert lookup.answer.api.json_ready("eps", a, rounds)["rounds"] == rounds


REFUSED = [
    ({"eps0": 1.0, "sigma": 1.0}, "takes no eps0"),
    ({}, "needs sigma"),
    ({"sigma": 0.1}, "sigma must be in [0.2, 50]"),
    ({"sigma": 51}, "sigma must be in [0.2, 50]"),
    ({"sigma": math.nan}, "sigma must be in [0.2, 50]"),
    ({"sigma": math.inf}, "sigma must be in [0.2, 50]"),
    ({"sigma": [1.0, 0.0]}, "sigma must be in [0.2, 50]"),
    ({"sigma": True}, "sigma must be a number"),
    ({"sigma": "1e-\u09ea"}, "ASCII digits"),
    ({"sigma": 1.0, "inputs": "reals"}, "inputs must be one of unit, bits"),
    ({"sigma": 1.0, "rounds": 10, "sample_rate": 0.1}, "sample_rate is not supported for mechanism 'gaussian' yet"),
    ({"sigma": 1.0, "rounds": 0}, "rounds must be an integer in [1, 1000000], got rounds=0"),
    ({"sigma": 1.0, "rounds": 2.5}, "rounds must be an integer in [1, 1000000]"),
    ({"sigma": 0.1, "rounds": 3}, "sigma must be in [0.2, 50]"),
    ({"sigma": 1.0, "rounds": [2, 3]}, "one query at a time"),
    ({"sigma": 1.0, "eps0": 1.0, "rounds": 3}, "takes no eps0"),
    ({"rounds": 3}, "needs sigma"),
    ({"sigma": 1.0, "sample_rate": 0.1}, "sample_rate is not supported for mechanism 'gaussian' yet"),
    ({"sigma": 1.0, "k": 3}, "takes no k"),
]


@pytest.mark.parametrize(("given", "message"), REFUSED)
def test_eps_refusals_name_the_parameter(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        lookup.eps("gaussian", n=1000, delta=1e-6, **given)
    assert message in str(err.value)


@pytest.mark.parametrize(("given", "message"), [g for g in REFUSED if not {"rounds", "sample_rate"} & set(g[0])])
def test_delta_refusals_name_the_parameter(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        lookup.delta("gaussian", n=1000, eps=0.1, **given)
    assert message in str(err.value)


def test_other_refusals() -> None:
    with pytest.raises(ValueError, match="eps0_max is not answered"):
        lookup.eps0_max("gaussian", eps=0.5, n=1000, delta=1e-6, sigma=1.0)
    with pytest.raises(ValueError, match="sigma is a parameter of mechanism 'gaussian', not of 'krr'"):
        lookup.eps("krr", eps0=1.0, n=1000, delta=1e-6, k=3, sigma=1.0)
    with pytest.raises(ValueError, match="inputs is a parameter of mechanism 'gaussian', not of 'generic'"):
        lookup.delta("generic", eps0=1.0, n=1000, eps=0.1, inputs="bits")
    with pytest.raises(ValueError, match="mechanism 'krr' needs eps0"):
        lookup.eps("krr", n=1000, delta=1e-6, k=3)
    with pytest.raises(ValueError, match="n must be an integer"):
        lookup.eps("gaussian", n=2.5, delta=1e-6, sigma=1.0)
    with pytest.raises(ValueError, match="delta must be in"):
        lookup.eps("gaussian", n=10, delta=0.0, sigma=1.0)
    with pytest.raises(TableError, match="answered live only .* live computation is off"):
        lookup.eps("gaussian", n=10, delta=1e-6, sigma=1.0, live=False)
    with pytest.raises(TableError, match="answered live only .* live computation is off"):
        lookup.eps("gaussian", n=10, delta=1e-6, sigma=1.0, rounds=3, live=False)


def test_no_engine_import_at_load() -> None:
    """lookup.answer.gaussian imports the engine only when it computes (tests/test_architecture.py
    checks lookup as a whole; this one the new module alone, in a fresh interpreter)."""
    code = ("import sys, lookup.answer.gaussian; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tablegen'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert out.strip() == "[]"
