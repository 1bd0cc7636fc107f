"""Forgeries an adversary makes from the shipped table (issue 37): copies whose row chunks were
rewritten and whose manifest was rewritten to match, so every checksum and invariant holds.  Each
is refused, or answered with ``certified`` False where the caller asked for unverified answers;
never answered below the true value as certified.  Bombs are refused in well under a second and
200 MB; symlinks and paths leaving the store are refused; planted trust records and live-cache
entries are not believed."""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import lookup
import lookup.cli.commands
from lookup.answer import live
from lookup.store import signing
from lookup.store.manifest import TableError, read_manifest
from lookup.store.reader import crc32c, open_group
from lookup.trust import origin as trust
from tablegen import store
from tablegen.cli import main as tablegen_main
from tablegen.verify import verify

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "data" / "default.zarr"
KRR = ("krr", {"k": 2})  # row 1 of the shipped table


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache home: no secret, no records, no trusted keys."""
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.delenv(trust.ENV_KEYS, raising=False)
    monkeypatch.setattr(trust, "_REFUTED", {})  # refusals of this process: each test starts afresh
    return tmp_path / "cache"


def rewrite_row(out: Path, name: str, r: int, values: np.ndarray) -> None:
    """Row ``r`` of array ``name`` of the store ``out`` replaced by ``values`` (eps0 x n x delta),
    encoded as the store encodes it (transpose, blosc, crc32c); the manifest is NOT rewritten."""
    from numcodecs import Blosc

    array = open_group(out)[name]
    chunk = np.asarray(values, dtype="<f4")[None].transpose(array.order)
    data = Blosc(cname="zstd", clevel=5, shuffle=Blosc.SHUFFLE).encode(np.ascontiguousarray(chunk).tobytes())
    (out / name / "c" / str(r) / "0" / "0" / "0").write_bytes(data + crc32c(data).to_bytes(4, "little"))


def forge(tmp_path: Path, edit: Callable[[Path, Any], None], name: str = "forged.zarr") -> Path:
    """A copy of the shipped table with ``edit(out, table)`` applied and the manifest rewritten."""
    out = tmp_path / name
    shutil.copytree(SHIPPED, out)
    edit(out, lookup.open_table(SHIPPED))
    store.write_manifest(out)
    return out


def stored(table: object, name: str, r: int) -> np.ndarray:
    return np.array((table.stored_eps if name == "eps" else table.stored_lower)(r), dtype=float)


def cone(out: Path, table: object) -> None:
    """Row 1 (k-RR k=2): the smaller of the true values and 0 away from the cells spot-checked
    before issue 37 (every n decade's first cell kept): answers 0 almost everywhere."""
    eps = stored(table, "eps", 1)
    forged = np.zeros_like(eps)
    forged[:, ::50, :] = eps[:, ::50, :]
    rewrite_row(out, "eps", 1, forged)
    rewrite_row(out, "eps_lower", 1, np.full_like(eps, np.nan))


def scaled(out: Path, table: object) -> None:
    rewrite_row(out, "eps", 1, stored(table, "eps", 1) * 0.975)
    rewrite_row(out, "eps_lower", 1, stored(table, "eps_lower", 1) * 0.975)


def relabelled(out: Path, table: object) -> None:
    """The generic row (0) carrying the k-RR k=1024 row's values (far smaller)."""
    r = table.labels().index("krr k=1024")
    rewrite_row(out, "eps", 0, stored(table, "eps", r))
    rewrite_row(out, "eps_lower", 0, stored(table, "eps_lower", r))


def lower_at_upper(out: Path, table: object) -> None:
    rewrite_row(out, "eps_lower", 1, stored(table, "eps", 1))


FORGERIES = {"cone": cone, "scaled row": scaled, "relabelled row": relabelled, "forged lower bounds": lower_at_upper}


def true_eps(eps0: float, n: int, delta: float) -> float:
    """The shipped (pinned) table's certified answer for k-RR k=2: the reference."""
    return float(lookup.eps(KRR[0], eps0=eps0, n=n, delta=delta, max_slack=None, live=False, **KRR[1]).value)


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forgeries_are_refused_or_labelled_uncertified(tmp_path: Path, cache: Path, name: str) -> None:
    out = forge(tmp_path, FORGERIES[name])
    assert not store.check_manifest(out)  # every checksum matches the forgery
    with pytest.raises(TableError, match="nothing vouches for it") as refused:
        lookup.open_table(out)
    assert "tablegen verify --full" in str(refused.value) and "signed by a trusted key" in str(refused.value)
    result = CliRunner().invoke(lookup.cli.commands.main, ["eps", "--mechanism", "krr", "--k", "2", "--eps0", "1",
                                                  "--n", "1e4", "--delta", "1e-6", "--table", str(out), "--json"])
    assert result.exit_code == 3 and "nothing vouches" in result.output
    try:  # asked for explicitly: refused by the random spot checks, or answered as not certified
        table = lookup.open_table(out, verified=False)
    except TableError as err:
        assert "drawn at random" in str(err)
        return
    assert not table.certified and table.provenance == "unverified"
    result = CliRunner().invoke(lookup.cli.commands.main, ["eps", "--mechanism", "krr", "--k", "2", "--eps0", "1",
                                                  "--n", "1e4", "--delta", "1e-6", "--table", str(out), "--json",
                                                  "--unverified", "--max-slack", "none"])
    assert result.exit_code == 0 and json.loads(result.output)["certified"] is False


def test_an_untrusted_table_that_passes_every_check_is_answered_only_labelled(tmp_path: Path, cache: Path) -> None:
    """The labelled path, reached for sure (the forgeries above are usually refused by the spot
    checks first): a copy with row 1 raised 1% (certified, but nothing vouches for it) is refused by
    default and answered with "certified": false under --unverified."""
    out = forge(tmp_path, lambda o, t: rewrite_row(o, "eps", 1, raised(stored(t, "eps", 1), t.eps0)), "raised.zarr")
    args = ["eps", "--mechanism", "krr", "--k", "2", "--eps0", "1", "--n", "1e4", "--delta", "1e-6", "--table",
            str(out), "--json", "--max-slack", "none"]
    refused = CliRunner().invoke(lookup.cli.commands.main, args)
    assert refused.exit_code == 3 and "nothing vouches" in refused.output
    answered = CliRunner().invoke(lookup.cli.commands.main, [*args, "--unverified"])
    assert answered.exit_code == 0, answered.output
    answer = json.loads(answered.output)
    assert answer["certified"] is False and answer["eps"] >= true_eps(1.0, 10**4, 1e-6)
    table = lookup.open_table(out, verified=False)  # the Python API labels its table answers alike
    from_table = lookup.eps("krr", eps0=1.0, n=10**4, delta=1e-6, k=2, table=table, max_slack=None)
    assert from_table.source == "table" and from_table.certified is False
    assert lookup.answer.api.json_ready("eps", from_table)["certified"] is False
    live = lookup.eps("krr", eps0=1.0, n=10**4, delta=1e-6, k=7, table=table)  # the engine certifies it
    assert live.source in ("live", "certified estimate") and live.certified is True


def test_random_spot_checks_catch_a_cone_that_fixed_cells_missed(tmp_path: Path, cache: Path) -> None:
    out = forge(tmp_path, cone)
    for _ in range(3):  # cells are drawn anew on every check: each catches it
        problem = trust.spot_check(_only_row(_unchecked(out), 1), _engine_certifies(), seconds=0.0)
        assert "does not certify" in problem and "krr k=2" in problem


def _unchecked(path: Path) -> object:
    from lookup.store.table import _load_table, open_store

    return open_store(path, _load_table, "")


def _engine_certifies() -> Callable[..., bool]:
    from tablegen.engine import certifies

    return certifies


def test_a_forged_lower_bound_is_refuted_at_a_random_cell(tmp_path: Path, cache: Path) -> None:
    out = forge(tmp_path, lower_at_upper)
    table = _unchecked(out)
    problems = [trust.spot_check(_only_row(table, 1), _engine_certifies(), seconds=0.0) for _ in range(2)]
    assert all("lower bound is above the exact eps" in p for p in problems)


def _only_row(table: object, r: int) -> object:
    """``table`` seen through row ``r`` alone (the spot cells all drawn there)."""
    class One:
        families, params, eps0, n, delta = [table.families[r]], [table.params[r]], table.eps0, table.n, table.delta
        upper = type("S", (), {"shape": (1, *table.upper.shape[1:])})()
        stored_eps, stored_lower = staticmethod(lambda _: table.stored_eps(r)), staticmethod(
            lambda _: table.stored_lower(r))

        def labels(self) -> list[str]:
            return [table.labels()[r]]
    return One()


def test_the_shipped_path_with_other_content_is_a_foreign_table(tmp_path: Path, cache: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    out = forge(tmp_path, scaled)
    monkeypatch.setattr(lookup.store.table, "shipped_table", lambda name: out)
    monkeypatch.delenv(lookup.store.table.ENV_TABLE, raising=False)
    with pytest.raises(TableError, match="nothing vouches"):
        lookup.open_table()
    assert lookup.open_table(SHIPPED).provenance == "shipped"  # pinned by digest: the genuine one still is


def test_planted_and_edited_trust_records_are_not_believed(tmp_path: Path, cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    out = forge(tmp_path, scaled)
    digest = trust.listing_digest(read_manifest(out))
    (cache / "trusted").mkdir(parents=True)
    (cache / "trusted" / digest).write_text(json.dumps({"digest": digest, "how": "built", "mac": "0" * 64}))
    with pytest.raises(TableError, match="nothing vouches"):
        lookup.open_table(out)
    # a record made under another user's secret, copied in
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "other"))
    assert trust.record_built(out, digest)
    planted = (tmp_path / "other" / "trusted" / digest).read_text()
    monkeypatch.setenv(trust.ENV_CACHE, str(cache))
    trust.secret()  # this user's secret exists
    (cache / "trusted" / digest).write_text(planted)
    assert trust.recorded(digest) is None
    # a secret others may read is no secret: nothing recorded under it is believed
    assert trust.record_built(out, digest) and trust.recorded(digest) == "built"
    (cache / trust.SECRET).chmod(0o644)
    assert trust.recorded(digest) is None


def test_planted_live_cache_entries_are_not_served(tmp_path: Path, cache: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    point, params = {"eps0": 1.0, "n": 50, "delta": 1e-6}, {"k": 3}
    monkeypatch.setattr(live, "_MEMORY", {})
    value = live.eps_upper("krr", point, params)
    [entry] = [p for p in cache.glob("*.json")]
    record = json.loads(entry.read_text())
    record["value"] = [1e-9]  # edited: its HMAC no longer matches
    entry.write_text(json.dumps(record))
    monkeypatch.setattr(live, "_MEMORY", {})
    assert live.eps_upper("krr", point, params) == value
    record = json.loads(entry.read_text())
    record["value"] = [1e-9]
    record["mac"] = trust.mac(live._signed_text(record["key"], (1e-9,)))  # even authentic: re-certified first
    entry.write_text(json.dumps(record))
    monkeypatch.setattr(live, "_MEMORY", {})
    assert live.eps_upper("krr", point, params) == value


def raised(eps: np.ndarray, eps0: np.ndarray) -> np.ndarray:
    """``eps`` 1% larger where that stays below eps0 (a certified value is certified when raised)."""
    up = eps * 1.01
    return np.where(up < eps0[:, None, None], up, eps)


@pytest.fixture()
def keys(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """Two Ed25519 key pairs (private, public PEM files): "ours" and "theirs"."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pairs = {}
    for name in ("ours", "theirs"):
        key = Ed25519PrivateKey.generate()
        private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub.pem"
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
        pairs[name] = (private, public)
    return pairs


def test_stripped_and_foreign_signatures_are_refused_once_a_key_is_trusted(
        tmp_path: Path, cache: Path, keys: dict[str, tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch) -> None:
    out = forge(tmp_path, lambda out, table: None)  # an exact copy: pinned
    assert lookup.open_table(out).provenance == "shipped"
    custom = forge(tmp_path, lambda o, t: rewrite_row(o, "eps", 1, raised(stored(t, "eps", 1), t.eps0)),
                   "custom.zarr")  # larger values: still certified, a genuine custom table
    digest = trust.listing_digest(read_manifest(custom))
    assert trust.record_built(custom, digest) and lookup.open_table(custom).provenance == "built"
    monkeypatch.setenv(trust.ENV_KEYS, str(keys["ours"][1]))
    lookup.store.table._OPEN.clear()
    with pytest.raises(TableError, match="not signed, and trusted keys are configured"):
        lookup.open_table(custom)  # built here, but the operator wants signatures
    signing.sign(custom, keys["theirs"][0])
    with pytest.raises(TableError, match="signed by a key that is not trusted"):
        lookup.open_table(custom)
    signing.sign(custom, keys["ours"][0])
    assert lookup.open_table(custom).provenance == "signed"
    trust.signature_path(custom).unlink()  # stripped
    lookup.store.table._OPEN.clear()  # a table's provenance is established once per process
    with pytest.raises(TableError, match="not signed"):
        lookup.open_table(custom)


def test_sparse_files_planted_as_signature_record_or_cache_entry_are_not_read_whole(
        tmp_path: Path, cache: Path, keys: dict[str, tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2 GiB sparse file (no disk used) as the signature beside a table, as a trust record and as a
    live-cache entry: each was read whole (2 GiB allocated, twice over when decoded)."""
    out = forge(tmp_path, lambda o, t: rewrite_row(o, "eps", 1, raised(stored(t, "eps", 1), t.eps0)), "custom.zarr")
    digest = trust.listing_digest(read_manifest(out))
    point, params = {"eps0": 1.0, "n": 50, "delta": 1e-6}, {"k": 3}
    monkeypatch.setattr(live, "_MEMORY", {})
    value = live.eps_upper("krr", point, params)
    [entry] = list(cache.glob("*.json"))
    (cache / "trusted").mkdir(parents=True, exist_ok=True)
    for planted in (trust.signature_path(out), cache / "trusted" / digest, entry):
        with open(planted, "wb") as f:
            f.truncate(2 << 30)
    monkeypatch.setenv(trust.ENV_KEYS, str(keys["ours"][1]))

    def use() -> None:
        with pytest.raises(TableError, match="malformed"):
            lookup.open_table(out)
        assert trust.recorded(digest) is None
        monkeypatch.setattr(live, "_MEMORY", {})
        assert live.eps_upper("krr", point, params) == value  # recomputed

    seconds, peak = _bounded(use)
    assert seconds < 5.0 and peak < 200


def test_a_genuine_custom_table_built_copied_signed_and_verified(
        table_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        keys: dict[str, tuple[Path, Path]]) -> None:
    """Built here: answers; copied to a fresh cache home: refused naming the four ways; signed:
    accepted; fully verified (``tablegen verify --full``): accepted."""
    monkeypatch.delenv(trust.ENV_KEYS, raising=False)
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "builder"))
    digest = trust.listing_digest(read_manifest(table_path))
    assert trust.record_built(table_path, digest)  # what tablegen build records
    lookup.store.table._OPEN.clear()
    assert lookup.open_table(table_path).provenance == "built"
    copy = tmp_path / "copy.zarr"
    shutil.copytree(table_path, copy)
    monkeypatch.setenv(trust.ENV_CACHE, str(tmp_path / "fresh"))
    with pytest.raises(TableError) as refused:
        lookup.open_table(copy)
    for way in ("shipped with shuffle-eps", "built on this machine", "signed by a trusted key", "verify --full"):
        assert way in str(refused.value)
    signing.sign(copy, keys["ours"][0])
    monkeypatch.setenv(trust.ENV_KEYS, str(keys["ours"][1]))
    assert lookup.open_table(copy).provenance == "signed"
    monkeypatch.delenv(trust.ENV_KEYS)
    lookup.store.table._OPEN.clear()
    start = time.perf_counter()
    result = CliRunner().invoke(tablegen_main, ["verify", "--full", str(copy)])
    assert result.exit_code == 0, result.output
    assert "recorded as verified" in result.output and time.perf_counter() - start < 60
    assert lookup.open_table(copy).provenance == "verified"


def test_verify_full_records_no_eps_below_its_recomputation(table_path: Path, tmp_path: Path, cache: Path) -> None:
    """Every eps half a percent below what the engine recomputes: within the cross-machine tolerance
    of one ladder step, but on the unsafe side, so nothing here certifies it; ``verify --full``
    once recorded such a table as verified (the test table's lower bounds are all 0, so the mirror
    case of lower bounds raised cannot be built from it)."""
    import zarr

    copy = tmp_path / "lowered.zarr"
    shutil.copytree(table_path, copy)
    array = zarr.open_group(copy, mode="r+")["eps"]
    array[...] = np.asarray(array[...]) * 0.995
    store.write_manifest(copy)
    problems = verify(copy, full=True)
    assert problems and all("stored eps=" in p for p in problems), problems
    assert trust.recorded(trust.listing_digest(read_manifest(copy))) is None
    with pytest.raises(TableError, match="nothing vouches"):
        lookup.open_table(copy)


def test_verify_full_refuses_an_eps0_monotone_flag_the_mechanism_does_not_have(tmp_path: Path, cache: Path) -> None:
    """OLH with its default g (g follows eps0) is not eps0-monotone; a copy flagging it so keeps every
    stored value (the recomputation finds them equal), yet its readers would answer an eps0 between
    grid values at the grid eps0 above.  ``verify --full`` once recorded such a copy as verified."""
    import tomllib

    import zarr

    from tablegen.build import build
    from tablegen.spec import spec_from_dict

    spec = """title = "olh"\n[axes]\neps0 = [1.0, 2.0]\nn = [20, 40]\ndelta = [1e-5, 1e-3]\n[settings]
resolution = 5\nlower_resolution = 10\nlower_every = [1, 1]\n[[mechanism]]\nfamily = "olh"\n"""
    out = tmp_path / "olh.zarr"
    build(spec_from_dict(tomllib.loads(spec), "olh-test"), out, workers=0, progress=False, log=lambda _: None)
    flag = zarr.open_group(out, mode="r+")["eps0_monotone"]
    assert not flag[...].any()  # as the registry says
    flag[...] = np.ones(1, dtype=bool)
    store.write_manifest(out)
    problems = verify(out, full=True)
    assert problems and "flagged eps0-monotone" in problems[0], problems
    assert trust.recorded(trust.listing_digest(read_manifest(out))) is None


def test_verify_full_on_a_calibration_table_claims_nothing() -> None:
    """``tablegen verify --full`` on the shipped calibration table once printed "every slice
    recomputed and equal; recorded as verified here" having recomputed and recorded nothing."""
    result = CliRunner().invoke(tablegen_main, ["verify", "--full", str(ROOT / "data" / "protocols.zarr")])
    assert result.exit_code == 1 and "--sample" in result.output and "recorded as verified" not in result.output


def test_refute_refuses_the_table_at_once_and_forgets_its_record(table_path: Path, tmp_path: Path, cache: Path) -> None:
    copy = tmp_path / "refuted.zarr"
    shutil.copytree(table_path, copy)
    digest = trust.listing_digest(read_manifest(copy))
    trust.record_built(copy, digest)
    table = lookup.open_table(copy)
    with pytest.raises(TableError, match="krr k=3 eps0 1 n 40 delta 1e-07"):
        trust.refute(table, "krr k=3 eps0 1 n 40 delta 1e-07: table eps 0.1 below the engine's proved lower bound 0.2")
    assert trust.recorded(digest) is None
    with pytest.raises(TableError, match="proved lower bound"):
        lookup.open_table(copy)


def test_fallback_reader_takes_the_digest_from_the_listing_it_verified(tmp_path: Path, cache: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The zarr fallback once re-read MANIFEST.sha256 after verifying the files: a genuine
    manifest swapped in between made a forgery look pinned.  The swap happens right after the
    verified read; the digest is still the forgery's."""
    from lookup.store import reader
    from lookup.store import table as table_module

    out = forge(tmp_path, scaled)
    forged_manifest = (out / "MANIFEST.sha256").read_bytes()
    real = table_module.read_verified_listing

    def swapped(store_path: Path, attempts: int = 2) -> tuple[dict[str, bytes], dict[str, str]]:
        files, listed = real(store_path, attempts)
        shutil.copy(SHIPPED / "MANIFEST.sha256", out / "MANIFEST.sha256")
        return files, listed

    def unsupported(_: Path) -> None:
        raise reader.Unsupported("forced fallback")

    monkeypatch.setattr(reader, "open_group", unsupported)
    monkeypatch.setattr(table_module, "read_verified_listing", swapped)
    with pytest.raises(TableError, match="nothing vouches"):
        lookup.open_table(out)
    (out / "MANIFEST.sha256").write_bytes(forged_manifest)


def test_symlinks_and_paths_leaving_the_store_are_refused(tmp_path: Path, cache: Path) -> None:
    out = forge(tmp_path, lambda o, t: None)
    chunk = out / "eps" / "c" / "1" / "0" / "0" / "0"
    outside = tmp_path / "outside"
    outside.write_bytes(chunk.read_bytes())
    chunk.unlink()
    chunk.symlink_to(outside)
    store.write_manifest(out)
    lookup.store.table._OPEN.clear()
    with pytest.raises(TableError, match="symbolic link"):
        lookup.open_table(out, verified=False)
    manifest = (out / "MANIFEST.sha256").read_text()
    (out / "MANIFEST.sha256").write_text(manifest + f"{'0' * 64}  ../outside\n")
    with pytest.raises(TableError, match="leaving the store"):
        lookup.open_table(out, verified=False)


def _bounded(call: Callable[[], object]) -> tuple[float, float]:
    """(seconds, peak MB allocated) of ``call``."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        call()
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
    return seconds, peak


def blosc_bomb(out: Path, table: object) -> None:
    """Row 1's eps chunk declaring 8 GiB decompressed (its blosc header edited, 256 KB of bytes)."""
    path = out / "eps" / "c" / "1" / "0" / "0" / "0"
    data = bytearray(path.read_bytes()[:-4])
    data[4:8] = (2**32 - 1).to_bytes(4, "little")
    data = bytes(data) + bytes(256 * 1024)
    data = data[:12] + len(data).to_bytes(4, "little") + data[16:]
    path.write_bytes(data + crc32c(data).to_bytes(4, "little"))


def shape_bomb(out: Path, table: object) -> None:
    """The n axis declared 1e8 long in the consolidated metadata (no chunk written)."""
    meta = json.loads((out / "zarr.json").read_text())
    arrays = meta["consolidated_metadata"]["metadata"]
    for name, m in arrays.items():
        if "n" in m.get("dimension_names", []) or name == "n":
            i = m["dimension_names"].index("n") if m.get("dimension_names") else 0
            m["shape"][i] = 10**8
    (out / "zarr.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("bomb", [blosc_bomb, shape_bomb])
def test_bombs_are_refused_in_under_a_second_and_200_mb(tmp_path: Path, cache: Path,
                                                        bomb: Callable[[Path, object], None]) -> None:
    out = forge(tmp_path, bomb)
    lookup.store.table._OPEN.clear()

    def use() -> None:  # as every reader opens it, the row with the bomb used at once
        with pytest.raises(TableError, match="refused"):
            _unchecked(out).upper.row(1)

    seconds, peak = _bounded(use)
    assert seconds < 1.0 and peak < 200
    import xarray  # noqa: F401 - verify's imports (2.7 s) loaded before it is timed, whatever ran before
    seconds, peak = _bounded(lambda: verify(out))
    problems = verify(out)
    assert problems and "Traceback" not in problems[0] and seconds < 2.0 and peak < 200


def test_a_shape_bomb_on_the_fallback_reader_is_refused_before_decoding(tmp_path: Path, cache: Path) -> None:
    """Keys the row reader does not implement (v2 chunk keys) send a store to zarr's reader, which
    decodes eps and eps_lower whole, filling absent chunks: 200 rows declared (no chunk written)
    once allocated 1.2 GB over 7 s before the shapes were compared."""
    def v2_keys(out: Path, table: object) -> None:
        meta = json.loads((out / "zarr.json").read_text())
        for name in ("eps", "eps_lower"):
            m = meta["consolidated_metadata"]["metadata"][name]
            m["shape"][0] = 200
            m["chunk_key_encoding"] = {"name": "v2", "configuration": {"separator": "."}}
        (out / "zarr.json").write_text(json.dumps(meta))

    _refused_within_bounds(forge(tmp_path, v2_keys), "whole-array read")


def _refused_within_bounds(out: Path, message: str) -> None:
    """Opening ``out`` (unverified: past provenance, to its reading) is refused with ``message``
    in under 1 s and 200 MB."""
    lookup.store.table._OPEN.clear()

    def use() -> None:
        with pytest.raises(TableError, match=message):
            lookup.open_table(out, verified=False)

    seconds, peak = _bounded(use)
    assert seconds < 1.0 and peak < 200


def _v2_row_chunk(out: Path, codecs: list[dict[str, Any]], data: bytes) -> None:
    """eps with v2 chunk keys (zarr's reader then reads the store, lookup's row reader does not) and
    ``codecs``; its row 1 chunk, ``eps/1.0.0.0``, holds ``data``."""
    meta = json.loads((out / "zarr.json").read_text())
    m = meta["consolidated_metadata"]["metadata"]["eps"]
    m["chunk_key_encoding"] = {"name": "v2", "configuration": {"separator": "."}}
    m["codecs"] = codecs
    (out / "zarr.json").write_text(json.dumps(meta))
    (out / "eps" / "1.0.0.0").write_bytes(data)


def gzip_chunk(out: Path, table: object) -> None:
    """A gzip chunk of 0.3 MB inflating to 300 MB: gzip declares no size to check first."""
    import gzip

    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}]
    _v2_row_chunk(out, codecs, gzip.compress(bytes(300 << 20), 1))


def v2_blosc_bomb(out: Path, table: object) -> None:
    """The blosc bomb under v2 chunk keys, whose files the check of declared sizes did not see."""
    blosc_bomb(out, table)
    meta = json.loads((out / "zarr.json").read_text())
    codecs = meta["consolidated_metadata"]["metadata"]["eps"]["codecs"]
    bomb_bytes = (out / "eps" / "c" / "1" / "0" / "0" / "0").read_bytes()
    shutil.rmtree(out / "eps" / "c")  # the bomb's row alone, where v2 keys put it
    _v2_row_chunk(out, codecs, bomb_bytes)


def vlen_items_bomb(out: Path, table: object) -> None:
    """The params chunk (v2 keys) a 2^31-item vlen-utf8 header, zstd-compressed: numcodecs makes
    the object array of that many items (16 GiB) before it reads one."""
    from numcodecs import zstd

    meta = json.loads((out / "zarr.json").read_text())
    meta["consolidated_metadata"]["metadata"]["params"]["chunk_key_encoding"] = {
        "name": "v2", "configuration": {"separator": "."}}
    (out / "zarr.json").write_text(json.dumps(meta))
    shutil.rmtree(out / "params" / "c")
    data = zstd.compress((2**31).to_bytes(4, "little") + bytes(64), 1)
    (out / "params" / "0").write_bytes(data + crc32c(data).to_bytes(4, "little"))


@pytest.mark.parametrize("bomb", [gzip_chunk, v2_blosc_bomb, vlen_items_bomb])
def test_bombs_for_zarrs_reader_are_refused_before_decoding(tmp_path: Path, cache: Path,
                                                           bomb: Callable[[Path, object], None]) -> None:
    _refused_within_bounds(forge(tmp_path, bomb), "reading limits")


def test_a_device_file_exported_from_a_table_made_in_python_is_not_recorded(tmp_path: Path, cache: Path) -> None:
    """``export_device`` given a Table object nothing vouched for (made by ``from_arrays``, every eps
    0) once recorded the file as built here: read_device then answered 0 as certified."""
    from lookup.device.files import DeviceFileError, read_device
    from lookup.store.table import from_arrays
    from tablegen.export import export_device

    eps0, n, delta = np.array([1.0, 2.0]), np.array([100.0, 1000.0]), np.array([1e-6])
    zeros = np.zeros((1, eps0.size, n.size, delta.size))
    made = from_arrays("made", ["krr"], [{"k": 2}], eps0, n, delta, zeros, np.full_like(zeros, np.nan), {})
    device = tmp_path / "made.dev"
    export_device(device, "krr", {}, made)
    with pytest.raises(DeviceFileError, match="nothing vouches"):
        read_device(str(device))
    assert read_device(str(device), verified=False).certified is False


def test_a_device_file_with_every_value_halved_is_refused(tmp_path: Path, cache: Path) -> None:
    """Exported here (recorded as built), then every value halved and the checksum recomputed:
    intact by its SHA-256, but nothing vouches for the new digest."""
    import struct

    from lookup.device.files import DeviceFileError, encode, read_device
    from tablegen.export import export_device

    device = tmp_path / "krr2.dev"
    export_device(device, KRR[0], KRR[1], str(SHIPPED), eps0=[1.0], n_min=1e3, n_max=1e5, delta=[1e-6])
    genuine = read_device(str(device))
    assert genuine.provenance == "built" and genuine.certified
    answer = genuine.eps(KRR[1], 1.0, 10**4, 1e-6)
    data = device.read_bytes()
    (length,) = struct.unpack_from("<I", data, 8)
    values = np.frombuffer(data[12 + length:], dtype="<f4")
    device.write_bytes(encode(json.loads(data[12:12 + length]), (values * np.float32(0.5)).astype("<f4").tobytes()))
    with pytest.raises(DeviceFileError, match="nothing vouches"):
        read_device(str(device))
    with pytest.raises(TableError, match="nothing vouches"):
        lookup.open_table(device)
    forged = read_device(str(device), verified=False)
    assert not forged.certified and forged.eps(KRR[1], 1.0, 10**4, 1e-6) == pytest.approx(answer / 2, rel=1e-6)
