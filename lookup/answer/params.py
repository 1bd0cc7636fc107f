"""Mechanism parameters given as text (command line, query string), shared by both CLIs and HTTP.

``parse_params`` turns the text values into the keyword arguments of ``lookup`` and of the
engine (numbers as floats, ``matrix`` from JSON, mechanism names and lists as given: the
mechanism validates them and names the parameter); ``click_options`` adds one ``--NAME``
option per parameter (click is imported only when a CLI is built).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from lookup.answer.api import mechanism_name, parse_number

HELP = {
    "k": "categories of k-RR (or of a krr base)",
    "g": "hash buckets of OLH (default round(e^eps0)+1)",
    "domain": "blh/olh/rappor/oue/hr: finite domain size (exact matrix)",
    "delta0": "delta0 of an (eps0, delta0)-LDP randomizer (generic)",
    "matrix": "finite: JSON list of rows R[x][y]",
    "base": "joint: the base mechanism",
    "parts": "joint: number of attributes, each with eps0/parts",
    "bases": "parallel: comma-separated mechanisms",
    "weights": "parallel: comma-separated probabilities",
}
NUMBERS = ("k", "g", "domain", "delta0", "parts")


def parse_params(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The mechanism parameters present in ``raw`` (None or absent: not given)."""
    params = {name: raw[name] for name in HELP if raw.get(name) is not None}
    for name in NUMBERS:
        if name in params:
            params[name] = parse_number(name, params[name])
    if "matrix" in params:
        try:
            params["matrix"] = json.loads(params["matrix"])
        except (json.JSONDecodeError, RecursionError):
            raise ValueError("matrix must be a JSON list of rows, e.g. [[0.7,0.3],[0.3,0.7]]") from None
    return params


def query_arguments(numbers: Mapping[str, str | None], raw: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of a lookup call: ``numbers`` parsed (None: not given; a name spelled
    with '-' as on the command line is passed with '_'), then the mechanism parameters of ``raw``."""
    parsed = {name.replace("-", "_"): parse_number(name, text) for name, text in numbers.items() if text is not None}
    return {**parsed, **parse_params(raw)}


def mechanism_option(ctx: Any, param: Any, value: Any) -> Any:
    """The click callback of ``--mechanism``: the name in lower case (``lookup.answer.api.mechanism_name``)."""
    return mechanism_name(value)


def click_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a click command with ``--k``, ``--g``, ... (text, default None)."""
    import click

    for name in reversed(HELP):
        func = click.option(f"--{name}", type=str, default=None, help=HELP[name])(func)
    return func


def ascii_number_type(kind: type) -> Any:
    """A click parameter type reading ``kind`` (float or int) from ASCII text only (click's own
    FLOAT and INT call ``float`` and ``int``, which read any Unicode decimal digit: issue 55)."""
    import click

    base = click.FLOAT if kind is float else click.INT

    class AsciiNumber(click.ParamType):
        name = base.name

        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, str) and not value.isascii():
                self.fail(f"{value!r} is not a number written in ASCII digits", param, ctx)
            return base.convert(value, param, ctx)

    return AsciiNumber()
