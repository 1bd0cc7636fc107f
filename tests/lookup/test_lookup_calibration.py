"""lookup.calibrate: p from the calibration table is certified and rounded toward more noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lookup
from tablegen.protocols.accounting import calibrate as live_calibrate
from tablegen.protocols.accounting import delta_bounds
from tablegen.protocols.table import build_calibration


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
