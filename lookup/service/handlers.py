"""The service's endpoints, one Starlette ``Route`` each (``Service.routes``): the three questions
(``/v1/eps``, ``/v1/delta``, ``/v1/eps0-max``), ``/v1/info``, ``/healthz`` and ``/readyz``
(ready means warm), ``/livez``, ``/metrics`` and ``/openapi.json``.  Each answers GET and HEAD
(another method: a JSON 405 with Allow); what a handler raises is answered by the exception
handlers of ``lookup/service/responses.py``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from importlib.util import find_spec
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import lookup
from lookup.answer import gaussian
from lookup.answer import live as live_engine
from lookup.answer.api import KEYS, finite, json_ready, mechanism_name, parse_max_slack
from lookup.answer.params import HELP, query_arguments
from lookup.service.metrics import Metrics
from lookup.service.parsing import boolean, composition, etags, gaussian_question, single_values
from lookup.service.pool import Busy, Pool
from lookup.service.refiner import Refiner, too_loose
from lookup.service.responses import (
    EXPECTED,
    TABLE_CACHE_CONTROL,
    Refused,
    ServerFault,
    ShuttingDown,
    observed,
    respond,
)
from lookup.service.schema import COMPOSITION, ENDPOINTS, MAX_URL, openapi
from lookup.service.settings import Settings
from lookup.service.tasks import worker_answer, worker_composed
from lookup.store.table import Table, TableError

Answer = Callable[[Request], Awaitable[tuple[Response, str]]]


class Service:
    """What the endpoints answer from: the table, the worker pools (``live``, ``refine``,
    ``slice``), the refiner and the metrics."""

    def __init__(self, settings: Settings, table: Table, pools: dict[str, Pool], validate: Any) -> None:
        self.settings, self.table, self.pools, self.validate = settings, table, pools, validate
        self.live = pools["live"]
        self.coverage = table.coverage()
        # what the table's files are (lookup.trust.origin.listing_digest, a device file's SHA-256): a table
        # republished with other values gets other ETags, so no client keeps an old answer by a 304
        self.table_tag = table.digest[:16] or hashlib.sha256(
            json.dumps(self.coverage, sort_keys=True, default=str).encode()).hexdigest()[:16]
        self.server_warm = False  # the server's own first answers done (lookup/service/app.py, the lifespan)
        self.warm = False
        self.refiner = Refiner(settings, pools["refine"], table, f"{self.table_tag}/{_engine_version()}",
                               pools["slice"], self.ready)
        self.metrics = Metrics()
        # rounds questions in refinement workers, with binary RR's refinements (``Refiner.slow``): at most
        # refine_workers - 1 long tasks there at once
        self.composing: set[str] = self.refiner.slow
        self.composable = live_engine.available() and find_spec("dp_accounting") is not None

    def ready(self) -> bool:
        """Ready means warm: the server's own first answers done and every worker of every pool
        warmed up (each counted itself, lookup/service/pool.py).  Once true it stays true (a worker
        restarted later warms up before it takes work, while the others serve)."""
        if not self.warm:
            self.warm = self.server_warm and all(pool.ready() for pool in self.pools.values())
        return self.warm

    def routes(self) -> list[Route]:
        """One Route per endpoint, GET and HEAD."""
        answers: dict[str, tuple[Answer, bool]] = {
            **{path: (self.question(kind, required), True) for path, (kind, required) in ENDPOINTS.items()},
            "/v1/info": (self.info, False), "/healthz": (self.health, False), "/readyz": (self.health, False),
            "/livez": (self.livez, False), "/metrics": (self.metrics_text, False),
            "/openapi.json": (self.description, False)}
        return [Route(path, _endpoint(answer, takes_query), methods=["GET", "HEAD"])
                for path, (answer, takes_query) in answers.items()]

    # ------------------------------------------------------------ the questions

    def question(self, kind: str, required: tuple[str, ...]) -> Answer:
        async def answer(request: Request) -> tuple[Response, str]:
            return await self.query(request, kind, required)

        return answer

    def starting(self) -> Busy:
        return Busy("the service is starting (its workers are warming up); retry later")

    def improved(self, kind: str, body: dict[str, Any]) -> Response:
        """A table-route answer that may still improve (eps: counted in the slack histogram)."""
        if kind == "eps":
            self.metrics.answered(body)
        return respond(200, body, {"Cache-Control": "no-cache"})

    async def query(self, request: Request, kind: str, required: tuple[str, ...]) -> tuple[Response, str]:
        settings, table, refiner, live = self.settings, self.table, self.refiner, self.live
        raw = single_values(request.scope["query_string"].decode("latin-1"))
        mechanism = mechanism_name(raw.get("mechanism"))
        # gaussian (lookup/answer/gaussian.py): sigma in place of eps0, and what it does not take refused by lookup
        required, given = gaussian_question(kind, required, raw) if mechanism == gaussian.NAME else (required, {})
        allowed = {*required, *given, *HELP, "mechanism", "live", "max_slack", *(COMPOSITION if kind == "eps" else ())}
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise ValueError(f"unknown parameter {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        missing = sorted({*required, "mechanism"} - set(raw))
        if missing:
            raise ValueError(f"missing parameter {missing[0]!r}")
        allow_live = boolean(raw.get("live", "true"))
        kwargs = {**query_arguments({name: raw[name] for name in required}, raw), **given}
        max_slack = parse_max_slack(raw.get("max_slack"), kind)
        call = getattr(lookup, kind)
        try:  # the table alone, here in the event loop: microseconds, never the engine
            result, lacking = call(mechanism, table=table, live=False, max_slack=None, **kwargs), None
        except TableError as err:
            result, lacking = None, err
        self.validate(mechanism, {k: v for k, v in kwargs.items() if k in HELP},  # the same 400s, table or live
                      {k: v for k, v in kwargs.items() if k not in HELP})
        rounds = composition(raw, self.composable)
        if rounds and not self.ready():  # engine work during the warm-up: "starting", not slow
            raise self.starting()
        # the question as parsed here, in every answer: the page shows these numbers, never the text typed
        asked = {"asked": finite({"mechanism": mechanism, **kwargs, **rounds,
                                  **({"live": allow_live} if "live" in raw else {}),
                                  **({"max_slack": max_slack} if "max_slack" in raw else {})})}
        if rounds:  # never in the event loop: the engine's composition in a worker (tens of ms)
            key = refiner.key(kind, mechanism, {**kwargs, **rounds, "live": allow_live}, max_slack)
            task = (settings.live_timeout, worker_composed, mechanism, kwargs, rounds, allow_live, max_slack)
            # in range: a refinement worker's place, like any in-range question, but never the last one
            # free (two compositions, 30-300 ms each, would hold both refinement workers, and every
            # refinement asked meanwhile would wait past its budget and be answered unrefined: k-RR
            # k=1024 eps0 2.182 n 1153 delta 1.2e-7 at 1.085x, refined 8 ms later); beyond the table, or no such
            # place, live work (a task that overran or lost its worker is not run again)
            pool, composing = refiner.pool, self.composing
            if lacking is None and (pool.cached(key) is not None or key in pool.inflight
                                    or (len(composing) < settings.refine_workers - 1
                                        and pool.has_room("background"))):
                if pool.cached(key) is None and key not in pool.inflight:
                    composing.add(key)
                    pool.submit(key, "background", *task).add_done_callback(lambda _: composing.discard(key))
                body = await pool.result(key, "background", *task)
            else:
                body = await live.result(key, "answer", *task)
            cache = TABLE_CACHE_CONTROL if body["source"] == "table" else "no-cache"
            return respond(200, {**body, **asked}, {"Cache-Control": cache}), _source(body)
        if lacking is not None:
            if not allow_live or not live_engine.available():
                raise lacking
            sliced = refiner.from_slice(mechanism, kwargs, None) if kind == "eps" and "eps0" in kwargs else None
            if sliced is not None:  # e.g. OLH with its default g between grid eps0: the slice at eps0
                return self.improved(kind, {**sliced, **asked}), "slice"
            bound = _generic_bound(kind, mechanism, kwargs, table)
            if bound is not None:
                body = await refiner.improve(kind, mechanism, kwargs, max_slack, bound)
                return self.improved(kind, {**body, **asked}), _source(body)
            if not self.ready():
                raise self.starting()
            body = await live.result(refiner.key(kind, mechanism, kwargs, max_slack), "answer", settings.live_timeout,
                                     worker_answer, kind, mechanism, kwargs, max_slack)
            return respond(200, {**body, **asked}, {"Cache-Control": "no-cache"}), _source(body)
        body = json_ready(kind, result)
        if allow_live and live_engine.available() and too_loose(body, max_slack):
            body = await refiner.improve(kind, mechanism, kwargs, max_slack, body)
            return self.improved(kind, {**body, **asked}), _source(body)
        if kind == "eps":
            self.metrics.answered(body)
        data = json.dumps(finite({**body, **asked})).encode()
        etag = f'"{hashlib.sha256(self.table_tag.encode() + data).hexdigest()[:32]}"'
        headers = {"ETag": etag, "Cache-Control": TABLE_CACHE_CONTROL}
        if etag in etags(request.headers.get("if-none-match")):
            return Response(status_code=304, headers=headers), "table"
        return Response(data, 200, headers, media_type="application/json"), "table"

    # ------------------------------------------------------------ the service itself

    async def info(self, request: Request) -> tuple[Response, str]:
        return respond(200, self.coverage, {"Cache-Control": TABLE_CACHE_CONTROL}), "info"

    async def description(self, request: Request) -> tuple[Response, str]:
        return respond(200, openapi()), "info"

    async def livez(self, request: Request) -> tuple[Response, str]:
        """Liveness: the event loop answers (nothing else checked)."""
        return respond(200, {"status": "alive"}, {"Cache-Control": "no-store"}), "health"

    async def health(self, request: Request) -> tuple[Response, str]:
        """Readiness (/healthz, /readyz): ready means warm."""
        live, pools, settings = self.live, self.pools, self.settings
        serving = live.pool is not None
        warm = self.ready() if serving else False
        status = "ok" if warm else "starting" if serving else "stopping"
        body = {"status": status, "ready": warm, "workers_ready": all(pool.ready() for pool in pools.values()),
                "warmed": {name: [min(pool.warmed_total(), pool.workers), pool.workers]
                           for name, pool in pools.items()},
                "live_queue": live.admitted["answer"], "queue_limit": settings.queue}
        headers = {"Cache-Control": "no-store", **({} if warm else {"Retry-After": str(settings.retry_after)})}
        return respond(200 if warm else 503, body, headers), "health"

    async def metrics_text(self, request: Request) -> tuple[Response, str]:
        text = self.metrics.text(self.pools, self.refiner.slices)
        return Response(text, 200, media_type="text/plain; version=0.0.4"), "metrics"


def _endpoint(answer: Answer, takes_query: bool) -> Callable[[Request], Awaitable[Response]]:
    """The Route's endpoint of ``answer``: the request's URL and body bounded, a query refused
    where the endpoint takes none, the answer counted in the metrics.  What ``answer`` raises goes
    to the exception handlers; an exception none of them expects, as a ``ServerFault`` (a 500)."""
    async def endpoint(request: Request) -> Response:
        request.state.started = time.perf_counter()
        try:
            if len(request.scope.get("raw_path", b"")) + len(request.scope["query_string"]) + 1 > MAX_URL:
                raise Refused(414, f"request URL longer than {MAX_URL} characters")
            if (request.headers.get("content-length") or "0").strip() != "0" or \
                    "chunked" in request.headers.get("transfer-encoding", ""):
                raise Refused(413, "GET requests take no body")
            if not takes_query and request.scope["query_string"]:
                given = sorted(single_values(request.scope["query_string"].decode("latin-1"))) or ["?"]
                raise ValueError(f"{request.url.path} takes no parameters, got {given[0]!r}")
            response, source = await answer(request)
        except asyncio.CancelledError:  # uvicorn past --graceful-timeout: a JSON 503, not its text/plain 500
            raise ShuttingDown("the server is shutting down; retry later") from None
        except EXPECTED:
            raise
        except Exception as err:  # no request may take the server down: a fault of ours, a 500
            raise ServerFault(err) from err
        return observed(request, response, source)

    return endpoint


def _engine_version() -> str:
    try:
        from tablegen import ENGINE_VERSION  # tablegen/__init__ holds constants only
    except ImportError:
        return "none"
    return str(ENGINE_VERSION)


def _source(body: dict[str, Any]) -> str:
    source = body.get("source")
    if body.get("refined") is False:
        return "unrefined"
    if isinstance(source, str):
        return "refined" if source == "certified estimate" else source
    return "live"


PURE_LDP = {"krr", "olh", "blh", "rappor", "oue", "hr", "laplace"}  # eps0-LDP randomizers (no delta0)


def _generic_bound(kind: str, mechanism: str, kwargs: dict[str, Any], table: Table) -> dict[str, Any] | None:
    """The table's answer for the generic row (every eps0-LDP randomizer: the standard clone of
    arXiv:2012.12803, Theorem 3.2) for a pure eps0-LDP ``mechanism`` whose own row cannot answer
    (OLH with its default g between grid eps0): certified for it too, looser; None where the
    table has no such answer.  Labelled ``"via": "generic"``.  Its lower bound is dropped (null):
    it bounds the generic clone's exact value, not ``mechanism``'s, which is often far below it
    (OLH eps0 3.977 n 7209 delta 5.68e-6: the generic lower bound 0.323, OLH's certified eps
    0.293); a refinement by the engine for ``mechanism`` itself publishes its own."""
    if mechanism not in PURE_LDP:
        return None
    numbers = {k: v for k, v in kwargs.items() if k not in HELP}
    try:
        answer = getattr(lookup, kind)("generic", table=table, live=False, max_slack=None, **numbers)
    except TableError:
        return None
    lower = KEYS[kind][1]
    return {**json_ready(kind, answer), **({lower: None} if lower else {}), "slack": None, "via": "generic"}


__all__ = ["Service"]
