"""``lookup.store.reader``: the published stores decoded without zarr, compared with zarr's decoding."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from lookup.store.reader import StoreArray, open_group
from lookup.store.table import shipped_table


def same(ours: np.ndarray, theirs: np.ndarray) -> bool:
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if ours.dtype == object:
        return ours.shape == theirs.shape and [str(x) for x in ours.ravel()] == [str(x) for x in theirs.ravel()]
    return ours.dtype == theirs.dtype and np.array_equal(ours, theirs, equal_nan=ours.dtype.kind == "f")


def check_store(store: Path) -> list[str]:
    """Every array of ``store`` read whole and row by row, each equal to zarr's; the names read."""
    ours, theirs = open_group(store), zarr.open_group(store, mode="r")
    names = [name for name, _ in theirs.arrays()]
    for name in names:
        array, reference = ours[name], theirs[name][...]
        assert isinstance(array, StoreArray) and array.shape == reference.shape
        assert same(array[...], reference), name
        for r in {0, array.shape[0] - 1} if array.shape else ():
            assert same(array[r], reference[r]), (name, r)
        if array.shape:
            assert same(array[-1], reference[-1])
            with pytest.raises(IndexError):
                array[array.shape[0]]
    return names


def test_shipped_stores_decode_as_zarr_decodes_them() -> None:
    for name in ("default.zarr", "protocols.zarr"):
        assert {"eps", "delta"} <= set(check_store(shipped_table(name)))


def test_built_table_and_a_chunk_never_written(table_path: Path, tmp_path: Path) -> None:
    """A chunk missing from the store and its manifest (zarr writes none that is all fill value)
    reads as the fill value, here NaN lower bounds."""
    from tablegen.store import write_manifest

    assert "eps_lower" in check_store(table_path)
    copy = tmp_path / "sparse.zarr"
    shutil.copytree(table_path, copy)
    (copy / "eps_lower" / "c" / "1" / "0" / "0" / "0").unlink()
    write_manifest(copy)
    check_store(copy)
    assert np.isnan(open_group(copy)["eps_lower"][1]).all()


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")  # consolidated on purpose, as publish does
def test_chunks_of_several_rows_and_partial_edge_chunks(tmp_path: Path) -> None:
    """Chunks that are not one row each (and do not divide the shape), every codec chain this
    reader implements: what zarr writes, this reader reads."""
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, TransposeCodec, ZstdCodec

    from tablegen.store import write_manifest

    store = tmp_path / "chunks.zarr"
    group = zarr.open_group(store, mode="w", zarr_format=3)
    rng = np.random.default_rng(3)
    values = rng.normal(size=(5, 7, 4, 3)).astype("<f4")
    values[1, 2] = np.nan
    blosc = BloscCodec(cname="zstd", shuffle="shuffle", typesize=4)
    group.create_array("blosc", shape=values.shape, chunks=(2, 3, 4, 3), dtype="f4", fill_value=np.nan,
                       filters=[TransposeCodec(order=(0, 3, 1, 2))], compressors=[blosc, Crc32cCodec()])[...] = values
    group.create_array("big_endian", shape=(9,), chunks=(4,), dtype=">i8", fill_value=0,
                       serializer=BytesCodec(endian="big"), compressors=[ZstdCodec(level=3)])[...] = np.arange(9) - 4
    group.create_array("flags", shape=(3,), chunks=(3,), dtype="bool", fill_value=False,
                       compressors=[Crc32cCodec()])[...] = [True, False, True]
    group.create_array("labels", shape=(4,), chunks=(3,), dtype=str, fill_value="",
                       compressors=[ZstdCodec(level=9), Crc32cCodec()])[...] = ["a", "bé", "", "krr"]
    group.create_array("sparse", shape=(6, 2), chunks=(2, 2), dtype="f8", fill_value=np.inf)[2:4] = 1.5
    zarr.consolidate_metadata(store)
    write_manifest(store)
    assert sorted(check_store(store)) == ["big_endian", "blosc", "flags", "labels", "sparse"]
    ours = open_group(store)
    assert ours["blosc"].rows(1, 4).shape == (3, 7, 4, 3) and same(ours["blosc"].rows(1, 4), values[1:4])
    assert ours["sparse"][0].tolist() == [np.inf, np.inf]
