"""What the service's worker processes run (``lookup/service/pool.py``): the library's answer
with live computation on, and rounds composed; each reads the table its worker mapped
(``worker_table``)."""

from __future__ import annotations

from typing import Any

import lookup
from lookup.answer.api import json_ready
from lookup.service.pool import worker_table


def worker_answer(kind: str, mechanism: str, kwargs: dict[str, Any], max_slack: float | None,
                   quick: bool = False) -> dict[str, Any]:
    """The library's answer with live computation on (runs in a worker process); ``quick``: an eps
    refinement by one engine evaluation where it suffices (``lookup.eps(quick=True)``)."""
    extra = {"quick": True} if quick else {}
    answer = getattr(lookup, kind)(mechanism, table=worker_table(), live=True, max_slack=max_slack, **kwargs, **extra)
    body = json_ready(kind, answer)
    return {**body, "refuted": answer.refuted} if answer.refuted else body  # for Refiner.improve, never sent


def worker_composed(mechanism: str, kwargs: dict[str, Any], composition: dict[str, Any], live: bool,
                     max_slack: float | None) -> dict[str, Any]:
    """``lookup.eps(..., rounds=T[, sample_rate=q])`` as ``lookup eps --rounds T --json`` prints it
    (runs in a worker process: the engine's composition, tens of ms once the worker is warm; the
    table's curve with ``max_slack`` None)."""
    answer = lookup.eps(mechanism, table=worker_table(), live=live, max_slack=max_slack, **kwargs, **composition)
    body = json_ready("eps", answer, composition["rounds"])
    return {**body, **({"sample_rate": composition["sample_rate"]} if "sample_rate" in composition else {})}


__all__ = ["worker_answer", "worker_composed"]
