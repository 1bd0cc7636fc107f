"""Device files over a sigma axis (format 3, ``"axis": "sigma"``: the shuffled Gaussian on bits), in both
readers (lookup.device.files and the C99 reader of lookup/device/c/): the same double on random queries,
every answer at least the engine's certified eps at the query's own (sigma, n, delta) (sigma and n are
rounded DOWN: the exact eps is non-increasing in both, docs/device-format.md), and the refusals (sigma
below the grid, an eps0 query of a sigma file and the reverse, a reader of formats 1-2, a tampered file,
values increasing with sigma, an axis outside [0.2, 50]).

The engine's file is small (3 sigma x 3 n x 2 deltas, no lower bounds); the synthetic ones carry chosen
values (``encode``) so that each invariant is tested by a value that breaks it.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_lookup_device_c import C_DIR, _compile, _key_pair, _parts

import lookup
from lookup.device import files as device
from lookup.device.files import DeviceFileError, encode, read_device
from lookup.store.table import TableError, open_table
from lookup.trust import origin as trust
from tablegen.engine import gaussian as engine
from tablegen.export import export_gaussian

DOCS = Path(__file__).resolve().parents[3] / "docs" / "device-format.md"
ROW = {"inputs": "bits"}
ROW_JSON = json.dumps(ROW)
# status codes of lookup/device/c/shuffle_eps_device.h
QUERY, N_BELOW, DELTA_BELOW, SIGMA_BELOW, AXIS_KIND = 40, 44, 45, 47, 48
FORMAT, CHECKSUM, KEY, AXIS, VALUE, MONOTONE = 14, 16, 17, 18, 30, 32


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sigma")


@pytest.fixture(scope="module")
def query_tool(build_dir: Path) -> Path:
    return _compile(build_dir / "shuffle_eps_query", C_DIR / "shuffle_eps_query.c", C_DIR / "shuffle_eps_device.c")


@pytest.fixture(autouse=True)
def cache(build_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache home where the exported file is recorded as built here (lookup.trust.origin)."""
    monkeypatch.setenv(trust.ENV_CACHE, str(build_dir / "cache"))


@pytest.fixture(scope="module")
def gauss(build_dir: Path) -> Path:
    """The engine's file: sigma 1, 2, 4; n 1000, 3162, 10000; deltas 1e-8, 1e-6, with lower bounds (9 profiles)."""
    out = build_dir / "gauss.dev"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(trust.ENV_CACHE, str(build_dir / "cache"))
        export_gaussian(out, sigma=[4, 1, 2], delta=[1e-6, 1e-8], n_min=1e3, n_max=1e4)
    return out


def synthetic(values: np.ndarray | None = None, drop: str = "", **changes: Any) -> bytes:
    """A sigma file (sigma 0.5, 1, 2; n 10, 100; deltas 1e-6, 1e-4) of ``values`` [sigma, n, delta]
    (default: decreasing along every axis), its header changed by ``changes``, the key ``drop`` left out."""
    if values is None:
        values = 0.9 / np.arange(1, 4)[:, None, None] / np.arange(1, 3)[None, :, None] / np.arange(1, 3)[None, None]
    header = {"format": 3, "axis": "sigma", "family": "gaussian", "rows": [ROW], "sigma": [0.5, 1.0, 2.0],
              "n": [10, 100], "delta": [1e-6, 1e-4], "shape": [1, 3, 2, 2], "dtype": "<f4", **changes}
    header.pop(drop, None)
    upper = np.asarray(values, "<f4").reshape(1, 3, 2, 2)
    return encode(header, upper.tobytes() + np.full_like(upper, np.nan).tobytes())


def c_query(tool: Path, path: Path, first: float, n: float, delta: float, sigma: bool = True,
            family: str = "gaussian", params: str = ROW_JSON) -> tuple[int, float | None, str]:
    """The C tool's answer (``--sigma``: the first number is a sigma), the file bundled as ``family``."""
    args = [str(tool), *(["--sigma"] if sigma else []), "--bundled", str(path), family, params, repr(first),
            repr(n), repr(delta)]
    done = subprocess.run(args, capture_output=True, text=True)
    return done.returncode, float(done.stdout) if done.returncode == 0 else None, done.stderr


def py_query(path: Path, sigma: float, n: float, delta: float) -> float | ValueError:
    try:
        return read_device(str(path), verified=False).eps_sigma(ROW, sigma, n, delta)
    except ValueError as err:  # DeviceFileError included
        return err


def test_header_names_the_sigma_axis(gauss: Path) -> None:
    h = read_device(str(gauss)).header
    assert (h["format"], h["axis"], h["family"], h["rows"]) == (3, "sigma", "gaussian", [ROW])
    assert h["sigma"] == [1.0, 2.0, 4.0] and h["n"] == [1000, 3162, 10000] and h["delta"] == [1e-8, 1e-6]
    assert "eps0" not in h and "eps0_monotone" not in h and h["shape"] == [1, 3, 3, 2]


def test_random_queries_answered_identically(query_tool: Path, gauss: Path) -> None:
    """200 queries in and around the grid: the same double from both readers, or both refuse (C with the
    status of the first rule the query breaks)."""
    h = read_device(str(gauss)).header
    rng = np.random.default_rng(3)
    answered = 0
    for _ in range(200):
        sigma = float(rng.choice(h["sigma"])) if rng.random() < 0.3 else float(rng.uniform(0.5, 6))
        n = float(rng.choice(h["n"])) if rng.random() < 0.3 else float(rng.uniform(500, 2e4))
        delta = float(rng.choice(h["delta"])) if rng.random() < 0.3 else float(10 ** rng.uniform(-9, -4))
        rc, value, err = c_query(query_tool, gauss, sigma, n, delta)
        want = py_query(gauss, sigma, n, delta)
        status = SIGMA_BELOW if sigma < 1 else N_BELOW if n < 1000 else DELTA_BELOW if delta < 1e-8 else 0
        assert rc == status, (sigma, n, delta, err)
        assert isinstance(want, ValueError) == (status != 0), (sigma, n, delta, want)
        if status == 0:
            assert value == want, (sigma, n, delta, value, want)
            answered += 1
    assert answered > 60


@pytest.mark.parametrize(("sigma", "n", "delta"), [(1.5, 5000, 1e-7), (3.0, 2000, 1e-6), (4.5, 20000, 5e-7)])
def test_answers_at_least_the_engine_value_at_the_query(gauss: Path, sigma: float, n: int, delta: float) -> None:
    """sigma and n rounded down and the delta chord can only raise eps: the file's answer is at least
    the engine's certified eps computed at the query's own point (no grid involved)."""
    got = read_device(str(gauss)).eps_sigma(ROW, sigma, n, delta)
    assert got >= engine.eps_bounds(sigma, n, delta, lower=False).upper


def test_out_of_range_queries_refused_by_both(query_tool: Path, gauss: Path) -> None:
    for args, code, word in [((0.99, 5000.0, 1e-7), SIGMA_BELOW, "sigma is below"),
                             ((1.0, 999.0, 1e-7), N_BELOW, "n is below"),
                             ((1.0, 5000.0, 9e-9), DELTA_BELOW, "delta is below"),
                             ((0.0, 5000.0, 1e-7), QUERY, "bad query"), ((math.inf, 5000.0, 1e-7), QUERY, "bad query")]:
        rc, _, err = c_query(query_tool, gauss, *args)
        assert rc == code and word in err, (args, err)
        assert isinstance(py_query(gauss, *args), ValueError), args
    assert "smallest sigma" in str(py_query(gauss, 0.99, 5000.0, 1e-7))


def test_eps0_query_of_a_sigma_file_and_the_reverse_refused(query_tool: Path, gauss: Path, tmp_path: Path) -> None:
    rc, _, err = c_query(query_tool, gauss, 2.0, 5000.0, 1e-7, sigma=False)
    assert rc == AXIS_KIND and "first axis is sigma" in err
    with pytest.raises(ValueError, match="first axis is sigma, not eps0"):
        read_device(str(gauss)).eps(ROW, 2.0, 5000.0, 1e-7)
    # an eps0 file (format 2) asked at a sigma
    header = {"format": 2, "family": "krr", "rows": [{"k": 2}], "eps0_monotone": [True], "eps0": [1.0, 2.0],
              "n": [10, 100], "delta": [1e-6], "shape": [1, 2, 2, 1], "dtype": "<f4"}
    upper = np.array([0.5, 0.2, 0.9, 0.4], "<f4")
    path = tmp_path / "krr.dev"
    path.write_bytes(encode(header, upper.tobytes() + np.full_like(upper, np.nan).tobytes()))
    assert c_query(query_tool, path, 1.0, 50.0, 1e-6, family="krr", params='{"k":2}')[0] == AXIS_KIND
    with pytest.raises(ValueError, match="first axis is eps0, not sigma"):
        read_device(str(path), verified=False).eps_sigma({"k": 2}, 1.0, 50.0, 1e-6)
    assert c_query(query_tool, path, 1.0, 50.0, 1e-6, sigma=False, family="krr", params='{"k":2}')[1] == 0.5


def test_a_reader_of_formats_1_and_2_refuses_a_sigma_file(gauss: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that knows formats 1 and 2 only (as before format 3) refuses a sigma file by its format,
    never reading its sigma axis as eps0 (that reader requires ``eps0``, which a sigma file lacks)."""
    monkeypatch.setattr(device, "FORMATS", (1, 2))
    with pytest.raises(DeviceFileError, match="unsupported format 3"):
        read_device(str(gauss), verified=False)


def _refused_by_both(tool: Path, path: Path) -> int:
    with pytest.raises(DeviceFileError):
        read_device(str(path), verified=False).eps_sigma(ROW, 1.0, 10.0, 1e-6)
    rc, _, err = c_query(tool, path, 1.0, 10.0, 1e-6)
    assert "refused" in err or "unsupported" in err, err
    return rc


@pytest.mark.parametrize(("name", "code"), [
    ("payload byte flipped", CHECKSUM), ("increasing in sigma", MONOTONE), ("negative eps", VALUE),
    ("sigma below 0.2", AXIS), ("sigma above 50", AXIS), ("axis named otherwise", KEY), ("axis missing", KEY),
    ("sigma named eps0", KEY), ("format 4", FORMAT),
])
def test_damaged_files_refused_by_both(query_tool: Path, tmp_path: Path, name: str, code: int) -> None:
    rising = np.ones((3, 2, 2)) * np.array([0.3, 0.5, 0.6])[:, None, None]  # eps up with sigma: not the exact eps
    falling = 0.9 / np.arange(1, 4)[:, None, None] * np.ones((3, 2, 2))
    negative = falling.copy()
    negative[2, 1, 1] = -0.01
    data = {
        "payload byte flipped": synthetic(),
        "increasing in sigma": synthetic(rising),
        "negative eps": synthetic(negative),
        "sigma below 0.2": synthetic(sigma=[0.1, 1.0, 2.0]),
        "sigma above 50": synthetic(sigma=[1.0, 2.0, 60.0]),
        "axis named otherwise": synthetic(axis="noise"),
        "axis missing": synthetic(drop="axis"),
        "sigma named eps0": synthetic(axis="eps0"),  # relabelled: an eps0 file without eps0, refused
        "format 4": synthetic(format=4),
    }[name]
    if name == "payload byte flipped":
        data = data[:-5] + bytes([data[-5] ^ 1]) + data[-4:]
    path = tmp_path / "damaged.dev"
    path.write_bytes(data)
    assert _refused_by_both(query_tool, path) == code


def test_values_only_a_sigma_file_allows(query_tool: Path, tmp_path: Path) -> None:
    """No eps0 cap (eps 5 at sigma 0.5 is accepted), and decreasing in sigma by more than 3% is fine."""
    values = 5.0 / np.arange(1, 4)[:, None, None] * np.ones((3, 2, 2))
    path = tmp_path / "big.dev"
    path.write_bytes(synthetic(values))
    assert py_query(path, 0.7, 50.0, 1e-6) == 5.0 == c_query(query_tool, path, 0.7, 50.0, 1e-6)[1]
    assert py_query(path, 1.0, 50.0, 1e-5) == c_query(query_tool, path, 1.0, 50.0, 1e-5)[1]


def test_lookup_answers_from_a_sigma_file_where_it_covers(gauss: Path) -> None:
    a = lookup.eps("gaussian", sigma=1.5, n=5000, delta=1e-7, table=str(gauss), live=False)
    assert a.source == "table" and a.value == read_device(str(gauss)).eps_sigma(ROW, 1.5, 5000, 1e-7)
    with pytest.raises(TableError, match="device file does not cover sigma=0.5"):
        lookup.eps("gaussian", sigma=0.5, n=5000, delta=1e-7, table=str(gauss), live=False)
    with pytest.raises(TableError, match="not a table of eps0"):
        open_table(str(gauss))
    header, upper, lower = _parts(gauss)
    assert header["axis"] == "sigma" and upper.size == lower.size == 18 and np.all((lower > 0) & (lower <= upper))


def test_the_documented_answer_is_current(gauss: Path) -> None:
    """docs/device-format.md's sigma example (its file has more n, but sigma 1.5 and n 5000 read the same
    cells: sigma 1, n 3162, deltas 1e-8 and 1e-6): the same answer, within 0.1% (the engine may move)."""
    quoted = float(re.search(r"1\.5 5000 1e-7 +# ([0-9.]+)", DOCS.read_text()).group(1))
    assert read_device(str(gauss)).eps_sigma(ROW, 1.5, 5000, 1e-7) == pytest.approx(quoted, rel=1e-3)


def test_a_signature_does_not_follow_a_sigma_file_relabelled_eps0(gauss: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The signed message needs no axis line: the digest it signs covers the header, ``axis`` included, so
    the same file relabelled as an eps0 file (its sigma axis under ``eps0``, re-sealed) is refused with
    the genuine signature beside it, while the genuine file verifies."""
    from lookup.store import signing

    private, _ = _key_pair(tmp_path, "k")
    public = tmp_path / "k.pub.pem"
    genuine = tmp_path / "g.dev"
    genuine.write_bytes(gauss.read_bytes())
    signing.sign(genuine, private)
    monkeypatch.setenv(trust.ENV_KEYS, str(public))
    assert read_device(str(genuine), expect=("gaussian", ROW)).provenance == "signed"
    header, upper, lower = _parts(gauss)
    header.update(axis="eps0", eps0=header.pop("sigma"), eps0_monotone=[True])
    relabelled = tmp_path / "r.dev"
    relabelled.write_bytes(encode(header, upper.tobytes() + lower.tobytes()))
    trust.signature_path(genuine).rename(trust.signature_path(relabelled))
    with pytest.raises(DeviceFileError, match="does not verify"):
        read_device(str(relabelled), expect=("gaussian", ROW))


def test_the_lower_bound_rounds_every_axis_up(gauss: Path) -> None:
    """sigma_lower reads the stored lower bound at sigma, n and delta rounded UP (the stored values at
    sigma 2, n 10000 and delta 1e-6, by index); on the grid its own; NaN beyond the largest sigma, n or
    delta; at or below the engine's certified eps at the query."""
    d = read_device(str(gauss))
    lows = np.asarray(d.lower, dtype=float).reshape(3, 3, 2)  # [sigma 1, 2, 4; n 1000, 3162, 10000; delta 1e-8, 1e-6]
    assert d.sigma_lower(ROW, 1.5, 5000, 1e-7) == lows[1, 2, 1] > 0
    assert d.sigma_lower(ROW, 2.0, 3162, 1e-8) == lows[1, 1, 0]
    assert all(math.isnan(d.sigma_lower(ROW, *q)) for q in [(5.0, 5000, 1e-7), (1.5, 20000, 1e-7), (1.5, 5000, 1e-5)])
    assert d.sigma_lower(ROW, 1.5, 5000, 1e-7) <= engine.eps_bounds(1.5, 5000, 1e-7).upper


def test_lookup_answers_from_the_file_within_max_slack_else_live(gauss: Path) -> None:
    """The file's slack is bounded by its own lower bound (answer / lower - 1: above 2% even on its grid,
    its values come from a coarser search), so with live computation the engine answers (certified, its
    lower bound); with max_slack=None, or without live computation, the file does, with its lower bound."""
    live = lookup.eps("gaussian", sigma=2.0, n=3162, delta=1e-6, table=str(gauss))
    stored = lookup.eps("gaussian", sigma=2.0, n=3162, delta=1e-6, table=str(gauss), max_slack=None)
    off = lookup.eps("gaussian", sigma=2.0, n=3162, delta=1e-6, table=str(gauss), live=False)
    assert live.source == "live" and stored.source == off.source == "table" and stored.value == off.value
    assert stored.lower <= live.value and live.lower <= stored.value
    assert float(stored.slack) == pytest.approx(stored.value / stored.lower - 1) and float(stored.slack) > 0.02


def test_the_shipped_sigma_file_answers_gaussian_without_live() -> None:
    """data/gaussian.sheps, pinned: with live off it answers on its grid within 5% above the engine's
    certified eps, and off it above it; its lower bound at most the engine's eps, its slack the ratio of
    the two less 1; every answer at least the engine's certified lower bound and the sum of the outputs'
    exact eps (the Gaussian mechanism at mu = 1 / (sigma sqrt n),
    arXiv:1805.06530 Theorem 8, by scipy)."""
    from scipy import stats

    from lookup.answer import gaussian as answers
    from lookup.store.table import shipped_table

    path = shipped_table(answers.SHIPPED)
    shipped = read_device(str(path))
    assert shipped.provenance == "shipped" and shipped.axis == "sigma" and tuple(shipped.shape) == (1, 33, 29, 19)
    quoted = re.search(r"default table's 19 deltas: ([0-9,]+) bytes", (DOCS.parent / "tables.md").read_text())
    assert quoted and path.stat().st_size == int(quoted.group(1).replace(",", ""))  # docs/tables.md's figure
    for sigma, n, delta, grid in [(2.0, 10**4, 1e-6, True), (1.5, 5000, 1e-7, False), (8.0, 10**6, 1e-10, True)]:
        a = lookup.eps("gaussian", sigma=sigma, n=n, delta=delta, live=False)
        b = engine.eps_bounds(sigma, n, delta)
        mu = 1 / (sigma * math.sqrt(n))
        summed = stats.norm.cdf(mu / 2 - a.value / mu) - math.exp(a.value) * stats.norm.cdf(-mu / 2 - a.value / mu)
        assert a.source == "table" and a.value >= b.lower and summed <= delta
        assert a.lower <= b.upper and float(a.slack) == pytest.approx(a.value / a.lower - 1)
        assert a.value <= b.upper * 1.05 if grid else a.value >= b.upper
