"""A table proves its numbers on first use (issue 31; DESIGN.md section 5, "Artefacts").

The invariants of ``lookup.checks`` catch damage that breaks monotonicity or the recorded spec;
they cannot see a whole row replaced by another mechanism's, a row scaled down, or a spec
attribute edited along with the axes.  So:

* the shipped tables are pinned: the SHA-256 of their manifest listing is recorded here
  (``PINNED``; a test keeps it equal to ``data/``), and a table whose listing matches is the
  one this package was released with;
* any other table (or device file) is spot-certified the first time it is opened: the engine's
  one-evaluation certification check (``tablegen.engine.certifies``: is (eps, delta) certified?)
  at the answer the table gives at ``spot_cells`` (every row at every n decade, every eps0 and
  every delta reached: 168 checks, about a second, on a copy of the default table); a table
  with a cell the engine does not certify is refused with the cells named.  A table that passes
  is remembered by its digest (``$SHUFFLE_EPS_CACHE/trusted/`` or ``~/.cache/shuffle-eps/trusted/``),
  so later opens are as fast as the shipped table's.

This is a sample, not a proof over every cell: it catches the damage a buggy writer, a bad
merge or an edit leaves (whole rows, axes, labels), which moves many cells at once.

Signatures (optional, for operators who ship tables between machines, e.g. to a reader without
the engine): ``tablegen build --sign-key KEY`` or ``tablegen sign TABLE --key KEY`` writes an
Ed25519 signature of the table's digest (``SIGNATURE.ed25519`` beside a store's manifest, not
listed in it; ``FILE.sig`` beside a device file).  A reader given trusted public keys (PEM files,
``--trusted-key`` or ``$SHUFFLE_EPS_TRUSTED_KEYS``, separated by ``os.pathsep``) takes a table
signed by one of them as vouched for, and refuses one whose signature by a trusted key does not
verify (changed after signing).  Integrity (the manifest), soundness (the checks and the spot
certification) and authenticity (the signature) are separate questions, each answered here.
Signing needs the ``cryptography`` package (``pip install "shuffle-eps[sign]"``), imported only
where a signature is made or checked.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

# SHA-256 of the manifest listing (``listing_digest``) of each table this package ships
PINNED = {
    "bf90a689472f1ac4fd932f06034bc77f3d8a57af6046e75f0b1a6f0ae6d61a89": "default.zarr",
}
ENV_CACHE = "SHUFFLE_EPS_CACHE"
ENV_KEYS = "SHUFFLE_EPS_TRUSTED_KEYS"
SIGNED = b"shuffle-eps table digest "  # the signed message: this prefix, then the digest's hex digits


def listing_digest(listed: dict[str, str]) -> str:
    """SHA-256 of a manifest listing (relative path -> SHA-256 of the file) in its canonical
    text, one ``digest  path`` line per file sorted by path: it fixes every file's content."""
    text = "".join(f"{digest}  {rel}\n" for rel, digest in sorted(listed.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def spot_cells(shape: tuple[int, ...], n: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(row, eps0, n, delta) indices: in every row one cell per decade of n, the k-th cell of
    the table (row-major) at eps0 index k mod E and delta index k mod D, so that every eps0 and
    every delta is reached where rows x decades >= E and D; n inside its decade spread by a
    multiplicative hash."""
    rows, n_eps0, _, n_delta = shape
    decade = np.floor(np.log10(np.asarray(n, dtype=float))).astype(int)
    decades = np.unique(decade)
    per_row = max(decades.size, math.ceil(max(n_eps0, n_delta) / max(rows, 1)))
    cells = []
    for k in range(rows * per_row):
        r, i = divmod(k, per_row)
        inside = np.flatnonzero(decade == decades[i % decades.size])
        cells.append((r, k % n_eps0, int(inside[(k * 7919) % inside.size]), k % n_delta))
    return cells


def vouch(table: Any, digest: str) -> None:
    """Return if ``table`` (a ``lookup.table.Table`` whose files have the listing ``digest``) is
    pinned or was spot-certified before, else spot-certify it; TableError naming the cells."""
    from lookup.table import TableError

    if digest in PINNED or signed_by_trusted_key(table.path, digest) or _remembered(digest):
        return
    try:
        from tablegen.engine import certifies
    except ImportError:
        raise TableError(f"{table.path}: refused, it is not a table shipped with this package and the engine "
                         "(tablegen), which spot-certifies other tables on first use, is not installed") from None
    problem = spot_certify(table, certifies)
    if problem:
        raise TableError(f"{table.path}: refused, {problem}; rebuild or re-download it")
    _remember(digest)


def signature_path(path: str | Path) -> Path:
    """Where the signature of the table or device file at ``path`` lives."""
    from lookup.table import SIGNATURE

    path = Path(path)
    return path / SIGNATURE if path.is_dir() else path.with_name(path.name + ".sig")


def table_digest(path: str | Path) -> str:
    """The digest a signature covers: a store's ``listing_digest``, a device file's SHA-256."""
    from lookup.device import read_device
    from lookup.table import read_manifest

    path = Path(path)
    return listing_digest(read_manifest(path)) if path.is_dir() else read_device(str(path)).header["sha256"]


def sign(path: str | Path, key_file: str | Path, digest: str | None = None) -> Path:
    """Write the Ed25519 signature of the digest of the table or device file at ``path``
    (``table_digest``, or ``digest``) by the private key in PEM file ``key_file``; returns where."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(Path(key_file).read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"--sign-key {key_file}: not an Ed25519 private key (openssl genpkey -algorithm ed25519)")
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    digest = digest or table_digest(path)
    text = json.dumps({"public_key": public.hex(), "signature": key.sign(SIGNED + digest.encode()).hex(),
                       "digest": digest})
    target = signature_path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, target)
    return target


def signed_by_trusted_key(path: str | Path, digest: str) -> bool:
    """True if ``path`` carries a signature of ``digest`` by a trusted key; False if it carries
    none, none by a trusted key, or no key is trusted; TableError if a trusted key's signature
    does not verify (the table changed after it was signed)."""
    from lookup.table import TableError

    keys = [k for k in os.environ.get(ENV_KEYS, "").split(os.pathsep) if k]
    target = signature_path(path)
    if not keys or not target.is_file():
        return False
    try:
        record = json.loads(target.read_text())
        public, signature = bytes.fromhex(record["public_key"]), bytes.fromhex(record["signature"])
    except (OSError, ValueError, KeyError, TypeError):
        raise TableError(f"{path}: refused, its signature file {target.name} is malformed") from None
    trusted = _public_keys(keys)
    if public not in trusted:
        return False
    try:
        trusted[public].verify(signature, SIGNED + digest.encode())
    except Exception:  # noqa: BLE001 - cryptography's InvalidSignature, and any malformed signature
        raise TableError(f"{path}: refused, its signature by a trusted key does not verify (the table was changed "
                         "after it was signed)") from None
    return True


def _public_keys(files: list[str]) -> dict[bytes, Any]:
    """The Ed25519 public keys in PEM ``files`` by their raw bytes; ValueError naming a bad file."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        raise ValueError(f"${ENV_KEYS} / --trusted-key need the cryptography package: "
                         'pip install "shuffle-eps[sign]"') from None
    keys = {}
    for name in files:
        try:
            key = serialization.load_pem_public_key(Path(name).read_bytes())
        except (OSError, ValueError) as err:
            raise ValueError(f"trusted key {name}: cannot read an Ed25519 public key (PEM): {err}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"trusted key {name}: not an Ed25519 public key")
        keys[key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)] = key
    return keys


def spot_certify(table: Any, certifies: Any) -> str:
    """'' if the engine's ``certifies`` certifies the table's answer at every ``spot_cells``
    cell, else which cells it does not (the first three named)."""
    cells = spot_cells(table.upper.shape, table.n)
    stored = functools.lru_cache(maxsize=1)(table.stored_eps)  # the cells come row by row: one row held
    values = {cell: float(stored(cell[0])[cell[1:]]) for cell in cells}
    failed = [cell for cell in cells if not _certified(certifies, table, cell, values[cell])]
    if not failed:
        return ""
    named = "; ".join(_cell_text(table, cell, values[cell]) for cell in failed[:3])
    return (f"the engine does not certify {len(failed)} of {len(cells)} spot-checked cells "
            f"({named}{'; ...' if len(failed) > 3 else ''})")


def _certified(certifies: Any, table: Any, cell: tuple[int, int, int, int], eps: float) -> bool:
    """Whether the engine certifies ``eps``, the value stored at ``cell`` (every answer of the
    table is one of these, or a minimum of them at dominated grid points)."""
    r, e, j, d = cell
    try:
        return certifies(table.families[r], eps0=float(table.eps0[e]), n=int(table.n[j]), eps=eps,
                         delta=float(table.delta[d]), **table.params[r])
    except ValueError:  # parameters the engine refuses: nothing certified
        return False


def _cell_text(table: Any, cell: tuple[int, int, int, int], eps: float) -> str:
    r, e, j, d = cell
    return f"{table.labels()[r]} eps0 {table.eps0[e]:g} n {table.n[j]:g} delta {table.delta[d]:g}: eps {eps!r}"


def _trusted_dir() -> Path:
    root = os.environ.get(ENV_CACHE) or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                     "shuffle-eps")
    return Path(root) / "trusted"


def _remembered(digest: str) -> bool:
    return (_trusted_dir() / digest).is_file()


def _remember(digest: str) -> None:
    try:
        folder = _trusted_dir()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / digest).touch()
    except OSError:
        pass  # a read-only home: spot-certified again next time, nothing lost
