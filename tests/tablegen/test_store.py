"""The compact published store: float32 with 12 mantissa bits, certified eps rounded up and lower
bounds down, as decoded by xarray and by the lookup; float64 stores still read."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from lookup.store.table import open_store, open_table
from lookup.trust import origin as trust
from tablegen import store
from tablegen.build import dataset
from tablegen.spec import spec_from_dict

SPEC = {"title": "store test", "axes": {"eps0": [0.1, 1.0], "n": [10, 100, 1000], "delta": [1e-6, 1e-3]},
        "mechanism": [{"family": "krr", "k": [2, 3]}]}
SHAPE = (2, 2, 3, 2)
FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # smallest normal float32


def reference(x: float, bits: int, up: bool) -> float:
    """The nearest float with ``bits`` mantissa bits above (``up``) or below x, for x in the
    normal float32 range: x lies in [2^(e-1), 2^e), where that grid has step 2^(e-1-bits)."""
    step = math.ldexp(1.0, math.frexp(abs(x))[1] - 1 - bits)
    return (math.ceil(x / step) if up else math.floor(x / step)) * step  # exact: powers of two


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.floats(allow_nan=True, allow_infinity=True), st.integers(0, 23), st.booleans())
def test_rounding_direction_and_tightness(x: float, bits: int, up: bool) -> None:
    got = float(store.round_float32(np.array([x]), up, bits)[0])
    if math.isnan(x):
        assert math.isnan(got)
        return
    assert (got >= x) if up else (got <= x)
    if math.isinf(x) or x == 0:
        assert got == x
    pattern = int(np.array([got], dtype=np.float32).view(np.uint32)[0])
    assert pattern & ((1 << (23 - bits)) - 1) == 0 or math.isinf(got)
    if FLOAT32_TINY <= abs(x) < FLOAT32_MAX / 2:
        assert got == reference(x, bits, up)
        assert abs(got - x) < 2.0 ** -bits * abs(x)


def test_overflow_rounds_to_inf_or_the_largest_float() -> None:
    x = np.array([1e300, -1e300, FLOAT32_MAX * (1 + 1e-9)])
    largest_12_bits = (2 - 2.0 ** -12) * 2.0 ** 127
    assert store.round_float32(x, True, 12).tolist() == [math.inf, -largest_12_bits, math.inf]
    assert store.round_float32(x, False, 23).tolist() == [FLOAT32_MAX, -math.inf, FLOAT32_MAX]
    with pytest.raises(ValueError, match="bits must be in"):
        store.round_float32(x, True, 24)


def table_dataset(eps: np.ndarray, low: np.ndarray) -> xr.Dataset:
    spec = spec_from_dict(SPEC, "store-test")
    return dataset(spec, {"eps": eps, "eps_lower": low}, "test")


VALUES = st.one_of(st.floats(0, 10), st.floats(1e-12, 1e-3), st.sampled_from([0.0, math.inf, math.nan]))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(VALUES, min_size=2 * math.prod(SHAPE), max_size=2 * math.prod(SHAPE)))
def test_decoded_store_never_crosses_the_float64_values(values: list[float]) -> None:
    eps, low = np.array(values).reshape(2, *SHAPE)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.zarr"
        store.publish(table_dataset(eps, low), out, store.CERTIFIED_ROUNDING)
        with xr.open_zarr(out) as ds:
            decoded = [(ds["eps"].values, ds["eps_lower"].values)]
            assert ds["eps"].attrs["quantization_bits"] == 12 and ds["eps"].attrs["quantization_rounding"] == "up"
            assert ds["eps_lower"].attrs["quantization_rounding"] == "down"
        # what the lookup reads: the same bytes through its verified in-memory zarr group
        decoded.append(open_store(out, lambda _, group: (group["eps"][...], group["eps_lower"][...]), ""))
    for got_eps, got_low in decoded:
        assert got_eps.dtype == got_low.dtype == np.float32
        for got, want, up in ((got_eps, eps, True), (got_low, low, False)):
            assert np.array_equal(np.isnan(got), np.isnan(want))
            ok = np.isnan(want) | ((got >= want) if up else (got <= want))
            assert ok.all()
            assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
            assert np.all(got[want == 0] == 0)
            finite = (want >= FLOAT32_TINY) & (want < FLOAT32_MAX)  # the normal float32 range
            assert np.all(np.abs(got[finite] - want[finite]) < 2.0 ** -12 * want[finite])


def test_float64_store_still_opens_and_compact_answers_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # synthetic values: no engine behind them
    monkeypatch.setattr(trust, "vouch", lambda table, digest, verified=True: None)
    rng = np.random.default_rng(1)
    eps0 = np.array([0.1, 1.0])[None, :, None, None]
    # random, but shaped as eps is (lookup.store.checks refuses a surface that is not): the same factors
    # at both eps0, non-increasing along n and along delta
    factor = np.sort(np.sort(rng.uniform(0.05, 1.5, (SHAPE[0], 1, *SHAPE[2:])), axis=2), axis=3)[:, :, ::-1, ::-1]
    eps = np.minimum(eps0 * factor, eps0)
    eps[:, :, 0] = eps0[:, :, 0]  # the plateau at the smallest n: eps = eps0 = 0.1 rounds up past 0.1
    low = eps * rng.uniform(0.9, 1.0, SHAPE)
    store.publish(table_dataset(eps, low), tmp_path / "old.zarr")  # the float64 form (tables before)
    store.publish(table_dataset(eps, low), tmp_path / "new.zarr", store.CERTIFIED_ROUNDING)
    old, new = open_table(tmp_path / "old.zarr"), open_table(tmp_path / "new.zarr")
    with xr.open_zarr(tmp_path / "old.zarr") as ds:
        assert ds["eps"].dtype == np.float64 and np.array_equal(ds["eps"].values, eps)
    assert np.all(new.upper >= old.upper) and np.all(new.upper < old.upper * (1 + 2.0 ** -12))
    assert np.all(new.upper <= eps0)  # a value rounded up past its eps0 is capped back at load
    assert np.all(np.nan_to_num(new.lower) <= np.nan_to_num(old.lower))


TINY_SPEC = """title = "lock test"
[axes]
eps0 = [1.0]
n = [100]
delta = [1e-6]
[[mechanism]]
family = "krr"
k = 2
"""


def test_one_build_per_output_the_second_refuses_naming_the_holder(tmp_path: Path) -> None:
    spec, out = tmp_path / "spec.toml", tmp_path / "t.zarr"
    spec.write_text(TINY_SPEC)
    command = [sys.executable, "-m", "tablegen.cli", "build", "--spec", str(spec), "--out", str(out), "--workers", "0",
               "--no-progress"]
    with store.build_lock(out, "the first build"):
        second = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert "is being built by" in second.stderr and f'"pid": {os.getpid()}' in second.stderr
        assert "the first build" in second.stderr and not out.exists()
    first = subprocess.run(command, capture_output=True, text=True, timeout=120)  # released: it builds
    assert first.returncode == 0, first.stderr
    assert open_table(out).upper.shape == (1, 1, 1, 1) and not store.lock_path(out).exists()


def test_a_lock_left_by_a_dead_build_is_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "t.zarr"
    store.lock_path(out).write_text('{"host": "here", "pid": 1, "command": "killed"}')  # no flock held
    with store.build_lock(out, "next"):
        assert '"command": "next"' in store.lock_path(out).read_text()


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_publish_clears_only_dead_leftovers_and_puts_back_an_interrupted_swap(tmp_path: Path) -> None:
    eps = np.full(SHAPE, 0.05)
    out = tmp_path / "t.zarr"
    store.publish(table_dataset(eps, eps / 2), out)
    old = out.with_name(f"t.zarr.old-{_dead_pid()}")
    os.rename(out, old)  # a two-rename swap killed between its renames: no table at out
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        busy = out.with_name(f"t.zarr.publish-{live.pid}")  # another build's publish in progress
        busy.mkdir()
        dead = out.with_name(f"t.zarr.publish-{_dead_pid()}")
        dead.mkdir()
        store.publish(table_dataset(eps * 2, eps), out)
        live.kill()
    assert busy.is_dir() and not dead.exists() and not old.exists()
    with xr.open_zarr(out) as ds:
        assert float(ds["eps"][0, 0, 0, 0]) == 0.1  # the new table, swapped over the one put back


def _rows_table(rows: int, seed: int = 2) -> tuple[object, np.ndarray, np.ndarray]:
    """A table of ``rows`` mechanism rows (40 eps0, 200 n, 20 delta; values shaped as eps, not
    certified) as a template dataset and its float64 values."""
    spec = spec_from_dict({"title": "streaming test", "axes": {"eps0": {"start": 0.1, "stop": 4.0, "step": 0.1},
                                                             "n": {"start": 1e2, "stop": 1e4, "per_decade": 99.5},
                                                             "delta": {"start": 1e-12, "stop": 1e-3, "per_decade": 2}},
                           "mechanism": [{"family": "krr", "k": list(range(2, 2 + rows))}]})
    rng = np.random.default_rng(seed)
    eps = np.minimum(spec.eps0[None, :, None, None] * rng.uniform(0.1, 1.0, spec.shape), spec.eps0[None, :, None, None])
    low = np.where(rng.uniform(size=spec.shape) < 0.5, np.nan, 0.9 * eps)
    return dataset(spec, {"eps": eps, "eps_lower": low}, "test"), eps, low


def test_streamed_publish_writes_the_bytes_of_the_whole_publish(tmp_path: Path) -> None:
    ds, eps, low = _rows_table(3)
    store.publish(ds, tmp_path / "whole.zarr", store.CERTIFIED_ROUNDING)
    arrays = {"eps": eps, "eps_lower": low}
    store.publish_rows(ds, tmp_path / "rows.zarr", lambda name, r, e: arrays[name][r, e], store.CERTIFIED_ROUNDING)
    whole, rows = (sorted(p.relative_to(tmp_path / name) for p in (tmp_path / name).rglob("*") if p.is_file())
                   for name in ("whole.zarr", "rows.zarr"))
    assert whole == rows and len(whole) > 10
    for rel in whole:
        assert (tmp_path / "whole.zarr" / rel).read_bytes() == (tmp_path / "rows.zarr" / rel).read_bytes(), rel


def _publish_peak(tmp_path: Path, rows: int) -> tuple[int, int]:
    """(largest number of slices held at once, peak traced bytes) of a streamed publish."""
    import tracemalloc

    ds, eps, low = _rows_table(rows)
    arrays, held, most = {"eps": eps, "eps_lower": low}, [], 0

    def read(name: str, r: int, e: int) -> np.ndarray:
        nonlocal most
        held[:] = [ref for ref in held if ref() is not None]
        copy = np.array(arrays[name][r, e])  # a fresh array per slice, tracked while anything holds it
        held.append(weakref.ref(copy))
        most = max(most, len(held))
        return copy

    del ds["eps"], ds["eps_lower"]  # the template's variables: lazy, never computed
    import dask.array

    for name in ("eps", "eps_lower"):
        ds[name] = (("mechanism", "eps0", "n", "delta"), dask.array.zeros(eps.shape, chunks=(1, *eps.shape[1:])))
    tracemalloc.start()
    try:
        store.publish_rows(ds, tmp_path / f"r{rows}.zarr", read, store.CERTIFIED_ROUNDING)
        return most, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_streamed_publish_holds_one_row_whatever_the_row_count(tmp_path: Path) -> None:
    """Slices are read one at a time and the traced peak does not grow with the rows: 4 rows and
    16 (four times the cells) peak alike, at a few float32 rows (codec copies), far below one
    float64 variable of the table."""
    _publish_peak(tmp_path, 1)  # first use: the codecs' modules imported, not counted below
    few, many = _publish_peak(tmp_path, 4), _publish_peak(tmp_path, 16)
    assert few[0] <= 2 and many[0] <= 2
    row_f64 = 40 * 200 * 20 * 8
    assert many[1] < few[1] * 1.25 + row_f64 / 4, (few, many)
    assert many[1] < 16 * row_f64 / 3


def test_a_slices_hmac_holds_for_any_nan_bits() -> None:
    """zarr leaves out a chunk equal to its NaN fill value and reads back the standard NaN: a
    slice of NaN with other bits (inf - inf gives the negative quiet NaN) keeps its HMAC."""
    stamp = {"spec_sha256": "0" * 64, "engine_version": "3"}
    with np.errstate(invalid="ignore"):
        written = np.full((3, 4), np.inf) - np.full((3, 4), np.inf)  # NaN, sign bit set
    read_back = np.full((3, 4), np.nan)
    assert written.view(np.uint64)[0, 0] != read_back.view(np.uint64)[0, 0]
    tag = store.slice_mac(stamp, (0, 1), "eps", written)
    assert store.slice_authentic(stamp, (0, 1), "eps", read_back, tag)
    assert not store.slice_authentic(stamp, (0, 1), "eps", np.zeros((3, 4)), tag)


@pytest.mark.parametrize("published,current,expected", [
    ("3", "4", True), ("4", "3", True), ("4", "4", True), ("2", "4", False), ("4", "5", False)])
def test_a_table_of_an_engine_with_the_same_certified_eps_is_up_to_date(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, published: str, current: str, expected: bool) -> None:
    """Engine 4 changed lower bounds only: a table published by engine 3 (the shipped default
    table) is up to date for it (the README's first command computes nothing), not one of engine 2,
    whose certified eps differ; a different spec never is."""
    monkeypatch.setattr(store, "SAME_CERTIFIED_EPS", ("3", "4"))
    out = tmp_path / "t.zarr"
    out.mkdir()
    (out / "zarr.json").write_text(json.dumps({"attributes": {"spec_sha256": "a" * 64, "engine_version": published}}))
    assert store.up_to_date(out, {"spec_sha256": "a" * 64, "engine_version": current}) is expected
    assert not store.up_to_date(out, {"spec_sha256": "b" * 64, "engine_version": current})
