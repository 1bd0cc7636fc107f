"""Trust by provenance: a reader answers from a table or device file only where it can say where
it came from (``provenance``: shipped, built here, signed by a trusted key, or fully verified here)
and says it (``Table.provenance``); anything else is refused naming the four ways (``WAYS``), or
opened on explicit request with ``Table.certified`` False.  Here too: the HMAC-authenticated
records of ``built`` and ``verified`` in the cache home, the spot checks of every table that is not
shipped (``spot_check``), and ``refute``, which every refinement calls when the engine proves a
table value wrong.  The trust model, what each layer defends and what it does not: docs/trust.md.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import math
import os
import random
import secrets
import stat
import time
from pathlib import Path
from typing import Any, NoReturn

from lookup.format import SIGNATURE, SIGNED_TABLE, TableError, listing_digest  # noqa: F401  (lookup.trust.origin.listing_digest)

# SHA-256 of the manifest listing (``listing_digest``) of each table this package ships
PINNED = {
    "0e9890307b0dd607160cfabe6b1502b59cf1c80f3c6c7e752ae79cfd9d55f8d4": "default.zarr",
    "0bb439e405e03dcceea7b7c634920f028e41559636f8de33df24c581592e25d1": "protocols.zarr",
    "82fb822e0db021250ac656ede9b7e97fcc4b3aa5bc0ceb0aa72f60f5ce75bc69": "gaussian.sheps",  # the device file's
    # header SHA-256 (lookup.device.files: it seals the header and the payload)
}
ENV_CACHE = "SHUFFLE_EPS_CACHE"
ENV_KEYS = "SHUFFLE_EPS_TRUSTED_KEYS"
SIGNED = SIGNED_TABLE  # the signed message: this prefix, then the digest's hex digits
SECRET = "secret"  # in the cache home: the per-user HMAC key of the records (mode 0600)
SPOT_MIN = 64  # random cells checked on every open of a table that is not shipped, at least ...
SPOT_SECONDS = 1.0  # ... and more while this time lasts
SPOT_MAX = 4096
# the live engine's paths (spectral at resolution 20, FFT) are not the slice engine's that built a table: a
# genuine stored eps is not always certified by them (shipped table, krr k=512 eps0 7.12 n 13804 delta 1e-5:
# delta_upper 1.0036e-5 at the stored eps, 2026-11-26), so a spot check refuses only where eps (1 + SPOT_RTOL)
# is not certified either: two steps of the build's 1% eps ladder
SPOT_RTOL = 0.02
LOWER_MARGIN = 1e-9  # a lower bound L is refuted where the engine certifies L (1 - LOWER_MARGIN)
WAYS = ("1) shipped with shuffle-eps (its digest pinned in this package), 2) built on this machine (tablegen "
        "build / tablegen export record what they wrote), 3) signed by a trusted key (tablegen sign TABLE --key KEY; "
        f"readers: --trusted-key or ${ENV_KEYS}), or 4) fully re-verified here (tablegen verify --full TABLE, "
        "a table directory; a device file: export it again here from a trusted table); "
        'or ask for answers labelled "certified": false (--unverified, open_table(path, verified=False))')
SMALL_FILE = 1 << 16  # a signature, a trust record or a live-cache entry: at most this many bytes are read
_REFUTED: dict[str, str] = {}  # digest -> why, for this process


def read_small(path: str | Path) -> str:
    """The text of a small file (a signature, a record, a cache entry); OSError where it is larger
    than ``SMALL_FILE`` bytes (a sparse file planted to be read whole), not a regular file, or unreadable."""
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > SMALL_FILE:
            raise OSError(f"{path}: not a regular file of at most {SMALL_FILE} bytes")
        data = f.read(SMALL_FILE + 1)
    if len(data) > SMALL_FILE:
        raise OSError(f"{path}: larger than {SMALL_FILE} bytes")
    return data.decode()


def atomic_write(path: str | Path, data: str | bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Write ``data`` to ``path`` all or nothing, never through a file or link planted beside it:
    a new temporary file in the same directory, created exclusively (``O_CREAT | O_EXCL |
    O_NOFOLLOW``, a random name, ``mode`` less the umask), flushed to disk where ``durable``, then
    renamed over ``path`` (a link at ``path`` is replaced, not followed).  Every file this package
    writes whole goes through here (manifests, device files, signatures, trust records, cache
    entries, staging slices)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def provenance(path: str | Path, digest: str, message: bytes | None = None) -> tuple[str | None, str]:
    """(``"shipped"``, ``"signed"``, ``"built"``, ``"verified"`` or None, why not where None)
    for the artefact at ``path`` whose files have ``digest`` (a signature signs ``message``:
    ``signed_by_trusted_key``); TableError where a trusted key's
    signature does not verify; ValueError where a trusted key file is no Ed25519 public key (checked
    first, whatever the artefact: a private key given as a trusted one is refused even where a
    shipped table answers)."""
    keys = trusted_key_files()
    trusted_keys(keys)
    if digest in PINNED:
        return "shipped", ""
    if keys:
        if signed_by_trusted_key(path, digest, message):
            return "signed", ""
        why = "signed by a key that is not trusted" if signature_path(path).is_file() else "not signed"
        return None, f"{why}, and trusted keys are configured (${ENV_KEYS} / --trusted-key)"
    how = recorded(digest)
    return how, "" if how else "not shipped, built, signed or fully verified here"


def vouched_here(digest: str) -> str | None:
    """``"shipped"``, ``"built"`` or ``"verified"`` where this package or this machine vouches for
    ``digest`` (its pin, or an authentic record), whatever keys are trusted; else None.  What may be
    signed (``tablegen build --sign-key`` on an up-to-date table): never a signature alone."""
    return "shipped" if digest in PINNED else recorded(digest)


def established(path: str | Path, digest: str, verified: bool = True, message: bytes | None = None) -> str:
    """The provenance of the artefact at ``path`` whose files have ``digest`` (``provenance``),
    ``"unverified"`` where nothing vouches for it and ``verified`` is False.  TableError: refuted
    in this process, or nothing vouches for it and ``verified`` (the message names the four ways)."""
    if digest in _REFUTED:
        raise TableError(_REFUTED[digest])
    how, why = provenance(path, digest, message)
    if how is None and verified:
        raise TableError(f"{path}: refused, nothing vouches for it ({why}). A table is answered from only if "
                         f"it was {WAYS}")
    return how or "unverified"


def vouch(table: Any, digest: str, verified: bool = True) -> None:
    """Set ``table.provenance`` and ``table.certified`` for a table (or device file) whose files
    have ``digest``, and spot-check it (``spot_check``) unless it is shipped.  TableError: refuted
    before, nothing vouches for it and ``verified`` (the message names the four ways), or a spot
    check fails (its record forgotten)."""
    how = established(table.path, digest, verified, getattr(table, "signed", None))  # a device file's: its own
    table.provenance, table.certified = how, how != "unverified"
    if how == "shipped":
        return  # released with this package: no engine time at open
    try:
        from tablegen.engine import certifies
    except ImportError:
        return  # provenance alone (a reader without the engine)
    problem = spot_check(table, certifies)
    if problem:
        forget(digest)
        _REFUTED[digest] = f"{table.path}: refused, {problem}; rebuild or re-download it"
        raise TableError(_REFUTED[digest])


def refuted() -> dict[str, str]:
    """Digests refused in this process (by a failed spot check or ``refute``) -> why."""
    return _REFUTED


def refute(table: Any, detail: str) -> NoReturn:
    """Refuse ``table`` at once: a value of it proved wrong (e.g. below the engine's proved lower
    bound at a cell, found by a live refinement; ``detail`` names the cell and both values).
    Its trust record is forgotten and every later open in this process is refused; raises the
    TableError saying so."""
    message = f"{table.path}: refused, {detail}; its values are not certified (trust record forgotten)"
    if table.digest:  # a table made in Python (lookup.store.table.from_arrays) has none: refused as itself only
        _REFUTED[table.digest] = message
        forget(table.digest)
    table.certified = False
    raise TableError(message)


def spot_check(table: Any, certifies: Any, seconds: float = SPOT_SECONDS, rng: Any = None) -> str:
    """'' if every cell drawn at random (``rng``, default the OS's entropy: unpredictable) passes:
    the stored eps certified by ``certifies`` (within ``SPOT_RTOL``), and no stored lower bound L above the exact eps
    (refuted where ``certifies`` certifies L (1 - LOWER_MARGIN), since then exact < L; a True
    ``proves_above`` would prove L, but its cheaper spectral path does not reach every genuine
    bound: 21 of 129 random cells of the shipped table, 2026-11-26).  ``SPOT_MIN`` cells at least,
    more until ``seconds`` pass (``_draw``: every cell of a small table); else the first failing
    cell, named."""
    rng = rng or random.SystemRandom()
    shape = table.upper.shape
    upper = functools.lru_cache(maxsize=None)(table.stored_eps)
    lower = functools.lru_cache(maxsize=None)(table.stored_lower) if table.stored_lower else None
    deadline, checked = time.perf_counter() + seconds, 0
    for cell in _draw(shape, rng):
        if checked >= SPOT_MIN and time.perf_counter() > deadline:
            break
        checked += 1
        eps = float(upper(cell[0])[cell[1:]])
        if not _certified(certifies, table, cell, eps * (1 + SPOT_RTOL)):
            return (f"the engine does not certify its eps (even {SPOT_RTOL:.0%} higher) at a cell drawn at random "
                    f"({_cell_text(table, cell)}: "
                    f"eps {eps!r}; cell {checked} drawn)")
        low = float(lower(cell[0])[cell[1:]]) if lower else math.nan
        if low > 0 and _certified(certifies, table, cell, low * (1 - LOWER_MARGIN)):
            return (f"its lower bound is above the exact eps at a cell drawn at random ({_cell_text(table, cell)}: "
                    f"lower {low!r}, the engine certifies less; cell {checked} drawn)")
    return ""


def _draw(shape: tuple[int, ...], rng: Any) -> Any:
    """Cells of a table of ``shape`` in random order: every cell where there are at most
    ``SPOT_MAX`` (a small custom table is checked whole), else ``SPOT_MAX`` drawn independently."""
    total = math.prod(shape)
    if total <= SPOT_MAX:
        order = list(range(total))
        rng.shuffle(order)
    else:
        order = (rng.randrange(total) for _ in range(SPOT_MAX))
    for flat in order:
        cell, rest = [], flat
        for size in reversed(shape):
            rest, i = divmod(rest, size)
            cell.append(i)
        yield tuple(reversed(cell))


def _certified(certifies: Any, table: Any, cell: tuple[int, int, int, int], eps: float) -> bool:
    """Whether the engine certifies ``eps`` at grid ``cell`` (False where it refuses the parameters)."""
    r, e, j, d = cell
    try:
        return bool(certifies(table.families[r], eps0=float(table.eps0[e]), n=int(table.n[j]), eps=eps,
                              delta=float(table.delta[d]), **table.params[r]))
    except ValueError:
        return False


def _cell_text(table: Any, cell: tuple[int, int, int, int]) -> str:
    r, e, j, d = cell
    return f"{table.labels()[r]} eps0 {table.eps0[e]:g} n {table.n[j]:g} delta {table.delta[d]:g}"


def cache_home() -> Path:
    """``$SHUFFLE_EPS_CACHE``, else ``$XDG_CACHE_HOME/shuffle-eps`` or ``~/.cache/shuffle-eps``."""
    root = os.environ.get(ENV_CACHE) or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                     "shuffle-eps")
    return Path(root)


def secret(create: bool = True) -> bytes | None:
    """The per-user HMAC key (``cache_home() / SECRET``, 32 random bytes, created mode 0600
    where ``create``); None where it cannot be read or made, or is not this user's alone (owned
    by another user, readable or writable by others, a symlink): nothing is then believed."""
    path = cache_home() / SECRET
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            if not create or not _create_secret(path):
                return None
            continue
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if (hasattr(os, "getuid") and info.st_uid != os.getuid()) or info.st_mode & 0o077:
                return None
            key = f.read(64)
        return key if len(key) >= 32 else None
    return None


def _create_secret(path: Path) -> bool:
    """Write a new secret at ``path`` (0600, never over an existing file); False where it cannot."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return True  # another process made it meanwhile: read theirs
    except OSError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    return True


def mac(text: str, create: bool = True) -> str | None:
    """HMAC-SHA256 of ``text`` with the per-user ``secret`` (None without one)."""
    key = secret(create)
    return None if key is None else hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def authentic(text: str, tag: Any) -> bool:
    """Whether ``tag`` is the HMAC of ``text`` by this user's secret (constant-time comparison)."""
    want = mac(text, create=False)
    return want is not None and isinstance(tag, str) and hmac.compare_digest(want, tag)


def record_built(path: str | Path, digest: str) -> bool:
    """Record that the table (or device file) at ``path`` with ``digest`` was built on this machine.
    ``digest`` must be computed from the bytes the build wrote (a store's ``listing_digest`` of the
    manifest it wrote, a device file's SHA-256), never re-read from the path.  False where the
    cache home is not writable (the table then needs another way: signed or verified)."""
    return _record(digest, "built", path)


def record_verified(path: str | Path, digest: str) -> bool:
    """Record that every slice of the table with ``digest`` was recomputed here and found equal."""
    return _record(digest, "verified", path)


def recorded(digest: str) -> str | None:
    """``"built"`` or ``"verified"`` where an authentic record of ``digest`` exists, else None."""
    try:
        record = json.loads(read_small(cache_home() / "trusted" / digest))
        how = record["how"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if how not in ("built", "verified") or not authentic(f"{digest}\n{how}", record.get("mac")):
        return None
    return how


def forget(digest: str) -> None:
    """Remove any record of ``digest`` (a refuted table earns trust again only by being rebuilt)."""
    try:
        (cache_home() / "trusted" / digest).unlink()
    except (OSError, ValueError):
        pass


def _record(digest: str, how: str, path: str | Path) -> bool:
    tag = mac(f"{digest}\n{how}")
    if tag is None or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        return False
    folder = cache_home() / "trusted"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(folder / digest, json.dumps({"digest": digest, "how": how, "path": str(path), "mac": tag}))
    except OSError:
        return False
    return True


def trusted_key_files() -> list[str]:
    """The trusted public key files (``$SHUFFLE_EPS_TRUSTED_KEYS``, separated by ``os.pathsep``)."""
    return [k for k in os.environ.get(ENV_KEYS, "").split(os.pathsep) if k]


def signature_path(path: str | Path) -> Path:
    """Where the signature of the table or device file at ``path`` lives."""
    path = Path(path)
    return path / SIGNATURE if path.is_dir() else path.with_name(path.name + ".sig")


def signed_by_trusted_key(path: str | Path, digest: str, message: bytes | None = None) -> bool:
    """True if ``path`` carries a signature of ``digest`` by a trusted key (of ``message``: a device
    file's binds its mechanism, ``lookup.device.signed_message``; else ``SIGNED`` + ``digest``); False if it carries
    none, none by a trusted key, or no key is trusted; TableError if a trusted key's signature
    does not verify (the table changed after it was signed)."""
    keys = trusted_key_files()
    target = signature_path(path)
    if not keys or not target.is_file():
        return False
    try:
        record = json.loads(read_small(target))
        public, signature = bytes.fromhex(record["public_key"]), bytes.fromhex(record["signature"])
    except (OSError, ValueError, KeyError, TypeError):
        raise TableError(f"{path}: refused, its signature file {target.name} is malformed") from None
    trusted = trusted_keys(keys)
    if public not in trusted:
        return False
    try:
        trusted[public].verify(signature, message or SIGNED + digest.encode())
    except Exception:  # noqa: BLE001 - cryptography's InvalidSignature, and any malformed signature
        raise TableError(f"{path}: refused, its signature by a trusted key does not verify (the table was changed "
                         "after it was signed)") from None
    return True


def trusted_keys(files: list[str], source: str = f"${ENV_KEYS} / --trusted-key") -> dict[bytes, Any]:
    """The Ed25519 public keys in PEM ``files`` by their raw bytes (none for no files);
    ValueError, one line naming ``source`` (the option or variable that gave them) and the file,
    for anything else: a private key above all (the signer's secret, never to be handed out)."""
    if not files:
        return {}
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        raise ValueError(f"{source} need the cryptography package: pip install \"shuffle-eps[sign]\"") from None
    keys = {}
    for name in files:
        try:
            data = Path(name).read_bytes()
        except OSError as err:
            raise ValueError(f"{source} {name}: cannot be read ({err.strerror or err})") from None
        if b"PRIVATE KEY-----" in data:
            raise ValueError(f"{source} {name}: a private key, not a public key; give the public key "
                             "(openssl pkey -in KEY -pubout) and keep the private key to its signer")
        try:
            key = serialization.load_pem_public_key(data)
        except ValueError:
            raise ValueError(f"{source} {name}: not an Ed25519 public key (PEM)") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"{source} {name}: not an Ed25519 public key")
        keys[key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)] = key
    return keys
