"""The names every reader of a published table shares: its manifest (``MANIFEST.sha256``, the
SHA-256 of every file in ``sha256sum`` format), the optional signature beside it, and
``TableError``.  Standard library only, imported by ``table``, ``reader`` and ``trust`` alike, so
that none of them imports another for these."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from lookup.format import MANIFEST, MAX_LISTED_FILES, MAX_MANIFEST_BYTES, SIGNATURE, UNLISTED, TableError

__all__ = ["MANIFEST", "MAX_LISTED_FILES", "MAX_MANIFEST_BYTES", "SIGNATURE", "UNLISTED", "TableError",
           "parse_manifest", "read_at_most", "read_manifest"]


def read_manifest(store: Path) -> dict[str, str]:
    """``MANIFEST.sha256`` (``sha256sum`` format) as relative path -> hex digest; TableError where
    it is larger than ``MAX_MANIFEST_BYTES`` (refused before it is read) or lists too many files."""
    with open(store / MANIFEST, "rb") as handle:
        data = read_at_most(handle, MAX_MANIFEST_BYTES)
    if data is None:
        raise TableError(f"{store}: refused, {MANIFEST} is larger than {MAX_MANIFEST_BYTES} bytes (the reading "
                         "limits of lookup/store/manifest.py)")
    return parse_manifest(data.decode(), store)


def parse_manifest(text: str, store: str | Path = "") -> dict[str, str]:
    """The text of a manifest as relative path -> hex digest; TableError where it lists more than
    ``MAX_LISTED_FILES`` files (more than tables of our shapes have: each would be checked)."""
    lines = text.splitlines()
    if len(lines) > MAX_LISTED_FILES:
        raise TableError(f"{store}: refused, its {MANIFEST} lists more than {MAX_LISTED_FILES} files (the reading "
                         "limits of lookup/store/manifest.py)")
    listed = {}
    for line in lines:
        digest, _, rel = line.partition("  ")
        listed[rel] = digest
    return listed


def read_at_most(handle: BinaryIO, limit: int) -> bytes | None:
    """All of an open file, None where it is larger than ``limit`` bytes: its size asked of its
    descriptor before anything is read (a sparse file costs nothing to ask; ``read(limit)`` would
    allocate the limit), and None too where it grew past that size while read."""
    size = os.fstat(handle.fileno()).st_size
    if size > limit:
        return None
    data = handle.read(size)
    return None if handle.read(1) else data
