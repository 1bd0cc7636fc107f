"""Table answers refined without making anyone wait (``Refiner``): from an eps0 slice kept, or by
the library's refinement in a worker reserved for refinements, waited for a few milliseconds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import operator
from typing import Any

from lookup.answer import slices
from lookup.answer.api import loose
from lookup.answer.lru import LRU
from lookup.answer.params import HELP
from lookup.answer.refine import where
from lookup.device.files import canonical
from lookup.format import exact_worst_case
from lookup.service.pool import Busy, Pool
from lookup.service.schema import ENDPOINT_VALUE
from lookup.service.settings import Settings
from lookup.service.tasks import worker_answer
from lookup.store.table import Table, TableError


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
    none) (``worker_answer(..., quick=True)``); its second asking is answered from it and starts
    the full refinement (bracketed against a value the engine refused, and the engine's lower
    bound proved near it), which answers from then on.  A question asked once costs one
    evaluation where the estimate is good (135 of 136 random questions: within 0.6% of the
    engine's eps, median +0.55%).

    Refinements of binary RR (``lookup.format.exact_worst_case``: k-RR with k = 2, whose table rows
    hold the blanket bound, 20-43% above what the engine certifies) run the engine's exact path:
    0.05-1 s at n <= 1e7, seconds near 1e9, not a few milliseconds.  They are started like any
    other (the table's answer given at once, "refined": false, the refinement kept for the next
    asking), but such long tasks (these and rounds questions, ``slow``) hold at most
    ``refine_workers`` - 1 refinement workers at once (one where there is only one), so that the
    others' refinements keep a worker; beyond that one is not started (answered unrefined, tried
    again at the next asking).  Nor is an eps0 slice kept for them: the slice engine holds the
    blanket bound."""

    def __init__(self, settings: Settings, pool: Pool, table: Table, prefix: str,
                 slice_pool: Pool | None = None, ready: Any = None) -> None:
        self.settings, self.pool, self.table, self.prefix = settings, pool, table, prefix
        self.ready = ready or (lambda: True)  # False while the service warms up: nothing is started
        self.slice_pool = slice_pool or pool
        self.slices = LRU(settings.slice_cache)  # eps0 slices
        self.asked = LRU(4096)  # eps0 slices asked for once (started at the second asking)
        self.failed: set[str] = set()  # slices the engine refused (not tried again)
        self.axes: tuple[list[int], list[float]] | None = None
        # long tasks in refinement workers: rounds questions (``Service.composing``, this set) and
        # binary RR's refinements; at most refine_workers - 1 of them at once
        self.slow: set[str] = set()

    def key(self, kind: str, mechanism: str, kwargs: dict[str, Any], max_slack: float | None) -> str:
        """The pool's key of a query: the table, the engine version and the canonical query."""
        return json.dumps([self.prefix, kind, mechanism, kwargs, max_slack], sort_keys=True, default=str)

    async def improve(self, kind: str, mechanism: str, kwargs: dict[str, Any], max_slack: float | None,
                      body: dict[str, Any]) -> dict[str, Any]:
        if not self.ready():  # warming up: the table's certified answer at once, no refinement queued
            return {**body, "refined": False}  # (behind the workers' warm-up it would only add to the wait)
        key = self.key(kind, mechanism, kwargs, max_slack)
        quick = kind == "eps"
        slow = exact_worst_case(mechanism, {k: v for k, v in kwargs.items() if k in HELP})
        refined = self.pool.cached(key)
        if quick and refined is None:
            refined = self.pool.cached(key + " quick")
            if refined is not None:  # asked again: the full refinement (its lower bound), for later askings
                with contextlib.suppress(Busy):
                    self.submit(key, slow, kind, mechanism, kwargs, max_slack)
        if quick and refined is None and "via" not in body:  # (a borrowed row's answer: its slice was asked)
            body = self.from_slice(mechanism, kwargs, body)
            if not too_loose(body, max_slack):
                return body
        if refined is None:
            try:
                future = self.submit(key + " quick" if quick else key, slow, kind, mechanism, kwargs, max_slack, quick)
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

    def submit(self, key: str, slow: bool, *args: Any) -> asyncio.Future:
        """The refinement ``worker_answer(*args)`` started (or the one in flight) in a refinement
        worker; ``slow`` (binary RR's exact path): counted in ``self.slow`` and refused (``Busy``) where
        long tasks already hold ``refine_workers`` - 1 workers (one where there is only one)."""
        if slow and key not in self.pool.inflight and len(self.slow) >= max(1, self.settings.refine_workers - 1):
            raise Busy("the refinement workers for long refinements are taken")
        future = self.pool.submit(key, "background", self.settings.live_timeout, worker_answer, *args)
        if slow and key not in self.slow:
            self.slow.add(key)
            future.add_done_callback(lambda _: self.slow.discard(key))
        return future

    def from_slice(self, mechanism: str, kwargs: dict[str, Any], body: dict[str, Any] | None) -> Any:
        """``body`` (the table's answer; None: the table has none) read from the slice at the
        query's eps0 where one is kept and better; the slice started where none is kept and eps0
        is inside the table's range.  Never for binary RR (``lookup.format.exact_worst_case``): the
        slice engine (``engine.dense``) holds the blanket bound, 20-43% above the engine's exact path,
        so a slice would be slower than the refinement and far looser."""
        params = {k: v for k, v in kwargs.items() if k in HELP}
        if exact_worst_case(mechanism, params):
            return body
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


def too_loose(body: dict[str, Any], max_slack: float | None) -> bool:
    """Whether a table answer's slack estimate is above ``max_slack`` or unknown."""
    return bool(loose(body["source"], math.nan if body["slack"] is None else body["slack"], max_slack).any())


__all__ = ["Refiner", "too_loose"]
