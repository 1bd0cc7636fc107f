"""``tablegen export --device`` computed for one deployment (tablegen/export.py ``export_deployment``).

Checked here: the stored values are the engine's certified ones at the stored n (rounded up to
float32), the stored n meet max_slack, every answer from a file is at least the exact eps of the
analysis (k-RR blanket law and the generic clone law, by exact sums at moderate n, from
``shuffle_reference``: docs/soundness.md makes eps0 rounded up, n rounded down and the chord in
delta sound, and this checks it end to end), and what a file cannot answer is refused, by the
readers and by ``lookup eps --no-live``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shuffle_reference import binary_rr_delta, clone_law, exact_delta, krr_upper_law

import lookup
from lookup.device.files import read_device
from lookup.store.table import TableError
from tablegen.cli import main as tablegen_main
from tablegen.engine import gaussian
from tablegen.engine.dense import eps_slice
from tablegen.export import SLACK_FLOOR, export_deployment, monotone_in_sigma
from tablegen.store import round_float32

ABS = 1e-15  # as test_engine_exact: absolute slack above an exact delta (the engine's own rounding)


@pytest.fixture(scope="module")
def krr_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("export") / "krr3.dev"
    report = export_deployment(out, "krr", {"k": 3}, eps0=[1.5, 0.8], delta=[1e-4, 1e-6], n_min=200, n_max=2e4,
                               max_slack=0.01)
    return out, report


def test_computed_file_stores_the_engine_values_at_its_axes(krr_file: tuple[Path, dict]) -> None:
    path, report = krr_file
    h = read_device(str(path)).header
    assert h["eps0"] == [0.8, 1.5] and h["delta"] == [1e-6, 1e-4]  # exactly what was asked, sorted
    assert h["n"][0] == 200 and h["n"][-1] == 20000 and report["shape"] == [1, 2, len(h["n"]), 2]
    assert h["rows"] == [{"k": 3}] and h["eps0_monotone"] == [True] and h["source"]["engine_version"]
    assert report["bytes"] == path.stat().st_size == 12 + report["header_bytes"] + 8 * 2 * len(h["n"]) * 2
    device = read_device(str(path))
    pick = [0, 7, len(h["n"]) // 2, len(h["n"]) - 1]
    for e, eps0 in enumerate(h["eps0"]):
        want = round_float32(eps_slice("krr", eps0=eps0, ns=[h["n"][j] for j in pick], deltas=h["delta"],
                                       resolution=10.0, k=3), up=True)
        got = [[device.value(0, e, j, d) for d in range(2)] for j in pick]
        np.testing.assert_array_equal(np.array(got, dtype=np.float32), want)
        lower = [[device.lower[device.shape[2] * 2 * e + 2 * j + d] for d in range(2)] for j in pick]
        assert np.all((np.array(lower) >= 0) & (np.array(lower) <= np.array(got))) and np.any(np.array(lower) > 0)
        # (0: nothing proved there, lower_slice's convention)


def test_computed_file_meets_max_slack(krr_file: tuple[Path, dict]) -> None:
    path, report = krr_file
    device = read_device(str(path))
    n = device.header["n"]
    worst = 0.0
    for e in range(2):
        for d in range(2):
            for j in range(len(n) - 1):
                here, nxt = device.value(0, e, j, d), device.value(0, e, j + 1, d)
                if nxt >= SLACK_FLOOR and n[j + 1] > n[j] + 1:
                    worst = max(worst, here / nxt - 1)
    assert 0 < worst <= report["slack_aim"] < report["max_slack"] == 0.01
    assert report["worst_slack"] == pytest.approx(worst, rel=1e-9)
    # refined where needed only: far fewer n than adjacent integers, more than the 20-per-decade start
    assert 2 * 20 < len(n) < 1000


def test_computed_file_answers_through_lookup_and_refuses_what_it_cannot(krr_file: tuple[Path, dict]) -> None:
    path, _ = krr_file
    device = read_device(str(path))
    got = lookup.eps("krr", eps0=1.2, n=5000, delta=1e-5, table=str(path), live=False, k=3)
    assert got.value == pytest.approx(device.eps({"k": 3}, 1.2, 5000, 1e-5), rel=1e-12)
    for eps0, n, delta, params in [(1.6, 5000, 1e-5, {"k": 3}),   # eps0 above the largest stored
                                   (1.0, 199, 1e-5, {"k": 3}),    # n below n_min
                                   (1.0, 5000, 1e-7, {"k": 3}),   # delta below the smallest stored
                                   (1.0, 5000, 1e-5, {"k": 2})]:  # another row (a smaller k: no bound from k=3;
        # lookup answers a LARGER k from k = 3, lookup.answer.rules: the exact eps of k-RR is non-increasing in k)
        with pytest.raises(ValueError, match="does not cover"):
            device.eps(params, eps0, n, delta)
        with pytest.raises(TableError, match="cannot answer"):
            lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=str(path), live=False, **params)
    with pytest.raises(TableError, match="cannot answer"):  # another mechanism
        lookup.eps("oue", eps0=1.0, n=5000, delta=1e-5, table=str(path), live=False)


@pytest.mark.parametrize("args", [["--eps0", "1.6", "--n", "5000", "--delta", "1e-5", "--k", "3"],
                                  ["--eps0", "1.0", "--n", "199", "--delta", "1e-5", "--k", "3"],
                                  ["--eps0", "1.0", "--n", "5000", "--delta", "1e-7", "--k", "3"]])
def test_lookup_cli_with_no_live_refuses_outside_the_file(krr_file: tuple[Path, dict], args: list[str]) -> None:
    from lookup.cli.commands import main

    path, _ = krr_file
    result = CliRunner().invoke(main, ["eps", "--mechanism", "krr", *args, "--table", str(path), "--no-live"])
    assert result.exit_code != 0 and result.exception is None or isinstance(result.exception, SystemExit)
    assert "cannot answer" in result.output and "Traceback" not in result.output
    ok = CliRunner().invoke(main, ["eps", "--mechanism", "krr", "--k", "3", "--eps0", "1", "--n", "5000",
                                   "--delta", "1e-5", "--table", str(path), "--no-live", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output)["certified"] is True


def test_export_cli_computes_the_deployment(tmp_path: Path) -> None:
    from tablegen.cli import main

    out = tmp_path / "g.dev"
    args = ["export", "--device", "--mechanism", "generic", "--eps0", "2.2", "--n-min", "1e3", "--n-max", "1e4",
            "--delta", "1e-6", "--max-slack", "0.02", "--out", str(out)]
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0, text.output
    assert "computed in" in text.output and "stored values" in text.output and "worst slack:" in text.output
    report = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert report["computed"] and report["eps0"] == [2.2] and report["delta"] == [1e-6]
    assert report["n"][0] == 1000 and report["n"][-1] == 10000 and report["worst_slack"] <= 0.02
    for bad, message in [(["--eps0", "0"], "eps0 must be >= 1e-06"), (["--delta", "2"], "delta must be in (0, 1)"),
                         (["--n-min", "1e5"], "n_min <= n_max"), (["--max-slack", "0"], "max_slack must be in")]:
        result = CliRunner().invoke(main, [*args, *bad])
        assert result.exit_code == 2 and message in result.output, (bad, result.output)
    missing = CliRunner().invoke(main, ["export", "--device", "--mechanism", "krr", "--k", "3", "--eps0", "1",
                                        "--out", str(out)])
    assert missing.exit_code == 2 and "--delta" in missing.output


LAWS = {"krr": lambda eps0, eps, params: krr_upper_law(eps0, eps, params["k"]),
        "generic": lambda eps0, eps, params: clone_law(eps0, eps)}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(family=st.sampled_from(["krr", "generic"]), k=st.integers(2, 5),
       eps0=st.lists(st.floats(0.3, 2.5), min_size=1, max_size=2),
       n_min=st.integers(10, 40), span=st.integers(5, 40),
       delta=st.lists(st.sampled_from([1e-6, 1e-5, 1e-4, 1e-3]), min_size=1, max_size=2, unique=True),
       queries=st.lists(st.tuples(st.floats(0.05, 1.0), st.integers(0, 60), st.floats(0.0, 1.0)),
                        min_size=3, max_size=6))
def test_answers_from_a_file_are_at_least_the_exact_eps(tmp_path: Path, family: str, k: int, eps0: list[float],
                                                       n_min: int, span: int, delta: list[float],
                                                       queries: list[tuple[float, int, float]]) -> None:
    """Random small deployments and queries: exact delta at the answered eps <= the query's delta,
    i.e. the exact eps is at most the answer (delta is non-increasing in eps).  Exact: the blanket law's
    for k-RR k >= 3 and the generic clone (the analyses the engine certifies), every dataset's for k = 2."""
    params = {"k": k} if family == "krr" else {}
    out = tmp_path / "h.dev"
    export_deployment(out, family, params, eps0=eps0, delta=delta, n_min=n_min, n_max=n_min + span,
                      max_slack=0.02, lower=False)
    device = read_device(str(out))
    stored = device.header
    for frac, extra, where in queries:
        e0 = frac * stored["eps0"][-1]
        n = n_min + extra  # beyond n_max too: answered at the largest stored n, still sound
        lo, hi = math.log(stored["delta"][0]), math.log(0.5)
        d = min(max(math.exp(lo + where * (hi - lo)), stored["delta"][0]), 0.5)  # exp(log(x)) may fall below x
        answer = device.eps(params, e0, n, d)
        exact = (binary_rr_delta(e0, answer, n) if params.get("k") == 2  # binary RR: the exact worst case
                 else exact_delta(*LAWS[family](e0, answer, params), n))
        assert exact <= d + ABS, (family, params, e0, n, d, answer)


def test_binary_rr_device_file_stores_the_exact_path(tmp_path: Path) -> None:
    """k = 2: every stored eps certifies the exact worst case over datasets (enumeration of every m and
    both directions), within 1% of it, is monotone in n, and lies below the blanket bound's slice."""
    out = tmp_path / "k2.dev"
    export_deployment(out, "krr", {"k": 2}, eps0=[1.0], delta=[1e-4], n_min=40, n_max=60, max_slack=0.02, lower=False)
    device = read_device(str(out))
    ns = device.header["n"]
    values = [device.eps({"k": 2}, 1.0, n, 1e-4) for n in ns]
    blanket = eps_slice("krr", eps0=1.0, ns=ns, deltas=[1e-4], k=2)[:, 0]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(values, values[1:], strict=False))  # non-increasing in n
    for n, v, top in zip(ns, values, blanket, strict=True):
        assert binary_rr_delta(1.0, v, n) <= 1e-4 + ABS  # certified
        assert binary_rr_delta(1.0, v / 1.01, n) > 1e-4  # within 1% of the exact eps
        assert v < top  # tighter than the blanket bound


def test_monotone_in_sigma_carries_each_bound_its_own_way() -> None:
    """Upper bounds carried to larger sigma, n and delta (the smallest of those at or below a point),
    lower bounds to smaller ones (the largest of those at or above it, then at most the upper one): by
    loops over every pair of points, against the running minima and maxima."""
    rng = np.random.default_rng(5)
    upper, lower = rng.uniform(0.1, 1, (3, 4, 2)), rng.uniform(0.05, 1.2, (3, 4, 2))
    lower[1, 2, 0] = np.nan  # none there: the others carried over it
    got_upper, got_lower = monotone_in_sigma(upper, lower)
    for i, j, d in np.ndindex(*upper.shape):
        below = upper[:i + 1, :j + 1, :d + 1]
        assert got_upper[i, j, d] == below.min()
        above = lower[i:, j:, d:]
        assert got_lower[i, j, d] == min(np.nanmax(above), got_upper[i, j, d])
    none = monotone_in_sigma(upper, np.full_like(lower, np.nan))[1]
    assert np.isnan(none).all()  # no lower bound is never made one (the upper bound is not a lower bound)


def test_gaussian_export_stores_the_engine_value(tmp_path: Path) -> None:
    """``tablegen export --device --mechanism gaussian``: a format-3 file over sigma holding the engine's
    certified eps (its profile read at the delta, ``eps_curve``) rounded up to float32; the options of the
    eps0 mechanisms refused by name."""
    out = tmp_path / "g.dev"
    args = ["export", "--device", "--mechanism", "gaussian", "--sigma", "2", "--n-min", "1e4", "--n-max", "1e4",
            "--delta", "1e-6", "--no-lower", "--out", str(out)]
    report = json.loads(CliRunner().invoke(tablegen_main, [*args, "--json"]).stdout)  # progress: stderr
    assert report["sigma"] == [2.0] and report["n"] == [10000] and report["shape"] == [1, 1, 1, 1]
    device = read_device(str(out))
    assert (device.header["format"], device.header["axis"], device.axis) == (3, "sigma", "sigma")
    want = round_float32(np.array(gaussian.eps_curve(2.0, 10000, [1e-6])[0][0]), up=True)
    engine = gaussian.eps_bounds(2.0, 10000, 1e-6)  # the live search: the file's profile is within 5% of it
    assert device.value(0, 0, 0, 0) == want and math.isnan(device.lower[0])
    assert engine.lower <= want <= engine.upper * 1.05
    assert device.eps_sigma({"inputs": "bits"}, 3.0, 2e4, 1e-5) == device.value(0, 0, 0, 0)
    for extra, word in ((["--eps0", "1"], "--eps0"), (["--k", "3"], "--k"), (["--inputs", "reals"], "reals")):
        refused = CliRunner().invoke(tablegen_main, [*args, *extra])
        assert refused.exit_code == 2 and word in refused.output, refused.output
    for sigma in ("0.1", "51"):
        refused = CliRunner().invoke(tablegen_main, [*args[:4], "--sigma", sigma, *args[6:]])
        assert refused.exit_code == 2 and "sigma must be in [0.2, 50]" in refused.output, refused.output
