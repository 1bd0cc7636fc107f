"""``lookup serve``: the ASGI application of ``lookup/app.py`` under uvicorn (the ``serve`` extra).

uvicorn owns the sockets, keep-alive, the HTTP parser's limits and graceful shutdown (SIGTERM:
stop accepting, finish the requests in flight, then stop the live workers); this module only
configures it.  Its limits, each with its default (``ServerLimits``):

- ``limit_concurrency`` 256: connections and requests in progress at once, per server process;
  more are answered 503 by uvicorn itself;
- ``timeout_keep_alive`` 5 s: an idle keep-alive connection is closed after it;
- ``h11_max_incomplete_event_size`` 16384 bytes: the largest request line plus headers (h11);
  more is a 400 and the connection closed (the URL itself: 2048 characters, ``app.MAX_URL``);
- ``backlog`` 2048: connections waiting to be accepted;
- ``timeout_graceful_shutdown`` 30 s: how long SIGTERM waits for requests in flight;
- ``workers`` 1: server processes (each with its own table and live pool).
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass

from lookup.app import ENV_SETTINGS, Settings, settings_env


@dataclass(frozen=True)
class ServerLimits:
    """uvicorn's settings (see the module docstring for what each one bounds)."""

    limit_concurrency: int = 256
    timeout_keep_alive: float = 5.0
    h11_max_incomplete_event_size: int = 16384
    backlog: int = 2048
    timeout_graceful_shutdown: float = 30.0
    workers: int = 1
    access_log: bool = True
    http: str = "h11"  # or "httptools" (faster; install it), "auto"


def run(host: str, port: int, settings: Settings, limits: ServerLimits) -> None:
    """Serve until SIGINT/SIGTERM (blocking).  The table is opened (and verified) by each server
    process before it accepts a connection; errors raise here (workers = 1)."""
    import uvicorn

    settings.check()
    os.environ[ENV_SETTINGS] = settings_env(settings)  # read by app_from_env in every server process
    options = dict(host=host, port=port, factory=True, limit_concurrency=limits.limit_concurrency,
                   timeout_keep_alive=limits.timeout_keep_alive, backlog=limits.backlog,
                   h11_max_incomplete_event_size=limits.h11_max_incomplete_event_size,
                   timeout_graceful_shutdown=limits.timeout_graceful_shutdown, access_log=limits.access_log,
                   http=limits.http, log_level="info", server_header=False)
    if limits.workers > 1:
        if port == 0:
            raise ValueError("--workers above 1 needs a fixed --port (not 0)")
        uvicorn.run("lookup.app:app_from_env", workers=limits.workers, **options)
        return
    from lookup.app import app_from_env

    app = app_from_env()  # opens the table now: a bad table fails before the socket is bound
    config = uvicorn.Config(lambda: app, **options)
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP (a
    # socket of proto 0 answered every keep-alive request 40 ms late: Nagle and delayed ACKs)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(limits.backlog)
    sock.set_inheritable(True)
    print(f"serving {host}:{sock.getsockname()[1]} (Ctrl-C or SIGTERM to stop)", file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[sock])
