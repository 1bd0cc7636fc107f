"""GET /v1/eps with ``rounds`` (and ``sample_rate``) on the real server: the library's composed
answer exactly (the JSON of ``lookup eps --rounds T --json``), certified against one round's
proved lower bound, growing with T no faster than basic composition; bad values 400 naming them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shuffle_reference import exact_delta, krr_upper_law
from test_lookup_serve import cli_json, get, without_asked

import lookup
from lookup.answer.composed import CELLS

pytest.importorskip("dp_accounting")

Q = "mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-6"  # inside the small table's grid
ARGS = ["eps", "--mechanism", "krr", "--k", "3", "--eps0", "1.5", "--n", "50", "--delta", "1e-6"]


@pytest.fixture(scope="module")
def base(start_server: Any) -> str:
    return start_server("--live-workers", "1").base


def answer(base: str, query: str) -> dict[str, Any]:
    status, body, headers = get(f"{base}/v1/eps?{query}")
    assert status == 200, body
    return json.loads(body)


@pytest.mark.parametrize(("query", "extra"), [
    (f"{Q}&rounds=10", ["--rounds", "10"]),  # inside the table: the engine's composition
    (f"{Q}&rounds=10&max_slack=none", ["--rounds", "10", "--max-slack", "none"]),  # the table's
    ("mechanism=krr&k=3&eps0=6&n=50&delta=1e-6&rounds=3", ["--rounds", "3"]),  # eps0 off the grid: live
    (f"{Q}&rounds=4&sample_rate=0.5", ["--rounds", "4", "--sample-rate", "0.5"]),  # subsampled: live
])
def test_answers_are_the_libraries(base: str, table_path: Path, query: str, extra: list[str]) -> None:
    status, body, _ = get(f"{base}/v1/eps?{query}")
    assert status == 200, body
    args = ARGS if "eps0=6" not in query else [a if a != "1.5" else "6" for a in ARGS]
    assert without_asked(body) == cli_json(*args, *extra, "--table", str(table_path))
    got = json.loads(body)
    rounds = int(extra[1])
    rate = {"sample_rate": float(extra[3])} if "--sample-rate" in extra else {}
    eps0 = 6.0 if "eps0=6" in query else 1.5
    slack = {"max_slack": None} if "max_slack" in query else {}
    a = lookup.eps("krr", k=3, eps0=eps0, n=50, delta=1e-6, rounds=rounds, table=lookup.open_table(table_path),
                   **rate, **slack)
    assert got["eps"] == a.value and got["source"] == a.source and got["rounds"] == rounds
    assert got["source"] == ("table" if "max_slack" in query else "live")


def test_certified_and_grows_at_most_linearly(base: str) -> None:
    grid = "mechanism=krr&k=3&eps0=2&n=40&delta"
    previous = 0.0
    for rounds in (1, 2, 5, 20, 100):
        eps = answer(base, f"{grid}=1e-6&rounds={rounds}")["eps"]
        # T rounds include the first (post-processing), so exact eps_T >= exact eps_1; eps_T is
        # at least that when one round's delta at eps_T, bounded above by the reference's
        # dominating k-RR law (tests/tablegen/shuffle_reference.py), is within the target
        assert exact_delta(*krr_upper_law(2.0, eps, 3), 40) <= 1e-6 * (1 + 1e-9)
        assert eps >= previous  # more rounds never cost less
        # basic composition (arXiv:1311.0776 Thm 3.16): T rounds of (eps_1(delta/T), delta/T),
        # each round's privacy loss rounded up by at most one lattice cell (eps0 / CELLS)
        basic = answer(base, f"{grid}={1e-6 / rounds!r}&max_slack=none")["eps"]
        assert eps <= rounds * (basic + 2.0 / CELLS)
        assert eps <= rounds * 2  # T rounds of pure eps0-LDP
        previous = eps


@pytest.mark.parametrize(("query", "message"), [
    (f"{Q}&rounds=0", "rounds must be an integer in [1, 1000000]"),
    (f"{Q}&rounds=1.5", "rounds must be an integer"),
    (f"{Q}&rounds=2e6", "rounds must be an integer in [1, 1000000]"),
    (f"{Q}&rounds=abc", "rounds must be a number"),
    (f"{Q}&rounds=inf", "rounds must be finite"),
    (f"{Q}&rounds=3&sample_rate=0", "sample_rate must lie in [1e-12, 1]"),
    (f"{Q}&rounds=3&sample_rate=1.5", "sample_rate must lie in [1e-12, 1]"),
    (f"{Q}&rounds=3&sample_rate=x", "sample_rate must be a number"),
    (f"{Q}&sample_rate=0.5", "sample_rate needs rounds"),
    (f"{Q}&rounds=3&rounds=4", "parameter 'rounds' given more than once"),
    (f"{Q}&rounds=3&eps0=-1".replace("eps0=1.5&", ""), "eps0 must be >= 1e-06"),
    ("mechanism=generic&eps0=1&n=80&eps=0.9&rounds=3", "unknown parameter 'rounds'"),
])
def test_bad_values_are_400s_naming_them(base: str, query: str, message: str) -> None:
    path = "/v1/delta" if "&eps=" in query else "/v1/eps"
    status, body, _ = get(f"{base}{path}?{query}")
    assert status == 400 and message in json.loads(body)["error"], body


def test_live_false_off_the_table_is_a_400(base: str) -> None:
    status, body, _ = get(f"{base}/v1/eps?mechanism=krr&k=3&eps0=6&n=50&delta=1e-6&rounds=2&live=false")
    assert status == 400 and "rounds" in json.loads(body)["error"]
