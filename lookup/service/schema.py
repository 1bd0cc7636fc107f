"""The endpoints' questions and the OpenAPI 3.1 description of the service (``GET /openapi.json``),
built from the same tables the handlers check queries with."""

from __future__ import annotations

from typing import Any

import lookup
from lookup.answer import gaussian
from lookup.answer.api import EPS0_MIN, KEYS
from lookup.answer.params import HELP
from lookup.format import MECHANISM_PARAMS

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
GAUSSIAN = {  # gaussian's parameters (lookup/answer/gaussian.py), answered live
    "sigma": {"type": "number", "minimum": gaussian.SIGMA_MIN, "maximum": gaussian.SIGMA_MAX,
              "description": "gaussian: the noise's standard deviation, in units of the input range"},
    "inputs": {"type": "string", "enum": list(gaussian.INPUTS), "description": "gaussian: what users hold, unit "
               "x in [0, 1] (the default) or bits x in {0, 1}: the same certified numbers (the pair (0, 1) is the "
               "worst pair)"},
}
NULLABLE = {"type": ["number", "null"]}
ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the endpoints, built from the same tables the handlers use
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
        if "eps0" in required:  # gaussian (lookup/answer/gaussian.py): sigma in place of eps0, live, rounds
            numbers = {name: spec for name, spec in common.items() if name not in ("eps0", "sample_rate")}
            branches.append({"type": "object", "title": gaussian.NAME, "additionalProperties": False,
                             "required": ["mechanism", *("sigma" if n == "eps0" else n for n in required)],
                             "properties": {"mechanism": {"const": gaussian.NAME}, **numbers, **GAUSSIAN}})
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


__all__ = ["ENDPOINTS", "PATHS", "openapi"]
