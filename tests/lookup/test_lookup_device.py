"""Device files: float32 rounded the safe way, same answers as the table (never lower), a
standard-library reader that works without numpy, refused when corrupted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lookup
from lookup.device import read_device
from tablegen.export import export_device, round_float32

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
    source = Path(__file__).parents[2] / "lookup" / "device.py"
    code = (
        "import sys, importlib.util; sys.modules['numpy'] = None\n"
        f"spec = importlib.util.spec_from_file_location('device', {str(source)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"print(m.read_device({str(device)!r}).eps({{'k': 3}}, 1.5, 50, 1e-6))"
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
