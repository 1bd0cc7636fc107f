"""Checks of written figures shared by the bench tests."""

from __future__ import annotations

from pathlib import Path


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def labels(figures: list) -> set[tuple[str, str]]:
    """(x label, y label) of the first axes of each figure."""
    return {(f.axes[0].get_xlabel(), f.axes[0].get_ylabel()) for f in figures}
