"""Opening tables: integrity (manifest, checksums), coverage, and the light import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lookup
from lookup.table import TableError, from_arrays, open_table, shipped_table


def test_coverage(table_path: Path) -> None:
    cover = open_table(table_path).coverage()
    assert cover["mechanisms"] == ["krr k=3", "generic"]
    assert cover["eps0"] == [0.5, 4.0, 4] and cover["n"] == [20, 80, 3] and cover["delta"] == [1e-9, 1e-3, 4]
    assert cover["engine_version"] and cover["date_created"]


def test_tampered_or_corrupted_tables_are_refused(table_path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.zarr"
    shutil.copytree(table_path, copy)
    chunk = next(p for p in sorted((copy / "eps").rglob("*")) if p.is_file() and p.name != "zarr.json")
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 1
    chunk.write_bytes(bytes(data))
    with pytest.raises(lookup.TableError, match="refused, eps/c.* does not match its SHA-256"):
        open_table(copy)
    shutil.rmtree(copy)
    shutil.copytree(table_path, copy)
    (copy / "extra.bin").write_bytes(b"x")
    with pytest.raises(lookup.TableError, match="file set differs"):
        open_table(copy)
    with pytest.raises(lookup.TableError, match="not a published table"):
        open_table(tmp_path)


def test_surfaces_are_made_monotone_the_safe_way() -> None:
    eps = np.array([[[[0.5, 0.4], [0.45, 0.42]], [[0.3, 0.2], [0.6, 0.1]]]])  # (1, eps0=2, n=2, delta=2)
    low = np.full_like(eps, np.nan)
    low[0, 1, 0, 0] = 0.05  # at the largest eps0, smallest n and delta: holds nowhere else
    t = from_arrays("x", ["krr"], [{"k": 3}], np.array([1.0, 2.0]), np.array([10, 20]), np.array([1e-6, 1e-3]),
                    eps, low, {})
    # eps0 = 1 may use eps0 = 2's smaller values; n = 20 may use n = 10's; delta 1e-3 may use 1e-6's
    np.testing.assert_array_equal(t.upper[0, 0], [[0.3, 0.2], [0.3, 0.1]])
    np.testing.assert_array_equal(t.upper[0, 1], [[0.3, 0.2], [0.3, 0.1]])
    assert t.lower[0, 1, 0, 0] == 0.05 and np.isnan(t.lower).sum() == 7
    low[0, 0, 1, 1] = 0.04  # at the smallest eps0, largest n and delta: holds everywhere
    t = from_arrays("x", ["krr"], [{"k": 3}], np.array([1.0, 2.0]), np.array([10, 20]), np.array([1e-6, 1e-3]),
                    eps, low, {})
    assert np.nanmin(t.lower) == 0.04 and not np.isnan(t.lower).any() and t.lower[0, 1, 0, 0] == 0.05


def test_import_is_light() -> None:
    code = ("import sys, lookup; heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('dask', 'distributed', 'xarray', 'scipy', 'pandas', 'tablegen', 'zarr', 'click', 'dp_accounting')]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_rows_that_change_with_eps0_answer_grid_eps0_only() -> None:
    eps = np.array([[[[0.30]], [[0.20]]]])  # OLH-like row: eps0 = 2 smaller than eps0 = 1 (another g)
    t = from_arrays("x", ["olh"], [{}], np.array([1.0, 2.0]), np.array([10]), np.array([1e-6]), eps,
                    np.full_like(eps, np.nan), {}, np.array([False]))
    assert t.upper[0, 0, 0, 0] == 0.30  # no minimum across eps0 for this row
    on_grid = lookup.eps("olh", eps0=1.0, n=10, delta=1e-6, table=t, live=False)
    assert on_grid.value == 0.30 and on_grid.source == "table"
    for eps0 in (1.5, [1.5, 2.0]):
        with pytest.raises(lookup.TableError):
            lookup.eps("olh", eps0=eps0, n=10, delta=1e-6, table=t, live=False)
    assert lookup.eps0_max("olh", eps=0.25, n=10, delta=1e-6, table=t, live=False).value == 2.0


def test_delta_chord_is_safe_when_grid_values_nearly_coincide() -> None:
    from decimal import Decimal, getcontext

    getcontext().prec = 60
    u_small, u_large = 1.0, 1.0 - 1.2e-14  # eps at delta = 1e-7 and 1e-5
    eps = np.array([[[[u_small, u_large]]]])
    t = from_arrays("x", ["krr"], [{"k": 3}], np.array([2.0]), np.array([10]), np.array([1e-7, 1e-5]), eps,
                    np.full_like(eps, np.nan), {})
    for query in (1.0 - 6e-15, 1.0 - 1e-14, 1.0 - 2e-15):
        a, b, x = (Decimal(v).exp() for v in (u_small, u_large, query))
        exact = Decimal(1e-7) + (a - x) / (a - b) * (Decimal(1e-5) - Decimal(1e-7))
        got = lookup.delta("krr", eps0=2.0, n=10, eps=query, table=t, live=False, k=3).value
        assert Decimal(got) >= exact


def test_eps_chord_is_safe_when_the_chord_weight_is_tiny() -> None:
    from decimal import Decimal, getcontext

    getcontext().prec = 60
    u_small, u_large = 8.0, 1e-9  # eps at delta = 1e-7 (capped at eps0) and at 1e-5 (near zero)
    eps = np.array([[[[u_small, u_large]]]])
    t = from_arrays("x", ["krr"], [{"k": 3}], np.array([8.0]), np.array([10]), np.array([1e-7, 1e-5]), eps,
                    np.full_like(eps, np.nan), {})
    for delta in (1e-5 * (1 - 3e-16), 1e-5 * (1 - 1e-15), 1e-5 * (1 - 1e-13)):
        weight = (Decimal(1e-5) - Decimal(delta)) / (Decimal(1e-5) - Decimal(1e-7))
        x = weight * (Decimal(u_small).exp() - 1) + (1 - weight) * (Decimal(u_large).exp() - 1)
        exact = (x + 1).ln()
        for got in (lookup.eps("krr", eps0=8.0, n=10, delta=np.array([delta]), table=t, live=False, k=3).value[0],
                    lookup.eps("krr", eps0=8.0, n=10, delta=delta, table=t, live=False, k=3).value):
            assert Decimal(float(got)) >= exact


def test_missing_default_table_says_how_to_get_one(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SHUFFLE_EPS_TABLE", str(tmp_path / "nowhere.zarr"))
    with pytest.raises(TableError, match=r"set by \$SHUFFLE_EPS_TABLE: point \$SHUFFLE_EPS_TABLE.*tablegen build"):
        open_table()


def test_missing_shipped_table_says_reinstall(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("SHUFFLE_EPS_TABLE", raising=False)
    monkeypatch.setattr("lookup.table.shipped_table", lambda name: tmp_path / name)
    with pytest.raises(TableError, match=r"default.zarr: not a published table.*missing from this installation"):
        open_table()


def test_shipped_table_is_the_checkout_data_in_a_source_tree() -> None:
    """No ``lookup/_data`` in a checkout: the tables are read in place from ``data/``."""
    root = Path(lookup.__file__).resolve().parents[1]
    assert shipped_table("default.zarr") == root / "data" / "default.zarr"
