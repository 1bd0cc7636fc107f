"""The C99 device reader (lookup/device/c/) against the Python one (lookup.device.files) on the same files:
the same answers to the bit, the same refusals (out-of-range queries, flipped bytes, truncated
files, headers and payloads edited under a recomputed checksum), and its SHA-256 against hashlib.

Compiled with the system ``cc -std=c99 -O2 -Wall -Wextra -Werror``; skipped only where there is
no C compiler.  The answers compare equal as doubles: the C reader takes the same float64
operations in the same order (expm1, log1p, one rounding each) and prints them with %.17g.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import struct
import subprocess
import time
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_lookup_bombs import DEVICE_BOMBS, sparse

import lookup
from lookup.device import files as device
from lookup.device.files import MAGIC, DeviceFileError, checksum_v1, encode, header_sha256, read_device
from lookup.store import checks, signing
from lookup.store.manifest import read_manifest
from lookup.trust import origin as trust
from tablegen.export import export_device
from tablegen.store import round_float32

C_DIR = Path(__file__).resolve().parents[3] / "lookup" / "device" / "c"
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"]

# status codes of lookup/device/c/shuffle_eps_device.h (the exit codes of shuffle_eps_query)
ARGUMENT, IO = 1, 2
TRUNCATED, MAGIC_CODE, ENCODING, JSON_CODE, FORMAT, DIGEST_FIELD, CHECKSUM = 10, 11, 12, 13, 14, 15, 16
KEY, AXIS, SHAPE, PAYLOAD, VALUE, LOWER, MONOTONE = 17, 18, 19, 20, 30, 31, 32
QUERY, PARAMS, ROW, EPS0_ABOVE, N_BELOW, DELTA_BELOW, EPS0_OFF_GRID = 40, 41, 42, 43, 44, 45, 46
UNTRUSTED, SIGNATURE, NO_SODIUM, MECHANISM = 50, 51, 52, 53
TOO_LARGE, DUPLICATE_ROW = 21, 22
FILE_REFUSALS = {TRUNCATED, MAGIC_CODE, ENCODING, JSON_CODE, FORMAT, DIGEST_FIELD, CHECKSUM, KEY, AXIS, SHAPE,
                 PAYLOAD, TOO_LARGE, DUPLICATE_ROW, VALUE, LOWER, MONOTONE}

SHA_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "shuffle_eps_device.h"
int main(int argc, char **argv) {
    int a, i;
    for (a = 1; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        unsigned char *buf = malloc(1 << 20), digest[32];
        size_t len = fread(buf, 1, 1 << 20, f);
        fclose(f);
        shuffle_eps_sha256(buf, len, digest);
        for (i = 0; i < 32; i++) printf("%02x", digest[i]);
        putchar('\n');
        free(buf);
    }
    return 0;
}
"""


def _compile(out: Path, *sources: Path) -> Path:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler: `cc` is not on PATH, so the C device reader (lookup/device/c/) can't be built here")
    done = subprocess.run([cc, *CFLAGS, f"-I{C_DIR}", "-o", str(out), *map(str, sources), "-lm"],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"cc failed:\n{done.stderr}"
    return out


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("c")


@pytest.fixture(scope="module")
def query_tool(build_dir: Path) -> Path:
    return _compile(build_dir / "shuffle_eps_query", C_DIR / "shuffle_eps_query.c", C_DIR / "shuffle_eps_device.c")


@pytest.fixture(autouse=True)
def cache(build_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache home where the session table and the files exported from it are recorded as
    built here (lookup.trust.origin; provenance itself is tested in test_lookup_trust*.py)."""
    monkeypatch.setenv(trust.ENV_CACHE, str(build_dir / "cache"))


@pytest.fixture(scope="module")
def files(table_path: Path, build_dir: Path) -> dict[str, Path]:
    """Device files of the session table: k-RR k = 3, the generic randomizer, and a two-row file
    (k = 3 as exported, and a k = 4 row of 0.9 times its values that answers only at grid eps0)."""
    out = {name: build_dir / f"{name}.dev" for name in ("krr", "generic", "two")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(trust.ENV_CACHE, str(build_dir / "cache"))
        trust.record_built(table_path, trust.listing_digest(read_manifest(table_path)))  # as tablegen build does
        export_device(out["krr"], "krr", {}, str(table_path))
        export_device(out["generic"], "generic", {}, str(table_path))
    header, upper, lower = _parts(out["krr"])
    second = np.float32(0.9) * upper
    header.update(rows=[{"k": 3}, {"k": 4}], eps0_monotone=[True, False], shape=[2, *header["shape"][1:]])
    payload = (np.concatenate([upper, second]).astype("<f4").tobytes()
               + np.concatenate([lower, np.full_like(lower, np.nan)]).astype("<f4").tobytes())
    out["two"].write_bytes(encode(header, payload))
    return out


def _parts(path: Path) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    data = path.read_bytes()
    (length,) = struct.unpack_from("<I", data, 8)
    values = np.frombuffer(data[12 + length:], dtype="<f4")
    return json.loads(data[12:12 + length]), values[:values.size // 2].copy(), values[values.size // 2:].copy()


def _sealed(text: bytes, payload: bytes) -> bytes:
    """A device file whose header ``text`` (ending with the format-2 digest field) is given a
    matching SHA-256, whatever else the text holds."""
    end = len(text) - 2
    text = text[:end - 64] + header_sha256(text, payload).encode() + text[end:]
    return MAGIC + struct.pack("<I", len(text)) + text + payload


def c_query(tool: Path, path: Path, params: str | None, eps0: float, n: float, delta: float
            ) -> tuple[int, float | None, str]:
    """The C tool's answer from the file at ``path``, vouched for (bundled) as its own family's."""
    family = _family(path.read_bytes())
    args = [str(tool), "--bundled", str(path), family, *([] if params is None else [params]), repr(eps0), repr(n),
            repr(delta)]
    done = subprocess.run(args, capture_output=True, text=True)
    return done.returncode, float(done.stdout) if done.returncode == 0 else None, done.stderr


def _family(data: bytes) -> str:
    """The family a device file's header names ("krr" where it cannot be read: a damaged file)."""
    try:
        (length,) = struct.unpack_from("<I", data, 8)
        return str(json.loads(data[12:12 + length])["family"])
    except (struct.error, ValueError, KeyError, TypeError):
        return "krr"


def py_query(path: Path, params: dict[str, Any], eps0: float, n: float, delta: float) -> float | Exception:
    try:
        return read_device(str(path), verified=False).eps(params, eps0, n, delta)  # the readers' rules, not trust
    except ValueError as err:  # DeviceFileError included
        return err


def expected_refusal(header: dict[str, Any], params: dict[str, Any], eps0: float, n: float, delta: float) -> int:
    """The status the C reader gives a query (0: answered), by the rules of DeviceTable.eps."""
    if not (0 < eps0 < math.inf and 1 <= n < math.inf and 0 < delta < 1):
        return QUERY
    rows = [device.canonical(p) for p in header["rows"]]
    if device.canonical(params) not in rows:
        return ROW
    if eps0 > header["eps0"][-1]:
        return EPS0_ABOVE
    if n < header["n"][0]:
        return N_BELOW
    if delta < header["delta"][0]:
        return DELTA_BELOW
    if not header["eps0_monotone"][rows.index(device.canonical(params))] and eps0 not in header["eps0"]:
        return EPS0_OFF_GRID
    return 0


def test_sha256_matches_hashlib(build_dir: Path, files: dict[str, Path]) -> None:
    tool = _compile(build_dir / "sha", _write(build_dir / "sha.c", SHA_MAIN), C_DIR / "shuffle_eps_device.c")
    rng = np.random.default_rng(1)
    inputs = [rng.bytes(size) for size in (0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 70001)]
    paths = [_write(build_dir / f"in{i}", data) for i, data in enumerate(inputs)] + list(files.values())
    got = subprocess.run([str(tool), *map(str, paths)], capture_output=True, text=True, check=True).stdout.split()
    assert got == [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


def _write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def test_random_queries_answered_identically(query_tool: Path, files: dict[str, Path]) -> None:
    """300 queries in and around the files' ranges: the same double from both readers, or both
    refuse (the C reader with the status the rules give)."""
    rng = np.random.default_rng(7)
    cases = [("krr", {"k": 3}), ("generic", {}), ("two", {"k": 3}), ("two", {"k": 4})]
    answered = 0
    for i in range(300):
        name, params = cases[i % len(cases)]
        header = read_device(str(files[name]), verified=False).header
        eps0 = float(rng.choice(header["eps0"])) if rng.random() < 0.4 else float(rng.uniform(0.2, 4.5))
        n = float(rng.choice(header["n"])) if rng.random() < 0.3 else float(rng.uniform(10, 150))
        delta = float(rng.choice(header["delta"])) if rng.random() < 0.3 else float(10 ** rng.uniform(-10, -1.5))
        rc, value, err = c_query(query_tool, files[name], json.dumps(params), eps0, n, delta)
        want = py_query(files[name], params, eps0, n, delta)
        assert rc == expected_refusal(header, params, eps0, n, delta), (name, params, eps0, n, delta, err)
        if isinstance(want, Exception):
            assert rc in {ROW, EPS0_ABOVE, N_BELOW, DELTA_BELOW, EPS0_OFF_GRID} and err, (want, rc, err)
        else:
            assert rc == 0 and value == want, (name, params, eps0, n, delta, value, want)
            answered += 1
    assert answered > 150


@pytest.mark.parametrize(("args", "code"), [
    ((0.0, 50.0, 1e-6), QUERY), ((-1.0, 50.0, 1e-6), QUERY), ((math.nan, 50.0, 1e-6), QUERY),
    ((math.inf, 50.0, 1e-6), QUERY), ((1.0, 0.5, 1e-6), QUERY), ((1.0, math.inf, 1e-6), QUERY),
    ((1.0, 50.0, 0.0), QUERY), ((1.0, 50.0, 1.0), QUERY), ((1.0, 50.0, math.nan), QUERY),
    ((4.000001, 50.0, 1e-6), EPS0_ABOVE), ((1.0, 19.999, 1e-6), N_BELOW), ((1.0, 50.0, 9.99e-10), DELTA_BELOW),
])
def test_out_of_range_queries_refused_by_both(query_tool: Path, files: dict[str, Path], args: tuple[float, ...],
                                              code: int) -> None:
    rc, _, err = c_query(query_tool, files["krr"], '{"k":3}', *args)
    assert rc == code and "shuffle_eps_query" in err
    assert isinstance(py_query(files["krr"], {"k": 3}, *args), ValueError)


def test_rows_chosen_by_parameters(query_tool: Path, files: dict[str, Path]) -> None:
    query = (1.0, 50.0, 3e-6)
    want = py_query(files["two"], {"k": 4}, *query)
    for params in ('{"k":4}', '{"k": 4.0}', ' {"k":4, "g": null} ', '{"k":4e0}'):
        assert c_query(query_tool, files["two"], params, *query)[1] == want, params
    for other in ('{"k":5}', '{"k":"4"}', "{}"):  # the tool expects the mechanism it is asked: another's file
        assert c_query(query_tool, files["two"], other, *query)[0] == MECHANISM
    for bad in ('[4]', '{"k":4', '{"k":4,"k":4}', '{"k":NaN}', "k=4", ""):
        assert c_query(query_tool, files["two"], bad, *query)[0] == PARAMS, bad
    # without parameters: the only row of a one-row file; a two-row file asks for them
    assert c_query(query_tool, files["generic"], None, *query)[1] == py_query(files["generic"], {}, *query)
    rc, _, err = c_query(query_tool, files["two"], None, *query)
    assert rc == ROW and '{"k":3} {"k":4}' in err
    # the k = 4 row is not eps0-monotone: a grid eps0 only
    assert c_query(query_tool, files["two"], '{"k":4}', 1.5, 50.0, 3e-6)[0] == EPS0_OFF_GRID
    assert isinstance(py_query(files["two"], {"k": 4}, 1.5, 50.0, 3e-6), ValueError)


def test_command_line_mistakes(query_tool: Path, files: dict[str, Path], tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(query_tool), *args], capture_output=True, text=True)

    assert run().returncode == ARGUMENT and "usage" in run().stderr
    assert run(str(files["krr"]), "krr", "1", "50", "1e-6").returncode == ARGUMENT  # no reason to trust it given
    assert run("--bundled", str(files["krr"]), "krr", "1", "x", "1e-6").returncode == ARGUMENT
    assert run("--bundled", str(files["krr"]), "1", "50", "1e-6").returncode == ARGUMENT  # no mechanism expected
    missing = run("--bundled", str(tmp_path / "missing.dev"), "krr", "1", "50", "1e-6")
    assert missing.returncode == IO and "could not be read" in missing.stderr


def _refused_by_both(tool: Path, path: Path, params: dict[str, Any] | None = None) -> int:
    """The C status for ``path`` (a file refusal), after checking that the Python reader refuses it."""
    with pytest.raises(DeviceFileError):  # by its damage, not by its provenance
        read_device(str(path), verified=False).eps({"k": 3} if params is None else params, 1.0, 40.0, 1e-6)
    rc, _, err = c_query(tool, path, json.dumps({"k": 3} if params is None else params), 1.0, 40.0, 1e-6)
    assert rc in FILE_REFUSALS, (rc, err)
    assert any(word in err for word in ("refused", "not a shuffle-eps device file", "unsupported format")), err
    return rc


def test_flipped_bytes_refused_by_both(query_tool: Path, files: dict[str, Path], tmp_path: Path) -> None:
    data = files["krr"].read_bytes()
    (length,) = struct.unpack_from("<I", data, 8)
    rng = np.random.default_rng(11)
    positions = sorted({*range(12), *rng.integers(12, 12 + length, 40).tolist(),
                        *rng.integers(12 + length, len(data), 30).tolist(), 12 + length - 1, len(data) - 1})
    codes = set()
    for position in positions:
        flipped = bytearray(data)
        flipped[position] ^= 1 << int(rng.integers(8))
        path = _write(tmp_path / "flipped.dev", bytes(flipped))
        codes.add(_refused_by_both(query_tool, path))
    assert {MAGIC_CODE, CHECKSUM} <= codes


def test_truncated_files_refused_by_both(query_tool: Path, files: dict[str, Path], tmp_path: Path) -> None:
    data = files["krr"].read_bytes()
    (length,) = struct.unpack_from("<I", data, 8)
    for size in (0, 4, 11, 12, 100, 12 + length - 1, 12 + length, 12 + length + 1, len(data) - 4, len(data) - 1):
        code = _refused_by_both(query_tool, _write(tmp_path / "short.dev", data[:size]))
        assert code == (TRUNCATED if size < 12 + length else PAYLOAD), size  # the size its header gives, first


def _edit_header(edit: Any) -> Any:
    def apply(header: dict[str, Any], upper: np.ndarray, lower: np.ndarray) -> bytes:
        edit(header)
        return encode(header, upper.astype("<f4").tobytes() + lower.astype("<f4").tobytes())
    return apply


def _edit_values(edit: Any) -> Any:
    def apply(header: dict[str, Any], upper: np.ndarray, lower: np.ndarray) -> bytes:
        values = {"upper": upper.reshape(header["shape"])[0], "lower": lower.reshape(header["shape"])[0]}
        edit(values)
        return encode(header, upper.astype("<f4").tobytes() + lower.astype("<f4").tobytes())
    return apply


def _edit_text(old: bytes, new: bytes) -> Any:
    def apply(header: dict[str, Any], upper: np.ndarray, lower: np.ndarray) -> bytes:
        text = encode(header, b"")[12:]
        assert old in text
        return _sealed(text.replace(old, new, 1), upper.astype("<f4").tobytes() + lower.astype("<f4").tobytes())
    return apply


def _not_last(header: dict[str, Any], upper: np.ndarray, lower: np.ndarray) -> bytes:
    """The sha256 member sealed correctly, then moved from the end (a valid digest elsewhere)."""
    good = encode(header, upper.astype("<f4").tobytes() + lower.astype("<f4").tobytes())
    (length,) = struct.unpack_from("<I", good, 8)
    sealed = json.loads(good[12:12 + length])
    text = json.dumps({"sha256": sealed.pop("sha256"), **sealed}, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(text)) + text + good[12 + length:]


def _raise(values: dict[str, np.ndarray], name: str, index: tuple[int, ...], value: float) -> None:
    values[name][index] = value
    if name == "upper":
        values["lower"][index] = np.nan  # the lower bound there out of the way: the upper one is tested


SEALED_EDITS = {
    "n not increasing": (_edit_header(lambda h: h.update(n=[40.0, 20.0, 80.0])), AXIS),
    "eps0 not positive": (_edit_header(lambda h: h.update(eps0=[0.0, 1.0, 2.0, 4.0])), AXIS),
    "delta reaching 1": (_edit_header(lambda h: h.update(delta=[1e-9, 1e-7, 1e-5, 1.0])), AXIS),
    "n below 1": (_edit_header(lambda h: h.update(n=[0.5, 40.0, 80.0])), AXIS),
    "axis of a string": (_edit_header(lambda h: h.update(n=[20.0, "40", 80.0])), AXIS),
    "rows missing": (_edit_header(lambda h: h.pop("rows")), KEY),
    "dtype missing": (_edit_header(lambda h: h.pop("dtype")), KEY),
    "family missing": (_edit_header(lambda h: h.pop("family")), KEY),
    "delta not a list": (_edit_header(lambda h: h.update(delta="1e-6")), KEY),
    "monotone flags not booleans": (_edit_header(lambda h: h.update(eps0_monotone=[1])), KEY),
    "format 3 without its axis": (_edit_header(lambda h: h.update(format=3)), KEY),
    "format 4": (_edit_header(lambda h: h.update(format=4)), FORMAT),
    "shape against the axes": (_edit_header(lambda h: h.update(shape=[1, 4, 3, 5])), SHAPE),
    "shape of floats": (_edit_header(lambda h: h.update(shape=[1.0, 4, 3, 4])), SHAPE),
    "dtype <f8": (_edit_header(lambda h: h.update(dtype="<f8")), SHAPE),
    "two rows, one row stored": (_edit_header(lambda h: h.update(rows=[{"k": 3}, {"k": 4}],
                                                                eps0_monotone=[True, True])), SHAPE),
    "a row not monotone in n": (_edit_values(lambda v: _raise(v, "upper", (1, 2, 1), 0.9)), MONOTONE),
    "a row not monotone in eps0": (_edit_values(lambda v: _raise(v, "upper", (1, 1, 2), 0.05)), MONOTONE),
    "a row not monotone in delta": (_edit_values(lambda v: _raise(v, "upper", (0, 1, 3), 0.4)), MONOTONE),
    "eps above eps0": (_edit_values(lambda v: _raise(v, "upper", (0, 0, 0), 0.51)), VALUE),
    "eps not finite": (_edit_values(lambda v: _raise(v, "upper", (2, 1, 1), np.inf)), VALUE),
    "eps negative": (_edit_values(lambda v: _raise(v, "upper", (2, 2, 3), -0.1)), VALUE),
    "lower bound above eps": (_edit_values(lambda v: _raise(v, "lower", (1, 2, 3), 0.3)), LOWER),
    "a duplicate key": (_edit_text(b'"dtype":"<f4"', b'"dtype":"<f4","dtype":"<f4"'), JSON_CODE),
    "NaN in the header": (_edit_text(b'"n_min":null', b'"n_min":NaN'), JSON_CODE),
    "a trailing comma": (_edit_text(b'"k":3}', b'"k":3,}'), JSON_CODE),
    "a control character": (_edit_text(b'"krr"', b'"k\tr"'), JSON_CODE),
    "invalid UTF-8": (_edit_text(b'"krr"', b'"k\xffr"'), ENCODING),
    "an overlong UTF-8 form": (_edit_text(b'"krr"', b'"k\xc1\xb2r"'), ENCODING),
    "the digest not last": (_not_last, DIGEST_FIELD),
}


@pytest.mark.parametrize("name", sorted(SEALED_EDITS))
def test_edits_under_a_recomputed_checksum_refused_by_both(query_tool: Path, files: dict[str, Path],
                                                           tmp_path: Path, name: str) -> None:
    edit, code = SEALED_EDITS[name]
    header, upper, lower = _parts(files["krr"])
    path = _write(tmp_path / "edited.dev", edit(header, upper, lower))
    assert _refused_by_both(query_tool, path) == code


def test_payload_of_the_wrong_length_refused_by_both(query_tool: Path, files: dict[str, Path],
                                                     tmp_path: Path) -> None:
    header, upper, lower = _parts(files["krr"])
    payload = upper.astype("<f4").tobytes() + lower.astype("<f4").tobytes()
    for cut in (payload[:-4], payload + b"\0\0\0\0", b""):
        assert _refused_by_both(query_tool, _write(tmp_path / "p.dev", encode(header, cut))) == PAYLOAD


def test_format_1_files_read_by_python_only(query_tool: Path, files: dict[str, Path], tmp_path: Path) -> None:
    """Files of format 1 (the checksum over re-serialised JSON): the Python reader still reads
    them, the C reader refuses them with a request to re-export."""
    header, upper, lower = _parts(files["krr"])
    payload = upper.astype("<f4").tobytes() + lower.astype("<f4").tobytes()
    header["format"] = 1
    header["sha256"] = checksum_v1(header, payload)
    text = json.dumps(header, separators=(",", ":")).encode()
    old = _write(tmp_path / "old.dev", MAGIC + struct.pack("<I", len(text)) + text + payload)
    assert read_device(str(old), verified=False).eps({"k": 3}, 1.0, 40.0, 1e-6) == read_device(str(files["krr"])).eps(
        {"k": 3}, 1.0, 40.0, 1e-6)
    rc, _, err = c_query(query_tool, old, '{"k":3}', 1.0, 40.0, 1e-6)
    assert rc == FORMAT and "re-export" in err


def test_python_row_checks_are_lookup_checks() -> None:
    """lookup.device.files checks rows without numpy (with the tolerances lookup.store.checks imports from it)
    and refuses exactly what check_row refuses (edits on both sides of each threshold)."""
    # eps0 [1, 2] x n [10, 20] x delta [1e-6, 1e-3]: index 4 e + 2 j + d
    upper = np.array([0.9, 0.5, 0.8, 0.4, 1.5, 1.0, 1.2, 0.9])
    edits = [None, (2, 0.92), (2, 0.9269), (2, 0.9271), (2, 0.95), (6, 0.9), (6, 0.5), (1, 0.95), (0, 1.0004),
             (0, 1.0005), (3, -1e-9), (5, math.inf), (5, math.nan)]
    outcomes = set()
    for monotone in (True, False):
        header = {"family": "generic", "rows": [{}], "eps0_monotone": [monotone], "eps0": [1.0, 2.0], "n": [10.0, 20.0],
                  "delta": [1e-6, 1e-3], "shape": [1, 2, 2, 2]}
        axes = {k: np.array(header[k]) for k in ("eps0", "n", "delta")}
        for edit in edits:
            values = upper.copy()
            if edit is not None:
                values[edit[0]] = edit[1]
            table = device.DeviceTable(header, array("f", values.tolist()), array("f", [math.nan] * 8))
            try:
                checks.check_row("row", axes["eps0"], np.array(table.upper, float).reshape(2, 2, 2),
                                 np.full((2, 2, 2), np.nan), monotone, axes)
                numpy_refuses = False
            except checks.DamagedTable:
                numpy_refuses = True
            try:
                device.check_row(table, 0)
                refuses = False
            except DeviceFileError:
                refuses = True
            assert refuses == numpy_refuses, (monotone, edit)
            outcomes.add(refuses)
    assert outcomes == {True, False}


UNVOUCHED_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "shuffle_eps_device.h"
int main(int argc, char **argv) {
    static unsigned char bytes[1 << 20];
    static double work[1 << 12];
    shuffle_eps_table t;
    double eps;
    FILE *f = fopen(argv[1], "rb");
    size_t size = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    (void)argc;
    if (shuffle_eps_open(&t, bytes, size, work, sizeof work / sizeof *work) != SHUFFLE_EPS_OK) return 99;
    printf("%d ", shuffle_eps_eps(&t, NULL, 1.0, 40.0, 1e-6, &eps));
    printf("%d ", shuffle_eps_trust_bundled(&t, "generic", NULL));
    printf("%d ", shuffle_eps_trust_bundled(&t, "krr", "{\"k\":4}"));
    printf("%d ", shuffle_eps_eps(&t, NULL, 1.0, 40.0, 1e-6, &eps));
    printf("%d ", shuffle_eps_trust_bundled(&t, "krr", "{\"k\":3}"));
    printf("%d ", shuffle_eps_eps(&t, "{\"k\":4}", 1.0, 40.0, 1e-6, &eps));
    printf("%d\n", shuffle_eps_eps(&t, NULL, 1.0, 40.0, 1e-6, &eps));
    return 0;
}
"""


def test_the_c_reader_answers_only_once_the_file_is_vouched_for(build_dir: Path, files: dict[str, Path]) -> None:
    tool = _compile(build_dir / "unvouched", _write(build_dir / "unvouched.c", UNVOUCHED_MAIN),
                    C_DIR / "shuffle_eps_device.c")
    out = subprocess.run([str(tool), str(files["krr"])], capture_output=True, text=True, check=True).stdout.split()
    # untrusted; refused as generic and as k = 4 (none of its rows), then answered as k = 3 (and no other row)
    assert out == [str(UNTRUSTED), str(MECHANISM), str(MECHANISM), str(UNTRUSTED), "0", str(ROW), "0"]


def _sodium_tool(build_dir: Path) -> Path:
    """shuffle_eps_query compiled with -DSHUFFLE_EPS_SODIUM and libsodium; skipped where the
    library (Debian: libsodium-dev) is not installed."""
    cc = shutil.which("cc")
    if cc is None or not any(Path(d, "sodium.h").is_file() for d in ("/usr/include", "/usr/local/include")):
        pytest.skip("libsodium is not installed (Debian: apt-get install libsodium-dev): signatures not tested")
    out = build_dir / "shuffle_eps_query_sodium"
    done = subprocess.run([cc, *CFLAGS, "-DSHUFFLE_EPS_SODIUM", f"-I{C_DIR}", "-o", str(out),
                           str(C_DIR / "shuffle_eps_query.c"), str(C_DIR / "shuffle_eps_device.c"), "-lsodium", "-lm"],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"cc failed:\n{done.stderr}"
    return out


def _key_pair(directory: Path, name: str) -> tuple[Path, str]:
    """An Ed25519 private key (PEM file) and its raw public key in hex."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    path = directory / f"{name}.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    (directory / f"{name}.pub.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))  # for $SHUFFLE_EPS_TRUSTED_KEYS
    return path, raw.hex()


def test_the_c_reader_checks_ed25519_signatures_with_libsodium(build_dir: Path, query_tool: Path,
                                                               files: dict[str, Path], tmp_path: Path) -> None:
    tool = _sodium_tool(build_dir)
    ours, ours_hex = _key_pair(tmp_path, "ours")
    theirs, theirs_hex = _key_pair(tmp_path, "theirs")
    device = tmp_path / "krr.dev"
    shutil.copy(files["krr"], device)
    query = [str(device), "krr", "1.0", "40", "1e-6"]

    def run(tool_path: Path, *trust_args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(tool_path), *trust_args, *query], capture_output=True, text=True)

    bundled = run(query_tool, "--bundled")
    assert bundled.returncode == 0
    assert run(tool, "--key", ours_hex).returncode == SIGNATURE  # unsigned (no .sig): stripped
    signing.sign(device, ours)
    signed = run(tool, "--key", ours_hex)
    assert signed.returncode == 0 and float(signed.stdout) == float(bundled.stdout)
    assert run(tool, "--key", theirs_hex).returncode == SIGNATURE  # signed by a key the device does not trust
    assert run(query_tool, "--key", ours_hex).returncode == NO_SODIUM  # a build without libsodium cannot check
    signing.sign(device, theirs)
    assert run(tool, "--key", ours_hex).returncode == SIGNATURE
    signing.sign(device, ours)
    other = tmp_path / "generic.dev"  # a signature moved onto another file: it names other content
    shutil.copy(files["generic"], other)
    shutil.copy(trust.signature_path(device), trust.signature_path(other))
    moved = subprocess.run([str(tool), "--key", ours_hex, str(other), "generic", "1.0", "40", "1e-6"],
                           capture_output=True, text=True)
    assert moved.returncode == SIGNATURE and "does not verify" in moved.stderr



SHIPPED = Path(__file__).resolve().parents[3] / "data" / "default.zarr"
POINT = (1.0, 1e4, 1e-6)  # on the shipped grid: the files store the table's values there, rounded up to float32


@pytest.fixture(scope="module")
def hr_signed(build_dir: Path) -> dict[str, Any]:
    """The shipped table's hr row at eps0 1, n 1e3..1e5, delta 1e-6, exported and signed (``FILE.sig``):
    the file, the private key and the public key (PEM file beside it, and raw hex)."""
    keys = build_dir / "keys"
    keys.mkdir(exist_ok=True)
    private, public_hex = _key_pair(keys, "signer")
    device = build_dir / "hr.dev"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(trust.ENV_CACHE, str(build_dir / "cache"))
        export_device(device, "hr", {}, str(SHIPPED), eps0=[POINT[0]], n_min=1e3, n_max=1e5, delta=[POINT[2]])
        signing.sign(device, private)
    return {"file": device, "private": private, "public": keys / "signer.pub.pem", "hex": public_hex}


def _shipped(mechanism: str) -> float:
    return float(lookup.eps(mechanism, eps0=POINT[0], n=POINT[1], delta=POINT[2], table=str(SHIPPED), live=False,
                            max_slack=None).value)


def test_a_file_signed_for_another_mechanism_is_refused_by_both(build_dir: Path, hr_signed: dict[str, Any],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: an hr file with its genuine signature, presented to a generic deployment, was answered
    as certified by both readers: hr's eps, below generic's certified eps by generic - hr (0.0233 here).
    The family and parameters a deployment expects are given to the reader and bound by the signature."""
    tool = _sodium_tool(build_dir)
    as_hr = float(round_float32(np.array([_shipped("hr")]), up=True)[0])  # what the hr file stores at POINT
    assert _shipped("generic") - as_hr > 0.02  # what a generic answer from it would be short by

    def c_answer(family: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(tool), "--key", hr_signed["hex"], str(hr_signed["file"]), family, "{}",
                               *map(repr, POINT)], capture_output=True, text=True)

    assert float(c_answer("hr").stdout) == as_hr
    swapped = c_answer("generic")
    assert swapped.returncode == MECHANISM and "another mechanism" in swapped.stderr
    monkeypatch.setenv(trust.ENV_KEYS, str(hr_signed["public"]))
    assert read_device(str(hr_signed["file"]), expect=("hr", {})).eps({}, *POINT) == as_hr
    with pytest.raises(DeviceFileError, match="another mechanism"):
        read_device(str(hr_signed["file"]), expect=("generic", {}))
    with pytest.raises(ValueError):  # lookup answers generic from generic rows only
        lookup.eps("generic", eps0=POINT[0], n=POINT[1], delta=POINT[2], table=str(hr_signed["file"]), live=False)
    _binds_the_family(hr_signed)


def _binds_the_family(hr_signed: dict[str, Any]) -> None:
    """The signature itself binds the family: it verifies for hr's message, not generic's (even a
    reader that forgot to compare families could not take it as generic)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    key = load_pem_public_key(hr_signed["public"].read_bytes())
    signature = bytes.fromhex(json.loads(trust.signature_path(hr_signed["file"]).read_text())["signature"])
    hr = read_device(str(hr_signed["file"]), verified=False)
    key.verify(signature, hr.signed_message())
    with pytest.raises(InvalidSignature):
        key.verify(signature, device.signed_message("generic", device.member_text(hr.text, "rows"),
                                                    hr.header["sha256"]))


def test_a_signature_of_the_digest_alone_is_refused_by_both(build_dir: Path, hr_signed: dict[str, Any],
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Signatures made before issue 43 signed "shuffle-eps table digest " and the file's SHA-256 alone,
    binding no mechanism: by the trusted key, they are refused (the file must be signed again)."""
    from cryptography.hazmat.primitives import serialization

    tool = _sodium_tool(build_dir)
    device = tmp_path / "hr.dev"
    shutil.copy(hr_signed["file"], device)
    key = serialization.load_pem_private_key(hr_signed["private"].read_bytes(), password=None)
    digest = signing.table_digest(device)
    trust.signature_path(device).write_text(json.dumps({
        "public_key": hr_signed["hex"], "signature": key.sign(b"shuffle-eps table digest " + digest.encode()).hex(),
        "digest": digest}))
    done = subprocess.run([str(tool), "--key", hr_signed["hex"], str(device), "hr", *map(repr, POINT)],
                          capture_output=True, text=True)
    assert done.returncode == SIGNATURE, done.stderr
    monkeypatch.setenv(trust.ENV_KEYS, str(hr_signed["public"]))
    with pytest.raises(DeviceFileError, match="does not verify"):
        read_device(str(device))


def _within_200_mb(args: list[str]) -> tuple[int, float]:
    """(exit status, seconds) of a command run with 200 MB of address space (more: its allocation fails)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (200 << 20, 200 << 20))

    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, preexec_fn=limit)
    return done.returncode, time.perf_counter() - start


@pytest.mark.parametrize("name", sorted(DEVICE_BOMBS))
def test_device_bombs_are_refused_by_the_c_tool_from_their_header(query_tool: Path, tmp_path: Path,
                                                                  name: str) -> None:
    """A sparse 1 GiB file was read whole before its magic was checked (1 GiB resident)."""
    path = DEVICE_BOMBS[name](tmp_path / "bomb.dev")
    status, seconds = _within_200_mb([str(query_tool), "--bundled", str(path), "krr", "1", "40", "1e-6"])
    assert status in FILE_REFUSALS and seconds < 1.0


def test_a_sparse_gigabyte_signature_is_refused_by_the_c_tool(build_dir: Path, files: dict[str, Path],
                                                             tmp_path: Path) -> None:
    tool = _sodium_tool(build_dir)
    device = tmp_path / "krr.dev"
    shutil.copy(files["krr"], device)
    sparse(trust.signature_path(device), 1 << 30)
    status, seconds = _within_200_mb([str(tool), "--key", "0" * 64, str(device), "krr", "1", "40", "1e-6"])
    assert status == SIGNATURE and seconds < 1.0


@pytest.mark.parametrize("second", [{"k": 3}, {"k": 3.0}])
def test_a_duplicated_row_is_refused_by_every_reader(query_tool: Path, files: dict[str, Path], tmp_path: Path,
                                                     second: dict[str, Any]) -> None:
    """Issue 55: a file naming the same parameters twice was answered from the first row by
    ``lookup.device.files`` and the C reader and from the last by ``lookup.open_table``: all refuse it."""
    header, upper, lower = _parts(files["two"])
    header["rows"] = [{"k": 3}, second]
    path = _write(tmp_path / "twice.dev", encode(header, upper.astype("<f4").tobytes() + lower.astype("<f4").tobytes()))
    assert _refused_by_both(query_tool, path) == DUPLICATE_ROW
    with pytest.raises(lookup.TableError, match="same parameters twice"):
        lookup.open_table(path, verified=False)
