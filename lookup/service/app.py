"""The HTTP API as an ASGI application (Starlette), built by ``create_app(settings)``; served by
uvicorn from ``lookup serve`` (``lookup/service/serve.py``).  Needs the ``serve`` extra.

    GET /v1/eps?mechanism=krr&k=10&eps0=2&n=1e6&delta=1e-8[&max_slack=0.05|none][&live=false]
        [&rounds=365[&sample_rate=0.1]]
    GET /v1/delta?mechanism=generic&eps0=1&n=1e5&eps=0.2
    GET /v1/eps0-max?mechanism=krr&k=10&eps=0.5&n=1e5&delta=1e-8
    GET /v1/info, /healthz, /metrics (Prometheus text format)

Answers are the JSON of ``lookup ... --json``.  Each request is validated in the event loop
(400 naming the parameter), then answered from the table there (``live=False``: microseconds).
A table answer within ``max_slack`` is sent at once.  One above it is never refused
(``Refiner``): read from its eps0 slice where one is kept (``lookup/answer/slices.py``), else refined
in a refinement worker (reserved for refinements, the highest CPU priority of the workers) for at
most ``refine_budget`` seconds, else sent as the table's certified answer labelled
``"refined": false`` while the work goes on.  Questions only the engine can answer, and rounds,
go to ``live_workers`` worker processes (``lookup/service/pool.py``: pebble, each task timed from
its start and ended alone past ``live_timeout``) through a bounded queue (``queue`` admitted;
beyond it a 503 with ``Retry-After``).  Answers are kept in LRU caches keyed by the canonical
query, the table and the engine version.  The server computes nothing itself: every number is
one the library or the engine's slice path answers.  An eps question with ``rounds`` (T rounds
composed, ``lookup/answer/composed.py``: the engine's composition, tens of ms in a warm worker, the
round's PLD kept for any T) is answered in a refinement worker when the table covers its round
(in the live pool otherwise, or when the refinement places are all taken), as ``lookup eps
--rounds T --json`` prints it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import math
import operator
import re
import time
from importlib.util import find_spec
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import lookup
from lookup.answer import live as live_engine
from lookup.answer import slices
from lookup.answer.api import EPS0_MIN, KEYS, finite, json_ready, loose, mechanism_name, parse_max_slack, parse_number
from lookup.answer.lru import LRU
from lookup.answer.params import HELP, query_arguments
from lookup.answer.refine import where
from lookup.device.files import canonical
from lookup.format import MECHANISM_PARAMS
from lookup.service import shared
from lookup.service.pool import REFINE_NICE, SLICE_NICE, Busy, Pool, worker_table
from lookup.service.settings import ENV_SETTINGS, Settings, default_live_workers, settings_env, settings_from_env
from lookup.store.table import Table, TableError, open_table

MAX_URL = 2048
CATEGORIES_MAX = 10**8  # k, g, domain: tablegen.limits.CATEGORIES_MAX (a test keeps them equal)
ROUNDS_MAX = 10**6  # rounds: tablegen.compose.MAX_ROUNDS (a test keeps them equal)
SAMPLE_RATE_MIN = 1e-12  # tablegen.validate.SAMPLE_RATE_MIN (checked here before a task is queued)
COMPOSITION = ("rounds", "sample_rate")  # the parameters of /v1/eps alone: T rounds composed
ENDPOINTS = {
    "/v1/eps": ("eps", ("eps0", "n", "delta")),
    "/v1/delta": ("delta", ("eps0", "n", "eps")),
    "/v1/eps0-max": ("eps0_max", ("eps", "n", "delta")),
}
ENDPOINT_VALUE = {"eps": "eps", "delta": "delta", "eps0_max": "eps0"}  # the answer's key of each kind
PATHS = [*ENDPOINTS, "/v1/info", "/healthz", "/readyz", "/livez", "/metrics", "/openapi.json"]
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SLACK_BUCKETS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)  # an answer's slack estimate
TABLE_CACHE_CONTROL = "public, max-age=86400"  # a table answer never changes for a given table
LOG = logging.getLogger("lookup.service.app")  # server faults (500s), each with its request and traceback


class Refused(ValueError):
    """A bad request answered with a status other than 400 (``headers``: e.g. Allow of a 405)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.headers = status, headers


# ---------------------------------------------------------------- worker tasks

def _worker_answer(kind: str, mechanism: str, kwargs: dict[str, Any], max_slack: float | None,
                   quick: bool = False) -> dict[str, Any]:
    """The library's answer with live computation on (runs in a worker process); ``quick``: an eps
    refinement by one engine evaluation where it suffices (``lookup.eps(quick=True)``)."""
    extra = {"quick": True} if quick else {}
    answer = getattr(lookup, kind)(mechanism, table=worker_table(), live=True, max_slack=max_slack, **kwargs, **extra)
    body = json_ready(kind, answer)
    return {**body, "refuted": answer.refuted} if answer.refuted else body  # for Refiner.improve, never sent


def _worker_composed(mechanism: str, kwargs: dict[str, Any], composition: dict[str, Any], live: bool,
                     max_slack: float | None) -> dict[str, Any]:
    """``lookup.eps(..., rounds=T[, sample_rate=q])`` as ``lookup eps --rounds T --json`` prints it
    (runs in a worker process: the engine's composition, tens of ms once the worker is warm; the
    table's curve with ``max_slack`` None)."""
    answer = lookup.eps(mechanism, table=worker_table(), live=live, max_slack=max_slack, **kwargs, **composition)
    body = json_ready("eps", answer, composition["rounds"])
    return {**body, **({"sample_rate": composition["sample_rate"]} if "sample_rate" in composition else {})}


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


# ---------------------------------------------------------------- refinement that never waits

class Refiner:
    """Table answers whose slack estimate is above ``max_slack``, made better without making
    anyone wait: an eps question is read from its eps0 slice when one is kept
    (``lookup/answer/slices.py``; the second question at an eps0 starts its computation in a slice
    worker: an eps0 asked once, as random questions are, is not worth seconds of a core), else
    the library's refinement is started in ``pool``, the workers reserved for refinements (one
    certification, a few milliseconds: never behind live work or a slice), and waited for
    ``refine_budget`` seconds.  Whatever is not ready by then, or finds no free place, is
    answered from the table at once, certified, with its slack estimate and ``"refined": false``;
    the refinement goes on and its answer is kept for the next asking of the same question.

    An eps question's first refinement is quick: the smooth estimate, inflated by half a step,
    certified by one engine evaluation (its slack unknown), beside the table's lower bound (or
    none) (``_worker_answer(..., quick=True)``); its second asking is answered from it and starts
    the full refinement (bracketed against a value the engine refused, and the engine's lower
    bound proved near it), which answers from then on.  A question asked once costs one
    evaluation where the estimate is good (135 of 136 random questions: within 0.6% of the
    engine's eps, median +0.55%)."""

    def __init__(self, settings: Settings, pool: Pool, table: Table, prefix: str,
                 slice_pool: Pool | None = None, ready: Any = None) -> None:
        self.settings, self.pool, self.table, self.prefix = settings, pool, table, prefix
        self.ready = ready or (lambda: True)  # False while the service warms up: nothing is started
        self.slice_pool = slice_pool or pool
        self.slices = LRU(settings.slice_cache)  # eps0 slices
        self.asked = LRU(4096)  # eps0 slices asked for once (started at the second asking)
        self.failed: set[str] = set()  # slices the engine refused (not tried again)
        self.axes: tuple[list[int], list[float]] | None = None

    def key(self, kind: str, mechanism: str, kwargs: dict[str, Any], max_slack: float | None) -> str:
        """The pool's key of a query: the table, the engine version and the canonical query."""
        return json.dumps([self.prefix, kind, mechanism, kwargs, max_slack], sort_keys=True, default=str)

    async def improve(self, kind: str, mechanism: str, kwargs: dict[str, Any], max_slack: float | None,
                      body: dict[str, Any]) -> dict[str, Any]:
        if not self.ready():  # warming up: the table's certified answer at once, no refinement queued
            return {**body, "refined": False}  # (behind the workers' warm-up it would only add to the wait)
        key = self.key(kind, mechanism, kwargs, max_slack)
        quick = kind == "eps"
        refined = self.pool.cached(key)
        if quick and refined is None:
            refined = self.pool.cached(key + " quick")
            if refined is not None:  # asked again: the full refinement (its lower bound), for later askings
                with contextlib.suppress(Busy):
                    self.pool.submit(key, "background", self.settings.live_timeout, _worker_answer, kind, mechanism,
                                     kwargs, max_slack)
        if quick and refined is None and "via" not in body:  # (a borrowed row's answer: its slice was asked)
            body = self.from_slice(mechanism, kwargs, body)
            if not _loose(body, max_slack):
                return body
        if refined is None:
            try:
                future = self.pool.submit(key + " quick" if quick else key, "background", self.settings.live_timeout,
                                          _worker_answer, kind, mechanism, kwargs, max_slack, quick)
            except Busy:
                return {**body, "refined": False}
            done, _ = await asyncio.wait({future}, timeout=self.settings.refine_budget)
            if not done or future.exception() is not None:
                return {**body, "refined": False}
            refined = future.result()
        refined = dict(refined)  # the cached answer stays whole: every asking sees its refutation
        refuted = refined.pop("refuted", None)  # the worker's refinement proved the table wrong
        if refuted:
            self.refute(refuted)
        if refuted or self.check(kind, mechanism, kwargs, body, refined.get("eps_lower"),
                                 "a live refinement's proved lower bound"):
            return refined  # the table's value is not certified: the engine's is answered
        better = {"eps": operator.le, "delta": operator.le, "eps0_max": operator.ge}[kind]
        name = ENDPOINT_VALUE[kind]
        return refined if better(refined[name], body[name]) else body

    def from_slice(self, mechanism: str, kwargs: dict[str, Any], body: dict[str, Any] | None) -> Any:
        """``body`` (the table's answer; None: the table has none) read from the slice at the
        query's eps0 where one is kept and better; the slice started where none is kept and eps0
        is inside the table's range."""
        params = {k: v for k, v in kwargs.items() if k in HELP}
        key = self.slice_key(mechanism, kwargs)
        found = self.slices.get(key) if self.settings.slice_cache else None
        if found is None:
            if self.settings.slice_cache and self.table.eps0[0] <= kwargs["eps0"] <= self.table.eps0[-1]:
                if self.asked.get(key) is None:
                    self.asked.put(key, True)
                else:
                    self.start_slice(key, mechanism, params, kwargs["eps0"])
            return body
        read = found.answer(kwargs["n"], kwargs["delta"])
        if read is None or (body is not None and read[0] >= body["eps"]):
            return body
        value, slack, corner = read
        if body is None:
            return {"eps": value, "eps_lower": None, "certified": True, "source": "slice", "corner": corner,
                    "slack": slack, "edge": False}
        refuted = self.check("eps", mechanism, kwargs, {"eps": value}, body.get("eps_lower"),
                             "the table's lower bound", upper_is_engine=True)
        return {**body, "eps": value, "source": "slice", "corner": corner, "slack": slack, "edge": False,
                **({"eps_lower": None} if refuted else {})}

    def slice_key(self, mechanism: str, kwargs: dict[str, Any]) -> str:
        params = {k: v for k, v in kwargs.items() if k in HELP}
        return json.dumps(["slice", self.prefix, mechanism, canonical(params), kwargs["eps0"]])

    def start_slice(self, key: str, mechanism: str, params: dict[str, Any], eps0: float) -> None:
        """The slice ``key`` computed in a slice worker if a place is free."""
        if key in self.failed or key in self.slice_pool.inflight or not self.slice_pool.has_room("background"):
            return
        if self.axes is None:
            self.axes = slices.axes(self.table)
        ns, deltas = self.axes

        def done(future: asyncio.Future) -> None:
            if future.cancelled() or future.exception() is not None:
                if len(self.failed) > 4096:
                    self.failed.clear()
                self.failed.add(key)
            else:
                self.slices.put(key, slices.Slice(eps0, ns, deltas, future.result()))

        future = self.slice_pool.submit(key, "background", self.settings.slice_timeout, slices.compute, mechanism,
                                        params, eps0, ns, deltas, keep=False)
        future.add_done_callback(done)

    def check(self, kind: str, mechanism: str, kwargs: dict[str, Any], upper: dict[str, Any], lower: Any,
              what: str, upper_is_engine: bool = False) -> bool:
        """A certified eps below a lower bound at the same point proves one of them wrong: the
        table's (``refute``; True, the service then answers the engine's value).
        ``upper_is_engine``: the upper bound is the engine's, the lower the table's; else the lower
        bound is the engine's and the upper the table's."""
        if kind != "eps" or lower is None or not lower > upper["eps"]:
            return False
        point = where(mechanism, {}, kwargs)
        source = ("the engine's certified eps", "the table's lower bound") if upper_is_engine else \
            ("the table's eps", what)
        self.refute(f"at {point} {source[0]} {upper['eps']!r} is below {source[1]} {lower!r}")
        return True

    def refute(self, detail: str) -> None:
        """The served table refused (``lookup.trust.origin.refute``): its trust record forgotten, its
        answers labelled ``"certified": false`` from now on."""
        from lookup.trust import origin as trust

        with contextlib.suppress(TableError):
            trust.refute(self.table, detail)


# ---------------------------------------------------------------- metrics

class Metrics:
    """Counters and a latency histogram, written in the Prometheus text format."""

    def __init__(self) -> None:
        self.requests: collections.Counter[tuple[str, int, str]] = collections.Counter()
        self.latency: dict[str, list[int]] = {}
        self.latency_sum: collections.Counter[str] = collections.Counter()
        self.server_errors = 0  # requests answered 500: an unexpected exception in the server
        self.slack: dict[str, list[int]] = {}  # table-route eps answers' slack, by refined or not
        self.slack_sum: collections.Counter[str] = collections.Counter()

    def observe(self, endpoint: str, status: int, source: str, seconds: float) -> None:
        self.requests[endpoint, status, source] += 1
        _count(self.latency.setdefault(source, [0] * (len(BUCKETS) + 1)), BUCKETS, seconds)
        self.latency_sum[source] += seconds

    def answered(self, body: dict[str, Any]) -> None:
        """An eps answer of the table's route: its slack estimate (unknown: +Inf) in the histogram
        of refined or unrefined answers (``"refined": false``)."""
        label = "unrefined" if body.get("refined") is False else "refined"
        slack = body.get("slack")
        slack = math.inf if slack is None or not math.isfinite(slack) else max(slack, 0.0)
        _count(self.slack.setdefault(label, [0] * (len(SLACK_BUCKETS) + 1)), SLACK_BUCKETS, slack)
        self.slack_sum[label] += slack if math.isfinite(slack) else 0.0

    def text(self, pools: dict[str, Pool], sliced: LRU) -> str:
        lines = ["# HELP lookup_requests_total HTTP requests by endpoint, status and source of the answer.",
                 "# TYPE lookup_requests_total counter"]
        for (endpoint, status, source), count in sorted(self.requests.items()):
            lines.append(f'lookup_requests_total{{endpoint="{endpoint}",status="{status}",source="{source}"}} {count}')
        lines += _histogram("lookup_request_seconds", "Time to answer a request, by source of the answer.", "source",
                            BUCKETS, self.latency, self.latency_sum)
        lines += _histogram("lookup_answer_slack", "Slack estimate of eps answers from the table's route (refined: "
                            "within max_slack, from a slice or a refinement; unrefined: the table's while its "
                            "refinement runs).", "refined", SLACK_BUCKETS, self.slack, self.slack_sum)
        counts = {label: sum(c) for label, c in self.slack.items()}
        fraction = counts.get("refined", 0) / max(1, sum(counts.values()))
        live, refining, background = pools["live"], pools["refine"], pools["slice"]
        gauges = [("lookup_refined_fraction", "Share of the table route's eps answers that were refined.", "gauge",
                   fraction),
                  ("lookup_live_queue", "Live tasks admitted (running or waiting).", "gauge", live.admitted["answer"]),
                  ("lookup_live_queue_limit", "Live tasks admitted at most.", "gauge", live.queue),
                  ("lookup_refine_queue", "Refinements admitted (running or waiting).", "gauge",
                   refining.admitted["background"]),
                  ("lookup_refine_queue_limit", "Refinements admitted at most.", "gauge", refining.background),
                  ("lookup_refine_timeouts_total", "Refinements ended past their time limit.", "counter",
                   refining.counts["timeouts"]),
                  ("lookup_refine_cache_hits_total", "Refinements answered from the cache (asked before).",
                   "counter", refining.cache.hits),
                  ("lookup_background_tasks", "eps0 slices admitted.", "gauge", background.admitted["background"]),
                  ("lookup_background_timeouts_total", "eps0 slices ended past their time limit.",
                   "counter", background.counts["timeouts"]),
                  ("lookup_live_workers", "Worker processes of the live pool.", "gauge", live.workers),
                  ("lookup_live_cache_entries", "Live answers in the LRU cache.", "gauge", len(live.cache)),
                  ("lookup_live_cache_hits_total", "Live answers served from the cache.", "counter",
                   live.cache.hits),
                  ("lookup_live_timeouts_total", "Tasks ended (their worker alone replaced) past their time limit.",
                   "counter", live.counts["timeouts"]),
                  ("lookup_live_worker_deaths_total", "Tasks whose worker died (memory limit, crash).", "counter",
                   live.counts["deaths"]),
                  ("lookup_slices", "eps0 slices kept.", "gauge", len(sliced)),
                  ("lookup_slice_hits_total", "Answers read from an eps0 slice.", "counter", sliced.hits),
                  ("lookup_server_errors_total", "Requests answered 500: an unexpected exception in the server "
                   "(logged with the request and its traceback).", "counter", self.server_errors)]
        for name, help_text, kind, value in gauges:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(lines) + "\n"


def _count(counts: list[int], buckets: tuple[float, ...], value: float) -> None:
    """One observation in a histogram's non-cumulative counts (the last: above every bucket)."""
    counts[next((i for i, bound in enumerate(buckets) if value <= bound), len(buckets))] += 1


def _histogram(name: str, help_text: str, label: str, buckets: tuple[float, ...], counts: dict[str, list[int]],
               sums: collections.Counter[str]) -> list[str]:
    """A Prometheus histogram of ``counts`` (one series per label value)."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for value, series in sorted(counts.items()):
        total = 0
        for bound, count in zip([*map(repr, buckets), "+Inf"], series, strict=True):
            total += count
            lines.append(f'{name}_bucket{{{label}="{value}",le="{bound}"}} {total}')
        lines.append(f'{name}_sum{{{label}="{value}"}} {sums[value]!r}')
        lines.append(f'{name}_count{{{label}="{value}"}} {total}')
    return lines


# ---------------------------------------------------------------- the application

def create_app(settings: Settings | None = None) -> Starlette:
    """The ASGI application answering from ``settings.table`` (opened and verified now)."""
    settings = (settings or Settings()).check()
    table = open_table(settings.table)
    coverage = table.coverage()
    # what the table's files are (lookup.trust.origin.listing_digest, a device file's SHA-256): a table
    # republished with other values gets other ETags, so no client keeps an old answer by a 304
    table_tag = table.digest[:16] or hashlib.sha256(json.dumps(coverage, sort_keys=True, default=str).encode()
                                                   ).hexdigest()[:16]
    engine_version = _engine_version()
    # every worker of every pool warms up in its initializer, before its first task (lookup/service/pool.py)
    live = Pool(settings.live_workers, settings.queue, 0, settings.cache_size, settings.table, settings.memory_mb,
                warm=_worker_warm)
    refining = Pool(settings.refine_workers, 0, settings.refine_queue, settings.cache_size, settings.table,
                    settings.refine_memory_mb, REFINE_NICE, _worker_warm)
    background = Pool(settings.background_workers, 0, settings.background_workers, 0, settings.table,
                      settings.refine_memory_mb, SLICE_NICE, _worker_warm_slices)
    pools = {"live": live, "refine": refining, "slice": background}
    state = {"server_warm": False, "ready": False}

    def ready() -> bool:
        """Ready means warm: the server's own first answers done and every worker of every pool
        warmed up (each counted itself, lookup/service/pool.py).  Once true it stays true (a worker
        restarted later warms up before it takes work, while the others serve)."""
        if not state["ready"]:
            state["ready"] = state["server_warm"] and all(pool.ready() for pool in pools.values())
        return state["ready"]

    refiner = Refiner(settings, refining, table, f"{table_tag}/{engine_version}", background, ready)
    metrics = Metrics()
    validate = _mechanism_validator()

    composing: set[str] = set()  # rounds questions in refinement workers (at most refine_workers - 1)

    def starting() -> Busy:
        return Busy("the service is starting (its workers are warming up); retry later")
    composable = live_engine.available() and find_spec("dp_accounting") is not None

    def respond(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
        data = json.dumps(finite(body)).encode()
        return Response(data, status, headers, media_type="application/json")

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        return respond(status, {"error": message}, headers)

    def improved(kind: str, body: dict[str, Any]) -> Response:
        """A table-route answer that may still improve (eps: counted in the slack histogram)."""
        if kind == "eps":
            metrics.answered(body)
        return respond(200, body, {"Cache-Control": "no-cache"})

    async def query(request: Request) -> tuple[Response, str]:
        kind, required = ENDPOINTS[request.url.path]
        raw = _single_values(request.scope["query_string"].decode("latin-1"))
        allowed = {*required, *HELP, "mechanism", "live", "max_slack", *(COMPOSITION if kind == "eps" else ())}
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise ValueError(f"unknown parameter {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        missing = sorted({*required, "mechanism"} - set(raw))
        if missing:
            raise ValueError(f"missing parameter {missing[0]!r}")
        allow_live = _boolean(raw.get("live", "true"))
        kwargs = query_arguments({name: raw[name] for name in required}, raw)
        max_slack = parse_max_slack(raw.get("max_slack"), kind)
        mechanism = mechanism_name(raw["mechanism"])
        call = getattr(lookup, kind)
        try:  # the table alone, here in the event loop: microseconds, never the engine
            result, lacking = call(mechanism, table=table, live=False, max_slack=None, **kwargs), None
        except TableError as err:
            result, lacking = None, err
        validate(mechanism, {k: v for k, v in kwargs.items() if k in HELP},  # the same 400s, table or live
                 {k: v for k, v in kwargs.items() if k not in HELP})
        composition = _composition(raw, composable)
        if composition and not ready():  # engine work during the warm-up: "starting", not slow
            raise starting()
        # the question as parsed here, in every answer: the page shows these numbers, never the text typed
        asked = {"asked": finite({"mechanism": mechanism, **kwargs, **composition,
                                  **({"live": allow_live} if "live" in raw else {}),
                                  **({"max_slack": max_slack} if "max_slack" in raw else {})})}
        if composition:  # never in the event loop: the engine's composition in a worker (tens of ms)
            key = refiner.key(kind, mechanism, {**kwargs, **composition, "live": allow_live}, max_slack)
            task = (settings.live_timeout, _worker_composed, mechanism, kwargs, composition, allow_live, max_slack)
            # in range: a refinement worker's place, like any in-range question, but never the last one
            # free (issue 57: two compositions, 30-300 ms each, held both refinement workers and every
            # refinement asked meanwhile waited past its budget, answered unrefined: k-RR k=1024 eps0
            # 2.182 n 1153 delta 1.2e-7 at 1.085x, refined 8 ms later); beyond the table, or no such
            # place, live work (a task that overran or lost its worker is not run again)
            pool = refiner.pool
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
            sliced = refiner.from_slice(mechanism, kwargs, None) if kind == "eps" else None
            if sliced is not None:  # e.g. OLH with its default g between grid eps0: the slice at eps0
                return improved(kind, {**sliced, **asked}), "slice"
            bound = _generic_bound(kind, mechanism, kwargs, table)
            if bound is not None:
                body = await refiner.improve(kind, mechanism, kwargs, max_slack, bound)
                return improved(kind, {**body, **asked}), _source(body)
            if not ready():
                raise starting()
            body = await live.result(refiner.key(kind, mechanism, kwargs, max_slack), "answer", settings.live_timeout,
                                     _worker_answer, kind, mechanism, kwargs, max_slack)
            return respond(200, {**body, **asked}, {"Cache-Control": "no-cache"}), _source(body)
        body = json_ready(kind, result)
        if allow_live and live_engine.available() and _loose(body, max_slack):
            body = await refiner.improve(kind, mechanism, kwargs, max_slack, body)
            return improved(kind, {**body, **asked}), _source(body)
        if kind == "eps":
            metrics.answered(body)
        data = json.dumps(finite({**body, **asked})).encode()
        etag = f'"{hashlib.sha256(table_tag.encode() + data).hexdigest()[:32]}"'
        headers = {"ETag": etag, "Cache-Control": TABLE_CACHE_CONTROL}
        if etag in _etags(request.headers.get("if-none-match")):
            return Response(status_code=304, headers=headers), "table"
        return Response(data, 200, headers, media_type="application/json"), "table"

    async def handle(request: Request) -> Response:
        start = time.perf_counter()
        path = request.url.path
        endpoint, source = (path if path in PATHS else "other"), "error"
        try:
            response, source = await _dispatch(request)
        except Busy as err:
            response = error(503, str(err), {"Retry-After": str(settings.retry_after)})
            source = "busy"
        except asyncio.CancelledError:  # uvicorn past --graceful-timeout: a JSON 503, not its text/plain 500
            response = error(503, "the server is shutting down; retry later",
                             {"Retry-After": str(settings.retry_after)})
            source = "busy"
        except Refused as err:
            response = error(err.status, str(err), err.headers)
        except (ValueError, TableError) as err:  # the validation's own errors (TableError, Refused among them)
            response = error(400, _named(str(err), request))
        except Exception as err:  # noqa: BLE001 - no request may take the server down: a fault of ours, a 500
            response = server_fault(err, request)
        metrics.observe(endpoint, response.status_code, source, time.perf_counter() - start)
        return response

    def server_fault(err: Exception, request: Request) -> Response:
        """A JSON 500 for an unexpected exception, logged with the request and its traceback, counted."""
        metrics.server_errors += 1
        query = request.scope["query_string"].decode("latin-1")
        LOG.error("lookup serve: unexpected %s answering %s %s%s", type(err).__name__, request.method,
                  request.url.path, f"?{query}" if query else "", exc_info=err)
        return error(500, f"internal server error ({type(err).__name__}): a fault of the server, not of the "
                          "request; it is logged")

    async def _dispatch(request: Request) -> tuple[Response, str]:
        path = request.url.path
        if path not in PATHS:
            raise Refused(404, f"unknown path {path!r}; use {', '.join(PATHS)}")
        if request.method not in ("GET", "HEAD"):
            raise Refused(405, "read-only endpoint: GET and HEAD only", {"Allow": "GET, HEAD"})
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
        if path == "/livez":  # liveness: the event loop answers (nothing else checked)
            return respond(200, {"status": "alive"}, {"Cache-Control": "no-store"}), "health"
        if path in ("/healthz", "/readyz"):  # readiness: ready means warm
            serving = live.pool is not None
            warm = ready() if serving else False
            status = "ok" if warm else "starting" if serving else "stopping"
            body = {"status": status, "ready": warm, "workers_ready": all(pool.ready() for pool in pools.values()),
                    "warmed": {name: [min(pool.warmed_total(), pool.workers), pool.workers]
                               for name, pool in pools.items()},
                    "live_queue": live.admitted["answer"], "queue_limit": settings.queue}
            headers = {"Cache-Control": "no-store", **({} if warm else {"Retry-After": str(settings.retry_after)})}
            return respond(200 if warm else 503, body, headers), "health"
        text = metrics.text(pools, refiner.slices)
        return Response(text, 200, media_type="text/plain; version=0.0.4"), "metrics"

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        _warm(table)
        rows = shared.publish(table)  # the rows in memory once, mapped by every worker (None: each decodes)
        try:
            for pool in pools.values():
                pool.start(rows)  # each worker warms up in its initializer (seconds; /healthz: "starting")
            _warm_server(table, validate)  # while the workers start: the event loop's own first answers
            state["server_warm"] = True
            yield
        finally:
            for pool in pools.values():
                pool.stop()
            shared.remove(rows)

    from lookup.service.page import (
        routes as page_routes,  # GET / for people and its two assets (lookup/service/page.py)
    )

    methods = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"]
    app = Starlette(routes=[*page_routes(coverage), Route("/{path:path}", handle, methods=methods)],
                    lifespan=lifespan)
    app.state.settings, app.state.live, app.state.metrics = settings, live, metrics
    return app


MECHANISMS = MECHANISM_PARAMS
NUMBERS = {  # the query numbers' schemas: the ranges lookup.answer.api.DOMAIN and the engine's limits check
    "eps0": ("local privacy parameter", {"type": "number", "minimum": EPS0_MIN, "maximum": 40}),
    "n": ("number of users, an integer (1e6 accepted)", {"type": "number", "minimum": 1, "maximum": 1e18,
                                                         "multipleOf": 1}),
    "delta": ("target delta", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
    "eps": ("target eps", {"type": "number", "minimum": 0, "maximum": 1e300}),
}
BASES = [m for m in MECHANISMS if m not in ("generic-closed-form", "finite", "joint", "parallel")]
PARAMS = {  # the mechanism parameters' schemas (lookup.answer.params.HELP says what each one is)
    **{name: {"type": "integer", "minimum": 2, "maximum": CATEGORIES_MAX} for name in ("k", "g", "domain")},
    "delta0": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
    "matrix": {"type": "string", "contentMediaType": "application/json"}, "base": {"type": "string", "enum": BASES},
    "parts": {"type": "integer", "minimum": 1, "maximum": 32},
    "bases": {"type": "string", "pattern": f"^({'|'.join(BASES)})(,({'|'.join(BASES)}))*$"},
    "weights": {"type": "string", "pattern": "^[0-9.eE+-]+(,[0-9.eE+-]+)*$"},
}
COMPOSED = {  # /v1/eps only (sample_rate without rounds: a 400)
    "rounds": ("T identical rounds composed (needs the compose extra on the server)",
               {"type": "integer", "minimum": 1, "maximum": ROUNDS_MAX}),
    "sample_rate": ("with rounds: probability that each user takes part in a round (live; default 1)",
                    {"type": "number", "minimum": SAMPLE_RATE_MIN, "maximum": 1}),
}
NULLABLE = {"type": ["number", "null"]}
ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the endpoints, built from the same tables the handler uses
    (``ENDPOINTS``, ``MECHANISMS``, ``lookup.answer.params.HELP``), precise enough to fuzz: the query of
    each endpoint is one object (form style, exploded: ``?mechanism=krr&k=10&eps0=...``), one of a
    branch per mechanism with its own parameters, typed and ranged; every status the server
    answers has its media type and schema."""
    def json_body(schema: dict[str, Any], text: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"description": text, "content": {"application/json": {"schema": schema}}, **(
            {"headers": headers} if headers else {})}

    def query(kind: str, required: tuple[str, ...]) -> dict[str, Any]:
        common = {**{n: {**NUMBERS[n][1], "description": NUMBERS[n][0]} for n in required},
                  "live": {"type": "boolean", "description": "true (default): compute live off the table"},
                  "max_slack": {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "enum": ["none"]}],
                                "description": "refine answers whose slack estimate is above this; none: table only"},
                  **({name: {**COMPOSED[name][1], "description": COMPOSED[name][0]} for name in COMPOSITION}
                     if kind == "eps" else {})}
        branches = [{"type": "object", "title": name, "additionalProperties": False,
                     "required": ["mechanism", *required, *needs],
                     "properties": {"mechanism": {"const": name}, **common,
                                    **{p: {**PARAMS[p], "description": HELP[p]} for p in (*needs, *optional)}}}
                    for name, (needs, optional) in MECHANISMS.items() if kind == "eps" or name != "generic-closed-form"]
        return {"name": "query", "in": "query", "style": "form", "explode": True, "required": True,
                "schema": {"oneOf": branches}}

    retry = {"Retry-After": {"description": "seconds", "schema": {"type": "string", "pattern": "^[0-9]+$"}}}
    refusals = {"400": json_body(ERROR, "bad request: the message names the parameter"),
                "405": json_body(ERROR, "read-only: GET and HEAD only", {"Allow": {"schema": {"type": "string"}}}),
                "413": json_body(ERROR, "a request with a body"), "414": json_body(ERROR, "URL over 2048 characters"),
                "500": json_body(ERROR, "a fault of the server (logged, counted in /metrics), not of the request"),
                "default": json_body(ERROR, "404: unknown path")}
    paths = {}
    for path, (kind, required) in ENDPOINTS.items():
        value, lower = KEYS[kind]
        answer = {"type": "object", "required": [value, "certified", "source", "slack", "edge"], "properties": {
            value: {"type": "number"}, **({lower: NULLABLE} if lower else {}), "certified": {"type": "boolean"},
            "source": {"type": "string", "enum": ["table", "slice", "certified estimate", "live"]},
            "corner": {"type": "object", "additionalProperties": NULLABLE}, "slack": NULLABLE,
            "edge": {"type": "boolean"}, "refined": {"type": "boolean"},
            "asked": {"type": "object", "description": "the question as the server parsed it (mechanism, its "
                      "parameters and the numbers): what was answered"},
            "via": {"type": "string", "enum": ["generic"]},
            **({"rounds": {"type": "integer"}, "sample_rate": {"type": "number"}} if kind == "eps" else {})}}
        responses = {"200": json_body(answer, "certified answer (JSON as `lookup ... --json`; \"refined\": false: "
                                      "the table's, its refinement not ready)"),
                     "304": {"description": "not modified (If-None-Match of a table answer's ETag)"},
                     "503": json_body(ERROR, "live work queue full or over its limits, or live work while the "
                                      "service is starting", retry), **refusals}
        paths[path] = {"get": {"operationId": kind, "summary": f"certified {kind.replace('_', '-')}",
                               "parameters": [query(kind, required)], "responses": responses}}
    text = {"text/plain": {"schema": {"type": "string"}}}
    plain = {"200": {"description": "Prometheus text format", "content": text}, **refusals}
    health = {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}}
    for path, text, responses in (
            ("/v1/info", "what the table covers", {"200": json_body({"type": "object"}, "coverage"), **refusals}),
            ("/healthz", "readiness (ready means warm) and the live queue",
             {"200": json_body(health, "ready: warm, answering at steady-state latency"),
              "503": json_body(health, "starting (workers warming up) or stopping", retry), **refusals}),
            ("/readyz", "readiness, as /healthz", {"200": json_body(health, "ready"),
                                                   "503": json_body(health, "starting or stopping", retry),
                                                   **refusals}),
            ("/livez", "liveness: the event loop answers", {"200": json_body(health, "alive"), **refusals}),
            ("/metrics", "counters and latencies", plain),
            ("/openapi.json", "this description", {"200": json_body({"type": "object"}, "OpenAPI 3.1"),
                                                   **refusals})):
        paths[path] = {"get": {"operationId": path.strip("/").replace("/", "_").replace(".", "_"), "summary": text,
                               "responses": responses}}
    return {"openapi": "3.1.0", "info": {"title": "shuffle-eps lookup", "version": lookup.__version__}, "paths": paths}


def app_from_env() -> Starlette:
    """``create_app`` with the settings in ``$SHUFFLE_EPS_SERVE_SETTINGS`` (uvicorn's factory)."""
    return create_app(settings_from_env())


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
            checked_eps0(numbers["eps0"])  # the engine's domain, EPS0_MIN included
        checked_n(numbers["n"])
        if mechanism != "generic-closed-form":
            get_mechanism(mechanism).resolve(params)

    return validate


def _composition(raw: dict[str, str], composable: bool) -> dict[str, Any]:
    """``rounds`` (an integer T in [1, ROUNDS_MAX]) and ``sample_rate`` (q in (0, 1], with rounds
    only) of a query, checked here so that a bad one is a 400 before it is queued; {} for none."""
    if not set(COMPOSITION) & set(raw):
        return {}
    if "rounds" not in raw:
        raise ValueError("sample_rate needs rounds (T subsampled rounds composed; rounds=1 for one round)")
    rounds = parse_number("rounds", raw["rounds"])
    if not (rounds.is_integer() and 1 <= rounds <= ROUNDS_MAX):
        raise ValueError(f"rounds must be an integer in [1, {ROUNDS_MAX}], got rounds={raw['rounds']!r}")
    composition: dict[str, Any] = {"rounds": int(rounds)}
    if "sample_rate" in raw:
        rate = parse_number("sample_rate", raw["sample_rate"])
        if not SAMPLE_RATE_MIN <= rate <= 1:
            raise ValueError(f"sample_rate must lie in [{SAMPLE_RATE_MIN:g}, 1], got sample_rate="
                             f"{raw['sample_rate']!r} (a smaller rate is answered safely at {SAMPLE_RATE_MIN:g}: eps "
                             "does not decrease with the rate)")
        composition["sample_rate"] = rate
    if not composable:
        raise ValueError("rounds needs the engine and dp-accounting on the server: pip install 'shuffle-eps[compose]'")
    return composition


def _source(body: dict[str, Any]) -> str:
    source = body.get("source")
    if body.get("refined") is False:
        return "unrefined"
    if isinstance(source, str):
        return "refined" if source == "certified estimate" else source
    return "live"


def _warm(table: Table) -> None:
    """Every row of the table read and checked now, before the first connection (lookup.store.table
    reads a row when it is first used: 0.1-0.3 s that would block the event loop mid-traffic)."""
    for surface in (table.upper, table.lower):
        for r in range(len(table.families) if hasattr(surface, "row") else 0):
            surface.row(r)


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


def _loose(body: dict[str, Any], max_slack: float | None) -> bool:
    """Whether a table answer's slack estimate is above ``max_slack`` or unknown."""
    return bool(loose(body["source"], math.nan if body["slack"] is None else body["slack"], max_slack).any())


def _named(message: str, request: Request) -> str:
    """``message`` where it names a parameter of the request (or the path, the mechanism); else (a
    library's own words, e.g. numpy's) one that names the query's numbers instead."""
    given = [name for name, _ in parse_qsl(request.scope["query_string"].decode("latin-1"), keep_blank_values=True)]
    words = {*given, "mechanism", "parameter", "path", "URL", "query", "table", "GET", "matrix"}
    if message and any(re.search(rf"\b{re.escape(word)}\b", message) for word in words):
        return message
    numbers = ", ".join(f"{k}={v}" for k, v in parse_qsl(request.scope["query_string"].decode("latin-1"))
                        if k in NUMBERS)
    return (f"the engine cannot compute at {numbers or 'these values'}: outside its numerical range (eps0, n, delta "
            f"or eps too small or too large for this mechanism); the table covers the ranges of /v1/info")


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


__all__ = ["ENV_SETTINGS", "Settings", "app_from_env", "create_app", "default_live_workers", "settings_env"]
