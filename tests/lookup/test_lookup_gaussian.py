"""The shuffled Gaussian on bits (``gaussian``, lookup/answer/gaussian.py) through lookup: the Python API,
the ``lookup`` CLI and ``lookup serve`` answer it live, with the engine's values
(``tablegen.engine.gaussian`` called directly), certified properties of those values (lower <= value,
eps decreasing in n, at n = 1 the Gaussian mechanism's own delta, computed here with math.erfc), and
every refusal by name.  The service is a real one on 127.0.0.1 (conftest's ``start_server``)."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import lookup
from lookup.answer import gaussian
from lookup.answer import live as live_engine
from lookup.cli.commands import main
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
    a = lookup.eps("gaussian", n=n, delta=delta, sigma=sigma)
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
    ({"sigma": 1.0, "inputs": "unit"}, "inputs=unit is not certified yet"),
    ({"sigma": 1.0, "inputs": "reals"}, "inputs must be one of bits, unit"),
    ({"sigma": 1.0, "rounds": 10}, "rounds is not supported for mechanism 'gaussian' yet"),
    ({"sigma": 1.0, "rounds": 10, "sample_rate": 0.1}, "not supported for mechanism 'gaussian' yet"),
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


# ---------------------------------------------------------------- the CLI

def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def test_cli_eps_and_delta_are_the_apis() -> None:
    result = cli("eps", "--mechanism", "gaussian", "--sigma", "1", "--n", "1e5", "--delta", "1e-6", "--json")
    b = engine.eps_bounds(1.0, 10**5, 1e-6)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"eps": b.upper, "eps_lower": b.lower, "certified": True, "source": "live",
                                         "corner": {}, "slack": 0.0, "edge": False}
    result = cli("delta", "--mechanism", "gaussian", "--sigma", "0.5", "--inputs", "bits", "--n", "1000", "--eps",
                 "2", "--json")
    b = engine.delta_bounds(0.5, 1000, 2.0)
    assert result.exit_code == 0, result.output
    assert (json.loads(result.stdout)["delta"], json.loads(result.stdout)["delta_lower"]) == (b.upper, b.lower)
    text = cli("eps", "--mechanism", "gaussian", "--sigma", "1", "--n", "1e5", "--delta", "1e-6")
    eps = engine.eps_bounds(1.0, 10**5, 1e-6).upper
    assert text.exit_code == 0 and f"eps: {eps!r}" in text.stdout and "source: live" in text.stdout


@pytest.mark.parametrize(("args", "status", "message"), [
    (["--sigma", "1", "--inputs", "unit"], 2, "inputs=unit is not certified yet"),
    (["--sigma", "1", "--inputs", "reals"], 2, "'reals' is not one of"),
    ([], 2, "needs sigma"),
    (["--sigma", "0.1"], 2, "sigma must be in [0.2, 50]"),
    (["--sigma", "x"], 2, "sigma must be a number"),
    (["--sigma", "\u0661"], 2, "ASCII digits"),
    (["--sigma", "1", "--eps0", "1"], 2, "takes no eps0"),
    (["--sigma", "1", "--k", "3"], 2, "takes no k"),
    (["--sigma", "1", "--rounds", "3"], 2, "rounds is not supported for mechanism 'gaussian' yet"),
    (["--sigma", "1", "--no-live"], 3, "answered live only"),
])
def test_cli_refusals(args: list[str], status: int, message: str) -> None:
    result = cli("eps", "--mechanism", "gaussian", "--n", "1000", "--delta", "1e-6", *args)
    assert result.exit_code == status and message in result.output, result.output


def test_cli_other_mechanisms_still_need_eps0_and_refuse_sigma() -> None:
    result = cli("eps", "--mechanism", "krr", "--k", "3", "--n", "1000", "--delta", "1e-6")
    assert result.exit_code == 2 and "mechanism 'krr' needs eps0" in result.output
    result = cli("delta", "--mechanism", "krr", "--k", "3", "--eps0", "1", "--n", "1000", "--eps", "0.1", "--sigma",
                 "1")
    assert result.exit_code == 2 and "sigma is a parameter of mechanism 'gaussian'" in result.output
    result = cli("eps0-max", "--mechanism", "gaussian", "--n", "1000", "--eps", "0.5", "--delta", "1e-6")
    assert result.exit_code == 2 and "eps0_max is not answered" in result.output


# ---------------------------------------------------------------- the service (127.0.0.1)

@pytest.fixture(scope="module")
def base(start_server: Any) -> str:
    return start_server("--live-workers", "1").base


def get(url: str) -> tuple[int, Any]:
    """(status, JSON body) of GET ``url`` (bounded in time)."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_service_answers_are_the_engines_and_the_clis(base: str) -> None:
    status, body = get(f"{base}/v1/eps?mechanism=gaussian&sigma=1&n=100000&delta=1e-6")
    b = engine.eps_bounds(1.0, 10**5, 1e-6)
    assert status == 200 and (body["eps"], body["eps_lower"], body["source"]) == (b.upper, b.lower, "live")
    assert body["asked"] == {"mechanism": "gaussian", "sigma": 1.0, "n": 1e5, "delta": 1e-6}
    assert {k: v for k, v in body.items() if k != "asked"} == json.loads(
        cli("eps", "--mechanism", "gaussian", "--sigma", "1", "--n", "100000", "--delta", "1e-6", "--json").stdout)
    status, body = get(f"{base}/v1/delta?mechanism=GAUSSIAN&sigma=0.5&n=1000&eps=2&inputs=bits")
    b = engine.delta_bounds(0.5, 1000, 2.0)
    assert status == 200 and (body["delta"], body["delta_lower"], body["slack"]) == (b.upper, b.lower, 0.0)
    assert body["asked"]["inputs"] == "bits"
    status, body = get(f"{base}/v1/delta?mechanism=gaussian&sigma=1&n=1&eps=0.5")
    assert status == 200 and body["delta"] >= gaussian_mechanism_delta(1.0, 0.5) * (1 - 1e-12)


@pytest.mark.parametrize(("query", "message"), [
    ("/v1/eps?mechanism=gaussian&sigma=0.1&n=1000&delta=1e-6", "sigma must be in [0.2, 50]"),
    ("/v1/eps?mechanism=gaussian&sigma=nan&n=1000&delta=1e-6", "sigma must be finite"),
    ("/v1/eps?mechanism=gaussian&sigma=abc&n=1000&delta=1e-6", "sigma must be a number"),
    ("/v1/eps?mechanism=gaussian&sigma=1e-%E0%A7%AA&n=1000&delta=1e-6", "ASCII digits"),
    ("/v1/eps?mechanism=gaussian&n=1000&delta=1e-6", "missing parameter 'sigma'"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&inputs=unit", "inputs=unit is not certified yet"),
    ("/v1/delta?mechanism=gaussian&sigma=1&n=1000&eps=1&inputs=reals", "inputs must be one of bits, unit"),
    ("/v1/eps?mechanism=gaussian&sigma=1&eps0=1&n=1000&delta=1e-6", "takes no eps0"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&rounds=3", "rounds is not supported"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&k=3", "takes no k"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=2.5&delta=1e-6", "n must be an integer"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&live=false", "answered live only"),
    ("/v1/eps0-max?mechanism=gaussian&sigma=1&n=1000&eps=0.5&delta=1e-6", "eps0_max is not answered"),
    ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=1e-6&sigma=1", "unknown parameter 'sigma'"),
])
def test_service_refusals_are_400s_naming_the_parameter(base: str, query: str, message: str) -> None:
    status, body = get(base + query)
    assert status == 400 and message in body["error"], body


def test_no_engine_import_at_load() -> None:
    """lookup.answer.gaussian imports the engine only when it computes (tests/test_architecture.py
    checks lookup as a whole; this one the new module alone, in a fresh interpreter)."""
    import subprocess
    import sys

    code = ("import sys, lookup.answer.gaussian; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tablegen'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert out.strip() == "[]"
