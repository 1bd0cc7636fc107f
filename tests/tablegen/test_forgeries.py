"""Issue 43: what a forger who has read docs/trust.md could still do, each now refused or
recomputed.  Every forged value is shown wrong by an exact computation of the independent
reference (``shuffle_reference``: exact k-RR sums at small n; ``test_protocols``: the
binary-sum protocol's exact delta), never by a value the code under test printed:

1. a table declaring its own rounding (0 mantissa bits, rounded down) passed ``verify --full``;
2. a planted or edited ``OUT.staging`` was resumed, published and recorded as built here
   (``tablegen build`` and ``tablegen build-calibration``);
3. writers wrote through a link planted at their fixed temporary name (``OUT.tmp``, ...) or at
   ``OUT.lock``;
4. a private key given as ``--trusted-key`` (or in ``$SHUFFLE_EPS_TRUSTED_KEYS``) was accepted
   while the shipped table answered.
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner
from shuffle_reference import exact_delta, krr_upper_law
from test_protocols import exact_binary

import lookup
import lookup.cli.commands
import lookup.store.table
from lookup.store import signing
from lookup.store.manifest import MANIFEST, TableError, read_manifest
from lookup.trust import origin as trust
from tablegen import build as builder
from tablegen import store
from tablegen.calibration import build_calibration
from tablegen.export import export_device
from tablegen.spec import spec_from_dict
from tablegen.verify import verify

K, EPS0, N, DELTA = 4, 2.0, 20, 1e-4  # the cell each forgery is judged at: (row 0, eps0 index 1, n 0, delta 0)
CELL = (0, 1, 0, 0)
SPEC = f"""title = "k-RR k=4, issue 43"
[axes]
eps0 = [1.0, {EPS0}]
n = [{N}, 40]
delta = [{DELTA}, 1e-2]
[settings]
resolution = 4
lower_resolution = 6
lower_every = [1, 1]
[[mechanism]]
family = "krr"
k = {K}
"""


def exact_krr_delta(eps: float, eps0: float = EPS0, n: int = N) -> float:
    """The exact delta of the analysis at ``eps`` (k-RR k=4, Table 1's law, every count enumerated)."""
    return exact_delta(*krr_upper_law(eps0, eps, K), n)


@pytest.fixture()
def victim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache home (secret, records) for the victim; no trusted keys (set empty, so that
    what ``lookup eps --trusted-key`` adds to the environment is undone after the test)."""
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "victim-cache"))
    monkeypatch.setenv(trust.ENV_KEYS, "")
    monkeypatch.setattr(trust, "_REFUTED", {})
    monkeypatch.setattr(lookup.store.table, "_OPEN", {})
    return tmp_path / "victim-cache"


def spec() -> object:
    return spec_from_dict(tomllib.loads(SPEC), "issue-43")


def built(out: Path) -> Path:
    builder.build(spec(), out, workers=0, progress=False, log=lambda _: None)
    return out


def eps_values(out: Path) -> np.ndarray:
    with xr.open_zarr(out) as ds:
        return ds["eps"].values.astype(float)


# ------------------------------------------------------------------ 1. verify --full and the file's rounding


def test_verify_full_refuses_a_table_declaring_its_own_rounding(tmp_path: Path, victim: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Both variables re-stored with 0 mantissa bits rounded down, and saying so in their
    attributes: the recomputation rounded the live values that way too, with a tolerance of
    2^-0, and recorded the table as verified.  The random spot checks at open are switched off:
    on a large table they draw a few cells and miss a forged slice, and no trusted route may
    depend on them."""
    out = built(tmp_path / "forged.zarr")
    genuine = eps_values(out)[CELL]
    group = zarr.open_group(out, mode="r+")
    for name in store.VARIABLES:
        group[name][...] = store.round_float32(np.asarray(group[name][...], float), up=False, bits=0)
        group[name].attrs.update(store.quantization_attributes(up=False, bits=0))
    with warnings.catch_warnings():  # zarr: the manifest is no zarr node; consolidated metadata is not in v3 yet
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(out)
    store.write_manifest(out)
    forged = eps_values(out)[CELL]
    assert forged == 1.0 and genuine > 1.8  # eps0 2, n 20, delta 1e-4: about half of the genuine value
    assert exact_krr_delta(forged) > 100 * DELTA  # the exact delta at the forged eps: not certified
    assert exact_krr_delta(genuine) <= DELTA
    monkeypatch.setattr(trust, "spot_check", lambda *args, **kwargs: "")
    problems = verify(out, full=True)
    assert problems and "quantization" in problems[0] and "refused" in problems[0], problems
    assert trust.recorded(trust.listing_digest(read_manifest(out))) is None
    with pytest.raises(TableError, match="nothing vouches"):
        lookup.open_table(out)


# ------------------------------------------------------------------ 2. staging not made here


def test_a_staging_planted_under_another_secret_is_recomputed_not_published(tmp_path: Path, victim: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The stamp is the public spec hash and engine version: a forger who can write beside OUT
    stages every slice at 0.2 times the genuine values; the victim's build resumed it ("2 already
    finished, 0 to compute") and recorded the forgery as built here."""
    reference = eps_values(built(tmp_path / "reference.zarr"))
    out = tmp_path / "t.zarr"
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "forger-cache"))
    staging = store.open_staging(out, builder.header(spec()), spec().shape)
    for e in range(2):
        for name in store.VARIABLES:
            zarr.open_array(staging / store.CELLS / name, mode="r+")[0, e] = 0.2 * reference[0, e]
        (staging / "done" / f"0_{e}").mkdir()
        (staging / "done" / f"0_{e}" / "all").touch()
    monkeypatch.setenv(trust.ENV_CACHE, str(victim))
    lines: list[str] = []
    report = builder.build(spec(), out, workers=0, progress=False, log=lines.append)
    assert exact_krr_delta(0.2 * reference[CELL]) > 100 * DELTA  # what the forgery would have answered
    assert report.computed == 4 and any("not made here" in line for line in lines), lines
    published = eps_values(out)
    np.testing.assert_array_equal(published, reference)
    assert exact_krr_delta(published[CELL]) <= DELTA
    assert trust.recorded(trust.listing_digest(read_manifest(out))) == "built"


def test_a_slice_edited_in_a_genuine_staging_is_recomputed(tmp_path: Path, victim: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A build stopped after its first slice (eps0 2: the longest first) keeps it; that slice's
    values are then scaled by 0.2 in place.  The resume recomputes it ("1 staged slices not made
    here"), and a genuine staging still resumes without redoing its finished slices."""
    reference = eps_values(built(tmp_path / "reference.zarr"))
    out = tmp_path / "t.zarr"
    real, calls = builder.compute_slice, []

    def stop_at_second(task: builder.Task) -> builder.SliceResult:
        calls.append(task.slice)
        if len(calls) == 2:
            raise builder.SliceError("stopped by the test")
        return real(task)

    monkeypatch.setattr(builder, "compute_slice", stop_at_second)
    with pytest.raises(builder.BuildFailed):
        builder.build(spec(), out, workers=0, progress=False, log=lambda _: None)
    assert calls[0] == (0, 1)
    monkeypatch.setattr(builder, "compute_slice", real)
    eps = zarr.open_array(store.staging_path(out) / store.CELLS / "eps", mode="r+")
    eps[0, 1] = 0.2 * np.asarray(eps[0, 1])
    lines: list[str] = []
    report = builder.build(spec(), out, workers=0, progress=False, log=lines.append)
    assert exact_krr_delta(0.2 * reference[CELL]) > 100 * DELTA
    assert report.computed == 4 and "1 staged slices not made here: recomputed" in " ".join(lines), lines
    np.testing.assert_array_equal(eps_values(out), reference)

    shutil.rmtree(out)  # a genuine interrupted build: its finished slice is kept
    calls.clear()
    monkeypatch.setattr(builder, "compute_slice", stop_at_second)
    with pytest.raises(builder.BuildFailed):
        builder.build(spec(), out, workers=0, progress=False, log=lambda _: None)
    monkeypatch.setattr(builder, "compute_slice", real)
    assert builder.build(spec(), out, workers=0, progress=False, log=lambda _: None).computed == 2
    np.testing.assert_array_equal(eps_values(out), reference)


def test_a_calibration_staging_planted_under_another_secret_is_recomputed(
        tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Calibration tables get no spot check: a planted staging with p closer to 1 (less noise)
    was published and recorded as built."""
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text("[axes]\neps = [1.0]\nn = [1000]\ndelta = [1e-6]\n")
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "forger-cache"))
    build_calibration(spec_path, tmp_path / "reference.zarr")
    with xr.open_zarr(tmp_path / "reference.zarr") as ds:
        reference = ds["p"].values
    header = {key: store.root_attributes(tmp_path / "reference.zarr")[key] for key in store.STAMP}
    out = tmp_path / "p.zarr"
    staging = store.claim_staging(out, header, lambda path: None)
    forged = 1 - 0.2 * (1 - reference)
    for r in range(2):
        np.save(staging / f"{r}_0.npy", forged[r, 0])
    monkeypatch.setenv(trust.ENV_CACHE, str(victim))
    capsys.readouterr()
    result = build_calibration(spec_path, out)  # its log: standard output
    lines = capsys.readouterr().out.splitlines()
    p_forged, p_published = forged[0, 0, 0, 0], xr.open_zarr(out)["p"].values[0, 0, 0, 0]  # binary-sum
    assert exact_binary(1.0, 1000, p_forged) > 10 * 1e-6  # the exact delta at the forged p: not certified
    assert result["computed"] == 2 and any("not made here" in line for line in lines), lines
    assert exact_binary(1.0, 1000, p_published) <= 1e-6
    np.testing.assert_array_equal(xr.open_zarr(out)["p"].values, reference)


# ------------------------------------------------------------------ 3. writing through planted links


def _export(out: Path, table: Path) -> None:
    export_device(out, "krr", {"k": K}, table=lookup.open_table(table))


def write_private_key(path: Path) -> Path:
    """A new Ed25519 private key, PEM, at ``path``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return path


def _sign(out: Path, table: Path) -> None:
    signing.sign(table, write_private_key(out.parent / "key.pem"))


def _manifest(out: Path, table: Path) -> None:
    store.write_manifest(table)


def _record(out: Path, table: Path) -> None:
    trust.record_built(table, trust.listing_digest(read_manifest(table)))


# writer -> (the file it writes, given the table and the device file's path) and the temporary name it used
WRITERS = {
    "export": (_export, lambda table, out: out, lambda target: target.with_name(target.name + ".tmp")),
    "sign": (_sign, lambda table, out: trust.signature_path(table),
             lambda target: target.with_name(target.name + ".tmp")),
    "manifest": (_manifest, lambda table, out: table / MANIFEST, lambda target: target.with_name(target.name + ".tmp")),
    "trust record": (_record, lambda table, out: Path(os.environ[trust.ENV_CACHE]) / "trusted"
                     / trust.listing_digest(read_manifest(table)),
                     lambda target: target.with_name(f".{target.name}.{os.getpid()}.tmp")),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_no_writer_writes_through_a_link_planted_at_its_temporary_name(tmp_path: Path, victim: Path,
                                                                       writer: str) -> None:
    """A link planted at the fixed temporary name (``export --out OUT`` wrote through ``OUT.tmp``)
    made the writer clobber the file it points to."""
    table = built(tmp_path / "t.zarr")
    write, target_of, temporary_of = WRITERS[writer]
    target = target_of(table, tmp_path / "device.bin")
    target.parent.mkdir(parents=True, exist_ok=True)
    precious = tmp_path / "precious.txt"
    precious.write_text("years of work")
    temporary_of(target).symlink_to(precious)
    write(tmp_path / "device.bin", table)
    assert precious.read_text() == "years of work"
    assert target.is_file() and not target.is_symlink()


def test_a_build_never_writes_through_a_link_planted_at_its_lock(tmp_path: Path, victim: Path) -> None:
    """``OUT.lock`` was opened following links, truncated and written with the holder's name."""
    precious = tmp_path / "precious.txt"
    precious.write_text("years of work")
    out = tmp_path / "t.zarr"
    store.lock_path(out).symlink_to(precious)
    with pytest.raises(store.StoreError, match="symbolic link"):
        built(out)
    assert precious.read_text() == "years of work" and not out.exists()


def test_a_link_planted_at_the_publish_folder_is_removed_not_followed(tmp_path: Path, victim: Path) -> None:
    """``OUT.publish-PID`` (this process's) planted as a link to another directory: the leftover
    cleaning called ``rmtree`` on it (an OSError: no table); the publish would write into it."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    out = tmp_path / "t.zarr"
    planted = out.with_name(f"{out.name}.publish-{os.getpid()}")
    planted.symlink_to(precious)
    built(out)
    assert [p.name for p in precious.iterdir()] == ["thesis.tex"] and not os.path.lexists(planted)
    np.testing.assert_array_equal(eps_values(out), eps_values(built(tmp_path / "reference.zarr")))


# ------------------------------------------------------------------ 4. a private key as a trusted key


@pytest.fixture()
def private_key(tmp_path: Path) -> Path:
    return write_private_key(tmp_path / "signer.pem")


QUERY = ["eps", "--mechanism", "krr", "--k", "4", "--eps0", "1", "--n", "1e6", "--delta", "1e-4", "--max-slack",
         "none", "--json"]  # answered by the shipped table


def test_a_private_key_given_as_trusted_key_is_refused_at_once(victim: Path, private_key: Path) -> None:
    result = CliRunner().invoke(lookup.cli.commands.main, [*QUERY, "--trusted-key", str(private_key)])
    assert result.exit_code == 2, result.output
    assert "--trusted-key" in result.output and "private key" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_private_key_in_the_trusted_keys_variable_is_refused_at_once(victim: Path, private_key: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(trust.ENV_KEYS, str(private_key))
    result = CliRunner().invoke(lookup.cli.commands.main, QUERY)
    assert result.exit_code == 2 and f"${trust.ENV_KEYS}" in result.output and "private key" in result.output
    with pytest.raises(ValueError, match="private key"):  # the Python API too, whatever table answers
        lookup.open_table()
    calibrated = CliRunner().invoke(lookup.cli.commands.main, ["calibrate", "--mechanism", "binary-sum", "--eps", "1",
                                                      "--delta", "1e-6", "--n", "1e4"])
    assert calibrated.exit_code == 2 and "private key" in calibrated.output


def test_public_keys_are_still_accepted(victim: Path, private_key: Path, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(private_key.read_bytes(), None)
    public = tmp_path / "signer.pub.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    result = CliRunner().invoke(lookup.cli.commands.main, [*QUERY, "--trusted-key", str(public)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["certified"] is True


# ------------------------------------------------------------------ 5. issue 55: the publish folder swapped


def _swap_in_forged_folder(tmp: Path, forged_chunk: bytes) -> None:
    """The forger who can write the parent (group-writable, no sticky bit): renames the folder
    being published away and puts its own in its place (mode 0777), with every file the victim
    wrote so far and one chunk of ``eps`` replaced by its own."""
    aside = tmp.with_name(tmp.name + ".stolen")
    os.rename(tmp, aside)
    shutil.copytree(aside, tmp)
    os.chmod(tmp, 0o777)
    chunk = tmp / "eps" / "c" / "0" / "0" / "0" / "0"
    chunk.unlink()
    chunk.write_bytes(forged_chunk)


def test_a_publish_folder_swapped_before_the_manifest_is_refused(tmp_path: Path, victim: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 55: ``OUT.publish-PID`` (mode 0755 in a parent others can write) was swapped after the
    chunks were written and before the manifest read them back: the build exited 0, recorded the
    forged table as built, and ``lookup`` answered its values certified.  Now the digest is of the
    bytes written, the folder is this account's alone and written by descriptor: the swap is
    refused and nothing forged is vouched for."""
    reference = built(tmp_path / "reference.zarr")
    forged_values = xr.open_zarr(reference).load()
    forged_values["eps"] = forged_values["eps"] * 0.5
    forged = tmp_path / "forged.zarr"
    store.publish(forged_values, forged, compact_variables=store.CERTIFIED_ROUNDING)
    forged_chunk = (forged / "eps" / "c" / "0" / "0" / "0" / "0").read_bytes()
    assert exact_krr_delta(eps_values(forged)[CELL]) > DELTA  # the forged cell is below the exact eps

    original_mismatches = store.manifest_mismatches
    original_manifest = store.write_manifest

    def forger_then(step: object) -> object:
        def run(tmp: Path, *args: object, **kwargs: object) -> object:
            if not Path(tmp).with_name(Path(tmp).name + ".stolen").exists():
                _swap_in_forged_folder(Path(tmp), forged_chunk)
            return step(tmp, *args, **kwargs)
        return run

    # the first step after the rows are written: the old code's write_manifest (it read the files
    # back), the new code's comparison of the disk with the digests of the bytes written
    monkeypatch.setattr(store, "write_manifest", forger_then(original_manifest))
    monkeypatch.setattr(store, "manifest_mismatches", forger_then(original_mismatches))
    out = tmp_path / "t.zarr"
    try:
        built(out)
    except store.StoreError as err:  # refused: nothing published
        assert "nothing published" in str(err) or "failed verification" in str(err)
        assert not out.exists()
    if out.exists():  # published: nothing vouches for it
        monkeypatch.setattr(lookup.store.table, "_OPEN", {})
        with pytest.raises(TableError, match="nothing vouches for it"):
            lookup.open_table(out)
