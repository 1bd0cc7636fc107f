"""lookup.store.codecs loads numcodecs' decoders without its package __init__, decodes the same bytes,
and leaves a later ordinary ``import numcodecs`` (zarr's) working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lookup.store import codecs

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import sys
import numpy as np
from lookup.store import codecs
values = np.arange(30000, dtype="<f4") / 7
blosc, zstd = codecs.module("blosc"), codecs.module("zstd")
assert "numcodecs.registry" not in sys.modules and "numcodecs" not in sys.modules, "not the cheap path"
assert blosc.decompress(open(sys.argv[1], "rb").read()) == values.tobytes()
assert zstd.decompress(open(sys.argv[2], "rb").read()) == values.tobytes()
import zarr, numcodecs
assert numcodecs.blosc is blosc and numcodecs.get_codec({"id": "zstd"}) is not None
assert zarr.open_group(sys.argv[3], mode="r")["n"][:].size > 0
print("ok")
"""


def test_cheap_decoders_decode_what_numcodecs_encodes_and_zarr_still_works(tmp_path: Path) -> None:
    import numcodecs.blosc
    import numcodecs.zstd

    values = (np.arange(30000, dtype="<f4") / 7).tobytes()
    (tmp_path / "b").write_bytes(numcodecs.blosc.compress(values, b"zstd", 6, numcodecs.blosc.SHUFFLE, 4))
    (tmp_path / "z").write_bytes(numcodecs.zstd.compress(values, 9))
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "b"), str(tmp_path / "z"),
                          str(ROOT / "data" / "default.zarr")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_only_the_table_decoders() -> None:
    with pytest.raises(ValueError, match="codec module must be one of"):
        codecs.module("pickles")
