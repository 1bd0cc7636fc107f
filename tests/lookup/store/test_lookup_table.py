"""Opening tables: integrity (manifest, checksums), coverage, and the light import."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lookup
from lookup.store.table import TableError, _load_table, from_arrays, open_store, open_table, shipped_table
from lookup.trust import origin as trust


@pytest.fixture(autouse=True)
def built_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables these tests make count as built here (what ``tablegen build`` records,
    ``lookup.trust.origin.record_built``): integrity is tested here, provenance in test_lookup_trust*.py."""
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(trust, "recorded", lambda digest: "built")


def test_coverage(table_path: Path) -> None:
    cover = open_table(table_path).coverage()
    assert cover["mechanisms"] == ["krr k=3", "generic"]
    assert cover["eps0"] == [0.5, 4.0, 4] and cover["n"] == [20, 80, 3] and cover["delta"] == [1e-9, 1e-3, 4]
    assert cover["engine_version"] and cover["date_created"]


def _copy(table_path: Path, copy: Path) -> Path:
    shutil.copytree(table_path, copy)
    return copy


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def _query(table: Path | lookup.Table, mechanism: str = "krr", **params: float) -> float:
    params = params or ({"k": 3} if mechanism == "krr" else {})
    return lookup.eps(mechanism, eps0=1.0, n=80, delta=1e-5, table=table, live=False, max_slack=None, **params).value


def test_tampered_or_corrupted_tables_are_refused(table_path: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A file read is checked against the manifest first: the axes at open, a row's chunk when the
    row is first used (not the whole store at open); after a mismatch the table reads nothing more."""
    monkeypatch.setattr(trust, "spot_check", lambda *args: "")  # its random cells would read rows in any order
    copy = _copy(table_path, tmp_path / "copy.zarr")
    _flip_last_byte(copy / "eps" / "c" / "0" / "0" / "0" / "0")  # row 0: krr k=3
    table = open_store(copy, _load_table, "")  # opens (as open_table reads it): the row's chunk is not read yet
    with pytest.raises(lookup.TableError, match=r"copy.zarr: refused, eps/c/0/0/0/0 does not match its SHA-256"):
        _query(copy)
    with pytest.raises(lookup.TableError, match="refused, eps/c/0/0/0/0 does not match"):
        _query(table, "generic")  # an intact row not read before the mismatch: the table is refused
    _flip_last_byte(_copy(table_path, tmp_path / "axis.zarr") / "delta" / "c" / "0")  # read at open
    with pytest.raises(lookup.TableError, match="axis.zarr: refused, delta/c/0 does not match its SHA-256"):
        open_table(tmp_path / "axis.zarr")
    copy = _copy(table_path, tmp_path / "files.zarr")
    (copy / "extra.bin").write_bytes(b"x")
    with pytest.raises(lookup.TableError, match=r"file set differs from the manifest \(extra.bin\)"):
        open_table(copy)
    (copy / "extra.bin").unlink()
    (copy / "eps" / "c" / "1" / "0" / "0" / "0").unlink()
    with pytest.raises(lookup.TableError, match=r"file set differs from the manifest \(eps/c/1/0/0/0\)"):
        open_table(copy)
    with pytest.raises(lookup.TableError, match="not a published table"):
        open_table(tmp_path)


def test_a_tampered_chunk_listed_in_a_rewritten_manifest_is_refused_when_its_row_is_used(
        table_path: Path, tmp_path: Path) -> None:
    """The manifest rewritten to match a tampered chunk that opening does not read: the other
    row answers, the tampered one fails its crc32c when first used and refuses the table."""
    from tablegen.store import write_manifest

    copy = _copy(table_path, tmp_path / "rewritten.zarr")
    _flip_last_byte(copy / "eps" / "c" / "1" / "0" / "0" / "0")  # row 1: generic
    write_manifest(copy)
    trusted = open_store(copy, _load_table, "")  # as open_table reads it, before its provenance and spot checks
    assert _query(trusted) == _query(table_path)  # row 0 answers: its chunks are intact
    with pytest.raises(lookup.TableError, match=r"refused, eps/c/1/0/0/0 cannot be read .*crc32c"):
        _query(trusted, "generic")
    with pytest.raises(lookup.TableError, match=r"refused, eps/c/1/0/0/0 cannot be read .*crc32c"):
        _query(copy)  # open_table: a table not pinned is spot-checked at every open (every cell of a small one)


def test_rows_read_later_come_from_the_table_opened(table_path: Path, tmp_path: Path) -> None:
    """A table published over an open one (directories swapped, the old one deleted): rows the
    open table reads afterwards are still its own; opening the path again gives the new one."""
    from tablegen.store import write_manifest

    path = _copy(table_path, tmp_path / "t.zarr")
    new = _copy(table_path, tmp_path / "new.zarr")
    rows = [new / "eps" / "c" / str(r) / "0" / "0" / "0" for r in (0, 1)]
    rows[0].write_bytes(rows[1].read_bytes())  # the new table answers krr k=3 with generic's values
    write_manifest(new)
    table = open_table(path)
    os.rename(path, tmp_path / "old.zarr")
    os.rename(new, path)
    shutil.rmtree(tmp_path / "old.zarr")
    assert _query(table) == _query(table_path) != _query(path) == _query(table_path, "generic")


def test_answering_from_a_table_reads_only_what_it_needs_without_zarr(table_path: Path) -> None:
    """The README query through the command line and a library query on the shipped table: no
    zarr, no engine, no scipy imported (it is pinned: no spot checks), and of the big arrays only
    the queried rows' chunks read."""
    code = (
        "import sys\n"
        "from lookup.store import reader\n"
        "read, verified_read = [], reader.Snapshot.read\n"
        "reader.Snapshot.read = lambda self, rel: read.append((self.store.name, rel)) or verified_read(self, rel)\n"
        "from lookup.cli.commands import main\n"
        "main(['eps', '--mechanism', 'krr', '--k', '10', '--eps0', '2', '--n', '1e6', '--delta', '1e-8', '--json'],"
        " standalone_mode=False)\n"
        "import lookup\n"
        "a = lookup.eps('krr', eps0=1.5, n=3000, delta=1e-6, k=3, max_slack=None)\n"
        "assert a.source == 'table'\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('zarr', 'scipy', 'tablegen', 'xarray', 'dask')])\n"
        "print(sorted(set(read)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    *readme, heavy, read = out.stdout.strip().splitlines()
    assert json.loads("".join(readme))["source"] == "table"
    assert heavy == "[]"
    files = ast.literal_eval(read)  # (store, file) pairs
    chunks = sorted(rel for name, rel in files if name == "default.zarr" and rel.count("/") > 2)  # 4-d chunks
    rows = [lookup.open_table().labels().index(label) for label in ("krr k=3", "krr k=10")]
    assert chunks == sorted(f"{name}/c/{r}/0/0/0" for name in ("eps", "eps_lower") for r in rows)


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")  # consolidated on purpose, as publish does
def test_a_store_the_reader_does_not_implement_is_read_with_zarr(table_path: Path, tmp_path: Path) -> None:
    """Other codecs (here gzip) fall back to zarr, reading the whole verified store as before."""
    import xarray as xr
    from zarr.codecs import Crc32cCodec, GzipCodec

    from lookup.store.reader import Unsupported, open_group
    from tablegen.store import write_manifest

    out = tmp_path / "gzip.zarr"
    with xr.open_zarr(table_path) as ds:
        encoding = {name: {"compressors": [GzipCodec(), Crc32cCodec()]} for name in ("eps", "eps_lower")}
        ds.load().to_zarr(out, mode="w-", encoding=encoding, consolidated=True, zarr_format=3)
    write_manifest(out)
    with pytest.raises(Unsupported, match="eps.*gzip"):
        open_group(out)
    gz, original = open_table(out), open_table(table_path)
    assert np.array_equal(gz.upper, original.upper) and np.array_equal(gz.lower, original.lower, equal_nan=True)
    assert _query(gz, "generic") == _query(table_path, "generic")


def test_surfaces_are_made_monotone_the_safe_way() -> None:
    # (1, eps0=2, n=2, delta=2): steps against the exact eps's direction within checks.MONOTONE_RTOL (3%):
    # 0.305 after 0.30 along delta, 0.405 after 0.40 along n
    eps = np.array([[[[0.30, 0.305], [0.29, 0.20]], [[0.40, 0.31], [0.405, 0.30]]]])
    low = np.full_like(eps, np.nan)
    low[0, 1, 0, 0] = 0.05  # at the largest eps0, smallest n and delta: holds nowhere else
    axes = np.array([1.0, 2.0]), np.array([10, 20]), np.array([1e-6, 1e-3])
    t = from_arrays("x", ["krr"], [{"k": 3}], *axes, eps, low, {})
    # eps0 = 1 may use eps0 = 2's values; n = 20 may use n = 10's; delta 1e-3 may use 1e-6's
    np.testing.assert_array_equal(t.upper[0, 0], [[0.30, 0.30], [0.29, 0.20]])
    np.testing.assert_array_equal(t.upper[0, 1], [[0.40, 0.31], [0.40, 0.30]])
    assert t.lower[0, 1, 0, 0] == 0.05 and np.isnan(t.lower).sum() == 7
    low[0, 0, 1, 1] = 0.04  # at the smallest eps0, largest n and delta: holds everywhere
    t = from_arrays("x", ["krr"], [{"k": 3}], *axes, eps, low, {})
    assert np.nanmin(t.lower) == 0.04 and not np.isnan(t.lower).any() and t.lower[0, 1, 0, 0] == 0.05
    eps[0, 0, 0, 0] = 0.1  # far below n = 20's 0.29: a minimum would spread it; refused instead
    with pytest.raises(lookup.TableError, match=r"not monotone in n: 0\.1 krr k=3 at eps0 1, n 10, delta 1e-06"):
        from_arrays("x", ["krr"], [{"k": 3}], *axes, eps, low, {}).upper[0]


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
    monkeypatch.setattr("lookup.store.table.shipped_table", lambda name: tmp_path / name)
    with pytest.raises(TableError, match=r"default.zarr: not a published table.*missing from this installation"):
        open_table()


def test_shipped_table_is_the_checkout_data_in_a_source_tree() -> None:
    """No ``lookup/_data`` in a checkout: the tables are read in place from ``data/``."""
    root = Path(lookup.__file__).resolve().parents[1]
    assert shipped_table("default.zarr") == root / "data" / "default.zarr"


def test_a_table_made_in_python_is_not_certified_unless_its_caller_vouches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37 review (N4): ``Table.certified`` defaulted to True, so arrays nobody vouched for
    (here eps = 0.01 at eps0 = 1, n = 10: far below the exact eps of k-RR, which is about eps0 for
    so few users) were answered as certified by every query kind."""
    from lookup.answer.api import json_ready

    eps = np.full((1, 2, 2, 2), 0.01)
    axes = np.array([1.0, 2.0]), np.array([10, 20]), np.array([1e-6, 1e-3])
    made = from_arrays("made", ["krr"], [{"k": 3}], *axes, eps, np.full_like(eps, np.nan), {})
    answers = {"eps": lookup.eps("krr", k=3, eps0=1.0, n=10, delta=1e-6, table=made, live=False, max_slack=None),
               "eps-array": lookup.eps("krr", k=3, eps0=[1.0, 2.0], n=10, delta=1e-6, table=made, live=False,
                                       max_slack=None),
               "delta": lookup.delta("krr", k=3, eps0=1.0, n=10, eps=0.5, table=made, live=False, max_slack=None),
               "eps0_max": lookup.eps0_max("krr", k=3, eps=0.5, n=10, delta=1e-6, table=made, live=False,
                                           max_slack=None)}  # rounds: test_lookup_compose.py
    for name, a in answers.items():
        assert np.all(np.asarray(a.source) == "table"), name
        assert not np.any(a.certified), name
    assert json_ready("eps", answers["eps"])["certified"] is False
    monkeypatch.setattr(trust, "recorded", lambda digest: None)  # not the fixture's "built"
    with pytest.raises(TableError, match="nothing vouches"):
        open_table(made)  # lookup.trust.origin: no digest, nothing shipped, built, signed or verified
    vouched = from_arrays("made", ["krr"], [{"k": 3}], *axes, eps, np.full_like(eps, np.nan), {}, vouch=True)
    assert open_table(vouched) is vouched and vouched.provenance == "caller"
    assert lookup.eps("krr", k=3, eps0=1.0, n=10, delta=1e-6, table=vouched, live=False, max_slack=None).certified
