"""Damaged copies whose manifest was rewritten to match the damage (a buggy writer, a bad merge,
an edit) are refused by lookup (opened unverified: the invariants and the random spot checks)
and by `tablegen verify`, with the place named; the shipped table is pinned; signed tables and
device files are trusted by their signature.  Forgeries: test_lookup_trust_forgery.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import lookup
from lookup.store import signing
from lookup.store.manifest import TableError, read_manifest
from lookup.trust import origin as trust
from tablegen import store
from tablegen.cli import main as tablegen_main

ROOT = Path(__file__).resolve().parents[3]


def damaged(source: Path, out: Path, edit: Callable[[xr.Dataset], xr.Dataset]) -> Path:
    """A copy of ``source`` with ``edit`` applied, published with a manifest that matches it."""
    with xr.open_zarr(source, consolidated=True) as ds:
        ds = edit(ds.load().drop_encoding())
    store.publish(ds, out, store.CERTIFIED_ROUNDING)
    return out


def _scaled_row(ds: xr.Dataset, factor: float) -> xr.Dataset:
    ds["eps"][0] = ds["eps"][0] * factor
    ds["eps_lower"][0] = ds["eps_lower"][0] * factor
    return ds


def _other_row(ds: xr.Dataset) -> xr.Dataset:  # the generic row's values replaced by k-RR's (smaller)
    ds["eps"][1], ds["eps_lower"][1] = ds["eps"][0].values, ds["eps_lower"][0].values
    return ds


def _swapped_labels(ds: xr.Dataset) -> xr.Dataset:
    return ds.assign_coords({name: ("mechanism", ds[name].values[::-1]) for name in ("family", "params", "mechanism")})


def _moved(axis: str, index: int, value: float, record: bool = False) -> Callable[[xr.Dataset], xr.Dataset]:
    def edit(ds: xr.Dataset) -> xr.Dataset:
        values = ds[axis].values.copy()
        values[index] = value
        ds = ds.assign_coords({axis: (axis, values, ds[axis].attrs)})
        if record:  # the recorded spec edited along: only the engine can tell
            spec = json.loads(ds.attrs["spec"])
            spec[axis] = values.tolist()
            ds.attrs["spec"] = json.dumps(spec)
        return ds
    return edit


def _divided_n(record: bool) -> Callable[[xr.Dataset], xr.Dataset]:
    def edit(ds: xr.Dataset) -> xr.Dataset:
        n = (ds["n"].values // 10).astype(np.int64)
        ds = ds.assign_coords(n=("n", n, ds["n"].attrs))
        if record:
            spec = json.loads(ds.attrs["spec"])
            spec["n"] = n.tolist()
            ds.attrs["spec"] = json.dumps(spec)
        return ds
    return edit


def _one_cell(ds: xr.Dataset) -> xr.Dataset:
    ds["eps"][0, 1, 1, 1] = 1e-6
    ds["eps_lower"][0, 1, 1, 1] = np.nan  # no lower bound above it to give it away
    return ds


def _lower_above(ds: xr.Dataset) -> xr.Dataset:
    ds["eps_lower"][0] = ds["eps"][0] * 1.5
    return ds


def _garbled(ds: xr.Dataset) -> xr.Dataset:
    ds.attrs["certification"] = "{not json"
    return ds


DAMAGE = {
    "row halved": (lambda ds: _scaled_row(ds, 0.5), "does not certify"),
    "row replaced by another mechanism's": (_other_row, "does not certify"),
    "labels swapped": (_swapped_labels, "mechanisms rows differ from the table's recorded spec"),
    "grid eps0 moved": (_moved("eps0", 2, 2.03), "eps0 axis differ"),
    "grid eps0 moved, spec edited": (_moved("eps0", 2, 2.03, record=True), "does not certify"),
    "n axis divided by 10": (_divided_n(record=False), "n axis differ"),
    "n axis divided by 10, spec edited": (_divided_n(record=True), "does not certify"),
    "grid delta moved": (_moved("delta", 1, 1e-6), "delta axis differ"),
    "one cell set to 1e-6": (_one_cell, "not monotone"),
    "lower bounds above the upper": (_lower_above, "lower bound"),
    "garbled certification attribute": (_garbled, "certification attribute is not valid JSON"),
}


@pytest.fixture()
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty trust cache: nothing recorded, nothing refused before."""
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(trust, "_REFUTED", {})
    return tmp_path / "cache"


def _use(path: Path) -> None:
    """Open the table as unverified (its checks, not its provenance) and answer from every row
    (each row is checked when first used)."""
    t = lookup.open_table(path, verified=False)
    for r in range(t.upper.shape[0]):
        t.upper.row(r)


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_damaged_copy_is_refused_by_lookup_and_verify(table_path: Path, tmp_path: Path, private_cache: Path,
                                                      name: str) -> None:
    edit, reason = DAMAGE[name]
    out = damaged(table_path, tmp_path / "damaged.zarr", edit)
    assert not store.check_manifest(out)  # the checksums match the damage
    with pytest.raises(TableError, match="refused") as info:
        _use(out)
    assert reason in str(info.value) or "drawn at random" in str(info.value)  # the spot checks may see it first
    with pytest.raises(TableError, match="refused"):  # by its damage, or by its provenance: nothing vouches
        lookup.open_table(out)
    result = CliRunner().invoke(tablegen_main, ["verify", str(out)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert reason in result.output or "drawn at random" in result.output


def test_spot_checks_draw_every_cell_of_a_small_table_and_random_cells_of_a_large_one() -> None:
    import random

    small = list(trust._draw((2, 3, 4, 5), random.Random(1)))
    assert sorted(small) == sorted(np.ndindex(2, 3, 4, 5))
    large = list(trust._draw((21, 110, 351, 19), random.Random(1)))
    assert len(large) == trust.SPOT_MAX and len(set(large)) > 0.99 * trust.SPOT_MAX
    assert {c[0] for c in large} == set(range(21)) and max(c[2] for c in large) > 340


def test_shipped_tables_are_pinned() -> None:
    """The pins in lookup/trust/origin.py name the shipped tables, the mechanism table and the calibration
    table (issue 37 review, N1), and the shipped sigma device file (by its header's SHA-256), and nothing
    else: republishing one of data/ without updating its
    pin would refuse it for every user (nothing else vouches for it)."""
    from lookup.device.files import read_header

    shipped = {trust.listing_digest(read_manifest(store_path)): store_path.name
               for store_path in sorted((ROOT / "data").glob("*.zarr"))}
    shipped |= {read_header(str(path))["sha256"]: path.name for path in sorted((ROOT / "data").glob("*.sheps"))}
    assert set(shipped.values()) >= {"default.zarr", "protocols.zarr", "gaussian.sheps"}
    assert trust.PINNED == shipped


@pytest.fixture()
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """An Ed25519 key pair as PEM files (private, public)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private, public = tmp_path / "key.pem", tmp_path / "key.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def test_a_table_signed_by_a_trusted_key_is_trusted(
        table_path: Path, tmp_path: Path, private_cache: Path, keys: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    private, public = keys
    out = damaged(table_path, tmp_path / "signed.zarr", lambda ds: ds)  # a copy: not pinned
    digest = trust.listing_digest(read_manifest(out))
    trust.record_verified(out, digest)  # as tablegen verify --full does: what tablegen sign signs
    result = CliRunner().invoke(tablegen_main, ["sign", str(out), "--key", str(private)])
    assert result.exit_code == 0, result.output
    trust.forget(digest)  # then remembered by nothing here: the signature alone vouches for it
    assert not store.check_manifest(out)  # the signature sits beside the manifest, not in it
    with pytest.raises(TableError, match="nothing vouches"):
        lookup.open_table(out)
    monkeypatch.setenv(trust.ENV_KEYS, str(public))
    assert lookup.open_table(out).provenance == "signed"


@pytest.mark.parametrize("full", [False, True])
def test_tablegen_sign_refuses_a_copy_forged_with_a_matching_manifest(
        table_path: Path, tmp_path: Path, private_cache: Path, keys: tuple[Path, Path], full: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 55: ``tablegen sign`` signed whatever manifest it found: a copy whose chunks were forged
    (a row scaled by 0.5) and whose MANIFEST.sha256 was rewritten to match was signed without a
    word, and a reader trusting the key answered it.  Now it signs only a table this machine
    vouches for, or says why not (exit 2, one line); ``--full`` recomputes it first and refuses."""
    private, _ = keys
    out = damaged(table_path, tmp_path / "forged.zarr", lambda ds: _scaled_row(ds, 0.5))
    assert not store.check_manifest(out)  # every checksum matches
    if full:  # a cheap stand-in for the recomputation: its answer for this forgery
        import tablegen.verify
        monkeypatch.setattr(tablegen.verify, "verify", lambda *a, **k: ["eps row 0: below the recomputed eps"])
    result = CliRunner().invoke(tablegen_main, ["sign", str(out), "--key", str(private), *(["--full"] * full)])
    assert result.exit_code == 2, result.output
    assert not trust.signature_path(out).exists()
    message = result.output.strip()
    assert "\n" not in message and message.startswith("error:") and "not signed" in message
    if not full:
        assert "not shipped, built or fully verified on this machine" in message and "--full" in message


def test_a_signed_table_changed_after_signing_is_refused(
        table_path: Path, tmp_path: Path, private_cache: Path, keys: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    private, public = keys
    out = damaged(table_path, tmp_path / "signed.zarr", lambda ds: ds)
    signing.sign(out, private)
    signature = trust.signature_path(out).read_bytes()
    out = damaged(table_path, tmp_path / "signed.zarr", lambda ds: _scaled_row(ds, 0.5))  # republished, damaged
    trust.signature_path(out).write_bytes(signature)  # the old signature kept beside the new files
    monkeypatch.setenv(trust.ENV_KEYS, str(public))
    with pytest.raises(TableError, match="signature by a trusted key does not verify"):
        lookup.open_table(out)
    monkeypatch.delenv(trust.ENV_KEYS)  # no key trusted: the signature is not consulted, the engine decides
    with pytest.raises(TableError, match="does not certify"):
        _use(out)


def test_a_device_file_signed_by_a_trusted_key_is_vouched_for(table_path: Path, tmp_path: Path, private_cache: Path,
                                                               keys: tuple[Path, Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from tablegen.export import export_device

    private, public = keys
    trust.record_built(table_path, trust.listing_digest(read_manifest(table_path)))  # as tablegen build does
    device = tmp_path / "krr.dev"
    export_device(device, "krr", {}, str(table_path))
    assert lookup.open_table(device).provenance == "built"  # tablegen export records what it wrote
    lookup.store.table._OPEN.clear()
    assert CliRunner().invoke(tablegen_main, ["sign", str(device), "--key", str(private)]).exit_code == 0
    trust.forget(signing.table_digest(device))
    assert (tmp_path / "krr.dev.sig").is_file()
    monkeypatch.setenv(trust.ENV_KEYS, str(public))
    assert lookup.open_table(device).provenance == "signed"


def test_the_server_refuses_to_serve_a_damaged_table(table_path: Path, tmp_path: Path, private_cache: Path) -> None:
    import subprocess
    import sys

    out = damaged(table_path, tmp_path / "damaged.zarr", lambda ds: _scaled_row(ds, 0.5))
    done = subprocess.run([sys.executable, "-m", "lookup.cli", "serve", "--port", "0", "--table", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "nothing vouches" in done.stderr and "Traceback" not in done.stderr
