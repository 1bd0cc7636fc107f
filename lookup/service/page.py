"""The page for people: ``GET /`` of ``lookup serve``, a calculator and curves in the browser.

Serves ``lookup/service/static/`` (``index.html``, ``page.js``, ``page.css``), read once when
the application is built and served from memory: no CDN, nothing fetched from outside the server.
The page computes nothing; its script asks the JSON API as any client does.  The form lists the
mechanisms of the registry the API validates with (without the engine: the table's rows, their
parameters described by ``lookup.answer.params.HELP``), and with the engine ``gaussian``
(``lookup/answer/gaussian.py``: sigma in place of eps0, inputs fixed at unit, no sample_rate: the
fields it does not take are hidden, ``without``).  What the page shows and why: docs/page.md.
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

from lookup.answer import gaussian
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
    data = json.dumps({"mechanisms": registry(coverage), "without": {gaussian.NAME: list(gaussian.NOT_TAKEN)},
                       "coverage": coverage}, default=str)
    files = {"/": (html.replace(MARKER, data.replace("</", "<\\/")).encode(), "text/html; charset=utf-8"),
             **{path: ((STATIC / name).read_bytes(), media) for path, (name, media) in ASSETS.items()}}
    return [Route(path, _constant(body, media), methods=["GET", "HEAD"]) for path, (body, media) in files.items()]


def registry(coverage: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """``{mechanism: [{"name", "help", "default", "required"}, ...]}``: the engine's registry and
    gaussian (its sigma ``replaces`` eps0, its inputs ``fixed``: ``gaussian.page_params``), or without
    the engine the families of the table's rows (``"krr k=3"``: krr, with parameter k)."""
    if live_engine.available():
        from tablegen.mechanisms import MECHANISMS

        return {**{name: [{"name": p, "help": spec.help, "default": spec.default, "required": spec.required}
                          for p, spec in mechanism.params.items()] for name, mechanism in MECHANISMS.items()},
                gaussian.NAME: gaussian.page_params()}
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
