"""Device files: float32 rounded the safe way, same answers as the table (never lower), a
standard-library reader that works without numpy, refused when corrupted."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lookup
from lookup.device.files import encode, member_text, read_device
from lookup.trust import origin as trust
from tablegen.export import export_device, worst_slack
from tablegen.store import round_float32

FLOATS = st.floats(1e-30, 30.0, allow_subnormal=False)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(FLOATS, min_size=1, max_size=20))
def test_float32_rounding_direction(values: list[float]) -> None:
    x = np.array(values)
    up, down = round_float32(x, up=True).astype(float), round_float32(x, up=False).astype(float)
    assert np.all(up >= x) and np.all(down <= x)
    assert np.all(up - down <= 2 * np.spacing(up.astype(np.float32)).astype(float))
    assert np.isnan(round_float32(np.array([np.nan]), up=True)[0])


def test_device_answers_are_the_table_rounded_up(table_path: Path, tmp_path: Path) -> None:
    device = tmp_path / "krr.dev"
    export_device(device, "krr", {}, str(table_path))
    rng = np.random.default_rng(3)
    eps0, n, delta = rng.uniform(0.5, 4, 50), rng.integers(20, 200, 50), 10 ** rng.uniform(-9, -3, 50)
    full = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=table_path, live=False, k=3)
    small = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=str(device), live=False, k=3)
    assert np.all(small.value >= full.value) and np.all(small.value <= full.value * (1 + 2.5e-7))
    assert np.all(np.nan_to_num(small.lower) <= np.nan_to_num(full.lower))
    reader = read_device(str(device))
    for i in range(50):
        assert reader.eps({"k": 3}, eps0[i], n[i], delta[i]) == pytest.approx(small.value[i], rel=1e-12)


def test_standard_library_reader_without_numpy(table_path: Path, tmp_path: Path) -> None:
    device = tmp_path / "krr.dev"
    export_device(device, "krr", {"k": 3}, str(table_path))
    source = Path(__file__).parents[3] / "lookup" / "device" / "files.py"
    code = (
        "import sys, importlib.util; sys.modules['numpy'] = None\n"
        f"spec = importlib.util.spec_from_file_location('device', {str(source)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"print(m.read_device({str(device)!r}, verified=False).eps({{'k': 3}}, 1.5, 50, 1e-6))"  # no lookup.trust
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    expected = lookup.eps("krr", eps0=1.5, n=50, delta=1e-6, table=str(device), k=3, max_slack=None).value
    assert float(out.stdout) == pytest.approx(expected, rel=1e-12)


def test_corrupted_device_file_is_refused(table_path: Path, tmp_path: Path) -> None:
    device = tmp_path / "krr.dev"
    export_device(device, "krr", {}, str(table_path))
    data = bytearray(device.read_bytes())
    data[-5] ^= 1
    device.write_bytes(bytes(data))
    with pytest.raises(lookup.TableError, match="do not match their SHA-256"):
        lookup.open_table(device)
    with pytest.raises(ValueError, match="no row of mechanism='oue'"):
        export_device(tmp_path / "x.dev", "oue", {}, str(table_path))


def test_tampered_device_header_is_refused(table_path: Path, tmp_path: Path) -> None:
    device = tmp_path / "krr.dev"
    export_device(device, "krr", {}, str(table_path))
    data = device.read_bytes().replace(b'"n":[20.0,40.0,80.0]', b'"n":[10.0,40.0,80.0]')  # same length
    assert data != device.read_bytes()
    device.write_bytes(data)
    with pytest.raises(lookup.TableError, match="do not match their SHA-256"):
        lookup.open_table(device)


def _rewritten(device: Path, edit: Any) -> None:
    """The device file with its header edited by ``edit`` and its checksum recomputed to match."""
    data = device.read_bytes()
    (length,) = struct.unpack_from("<I", data, 8)
    header, payload = json.loads(data[12:12 + length]), data[12 + length:]
    edit(header)
    device.write_bytes(encode(header, payload))  # sealed with a matching SHA-256 (format 2)


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda h: h.pop("rows"), "header key 'rows' is missing"),
    (lambda h: h.update(delta="1e-6"), "header key 'delta' is missing or not a list"),
    (lambda h: h.update(n=[40.0, 20.0, 80.0]), "header axis 'n' is not finite numbers strictly increasing"),
])
def test_malformed_device_header_with_a_matching_checksum_is_refused(table_path: Path, tmp_path: Path, edit: Any,
                                                                      reason: str) -> None:
    device = tmp_path / "krr.dev"
    export_device(device, "krr", {}, str(table_path))
    _rewritten(device, edit)
    with pytest.raises(lookup.TableError, match=reason):
        lookup.open_table(device)


def test_device_axis_edited_with_a_matching_checksum_is_refused(table_path: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """eps0 2.0 relabelled 2.5 (answers for 2.5 would be those of 2.0): the spot checks refuse it."""
    monkeypatch.setattr(trust, "vouch", REAL_VOUCH)
    device = tmp_path / "krr.dev"
    export_device(device, "krr", {}, str(table_path))
    _rewritten(device, lambda h: h.update(eps0=[0.5, 1.0, 2.5, 4.0]))
    with pytest.raises(lookup.TableError, match="the engine does not certify"):
        lookup.open_table(device)


# --- device files cut to a deployment -------------------------------------------------------

CUT_SPEC = {
    "title": "synthetic dense table",
    "axes": {"eps0": [0.25, 0.5, 1.0, 2.0, 4.0], "n": {"start": 1e2, "stop": 1e9, "per_decade": 100},
             "delta": np.geomspace(1e-12, 1e-3, 25).tolist()},
    "mechanism": [{"family": "krr", "k": [3, 10]}],
}


REAL_VOUCH = trust.vouch


@pytest.fixture(autouse=True)
def synthetic_tables_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables of this module hold synthetic values (no engine behind them): taken as vouched
    for, as a table built here would be (lookup.trust.origin, tested in test_lookup_trust*.py)."""
    monkeypatch.setattr(trust, "vouch", lambda *args: None)
    monkeypatch.setattr(trust, "provenance", lambda path, digest, message=None: ("built", ""))  # read_device's


@pytest.fixture(scope="module")
def dense_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compact table at the dense table's n density (100 per decade, 1e2..1e9) with smooth
    synthetic values (a closed form shaped like eps: up in eps0, down in n and delta)."""
    from tablegen import store
    from tablegen.build import dataset
    from tablegen.spec import spec_from_dict

    spec = spec_from_dict(CUT_SPEC, "cut-test")
    e0, n, d = np.meshgrid(spec.eps0, spec.n.astype(float), spec.delta, indexing="ij")
    eps = np.minimum(e0, 4 * np.sqrt(np.expm1(e0) * np.log(4 / d) / n))
    eps = np.stack([eps, np.minimum(1.1 * eps, e0)])
    out = tmp_path_factory.mktemp("dense") / "dense.zarr"
    store.publish(dataset(spec, {"eps": eps, "eps_lower": 0.99 * eps}, "test"), out, store.CERTIFIED_ROUNDING)
    return out


def test_cut_has_the_size_of_its_shape_and_answers_as_the_table(dense_path: Path, tmp_path: Path) -> None:
    device = tmp_path / "krr10.dev"
    asked = [1e-10, 1e-8, 1e-6, 1e-4]
    report = export_device(device, "krr", {"k": 10}, str(dense_path), eps0=[0.5, 1, 2], n_min=1e3, n_max=1e9,
                           delta=asked)
    full = lookup.open_table(dense_path)
    grid_delta = full.delta.tolist()
    # kept deltas: an asked delta on the grid (1e-6 here), else the two grid deltas around it
    brackets = sorted({g for a in asked for g in ([a] if a in grid_delta else [
        max(x for x in grid_delta if x < a), min(x for x in grid_delta if x > a)])})
    assert report["delta"] == brackets and len(brackets) == 7
    assert report["eps0"] == [0.5, 1.0, 2.0] and report["n"][0] == 1000 and report["n"][-1] == 1e9
    assert len(report["n"]) == 601 and report["shape"] == [1, 3, 601, 7]
    # magic, header length, header, then float32 upper and lower surfaces
    assert report["bytes"] == device.stat().st_size == 8 + 4 + report["header_bytes"] + 2 * 4 * 3 * 601 * 7
    assert report["bytes"] < 256 * 1024
    rng = np.random.default_rng(5)
    eps0 = rng.choice([0.5, 1.0, 2.0], 300)
    n = np.round(10 ** rng.uniform(3, 9, 300))
    delta = np.concatenate([rng.choice(asked, 150), rng.uniform(brackets[0], brackets[1], 150)])
    want = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=dense_path, live=False, k=10)
    got = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=str(device), live=False, k=10)
    np.testing.assert_array_equal(got.value, want.value)
    np.testing.assert_array_equal(got.lower, want.lower)
    reader = read_device(str(device))
    for i in range(0, 300, 7):
        assert reader.eps({"k": 10}, eps0[i], n[i], delta[i]) == pytest.approx(want.value[i], rel=1e-12)
    # between kept eps0 the file rounds up to the next kept value: never below the table
    between = lookup.eps("krr", eps0=0.75, n=n, delta=1e-8, table=str(device), live=False, k=10)
    assert np.all(between.value >= lookup.eps("krr", eps0=0.75, n=n, delta=1e-8, table=dense_path,
                                              live=False, k=10).value)


def test_cut_reports_its_worst_slack_along_n(dense_path: Path, tmp_path: Path) -> None:
    report = export_device(tmp_path / "x.dev", "krr", {}, str(dense_path), eps0=[4], n_min=2e4, n_max=3e4,
                           delta=[1e-6])
    full = lookup.open_table(dense_path)
    e = full.eps0.tolist().index(4.0)
    j = [full.n.tolist().index(v) for v in report["n"]]
    d = [full.delta.tolist().index(v) for v in report["delta"]]
    assert report["n"][0] <= 2e4 < report["n"][1] and report["n"][-2] < 3e4 <= report["n"][-1]
    worst = max(float(np.float32(full.upper[r, e, a, dd])) / float(np.float32(full.upper[r, e, b, dd])) - 1
                for r in (0, 1) for a, b in zip(j, j[1:], strict=False) for dd in d)
    assert report["worst_slack"] == pytest.approx(worst, rel=1e-6) and 0 < worst < 0.05
    assert report["worst_slack_at"]["n_next"] > report["worst_slack_at"]["n"]


def test_cut_refuses_what_it_cannot_answer(dense_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.dev"
    with pytest.raises(ValueError, match=r"eps0=0\.3 is not an eps0 of the table; its eps0 grid: 0\.25, 0\.5, 1\.0"):
        export_device(out, "krr", {}, str(dense_path), eps0=[0.5, 0.3])
    with pytest.raises(ValueError, match="n_min=50 is below the table's smallest n"):
        export_device(out, "krr", {}, str(dense_path), n_min=50)
    with pytest.raises(ValueError, match="n_min must be <= n_max"):
        export_device(out, "krr", {}, str(dense_path), n_min=1e6, n_max=1e5)
    with pytest.raises(ValueError, match="delta=1e-13 is below the table's smallest delta"):
        export_device(out, "krr", {}, str(dense_path), delta=[1e-13])
    assert not out.exists()


def test_export_cli_reports_size_axes_and_slack(dense_path: Path, tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from tablegen.cli import main

    args = ["export", "--device", "--mechanism", "krr", "--k", "3", "--eps0", "0.5,1", "--n-min", "1e4",
            "--n-max", "1e5", "--delta", "1e-8", "--table", str(dense_path), "--out", str(tmp_path / "c.dev")]
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0, text.output
    assert "bytes" in text.output and "worst slack:" in text.output and "eps0: 0.5, 1" in text.output
    report = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert report["shape"] == [1, 2, 101, 2] and report["bytes"] == (tmp_path / "c.dev").stat().st_size
    bad = CliRunner().invoke(main, [*args[:-2], "--eps0", "0.3", "--out", str(tmp_path / "d.dev")])
    assert bad.exit_code == 2 and "eps0=0.3 is not an eps0" in bad.output


def test_worst_slack_is_relative_above_the_floor_and_absolute_below() -> None:
    upper = np.array([0.5, 0.4, 0.01, 1e-3, 2e-5, 0.0])[None, None, :, None]
    slack, where, excess = worst_slack(upper)
    assert slack == pytest.approx(0.4 / 0.01 - 1) and where == (0, 0, 1, 0)  # the largest ratio above the floor
    assert excess == pytest.approx(1e-3 - 2e-5)  # 1e-3 over 2e-5 (below the floor): an absolute excess


def test_a_member_is_read_as_written() -> None:
    """What a signature hashes of the rows (``member_text``): the value's bytes as the header holds them,
    found as the C reader finds them (whitespace anywhere, a key written with an escape)."""
    text = b' { "format" : 2 , "\\u0072ows" : [ {"k": 3} ,{}] ,"x":"}" }'
    assert member_text(text, "rows") == b'[ {"k": 3} ,{}]' and member_text(text, "x") == b'"}"'
