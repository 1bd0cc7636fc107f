"""HTTP endpoint: the real server (``lookup serve`` under uvicorn, in a subprocess, on a free
loopback port) talked to over HTTP: answers equal to ``lookup ... --json``, 400s naming the
parameter whatever the load, 503 with Retry-After when the live queue is full or a task
overruns, ETag/304, /metrics, and SIGTERM letting a request in flight finish."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from click.testing import CliRunner

from lookup.cli.commands import main

T = "mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-6"  # inside the small table's grid


def get(url: str, method: str = "GET", data: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
    request = urllib.request.Request(url, method=method, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers


def without_asked(body: bytes) -> bytes:
    """An HTTP answer less its "asked" (the question as the server parsed it, which the page
    shows): the CLI's JSON, byte for byte."""
    answer = json.loads(body)
    answer.pop("asked")
    return json.dumps(answer).encode()


def cli_json(*args: str) -> bytes:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return result.stdout.strip().encode()


@pytest.fixture(scope="module")
def base(start_server: Any) -> str:
    return start_server("--live-workers", "1").base


@pytest.mark.parametrize(("path", "args"), [
    (f"/v1/eps?{T}&max_slack=none", ["eps", "--mechanism", "krr", "--k", "3", "--eps0", "1.5", "--n", "50",
                                     "--delta", "1e-6", "--max-slack", "none"]),
    ("/v1/eps?mechanism=krr&k=3&eps0=6&n=50&delta=1e-6",
     ["eps", "--mechanism", "krr", "--k", "3", "--eps0", "6", "--n", "50", "--delta", "1e-6"]),
    ("/v1/delta?mechanism=generic&eps0=1&n=80&eps=0.9&max_slack=none",
     ["delta", "--mechanism", "generic", "--eps0", "1", "--n", "80", "--eps", "0.9", "--max-slack", "none"]),
    ("/v1/eps0-max?mechanism=krr&k=3&eps=0.9&n=80&delta=1e-6&max_slack=none",
     ["eps0-max", "--mechanism", "krr", "--k", "3", "--eps", "0.9", "--n", "80", "--delta", "1e-6", "--max-slack",
      "none"]),
    ("/v1/eps?mechanism=generic-closed-form&eps0=1&n=1e5&delta=1e-8",
     ["eps", "--mechanism", "generic-closed-form", "--eps0", "1", "--n", "1e5", "--delta", "1e-8"]),
    ("/v1/eps?mechanism=joint&base=krr&k=3&parts=2&eps0=1.5&n=50&delta=1e-6",
     ["eps", "--mechanism", "joint", "--base", "krr", "--k", "3", "--parts", "2", "--eps0", "1.5", "--n", "50",
      "--delta", "1e-6"]),
])
def test_answers_are_the_clis_json(base: str, table_path: Path, path: str, args: list[str]) -> None:
    status, body, _ = get(base + path)
    assert status == 200
    assert json.loads(body)["asked"]["mechanism"] == dict(parse_qsl(urlsplit(path).query))["mechanism"]
    assert without_asked(body) == cli_json(*args, "--table", str(table_path))


def test_info_health_and_sources(base: str) -> None:
    status, body, _ = get(f"{base}/v1/info")
    assert status == 200 and json.loads(body)["mechanisms"] == ["krr k=3", "generic"]
    status, body, _ = get(f"{base}/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
    assert json.loads(get(f"{base}/v1/eps?{T}&max_slack=none")[1])["source"] == "table"
    assert json.loads(get(f"{base}/v1/eps?mechanism=krr&k=3&eps0=6&n=50&delta=1e-6")[1])["source"] == "live"


@pytest.mark.parametrize(("query", "status", "message"), [
    ("/v1/eps?mechanism=krr&k=3&eps0=-1&n=50&delta=1e-6", 400, "eps0 must be >= 1e-06"),
    ("/v1/eps?mechanism=krr&k=3&eps0=abc&n=50&delta=1e-6", 400, "eps0 must be a number"),
    ("/v1/eps?mechanism=krr&k=3&eps0=nan&n=50&delta=1e-6", 400, "eps0 must be finite"),
    ("/v1/eps?mechanism=krr&k=3&eps0=1&n=2.5&delta=1e-6", 400, "n must be an integer"),
    ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=2", 400, "delta must be in (0, 1)"),
    ("/v1/eps?mechanism=krr&k=3&n=50&delta=1e-6", 400, "missing parameter 'eps0'"),
    ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=1e-6&colour=red", 400, "unknown parameter 'colour'"),
    ("/v1/eps?mechanism=krr&k=3&eps0=1&eps0=2&n=50&delta=1e-6", 400, "more than once"),
    ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=1e-6&live=maybe", 400, "live must be true or false"),
    ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=1e-6&live=", 400, "live must be true or false"),
    ("/v1/eps?mechanism=generic&eps0=5e-324&n=1&delta=5e-324", 400, "eps0 must be >= 1e-06"),
    ("/v1/delta?mechanism=generic-closed-form&eps0=1&n=1e5&eps=0.1", 400, "answers eps only"),
    ("/v1/eps?mechanism=krr&k=3&eps0=9&n=50&delta=1e-6&live=false", 400, "covers: mechanisms"),
    ("/v1/eps?mechanism=nope&eps0=1&n=50&delta=1e-6", 400, "unknown mechanism='nope'"),
    ("/v1/eps?mechanism=krr&k=-3&eps0=1&n=50&delta=1e-6", 400, "k must be an integer"),
    ("/v1/eps?mechanism=krr&k=3&eps0=50&n=1e6&delta=1e-8", 400, "eps0 must be in [1e-06, 40]"),
    ("/v1/eps?mechanism=laplace&eps0=25&n=1e6&delta=1e-8", 400, "eps0 <= 20"),  # the engine's, from a worker
    ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=1e-6&max_slack=x", 400, "max_slack must be a number"),
    ("/v1/eps?mechanism=finite&matrix=[[1,0&eps0=1&n=50&delta=1e-6", 400, "matrix must be a JSON list"),
    ("/v1/eps?mechanism=joint&base=krr&k=3&parts=two&eps0=1&n=50&delta=1e-6", 400, "parts must be a number"),
    ("/v1/eps?%%%", 400, "malformed"),
    ("/v1/info?x=1", 400, "takes no parameters"),
    ("/v2/eps", 404, "unknown path"),
    ("/v1/eps?" + "a" * 3000, 414, "longer than"),
])
def test_bad_requests(base: str, query: str, status: int, message: str) -> None:
    got, body, _ = get(base + query)
    assert got == status and message in json.loads(body)["error"]


def test_read_only(base: str) -> None:
    for method, data in (("POST", b"x"), ("DELETE", None), ("OPTIONS", None)):
        status, body, headers = get(f"{base}/v1/info", method=method, data=data)
        assert status == 405 and headers["Allow"] == "GET, HEAD" and "GET" in json.loads(body)["error"]


def test_etag_and_304(base: str) -> None:
    status, body, headers = get(f"{base}/v1/eps?{T}&max_slack=none")
    etag = headers["ETag"]
    assert status == 200 and etag and "max-age" in headers["Cache-Control"]
    status, body, headers = get(f"{base}/v1/eps?{T}&max_slack=none", headers={"If-None-Match": etag})
    assert status == 304 and body == b"" and headers["ETag"] == etag
    other = get(f"{base}/v1/eps?mechanism=krr&k=3&eps0=1.7&n=50&delta=1e-6&max_slack=none")[2]["ETag"]
    assert other != etag


def test_metrics_are_prometheus_text(base: str) -> None:
    get(f"{base}/v1/eps?{T}&max_slack=none")
    get(f"{base}/v1/eps?mechanism=nope&eps0=1&n=50&delta=1e-6")
    status, body, headers = get(f"{base}/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    samples = {}
    for line in body.decode().splitlines():
        if line.startswith("#"):
            assert line.split()[1] in {"HELP", "TYPE"}
            continue
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    assert samples['lookup_requests_total{endpoint="/v1/eps",status="200",source="table"}'] >= 1
    assert samples['lookup_requests_total{endpoint="/v1/eps",status="400",source="error"}'] >= 1
    assert samples['lookup_request_seconds_bucket{source="table",le="+Inf"}'] >= 1
    assert samples["lookup_live_queue"] == 0


def _in_thread(url: str) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(get(url)))
    thread.start()
    return thread, out


def test_full_queue_503_with_retry_after_and_table_answers_never_wait(start_server: Any) -> None:
    """One live place, engine calls made to take 1.5 s: a second live query is refused at once;
    bad requests are still 400s and table answers still instant; the live answer is then cached."""
    slow = start_server("--live-workers", "1", "--queue", "1", "--retry-after", "7", slow=1.5).base
    live = f"{slow}/v1/eps?mechanism=krr&k=3&eps0=6&n=50&delta=1e-6"
    thread, out = _in_thread(live)
    time.sleep(0.3)
    status, body, headers = get(f"{slow}/v1/eps?mechanism=krr&k=3&eps0=7&n=50&delta=1e-6")
    assert status == 503 and headers["Retry-After"] == "7" and "retry later" in json.loads(body)["error"]
    assert get(f"{slow}/v1/eps?mechanism=nope&eps0=1&n=50&delta=1e-6")[0] == 400
    assert get(f"{slow}/v1/eps?mechanism=krr&k=-3&eps0=9&n=50&delta=1e-6")[0] == 400
    start = time.perf_counter()
    assert get(f"{slow}/v1/eps?{T}&max_slack=none")[0] == 200
    assert time.perf_counter() - start < 0.5
    thread.join(30)
    assert out[0][0] == 200 and json.loads(out[0][1])["source"] == "live"
    start = time.perf_counter()
    assert get(live)[1] == out[0][1] and time.perf_counter() - start < 0.5  # the LRU cache
    assert b"lookup_live_cache_hits_total 1" in get(f"{slow}/metrics")[1]


def test_a_task_over_its_time_limit_is_a_503_and_its_worker_replaced(start_server: Any) -> None:
    server = start_server("--live-workers", "1", "--live-timeout", "0.5", slow=3)
    status, body, headers = get(f"{server.base}/v1/eps?mechanism=krr&k=3&eps0=6&n=50&delta=1e-6")
    assert status == 503 and "exceeded 0.5 s" in json.loads(body)["error"] and headers["Retry-After"]
    assert get(f"{server.base}/healthz")[0] == 200
    assert b"lookup_live_timeouts_total 1" in get(f"{server.base}/metrics")[1]
    assert get(f"{server.base}/v1/eps?{T}&max_slack=none")[0] == 200


def test_sigterm_lets_the_request_in_flight_finish(start_server: Any) -> None:
    server = start_server("--live-workers", "1", slow=1.5)
    thread, out = _in_thread(f"{server.base}/v1/eps?mechanism=krr&k=3&eps0=6&n=50&delta=1e-6")
    time.sleep(0.3)
    server.process.send_signal(signal.SIGTERM)
    thread.join(30)
    assert out[0][0] == 200 and json.loads(out[0][1])["source"] == "live"
    # uvicorn shuts down, then re-raises the signal for its supervisor (exit status -SIGTERM)
    assert server.process.wait(30) in (0, -signal.SIGTERM)
    log = server.log.read_text()
    assert "Traceback" not in log and "Shutting down" in log and "Finished server process" in log


def test_openapi_describes_every_endpoint_and_its_parameters(base: str) -> None:
    status, body, _ = get(f"{base}/openapi.json")
    schema = json.loads(body)
    assert status == 200 and schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == {"/v1/eps", "/v1/delta", "/v1/eps0-max", "/v1/info", "/healthz", "/readyz",
                                    "/livez", "/metrics", "/openapi.json"}
    for path, numbers in (("/v1/eps", {"eps0", "n", "delta"}), ("/v1/delta", {"eps0", "n", "eps"}),
                          ("/v1/eps0-max", {"eps", "n", "delta"})):
        operation = schema["paths"][path]["get"]
        query = operation["parameters"][0]
        assert query["in"] == "query" and query["style"] == "form" and query["explode"]
        krr = next(b for b in query["schema"]["oneOf"] if b["properties"]["mechanism"]["const"] == "krr")
        assert set(krr["required"]) == {"mechanism", "k", *numbers} and krr["properties"]["k"]["type"] == "integer"
        assert krr["properties"]["live"]["type"] == "boolean" and not krr["additionalProperties"]
        for status in ("200", "400", "405", "413", "414", "503"):
            assert "application/json" in operation["responses"][status]["content"]
        assert "Retry-After" in operation["responses"]["503"]["headers"]
