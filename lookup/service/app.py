"""The HTTP API as an ASGI application (Starlette), built by ``create_app(settings)``; served by
uvicorn from ``lookup serve`` (``lookup/service/serve.py``).  Needs the ``serve`` extra.

    GET /v1/eps?mechanism=krr&k=10&eps0=2&n=1e6&delta=1e-8[&max_slack=0.05|none][&live=false]
        [&rounds=365[&sample_rate=0.1]]
    GET /v1/delta?mechanism=generic&eps0=1&n=1e5&eps=0.2
    GET /v1/eps0-max?mechanism=krr&k=10&eps=0.5&n=1e5&delta=1e-8
    GET /v1/info, /healthz, /metrics (Prometheus text format)

Answers are the JSON of ``lookup ... --json``, answered from the table in the event loop, refined
or computed live in worker pools, never waiting past their budgets: docs/lookup.md, "HTTP
endpoint".  Here: ``create_app`` and the warm-ups before "ready".  Beside it, by concern:
``settings.py`` (the settings, ``lookup serve``'s options), ``handlers.py`` (one Route per
endpoint), ``responses.py`` (JSON responses and exception handlers), ``parsing.py`` (reading a
request), ``refiner.py`` (``Refiner``), ``tasks.py`` (what the workers run), ``metrics.py`` and
``schema.py`` (the endpoints and ``/openapi.json``).
"""

from __future__ import annotations

import contextlib
import json
import math
from importlib.util import find_spec
from typing import Any

from starlette.applications import Starlette

import lookup
from lookup.answer import live as live_engine
from lookup.answer.api import finite, json_ready
from lookup.answer.params import query_arguments
from lookup.service import shared
from lookup.service.handlers import Service
from lookup.service.metrics import BUCKETS, SLACK_BUCKETS, Metrics
from lookup.service.parsing import mechanism_validator
from lookup.service.pool import REFINE_NICE, SLICE_NICE, Pool, worker_table
from lookup.service.refiner import Refiner
from lookup.service.responses import EXCEPTION_HANDLERS, LOG, TABLE_CACHE_CONTROL, Refused
from lookup.service.schema import (
    CATEGORIES_MAX,
    COMPOSITION,
    ENDPOINT_VALUE,
    ENDPOINTS,
    MAX_URL,
    MECHANISMS,
    NUMBERS,
    PATHS,
    ROUNDS_MAX,
    SAMPLE_RATE_MIN,
    openapi,
)
from lookup.service.settings import ENV_SETTINGS, Settings, default_live_workers, settings_env, settings_from_env
from lookup.store.table import Table, TableError, open_table

# ---------------------------------------------------------------- warming up, before "ready"

def _worker_warm() -> int:
    """One refinement per row of the worker's table, at an off-grid point between the middle grid
    points of its axes (run once in each refinement worker at start: the engine's first
    evaluations of a mechanism cost 10-200 ms of set-up that no client's refinement should wait
    for); the number of rows warmed."""
    table = worker_table()
    if table is None or not live_engine.available():
        return 0
    eps0, n, delta = (math.sqrt(axis[len(axis) // 2] * axis[len(axis) // 2 - 1])
                      for axis in (table.eps0, table.n, table.delta))
    warmed = 0
    for family, params in zip(table.families, table.params, strict=True):
        with contextlib.suppress(ValueError, ArithmeticError):
            lookup.eps(family, eps0=eps0, n=round(n), delta=delta, table=table, live=True, max_slack=0.0, **params)
            warmed += 1
    if find_spec("dp_accounting") is not None:  # rounds: dp-accounting's import (about 1 s) done now
        with contextlib.suppress(ValueError, ArithmeticError):
            lookup.eps(table.families[0], eps0=eps0, n=round(n), delta=delta, table=table, rounds=2,
                       **table.params[0])
    return warmed


def _worker_warm_slices() -> int:
    """A slice worker's warm-up: ``_worker_warm`` and the engine's slice path imported."""
    with contextlib.suppress(ImportError):
        import tablegen.engine.dense  # noqa: F401 - imported now, not in a client's first slice
    return _worker_warm()


def _warm_server(table: Table, validate: Any) -> int:
    """The server process's own first answers, before it says ready: for each row of the table, at
    the point ``_worker_warm`` uses, the validation (the engine's registry: its first use of a
    mechanism imports it, 0.1-0.2 s that blocked the event loop on the first question after
    "ready") and the table's answers of the three kinds, JSON-encoded as the handler does; and the
    OpenAPI description.  The number of rows warmed."""
    eps0, n, delta = (math.sqrt(axis[len(axis) // 2] * axis[len(axis) // 2 - 1])
                      for axis in (table.eps0, table.n, table.delta))
    warmed = 0
    for family, params in zip(table.families, table.params, strict=True):
        with contextlib.suppress(ValueError, ArithmeticError, TableError):
            validate(family, params, {"eps0": eps0, "n": round(n), "delta": delta})
            answer = lookup.eps(family, table=table, live=False, max_slack=None, eps0=eps0, n=round(n), delta=delta,
                                **params)
            json.dumps(finite(json_ready("eps", answer)))
            eps = float(answer.value)
            for kind, numbers in (("delta", {"eps0": eps0, "eps": eps}), ("eps0_max", {"eps": eps, "delta": delta})):
                answer = getattr(lookup, kind)(family, table=table, live=False, max_slack=None, n=round(n),
                                               **numbers, **params)
                json.dumps(finite(json_ready(kind, answer)))
            warmed += 1
    openapi()
    return warmed


def _warm(table: Table) -> None:
    """Every row of the table read and checked now, before the first connection (lookup.store.table
    reads a row when it is first used: 0.1-0.3 s that would block the event loop mid-traffic)."""
    for surface in (table.upper, table.lower):
        for r in range(len(table.families) if hasattr(surface, "row") else 0):
            surface.row(r)


# ---------------------------------------------------------------- the application

def create_app(settings: Settings | None = None) -> Starlette:
    """The ASGI application answering from ``settings.table`` (opened and verified now): one
    Route per endpoint (``lookup/service/handlers.py``), the page's (``lookup/service/page.py``),
    and JSON exception handlers (``lookup/service/responses.py``)."""
    settings = (settings or Settings()).check()
    table = open_table(settings.table)
    # every worker of every pool warms up in its initializer, before its first task (lookup/service/pool.py)
    live = Pool(settings.live_workers, settings.queue, 0, settings.cache_size, settings.table, settings.memory_mb,
                warm=_worker_warm)
    refining = Pool(settings.refine_workers, 0, settings.refine_queue, settings.cache_size, settings.table,
                    settings.refine_memory_mb, REFINE_NICE, _worker_warm)
    background = Pool(settings.background_workers, 0, settings.background_workers, 0, settings.table,
                      settings.refine_memory_mb, SLICE_NICE, _worker_warm_slices)
    pools = {"live": live, "refine": refining, "slice": background}
    validate = mechanism_validator()
    service = Service(settings, table, pools, validate)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        _warm(table)
        rows = shared.publish(table)  # the rows in memory once, mapped by every worker (None: each decodes)
        try:
            for pool in pools.values():
                pool.start(rows)  # each worker warms up in its initializer (seconds; /healthz: "starting")
            _warm_server(table, validate)  # while the workers start: the event loop's own first answers
            service.server_warm = True
            yield
        finally:
            for pool in pools.values():
                pool.stop()
            shared.remove(rows)

    from lookup.service.page import (
        routes as page_routes,  # GET / for people and its two assets (lookup/service/page.py)
    )

    app = Starlette(routes=[*page_routes(service.coverage), *service.routes()], exception_handlers=EXCEPTION_HANDLERS,
                    lifespan=lifespan)
    app.router.redirect_slashes = False  # /v1/eps/ is an unknown path (404), not a redirect
    app.state.settings, app.state.live, app.state.metrics = settings, live, service.metrics
    return app


def app_from_env() -> Starlette:
    """``create_app`` with the settings in ``$SHUFFLE_EPS_SERVE_SETTINGS`` (uvicorn's factory)."""
    return create_app(settings_from_env())


__all__ = ["BUCKETS", "CATEGORIES_MAX", "COMPOSITION", "ENDPOINTS", "ENDPOINT_VALUE", "ENV_SETTINGS", "LOG", "MAX_URL",
           "MECHANISMS", "NUMBERS", "PATHS", "ROUNDS_MAX", "SAMPLE_RATE_MIN", "SLACK_BUCKETS", "TABLE_CACHE_CONTROL",
           "Metrics", "Refiner", "Refused", "Settings", "app_from_env", "create_app", "default_live_workers", "openapi",
           "query_arguments", "settings_env"]
