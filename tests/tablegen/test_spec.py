"""Grid specs: expansion of axes and mechanisms, and refusal of bad specs before any work."""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tablegen import store
from tablegen.build import header
from tablegen.spec import SpecError, load_spec

GOOD = """
title = "t"
[axes]
eps0 = [0.5, 1.0]
n = {start = 1e2, stop = 1e8, per_decade = 2}
delta = [1e-8, 1e-6]
[[mechanism]]
family = "krr"
k = [2, 10]
[[mechanism]]
family = "olh"
g = 3
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def test_good_spec_expands_rows_and_axes(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    assert [r.label for r in spec.rows] == ["krr k=2", "krr k=10", "olh g=3"]
    np.testing.assert_array_equal(spec.n, np.round(10.0 ** np.arange(2, 8.01, 0.5)))
    assert spec.shape == (3, 2, 13, 2)
    assert spec.curve_count == 3 * 2 * 13 and spec.slice_count == 3 * 2
    assert spec.settings["lower_every"] is None  # no lower bounds unless asked for
    assert not any(spec.wants_lower(e, j) for e in range(2) for j in range(13))
    assert spec.digest() == load_spec(write(tmp_path, GOOD)).digest()
    assert spec.digest() != load_spec(write(tmp_path, GOOD.replace("0.5, 1.0", "0.5, 1.5"))).digest()


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        (('family = "olh"', 'family = "nope"'), "mechanism[1].family", "unknown mechanism"),
        (("eps0 = [0.5, 1.0]", "eps0 = []"), "axes.eps0", "empty axis"),
        (("eps0 = [0.5, 1.0]", "eps0 = [1.0, 0.5]"), "axes.eps0", "strictly ascending"),
        (("delta = [1e-8, 1e-6]", "delta = [1e-8, 1.5]"), "axes.delta", "delta must be in (0, 1)"),
        (("eps0 = [0.5, 1.0]", "eps0 = [-1.0, 1.0]"), "axes.eps0", "eps0 must be >= 1e-06"),
        (("n = {start = 1e2, stop = 1e8, per_decade = 2}", "n = [0, 5]"), "axes.n", "n must be >= 1"),
        (("n = {start = 1e2, stop = 1e8, per_decade = 2}", "n = [2.5, 3.5]"), "axes.n", "must be integers"),
        (('family = "olh"', 'family = "generic"\ndelta0 = 1e-9'), "mechanism[1]", "delta0 > 0"),
        (("k = [2, 10]", "k = [1, 10]"), "mechanism[0] (krr k=1)", "k"),
        (("g = 3", "g = 3\ncolour = 2"), "mechanism[1] (olh colour=2 g=3)", "no parameter 'colour'"),
        (("g = 3", "g = 3\ndomain = [1]"), "mechanism[1] (olh domain=1 g=3)", "domain"),
        (('title = "t"', 'title = "t"\nspeed = 1'), "speed", "unknown key"),
        (('title = "t"', 'title = "t"\n[settings]\nresolution = 0'), "settings.resolution", "[1, 1000]"),
        (("n = {start = 1e2, stop = 1e8, per_decade = 2}", "n = {start = 1e8, stop = 1e2, per_decade = 2}"),
         "axes.n", "start < stop"),
    ],
)
def test_bad_spec_names_file_key_and_reason(tmp_path: Path, change: tuple[str, str], key: str, reason: str) -> None:
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}")
    assert reason in message


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "absent.toml")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(write(tmp_path, "[axes\n"))


@pytest.mark.parametrize("name", ["smoke", "default", "full"])
def test_shipped_specs_are_valid(name: str) -> None:
    spec = load_spec(Path(__file__).parents[2] / "workflows" / f"{name}.toml")
    assert spec.eps0.size and spec.n.size and spec.delta.size


def test_segments_join_geometric_and_linear(tmp_path: Path) -> None:
    text = GOOD.replace("eps0 = [0.5, 1.0]", "eps0 = [{start = 0.1, stop = 1.0, per_decade = 2}, "
                        "{start = 1.5, stop = 2.5, step = 0.5}]")
    spec = load_spec(write(tmp_path, text))
    np.testing.assert_allclose(spec.eps0, [0.1, 10**-0.5, 1.0, 1.5, 2.0, 2.5])
    overlapping = text.replace("start = 1.5", "start = 0.5")
    with pytest.raises(SpecError, match="strictly ascending"):
        load_spec(write(tmp_path, overlapping))


def test_lower_bound_subgrid(tmp_path: Path) -> None:
    text = GOOD.replace('title = "t"', 'title = "t"\n[settings]\nlower_every = [1, 4]\nlower_n_max = 1e6')
    spec = load_spec(write(tmp_path, text))
    with_lower = [float(spec.n[j]) for j in range(spec.n.size) if spec.wants_lower(0, j)]
    assert with_lower == [1e2, 1e4, 1e6]
    assert all(spec.wants_lower(1, j) == spec.wants_lower(0, j) for j in range(spec.n.size))  # every eps0
    strided = load_spec(write(tmp_path, text.replace("[1, 4]", "[2, 4]")))
    assert strided.wants_lower(0, 0) and not strided.wants_lower(1, 0) and strided.wants_lower(2, 4)


def test_matrix_parameter_is_one_value(tmp_path: Path) -> None:
    text = GOOD.replace('family = "olh"\ng = 3', 'family = "finite"\nmatrix = [[0.6, 0.4], [0.4, 0.6]]')
    spec = load_spec(write(tmp_path, text))
    assert spec.rows[-1].params == {"matrix": [[0.6, 0.4], [0.4, 0.6]]}


ROOT = Path(__file__).parents[2]


def correctly_rounded_power_of_ten(numerator: int, denominator: int) -> float:
    """The float nearest 10^(numerator / denominator), by integer arithmetic alone: the candidate
    from floats is moved until it is the nearest double (x^denominator compared with 10^numerator
    exactly, as fractions), independent of any float power or decimal module."""
    target = Fraction(10) ** numerator

    def above(x: Fraction) -> bool:  # x > 10^(numerator / denominator)
        return x ** denominator > target

    x = 10.0 ** (numerator / denominator)
    while True:
        down, up = math.nextafter(x, 0), math.nextafter(x, math.inf)
        if above((Fraction(x) + Fraction(down)) / 2):
            x = down  # the true value lies below the midpoint between x and its lower neighbour
        elif not above((Fraction(x) + Fraction(up)) / 2):
            x = up
        else:
            return x


def test_geometric_axes_are_the_exact_values_rounded_once() -> None:
    spec = load_spec(ROOT / "workflows" / "default.toml")
    # delta = 1e-12 * 10^(i / 2) = 10^((i - 24) / 2): half-decades, where numpy's float power was one ulp low
    assert spec.delta.tolist() == [correctly_rounded_power_of_ten(i - 24, 2) for i in range(19)]
    assert spec.delta.tolist()[14] == 1e-5
    # n = the integer nearest 100 * 10^(i / 50): (2n - 1)^50 < 2^50 * 10^(100 + i) < (2n + 1)^50
    for i, n in enumerate(spec.n.astype(int).tolist()):
        assert (2 * n - 1) ** 50 < 2**50 * 10 ** (100 + i) < (2 * n + 1) ** 50


def test_digest_covers_the_text_not_generated_floats(tmp_path: Path) -> None:
    """Another machine's float path (numpy's power, one ulp off at some half-decades) changes
    generated values, never the digest; the numbers as written do."""
    spec = load_spec(ROOT / "workflows" / "default.toml")
    numpy_path = 1e-12 * 10.0 ** (np.arange(19) / 2)
    other = dataclasses.replace(spec, delta=numpy_path, eps0=np.nextafter(spec.eps0, 9))
    assert other.digest() == spec.digest()
    text = (ROOT / "workflows" / "default.toml").read_text()
    assert load_spec(write(tmp_path, text.replace("per_decade = 2}", "per_decade = 4}"))).digest() != spec.digest()


@pytest.mark.parametrize(("name", "value"), [("method", '"slice"'), ("method", '"curve"'),
                                             ("lower_method", '"slice"')])
def test_a_spec_naming_the_build_method_is_told_it_is_no_longer_needed(tmp_path: Path, name: str,
                                                                       value: str) -> None:
    from click.testing import CliRunner

    from tablegen.cli import main

    path = write(tmp_path, GOOD.replace('title = "t"', f'title = "t"\n[settings]\n{name} = {value}'))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}: settings.{name}: no longer needed: every table is built by slices")
    result = CliRunner().invoke(main, ["build", "--spec", str(path), "--out", str(tmp_path / "t.zarr")])
    assert result.exit_code == 2 and "no longer needed" in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)  # a clean exit (status 2), not a traceback
    assert not (tmp_path / "t.zarr").exists()


@pytest.mark.parametrize("name", ["default"])
def test_a_shipped_spec_keeps_the_digest_its_table_records(name: str) -> None:
    """The table was built by slices from a spec that named them (method = "slice", lower_method =
    "slice"); the spec without those settings hashes to the digest the table records, so the
    README's first command finds it built by this spec."""
    spec = load_spec(ROOT / "workflows" / f"{name}.toml")
    attributes = store.root_attributes(ROOT / "data" / f"{name}.zarr")
    assert spec.digest() == attributes["spec_sha256"]
    assert json.dumps(spec.canonical(), sort_keys=True) == attributes["spec"]
    recorded = json.loads(attributes["spec"])["settings"]
    assert (recorded["method"], recorded["lower_method"]) == ("slice", "slice")


def test_shipped_table_is_up_to_date_with_its_spec() -> None:
    """The README's first command finds data/default.zarr up to date and computes nothing."""
    spec = load_spec(ROOT / "workflows" / "default.toml")
    table = ROOT / "data" / "default.zarr"
    assert store.up_to_date(table, header(spec))
    recorded = json.loads(store.root_attributes(table)["spec"])
    for axis in ("eps0", "n", "delta"):
        assert recorded[axis] == getattr(spec, axis).tolist()
