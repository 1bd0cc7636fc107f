"""The docs section: the committed figures of docs/plots.md are those their documented commands make now
(same title and axis labels; regenerate with ``python -m bench docs --only plots``), and the paper-figure
part runs on small cases (labelled PNGs and checked summaries)."""

from __future__ import annotations

from pathlib import Path

from figure_checks import assert_png, labels
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


def _labels(path: Path) -> tuple[str, str]:
    text = Image.open(path).text
    return text.get("Title", ""), text.get("Description", "")


def test_documented_figures_are_in_step(run_bench, tmp_path: Path) -> None:
    out, _ = run_bench("docs", "--only", "plots", "--out", str(tmp_path))
    written = sorted((tmp_path / "figures").glob("*.png"))
    assert len(written) == 5 and out.count("wrote: ") == 5
    for fresh in written:
        committed = ROOT / "docs" / "figures" / fresh.name
        assert_png(committed)
        assert _labels(committed) == _labels(fresh), (
            f"docs/figures/{fresh.name} is stale: run python -m bench docs --only plots")


def _rows(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("| ") and ".png |" in line]


def test_clones_figures_small_case(run_bench, tmp_path: Path) -> None:
    out, figures = run_bench("docs", "--only", "papers", "--points", "2", "--out", str(tmp_path), "--figures", "clones")
    for name in ("clones_2a.png", "clones_2b.png", "clones_2c.png"):
        assert_png(tmp_path / "figures" / name)
    assert labels(figures) == {("n (users)", "central eps"), ("eps0", "central eps")}
    rows = _rows(out)
    assert len(rows) == 3 and all(r.endswith("| yes |") for r in rows)  # generic <= closed form, >= 2RR lower


def test_fft_figures_small_case(run_bench, tmp_path: Path) -> None:
    """One randomizer, two small n: single, 2-joint and 4-joint curves with the generic bound."""
    out, figures = run_bench("docs", "--only", "papers", "--points", "2", "--out", str(tmp_path), "--figures", "fft",
                             "--rows", "10-RR", "--n-range", "100", "1000")
    for name in ("fft_0.1.png", "fft_4.png"):
        assert_png(tmp_path / "figures" / name)
    assert labels(figures) == {("n (users)", "central eps")}
    rows = _rows(out)
    assert len(rows) == 2 and all("| n = 1e3: single " in r and "2-joint" in r and "4-joint" in r for r in rows)
    assert all(r.endswith("| yes |") for r in rows)  # every upper <= generic, every lower <= its upper


def test_parallel_figure_small_case(run_bench, tmp_path: Path) -> None:
    """Appendix E: the parallel composition's curve lies between 10-RR's and BLH's."""
    out, figures = run_bench("docs", "--only", "papers", "--points", "2", "--out", str(tmp_path), "--figures",
                             "parallel", "--n-range", "100", "1000")
    assert_png(tmp_path / "figures" / "fft_parallel.png")
    assert labels(figures) == {("n (users)", "central eps")}
    rows = _rows(out)
    assert len(rows) == 2 and all(r.endswith("| yes (between) |") for r in rows)
