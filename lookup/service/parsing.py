"""Reading a request: its query string (each parameter once), its booleans and rounds, the
engine's checks of a mechanism before anything is queued, and a 400's message naming what the
request gave."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request

from lookup.answer import gaussian
from lookup.answer import live as live_engine
from lookup.answer.api import parse_number
from lookup.service.schema import COMPOSITION, NUMBERS, ROUNDS_MAX, SAMPLE_RATE_MIN


def mechanism_validator() -> Any:
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
        if mechanism not in ("generic-closed-form", gaussian.NAME):  # gaussian: lookup.answer.gaussian checks it
            get_mechanism(mechanism).resolve(params)

    return validate


def gaussian_question(kind: str, required: tuple[str, ...], raw: dict[str, str]) -> tuple[tuple[str, ...],
                                                                                         dict[str, str]]:
    """A gaussian question's required numbers (sigma in place of eps0) and what else it gives that
    lookup reads (inputs) or refuses by name (eps0; sample_rate of /v1/eps: not supported for gaussian
    yet; /v1/eps0-max, which has no eps0 to replace, with its sigma), as text.  Its rounds are read
    by ``composition`` as any mechanism's."""
    own = ("inputs", "eps0", *(("sample_rate",) if kind == "eps" else ()), *(() if "eps0" in required else ("sigma",)))
    return (tuple("sigma" if name == "eps0" else name for name in required),
            {name: raw[name] for name in own if name in raw})


def composition(raw: dict[str, str], composable: bool) -> dict[str, Any]:
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


def named(message: str, request: Request) -> str:
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


def etags(header: str | None) -> set[str]:
    if not header:
        return set()
    return {tag.strip().removeprefix("W/") for tag in header.split(",")}


def single_values(text: str) -> dict[str, str]:
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


def boolean(text: str) -> bool:
    if text.lower() in {"true", "1", "yes"}:
        return True
    if text.lower() in {"false", "0", "no"}:
        return False
    raise ValueError(f"live must be true or false, got live={text!r}")


__all__ = ["boolean", "composition", "etags", "gaussian_question", "mechanism_validator", "named", "single_values"]
