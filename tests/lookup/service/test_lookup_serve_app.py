"""The ASGI application in this process (``lookup.service.app.create_app``, no server, no worker started):
a lower bound is published only where it bounds the mechanism asked (an answer borrowed from the
generic row carries none), and a fault of the server is a JSON 500, logged with its request and
traceback and counted in /metrics, while bad input stays a 400."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")

from lookup.service import app as app_module  # noqa: E402 - after the skip: the serve extra may be missing
from lookup.service import handlers  # noqa: E402 - the handlers parse every query (query_arguments)

T = "mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-6"  # inside the small table's grid


def asgi_get(app: Any, url: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of GET ``url`` (path and query) answered by ``app`` in this process."""
    path, _, query = url.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", b"test")], "server": ("test", 80), "client": ("127.0.0.1", 1)}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    headers = {k.decode().lower(): v.decode() for k, v in sent[0]["headers"]}
    return sent[0]["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


def metric(app: Any, name: str) -> float:
    """The value of the unlabelled metric ``name`` in the app's /metrics."""
    text = asgi_get(app, "/metrics")[2].decode()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(f"{name} ")))


# ---------------------------------------------------------------- lower bounds of the mechanism asked

def off_grid_olh(count: int, seed: int) -> list[tuple[float, int, float]]:
    """(eps0, n, delta) inside the shipped table's ranges, eps0 with 4 random decimals: between its
    grid values (where OLH, whose g = round(e^eps0) + 1 changes with eps0, has no answer of its own;
    the "via" of the service's answers checks it)."""
    rng = np.random.default_rng(seed)
    return [(float(np.round(rng.uniform(0.5, 6.0), 4)), int(10 ** rng.uniform(3, 6)), float(10 ** rng.uniform(-10, -4)))
            for _ in range(count)]


@pytest.fixture(scope="module")
def shipped_app() -> Any:
    return app_module.create_app(app_module.Settings())  # the shipped table


@pytest.mark.parametrize(("eps0", "n", "delta"), off_grid_olh(6, 7) + [(3.977, 7209, 5.68e-6)])
def test_an_answer_via_the_generic_row_has_no_lower_bound_of_the_generic_row(shipped_app: Any, eps0: float, n: int,
                                                                             delta: float) -> None:
    """OLH between grid eps0, no worker free: the generic row's certified answer at once ("via":
    "generic"), certified for OLH too (above the engine's lower bound for OLH).  Its lower bound
    bounds the generic clone's exact value, far above OLH's (eps0 3.977, n 7209: 0.323 against OLH's
    certified 0.293): any lower bound published must be below OLH's certified value, computed live
    here (eps at delta, then delta at 1.5 times that eps)."""
    from tablegen.engine import delta_bounds, eps_bounds

    olh = eps_bounds("olh", eps0=eps0, n=n, delta=delta)
    status, _, body = asgi_get(shipped_app, f"/v1/eps?mechanism=olh&eps0={eps0}&n={n}&delta={delta}")
    answer = json.loads(body)
    assert status == 200 and answer["via"] == "generic" and answer["eps"] >= olh.lower
    assert answer["eps_lower"] is None or answer["eps_lower"] <= olh.upper
    eps = 1.5 * olh.upper
    olh_delta = delta_bounds("olh", eps0=eps0, n=n, eps=eps, lower=False).upper
    status, _, body = asgi_get(shipped_app, f"/v1/delta?mechanism=olh&eps0={eps0}&n={n}&eps={eps}")
    answer = json.loads(body)
    assert status == 200 and answer["via"] == "generic"
    assert answer["delta_lower"] is None or answer["delta_lower"] <= olh_delta


def test_a_mechanism_named_in_capitals_is_answered_as_in_lower_case(shipped_app: Any) -> None:
    """``mechanism=OLH`` between grid eps0: the generic row's answer at once, as for ``olh`` (the
    name is read in any case, issue 44), not a live computation."""
    query = "/v1/eps?mechanism={}&eps0=3.977&n=7209&delta=5.68e-06&max_slack=none"
    upper, lower = (json.loads(asgi_get(shipped_app, query.format(name))[2]) for name in ("OLH", "olh"))
    assert upper == lower and upper["via"] == "generic"


@pytest.mark.parametrize(("eps0", "n", "delta"), off_grid_olh(3, 11))
def test_the_library_and_cli_publish_lower_bounds_of_olh_between_grid_eps0(eps0: float, n: int, delta: float) -> None:
    """The Python API (and the CLI, which prints it) answers OLH between grid eps0 from the engine
    for OLH itself: its lower bounds are OLH's (below OLH's certified eps and delta, computed live)."""
    from click.testing import CliRunner

    import lookup
    from lookup.answer.api import MAX_SLACK
    from lookup.cli.commands import main
    from tablegen.engine import delta_bounds, eps_bounds

    olh = eps_bounds("olh", eps0=eps0, n=n, delta=delta, lower=False).upper
    for max_slack in (MAX_SLACK, None):
        a = lookup.eps("olh", eps0=eps0, n=n, delta=delta, max_slack=max_slack)
        assert a.value >= olh * (1 - 1e-9) and (math.isnan(a.lower) or a.lower <= olh)
    result = CliRunner().invoke(main, ["eps", "--mechanism", "olh", "--eps0", str(eps0), "--n", str(n), "--delta",
                                       str(delta), "--json"])
    lower = json.loads(result.stdout)["eps_lower"]
    assert result.exit_code == 0 and (lower is None or lower <= olh)
    olh_delta = delta_bounds("olh", eps0=eps0, n=n, eps=1.5 * olh, lower=False).upper
    d = lookup.delta("olh", eps0=eps0, n=n, eps=1.5 * olh)
    assert d.value >= olh_delta * (1 - 1e-9) and (math.isnan(d.lower) or d.lower <= olh_delta)


# ---------------------------------------------------------------- 500: a fault of the server

@pytest.fixture
def small_app(table_path: Path) -> Any:
    return app_module.create_app(app_module.Settings(table=str(table_path)))


def test_an_unexpected_exception_is_a_logged_and_counted_json_500(small_app: Any, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(handlers, "query_arguments", broken)  # the handler parses every query with it
    with caplog.at_level(logging.ERROR, logger="lookup.service.app"):
        status, headers, body = asgi_get(small_app, f"/v1/eps?{T}")
    answer = json.loads(body)
    assert status == 500 and headers["content-type"] == "application/json"
    assert list(answer) == ["error"] and "RuntimeError" in answer["error"]
    [record] = [r for r in caplog.records if r.name == "lookup.service.app"]
    assert record.levelno == logging.ERROR and isinstance(record.exc_info[1], RuntimeError)
    assert f"GET /v1/eps?{T}" in record.getMessage()
    assert metric(small_app, "lookup_server_errors_total") == 1
    assert 'lookup_requests_total{endpoint="/v1/eps",status="500",source="error"} 1' in \
        asgi_get(small_app, "/metrics")[2].decode()
    assert "500" in app_module.openapi()["paths"]["/v1/eps"]["get"]["responses"]


@pytest.mark.parametrize(("query", "message"), [
    ("/v1/eps?mechanism=krr&k=3&eps0=abc&n=50&delta=1e-6", "eps0 must be a number"),
    ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=2", "delta must be in (0, 1)"),
    ("/v1/eps?mechanism=nope&eps0=1&n=50&delta=1e-6", "unknown mechanism='nope'"),
    ("/v1/eps?mechanism=krr&k=3&eps0=9&n=50&delta=1e-6&live=false", "covers: mechanisms"),
    ("/v1/delta?mechanism=finite&matrix=[[1]]&eps0=1&n=50&eps=0.5", "matrix must be"),
])
def test_bad_input_stays_a_400(small_app: Any, caplog: pytest.LogCaptureFixture, query: str, message: str) -> None:
    with caplog.at_level(logging.ERROR, logger="lookup.service.app"):
        status, _, body = asgi_get(small_app, query)
    assert status == 400 and message in json.loads(body)["error"]
    assert metric(small_app, "lookup_server_errors_total") == 0
    assert not [r for r in caplog.records if r.name == "lookup.service.app"]  # nothing logged as a fault


# ---------------------------------------------------------------- issue 55: what a query says, as parsed

BENGALI_FOUR, BENGALI_THREE = "%E0%A7%AA", "%E0%A7%A9"  # '৪' (reads as an 8) and '৩', UTF-8 percent-encoded


@pytest.mark.parametrize(("query", "name"), [
    (f"mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-{BENGALI_FOUR}", "delta"),
    (f"mechanism=krr&k=3&eps0={BENGALI_FOUR}&n=50&delta=1e-6", "eps0"),
    (f"mechanism=krr&k={BENGALI_THREE}&eps0=1.5&n=50&delta=1e-6", "k"),
    (f"mechanism=krr&k=3&eps0=1.5&n=5{BENGALI_FOUR}&delta=1e-6", "n"),
])
def test_look_alike_digits_are_a_400_naming_the_parameter(small_app: Any, query: str, name: str) -> None:
    """Issue 55: float() reads any Unicode decimal digit: ``delta=1e-৪`` was answered at 1e-4 while
    the page showed "1e-৪" (which reads as 1e-8).  Numbers are ASCII only."""
    status, _, body = asgi_get(small_app, f"/v1/eps?{query}")
    error = json.loads(body)["error"]
    assert status == 400 and error.startswith(f"{name} must be a number written in ASCII digits"), error


def test_a_tiny_sample_rate_is_a_400_naming_its_range(small_app: Any) -> None:
    """Issue 55: ``rounds=3&sample_rate=1e-300`` was an HTTP 500 (OverflowError in the engine)."""
    status, _, body = asgi_get(small_app, f"/v1/eps?{T}&rounds=3&sample_rate=1e-300")
    error = json.loads(body)["error"]
    assert status == 400 and "sample_rate must lie in [1e-12, 1]" in error and "\n" not in error
    assert metric(small_app, "lookup_server_errors_total") == 0


def test_answers_carry_the_question_as_parsed(small_app: Any) -> None:
    """The page shows the numbers the server parsed (the answer's "asked"), not the text typed."""
    status, _, body = asgi_get(small_app, "/v1/eps?mechanism=krr&k=3&eps0=1.50&n=5e1&delta=0.000001&live=false")
    assert status == 200
    assert json.loads(body)["asked"] == {"mechanism": "krr", "k": 3.0, "eps0": 1.5, "n": 50.0, "delta": 1e-6,
                                         "live": False}


def test_the_tables_path_is_never_told_only_its_name_and_digest(small_app: Any, table_path: Path) -> None:
    """Issue 55: /v1/info and the 400 of ``live=false`` named where the table lives on the server."""
    for url in ("/v1/info", "/v1/eps?mechanism=krr&k=3&eps0=9&n=50&delta=1e-6&live=false"):
        status, _, body = asgi_get(small_app, url)
        text = body.decode()
        assert status in (200, 400) and str(table_path) not in text and str(table_path.parent) not in text, text
    info = json.loads(asgi_get(small_app, "/v1/info")[2])
    assert info["table"] == table_path.name and len(info["digest"]) == 64
    error = json.loads(asgi_get(small_app, "/v1/eps?mechanism=krr&k=3&eps0=9&n=50&delta=1e-6&live=false")[2])["error"]
    assert f"{table_path.name} (digest {info['digest'][:16]})" in error
