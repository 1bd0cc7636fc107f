"""Live answers from the engine (imported lazily: ``tablegen`` is the heavy side), cached.

The cache is in memory and, when ``$SHUFFLE_EPS_CACHE`` names a directory, also on disk (one
JSON file per answer, written atomically), keyed by the query, the mechanism's parameters and
the engine version: a cached value is the engine's certified value (or its verdict on a
candidate, ``certifies``), never an interpolation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

ENV_CACHE = "SHUFFLE_EPS_CACHE"


def available() -> bool:
    return importlib.util.find_spec("tablegen") is not None and importlib.util.find_spec("scipy") is not None


def eps(mechanism: str, point: dict[str, float], params: dict[str, Any]) -> tuple[float, float]:
    """(certified eps, lower bound or NaN) from ``tablegen.engine.eps_bounds``."""
    def compute() -> list[float]:
        from tablegen.engine import eps_bounds

        b = eps_bounds(mechanism, eps0=point["eps0"], n=int(point["n"]), delta=point["delta"], **params)
        return [b.upper, math.nan if b.lower is None else b.lower]

    return tuple(_cached("eps", mechanism, point, params, compute))  # type: ignore[return-value]


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
    """Certified eps of ``point["rounds"]`` identical rounds from ``tablegen.compose.eps`` (each user
    taking part with probability ``point["sample_rate"]``, 1 when absent)."""
    def compute() -> list[float]:
        from tablegen import compose

        return [compose.eps(mechanism, eps0=point["eps0"], n=int(point["n"]), rounds=int(point["rounds"]),
                            delta=point["delta"], sample_rate=point.get("sample_rate", 1.0), **params).eps]

    return _cached("composed_eps", mechanism, point, params, compute)[0]


def _cached(kind: str, mechanism: str, point: dict[str, float], params: dict[str, Any], compute: Any) -> list[float]:
    from tablegen import ENGINE_VERSION

    key = json.dumps([kind, mechanism, point, params, ENGINE_VERSION], sort_keys=True, default=str)
    return list(_memory(key, compute))


_MEMORY: dict[str, tuple[float, ...]] = {}


def _memory(key: str, compute: Any) -> tuple[float, ...]:
    if key not in _MEMORY:
        hit = _disk_read(key)
        if hit is None:
            hit = tuple(compute())
            _disk_write(key, hit)
        _MEMORY[key] = hit
    return _MEMORY[key]


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
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return tuple(record["value"]) if record.get("key") == key else None


def _disk_write(key: str, value: tuple[float, ...]) -> None:
    path = _disk_path(key)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")  # unique per thread and process
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"key": key, "value": list(value)}))
    os.replace(tmp, path)
