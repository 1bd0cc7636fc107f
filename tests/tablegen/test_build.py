"""The table build: equal to the slice engine cell by cell and certified against exact sums,
resumable after SIGKILL, verified by recomputing slices, atomic, and working against a real dask
scheduler with two worker processes."""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from dask_processes import dask_cluster
from shuffle_reference import exact_delta, krr_lower_laws, krr_upper_law

from tablegen import ENGINE_VERSION, dryrun, store
from tablegen.build import build, compute_slice, task
from tablegen.dryrun import _latin, _strata, dry_run
from tablegen.engine.dense import eps_slice, lower_slice
from tablegen.spec import Spec, load_spec
from tablegen.verify import verify

SPEC = """
title = "test table"
[axes]
eps0 = [1.0, 2.0]
n = [50, 200, 800]
delta = [1e-6, 1e-3]
[settings]
resolution = 4
lower_resolution = 6
lower_every = [1, 2]
[[mechanism]]
family = "krr"
k = 3
[[mechanism]]
family = "generic"
"""


@pytest.fixture()
def spec_path(tmp_path: Path) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    return path


def values(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with xr.open_zarr(path) as ds:
        return ds["eps"].values, ds["eps_lower"].values


def quiet(_: str) -> None:
    pass


def test_build_equals_the_slice_engine_cell_by_cell(spec_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.zarr"
    report = build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    assert (report.computed, report.skipped) == (12, 0)
    eps, low = values(out)
    with xr.open_zarr(out) as ds:
        assert list(ds["eps"].dims) == ["mechanism", "eps0", "n", "delta"]
        assert list(ds["mechanism"].values) == ["krr k=3", "generic"]
        for key in ("title", "history", "references", "date_created", "spec", "spec_sha256", "engine_version"):
            assert ds.attrs[key]
        assert ds["eps"].attrs["long_name"] and ds["eps"].attrs["units"] == "1"
        assert json.loads(ds.attrs["certification"])["method"] == "slice"
    ns, deltas = [50, 200, 800], [1e-6, 1e-3]
    for (r, family, params), (e, eps0) in [(row, e0) for row in [(0, "krr", {"k": 3}), (1, "generic", {})]
                                           for e0 in enumerate([1.0, 2.0])]:
        upper = eps_slice(family, eps0=eps0, ns=ns, deltas=deltas, resolution=4, **params)
        lower = lower_slice(family, eps0=eps0, ns=ns[::2], deltas=deltas, upper=upper[::2], resolution=6, **params)
        # stored compact: the engine's value rounded up (lower bounds down) to 12 mantissa bits
        np.testing.assert_array_equal(eps[r, e], store.round_float32(upper, True, store.MANTISSA_BITS))
        np.testing.assert_array_equal(low[r, e, ::2], store.round_float32(lower, False, store.MANTISSA_BITS))
        assert np.all(eps[r, e] >= upper) and np.all(eps[r, e] < upper * (1 + 2.0 ** -12))
    assert eps.dtype == low.dtype == np.float32 and not np.any(eps.view(np.uint32) & 0x7FF)
    assert np.isnan(low[:, :, 1]).all() and not np.isnan(low[:, :, ::2]).any()  # lower_every = [1, 2]
    # certified: the exact delta of k-RR's optimal decomposition at the stored eps meets the target
    # (exact sums over the multinomial counts of its atoms: n <= 200 keeps them small)
    for (e, eps0), (j, n), (d, delta) in itertools.product(enumerate([1.0, 2.0]), enumerate(ns[:2]), enumerate(deltas)):
        assert exact_delta(*krr_upper_law(eps0, float(eps[0, e, j, d]), 3), n) <= delta
    assert verify(out, sample=4) == []
    assert not store.staging_path(out).exists()
    # the same command again: nothing to do
    again = build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    assert (again.computed, again.skipped) == (0, 12)


def test_verify_catches_tampering_and_corrupted_chunks(spec_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.zarr"
    build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    chunk = next(p for p in sorted((out / "eps").rglob("*")) if p.is_file() and p.name != "zarr.json")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    problems = verify(out)
    assert any("SHA-256 does not match" in p and "eps/c" in p for p in problems)
    store.write_manifest(out)  # a manifest rewritten to match: the chunk checksum still fails
    problems = verify(out)
    assert problems and all("chunk" in p for p in problems)
    shutil.rmtree(out / "eps_lower")
    assert any("missing" in p for p in verify(out))
    assert verify(tmp_path / "absent.zarr") == [f"{tmp_path / 'absent.zarr'}: no such table"]


def test_verify_recomputes_slices_and_catches_a_damaged_cell(spec_path: Path, tmp_path: Path) -> None:
    import zarr

    out = tmp_path / "t.zarr"
    build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    assert verify(out, sample=4) == []  # every slice: the engine's values rounded as stored
    eps = zarr.open_array(out / "eps", mode="r+")
    eps[0, 1, 2, 0] = eps[0, 1, 2, 0] * np.float32(1.03)  # re-encoded through the store's codecs
    store.write_manifest(out)  # checksums match again: only the recomputation can see it
    problems = verify(out, sample=4)
    assert len(problems) == 1 and "krr k=3 eps0=2 n=800 delta=1e-06: stored eps=" in problems[0]


def test_verify_refuses_to_recompute_a_table_of_the_removed_per_curve_engine(spec_path: Path,
                                                                             tmp_path: Path) -> None:
    out = tmp_path / "t.zarr"
    build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    meta = json.loads((out / "zarr.json").read_text())
    certification = json.loads(meta["attributes"]["certification"])
    meta["attributes"]["certification"] = json.dumps({**certification, "method": "curve"})
    (out / "zarr.json").write_text(json.dumps(meta))
    store.write_manifest(out)
    assert verify(out) == []  # checksums and invariants still verified
    problems = verify(out, sample=1)
    assert len(problems) == 1 and "per-curve engine" in problems[0] and "rebuild" in problems[0]


def test_sigkill_then_resume_gives_the_identical_table(spec_path: Path, tmp_path: Path) -> None:
    reference = tmp_path / "ref.zarr"
    build(load_spec(spec_path), reference, workers=0, progress=False, log=quiet)
    slow = spec_path.read_text().replace("resolution = 4\n", "resolution = 30\n")
    spec_path.write_text(slow)
    build(load_spec(spec_path), reference, workers=0, progress=False, log=quiet, fresh=True)
    out = tmp_path / "t.zarr"
    command = [sys.executable, "-m", "tablegen.cli", "build", "--spec", str(spec_path), "--out", str(out),
               "--workers", "0", "--no-progress"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    staging = store.staging_path(out)
    deadline = time.time() + 60
    while not store.finished(staging, 3) and time.time() < deadline and first.poll() is None:
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    first.wait()
    finished = len(store.finished(staging, 3))
    assert 1 <= finished < 4, "the build was not caught mid-way"
    assert not out.exists()
    second = subprocess.run(command, capture_output=True, text=True, check=True)
    assert f"4 slices (12 curves): {finished} already finished, {4 - finished} to compute" in second.stdout
    assert f"computed {12 - 3 * finished} curves, skipped {3 * finished}" in second.stdout
    for got, want in zip(values(out), values(reference), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_slice_begun_with_a_marker_per_curve_is_recomputed_whole(spec_path: Path, tmp_path: Path) -> None:
    """Staging stores begun before slices were the unit have a marker per curve: a slice with all
    of them counts as finished, but no marker of theirs holds the HMAC of the values (issue 43),
    so every slice is recomputed, to the values of a fresh build."""
    import zarr

    spec = load_spec(spec_path)
    reference = tmp_path / "ref.zarr"
    build(spec, reference, workers=0, progress=False, log=quiet)
    eps, low = values(reference)
    out = tmp_path / "t.zarr"
    staging = store.open_staging(out, {"spec_sha256": spec.digest(), "engine_version": ENGINE_VERSION}, spec.shape)
    for r, e, j in itertools.product(range(2), range(2), range(3)):
        if (r, e, j) != (1, 0, 1):
            for name, stored in (("eps", eps), ("eps_lower", low)):
                zarr.open_array(staging / store.CELLS / name, mode="r+")[r, e, j] = stored[r, e, j]
            (staging / "done" / f"{r}_{e}").mkdir(exist_ok=True)
            (staging / "done" / f"{r}_{e}" / str(j)).touch()
    assert store.finished(staging, 3) == {(0, 0), (0, 1), (1, 1)}
    lines: list[str] = []
    assert build(spec, out, workers=0, progress=False, log=lines.append).computed == 12
    assert "3 staged slices not made here: recomputed" in " ".join(lines)
    for got, want in zip(values(out), (eps, low), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_build_says_so_and_exits_non_zero(spec_path: Path, tmp_path: Path, signum: int) -> None:
    """On a local dask cluster, where the event loop used to swallow the signal (exit status 0).
    Forty-four slices of ten n (about 0.3 s each here): the signal, sent once the first slice is
    kept, must reach the build before it ends even on a loaded machine (twelve once finished
    first in a full test run, with engine 4's faster lower slices; twenty-two once did in CI)."""
    n_axis = "n = [50, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600]"
    eps0_axis = "eps0 = [" + ", ".join(f"{0.5 + 0.125 * i:g}" for i in range(22)) + "]"
    spec_path.write_text(spec_path.read_text().replace("resolution = 4\n", "resolution = 30\n")
                         .replace("n = [50, 200, 800]", n_axis).replace("eps0 = [1.0, 2.0]", eps0_axis))
    out = tmp_path / "t.zarr"
    command = [sys.executable, "-m", "tablegen.cli", "build", "--spec", str(spec_path), "--out", str(out),
               "--workers", "1", "--no-progress"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    staging = store.staging_path(out)
    deadline = time.time() + 120
    while not store.finished(staging, 10) and time.time() < deadline and first.poll() is None:
        time.sleep(0.01)
    first.send_signal(signum)
    _, err = first.communicate(timeout=60)
    finished = len(store.finished(staging, 10))
    assert first.returncode == 128 + signum, err
    assert f"build stopped by {signum.name}: {finished} of 44 slices are kept in {staging}: the same command " \
        "resumes" in err
    assert finished < 44 and not out.exists()
    assert build(load_spec(spec_path), out, workers=0, progress=False, log=quiet).skipped == 10 * finished


def test_publish_replaces_the_old_table_atomically(spec_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.zarr"
    build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    old = values(out)[0]
    spec_path.write_text(SPEC.replace("eps0 = [1.0, 2.0]", "eps0 = [1.0, 3.0]"))
    build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    new = values(out)[0]
    np.testing.assert_array_equal(new[:, 0], old[:, 0])
    assert np.all(new[:, 1] >= old[:, 1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml", "t.zarr"]  # nothing left behind
    assert verify(out) == []


def test_unfinished_build_of_another_spec_is_refused(spec_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.zarr"
    store.open_staging(out, {"spec_sha256": "0" * 64, "engine_version": "1"}, (1, 1, 1, 1))
    with pytest.raises(store.StoreError, match="another spec"):
        build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    assert build(load_spec(spec_path), out, workers=0, progress=False, log=quiet, fresh=True).computed == 12


def test_local_cluster_and_real_scheduler_give_the_same_table(spec_path: Path, tmp_path: Path) -> None:
    build(load_spec(spec_path), tmp_path / "serial.zarr", workers=0, progress=False, log=quiet)
    build(load_spec(spec_path), tmp_path / "local.zarr", workers=1, progress=False, log=quiet)
    with dask_cluster(tmp_path / "cluster") as cluster:
        for name in ("a", "b"):
            cluster.start_worker(name)
        cluster.wait_for({"a", "b"})
        report = build(load_spec(spec_path), tmp_path / "remote.zarr", scheduler=cluster.address, progress=False,
                       log=quiet)
        assert report.computed == 12
    serial = values(tmp_path / "serial.zarr")
    for name in ("local.zarr", "remote.zarr"):
        for got, want in zip(values(tmp_path / name), serial, strict=True):
            np.testing.assert_array_equal(got, want)


def test_never_builds_over_a_directory_that_is_not_a_table(spec_path: Path, tmp_path: Path) -> None:
    precious = tmp_path / "results"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(store.StoreError, match="not a published table"):
        build(load_spec(spec_path), precious, workers=0, progress=False, log=quiet)
    assert (precious / "thesis.tex").read_text() == "years of work"
    assert not store.staging_path(precious).exists()


def test_publish_clears_leftovers_of_an_interrupted_publish(spec_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.zarr"
    (tmp_path / "t.zarr.publish-999999").mkdir()
    (tmp_path / "t.zarr.old-999999").mkdir()
    build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml", "t.zarr"]


def test_a_marker_without_values_is_recomputed_not_published(spec_path: Path, tmp_path: Path) -> None:
    spec = load_spec(spec_path)
    out = tmp_path / "t.zarr"
    staging = store.open_staging(out, {"spec_sha256": spec.digest(), "engine_version": ENGINE_VERSION}, spec.shape)
    (staging / "done" / "0_0").mkdir()
    (staging / "done" / "0_0" / "all").touch()  # marker, but the chunk never reached the disk
    # no HMAC of the values it should hold: the marker of that (row, eps0) is dropped at the resume,
    # its slice of 3 curves recomputed with the others in the same build
    lines: list[str] = []
    assert build(spec, out, workers=0, progress=False, log=lines.append).computed == 12
    assert "1 staged slices not made here: recomputed" in " ".join(lines)
    assert np.isfinite(values(out)[0]).all()


def test_dry_run_sample_covers_every_stratum_and_reports_a_range() -> None:
    import random

    root = Path(__file__).parents[2] / "workflows"
    full = load_spec(root / "full.toml")
    cells = _latin(full.shape[:2], 8, random.Random(3))
    for axis, size in enumerate(full.shape[:2]):  # a Latin hypercube: each eighth of each axis once
        ranked = sorted(c[axis] for c in cells)
        assert all(o * size // 8 <= ranked[o] <= (o + 1) * size // 8 for o in range(8)), (axis, ranked)
    figures = dry_run(load_spec(root / "smoke.toml"), None, sample=3, cores=2, log=lambda _: None)
    assert 1 <= figures["sampled_slices"] <= 3 and figures["slices_to_compute"] == figures["slices"] == 3 * 2
    assert figures["curves"] == 3 * 2 * 2
    assert figures["core_hours_low"] <= figures["core_hours"] <= figures["core_hours_high"]
    assert 0 < figures["seconds_min"] <= figures["seconds_per_slice"] <= figures["seconds_max"]
    # the sizes: a float64 staging chunk compressed, a published float32 one smaller still; the wall
    # time at least the slowest slice (the critical path) plus the merge; the client holds a row
    assert 0 < figures["published_bytes"] < figures["staging_bytes"] < 2 * figures["raw_bytes"]
    assert figures["wall_hours"] * 3600 >= figures["seconds_max"] + figures["merge_seconds"] > figures["seconds_max"]
    assert figures["row_bytes"] == 4 * 2 * 2 * 2 and figures["client_bytes"] >= figures["row_bytes"]
    assert figures["slowest_slice"].endswith("(2 curves)") and not figures["slowest_censored"]


def test_dry_run_counts_a_slice_stopped_at_its_budget_at_its_time_so_far(spec_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice still running at the budget counts at its time so far (flagged as a lower bound)
    beside one that finished (the pool's timings replaced by fixed ones, so that exactly one
    finishes on any machine; the pool's own stop at the budget: the test below)."""
    def timings(spec: Spec, picks: list[tuple[int, int]], processes: int, budget: float) -> Iterator[Any]:
        yield picks[0], 0.1, compute_slice(task(spec, *picks[0]))
        yield picks[1], budget, None

    monkeypatch.setattr(dryrun, "_time_in_pool", timings)
    lines: list[str] = []
    figures = dry_run(load_spec(spec_path), None, sample=2, cores=1, log=lines.append, budget=0.3, processes=1)
    assert figures["censored_slices"] == 1 and figures["slowest_censored"] and figures["seconds_max"] == 0.3
    assert figures["staging_bytes"] > 0 and figures["core_hours_low"] < figures["core_hours_high"]
    assert any(line.startswith("  timed ") and ": >= 0.30 s" in line for line in lines)
    assert any("1 stopped at the budget" in line for line in lines)


def test_a_dry_run_where_no_slice_finishes_estimates_nothing_and_names_budget(spec_path: Path,
                                                                              tmp_path: Path) -> None:
    """Issue 48: with no sampled slice finished within --budget (a short one, or a loaded machine),
    the dry run printed sizes of 0.0 MB and an estimate made of the budget alone; it now says what
    it could not measure and how to (a larger --budget), exit status 1."""
    spec_path.write_text(spec_path.read_text().replace("resolution = 4\n", "resolution = 1000\n"))
    command = [sys.executable, "-m", "tablegen.cli", "build", "--spec", str(spec_path), "--out", str(tmp_path / "t"),
               "--dry-run", "--sample", "2", "--workers", "1", "--budget", "0.05"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "0.0 MB" not in result.stdout + result.stderr and "core-hours" not in result.stdout
    assert result.stderr.startswith("error: no sampled slice finished within --budget 0.05 s (")
    assert "cannot be measured" in result.stderr and "a larger --budget, e.g. --budget 90" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob("t*"))


def test_dry_run_samples_the_slices_with_lower_bounds_apart(tmp_path: Path) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.replace("eps0 = [1.0, 2.0]", "eps0 = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]")
                    .replace("lower_every = [1, 2]", "lower_every = [4, 2]"))
    spec = load_spec(path)
    plain, lower = _strata(spec, set(), sample=4, seed=1)
    assert plain[0] == 2 * 6 and lower[0] == 2 * 2  # rows x eps0 without / with lower bounds
    assert {e for _, e in plain[1]} <= {1, 2, 3, 5, 6, 7} and len(plain[1]) <= 3
    assert len(lower[1]) == 1 and lower[1][0][1] in (0, 4)
    done = {(r, e) for r in range(2) for e in (0, 4)}  # every lower slice finished
    assert [count for count, _ in _strata(spec, done, sample=4, seed=1)] == [12]
    # one slice timed per stratum: no spread to go by, so each counts its own mean as its standard
    # error (sqrt(a^2 + b^2) >= (a + b) / sqrt(2)), never a range of zero width
    figures = dry_run(spec, None, sample=2, cores=1, log=quiet)
    assert figures["sampled_slices"] == 2 and figures["core_hours_high"] >= 2.4 * figures["core_hours"] > 0


def test_lower_bounds_are_the_lower_slice_and_proved_by_exact_sums(tmp_path: Path) -> None:
    """The lower bounds of the wanted curves are the lower slice's below the stored eps (some
    positive; each one proved: a Theorem 5 pair's exact delta exceeds the target there), and
    verify recomputes them."""
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.replace("n = [50, 200, 800]", "n = [800, 3000, 20000]").replace(
        "lower_every = [1, 2]", "lower_every = [1, 1]").replace("lower_resolution = 6", "lower_resolution = 15"))
    spec = load_spec(path)
    out = tmp_path / "t.zarr"
    build(spec, out, workers=0, progress=False, log=quiet)
    eps, low = values(out)
    ns, deltas = [800, 3000, 20000], [1e-6, 1e-3]
    upper = eps_slice("krr", eps0=2.0, ns=ns, deltas=deltas, resolution=4, k=3)
    direct = lower_slice("krr", eps0=2.0, ns=ns, deltas=deltas, upper=upper, resolution=15, k=3)
    np.testing.assert_array_equal(low[0, 1], store.round_float32(direct, False, store.MANTISSA_BITS))
    assert (low <= eps).all() and (low > 0).sum() >= 12
    for (e, eps0), (d, delta) in itertools.product(enumerate([1.0, 2.0]), enumerate(deltas)):
        if low[0, e, 0, d] > 0:  # n = 800: exact sums are cheap
            assert max(exact_delta(*law, 800) for law in krr_lower_laws(eps0, float(low[0, e, 0, d]), 3)) > delta
    assert verify(out, sample=3) == []


def test_without_lower_every_no_lower_bounds_are_computed(tmp_path: Path) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.replace("lower_every = [1, 2]\n", ""))
    out = tmp_path / "t.zarr"
    build(load_spec(path), out, workers=0, progress=False, log=quiet)
    eps, low = values(out)
    assert np.isfinite(eps).all() and np.isnan(low).all()
    assert verify(out, sample=1) == []


def test_sign_key_on_a_fresh_build_signs_the_digest_it_published(spec_path: Path, tmp_path: Path) -> None:
    """The publish signs the new table (store._publish_with, lookup.store.signing.sign) with the digest of
    the manifest it wrote, and the signature verifies under the key's public half."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from lookup.store.manifest import read_manifest
    from lookup.trust import origin as trust

    private = Ed25519PrivateKey.generate()
    key = tmp_path / "key.pem"
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    out = tmp_path / "t.zarr"
    assert build(load_spec(spec_path), out, workers=0, progress=False, log=quiet, sign_key=key).computed == 12
    signed = json.loads(trust.signature_path(out).read_text())
    assert signed["digest"] == trust.listing_digest(read_manifest(out))
    private.public_key().verify(bytes.fromhex(signed["signature"]), trust.SIGNED + signed["digest"].encode())


def test_sign_key_on_an_up_to_date_table_signs_only_what_this_machine_vouches_for(spec_path: Path,
                                                                                  tmp_path: Path) -> None:
    """Issue 37 review (N2): `tablegen build --sign-key` on an up-to-date table signed whatever was
    at --out; a forged copy with the same spec header (values lowered, manifest rewritten) would
    have been signed with the operator's key.  The genuine table built here is signed."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from lookup.store.manifest import read_manifest
    from lookup.trust import origin as trust

    key = tmp_path / "key.pem"
    key.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    out = tmp_path / "t.zarr"
    spec = load_spec(spec_path)
    build(spec, out, workers=0, progress=False, log=quiet)
    assert build(spec, out, workers=0, progress=False, log=quiet, sign_key=key).computed == 0  # up to date
    signed = json.loads(trust.signature_path(out).read_text())
    assert signed["digest"] == trust.listing_digest(read_manifest(out))
    with xr.open_zarr(out, consolidated=True) as ds:  # the forgery: same header, eps halved
        ds = ds.load().drop_encoding()
    ds["eps"] = ds["eps"] / 2
    store.publish(ds, out, store.CERTIFIED_ROUNDING)
    assert store.up_to_date(out, {k: ds.attrs[k] for k in ("spec_sha256", "engine_version")})
    with pytest.raises(store.StoreError, match="not shipped, built or fully verified on this machine"):
        build(spec, out, workers=0, progress=False, log=quiet, sign_key=key)
    assert not trust.signature_path(out).exists()


def test_verify_accepts_a_stored_eps_below_its_recomputation_that_the_engine_certifies(
        spec_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recomputation is this machine's ladder value, not the smallest certified eps: another
    machine's floating point can land a step higher (29 cells of the shipped default table rebuilt
    here, 2026-11-26).  Recomputed values raised by 0.5%: the genuine stored values, certified
    (``certifies``), pass; halved ones (not certified) still fail."""
    from tablegen import verify as verifier

    out = tmp_path / "t.zarr"
    build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    real = verifier.slice_values

    def higher(task: object) -> tuple[np.ndarray, np.ndarray]:
        eps, lower = real(task)
        return eps * 1.005, lower

    monkeypatch.setattr(verifier, "slice_values", higher)
    assert verify(out, sample=12) == []
    monkeypatch.setattr(verifier, "slice_values", lambda task: (real(task)[0] * 2.0, real(task)[1]))
    assert any("stored eps=" in p for p in verify(out, sample=12))


def test_verify_accepts_a_stored_lower_bound_above_the_recomputed_one_only_where_proved() -> None:
    """A stored lower bound above the recomputed one (a table of an earlier engine, whose lower
    slices searched another ladder) passes where the engine proves it there, and not where it is
    above the exact eps (k-RR k = 3, eps0 1, n 1000, delta 1e-6: exact sums decide both values)."""
    from tablegen.build import Task
    from tablegen.verify import _proved_above

    n, delta = 1000, 1e-6
    upper = eps_slice("krr", eps0=1.0, ns=[n], deltas=[delta], k=3)[0, 0]
    proved, above = 0.99 * upper, 1.05 * upper  # below and above the exact eps
    assert max(exact_delta(*law, n) for law in krr_lower_laws(1.0, proved, 3)) > delta
    assert exact_delta(*krr_upper_law(1.0, above, 3), n) <= delta  # the blanket law is exact for k-RR
    task = Task((0, 0), "krr", {"k": 3}, 1.0, (n,), [delta], (True,), 10.0, 30.0)
    want = np.array([[0.9 * upper]])
    close = np.zeros((1, 1), bool)
    assert _proved_above(task, [n], np.array([[proved]]), want, close).all()
    assert not _proved_above(task, [n], np.array([[above]]), want, close).any()
