"""The page for people: ``GET /`` of ``lookup serve``, a calculator and curves in the browser.

One HTML page (``lookup/service/static/index.html``) with its script and style sheet (``page.js``,
``page.css``), read once when the application is built and served from memory: no CDN, no
third-party code, nothing fetched from outside the server, so it works offline.  The page
computes nothing.  Its script asks the JSON API (``/v1/eps``, ``/v1/delta``, ``/v1/eps0-max``)
as any client does, through the same admission (validation, the table first, the bounded live
pool: a 503 is shown with its ``Retry-After``), and shows every field of the answer: numbers to
4 significant digits on their safe side (a certified eps or delta rounded up, a lower bound or the
largest eps0 down), each field with a line in plain words, a note on what this kind of answer is,
the exact JSON one click away; a 400 is shown beside the field its message names.  An answer is
never shown as current beside a question it does not answer (the form changing greys it, Ask
clears it, a response to an older question is dropped), and one ``"refined": false`` is asked
again until refined.  Curves of eps against n (log axes, one series per eps0, the lower bound as a
band) and of eps against rounds (``rounds=T`` answers, composition) are SVG built in the browser by
one drawing code from the API's answers, asked one at a time so that a curve never holds more than
one live place, titled with their mechanism and delta and cleared when their question changes.
The page opens on k-RR k=10, eps0 1, n 1e6, delta 1e-8 (docs/page.md says why).  The page's state
is kept in its URL with the API's parameter names (a permalink).

The form lists the mechanisms and their parameters from the registry the API validates with
(``tablegen.mechanisms.MECHANISMS`` when the engine is installed); without the engine, the
mechanisms of the table's rows, whose parameters are described by ``lookup.answer.params.HELP``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lookup.answer import live as live_engine
from lookup.answer.params import HELP

STATIC = Path(__file__).parent / "static"
MARKER = "__PAGE_DATA__"  # where index.html takes the registry and the table's coverage
ASSETS = {"/static/page.js": ("page.js", "text/javascript; charset=utf-8"),
          "/static/page.css": ("page.css", "text/css; charset=utf-8")}
# the page's own code only: no inline script, nothing from another origin
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"}


def routes(coverage: dict[str, Any]) -> list[Route]:
    """``GET /`` (the page, with the registry and ``coverage`` of ``/v1/info`` in it) and its two
    assets, each a constant body with an ETag (``If-None-Match``: 304)."""
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    data = json.dumps({"mechanisms": registry(coverage), "coverage": coverage}, default=str)
    files = {"/": (html.replace(MARKER, data.replace("</", "<\\/")).encode(), "text/html; charset=utf-8"),
             **{path: ((STATIC / name).read_bytes(), media) for path, (name, media) in ASSETS.items()}}
    return [Route(path, _constant(body, media), methods=["GET", "HEAD"]) for path, (body, media) in files.items()]


def registry(coverage: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """``{mechanism: [{"name", "help", "default", "required"}, ...]}``: the engine's registry, or
    without the engine the families of the table's rows (``"krr k=3"``: krr, with parameter k)."""
    if live_engine.available():
        from tablegen.mechanisms import MECHANISMS

        return {name: [{"name": p, "help": spec.help, "default": spec.default, "required": spec.required}
                       for p, spec in mechanism.params.items()] for name, mechanism in MECHANISMS.items()}
    families: dict[str, list[str]] = {}
    for row in coverage.get("mechanisms", []):
        family, *given = row.split()
        names = families.setdefault(family, [])
        names += [name for name in (g.split("=")[0] for g in given) if name not in names]
    return {family: [{"name": n, "help": HELP.get(n, n), "default": None, "required": True} for n in names]
            for family, names in families.items()}


def _constant(body: bytes, media: str) -> Callable[[Request], Awaitable[Response]]:
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    headers = {**HEADERS, "ETag": etag}

    async def endpoint(request: Request) -> Response:
        sent = {tag.strip().removeprefix("W/") for tag in request.headers.get("if-none-match", "").split(",")}
        if etag in sent:
            return Response(status_code=304, headers=headers)
        return Response(body, 200, headers, media_type=media)

    return endpoint


__all__ = ["routes", "registry"]
