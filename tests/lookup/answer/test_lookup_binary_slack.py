"""Binary randomized response (k-RR, k = 2) in lookup (issue 54): the engine certifies it at the exact
worst case over datasets, 10-40% below the blanket bound a table's k = 2 row holds, so a table
answer's slack is measured against the row's lower bound, never against the row's own (blanket)
values, which claimed "slack 0" at grid points.  Checked against the engine's exact path computed
here (``tablegen.engine``) and exact enumeration of every dataset
(``shuffle_reference.binary_rr_delta``), independent of lookup: the slack claimed is never below the
answer's real excess; refined answers are certified and within 1% of the exact value; the row's
rows of other k keep their estimate; the service neither slices nor lets these long refinements
take every refinement worker."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shuffle_reference import binary_rr_delta

import lookup
from lookup.format import exact_worst_case

SPEC = """
title = "binary RR test table"
[axes]
eps0 = [0.5, 1.0, 2.0, 3.0]
n = [300, 1000, 3000, 10000]
delta = [1e-8, 1e-6, 1e-4]
[settings]
resolution = 10
lower_resolution = 30
lower_every = [1, 1]
[[mechanism]]
family = "krr"
k = [2, 3]
"""
GRID = [(e0, n, d) for e0 in (0.5, 1.0, 2.0, 3.0) for n in (3000, 10000) for d in (1e-8, 1e-6, 1e-4)]


@pytest.fixture(scope="module")
def binary_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tablegen.build import build
    from tablegen.spec import spec_from_dict

    out = tmp_path_factory.mktemp("binary") / "binary.zarr"
    build(spec_from_dict(tomllib.loads(SPEC), "binary-rr"), out, workers=0, progress=False, log=lambda _: None)
    return out


@functools.cache
def exact_eps(eps0: float, n: int, delta: float) -> tuple[float, float]:
    """(below, above) the exact eps of shuffled binary RR by bisection on the exact delta of every
    dataset: delta(below) > delta >= delta(above), above / below - 1 < 1e-7."""
    below, above = 0.0, eps0
    while above - below > 1e-7 * above:
        middle = (below + above) / 2
        below, above = (below, middle) if binary_rr_delta(eps0, middle, n) <= delta else (middle, above)
    return below, above


@functools.cache
def exact_eps0_max(eps: float, n: int, delta: float, top: float) -> tuple[float, float]:
    """(below, above) the largest eps0 in [eps, top] whose exact eps is <= ``eps`` (exact delta at
    eps <= delta), by bisection: the exact eps is non-decreasing in eps0."""
    below, above = eps, top
    while above - below > 1e-7 * above:
        middle = (below + above) / 2
        below, above = (middle, above) if binary_rr_delta(middle, eps, n) <= delta else (below, middle)
    return below, above


def engine(eps0: float, n: int, delta: float) -> Any:
    from tablegen.engine import eps_bounds

    return eps_bounds("krr", eps0=eps0, n=n, delta=delta, k=2)


def test_the_engine_and_lookup_name_the_same_rows() -> None:
    from tablegen.engine import binary
    from tablegen.engine.bounds import Query

    for params in ({"k": 2}, {"k": 2.0}, {"k": 3}, {"k": 10}):
        assert binary.applies(Query("krr", 1.0, 100, dict(params))) == exact_worst_case("krr", params)
    assert exact_worst_case("krr", {"k": 2}) and exact_worst_case("krr", {"k": 2, "g": None})
    assert not exact_worst_case("generic", {}) and not exact_worst_case("olh", {"g": 2})
    assert not exact_worst_case("joint", {"base": "krr", "k": 2})
    assert not binary.applies(Query("generic", 1.0, 100, {}))


def test_table_answers_never_claim_less_slack_than_the_engine_leaves(binary_table: Path) -> None:
    """At grid points the table's k = 2 row holds the blanket bound; the slack claimed (measured against
    the row's lower bound) is at least the answer's excess over the engine's certified value, and far
    from 0 (it was 0 at every grid point).  The k = 3 row keeps its estimate (0 at grid points)."""
    eps0, n, delta = (np.array(v, float) for v in zip(*GRID, strict=True))
    a = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=binary_table, max_slack=None, k=2)
    assert (a.source == "table").all() and not a.edge.any()
    for i, point in enumerate(GRID):
        live = engine(*point)
        assert a.slack[i] >= a.value[i] / live.upper - 1 - 1e-12, point
        if point[1] == 10000:  # the largest n: the row's own lower bound, near the exact eps (at smaller n
            # one the build declined is the larger n's: still a lower bound, further below)
            assert a.slack[i] <= 1.02 * a.value[i] / live.lower - 1, point
        one = lookup.eps("krr", eps0=point[0], n=point[1], delta=point[2], table=binary_table, max_slack=None, k=2)
        assert one.value == a.value[i] and one.slack == pytest.approx(a.slack[i], rel=1e-12)  # the scalar path
    assert np.median(a.slack) > 0.1 and (a.slack[n == 10000] > 0.1).all()
    other = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=binary_table, max_slack=None, k=3)
    assert (other.slack == 0).all()


@pytest.mark.parametrize(("eps0", "n", "delta"), [(1.0, 300, 1e-6), (2.0, 300, 1e-4), (1.37, 377, 3e-7)])
def test_table_answers_and_their_refinement_against_exact_enumeration(binary_table: Path, eps0: float, n: int,
                                                                     delta: float) -> None:
    below, above = exact_eps(eps0, n, delta)
    table = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=binary_table, max_slack=None, k=2)
    assert table.source == "table" and table.value >= above
    assert not table.slack < table.value / above - 1  # never below the answer's excess (NaN: unknown)
    a = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=binary_table, k=2)
    assert a.source in ("certified estimate", "live") and a.slack <= 0.0098 + 1e-12
    assert binary_rr_delta(eps0, a.value, n) <= delta * (1 + 1e-9)  # certified
    assert a.value <= 1.01 * above < table.value  # within 1% of the exact eps
    assert a.lower <= below  # a lower bound
    quick = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=binary_table, k=2, quick=True)
    assert binary_rr_delta(eps0, quick.value, n) <= delta * (1 + 1e-9) and quick.value < table.value


def test_delta_slack_and_refinement(binary_table: Path) -> None:
    from tablegen.engine import delta_bounds

    for eps0, n, eps in [(1.0, 300, 0.25), (2.0, 300, 0.7), (2.0, 3000, 0.2)]:
        table = lookup.delta("krr", eps0=eps0, n=n, eps=eps, table=binary_table, max_slack=None, k=2)
        live = delta_bounds("krr", eps0=eps0, n=n, eps=eps, k=2)
        assert table.source == "table" and table.value > 10 * live.upper  # the blanket bound: far above
        assert not table.slack < table.value / live.upper - 1  # NaN (unknown) or at least the excess
        refined = lookup.delta("krr", eps0=eps0, n=n, eps=eps, table=binary_table, k=2)
        assert refined.source == "live" and refined.value <= live.upper * (1 + 1e-12)
        if n <= 300:
            exact = binary_rr_delta(eps0, eps, n)
            assert refined.lower <= exact <= refined.value <= 1.03 * exact


def test_eps0_max_slack_and_refinement(binary_table: Path) -> None:
    eps, n, delta = 0.15, 300, 1e-6
    below, above = exact_eps0_max(eps, n, delta, 3.0)
    table = lookup.eps0_max("krr", eps=eps, n=n, delta=delta, table=binary_table, max_slack=None, k=2)
    assert table.source == "table" and table.value <= below
    assert not table.value * (1 + table.slack) < above  # the slack claimed covers the exact eps0_max
    a = lookup.eps0_max("krr", eps=eps, n=n, delta=delta, table=binary_table, k=2)
    assert a.source == "certified estimate" and a.slack <= 0.0098 + 1e-12
    assert binary_rr_delta(a.value, eps, n) <= delta * (1 + 1e-9)  # certified: the exact eps there is <= eps
    assert a.value >= 0.99 * below  # within 1% of the exact eps0_max (the engine's own search: 0.92 of it)
    from tablegen.engine import certifies

    for eps, n in [(0.15, 10000), (0.05, 10000)]:  # the slack claimed reaches an eps0 the engine refuses
        table = lookup.eps0_max("krr", eps=eps, n=n, delta=delta, table=binary_table, max_slack=None, k=2)
        assert table.source == "table" and table.slack > 0.1
        assert not certifies("krr", eps0=table.value * (1 + table.slack), n=n, eps=eps, delta=delta, k=2)
        assert certifies("krr", eps0=table.value * 1.1, n=n, eps=eps, delta=delta, k=2)  # the table: far below


def test_a_device_file_of_the_row_reports_the_same_slack(binary_table: Path, tmp_path: Path) -> None:
    from tablegen.export import export_device

    device = tmp_path / "krr2.dev"
    export_device(device, "krr", {"k": 2}, str(binary_table))
    for eps0, n, delta in GRID[::3]:
        a = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=str(device), max_slack=None, k=2)
        assert a.source == "table" and a.slack >= a.value / engine(eps0, n, delta).upper - 1 - 1e-12
        if n == 10000:
            assert a.slack > 0.1


def test_lookup_decides_without_importing_the_engine() -> None:
    """Which rows are measured against their lower bound is decided by lookup.format (standard
    library), which both sides import: loading lookup imports no part of tablegen."""
    code = ("import sys, lookup, lookup.answer.rules, lookup.answer.api, lookup.format\n"
            "print(lookup.format.exact_worst_case('krr', {'k': 2}), 'tablegen' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]


class _Pool:
    """The refinement pool as ``Refiner`` uses it: tasks recorded, never run."""

    def __init__(self) -> None:
        self.inflight: dict[str, Any] = {}
        self.submitted: list[str] = []

    def submit(self, key: str, kind: str, timeout: float, function: Any, *args: Any, keep: bool = True) -> Any:
        from concurrent.futures import Future

        if key in self.inflight:
            return self.inflight[key]
        self.submitted.append(key)
        self.inflight[key] = Future()
        return self.inflight[key]

    def has_room(self, kind: str) -> bool:
        return True


def test_the_service_keeps_a_worker_from_long_refinements_and_no_slice(binary_table: Path) -> None:
    pytest.importorskip("pebble")
    from lookup.service.pool import Busy
    from lookup.service.refiner import Refiner
    from lookup.service.settings import Settings

    pool, slices = _Pool(), _Pool()
    refiner = Refiner(Settings(refine_workers=2), pool, lookup.open_table(binary_table), "t", slices)
    kwargs = {"eps0": 2.0, "n": 10000.0, "delta": 1e-6}
    for _ in range(3):  # an eps0 asked again starts its slice, except for binary RR (the slice engine: blanket)
        assert refiner.from_slice("krr", {**kwargs, "k": 2.0}, {"eps": 1.0}) == {"eps": 1.0}
    assert slices.submitted == []
    for _ in range(3):
        refiner.from_slice("krr", {**kwargs, "k": 3.0}, {"eps": 1.0})
    assert len(slices.submitted) == 1
    first = refiner.submit("a", True, "eps", "krr", {**kwargs, "k": 2.0}, 0.02)
    assert refiner.submit("a", True, "eps", "krr", {**kwargs, "k": 2.0}, 0.02) is first  # the one in flight
    with pytest.raises(Busy):  # a second long refinement would hold the last refinement worker
        refiner.submit("b", True, "eps", "krr", {**kwargs, "eps0": 1.0, "k": 2.0}, 0.02)
    refiner.submit("c", False, "eps", "krr", {**kwargs, "k": 3.0}, 0.02)  # others are not held back
    first.set_result({})
    del pool.inflight["a"]
    assert refiner.slow == set()
    refiner.submit("b", True, "eps", "krr", {**kwargs, "eps0": 1.0, "k": 2.0}, 0.02)
    assert pool.submitted == ["a", "c", "b"]


def test_the_service_answers_at_once_then_refined(binary_table: Path, tmp_path: Path) -> None:
    """A k = 2 question at a grid point: the table's answer at once with its true slack (far from 0,
    so never "as tight as the engine" on the page), then refined within 1% of the engine's lower
    bound on the exact eps."""
    pytest.importorskip("pebble")
    from conftest import HttpServer
    from test_lookup_serve import get

    server = HttpServer(binary_table, tmp_path, "--live-workers", "1")
    try:
        query = f"{server.base}/v1/eps?mechanism=krr&k=2&eps0=2&n=10000&delta=1e-6"
        live = engine(2.0, 10000, 1e-6)
        table = json.loads(get(query + "&max_slack=none")[1])
        assert table["source"] == "table" and table["slack"] >= table["eps"] / live.upper - 1 > 0.1
        start = time.perf_counter()
        first = json.loads(get(query)[1])
        assert time.perf_counter() - start < 2 and first["certified"]
        assert first["eps"] <= table["eps"] and (first.get("refined") is not False or first["slack"] > 0.1)
        answer, deadline = first, time.monotonic() + 60
        while (answer.get("refined") is False or answer["slack"] is None) and time.monotonic() < deadline:
            time.sleep(0.2)  # the quick refinement (slack unknown), then the full one
            answer = json.loads(get(query)[1])
        assert answer["source"] in ("certified estimate", "live") and answer["slack"] <= 0.0098 + 1e-12
        assert live.lower <= answer["eps"] <= 1.01 * live.lower
    finally:
        server.stop()
