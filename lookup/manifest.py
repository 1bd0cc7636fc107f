"""The names every reader of a published table shares: its manifest (``MANIFEST.sha256``, the
SHA-256 of every file in ``sha256sum`` format), the optional signature beside it, and
``TableError``.  Standard library only, imported by ``table``, ``reader`` and ``trust`` alike, so
that none of them imports another for these."""

from __future__ import annotations

from pathlib import Path

MANIFEST = "MANIFEST.sha256"
SIGNATURE = "SIGNATURE.ed25519"  # optional, beside the manifest: an Ed25519 signature of it (lookup.trust)
UNLISTED = (MANIFEST, SIGNATURE)  # the files of a store its manifest does not list


class TableError(ValueError):
    """A table that is missing, corrupted, tampered with, or does not cover a query."""


def read_manifest(store: Path) -> dict[str, str]:
    """``MANIFEST.sha256`` (``sha256sum`` format) as relative path -> hex digest."""
    return parse_manifest((store / MANIFEST).read_text())


def parse_manifest(text: str) -> dict[str, str]:
    """The text of a manifest as relative path -> hex digest."""
    listed = {}
    for line in text.splitlines():
        digest, _, rel = line.partition("  ")
        listed[rel] = digest
    return listed
