"""Bombs under the per-file limits (issue 43): a file whose size alone costs seconds and gigabytes
(a sparse 1 GiB device file, a 190 MB zarr.json, a 200 MB manifest, 30,000 listed files) is
refused from its size, before it is read, in under a second and 200 MB: by the device reader, by
``open_table`` on a store or a device file (the zarr-free reader and the fallback reader), and by
``lookup serve`` at start (``create_app``); a store opened holds no descriptor per file.  The C
reader's tool is measured on the same device files in test_lookup_device_c.py."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from test_lookup_trust_forgery import _bounded, _refused_within_bounds

import lookup
from lookup.device.files import MAGIC, DeviceFileError, encode, read_device
from lookup.store import manifest
from lookup.store.manifest import MANIFEST, TableError, parse_manifest
from lookup.store.table import _load_table, open_store, read_verified_listing
from lookup.trust import origin as trust

GIB = 1 << 30
SMALL = {"format": 2, "family": "krr", "rows": [{"k": 3}], "eps0_monotone": [True], "eps0": [1.0], "n": [40.0],
         "delta": [1e-6], "shape": [1, 1, 1, 1], "dtype": "<f4"}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh cache home (nothing recorded, no key trusted), refusals of this process forgotten."""
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.delenv(trust.ENV_KEYS, raising=False)
    monkeypatch.setattr(trust, "_REFUTED", {})
    lookup.store.table._OPEN.clear()


def sparse(path: Path, size: int, head: bytes = b"") -> Path:
    """``head`` followed by zeros up to ``size`` bytes, written sparse (no disk used for the zeros)."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def zeros(path: Path) -> Path:
    """1 GiB of zeros: not a device file (no magic)."""
    return sparse(path, GIB)


def grown(path: Path) -> Path:
    """A genuine device file (one cell) grown to 1 GiB: its header gives 12 + H + 8 bytes."""
    return sparse(path, GIB, encode(SMALL, struct.pack("<2f", 0.5, 0.25)))


def long_header(path: Path) -> Path:
    """The magic, then a header length of 2^31 - 1, in 1 GiB."""
    return sparse(path, GIB, MAGIC + struct.pack("<I", 2**31 - 1))


DEVICE_BOMBS: dict[str, Callable[[Path], Path]] = {"zeros": zeros, "grown": grown, "long header": long_header}


def consistent(path: Path) -> Path:
    """A file whose size is the one its header gives (20,000 n by 1,500 deltas: 240 MB of zeros, under the
    256 MiB per-file limit) and whose SHA-256 is nobody's: nothing vouches for it."""
    header = {**SMALL, "n": list(range(1, 20_001)), "delta": [(d + 1) / 2000 for d in range(1500)],
              "shape": [1, 1, 20_000, 1500]}
    head = encode(header, b"")
    return sparse(path, len(head) + 8 * 20_000 * 1500, head)


def _serve_start(path: Path) -> None:
    """What ``lookup serve`` does at start with ``--table path``: the application, the table opened first."""
    from lookup.service.app import Settings, create_app

    create_app(Settings(table=str(path)))


def _refused_at_serve_start(path: Path, message: str) -> None:
    pytest.importorskip("starlette")
    import lookup.service.app  # noqa: F401 - its imports loaded before the start is timed

    def start() -> None:
        with pytest.raises(TableError, match=message):
            _serve_start(path)

    seconds, peak = _bounded(start)
    assert seconds < 1.0 and peak < 200


@pytest.mark.parametrize("name", sorted(DEVICE_BOMBS))
def test_a_sparse_gigabyte_device_file_is_refused_from_its_header(tmp_path: Path, name: str) -> None:
    """Once read whole before its magic was checked: 1.2-19 s and 1.08 GB at open, 9.5 s at serve start."""
    path = DEVICE_BOMBS[name](tmp_path / "bomb.dev")

    def read() -> None:
        with pytest.raises(DeviceFileError, match="refused|bad magic"):
            read_device(str(path), verified=False)

    seconds, peak = _bounded(read)
    assert seconds < 1.0 and peak < 200
    _refused_within_bounds(path, "refused|bad magic")
    _refused_at_serve_start(path, "refused|bad magic")


def test_a_device_file_nothing_vouches_for_is_refused_before_its_payload_is_read(tmp_path: Path) -> None:
    """A size consistent with its header (240 MB): the default readers ask who vouches for its digest first."""
    path = consistent(tmp_path / "consistent.dev")

    def read() -> None:
        with pytest.raises(DeviceFileError, match="nothing vouches"):
            read_device(str(path))

    seconds, peak = _bounded(read)
    assert seconds < 1.0 and peak < 200
    _refused_at_serve_start(path, "nothing vouches")


def relist(store: Path) -> None:
    """The store's manifest rewritten to match its files, each hashed in blocks (a sparse file costs no memory)."""
    lines = []
    for rel in sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file() and p.name != MANIFEST):
        with open(store / rel, "rb") as f:
            lines.append(f"{hashlib.file_digest(f, 'sha256').hexdigest()}  {rel}\n")
    (store / MANIFEST).write_text("".join(lines))


def _copy(table_path: Path, tmp_path: Path) -> Path:
    out = tmp_path / "bomb.zarr"
    shutil.copytree(table_path, out)
    return out


def _refused_everywhere(out: Path, message: str) -> None:
    """Refused in under 1 s and 200 MB by open_table, the fallback reader and at serve start."""
    _refused_within_bounds(out, message)

    def fallback() -> None:
        with pytest.raises(TableError, match=message):
            read_verified_listing(out)

    seconds, peak = _bounded(fallback)
    assert seconds < 1.0 and peak < 200
    _refused_at_serve_start(out, message)


def test_a_190_mb_zarr_json_is_refused_before_it_is_read(table_path: Path, tmp_path: Path) -> None:
    """Once read, hashed and parsed at open (5.6-17 s, 1.15 GB): metadata is bounded by what our tables need."""
    out = _copy(table_path, tmp_path)
    sparse(out / "zarr.json", 190 << 20, (out / "zarr.json").read_bytes())
    relist(out)
    _refused_everywhere(out, "zarr.json is larger than")


def test_a_200_mb_manifest_is_refused_before_it_is_read(table_path: Path, tmp_path: Path) -> None:
    """Once read and parsed whole (7 min and 3.4 GB where its lines listed files)."""
    out = _copy(table_path, tmp_path)
    sparse(out / MANIFEST, 200 << 20, (out / MANIFEST).read_bytes())
    _refused_everywhere(out, f"{MANIFEST} is larger than")


def test_30000_listed_files_are_refused_before_any_is_opened(table_path: Path, tmp_path: Path) -> None:
    """Each listed file once held a descriptor from open on (30,000 at once)."""
    out = _copy(table_path, tmp_path)
    (out / "x").mkdir()
    empty = out / "x" / "0"
    empty.write_bytes(b"")
    for i in range(1, 30_000):
        os.link(empty, out / "x" / str(i))
    relist(out)
    _refused_everywhere(out, f"refused, {MANIFEST}")


def test_a_manifest_listing_more_files_than_tables_have_is_refused(table_path: Path, tmp_path: Path) -> None:
    """Under the byte limit, more lines than a table of our shapes lists (2 R + 17 files for R rows)."""
    text = "".join(f"{'0' * 64}  x/{i}\n" for i in range(manifest.MAX_LISTED_FILES + 1))
    with pytest.raises(TableError, match="lists more than"):
        parse_manifest(text)
    out = _copy(table_path, tmp_path)
    (out / MANIFEST).write_text((out / MANIFEST).read_text() + text)
    _refused_everywhere(out, "lists more than")


def test_an_open_store_holds_no_descriptor_per_file(table_path: Path, tmp_path: Path) -> None:
    """Files are opened one at a time when read, through one descriptor of the store's directory."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("no /proc/self/fd to count descriptors")
    out = _copy(table_path, tmp_path)
    before = len(os.listdir("/proc/self/fd"))
    table = open_store(out, _load_table, "")
    assert len(os.listdir("/proc/self/fd")) - before <= 1
    assert table.upper[0].shape == (4, 3, 4)  # a row read later: opened, read, verified and closed
    assert len(os.listdir("/proc/self/fd")) - before <= 1


def test_a_row_read_after_its_table_was_deleted_is_refused_never_mixed(table_path: Path, tmp_path: Path) -> None:
    """No descriptor pins a row not read yet: a table published over an open one (directories
    swapped) still answers its own rows from the directory it opened, and once that is deleted
    refuses them rather than read the new table's."""
    path, new = _copy(table_path, tmp_path), tmp_path / "new.zarr"
    shutil.copytree(table_path, new)
    (new / "eps" / "c" / "0" / "0" / "0" / "0").write_bytes((new / "eps" / "c" / "1" / "0" / "0" / "0").read_bytes())
    relist(new)  # the new table: krr k=3 with generic's values
    table = open_store(path, _load_table, "")  # as open_table reads it, before provenance: no row read yet
    os.rename(path, tmp_path / "old.zarr")
    os.rename(new, path)
    assert (table.upper[0] == open_store(table_path, _load_table, "").upper[0]).all()
    shutil.rmtree(tmp_path / "old.zarr")
    with pytest.raises(TableError, match="removed since the table was opened"):
        table.upper[1]
