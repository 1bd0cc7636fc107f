"""The paper-figure command runs on small cases: labelled PNGs and checked summaries."""

from __future__ import annotations

from pathlib import Path

from figure_checks import assert_png, labels


def _rows(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("| ") and ".png |" in line]


def test_clones_figures_small_case(run_bench, tmp_path: Path) -> None:
    out, figures = run_bench("paper_figures", "--points", "2", "--out", str(tmp_path), "--only", "clones")
    for name in ("clones_2a.png", "clones_2b.png", "clones_2c.png"):
        assert_png(tmp_path / name)
    assert labels(figures) == {("n (users)", "central eps"), ("eps0", "central eps")}
    rows = _rows(out)
    assert len(rows) == 3 and all(r.endswith("| yes |") for r in rows)  # generic <= closed form, >= 2RR lower


def test_fft_figures_small_case(run_bench, tmp_path: Path) -> None:
    """One randomizer, two small n: single, 2-joint and 4-joint curves with the generic bound."""
    out, figures = run_bench("paper_figures", "--points", "2", "--out", str(tmp_path), "--only", "fft", "--rows",
                             "10-RR", "--n-range", "100", "1000")
    for name in ("fft_0.1.png", "fft_4.png"):
        assert_png(tmp_path / name)
    assert labels(figures) == {("n (users)", "central eps")}
    rows = _rows(out)
    assert len(rows) == 2 and all("| n = 1e3: single " in r and "2-joint" in r and "4-joint" in r for r in rows)
    assert all(r.endswith("| yes |") for r in rows)  # every upper <= generic, every lower <= its upper


def test_parallel_figure_small_case(run_bench, tmp_path: Path) -> None:
    """Appendix E: the parallel composition's curve lies between 10-RR's and BLH's."""
    out, figures = run_bench("paper_figures", "--points", "2", "--out", str(tmp_path), "--only", "parallel",
                             "--n-range", "100", "1000")
    assert_png(tmp_path / "fft_parallel.png")
    assert labels(figures) == {("n (users)", "central eps")}
    rows = _rows(out)
    assert len(rows) == 2 and all(r.endswith("| yes (between) |") for r in rows)
