"""The HTTP API as an ASGI application (Starlette), built by ``create_app(settings)``; served by
uvicorn from ``lookup serve`` (``lookup/serve.py``).  Needs the ``serve`` extra.

    GET /v1/eps?mechanism=krr&k=10&eps0=2&n=1e6&delta=1e-8[&max_slack=0.05|none][&live=false]
    GET /v1/delta?mechanism=generic&eps0=1&n=1e5&eps=0.2
    GET /v1/eps0-max?mechanism=krr&k=10&eps=0.5&n=1e5&delta=1e-8
    GET /v1/info, /healthz, /metrics (Prometheus text format)

Answers are the JSON of ``lookup ... --json``.  Each request is validated in the event loop
(400 naming the parameter), then answered from the table there (``live=False``: microseconds,
never waiting on live work).  What the table cannot answer within ``max_slack`` -- live answers,
refinements, inverse questions off the grid -- goes to a pool of worker processes
(``live_workers`` of them) through a bounded queue (``queue`` tasks admitted, running or
waiting; beyond it a 503 with ``Retry-After``).  A task over ``live_timeout`` seconds is
answered 503 and its pool replaced (its workers killed); a worker over ``memory_mb`` of address
space fails its task with a 503.  Live answers are kept in an LRU cache keyed by the canonical
query, the table and the engine version.  The server computes nothing itself: every number is
one the library answers.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import lookup
from lookup import live as live_engine
from lookup.api import finite, json_ready, loose, parse_max_slack
from lookup.params import HELP, query_arguments
from lookup.table import Table, TableError, open_table

ENV_SETTINGS = "SHUFFLE_EPS_SERVE_SETTINGS"  # JSON of Settings, for uvicorn's worker processes
MAX_URL = 2048
ENDPOINTS = {
    "/v1/eps": ("eps", ("eps0", "n", "delta")),
    "/v1/delta": ("delta", ("eps0", "n", "eps")),
    "/v1/eps0-max": ("eps0_max", ("eps", "n", "delta")),
}
PATHS = [*ENDPOINTS, "/v1/info", "/healthz", "/metrics", "/openapi.json"]
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TABLE_CACHE_CONTROL = "public, max-age=86400"  # a table answer never changes for a given table


@dataclass(frozen=True)
class Settings:
    """What the application is built from (the server's own limits are uvicorn's: lookup/serve.py)."""

    table: str | None = None  # table store (None: the shipped table)
    live_workers: int = 2  # worker processes computing live answers
    queue: int = 8  # live tasks admitted at once, running or waiting (more: 503 + Retry-After)
    live_timeout: float = 30.0  # seconds a live task may run (more: 503, its pool replaced)
    memory_mb: int = 4096  # address-space limit of each worker process (0: none)
    cache_size: int = 4096  # live answers kept (LRU)
    retry_after: int = 5  # seconds, the Retry-After of a 503

    def check(self) -> Settings:
        if self.live_workers < 1 or self.queue < 1 or not self.live_timeout > 0 or self.cache_size < 0 \
                or self.memory_mb < 0 or self.retry_after < 0:
            raise ValueError("live_workers and queue must be >= 1, live_timeout > 0, memory_mb, cache_size "
                             "and retry_after >= 0")
        return self


class Busy(Exception):
    """Live work refused or abandoned: answered 503 with Retry-After."""


class Refused(ValueError):
    """A bad request answered with a status other than 400."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------- worker processes

_WORKER_TABLE: Table | None = None


def _worker_start(table: str | None, memory_mb: int) -> None:
    """A worker process: address-space limit, the table opened once."""
    global _WORKER_TABLE
    if memory_mb:
        import resource

        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _WORKER_TABLE = open_table(table)


def _worker_ready() -> int:
    return os.getpid()


def _worker_answer(kind: str, mechanism: str, kwargs: dict[str, Any], max_slack: float | None) -> dict[str, Any]:
    """The library's answer with live computation on (runs in a worker process)."""
    answer = getattr(lookup, kind)(mechanism, table=_WORKER_TABLE, live=True, max_slack=max_slack, **kwargs)
    return json_ready(kind, answer)


# ---------------------------------------------------------------- the live pool

class LivePool:
    """Worker processes behind a bounded admission count, with a time limit per task and an LRU
    cache of answers (identical queries in flight share one task)."""

    def __init__(self, settings: Settings, key_prefix: str) -> None:
        self.settings = settings
        self.key_prefix = key_prefix
        self.pool: ProcessPoolExecutor | None = None
        self.admitted = 0
        self.cache: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self.inflight: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.replaced = 0
        self.cache_hits = 0

    def start(self) -> None:
        import multiprocessing

        self.pool = ProcessPoolExecutor(
            self.settings.live_workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_start, initargs=(self.settings.table, self.settings.memory_mb))
        for _ in range(self.settings.live_workers):  # start the workers now, not on the first live query
            self.pool.submit(_worker_ready)

    def stop(self) -> None:
        if self.pool is not None:
            self._kill(self.pool)
            self.pool = None

    @staticmethod
    def _kill(pool: ProcessPoolExecutor) -> None:
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            with contextlib.suppress(Exception):
                process.kill()

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        """A new pool for the one whose worker overran or died (its other tasks fail with 503)."""
        if self.pool is broken:
            self.replaced += 1
            self._kill(broken)
            self.start()

    async def answer(self, kind: str, mechanism: str, kwargs: dict[str, Any], max_slack: float | None) -> dict:
        key = json.dumps([self.key_prefix, kind, mechanism, kwargs, max_slack], sort_keys=True, default=str)
        if key in self.cache:
            self.cache.move_to_end(key)
            self.cache_hits += 1
            return self.cache[key]
        if key in self.inflight:
            return await asyncio.shield(self.inflight[key])
        if self.admitted >= self.settings.queue:
            raise Busy(f"all {self.settings.queue} live computation places are taken; retry later")
        self.admitted += 1
        task = asyncio.ensure_future(self._compute(key, kind, mechanism, kwargs, max_slack))
        self.inflight[key] = task
        return await asyncio.shield(task)  # a client hanging up does not cancel the shared task

    async def _compute(self, key: str, kind: str, mechanism: str, kwargs: dict[str, Any],
                       max_slack: float | None) -> dict[str, Any]:
        pool = self.pool
        try:
            if pool is None:
                raise Busy("the server is shutting down")
            try:
                future = pool.submit(_worker_answer, kind, mechanism, kwargs, max_slack)
            except (BrokenProcessPool, RuntimeError):
                self._replace(pool)
                raise Busy("live workers are restarting; retry later") from None
            try:
                result = await asyncio.wait_for(asyncio.wrap_future(future), self.settings.live_timeout)
            except TimeoutError:
                self._replace(pool)
                raise Busy(f"live computation exceeded {self.settings.live_timeout:g} s; retry later") from None
            except BrokenProcessPool:
                self._replace(pool)
                raise Busy("a live worker died (memory limit?); retry later") from None
            except MemoryError:
                raise Busy(f"live computation exceeded the {self.settings.memory_mb} MB memory limit") from None
            if self.settings.cache_size:
                self.cache[key] = result
                while len(self.cache) > self.settings.cache_size:
                    self.cache.popitem(last=False)
            return result
        finally:
            self.admitted -= 1
            self.inflight.pop(key, None)


# ---------------------------------------------------------------- metrics

class Metrics:
    """Counters and a latency histogram, written in the Prometheus text format."""

    def __init__(self) -> None:
        self.requests: collections.Counter[tuple[str, int, str]] = collections.Counter()
        self.latency: dict[str, list[int]] = {}
        self.latency_sum: collections.Counter[str] = collections.Counter()

    def observe(self, endpoint: str, status: int, source: str, seconds: float) -> None:
        self.requests[endpoint, status, source] += 1
        counts = self.latency.setdefault(source, [0] * (len(BUCKETS) + 1))
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        self.latency_sum[source] += seconds

    def text(self, live: LivePool) -> str:
        lines = ["# HELP lookup_requests_total HTTP requests by endpoint, status and source of the answer.",
                 "# TYPE lookup_requests_total counter"]
        for (endpoint, status, source), count in sorted(self.requests.items()):
            lines.append(f'lookup_requests_total{{endpoint="{endpoint}",status="{status}",source="{source}"}} {count}')
        lines += ["# HELP lookup_request_seconds Time to answer a request, by source of the answer.",
                  "# TYPE lookup_request_seconds histogram"]
        for source, counts in sorted(self.latency.items()):
            total = 0
            for bound, count in zip([*map(repr, BUCKETS), "+Inf"], counts, strict=True):
                total += count
                lines.append(f'lookup_request_seconds_bucket{{source="{source}",le="{bound}"}} {total}')
            lines.append(f'lookup_request_seconds_sum{{source="{source}"}} {self.latency_sum[source]!r}')
            lines.append(f'lookup_request_seconds_count{{source="{source}"}} {total}')
        gauges = [("lookup_live_queue", "Live tasks admitted (running or waiting).", "gauge", live.admitted),
                  ("lookup_live_queue_limit", "Live tasks admitted at most.", "gauge", live.settings.queue),
                  ("lookup_live_workers", "Worker processes of the live pool.", "gauge", live.settings.live_workers),
                  ("lookup_live_cache_entries", "Live answers in the LRU cache.", "gauge", len(live.cache)),
                  ("lookup_live_cache_hits_total", "Live answers served from the cache.", "counter", live.cache_hits),
                  ("lookup_live_pool_replaced_total", "Live pools replaced after a timeout or a dead worker.",
                   "counter", live.replaced)]
        for name, help_text, kind, value in gauges:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the application

def create_app(settings: Settings | None = None) -> Starlette:
    """The ASGI application answering from ``settings.table`` (opened and verified now)."""
    settings = (settings or Settings()).check()
    table = open_table(settings.table)
    coverage = table.coverage()
    # what the table's files are (lookup.trust.listing_digest, a device file's SHA-256): a table
    # republished with other values gets other ETags, so no client keeps an old answer by a 304
    table_tag = table.digest[:16] or hashlib.sha256(json.dumps(coverage, sort_keys=True, default=str).encode()
                                                   ).hexdigest()[:16]
    engine_version = _engine_version()
    live = LivePool(settings, f"{table_tag}/{engine_version}")
    metrics = Metrics()
    validate = _mechanism_validator()

    def respond(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
        data = json.dumps(finite(body)).encode()
        return Response(data, status, headers, media_type="application/json")

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        return respond(status, {"error": message}, headers)

    async def query(request: Request) -> tuple[Response, str]:
        kind, required = ENDPOINTS[request.url.path]
        raw = _single_values(request.scope["query_string"].decode("latin-1"))
        allowed = {*required, *HELP, "mechanism", "live", "max_slack"}
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise ValueError(f"unknown parameter {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        missing = sorted({*required, "mechanism"} - set(raw))
        if missing:
            raise ValueError(f"missing parameter {missing[0]!r}")
        allow_live = _boolean(raw.get("live", "true"))
        kwargs = query_arguments({name: raw[name] for name in required}, raw)
        max_slack = parse_max_slack(raw.get("max_slack"), kind)
        mechanism = raw["mechanism"]
        call = getattr(lookup, kind)
        try:  # the table alone, here in the event loop: microseconds, never the engine
            result = call(mechanism, table=table, live=False, max_slack=max_slack, **kwargs)
        except TableError:
            if not allow_live or not live_engine.available():
                raise
            result = None
        needs_live = result is None or (allow_live and max_slack is not None and live_engine.available()
                                        and bool(loose(result.source, result.slack, max_slack).any()))
        if not needs_live:
            body = json_ready(kind, result)
            data = json.dumps(finite(body)).encode()
            etag = f'"{hashlib.sha256(table_tag.encode() + data).hexdigest()[:32]}"'
            headers = {"ETag": etag, "Cache-Control": TABLE_CACHE_CONTROL}
            if etag in _etags(request.headers.get("if-none-match")):
                return Response(status_code=304, headers=headers), "table"
            return Response(data, 200, headers, media_type="application/json"), "table"
        validate(mechanism, {k: v for k, v in kwargs.items() if k in HELP},  # 400 before admission
                 {k: v for k, v in kwargs.items() if k not in HELP})
        body = await live.answer(kind, mechanism, kwargs, max_slack)
        return respond(200, body, {"Cache-Control": "no-cache"}), _source(body)

    async def handle(request: Request) -> Response:
        start = time.perf_counter()
        path = request.url.path
        endpoint, source = (path if path in PATHS else "other"), "error"
        try:
            response, source = await _dispatch(request)
        except Busy as err:
            response = error(503, str(err), {"Retry-After": str(settings.retry_after)})
            source = "busy"
        except Refused as err:
            response = error(err.status, str(err))
        except (ValueError, TableError) as err:
            response = error(400, str(err))
        except Exception as err:  # noqa: BLE001 - no request may take the server down
            print(f"lookup serve: unexpected {type(err).__name__}: {err}", file=sys.stderr)
            response = error(400, f"cannot answer this request: {err}")
        metrics.observe(endpoint, response.status_code, source, time.perf_counter() - start)
        return response

    async def _dispatch(request: Request) -> tuple[Response, str]:
        path = request.url.path
        if path not in PATHS:
            raise Refused(404, f"unknown path {path!r}; use {', '.join(PATHS)}")
        if request.method not in ("GET", "HEAD"):
            raise Refused(405, "read-only endpoint: GET only")
        if len(request.scope.get("raw_path", b"")) + len(request.scope["query_string"]) + 1 > MAX_URL:
            raise Refused(414, f"request URL longer than {MAX_URL} characters")
        if (request.headers.get("content-length") or "0").strip() != "0" or \
                "chunked" in request.headers.get("transfer-encoding", ""):
            raise Refused(413, "GET requests take no body")
        if path in ENDPOINTS:
            return await query(request)
        if request.scope["query_string"]:
            given = sorted(_single_values(request.scope["query_string"].decode("latin-1"))) or ["?"]
            raise ValueError(f"{path} takes no parameters, got {given[0]!r}")
        if path == "/v1/info":
            return respond(200, coverage, {"Cache-Control": TABLE_CACHE_CONTROL}), "info"
        if path == "/openapi.json":
            return respond(200, openapi()), "info"
        if path == "/healthz":
            ok = live.pool is not None
            return respond(200 if ok else 503, {"status": "ok" if ok else "stopping", "live_queue": live.admitted,
                                                "queue_limit": settings.queue}), "health"
        return Response(metrics.text(live), 200, media_type="text/plain; version=0.0.4"), "metrics"

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        live.start()
        try:
            yield
        finally:
            live.stop()

    from lookup.page import routes as page_routes  # GET / for people and its two assets (lookup/page.py)

    methods = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
    app = Starlette(routes=[*page_routes(coverage), Route("/{path:path}", handle, methods=methods)],
                    lifespan=lifespan)
    app.state.settings, app.state.live, app.state.metrics = settings, live, metrics
    return app


NUMBER_HELP = {"eps0": "local privacy parameter, > 0", "n": "number of users (1e6 accepted)",
               "delta": "target delta in (0, 1)", "eps": "target eps >= 0"}


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the endpoints, built from the same tables the handler uses
    (``ENDPOINTS``, the mechanism parameters of ``lookup.params.HELP``), so it cannot drift."""
    def parameter(name: str, required: bool, text: str) -> dict[str, Any]:
        return {"name": name, "in": "query", "required": required, "description": text, "schema": {"type": "string"}}

    common = [parameter("mechanism", True, "krr, generic, blh, olh, rappor, oue, hr, laplace, finite, joint, parallel"),
              *(parameter(name, False, text) for name, text in HELP.items()),
              parameter("live", False, "true (default): compute live off the table; false: refuse instead"),
              parameter("max_slack", False, "refine answers whose slack estimate is above this; none: table only")]
    answers = {"200": {"description": "certified answer (JSON as `lookup ... --json`)"},
               "304": {"description": "not modified (If-None-Match of a table answer's ETag)"},
               "400": {"description": "bad request: the message names the parameter"},
               "503": {"description": "live work queue full or over its limits: retry after Retry-After seconds"}}
    paths = {path: {"get": {"operationId": kind, "summary": f"certified {kind.replace('_', '-')}",
                            "parameters": [*(parameter(n, True, NUMBER_HELP[n]) for n in required), *common],
                            "responses": answers}}
             for path, (kind, required) in ENDPOINTS.items()}
    for path, text in (("/v1/info", "what the table covers"), ("/healthz", "liveness and the live queue"),
                       ("/metrics", "Prometheus text format"), ("/openapi.json", "this description")):
        paths[path] = {"get": {"summary": text, "responses": {"200": {"description": text}}}}
    return {"openapi": "3.1.0", "info": {"title": "shuffle-eps lookup", "version": lookup.__version__}, "paths": paths}


def app_from_env() -> Starlette:
    """``create_app`` with the settings in ``$SHUFFLE_EPS_SERVE_SETTINGS`` (uvicorn's factory)."""
    return create_app(Settings(**json.loads(os.environ.get(ENV_SETTINGS, "{}"))))


def settings_env(settings: Settings) -> str:
    return json.dumps(asdict(settings))


def _engine_version() -> str:
    try:
        from tablegen import ENGINE_VERSION  # tablegen/__init__ holds constants only
    except ImportError:
        return "none"
    return str(ENGINE_VERSION)


def _mechanism_validator() -> Any:
    """mechanism name and parameters checked as the engine checks them (its registry: data, no
    computation), so that a bad query is a 400 before it is queued; without the engine, nothing
    (the table answers or the query is a 400 saying what the table covers)."""
    if not live_engine.available():
        return lambda mechanism, params, numbers: None
    from tablegen.limits import checked_eps0, checked_n
    from tablegen.mechanisms import get_mechanism

    def validate(mechanism: str, params: dict[str, Any], numbers: dict[str, float]) -> None:
        if "eps0" in numbers:
            checked_eps0(numbers["eps0"])
        checked_n(numbers["n"])
        if mechanism != "generic-closed-form":
            get_mechanism(mechanism).resolve(params)

    return validate


def _source(body: dict[str, Any]) -> str:
    source = body.get("source")
    if isinstance(source, str):
        return "refined" if source == "certified estimate" else source
    return "live"


def _etags(header: str | None) -> set[str]:
    if not header:
        return set()
    return {tag.strip().removeprefix("W/") for tag in header.split(",")}


def _single_values(text: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=32)
    except ValueError as err:
        raise ValueError(f"malformed query string: {err}") from None
    out: dict[str, str] = {}
    for name, value in pairs:
        if name in out:
            raise ValueError(f"parameter {name!r} given more than once")
        out[name] = value
    return out


def _boolean(text: str) -> bool:
    if text.lower() in {"true", "1", "yes"}:
        return True
    if text.lower() in {"false", "0", "no"}:
        return False
    raise ValueError(f"live must be true or false, got live={text!r}")


__all__ = ["Settings", "app_from_env", "create_app"]
