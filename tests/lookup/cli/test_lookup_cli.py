"""``lookup`` command line: JSON keys, live fallback, exit codes and messages."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from lookup.cli.commands import main
from lookup.cli.output import words


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_eps_delta_eps0_max_info(table_path: Path) -> None:
    t = str(table_path)
    code, out, _ = run("eps", "--mechanism", "krr", "--k", "3", "--eps0", "1.5", "--n", "50", "--delta", "1e-6",
                       "--table", t, "--json", "--max-slack", "none")
    assert code == 0
    answer = json.loads(out)
    assert {"eps", "eps_lower", "certified", "source", "corner", "slack"} <= set(answer)
    assert answer["source"] == "table" and answer["certified"] is True
    # 1e-6 is between the grid deltas 1e-7 and 1e-5: the chord between them
    assert answer["corner"] == {"eps0": 2.0, "n": 40.0, "delta": 1e-7, "delta_upper": 1e-5}
    code, out, _ = run("delta", "--mechanism", "generic", "--eps0", "1", "--n", "80", "--eps", "0.9", "--table", t,
                       "--json")
    assert code == 0 and 0 <= json.loads(out)["delta"] < 1
    code, out, _ = run("eps0-max", "--mechanism", "krr", "--k", "3", "--eps", "0.9", "--n", "80", "--delta", "1e-6",
                       "--table", t, "--json")
    assert code == 0 and json.loads(out)["eps0"] >= 0.9
    code, out, _ = run("info", "--table", t, "--json")
    assert code == 0 and json.loads(out)["mechanisms"] == ["krr k=3", "generic"]


def test_errors(table_path: Path) -> None:
    t = str(table_path)
    code, _, err = run("eps", "--mechanism", "krr", "--k", "3", "--eps0", "0", "--n", "50", "--delta", "1e-6",
                       "--table", t)
    assert code == 2 and "eps0 must be >= 1e-06" in err
    code, _, err = run("eps", "--mechanism", "krr", "--k", "3", "--eps0", "9", "--n", "50", "--delta", "1e-6",
                       "--table", t, "--no-live")
    assert code == 3 and "covers: mechanisms krr k=3, generic" in err
    code, _, err = run("eps", "--mechanism", "krr", "--k", "3", "--eps0", "x", "--n", "50", "--delta", "1e-6")
    assert code == 2 and "eps0 must be a number" in err
    code, _, err = run("info", "--table", str(table_path.parent / "absent.zarr"))
    assert code == 3 and "not a published table" in err


def test_composed_mechanisms_are_answered_live(table_path: Path) -> None:
    """joint / parallel / finite take the engine's parameters on the lookup command line too."""
    from tablegen.engine import eps_bounds

    code, out, err = run("eps", "--mechanism", "joint", "--base", "krr", "--k", "3", "--parts", "2", "--eps0", "1.5",
                         "--n", "50", "--delta", "1e-6", "--table", str(table_path), "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["source"] == "live"
    assert answer["eps"] == eps_bounds("joint", eps0=1.5, n=50, delta=1e-6, base="krr", k=3, parts=2).upper
    code, _, err = run("eps", "--mechanism", "finite", "--matrix", "[[0.7,0.3]", "--eps0", "1", "--n", "50",
                       "--delta", "1e-6", "--table", str(table_path))
    assert code == 2 and "matrix must be a JSON list" in err
    code, _, err = run("eps", "--mechanism", "finite", "--matrix", "[" * 5000, "--eps0", "1", "--n", "50",
                       "--delta", "1e-6", "--table", str(table_path))
    assert code == 2 and "matrix must be a JSON list" in err



def test_text_output_is_in_words(table_path: Path) -> None:
    """No Python reprs (None, dicts, True); slack as a factor and percentage; source in words; info labelled."""
    t = str(table_path)
    query = ["eps", "--mechanism", "krr", "--k", "3", "--eps0", "1.5", "--n", "50", "--delta", "1e-6", "--table", t]
    code, out, _ = run(*query, "--max-slack", "none")
    answer = json.loads(run(*query, "--json", "--max-slack", "none")[1])
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert code == 0 and not any(word in out for word in ("None", "{", "True", "nan"))
    assert float(lines["eps"]) == answer["eps"]  # certified numbers printed in full
    assert lines["corner"] == "grid point eps0 2, n 40, delta on the chord between 1e-07 and 1e-05"
    assert lines["slack"].startswith(f"the table answer may be up to {1 + answer['slack']:.3g}x the live")
    assert f"(+{100 * answer['slack']:.3g}%" in lines["slack"]
    assert lines["source"] == "table (precomputed)"
    code, out, _ = run(*query)  # the default max slack: refined by the engine
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert code == 0 and lines["corner"] == "none (computed live)"
    assert lines["source"] in ("certified estimate (interpolated from the table, then certified by the engine)",
                               "live (computed by the engine's certified search)")
    refined = {"eps": 0.5, "source": "certified estimate", "slack": 0.0198}
    assert words("slack", 0.0198, refined) == ("at most 1.98% above the live certified value (the engine refused "
                                               "an eps 1.98% smaller)")
    budget = {"eps0": 2.0, "source": "certified estimate", "slack": 0.0198}
    assert words("slack", 0.0198, budget).startswith("about 1.98% below the live certified eps0-max")
    code, out, _ = run("eps", "--mechanism", "krr", "--k", "3", "--eps0", "9", "--n", "50", "--delta", "1e-6",
                       "--table", t)
    assert "source: live" in out and "corner: none (computed live)" in out and "slack: none (computed live" in out
    code, _, err = run(*query, "--max-slack", "lots")
    assert code == 2 and "max_slack must be a number" in err
    code, out, _ = run("info", "--table", t)
    assert code == 0 and "eps0: 0.5 to 4 (4 grid values)" in out and "mechanisms: krr k=3, generic" in out


def test_c_path_names_the_c_reader_sources() -> None:
    result = CliRunner().invoke(main, ["c-path"])
    folder = Path(result.output.strip())
    assert result.exit_code == 0 and folder.is_dir()
    assert {"shuffle_eps_device.h", "shuffle_eps_device.c", "shuffle_eps_query.c"} <= {p.name for p in folder.iterdir()}


def test_eps0_answered_because_delta0_uses_up_delta_says_so(table_path: Path) -> None:
    """The engine's note (tests/tablegen/test_cli.py) in lookup's answer too: the table has no
    delta0 rows, so the question is answered live, by the same path."""
    from test_cli import DELTA0_QUESTION, explains_delta0

    code, out, _ = run("eps", *DELTA0_QUESTION, "--table", str(table_path), "--json")
    answer = json.loads(out)
    assert code == 0 and answer["eps"] == 1.0 and answer["source"] == "live" and explains_delta0(answer["note"])
    assert f"note: {answer['note']}\n" in run("eps", *DELTA0_QUESTION, "--table", str(table_path))[1]


def test_mechanism_names_in_any_case(table_path: Path) -> None:
    """kRR is krr: answered from the table's krr row, as the Python API answers it."""
    import lookup

    question = ["--k", "3", "--eps0", "1.5", "--n", "50", "--delta", "1e-6", "--table", str(table_path), "--json",
                "--max-slack", "none"]
    (code, lower, _), (mixed_code, mixed, _) = (run("eps", "--mechanism", name, *question) for name in ("krr", "kRR"))
    assert code == mixed_code == 0 and mixed == lower and json.loads(mixed)["source"] == "table"
    a, b = (lookup.eps(name, k=3, eps0=1.5, n=50, delta=1e-6, table=str(table_path), max_slack=None)
            for name in ("KRR", "krr"))
    assert a == b and a.source == "table"
    assert run("calibrate", "--mechanism", "Binary-Sum", "--eps", "1", "--delta", "1e-6", "--n", "1e5")[0] == 0


def _one_line_refusal(code: int, out: str, err: str, name: str) -> None:
    assert code == 2 and not out and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and name in err, err


def test_look_alike_digits_and_tiny_sample_rates_exit_2_naming_the_parameter(table_path: Path) -> None:
    """Issue 55: ``--delta 1e-৪`` (a Bengali four, which reads as an 8) was answered at 1e-4;
    ``--rounds 3 --sample-rate 1e-300`` printed a raw traceback (OverflowError)."""
    t = str(table_path)
    base = {"--k": "3", "--eps0": "1.5", "--n": "50", "--delta": "1e-6"}
    for option, text in (("--delta", "1e-৪"), ("--eps0", "৪"), ("--k", "৩"), ("--n", "5৪")):
        args = [x for k, v in {**base, option: text}.items() for x in (k, v)]
        code, out, err = run("eps", "--mechanism", "krr", *args, "--table", t, "--json")
        _one_line_refusal(code, out, err, "ASCII digits")
        assert option.lstrip("-") in err
    code, out, err = run("eps", "--mechanism", "krr", "--k", "3", "--eps0", "1.5", "--n", "50", "--delta", "1e-6",
                         "--rounds", "3", "--sample-rate", "1e-300", "--table", t, "--json")
    _one_line_refusal(code, out, err, "sample_rate must lie in [1e-12, 1]")
    code, out, err = run("serve", "--port", "৮০")  # click's own int() read it as 80
    assert code == 2 and "ASCII digits" in err
