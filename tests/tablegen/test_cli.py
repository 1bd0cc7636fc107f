"""The tablegen CLI mirrors the engine: JSON keys, exit codes, clear errors without traceback."""

import json
import math
import re

from click.testing import CliRunner
from shuffle_reference import delta0_term

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


def test_protocol_compute_calibrate_simulate():
    from tablegen.protocols.accounting import calibrate, eps_bounds

    out = run("compute", "--mechanism", "binary-sum", "--p", "0.97", "--n", "100000", "--delta", "1e-8", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["eps"] == eps_bounds("binary-sum", delta=1e-8, n=100000, p=0.97)[0]
    out = run("calibrate", "--mechanism", "histogram", "--eps", "1", "--delta", "1e-6", "--n", "100000", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["p"] == calibrate("histogram", eps=1.0, delta=1e-6, n=100000) and data["p"] > data["paper_p"]
    out = run("simulate", "--mechanism", "binary-sum", "--n", "1e4", "--p", "0.99", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["max_abs_error"] <= json.loads(out.output)["paper_bound_beta_0.05"]


def test_protocol_bad_input():
    out = run("compute", "--mechanism", "histogram", "--n", "100", "--delta", "1e-6")
    assert out.exit_code == 2 and "needs --p" in out.output
    out = run("compute", "--mechanism", "histogram", "--n", "100", "--p", "1.5", "--delta", "1e-6")
    assert out.exit_code == 2 and "p must be in (0, 1)" in out.output
    out = run("calibrate", "--mechanism", "histogram", "--eps", "0.1", "--delta", "1e-10", "--n", "50")
    assert out.exit_code == 2 and "more users are needed" in out.output
    out = run("compute", "--mechanism", "krr", "--k", "3", "--n", "10", "--delta", "1e-6")
    assert out.exit_code == 2 and "needs --eps0" in out.output
    out = run("compute", "--mechanism", "krr", "--k", "3", "--eps0", "2", "--p", "0.5", "--n", "10", "--delta", "1e-6")
    assert out.exit_code == 2 and "takes no --p" in out.output and "needs --eps0" not in out.output
    out = run("compute", "--mechanism", "histogram", "--eps0", "2", "--p", "0.5", "--n", "100", "--delta", "1e-6")
    assert out.exit_code == 2 and "takes no --eps0" in out.output


def test_build_calibration_reports_and_is_idempotent(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text("[axes]\neps = [1.0]\nn = [1000, 10000]\ndelta = [1e-6]\n")
    out = str(tmp_path / "p.zarr")
    first = run("build-calibration", "--spec", str(spec), "--out", out, "--no-progress")
    assert first.exit_code == 0, first.output
    assert "4 cells" in first.output and "computed 2 slices, 0 already finished" in first.output
    again = run("build-calibration", "--spec", str(spec), "--out", out, "--no-progress")
    assert again.exit_code == 0 and "up to date" in again.output
    bad = run("build-calibration", "--spec", str(tmp_path / "missing.toml"), "--out", out)
    assert bad.exit_code == 2 and "cannot read spec" in bad.output


def test_unknown_mechanism_suggests_the_closest_and_lists_protocols():
    out = run("compute", "--mechanism", "histogramm", "--p", "0.97", "--n", "1e5", "--delta", "1e-8")
    assert out.exit_code == 2
    assert "unknown mechanism='histogramm'; did you mean 'histogram'?" in out.output
    assert "binary-sum" in out.output and "generic-closed-form" in out.output
    out = run("compute", "--mechanism", "krrr", "--k", "10", "--eps0", "2", "--n", "1e5", "--delta", "1e-8")
    assert out.exit_code == 2 and "did you mean 'krr'?" in out.output
    out = run("eps0-max", "--mechanism", "histogram", "--eps", "1", "--n", "1e5", "--delta", "1e-8")
    assert out.exit_code == 2 and "multi-message protocol" in out.output and "--p" in out.output


def test_delta_far_below_double_precision_is_reported_as_the_floor():
    """At eps = 0.2, eps0 = 1, n = 1e5 the sum's upper tail sits about 70 sd above its mean (delta
    near e^-2450): the certified delta underflows; it is reported as 1e-300, an upper bound."""
    out = run("compute", "--mechanism", "generic", "--eps0", "1", "--n", "1e5", "--eps", "0.2", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["delta"] == 1e-300 and data["delta_lower"] == 0.0


def test_export_to_a_missing_directory_is_refused_before_computing(tmp_path):
    out = tmp_path / "missing" / "x.dev"
    result = CliRunner().invoke(main, ["export", "--device", "--mechanism", "krr", "--k", "10", "--eps0", "1.37",
                                       "--delta", "1e-8", "--out", str(out)])
    assert result.exit_code == 2 and "--out" in result.output and "does not exist" in result.output, result.output
    assert not (tmp_path / "missing").exists()


DELTA0_QUESTION = ["--mechanism", "generic", "--delta0", "1e-9", "--eps0", "1", "--n", "1e5", "--delta", "1e-8"]


def explains_delta0(note: str) -> bool:
    """Whether ``note`` says that the n delta0 term (its size quoted, within 1%: the reference of
    shuffle_reference.py at the question above, eps = eps0) uses up delta, so eps is eps0."""
    quoted = [float(x) for x in re.findall(r"\d+(?:\.\d+)?e[-+]?\d+", note)]
    term = delta0_term(1.0, 1.0, 1e5, 1e-9)
    return "delta0" in note and "no amplification" in note and any(math.isclose(x, term, rel_tol=1e-2)
                                                                     for x in quoted)


def test_eps0_answered_because_delta0_uses_up_delta_says_so():
    """n delta0 = 1e-4, far above delta = 1e-8: no amplification is certified, and the answer says why."""
    out = run("compute", *DELTA0_QUESTION, "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["eps"] == 1.0 and explains_delta0(data["note"]), data["note"]
    text = run("compute", *DELTA0_QUESTION).output
    assert f"note: {data['note']}\n" in text
    amplified = json.loads(run("compute", *DELTA0_QUESTION[:-1], "1e-3", "--json").output)  # n delta0 below delta
    assert amplified["eps"] < 1.0 and "note" not in amplified


def test_mechanism_names_in_any_case():
    """kRR is krr (the CLI, the engine, a spec's rows); a misspelling in capitals still gets its suggestion."""
    from tablegen.engine import eps_bounds
    from tablegen.spec import spec_from_dict

    question = ["--k", "3", "--eps0", "1", "--n", "1000", "--delta", "1e-6", "--json"]
    lower, mixed = (run("compute", "--mechanism", name, *question) for name in ("krr", "kRR"))
    assert mixed.exit_code == 0 and mixed.output == lower.output, mixed.output
    out = run("compute", "--mechanism", "KRRR", *question)
    assert out.exit_code == 2 and "did you mean 'krr'?" in out.output
    assert run("compute", "--mechanism", "Binary-Sum", "--p", "0.9", "--n", "1e4", "--delta", "1e-6").exit_code == 0
    assert eps_bounds("KRR", eps0=1.0, n=1000, delta=1e-6, k=3) == eps_bounds("krr", eps0=1.0, n=1000, delta=1e-6, k=3)
    spec = spec_from_dict({"axes": {"eps0": [0.5, 1.0], "n": [10, 100], "delta": [1e-6]},
                           "mechanism": [{"family": "KRR", "k": 3}]})
    assert [row.family for row in spec.rows] == ["krr"]


def test_look_alike_digits_and_tiny_sample_rates_exit_2_naming_the_parameter():
    """Issue 55: numbers are ASCII only (float() reads '৪' as 4); ``--sample-rate 1e-300`` was a raw
    traceback (OverflowError)."""
    base = ["compute", "--mechanism", "krr", "--k", "4", "--eps0", "1", "--n", "10000"]
    for args, name in (([*base, "--delta", "1e-৪"], "delta"), ([*base[:-4], "--eps0", "৪", "--n", "10000",
                                                               "--delta", "1e-6"], "eps0"),
                       ([*base, "--delta", "1e-6", "--sample-rate", "1e-300"], "--sample-rate must lie in [1e-12, 1]")):
        result = run(*args)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert name in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    result = run("build", "--spec", "x.toml", "--out", "y.zarr", "--workers", "১")
    assert result.exit_code == 2 and "ASCII digits" in result.stderr
