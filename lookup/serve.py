"""``lookup serve``: a read-only JSON endpoint over the lookup (standard library, threads).

    GET /v1/eps?mechanism=krr&k=10&eps0=2&n=1e6&delta=1e-8[&max_slack=0.05|none][&live=false]
    GET /v1/delta?mechanism=generic&eps0=1&n=1e5&eps=0.2
    GET /v1/eps0-max?mechanism=krr&k=10&eps=0.5&n=1e5&delta=1e-8
    GET /v1/info

Answers as the CLI's ``--json``; ``max_slack`` (every query endpoint) as ``--max-slack``.
Every bad request is a 400 with ``{"error": "..."}`` naming the parameter (404 unknown path,
405 other methods, 413 a body, 414 an oversized URL); table answers within ``max_slack`` never
wait; live computations and refinements (``refine.py``) run in a bounded pool (``max_live`` at
once, each waited for at most ``live_timeout`` seconds) and are answered 503 when the pool is
busy or the time is up.  At most ``max_connections`` connections are handled at once (one thread each; a
request must arrive within 10 s in all); further connections get a 503 and are closed.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import lookup
from lookup import live as live_engine
from lookup.api import finite, json_ready, loose, parse_max_slack
from lookup.params import HELP, query_arguments
from lookup.table import Table, TableError, open_table

MAX_URL = 2048
REQUEST_SECONDS = 10  # to receive a request line and headers, in all
ENDPOINTS = {
    "/v1/eps": ("eps", {"eps0", "n", "delta"}),
    "/v1/delta": ("delta", {"eps0", "n", "eps"}),
    "/v1/eps0-max": ("eps0_max", {"eps", "n", "delta"}),
}


class Busy(Exception):
    """Live computation refused: pool full or time limit reached."""


class Service:
    """The table and the bounded live pool behind the endpoint."""

    def __init__(self, table: Table, max_live: int = 2, live_timeout: float = 30.0) -> None:
        self.table = table
        self.live_timeout = live_timeout
        self.max_live = max_live
        self.slots = threading.BoundedSemaphore(max_live)
        self.pool = ThreadPoolExecutor(max_workers=max_live, thread_name_prefix="live")

    def answer(self, path: str, query: dict[str, str]) -> dict[str, Any]:
        if path == "/v1/info":
            if query:
                raise ValueError(f"/v1/info takes no parameters, got {sorted(query)[0]!r}")
            return self.table.coverage()
        kind, required = ENDPOINTS[path]
        allowed = required | set(HELP) | {"mechanism", "live", "max_slack"}
        unknown = sorted(set(query) - allowed)
        if unknown:
            raise ValueError(f"unknown parameter {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        missing = sorted((required | {"mechanism"}) - set(query))
        if missing:
            raise ValueError(f"missing parameter {missing[0]!r}")
        live = _boolean(query.get("live", "true"))
        kwargs = query_arguments({name: query.get(name) for name in required}, query)
        kwargs["max_slack"] = parse_max_slack(query.get("max_slack"), kind)
        call = getattr(lookup, kind)
        try:  # the table alone: instant, no pool
            result = call(query["mechanism"], table=self.table, live=False, **kwargs)
        except TableError:
            if not live:
                raise
            result = None
        if result is None or (live and loose(result.source, result.slack, kwargs["max_slack"]).any()
                              and live_engine.available()):
            result = self._live(call, query["mechanism"], kwargs)
        return json_ready(kind, result)

    def _live(self, call: Any, mechanism: str, kwargs: dict[str, float]) -> Any:
        if not self.slots.acquire(blocking=False):
            raise Busy(f"all {self.max_live} live computation slots are busy; retry later")
        future = self.pool.submit(call, mechanism, table=self.table, live=True, **kwargs)
        future.add_done_callback(lambda _: self.slots.release())
        try:
            return future.result(timeout=self.live_timeout)
        except FutureTimeout:
            raise Busy(f"live computation exceeded {self.live_timeout:g} s; retry later "
                       "(it finishes in the background and is cached)") from None


class BoundedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with at most ``max_connections`` handler threads alive at once."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, max_connections: int) -> None:
        super().__init__(address, handler)
        self.max_connections = max_connections
        self.connection_slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        # a short wait: a client's next connection can arrive before its last one's thread ends
        if not self.connection_slots.acquire(timeout=0.2):
            _answer_busy(request, self.max_connections)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connection_slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connection_slots.release()


def _cut(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _answer_busy(request: Any, max_connections: int) -> None:
    """A 503 written straight to a connection over the limit (no thread, the request unread)."""
    body = json.dumps({"error": f"all {max_connections} connections are busy; retry later"}).encode()
    head = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    try:
        request.settimeout(1.0)
        request.sendall(head + body)
    except OSError:
        pass


def make_server(host: str, port: int, table: str | None = None, max_live: int = 2,
                live_timeout: float = 30.0, max_connections: int = 64) -> ThreadingHTTPServer:
    """A threaded HTTP server answering from ``table`` (opened and verified now)."""
    service = Service(open_table(table), max_live, live_timeout)

    class Handler(BaseHTTPRequestHandler):
        server_version = f"shuffle-eps-lookup/{lookup.__version__}"

        timeout = REQUEST_SECONDS  # each read of a slow connection

        def setup(self) -> None:
            super().setup()
            # the whole request (line and headers) must arrive within REQUEST_SECONDS, however
            # slowly it trickles in; then the connection is cut and its slot freed
            self.deadline = threading.Timer(REQUEST_SECONDS, _cut, (self.connection,))
            self.deadline.daemon = True
            self.deadline.start()

        def parse_request(self) -> bool:
            parsed = super().parse_request()  # reads the headers
            self.deadline.cancel()
            return parsed

        def finish(self) -> None:
            self.deadline.cancel()
            try:
                super().finish()
            except OSError:
                pass  # the client went away

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if len(self.path) > MAX_URL:
                return self._send(414, {"error": f"request URL longer than {MAX_URL} characters"})
            if (self.headers.get("Content-Length") or "0").strip() != "0":
                return self._send(413, {"error": "GET requests take no body"})
            parts = urlsplit(self.path)
            if parts.path not in {*ENDPOINTS, "/v1/info"}:
                return self._send(404, {"error": f"unknown path {parts.path!r}; use /v1/eps, /v1/delta, "
                                                 "/v1/eps0-max or /v1/info"})
            try:
                query = _single_values(parts.query)
                self._send(200, service.answer(parts.path, query))
            except Busy as err:
                self._send(503, {"error": str(err)})
            except (ValueError, TableError) as err:
                self._send(400, {"error": str(err)})
            except Exception as err:  # noqa: BLE001 - no request may take the server down or 500
                print(f"lookup serve: unexpected {type(err).__name__}: {err}", file=sys.stderr)
                self._send(400, {"error": f"cannot answer this request: {err}"})

        def _refuse(self) -> None:
            self._send(405, {"error": "read-only endpoint: GET only"})

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(finite(body)).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True  # the client went away before its answer

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            pass

    return BoundedServer((host, port), Handler, max_connections)


def _single_values(text: str) -> dict[str, str]:
    try:
        parsed = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=32)
    except ValueError as err:
        raise ValueError(f"malformed query string: {err}") from None
    repeated = [k for k, v in parsed.items() if len(v) > 1]
    if repeated:
        raise ValueError(f"parameter {repeated[0]!r} given more than once")
    return {k: v[0] for k, v in parsed.items()}


def _boolean(text: str) -> bool:
    if text.lower() in {"true", "1", "yes"}:
        return True
    if text.lower() in {"false", "0", "no"}:
        return False
    raise ValueError(f"live must be true or false, got live={text!r}")
