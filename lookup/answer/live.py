"""Live answers from the engine (imported lazily: ``tablegen`` is the heavy side), cached.

The cache is in memory and, when ``$SHUFFLE_EPS_CACHE`` names a directory, also on disk (one
JSON file per answer, written atomically), keyed by the query, the mechanism's parameters and
the engine version: a cached value is the engine's certified value (or its verdict on a
candidate, ``certifies``, kept in memory only), never an interpolation.

A file on disk is believed only if it is authentic and still certified (issue 37): each carries
an HMAC-SHA256 of its key and value by the per-user secret (``lookup.trust.origin.mac``; an entry planted
or edited by whoever cannot read the secret is ignored), and a hit is re-certified by one engine
evaluation before use (``_recertified``: ``certifies`` at the cached eps, delta or eps0); one that
fails is recomputed and overwritten.  Composed answers, and the lower bound cached beside an eps or
delta, have no one-evaluation check: the HMAC alone vouches for them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Any

from lookup.answer.lru import LRU
from lookup.trust import origin as trust

ENV_CACHE = "SHUFFLE_EPS_CACHE"
ROUNDS_KEPT = 64  # one-round PLDs kept in memory (composed_eps), the least recently used dropped
_ROUNDS = LRU(ROUNDS_KEPT)


def available() -> bool:
    return importlib.util.find_spec("tablegen") is not None and importlib.util.find_spec("scipy") is not None


def eps(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> tuple[float, float]:
    """(certified eps, lower bound or NaN) from ``tablegen.engine.eps_bounds``."""
    def compute() -> list[float]:
        from tablegen.engine import eps_bounds

        b = eps_bounds(mechanism, eps0=point["eps0"], n=int(point["n"]), delta=point["delta"], **params)
        return [b.upper, math.nan if b.lower is None else b.lower]

    return tuple(_cached("eps", mechanism, point, params, compute))  # type: ignore[return-value]


def delta0_note(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> str | None:
    """Why the certified eps at ``point`` is eps0 where an n delta0 term uses up delta, else None
    (``tablegen.engine.delta0_note``: a closed form, no search; not cached)."""
    from tablegen.engine import delta0_note as engine_note

    return engine_note(mechanism, eps0=point["eps0"], n=int(point["n"]), delta=point["delta"], **params)


def eps_upper(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> float:
    """Certified eps alone (no lower bound: faster), from ``tablegen.engine.eps_bounds``."""
    def compute() -> list[float]:
        from tablegen.engine import eps_bounds

        return [eps_bounds(mechanism, eps0=point["eps0"], n=int(point["n"]), delta=point["delta"], lower=False,
                           **params).upper]

    return _cached("eps_upper", mechanism, point, params, compute)[0]


def certifies(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> bool:
    """Whether ``point["eps"]`` is certified at ``point["delta"]`` (one engine evaluation,
    ``tablegen.engine.certifies``): the certified delta at that eps is <= delta."""
    return _verdict("certifies", mechanism, point, params)


def proves_above(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> bool:
    """Whether the exact eps at ``point["delta"]`` is proved above ``point["eps"]`` (one spectral
    lower-bound evaluation, ``tablegen.engine.proves_above``)."""
    return _verdict("proves_above", mechanism, point, params)


def _verdict(kind: str, mechanism: str, point: dict[str, float], params: dict[str, Any]) -> bool:
    """The engine's yes/no ``tablegen.engine.<kind>`` at (eps0, n, eps, delta), cached."""
    def compute() -> list[float]:
        from tablegen import engine

        check = getattr(engine, kind)
        return [float(check(mechanism, eps0=point["eps0"], n=int(point["n"]), eps=point["eps"],
                            delta=point["delta"], **params))]

    return _cached(kind, mechanism, point, params, compute)[0] == 1.0


def delta(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> tuple[float, float]:
    """(certified delta, lower bound or NaN) from ``tablegen.engine.delta_bounds``."""
    def compute() -> list[float]:
        from tablegen.engine import delta_bounds

        b = delta_bounds(mechanism, eps0=point["eps0"], n=int(point["n"]), eps=point["eps"], **params)
        return [b.upper, math.nan if b.lower is None else b.lower]

    return tuple(_cached("delta", mechanism, point, params, compute))  # type: ignore[return-value]


def delta_upper(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> float:
    """Certified delta alone (one engine evaluation), from ``tablegen.engine.delta_bounds``."""
    def compute() -> list[float]:
        from tablegen.engine import delta_bounds

        return [delta_bounds(mechanism, eps0=point["eps0"], n=int(point["n"]), eps=point["eps"], lower=False,
                             **params).upper]

    return _cached("delta_upper", mechanism, point, params, compute)[0]


def eps0_max(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> float:
    """Largest certified eps0 from ``tablegen.engine.eps0_max``."""
    def compute() -> list[float]:
        from tablegen.engine import eps0_max as engine_eps0_max

        return [engine_eps0_max(mechanism, eps=point["eps"], n=int(point["n"]), delta=point["delta"], **params)]

    return _cached("eps0_max", mechanism, point, params, compute)[0]


def composed_eps(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> float:
    """Certified eps of ``point["rounds"]`` identical rounds, ``tablegen.compose.eps``'s value (each
    user taking part with probability ``point["sample_rate"]``, 1 when absent), from the round's
    PLD kept in memory (``ROUNDS_KEPT``): the first question of a round samples its profile (tens
    of ms), any number of rounds after it only self-composes (milliseconds)."""
    def compute() -> list[float]:
        from tablegen import compose

        key = json.dumps([mechanism, point["eps0"], int(point["n"]), point.get("sample_rate", 1.0), params],
                         sort_keys=True, default=str)
        single = _ROUNDS.get(key) or compose.one_round(mechanism, eps0=point["eps0"], n=int(point["n"]),
                                                        sample_rate=point.get("sample_rate", 1.0), **params)
        _ROUNDS.put(key, single)
        return [compose.eps_from_round(single, rounds=int(point["rounds"]), delta=point["delta"]).eps]

    return _cached("composed_eps", mechanism, point, params, compute)[0]


def cached(kind: str, mechanism: str, point: dict[str, float], params: dict[str, Any], compute: Any,
           recertified: Any) -> list[float]:
    """``compute()`` (a list of floats, the first the certified value) cached as the engine's answers
    here are, for a mechanism the engine answers outside its registry (lookup/answer/gaussian.py):
    a value read back from disk is used only where ``recertified(value)`` (one engine evaluation)
    says it is still certified."""
    def check(value: float) -> bool:
        try:
            return math.isfinite(value) and value >= 0 and bool(recertified(value))
        except ValueError:
            return False

    return _cached(kind, mechanism, point, params, compute, check)


def _cached(kind: str, mechanism: str, point: dict[str, float], params: dict[str, Any], compute: Any,
            recertified: Any = None) -> list[float]:
    from tablegen import ENGINE_VERSION

    key = json.dumps([kind, mechanism, point, params, ENGINE_VERSION], sort_keys=True, default=str)
    if key not in _MEMORY:
        on_disk = kind not in VERDICTS
        hit = _disk_read(key) if on_disk else None
        if hit is None or not (recertified(hit[0]) if recertified is not None
                               else _recertified(kind, mechanism, point, params, hit[0])):
            hit = tuple(compute())
            if on_disk:
                _disk_write(key, hit)
        _MEMORY[key] = hit
    return list(_MEMORY[key])


_MEMORY: dict[str, tuple[float, ...]] = {}
VERDICTS = ("certifies", "proves_above")  # one evaluation each: recomputed, never read from disk


def _recertified(kind: str, mechanism: str, point: dict[str, float], params: dict[str, Any], value: float) -> bool:
    """Whether the engine certifies a cached ``value`` again, by one evaluation of
    ``tablegen.engine.certifies``: eps at (eps0, n, delta), delta at (eps0, n, eps), eps0 at
    (n, eps, delta) (a largest certified eps0); composed answers: True (no such check)."""
    from tablegen.engine import certifies

    if kind == "composed_eps":
        return True
    at = {"eps0": point.get("eps0"), "eps": point.get("eps"), "delta": point.get("delta")}
    at[{"eps": "eps", "eps_upper": "eps", "delta": "delta", "delta_upper": "delta", "eps0_max": "eps0"}[kind]] = value
    if not (math.isfinite(value) and value >= 0 and 0 < at["delta"] < 1 and at["eps0"] > 0):
        return False
    try:
        return bool(certifies(mechanism, eps0=at["eps0"], n=int(point["n"]), eps=at["eps"], delta=at["delta"],
                              **params))
    except ValueError:
        return False


def _disk_path(key: str) -> Path | None:
    root = os.environ.get(ENV_CACHE)
    if not root:
        return None
    return Path(root) / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def _disk_read(key: str) -> tuple[float, ...] | None:
    path = _disk_path(key)
    if path is None or not path.is_file():
        return None
    try:
        record = json.loads(trust.read_small(path))
        value = tuple(float(v) for v in record["value"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.get("key") != key or not trust.authentic(_signed_text(key, value), record.get("mac")):
        return None  # planted, edited, or written under another user's secret
    return value


def _signed_text(key: str, value: tuple[float, ...]) -> str:
    """What an entry's HMAC covers: its key and its values' exact text."""
    return json.dumps([key, [repr(v) for v in value]])


def _disk_write(key: str, value: tuple[float, ...]) -> None:
    path = _disk_path(key)
    tag = None if path is None else trust.mac(_signed_text(key, value))
    if path is None or tag is None:
        return  # no cache directory, or no secret to authenticate the entry with: memory only
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary name unique per thread and process, created exclusively; a lost entry is recomputed: no fsync
    trust.atomic_write(path, json.dumps({"key": key, "value": list(value), "mac": tag}), mode=0o600, durable=False)
