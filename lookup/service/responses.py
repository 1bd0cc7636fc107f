"""The service's JSON responses and its exception handlers (Starlette's ``exception_handlers``):
bad input a one-line JSON 400 naming the parameter, refusals their own status, live work refused
a 503 with ``Retry-After``, a fault of the server a JSON 500, logged and counted; every one
counted in ``/metrics`` with its endpoint, status and source."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from lookup.answer.api import finite
from lookup.service.parsing import named
from lookup.service.pool import Busy
from lookup.service.schema import PATHS
from lookup.store.table import TableError

TABLE_CACHE_CONTROL = "public, max-age=86400"  # a table answer never changes for a given table
LOG = logging.getLogger("lookup.service.app")  # server faults (500s), each with its request and traceback


class Refused(ValueError):
    """A bad request answered with a status other than 400 (``headers``: e.g. Allow of a 405)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.headers = status, headers


class ShuttingDown(Busy):
    """A request cancelled by uvicorn past ``--graceful-timeout``: a JSON 503, not its text/plain 500."""


class ServerFault(Exception):
    """An unexpected exception of a handler (``error``), answered by a JSON 500."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def respond(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    data = json.dumps(finite(body)).encode()
    return Response(data, status, headers, media_type="application/json")


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return respond(status, {"error": message}, headers)


def observed(request: Request, response: Response, source: str) -> Response:
    """``response``, counted in the application's metrics with the time since the request began."""
    started = getattr(request.state, "started", None)
    seconds = time.perf_counter() - started if started is not None else 0.0
    path = request.url.path
    request.app.state.metrics.observe(path if path in PATHS else "other", response.status_code, source, seconds)
    return response


def _retry_after(request: Request) -> dict[str, str]:
    return {"Retry-After": str(request.app.state.settings.retry_after)}


async def not_found(request: Request, exc: Exception) -> Response:
    path = request.url.path
    return observed(request, error(404, f"unknown path {path!r}; use {', '.join(PATHS)}"), "error")


async def not_allowed(request: Request, exc: Exception) -> Response:
    """A method other than GET and HEAD: a 405 with Allow on the API's paths; on the page's (``/``
    and its assets, lookup/service/page.py), not an API path, a 404 as for any other path."""
    if request.url.path not in PATHS:
        return await not_found(request, exc)
    return observed(request, error(405, "read-only endpoint: GET and HEAD only", {"Allow": "GET, HEAD"}), "error")


async def refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return observed(request, error(exc.status, str(exc), exc.headers), "error")


async def busy(request: Request, exc: Exception) -> Response:
    return observed(request, error(503, str(exc), _retry_after(request)), "busy")


async def bad_request(request: Request, exc: Exception) -> Response:
    """The validation's own errors (ValueError, TableError): a 400 whose message names the parameter."""
    return observed(request, error(400, named(str(exc), request)), "error")


async def server_fault(request: Request, exc: Exception) -> Response:
    """A JSON 500 for an unexpected exception, logged with the request and its traceback, counted."""
    err = exc.error if isinstance(exc, ServerFault) else exc
    request.app.state.metrics.server_errors += 1
    query = request.scope["query_string"].decode("latin-1")
    LOG.error("lookup serve: unexpected %s answering %s %s%s", type(err).__name__, request.method,
              request.url.path, f"?{query}" if query else "", exc_info=err)
    return observed(request, error(500, f"internal server error ({type(err).__name__}): a fault of the server, not "
                                        "of the request; it is logged"), "error")


# what a handler may raise, each with its answer (lookup/service/handlers.py turns any other exception
# into a ServerFault): Starlette's exception_handlers
EXCEPTION_HANDLERS: dict[Any, Any] = {404: not_found, 405: not_allowed, Refused: refused, Busy: busy,
                                      ValueError: bad_request, TableError: bad_request, ServerFault: server_fault}
EXPECTED = (HTTPException, Refused, Busy, ValueError, TableError)

__all__ = ["EXCEPTION_HANDLERS", "EXPECTED", "Refused", "ServerFault", "ShuttingDown", "error", "observed", "respond"]
