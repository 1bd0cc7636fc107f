"""Lookup beyond the live engine's domain (tablegen/limits.py): the CLI exits 2 naming the
parameter and its range, the library raises ValueError, HTTP answers 400; inputs the engine
answers beyond its own range (huge n, eps0 near the local guarantee) stay certified."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import lookup
from lookup.cli.commands import main


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["--mechanism", "krr", "--k", "3", "--eps0", "50", "--n", "1e6", "--delta", "1e-8"], "eps0 must be in [1e-06"),
    (["--mechanism", "laplace", "--eps0", "25", "--n", "1e6", "--delta", "1e-8"], "eps0 <= 20"),
    (["--mechanism", "laplace", "--eps0", "1", "--n", "1e19", "--delta", "1e-8"], "n must be an integer in"),
    (["--mechanism", "krr", "--k", "10", "--eps0", "2", "--n", "1e30", "--delta", "1e-8"], "n must be an integer in"),
])
def test_cli_refusals_exit_2(table_path: Path, args: list[str], expected: str) -> None:
    code, out, err = run("eps", *args, "--table", str(table_path), "--json")
    assert code == 2 and expected in err and "Traceback" not in err and out == ""


def test_library_raises_value_error_naming_eps0(table_path: Path) -> None:
    with pytest.raises(ValueError, match=r"eps0 must be in \[1e-06, 40\]"):
        lookup.eps("krr", eps0=50.0, n=1e6, delta=1e-8, k=3, table=str(table_path))


def test_huge_n_answers_at_most_the_tables_largest_n(table_path: Path) -> None:
    """eps is non-increasing in n: the live answer at n = 1e15 is at most the table's answer at
    its largest n (80), and at most eps0."""
    t = str(table_path)
    code, out, _ = run("eps", "--mechanism", "krr", "--k", "3", "--eps0", "1", "--n", "1e15", "--delta", "1e-8",
                       "--table", t, "--json")
    assert code == 0
    far = json.loads(out)
    near = lookup.eps("krr", eps0=1.0, n=80, delta=1e-8, k=3, table=t, max_slack=None)
    assert far["certified"] is True and 0 < far["eps"] <= near.value <= 1.0


def test_eps0_near_the_local_guarantee_is_answered(table_path: Path) -> None:
    code, out, _ = run("eps", "--mechanism", "generic", "--eps0", "25", "--n", "1e6", "--delta", "1e-8",
                       "--table", str(table_path), "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["eps"] == 25.0 and answer["source"] == "live"


def test_http_answers_400_naming_the_parameter(start_server: Any) -> None:
    base = start_server("--live-workers", "1").base  # the real server (lookup serve) in a subprocess
    for query, expected in [("mechanism=krr&k=3&eps0=50&n=1e6&delta=1e-8", "eps0 must be in [1e-06, 40]"),
                            ("mechanism=laplace&eps0=25&n=1e6&delta=1e-8", "eps0 <= 20")]:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/v1/eps?{query}", timeout=60)
        assert err.value.code == 400
        assert expected in json.loads(err.value.read())["error"]


def test_one_largest_n_for_table_and_engine() -> None:
    """lookup refuses n beyond the live engine's limit even where the table's edge could answer."""
    from lookup.answer.api import EPS0_MIN, EPS0_MIN_TEXT, N_LIMIT
    from tablegen.limits import EPS0_MIN as ENGINE_EPS0_MIN
    from tablegen.limits import EPS0_MIN_TEXT as ENGINE_EPS0_MIN_TEXT
    from tablegen.limits import N_LIMIT as ENGINE_N_LIMIT

    assert N_LIMIT == ENGINE_N_LIMIT and EPS0_MIN == ENGINE_EPS0_MIN and EPS0_MIN_TEXT == ENGINE_EPS0_MIN_TEXT
    with pytest.raises(ValueError, match="eps0 must be >= 1e-06"):  # the engine is not certified below
        lookup.eps("krr", eps0=1e-7, n=100, delta=1e-8, k=10)
    lookup.eps("krr", eps0=2.0, n=float(N_LIMIT), delta=1e-8, k=10)
    with pytest.raises(ValueError, match="n must be an integer in"):
        lookup.eps("krr", eps0=2.0, n=2e18, delta=1e-8, k=10)


@pytest.mark.parametrize("eps0", [-1.0, 0.0, 1e-7])
def test_one_statement_of_the_eps0_minimum_everywhere(eps0: float) -> None:
    """lookup, the engine, both command lines and their help, and the page state eps0's minimum in
    the same words (lookup.answer.api.EPS0_MIN_TEXT, ">= 1e-06"), never "> 0"."""
    import html
    import re

    from lookup.answer.api import EPS0_MIN_TEXT
    from tablegen import compose
    from tablegen.cli import main as tablegen_main
    from tablegen.engine import eps_bounds

    stated = f"eps0 must be {EPS0_MIN_TEXT}"
    for call in (lambda: lookup.eps("krr", eps0=eps0, n=100, delta=1e-8, k=10),
                 lambda: eps_bounds("krr", eps0=eps0, n=100, delta=1e-8, k=10),
                 lambda: compose.eps("krr", eps0=eps0, n=100, rounds=2, delta=1e-8, k=10)):
        with pytest.raises(ValueError, match=re.escape(stated)):
            call()
    question = ["--mechanism", "krr", "--k", "10", "--eps0", str(eps0), "--n", "100", "--delta", "1e-8"]
    for cli, command in ((main, "eps"), (tablegen_main, "compute")):
        result = CliRunner().invoke(cli, [command, *question])
        assert result.exit_code == 2 and stated in result.stderr, result.output
        helped = " ".join(CliRunner().invoke(cli, [command, "--help"]).output.split())
        assert f"--eps0 TEXT local privacy parameter, {EPS0_MIN_TEXT}" in helped
    page = (Path(lookup.__file__).parent / "service" / "static" / "index.html").read_text()
    label = re.search(r'<label data-field="eps0">eps0 <small>(.*?)</small>', page).group(1)
    assert html.unescape(re.sub(r"<[^>]+>", "", label)) == f"local ε0 {EPS0_MIN_TEXT}"
