"""Signing a table or device file with an Ed25519 key (``tablegen build/export --sign-key``):
the producer's side of ``lookup.trust.origin``, which checks such signatures.  The signature file (beside
a store's manifest, or ``<device file>.sig``) holds the public key, the signature of
``trust.SIGNED`` + the digest's hex digits (a device file's: ``lookup.device.files.signed_message``, which
binds its family and rows), and the digest.  Needs ``cryptography``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lookup.device.files import read_device
from lookup.format import listing_digest
from lookup.store.manifest import read_manifest
from lookup.trust.origin import SIGNED, atomic_write, signature_path, vouched_here


def table_digest(path: str | Path) -> str:
    """The digest a signature covers: a store's ``listing_digest``, a device file's SHA-256."""
    path = Path(path)
    if path.is_dir():
        return listing_digest(read_manifest(path))
    return read_device(str(path), verified=False).header["sha256"]  # its signer vouches for it


def _private_key(key_file: str | Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(Path(key_file).read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"--sign-key {key_file}: not an Ed25519 private key (openssl genpkey -algorithm ed25519)")
    return key


def signature_text(key_file: str | Path, digest: str, message: bytes | None = None) -> str:
    """The signature file's text: the public key of ``key_file`` and its signature of ``message``
    (default: a store's, ``trust.SIGNED`` + ``digest``)."""
    from cryptography.hazmat.primitives import serialization

    key = _private_key(key_file)
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    message = SIGNED + digest.encode() if message is None else message
    return json.dumps({"public_key": public.hex(), "signature": key.sign(message).hex(), "digest": digest})


def sign(path: str | Path, key_file: str | Path, digest: str | None = None) -> Path:
    """Write the Ed25519 signature of the digest of the table or device file at ``path``
    (``table_digest``, or ``digest``) by the private key in PEM file ``key_file``; returns where.
    A device file's signature signs ``lookup.device.files.signed_message``: its family and rows too."""
    _private_key(key_file)  # refused before the table is read
    device = None if Path(path).is_dir() else read_device(str(path), verified=False)  # its signer vouches for it
    digest = device.header["sha256"] if device else digest or table_digest(path)
    text = signature_text(key_file, digest, device.signed_message() if device else None)
    target = signature_path(path)
    atomic_write(target, text)
    return target


class NotVouched(ValueError):
    """A table or device file this machine does not vouch for, so not signed (``sign_vouched``)."""


def sign_vouched(path: str | Path, key_file: str | Path) -> Path:
    """``sign`` the table or device file at ``path`` only where this machine vouches for the digest
    of the bytes read to sign it (``lookup.trust.origin.vouched_here``: shipped, built here, or fully
    verified here): a store's listing checked against its files in one pass
    (``lookup.store.table.read_verified_listing``), a device file's SHA-256 checked against its payload.
    A copy whose files and manifest were both rewritten is never signed with the operator's key
    (issue 55); ``NotVouched`` says why and what to do."""
    from lookup.store.table import read_verified_listing

    _private_key(key_file)  # refused before the table is read
    path = Path(path)
    device = None if path.is_dir() else read_device(str(path), verified=False)  # its payload checked, not trusted
    digest = device.header["sha256"] if device else listing_digest(read_verified_listing(path)[1])
    how = "export it here (tablegen export) from a table this machine vouches for" if device else \
        f"run `tablegen sign --full {path}` (or `tablegen verify --full {path}` first), or build it here"
    if vouched_here(digest) is None:
        raise NotVouched(f"{path} is not shipped, built or fully verified on this machine, so it is not signed "
                         f"(its values may not be what its checksums say): {how}")
    text = signature_text(key_file, digest, device.signed_message() if device else None)
    target = signature_path(path)
    atomic_write(target, text)
    return target
