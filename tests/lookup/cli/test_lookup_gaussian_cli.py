"""``lookup eps`` / ``lookup delta`` of the shuffled Gaussian on bits (``--mechanism gaussian --sigma S
[--inputs bits]``): the engine's values (``tablegen.engine.gaussian`` called directly), answered
live, and every refusal by name with its exit status."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from click.testing import CliRunner

import lookup
from lookup.answer import live as live_engine
from lookup.cli.commands import main
from tablegen.engine import gaussian as engine


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def test_cli_eps_and_delta_are_the_apis() -> None:
    result = cli("eps", "--mechanism", "gaussian", "--sigma", "1", "--n", "1e5", "--delta", "1e-6", "--json")
    b = engine.eps_bounds(1.0, 10**5, 1e-6)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"eps": b.upper, "eps_lower": b.lower, "certified": True, "source": "live",
                                         "corner": {}, "slack": 0.0, "edge": False}
    result = cli("delta", "--mechanism", "gaussian", "--sigma", "0.5", "--inputs", "bits", "--n", "1000", "--eps",
                 "2", "--json")
    b = engine.delta_bounds(0.5, 1000, 2.0)
    assert result.exit_code == 0, result.output
    assert (json.loads(result.stdout)["delta"], json.loads(result.stdout)["delta_lower"]) == (b.upper, b.lower)
    text = cli("eps", "--mechanism", "gaussian", "--sigma", "1", "--n", "1e5", "--delta", "1e-6")
    eps = engine.eps_bounds(1.0, 10**5, 1e-6).upper
    assert text.exit_code == 0 and f"eps: {eps!r}" in text.stdout and "source: live" in text.stdout


def test_cli_rounds_is_the_apis() -> None:
    """``--rounds T``: the Python API's composed answer (lookup.eps(..., rounds=T), tested against
    independent bounds in tests/lookup/answer/test_lookup_gaussian.py), with rounds in the JSON."""
    result = cli("eps", "--mechanism", "gaussian", "--sigma", "2", "--n", "1e5", "--delta", "1e-6", "--rounds", "10",
                 "--json")
    assert result.exit_code == 0, result.output
    value = lookup.eps("gaussian", sigma=2.0, n=10**5, delta=1e-6, rounds=10).value
    assert json.loads(result.stdout) == {"eps": value, "eps_lower": None, "rounds": 10, "certified": True,
                                         "source": "live", "corner": {}, "slack": None, "edge": False}


def test_cli_rounds_without_dp_accounting_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    monkeypatch.setitem(sys.modules, "dp_accounting.pld", None)
    monkeypatch.setattr(live_engine, "_MEMORY", {})  # computed here, not read back
    result = cli("eps", "--mechanism", "gaussian", "--sigma", "3", "--n", "1e5", "--delta", "1e-6", "--rounds", "2")
    assert result.exit_code == 1 and "shuffle-eps[compose]" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("args", "status", "message"), [
    (["--sigma", "1", "--inputs", "reals"], 2, "'reals' is not one of"),
    ([], 2, "needs sigma"),
    (["--sigma", "0.1"], 2, "sigma must be in [0.2, 50]"),
    (["--sigma", "x"], 2, "sigma must be a number"),
    (["--sigma", "\u0661"], 2, "ASCII digits"),
    (["--sigma", "1", "--eps0", "1"], 2, "takes no eps0"),
    (["--sigma", "1", "--k", "3"], 2, "takes no k"),
    (["--sigma", "1", "--rounds", "3", "--sample-rate", "0.5"], 2,
     "sample_rate is not supported for mechanism 'gaussian' yet"),
    (["--sigma", "1", "--rounds", "0"], 2, "rounds must be an integer in [1, 1000000]"),
    (["--sigma", "60", "--rounds", "3"], 2, "sigma must be in [0.2, 50]"),
    (["--sigma", "1", "--rounds", "3", "--no-live"], 3, "answered live only"),
    (["--sigma", "1", "--no-live", "--delta", "1e-13"], 3, "the device file does not cover sigma=1 n=1000 delta=1e-13"),
])
def test_cli_refusals(args: list[str], status: int, message: str) -> None:
    result = cli("eps", "--mechanism", "gaussian", "--n", "1000", "--delta", "1e-6", *args)
    assert result.exit_code == status and message in result.output, result.output


def test_cli_other_mechanisms_still_need_eps0_and_refuse_sigma() -> None:
    result = cli("eps", "--mechanism", "krr", "--k", "3", "--n", "1000", "--delta", "1e-6")
    assert result.exit_code == 2 and "mechanism 'krr' needs eps0" in result.output
    result = cli("delta", "--mechanism", "krr", "--k", "3", "--eps0", "1", "--n", "1000", "--eps", "0.1", "--sigma",
                 "1")
    assert result.exit_code == 2 and "sigma is a parameter of mechanism 'gaussian'" in result.output
    result = cli("eps0-max", "--mechanism", "gaussian", "--n", "1000", "--eps", "0.5", "--delta", "1e-6")
    assert result.exit_code == 2 and "eps0_max is not answered" in result.output
