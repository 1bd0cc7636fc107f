"""The committed figures of docs/plots.md are those their documented commands make now: same
title and axis labels (regenerate with ``python bench/docs_figures.py``)."""

from __future__ import annotations

from pathlib import Path

from figure_checks import assert_png
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


def _labels(path: Path) -> tuple[str, str]:
    text = Image.open(path).text
    return text.get("Title", ""), text.get("Description", "")


def test_documented_figures_are_in_step(run_bench, tmp_path: Path) -> None:
    out, _ = run_bench("docs_figures", "--out", str(tmp_path))
    written = sorted(tmp_path.glob("*.png"))
    assert len(written) == 5 and out.count("wrote: ") == 5
    for fresh in written:
        committed = ROOT / "docs" / "figures" / fresh.name
        assert_png(committed)
        assert _labels(committed) == _labels(fresh), (
            f"docs/figures/{fresh.name} is stale: run python bench/docs_figures.py")
