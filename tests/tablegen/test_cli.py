"""The tablegen CLI mirrors the engine: JSON keys, exit codes, clear errors without traceback."""

import json
import math

from click.testing import CliRunner

from tablegen.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_compute_eps_json_keys_and_closed_form_binary_rr_n1():
    # n = 1, binary RR: delta(eps) = (e^eps0 - e^eps)/(e^eps0 + 1) exactly, so eps(delta) is closed form
    eps0, delta = 1.0, 1e-3
    exact = math.log(math.exp(eps0) - delta * (math.exp(eps0) + 1))
    out = run("compute", "--mechanism", "krr", "--k", "2", "--eps0", "1", "--n", "1", "--delta", "1e-3", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert {"eps", "eps_lower", "certified"} <= set(data)
    assert data["certified"] is True
    assert exact <= data["eps"] <= exact * (1 + 2e-4)
    assert data["eps_lower"] <= exact


def test_compute_delta_and_eps0_max():
    out = run("compute", "--mechanism", "generic", "--eps0", "1", "--n", "1e4", "--eps", "0.2", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert 0 <= data["delta_lower"] <= data["delta"] < 1
    out = run("eps0-max", "--mechanism", "krr", "--k", "10", "--eps", "0.5", "--n", "1e4", "--delta", "1e-6", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["eps0"] > 0.5


def test_bad_input_exits_nonzero_with_parameter_named():
    cases = [
        (["--mechanism", "krr", "--k", "1", "--eps0", "1", "--n", "10", "--delta", "1e-6"], "k"),
        (["--mechanism", "krr", "--k", "3", "--eps0", "-1", "--n", "10", "--delta", "1e-6"], "eps0"),
        (["--mechanism", "krr", "--k", "3", "--eps0", "1", "--n", "0", "--delta", "1e-6"], "n"),
        (["--mechanism", "krr", "--k", "3", "--eps0", "1", "--n", "10", "--delta", "2"], "delta"),
        (["--mechanism", "nope", "--eps0", "1", "--n", "10", "--delta", "1e-6"], "mechanism"),
        (["--mechanism", "finite", "--matrix", "[[0.5,0.6],[0.5,0.5]]", "--eps0", "1", "--n", "10",
          "--delta", "1e-6"], "matrix"),
    ]
    for args, name in cases:
        out = run("compute", *args)
        assert out.exit_code == 2, (args, out.output)
        assert name in out.output and "Traceback" not in out.output
