"""HTTP endpoint: answers, 400s naming the parameter, no 500s, bounded live computations."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lookup
from lookup.serve import make_server
from tablegen.engine import eps_bounds


def serving(table_path: Path, live_timeout: float) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, str(table_path), max_live=1, live_timeout=live_timeout)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture()
def base(table_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A server whose live computations time out at once (every live query not cached is a 503):
    each engine call is made to take 50 ms, so a fast evaluation cannot beat the 1 ms timeout."""
    import time

    import lookup.live

    def slow(call: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.05)
            return call(*args, **kwargs)
        return wrapped

    lookup.live._MEMORY.clear()  # other tests' answers
    for name in ("eps", "eps_upper", "certifies", "delta", "delta_upper", "eps0_max", "composed_eps"):
        monkeypatch.setattr(lookup.live, name, slow(getattr(lookup.live, name)))
    yield from serving(table_path, live_timeout=0.001)


@pytest.fixture()
def patient(table_path: Path) -> Iterator[str]:
    yield from serving(table_path, live_timeout=120)


def get(url: str, method: str = "GET", data: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_answers_match_the_library(base: str, table_path: Path) -> None:
    status, body = get(f"{base}/v1/eps?mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-6&max_slack=none")
    assert status == 200 and body["source"] == "table" and body["certified"] is True
    assert body["eps"] == lookup.eps("krr", eps0=1.5, n=50, delta=1e-6, k=3, table=table_path, max_slack=None).value
    status, body = get(f"{base}/v1/delta?mechanism=generic&eps0=1&n=80&eps=0.9&max_slack=none")
    assert status == 200 and "delta" in body
    status, body = get(f"{base}/v1/eps0-max?mechanism=krr&k=3&eps=0.9&n=80&delta=1e-6&max_slack=none")
    assert status == 200 and body["eps0"] >= 0.9
    # the default max slack refines the first answer with the engine: a live computation (503 here)
    assert get(f"{base}/v1/eps?mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-6")[0] == 503
    status, body = get(f"{base}/v1/info")
    assert status == 200 and body["mechanisms"] == ["krr k=3", "generic"]


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        ("/v1/eps?mechanism=krr&k=3&eps0=-1&n=50&delta=1e-6", 400, "eps0 must be > 0"),
        ("/v1/eps?mechanism=krr&k=3&eps0=abc&n=50&delta=1e-6", 400, "eps0 must be a number"),
        ("/v1/eps?mechanism=krr&k=3&eps0=nan&n=50&delta=1e-6", 400, "eps0 must be finite"),
        ("/v1/eps?mechanism=krr&k=3&n=50&delta=1e-6", 400, "missing parameter 'eps0'"),
        ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=1e-6&colour=red", 400, "unknown parameter 'colour'"),
        ("/v1/eps?mechanism=krr&k=3&eps0=1&eps0=2&n=50&delta=1e-6", 400, "more than once"),
        ("/v1/eps?mechanism=krr&k=3&eps0=1&n=50&delta=1e-6&live=maybe", 400, "live must be true or false"),
        ("/v1/eps?mechanism=krr&k=3&eps0=9&n=50&delta=1e-6&live=false", 400, "covers: mechanisms"),
        ("/v1/eps?mechanism=krr&k=3&eps0=9&n=50&delta=1e-6", 503, "exceeded"),
        ("/v2/eps", 404, "unknown path"),
        ("/v1/info?x=1", 400, "takes no parameters"),
        ("/v1/eps?" + "a" * 3000, 414, "longer than"),
        ("/v1/eps?%%%", 400, "malformed"),
        ("/v1/eps?mechanism=finite&matrix=[[1,0&eps0=1&n=50&delta=1e-6", 400, "matrix must be a JSON list"),
        ("/v1/eps?mechanism=joint&base=krr&k=3&parts=two&eps0=1&n=50&delta=1e-6", 400, "parts must be a number"),
    ],
)
def test_bad_requests(base: str, query: str, status: int, message: str) -> None:
    got, body = get(base + query)
    assert got == status and message in body["error"]
    assert get(f"{base}/v1/info")[0] == 200  # still serving


def test_read_only(base: str) -> None:
    assert get(f"{base}/v1/info", method="POST", data=b"x")[0] == 405
    assert get(f"{base}/v1/info", method="DELETE")[0] == 405


def test_refined_answers_match_the_library(patient: str, table_path: Path) -> None:
    status, body = get(f"{patient}/v1/eps?mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-6&max_slack=0.02")
    expected = lookup.eps("krr", eps0=1.5, n=50, delta=1e-6, k=3, table=table_path, max_slack=0.02)
    assert status == 200 and (body["eps"], body["source"], body["slack"]) == (expected.value, expected.source,
                                                                              expected.slack)
    assert body["source"] != "table"
    status, body = get(f"{patient}/v1/eps?mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-6&max_slack=x")
    assert status == 400 and "max_slack must be a number" in body["error"]


def test_live_answers_and_engine_errors(patient: str) -> None:
    status, body = get(f"{patient}/v1/eps?mechanism=krr&k=3&eps0=6&n=50&delta=1e-6")
    assert status == 200 and body["source"] == "live"
    status, body = get(f"{patient}/v1/eps?mechanism=nope&eps0=1&n=50&delta=1e-6")
    assert status == 400 and "unknown mechanism='nope'" in body["error"]
    status, body = get(f"{patient}/v1/eps?mechanism=joint&base=krr&k=3&parts=2&eps0=1.5&n=50&delta=1e-6")
    assert status == 200 and body["source"] == "live"
    assert body["eps"] == eps_bounds("joint", eps0=1.5, n=50, delta=1e-6, base="krr", k=3, parts=2).upper


def test_connections_over_the_limit_get_a_503(table_path: Path) -> None:
    """One slot: an idle connection holds it, the next request is refused, then served once it closes."""
    import socket
    import time

    server = make_server("127.0.0.1", 0, str(table_path), max_connections=1)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}/v1/info"
    try:
        idle = socket.create_connection(("127.0.0.1", port))
        time.sleep(0.2)  # the server accepts it and its handler thread waits for a request line
        status, body = get(url)
        assert status == 503 and "connections are busy" in body["error"]
        idle.close()
        for _ in range(50):  # the handler sees EOF and gives its slot back
            status, body = get(url)
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200 and "mechanisms" in body
    finally:
        server.shutdown()
        server.server_close()


def test_a_trickling_request_is_cut(table_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: one header line every few seconds kept a slot forever (the timeout was per
    read).  The request must now arrive within REQUEST_SECONDS in all."""
    import socket
    import time

    import lookup.serve

    monkeypatch.setattr(lookup.serve, "REQUEST_SECONDS", 0.5)
    server = make_server("127.0.0.1", 0, str(table_path), max_connections=1)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET /v1/info HTTP/1.0\r\n")
        cut = False
        for _ in range(10):  # 2 s of one header every 0.2 s
            time.sleep(0.2)
            try:
                slow.sendall(b"X-Slow: 1\r\n")
            except OSError:
                cut = True
                break
        assert get(f"http://127.0.0.1:{port}/v1/info")[0] == 200  # the slot came back
        assert cut or slow.recv(1) == b""  # the server closed the trickling connection
        slow.close()
    finally:
        server.shutdown()
        server.server_close()


def test_back_to_back_requests_are_not_refused(table_path: Path) -> None:
    """Found in review: a client's next connection could arrive before its previous one's slot
    was released and get a 503 even with one client only."""
    server = make_server("127.0.0.1", 0, str(table_path), max_connections=1)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        statuses = [get(f"http://127.0.0.1:{server.server_address[1]}/v1/info")[0] for _ in range(100)]
        assert statuses == [200] * 100
    finally:
        server.shutdown()
        server.server_close()
