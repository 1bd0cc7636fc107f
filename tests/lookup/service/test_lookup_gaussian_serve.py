"""``lookup serve`` answers the shuffled Gaussian on bits live (``/v1/eps?mechanism=gaussian&sigma=...``,
``/v1/delta``) through its live pool, with the engine's values (``tablegen.engine.gaussian`` called
directly) and the CLI's JSON, T rounds composed (``rounds``) as ``lookup.eps(..., rounds=T)`` answers them,
and refuses bad sigma, inputs, eps0, rounds, sample_rate with a 400 naming them.
A real server on 127.0.0.1 (conftest's ``start_server``); every request bounded in time."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from click.testing import CliRunner

import lookup
from lookup.answer.api import json_ready
from lookup.cli.commands import main
from tablegen.engine import gaussian as engine


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


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
    assert status == 200 and body["delta"] == engine.delta_bounds(1.0, 1, 0.5).upper


def test_rounds_are_the_librarys_composed_answer(base: str) -> None:
    """``rounds=T``: the answer of ``lookup.eps(..., rounds=T)`` (tested against independent bounds in
    tests/lookup/answer/test_lookup_gaussian.py), live, rounds in the JSON and in ``asked``."""
    status, body = get(f"{base}/v1/eps?mechanism=gaussian&sigma=2&n=100000&delta=1e-6&rounds=10")
    expected = json_ready("eps", lookup.eps("gaussian", sigma=2.0, n=10**5, delta=1e-6, rounds=10), 10)
    assert status == 200 and {k: v for k, v in body.items() if k != "asked"} == expected, body
    assert body["asked"] == {"mechanism": "gaussian", "sigma": 2.0, "n": 1e5, "delta": 1e-6, "rounds": 10}
    assert (body["source"], body["rounds"], body["eps_lower"]) == ("live", 10, None)


def test_openapi_describes_gaussian_rounds_but_not_sample_rate(base: str) -> None:
    status, schema = get(f"{base}/openapi.json")
    branches = schema["paths"]["/v1/eps"]["get"]["parameters"][0]["schema"]["oneOf"]
    own = next(b for b in branches if b["title"] == "gaussian")["properties"]
    assert status == 200 and own["rounds"]["minimum"] == 1 and "sample_rate" not in own and "eps0" not in own
    delta = schema["paths"]["/v1/delta"]["get"]["parameters"][0]["schema"]["oneOf"]
    assert "rounds" not in next(b for b in delta if b["title"] == "gaussian")["properties"]


@pytest.mark.parametrize(("query", "message"), [
    ("/v1/eps?mechanism=gaussian&sigma=0.1&n=1000&delta=1e-6", "sigma must be in [0.2, 50]"),
    ("/v1/eps?mechanism=gaussian&sigma=nan&n=1000&delta=1e-6", "sigma must be finite"),
    ("/v1/eps?mechanism=gaussian&sigma=abc&n=1000&delta=1e-6", "sigma must be a number"),
    ("/v1/eps?mechanism=gaussian&sigma=1e-%E0%A7%AA&n=1000&delta=1e-6", "ASCII digits"),
    ("/v1/eps?mechanism=gaussian&n=1000&delta=1e-6", "missing parameter 'sigma'"),
    ("/v1/delta?mechanism=gaussian&sigma=1&n=1000&eps=1&inputs=reals", "inputs must be one of unit, bits"),
    ("/v1/eps?mechanism=gaussian&sigma=1&eps0=1&n=1000&delta=1e-6", "takes no eps0"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&rounds=3&sample_rate=0.5",
     "sample_rate is not supported for mechanism 'gaussian'"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&sample_rate=0.5", "sample_rate is not supported"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&rounds=0", "rounds must be an integer in [1, 1000000]"),
    ("/v1/eps?mechanism=gaussian&sigma=60&n=1000&delta=1e-6&rounds=3", "sigma must be in [0.2, 50]"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&rounds=3&live=false", "answered live only"),
    ("/v1/delta?mechanism=gaussian&sigma=1&n=1000&eps=1&rounds=3", "unknown parameter 'rounds'"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&k=3", "takes no k"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=2.5&delta=1e-6", "n must be an integer"),
    ("/v1/eps?mechanism=gaussian&sigma=1&n=1000&delta=1e-6&live=false", "answered live only"),
    ("/v1/eps0-max?mechanism=gaussian&sigma=1&n=1000&eps=0.5&delta=1e-6", "eps0_max is not answered"),
    ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=1e-6&sigma=1", "unknown parameter 'sigma'"),
])
def test_service_refusals_are_400s_naming_the_parameter(base: str, query: str, message: str) -> None:
    status, body = get(base + query)
    assert status == 400 and message in body["error"], body
