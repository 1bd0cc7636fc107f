"""max_slack and estimate-then-certify: refined answers are certified (exact sums of the k-RR and
clone laws, independent of the engine and the table), never above the table, labelled by source;
table-only answers never touch the engine; k-RR between grid k is answered from a smaller k."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shuffle_reference import clone_law, exact_delta, krr_lower_laws, krr_upper_law, olh_upper_law

import lookup
import lookup.answer.live
from lookup.answer import refine
from lookup.answer.estimate import pchip

EPS0 = st.floats(0.55, 3.9)
N = st.integers(21, 100)
DELTA = st.floats(1.1e-9, 9e-4).map(float)
SETTINGS = settings(max_examples=20, deadline=None, derandomize=True)
SOURCES = {"table", "certified estimate", "live"}


def law(mechanism: str, eps0: float, eps: float, k: int = 3) -> tuple[list[float], list[float]]:
    return krr_upper_law(eps0, eps, k) if mechanism == "krr" else clone_law(eps0, eps)


def params(mechanism: str) -> dict:
    return {"k": 3} if mechanism == "krr" else {}


@pytest.mark.parametrize("k", [2, 3, 4])
def test_pchip_matches_scipy(k: int) -> None:
    from scipy.interpolate import PchipInterpolator

    rng = np.random.default_rng(k)
    x = np.sort(rng.uniform(0, 10, (50, k)), axis=1)
    y = rng.normal(size=(50, 3, k))
    t = rng.uniform(x[:, 0], x[:, -1])
    expected = np.array([PchipInterpolator(x[i], y[i], axis=1)(t[i]) for i in range(50)])
    assert np.allclose(pchip(x, y, t), expected, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(mechanism=st.sampled_from(["krr", "generic"]), eps0=EPS0, n=N, delta=DELTA)
def test_refined_eps_is_certified_and_never_above_the_table(table_path: Path, mechanism: str, eps0: float, n: int,
                                                            delta: float) -> None:
    table = lookup.eps(mechanism, eps0=eps0, n=n, delta=delta, table=table_path, max_slack=None, **params(mechanism))
    a = lookup.eps(mechanism, eps0=eps0, n=n, delta=delta, table=table_path, max_slack=0.0, **params(mechanism))
    assert table.source == "table" and a.source in SOURCES
    assert a.value <= table.value
    assert exact_delta(*law(mechanism, eps0, a.value), n) <= delta * (1 + 1e-9)
    if mechanism == "krr" and np.isfinite(a.lower) and a.lower > 0:  # the lower bound, proved or the table's
        assert max(exact_delta(*law_, n) for law_ in krr_lower_laws(eps0, a.lower, 3)) > delta
    if a.source == "certified estimate":
        assert a.slack <= refine.STEP * (1 + 1e-9) and a.value < table.value
    if a.source == "table":
        assert a.value == table.value


@SETTINGS
@given(mechanism=st.sampled_from(["krr", "generic"]), eps0=EPS0, n=N, eps=st.floats(0.05, 2.0))
def test_refined_delta_and_eps0_max_are_certified(table_path: Path, mechanism: str, eps0: float, n: int,
                                                   eps: float) -> None:
    kw = dict(table=table_path, **params(mechanism))
    table = lookup.delta(mechanism, eps0=eps0, n=n, eps=eps, max_slack=None, **kw)
    a = lookup.delta(mechanism, eps0=eps0, n=n, eps=eps, **kw)
    assert a.value <= table.value and a.source in {"table", "live"}
    assert exact_delta(*law(mechanism, eps0, eps), n) <= a.value * (1 + 1e-9)
    table_budget = lookup.eps0_max(mechanism, eps=eps, n=n, delta=1e-6, max_slack=None, **kw)
    budget = lookup.eps0_max(mechanism, eps=eps, n=n, delta=1e-6, **kw)
    assert budget.value >= table_budget.value and budget.source in SOURCES
    assert exact_delta(*law(mechanism, budget.value, eps), n) <= 1e-6 * (1 + 1e-9)


def test_eps0_max_refined_close_to_live(table_path: Path) -> None:
    """The default route answers within 1% below the engine's eps0_max (its own max_slack, 1%)."""
    from tablegen.engine import eps0_max

    for eps, n in [(0.9, 50), (0.6, 70), (1.2, 30), (0.45, 120), (0.3, 300), (1.5, 25)]:
        a = lookup.eps0_max("krr", eps=eps, n=n, delta=1e-6, table=table_path, k=3)
        live = eps0_max("krr", eps=eps, n=n, delta=1e-6, k=3)
        assert live * (1 - 0.01) <= a.value <= live * (1 + 1e-3), (eps, n, a, live)


@pytest.fixture()
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any call into the engine fails the test."""
    def refuse(*args: object) -> None:
        raise AssertionError("the engine was called")

    monkeypatch.setattr(lookup.answer.live, "_cached", refuse)
    monkeypatch.setitem(sys.modules, "tablegen.engine", None)  # import tablegen.engine raises


def test_max_slack_none_never_calls_the_engine(table_path: Path, no_engine: None) -> None:
    rng = np.random.default_rng(4)
    eps0, n, delta = rng.uniform(0.5, 4, 40), rng.integers(20, 500, 40), 10 ** rng.uniform(-9, -2, 40)
    a = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=table_path, max_slack=None, k=3)
    assert np.all(a.source == "table") and np.nanmax(a.slack) > 0.02
    for i in range(5):
        assert lookup.eps("generic", eps0=eps0[i], n=int(n[i]), delta=delta[i], table=table_path,
                          max_slack=None).source == "table"
    eps = a.value * 1.01  # inside the table's curves
    assert np.all(lookup.delta("krr", eps0=eps0, n=n, eps=eps, table=table_path, max_slack=None, k=3).source
                  == "table")
    assert np.all(lookup.eps0_max("krr", eps=eps, n=n, delta=delta, table=table_path, max_slack=None, k=3).source
                  == "table")


def test_scalar_answers_within_max_slack_stay_engine_free(table_path: Path, no_engine: None) -> None:
    t = lookup.open_table(table_path)
    a = lookup.eps("krr", eps0=2.0, n=40, delta=1e-5, table=t, k=3)  # grid eps0 and n: slack 0
    assert a.source == "table" and a.slack == 0.0


def test_live_off_or_no_engine_answers_from_the_table(table_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    query = dict(eps0=1.5, n=50, delta=1e-6, table=table_path, k=3)
    a = lookup.eps("krr", live=False, **query)
    assert a.source == "table" and a.slack > 0.02  # reported, not refined
    monkeypatch.setattr(lookup.answer.live, "available", lambda: False)
    b = lookup.eps("krr", **query)
    assert (b.value, b.source, b.slack) == (a.value, a.source, a.slack)


def test_an_uncertified_estimate_is_never_published(table_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tablegen.engine import eps_bounds

    query = dict(eps0=1.5, n=50, delta=1e-6, table=table_path, k=3)
    table = lookup.eps("krr", max_slack=None, **query)
    monkeypatch.setattr(lookup.answer.live, "certifies", lambda *args: False)
    a = lookup.eps("krr", **query)
    live = eps_bounds("krr", eps0=1.5, n=50, delta=1e-6, k=3, lower=False).upper
    assert (a.source, a.value) == (("live", live) if live < table.value else ("table", table.value))

    def broken(*args: object) -> None:
        raise ValueError("engine cannot answer")

    monkeypatch.setattr(lookup.answer.live, "certifies", broken)
    monkeypatch.setattr(lookup.answer.live, "eps_upper", broken)
    b = lookup.eps("krr", **query)
    assert (b.value, b.source, b.slack) == (table.value, "table", table.slack)


def test_max_slack_is_checked(table_path: Path) -> None:
    for bad in ("0.1", float("nan"), True, -1.0):
        with pytest.raises(ValueError, match=r"max_slack must be a number >= 0 .* or None"):
            lookup.eps("krr", eps0=1.5, n=50, delta=1e-6, table=table_path, max_slack=bad, k=3)


# --------------------------------------------------------------------------- k-RR between grid k, OLH between grid eps0

K_SPEC = """
title = "two k"
[axes]
eps0 = [1.0, 2.0, 4.0]
n = [20, 40]
delta = [1e-7, 1e-5, 1e-3]
[settings]
resolution = 5
lower_resolution = 10
[[mechanism]]
family = "krr"
k = [2, 5]
[[mechanism]]
family = "olh"
"""


@pytest.fixture(scope="module")
def two_k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tablegen.build import build
    from tablegen.spec import spec_from_dict

    out = tmp_path_factory.mktemp("two_k") / "k.zarr"
    build(spec_from_dict(tomllib.loads(K_SPEC), "two-k"), out, workers=0, progress=False, log=lambda _: None)
    return out


@settings(max_examples=30, deadline=None, derandomize=True)
@given(k=st.integers(2, 12), eps0=st.floats(0.2, 5.0), fraction=st.floats(0.05, 0.95), n=st.integers(1, 30))
def test_krr_delta_is_non_increasing_in_k(k: int, eps0: float, fraction: float, n: int) -> None:
    """The convex-order argument of rules.rows, checked by exact sums."""
    eps = fraction * eps0
    assert exact_delta(*krr_upper_law(eps0, eps, k + 1), n) <= exact_delta(*krr_upper_law(eps0, eps, k), n) + 1e-15


@pytest.mark.parametrize("k", [3, 4])
def test_krr_between_grid_k_is_answered_from_the_smaller_k(two_k: Path, k: int) -> None:
    rng = np.random.default_rng(k)
    for eps0, n, delta in zip(rng.uniform(1, 4, 6), rng.integers(20, 60, 6), 10 ** rng.uniform(-7, -3, 6),
                              strict=True):
        a = lookup.eps("krr", eps0=eps0, n=int(n), delta=delta, table=two_k, max_slack=None, k=k)
        smaller = lookup.eps("krr", eps0=eps0, n=int(n), delta=delta, table=two_k, max_slack=None, k=2)
        assert a.source == "table" and a.corner["k"] == 2 and a.value == smaller.value
        assert exact_delta(*krr_upper_law(eps0, a.value, k), int(n)) <= delta * (1 + 1e-9)
        if np.isfinite(a.lower) and a.lower > 0:  # from k = 5: still below the exact value at k
            assert max(exact_delta(*law_, int(n)) for law_ in krr_lower_laws(eps0, a.lower, k)) > delta
        refined = lookup.eps("krr", eps0=eps0, n=int(n), delta=delta, table=two_k, k=k)
        assert refined.value <= a.value and refined.source in SOURCES
        assert exact_delta(*krr_upper_law(eps0, refined.value, k), int(n)) <= delta * (1 + 1e-9)
    budget = lookup.eps0_max("krr", eps=0.8, n=40, delta=1e-5, table=two_k, max_slack=None, k=k)
    assert exact_delta(*krr_upper_law(budget.value, 0.8, k), 40) <= 1e-5 * (1 + 1e-9)


def test_krr_above_the_largest_grid_k(two_k: Path) -> None:
    a = lookup.eps("krr", eps0=2.0, n=40, delta=1e-5, table=two_k, max_slack=None, k=9)
    assert a.source == "table" and a.edge and np.isnan(a.slack) and a.corner["k"] == 5
    assert lookup.eps("krr", eps0=2.0, n=40, delta=1e-5, table=two_k, k=9).source == "live"  # slack unknown
    with pytest.raises(ValueError, match="k must be an integer"):  # not a k-RR: no row, the engine refuses
        lookup.eps("krr", eps0=2.0, n=40, delta=1e-5, table=two_k, k=2.5)


def test_olh_between_grid_eps0_is_estimated_and_certified(two_k: Path) -> None:
    """OLH's default g changes with eps0, so the table answers grid eps0 only; between them the
    estimate is certified at the query's own eps0 (and g) instead of a full search."""
    import math

    for eps0, n, delta in [(1.5, 30, 1e-6), (2.7, 25, 1e-4)]:
        a = lookup.eps("olh", eps0=eps0, n=n, delta=delta, table=two_k)
        assert a.source in ("certified estimate", "live") and np.isnan(a.lower)
        g = round(math.exp(eps0)) + 1
        assert exact_delta(*olh_upper_law(eps0, a.value, g), n) <= delta * (1 + 1e-9)
        with pytest.raises(lookup.TableError, match="live computation is off"):
            lookup.eps("olh", eps0=eps0, n=n, delta=delta, table=two_k, live=False)


def test_eps0_max_default_refines_table_answers_above_one_percent() -> None:
    """On the shipped table, an OLH answer whose slack estimate is 1.55% (between eps0_max's
    default max_slack, 1%, and that of eps and delta, 2%) is refined, and certified."""
    from lookup.store.table import shipped_table
    from tablegen.engine import certifies

    query = dict(eps=0.005632, n=539_014_385, delta=3.34e-6, table=shipped_table("default.zarr"))
    table = lookup.eps0_max("olh", max_slack=None, **query)
    assert table.source == "table" and 0.01 < table.slack <= 0.02, table
    a = lookup.eps0_max("olh", **query)
    assert a.source != "table" and a.value > table.value and a.slack <= 0.01, a
    assert certifies("olh", eps0=float(a.value), n=query["n"], eps=query["eps"], delta=query["delta"])


@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_refined_lower_bound_is_proved_and_close(delta: float) -> None:
    """refine.lower_eps publishes ratio * value / (1 + LOWER_STEP) only when the engine proves it:
    the exact delta of a k-RR lower-bound pair there exceeds delta (enumeration, n = 1000), and
    it sits within about 2% of the certified value (k-RR's pairs are tight)."""
    from tablegen.engine import eps_bounds

    eps0, n, k = 1.0, 1000, 3
    value = eps_bounds("krr", eps0=eps0, n=n, delta=delta, lower=False, k=k).upper
    point = {"eps0": eps0, "n": n, "delta": delta}
    lower = refine.lower_eps("krr", point, {"k": k}, value, float("nan"), float("nan"))
    assert value / (1 + refine.LOWER_STEP) == lower
    assert max(exact_delta(*law_, n) for law_ in krr_lower_laws(eps0, lower, k)) > delta
    assert refine.lower_eps("krr", point, {"k": k}, value, 0.5 * value, 0.999) == pytest.approx(0.999 * lower)


def test_refined_lower_bound_keeps_the_table_value_when_not_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    tried = []
    monkeypatch.setattr(lookup.answer.live, "proves_above", lambda m, point, p: tried.append(point["eps"]) or False)
    point = {"eps0": 2.0, "n": 10**6, "delta": 1e-8}
    assert refine.lower_eps("generic", point, {}, 0.05, 0.02, 0.7) == 0.02
    assert tried == [pytest.approx(0.7 * 0.05 / (1 + refine.LOWER_STEP))]
    assert refine.lower_eps("generic", point, {}, 0.05, 0.04, 0.7) == 0.04 and len(tried) == 1  # no gain: not tried


@SETTINGS
@given(mechanism=st.sampled_from(["krr", "generic"]), eps0=EPS0, n=st.integers(20, 120), delta=DELTA)
def test_an_eps0_slice_answer_is_certified(table_path: Path, mechanism: str, eps0: float, n: int,
                                           delta: float) -> None:
    """The service's eps0 slice (lookup/answer/slices.py: the engine's eps at the query's eps0 over finer
    n and delta axes, read with n rounded down and the delta chord) is never below the exact eps:
    the exact delta of its answer is <= delta (exact sums, not the engine); beyond the largest n
    it answers at the largest, and its slack estimate is known inside the axes."""
    from lookup.answer import slices
    from lookup.store.table import open_table

    table = open_table(table_path)
    ns, deltas = slices.axes(table)
    assert ns[::slices.DENSITY] == table.n.tolist() and deltas[::slices.DENSITY] == table.delta.tolist()
    read = slices.Slice(eps0, ns, deltas, slices.compute(mechanism, params(mechanism), eps0, ns, deltas))
    value, slack, corner = read.answer(n, delta)
    assert value <= eps0 and corner["n"] <= n and corner["delta"] <= delta <= max(corner["delta_upper"], deltas[-1])
    assert exact_delta(*law(mechanism, eps0, value), n) <= delta * (1 + 1e-9)
    assert (slack >= 0) if n < ns[-1] else np.isnan(slack)
    assert read.answer(n, deltas[0] / 2) is None and read.answer(ns[0] - 1, delta) is None


def test_the_service_refutes_a_table_value_below_a_proved_lower_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """lookup/service/app.py's Refiner: a certified eps below a lower bound at the same point proves the
    table wrong; lookup.trust.origin.refute is called (with the point named), never otherwise."""
    pytest.importorskip("starlette")
    from lookup.service.app import Refiner, Settings
    from lookup.trust import origin as trust

    calls = []
    monkeypatch.setattr(trust, "refute", lambda table, detail: calls.append(detail), raising=False)
    refiner = Refiner(Settings(), None, object(), "tag")
    point = {"eps0": 1.5, "n": 50.0, "delta": 1e-6}
    refiner.check("eps", "krr", point, {"eps": 0.10}, 0.12, "a live refinement's proved lower bound")
    refiner.check("eps", "krr", point, {"eps": 0.10}, 0.08, "a live refinement's proved lower bound")
    refiner.check("eps", "krr", point, {"eps": 0.10}, None, "no lower bound")
    refiner.check("delta", "krr", point, {"delta": 0.10}, 0.12, "not an eps")
    assert len(calls) == 1 and "eps0=1.5" in calls[0] and "0.1" in calls[0] and "0.12" in calls[0]


def _forged(table_path: Path, factor: float, lower_factor: float | None) -> lookup.Table:
    """The session's table with every eps times ``factor`` (capped at eps0) and lower bounds
    ``lower_factor`` times the genuine eps (NaN: none), made in Python by a caller who vouches for
    it (``from_arrays(..., vouch=True)``: no spot check at open, only refinements can catch it)."""
    from lookup.store.table import from_arrays

    genuine = lookup.open_table(table_path)
    stored = np.stack([np.asarray(genuine.stored_eps(r), float) for r in range(len(genuine.families))])
    cap = genuine.eps0[None, :, None, None]
    eps = np.minimum(stored * factor, cap)
    lower = np.full_like(eps, np.nan) if lower_factor is None else np.minimum(stored * lower_factor, eps)
    return from_arrays("forged", genuine.families, genuine.params, genuine.eps0, genuine.n, genuine.delta, eps,
                       lower, genuine.attrs, genuine.eps0_monotone, vouch=True)


def test_a_refinement_refutes_a_table_eps_proved_below_the_exact_eps(table_path: Path) -> None:
    """Issue 37 review (N3): only the service called lookup.trust.origin.refute; the Python API (and the
    CLI, which calls it) published a table value the engine proves too low whenever it was kept
    over the engine's search.  Here every eps is halved: the refinement refutes the table and
    answers the engine's certified eps (checked against the exact k-RR law)."""
    forged = _forged(table_path, 0.5, None)
    eps0, n, delta = 1.5, 50, 1e-6
    a = lookup.eps("krr", k=3, eps0=eps0, n=n, delta=delta, table=forged, max_slack=0.0)
    assert a.source == "live" and a.certified
    assert exact_delta(*law("krr", eps0, a.value), n) <= delta * (1 + 1e-9)
    assert not forged.certified  # refuted: its table answers are labelled so from now on
    assert lookup.eps("krr", k=3, eps0=eps0, n=n, delta=delta, table=forged, max_slack=None).certified is False


def test_a_refinement_refutes_a_table_lower_bound_above_the_engines_certified_eps(table_path: Path) -> None:
    """A lower bound forged equal to an inflated upper value (x 1.5): the engine certifies less at
    the query point (the lower bound read at n = 80, the upper value at n = 40), so the lower bound
    is no lower bound; the table is refuted, the engine's value answered without it."""
    forged = _forged(table_path, 1.5, 1.5)
    eps0, n, delta = 1.0, 79, 1e-5
    a = lookup.eps("krr", k=3, eps0=eps0, n=n, delta=delta, table=forged, max_slack=0.0)
    assert a.source in ("live", "certified estimate") and a.certified and not forged.certified
    assert exact_delta(*law("krr", eps0, a.value), n) <= delta * (1 + 1e-9)
    if np.isfinite(a.lower):  # proved by the engine, never the forged table's
        assert max(exact_delta(*law_, n) for law_ in krr_lower_laws(eps0, a.lower, 3)) > delta


def test_a_genuine_table_kept_by_a_refinement_is_not_refuted(table_path: Path) -> None:
    genuine = lookup.open_table(table_path)
    for eps0, n, delta in [(1.5, 50, 1e-6), (0.8, 30, 1e-8), (3.0, 90, 1e-4)]:
        assert lookup.eps("krr", k=3, eps0=eps0, n=n, delta=delta, table=genuine, max_slack=0.0).refuted is None
    assert genuine.certified
    for source in ("table", "live"):  # nothing refuted: None, whatever answered
        a = lookup.eps("krr", k=3, eps0=1.5 if source == "table" else 9.0, n=50, delta=1e-6, table=genuine,
                       max_slack=None)
        assert a.source == source and a.refuted is None


def test_a_delta_refinement_refutes_a_table_delta_below_the_exact_delta(table_path: Path) -> None:
    """Every eps halved: the table's delta at eps is then below the exact delta (checked here by the
    exact sums of k-RR's Theorem-5 pairs, real dataset pairs); the refinement refutes the table,
    answers the engine's certified delta (>= the exact sum of the k-RR upper law) and says so."""
    forged = _forged(table_path, 0.5, None)
    eps0, n, eps = 1.5, 50, 1.0
    table_delta = lookup.delta("krr", k=3, eps0=eps0, n=n, eps=eps, table=forged, max_slack=None).value
    exact_at_least = max(exact_delta(*law_, n) for law_ in krr_lower_laws(eps0, eps, 3))
    assert table_delta < exact_at_least  # the forgery is wrong, independently of the engine
    a = lookup.delta("krr", k=3, eps0=eps0, n=n, eps=eps, table=forged, max_slack=0.0)
    assert a.source == "live" and a.certified and not forged.certified and "delta" in a.refuted
    assert a.value >= exact_delta(*krr_upper_law(eps0, eps, 3), n) * (1 - 1e-9)
    assert table_delta < a.lower <= exact_delta(*krr_upper_law(eps0, eps, 3), n)  # the engine's, not the table's


def test_an_eps0_max_refinement_refutes_a_table_eps0_whose_exact_eps_is_above_the_target(table_path: Path) -> None:
    forged = _forged(table_path, 0.5, None)
    eps, n, delta = 0.6, 50, 1e-6
    table_eps0 = lookup.eps0_max("krr", k=3, eps=eps, n=n, delta=delta, table=forged, max_slack=None).value
    assert max(exact_delta(*law_, n) for law_ in krr_lower_laws(table_eps0, eps, 3)) > delta  # exact eps > 0.6
    a = lookup.eps0_max("krr", k=3, eps=eps, n=n, delta=delta, table=forged, max_slack=0.0)
    assert a.source == "live" and not forged.certified and "eps0_max" in a.refuted
    assert a.value < table_eps0 and exact_delta(*krr_upper_law(a.value, eps, 3), n) <= delta * (1 + 1e-9)


def test_delta_and_eps0_max_refinements_keep_a_genuine_table(table_path: Path) -> None:
    genuine = lookup.open_table(table_path)
    for eps0, n, x in [(1.5, 50, 1.0), (0.8, 30, 0.5), (3.0, 70, 1.5)]:
        assert lookup.delta("krr", k=3, eps0=eps0, n=n, eps=x, table=genuine, max_slack=0.0).refuted is None
        assert lookup.eps0_max("krr", k=3, eps=x, n=n, delta=1e-6, table=genuine, max_slack=0.0).refuted is None
    assert genuine.certified


def test_the_service_refutes_its_table_when_a_workers_refinement_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refinement run in a worker process refutes the worker's copy of the table; the answer it
    sends back says so ("refuted", never sent to the client): the server process refutes its own
    table and answers the engine's value, even where the table's (forged) value is smaller."""
    pytest.importorskip("starlette")
    import asyncio

    from lookup.service.app import Refiner, Settings
    from lookup.trust import origin as trust

    class Pool:
        def cached(self, key: str) -> dict:
            return {"delta": 0.02, "delta_lower": None, "certified": True, "source": "live", "refuted": "at x: wrong"}

    calls = []
    monkeypatch.setattr(trust, "refute", lambda table, detail: calls.append(detail))
    body = {"delta": 0.001, "delta_lower": None, "certified": True, "source": "table", "slack": 0.5}
    point = {"eps0": 1.5, "n": 50.0, "eps": 0.4}
    out = asyncio.run(Refiner(Settings(), Pool(), object(), "tag").improve("delta", "krr", point, 0.0, body))
    assert calls == ["at x: wrong"] and out["delta"] == 0.02 and "refuted" not in out


def test_a_delta_refinement_publishes_the_engines_lower_bound_where_larger(table_path: Path) -> None:
    """The refinement's one engine evaluation carries a lower bound on the exact delta: published
    where above the table's, never above the certified delta nor above the exact sum of the k-RR
    upper law (a bound on the exact delta, computed independently)."""
    genuine = lookup.open_table(table_path)
    for eps0, n, eps in [(0.8, 30, 0.7), (0.7, 60, 0.5)]:  # between grid points: the table's lower bound is 0
        table = lookup.delta("krr", k=3, eps0=eps0, n=n, eps=eps, table=genuine, max_slack=None)
        a = lookup.delta("krr", k=3, eps0=eps0, n=n, eps=eps, table=genuine, max_slack=0.0)
        assert table.source == "table" and a.lower > table.lower and a.lower <= a.value
        assert a.lower <= exact_delta(*krr_upper_law(eps0, eps, 3), n) * (1 + 1e-9)
        assert a.lower >= 0.5 * max(exact_delta(*law_, n) for law_ in krr_lower_laws(eps0, eps, 3))  # near the pairs


def _smallest_certified(point: dict[str, float], params: dict[str, Any]) -> float:
    """The smallest eps in [0.5, 1.5] the engine certifies at ``point`` (k-RR), by bisection on its own check
    (the upper end of the final bracket)."""
    low, high = 0.5, 1.5
    for _ in range(40):
        middle = (low + high) / 2
        low, high = ((low, middle) if lookup.answer.live.certifies("krr", {**point, "eps": middle}, params)
                     else (middle, high))
    return high


@pytest.mark.parametrize(("steps", "searched"), [(0.5, False), (1.5, False), (6.5, True)])
def test_a_high_estimate_is_certified_downwards(monkeypatch: pytest.MonkeyPatch, steps: float, searched: bool) -> None:
    """An estimate above the engine's eps (its low end certified): candidates walk down (TIERS
    steps) until the engine refuses one, and the last certified is published (certified by the
    exact sum of the k-RR upper law), below the estimate, with the step as its slack, without the
    full search; an estimate further off ends in the search, certified too.  ``steps``: how many
    steps of the bracket the estimate's low end lies above the smallest eps the engine certifies."""
    point, params = {"eps0": 1.5, "n": 50.0, "delta": 1e-6}, {"k": 3}
    high = _smallest_certified(point, params)
    estimate = high * (1 + refine.STEP) ** (steps + 0.5)
    search, calls = lookup.answer.live.eps_upper, []
    monkeypatch.setattr(lookup.answer.live, "eps_upper", lambda *args: calls.append(args) or search(*args))
    value, slack, source = refine.eps("krr", point, params, float("inf"), float("nan"), estimate, refine.STEP)
    assert bool(calls) == searched and source == ("live" if searched else refine.CERTIFIED)
    assert searched or (slack == pytest.approx(refine.STEP) and high <= value < high * (1 + refine.STEP))
    assert exact_delta(*krr_upper_law(1.5, value, 3), 50) <= 1e-6 * (1 + 1e-9)


@pytest.mark.parametrize(("above", "checks"), [(1.004, 1), (0.99, None)])
def test_a_quick_refinement_is_one_certified_evaluation(monkeypatch: pytest.MonkeyPatch, above: float,
                                                        checks: int | None) -> None:
    """``quick``: the estimate inflated by half a step, published after one engine check where it
    is certified (certified by the exact sum of the k-RR upper law), its slack unknown; an
    estimate whose inflation the engine refuses goes on to the bracket (a measured slack)."""
    point, params = {"eps0": 1.5, "n": 50.0, "delta": 1e-6}, {"k": 3}
    high = _smallest_certified(point, params)
    estimate = high * above / np.sqrt(1 + refine.STEP)  # its inflation: above x the smallest certified eps
    check, calls = lookup.answer.live.certifies, []
    monkeypatch.setattr(lookup.answer.live, "certifies", lambda *args: calls.append(args) or check(*args))
    value, slack, source = refine.eps("krr", point, params, float("inf"), float("nan"), estimate, refine.STEP,
                                      quick=True)
    assert exact_delta(*krr_upper_law(1.5, value, 3), 50) <= 1e-6 * (1 + 1e-9)
    if checks is not None:
        assert (len(calls), value, source) == (checks, pytest.approx(high * above), refine.CERTIFIED)
        assert np.isnan(slack)
    else:
        assert len(calls) > 1 and slack >= 0 and value >= high


def test_a_borrowed_rows_answer_starts_its_slice_at_the_second_asking_only(table_path: Path) -> None:
    """lookup/service/app.py's Refiner: a question the table answers through another row (via generic:
    OLH between grid eps0) consults its eps0 slice once per asking; the slice, seconds of a core,
    starts at the eps0's second asking, never at the first (a random question is asked once)."""
    pytest.importorskip("starlette")
    import asyncio

    from lookup.service.app import Refiner, Settings

    class Pool:
        def __init__(self) -> None:
            self.inflight: dict = {}
            self.submitted: list[str] = []

        def cached(self, key: str) -> None:
            return None

        def has_room(self, kind: str) -> bool:
            return True

        def submit(self, key: str, *args: object, **kwargs: object) -> asyncio.Future:
            self.submitted.append(key)
            return asyncio.get_running_loop().create_future()  # never done: answered unrefined

    refining, slicing = Pool(), Pool()
    refiner = Refiner(Settings(), refining, lookup.open_table(table_path), "tag", slicing)
    kwargs = {"eps0": 1.37, "n": 57.0, "delta": 3.3e-6}
    body = {"eps": 0.9, "eps_lower": None, "certified": True, "source": "table", "slack": None, "via": "generic"}

    async def ask() -> dict:  # as the service does: the slice first, then the borrowed row's answer improved
        assert refiner.from_slice("olh", kwargs, None) is None
        return await refiner.improve("eps", "olh", kwargs, 0.02, body)

    first = asyncio.run(ask())
    assert first["refined"] is False and len(refining.submitted) == 1 and slicing.submitted == []
    asyncio.run(ask())
    assert len(slicing.submitted) == 1
