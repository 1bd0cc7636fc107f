"""lookup.calibrate: p from the calibration table is certified and rounded toward more noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lookup
from tablegen.calibration import build_calibration
from tablegen.protocols.accounting import calibrate as live_calibrate
from tablegen.protocols.accounting import delta_bounds


@pytest.fixture(scope="module")
def calibration_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("calibration")
    spec = root / "spec.toml"
    spec.write_text("[axes]\neps = [0.5, 1.0, 2.0]\nn = [1000, 10000, 100000]\ndelta = [1e-8, 1e-6]\n")
    build_calibration(spec, root / "p.zarr")
    return root / "p.zarr"


@settings(max_examples=25, deadline=None, derandomize=True)
@given(protocol=st.sampled_from(["binary-sum", "histogram"]), eps=st.floats(0.5, 3.0), n=st.integers(1000, 300000),
       delta=st.floats(1e-8, 1e-5))
def test_table_p_is_certified_and_noisier_than_live(calibration_path: Path, protocol: str, eps: float, n: int,
                                                    delta: float) -> None:
    a = lookup.calibrate(protocol, eps=eps, n=n, delta=delta, table=calibration_path)
    assert a.source == "table"
    assert delta_bounds(protocol, eps=eps, n=n, p=a.value)[0] <= delta
    assert a.value <= live_calibrate(protocol, eps=eps, delta=delta, n=n) * (1 + 1e-9)


def test_off_grid_and_errors(calibration_path: Path) -> None:
    a = lookup.calibrate("histogram", eps=[0.3, 1.0], n=[10**5, 500], delta=1e-7, table=calibration_path)
    assert list(a.source) == ["live", "live"]
    assert a.value[0] == live_calibrate("histogram", eps=0.3, delta=1e-7, n=10**5)
    with pytest.raises(lookup.TableError, match="covers eps 0.5..2"):
        lookup.calibrate("histogram", eps=0.3, n=10**5, delta=1e-7, table=calibration_path, live=False)
    with pytest.raises(ValueError, match="unknown protocol"):
        lookup.calibrate("sum", eps=1.0, n=10**5, delta=1e-7, table=calibration_path)
    with pytest.raises(ValueError, match="delta in"):
        lookup.calibrate("histogram", eps=1.0, n=10**5, delta=2.0, table=calibration_path)
    assert np.isfinite(lookup.calibrate("binary-sum", eps=1.0, n=10**5, delta=1e-6, table=calibration_path).value)


ROOT = Path(__file__).resolve().parents[3]


def _forged_copy(out: Path) -> Path:
    """A copy of the shipped calibration table with every p set to 0.9999 (less noise than
    certified at n = 1e4) and a manifest rewritten to match: every checksum and invariant holds."""
    import xarray as xr

    from tablegen import store

    with xr.open_zarr(ROOT / "data" / "protocols.zarr", consolidated=True) as ds:
        ds = ds.load().drop_encoding()
    ds["p"] = ds["p"].where(ds["p"].isnull(), 0.9999)
    store.publish(ds, out)
    return out


def test_the_shipped_calibration_table_answers_certified() -> None:
    """Pinned (test_lookup_trust.py::test_shipped_tables_are_pinned): answered from by default."""
    a = lookup.calibrate("histogram", eps=1.0, n=10**4, delta=1e-6, live=False)
    assert a.source == "table" and a.certified and a.value < 0.9999
    assert delta_bounds("histogram", eps=1.0, n=10**4, p=a.value)[0] <= 1e-6  # independently: the accountant


def test_a_forged_calibration_table_is_refused_or_labelled_uncertified(tmp_path: Path) -> None:
    """Issue 37 review (N1): a forged copy answered {"p": 0.999, "certified": true} (genuine 0.99659)."""
    assert delta_bounds("histogram", eps=1.0, n=10**4, p=0.9999)[0] > 1e-6  # the forged p is not certified
    import json

    from click.testing import CliRunner

    from lookup.cli.commands import main as lookup_main

    forged = _forged_copy(tmp_path / "forged.zarr")
    with pytest.raises(lookup.TableError, match="refused, nothing vouches.*built on this machine"):
        lookup.calibrate("histogram", eps=1.0, n=10**4, delta=1e-6, table=forged, live=False)
    args = ["calibrate", "--mechanism", "histogram", "--eps", "1", "--n", "10000", "--delta", "1e-6",
            "--table", str(forged), "--no-live", "--json"]
    refused = CliRunner().invoke(lookup_main, args)
    assert refused.exit_code != 0 and "nothing vouches" in refused.output and "Traceback" not in refused.output
    asked = CliRunner().invoke(lookup_main, [*args, "--unverified"])
    assert asked.exit_code == 0, asked.output
    answer = json.loads(asked.output)
    assert answer["p"] == pytest.approx(0.9999) and answer["certified"] is False
    # the live answers of an unverified table are the engine's: certified
    a = lookup.calibrate("histogram", eps=[1.0, 0.04], n=[10**4, 10**6], delta=1e-6, table=forged,
                         verified=False)
    assert list(a.source) == ["table", "live"] and list(a.certified) == [False, True]


def test_a_table_built_here_answers_and_is_refused_in_another_cache_home(
        calibration_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert lookup.calibrate("histogram", eps=1.0, n=10**4, delta=1e-6, table=calibration_path).certified
    monkeypatch.setenv("SHUFFLE_EPS_CACHE", str(tmp_path / "elsewhere"))  # another user: no record of it
    with pytest.raises(lookup.TableError, match="nothing vouches"):
        lookup.calibrate("histogram", eps=1.0, n=10**4, delta=1e-6, table=calibration_path)
