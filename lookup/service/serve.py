"""``lookup serve``: the ASGI application of ``lookup/service/app.py`` under uvicorn (the ``serve`` extra).

uvicorn owns the sockets, keep-alive, the HTTP parser's limits and graceful shutdown; this module
configures it and adds, in ``GuardedH11`` (its h11 protocol, subclassed), what uvicorn lacks: a
deadline on the request headers (``header_timeout``), a cap on open connections answered by a
JSON 503 with ``Retry-After`` (``max_connections``), and a JSON 400 for a malformed request.  The
limits are fields of ``lookup.service.settings.Settings``; why each and its default: docs/lookup.md
("Slow and idle clients", the server settings, "Behind a load balancer").
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import socket
import sys
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from lookup.service.settings import ENV_SETTINGS, Settings, settings_env, settings_from_env


@functools.cache
def _limits() -> Settings:
    return settings_from_env()


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline on request headers, a cap on connections and JSON
    refusals (see the module docstring)."""

    header_timer: Any = None

    def connection_made(self, transport: Any) -> None:  # noqa: D102 - asyncio.Protocol
        super().connection_made(transport)
        if len(self.connections) > _limits().max_connections:
            self.refuse(503, "too many connections open; retry later", close_only=False)
            return
        self.arm()

    def data_received(self, data: bytes) -> None:  # noqa: D102
        if self.conn.their_state is h11.IDLE:  # a request's line and headers are being read
            self.arm()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self.disarm()

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self.disarm()
        super().connection_lost(exc)

    def arm(self) -> None:
        if self.header_timer is None:
            self.header_timer = self.loop.call_later(_limits().header_timeout, self.headers_late)

    def disarm(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def headers_late(self) -> None:
        self.header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:  # noqa: D102 - uvicorn's, as JSON
        self.refuse(400, f"malformed HTTP request: {msg}", close_only=False)

    def refuse(self, status: int, message: str, close_only: bool) -> None:
        """A JSON refusal written straight to the socket, then the connection closed."""
        if not close_only:
            body = json.dumps({"error": message}).encode()
            retry = f"retry-after: {_limits().retry_after}\r\n" if status == 503 else ""
            reason = {400: "Bad Request", 503: "Service Unavailable"}[status]
            self.transport.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{retry}"
                                 f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        self.transport.close()


class PortInUse(ValueError):
    """The address to listen on is taken (the command line exits with status 2)."""


def run(settings: Settings) -> None:
    """Serve until SIGINT/SIGTERM (blocking).  The address is bound first (``PortInUse`` where it
    is taken), then the table is opened (and verified) by each server process before it accepts a
    connection; errors raise here (workers = 1)."""
    import uvicorn

    settings.check()
    os.environ[ENV_SETTINGS] = settings_env(settings)  # read by app_from_env and GuardedH11 in every server process
    host, port = settings.host, settings.port
    _raise_open_files()
    options = dict(host=host, port=port, factory=True, timeout_keep_alive=settings.timeout_keep_alive,
                   backlog=settings.backlog, h11_max_incomplete_event_size=settings.h11_max_incomplete_event_size,
                   timeout_graceful_shutdown=settings.timeout_graceful_shutdown, access_log=settings.access_log,
                   http="lookup.service.serve:GuardedH11", log_level="info", server_header=False)
    if settings.workers > 1:
        if port == 0:
            raise ValueError("--workers above 1 needs a fixed --port (not 0)")
        _bound(host, port).close()  # taken: one line now, not uvicorn's log and status 1
        uvicorn.run("lookup.service.serve:server_app", workers=settings.workers, **options)
        return
    sock = _bound(host, port)
    try:
        app = server_app()  # opens the table now: a bad table fails before the socket listens
    except BaseException:
        sock.close()
        raise
    config = uvicorn.Config(lambda: app, **options)
    sock.listen(settings.backlog)
    sock.set_inheritable(True)
    print(f"serving {host}:{sock.getsockname()[1]} (Ctrl-C or SIGTERM to stop)", file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[sock])


def _bound(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening; ``PortInUse`` naming both where the
    address is taken."""
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP (a
    # socket of proto 0 answered every keep-alive request 40 ms late: Nagle and delayed ACKs)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise PortInUse(f"{host}:{port} is already in use (another server?); choose another --port") from None
        raise
    return sock


def server_app() -> Any:
    """The application of one server process (uvicorn's factory): ``lookup.service.app.app_from_env``,
    its lifespan ending with ``_exit_finalizers``."""
    from lookup.service.app import app_from_env

    app = app_from_env()
    app.router.lifespan_context = _exit_finalizers(app.router.lifespan_context)
    return app


def _exit_finalizers(lifespan: Any) -> Any:
    """``lifespan``, then the finalizers multiprocessing runs at a normal exit.

    uvicorn ends a server it stopped on SIGTERM by raising SIGTERM again (its supervisor sees the
    signal), which kills the process before any exit handler runs.  So the named semaphores a
    server process made, which multiprocessing unlinks at exit, were left to the resource tracker,
    which warned of "leaked semaphore objects" at shutdown: numcodecs' blosc lock, made at the
    first chunk decoded (a module-level ``multiprocessing.Lock``, registered with the tracker in
    each server process ``--workers`` spawns), and any other lock still alive then (a live
    pool's, were its workers slow to stop).  They are unlinked here, once the pools have stopped
    (the lifespan's own end)."""
    from multiprocessing import util

    @contextlib.asynccontextmanager
    async def wrapped(app: Any) -> Any:
        async with lifespan(app) as state:
            yield state
        util._run_finalizers(0)  # what util._exit_function runs first at a normal exit

    return wrapped


def _raise_open_files() -> None:
    """The soft limit on open files raised to the hard one (each connection holds one)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
