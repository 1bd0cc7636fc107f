"""The service bench's pure parts: issue 47's traffic mix, the checks of answers against the engine's
bounds, the stratified sample and the repeated questions' askings (no server is started)."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import numpy as np
import pytest

from bench import service_bench as sb

GRID = np.round(np.arange(0.05, 8.0, 0.0002), 4)  # half of the 4-digit eps0: a random one lands on it often


def numbers(target: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(target).query))


def test_issue47_mix_kinds_shares_and_points() -> None:
    rng = random.Random(1)
    pick = sb.issue47(SimpleNamespace(eps0=GRID), rng, 0)
    picks = [pick() for _ in range(20000)]
    shares = Counter(kind for kind, _, _ in picks)
    for kind, weight in sb.ISSUE47.items():
        assert shares[kind] / len(picks) == pytest.approx(weight, abs=0.015)
    fixed = {sb.eps_target(ask) for ask in sb.deployment(GRID)}
    assert len(fixed) == 20 and fixed == {sb.eps_target(ask) for ask in sb.deployment(GRID)}  # seeded
    for kind, target, ask in picks:
        if kind in ("random", "repeated", "rounds"):
            values = numbers(target)
            assert (values["mechanism"], {k: int(values[k]) for k in ("k",) if k in values}) in sb.INSIDE
            eps0, n, delta = float(values["eps0"]), int(values["n"]), float(values["delta"])
            assert 0.1 <= eps0 <= 6 and abs(GRID - eps0).min() > 1e-9  # off the grid
            assert 1000 <= n <= 10**8 and 1e-11 <= delta <= 1e-4 and float(f"{delta:.3g}") == delta
        assert (ask is not None) == (kind in ("random", "repeated"))
        assert (target in fixed) == (kind == "repeated")
        assert target.endswith("&rounds=365") == (kind == "rounds")
        if kind == "live":
            assert 8.05 <= float(numbers(target)["eps0"]) <= 12
        if kind == "bad":
            assert target.removeprefix("/v1/eps?") in sb.BAD
        if kind == "page":
            assert target in ("/", "/openapi.json")
    assert len({t for kind, t, _ in picks if kind == "random"}) == shares["random"]  # each asked once


def test_check_against_the_engine() -> None:
    close = sb.check({"eps": 1.01, "eps_lower": 0.99}, upper=1.0, lower=0.98)
    assert close.within and not close.tiny and close.below is False and close.false_lower is False
    loose = sb.check({"eps": 1.03, "eps_lower": None}, upper=1.0, lower=None)
    assert not loose.within and loose.below is None and loose.false_lower is None
    wrong = sb.check({"eps": 0.9, "eps_lower": 1.001}, upper=1.0, lower=0.95)
    assert wrong.below and wrong.false_lower
    tiny = sb.check({"eps": 3e-5}, upper=2e-5, lower=None)  # 50% above, 1e-5 absolutely: within 2% of TINY
    assert tiny.tiny and tiny.excess == pytest.approx(1e-5) and not tiny.within
    assert sb.check({"eps": 2.1e-5}, upper=2e-5, lower=None).within
    text = sb.against_engine([close, loose, wrong, tiny])
    assert "within 2% of its certified eps 2 of 4 (50.0%)" in text
    assert "1 with eps < 0.0001" in text and "lower bound: 1 of 2" in text and "certified eps: 1 of 2" in text


def test_stratified_sample_keeps_each_kind() -> None:
    sample = sb.stratified({"random": list(range(800)), "repeated": list(range(200)), "live": []}, 100,
                           random.Random(0))
    assert {k: len(v) for k, v in sample.items()} == {"random": 80, "repeated": 20}
    assert {k: len(v) for k, v in sb.stratified({"random": list(range(99)), "repeated": [0]}, 10,
                                                random.Random(0)).items()} == {"random": 10, "repeated": 1}
    assert sb.stratified({"random": []}, 10, random.Random(0)) == {}


def test_askings_of_the_repeated_questions() -> None:
    a, b = sb.deployment(GRID)[:2]
    rows = [(a, {"refined": False}, 1), (a, {}, 2), (a, {"refined": True}, 3), (a, {}, 4),
            (b, {"refined": False}, 1), (b, {"refined": False}, 2), (b, {}, 3)]
    assert sb.askings(rows) == ("- repeated, refined at the first asking 0 of 2 (0.0%), the second 1 of 2 (50.0%), "
                                "later 3 of 3 (100.0%); questions refined at every asking from the second on: 1 of 2")


def test_apps_mix_one_application_per_client() -> None:
    table = SimpleNamespace(eps0=GRID, n=np.geomspace(100, 4e8, 200), delta=np.geomspace(1e-12, 1e-3, 19))
    pick = sb.apps(table, random.Random(3), 3)
    picks = [pick() for _ in range(5000)]
    shares = Counter(kind for kind, _, _ in picks)
    assert {k: round(v / len(picks), 1) for k, v in shares.items()} == sb.APPS
    inside = [ask for kind, _, ask in picks if kind == "inside"]
    assert all((mechanism, params) == sb.INSIDE[3] for mechanism, params, _ in inside)  # client 3's mechanism
    off_grid = Counter(numbers["eps0"] for _, _, numbers in inside if numbers["delta"] not in table.delta)
    assert len(off_grid) == 1  # the application's own eps0
    assert 0.05 < 1 - sum(off_grid.values()) / len(inside) < 0.15  # one in ten on grid points
