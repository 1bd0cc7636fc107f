"""The protocols report (docs/protocols.md and its figure) runs on a small case."""

from __future__ import annotations

from pathlib import Path

from figure_checks import assert_png, labels


def test_protocols_section_small_case(run_bench, tmp_path: Path) -> None:
    plot = tmp_path / "protocols_error.png"
    out, figures = run_bench("protocols", "--n-values", "1000", "3000", "--repeats", "2", "--plot", str(plot))
    assert_png(plot)
    assert labels(figures) == {("n (users)", "max |estimated - true frequency| over d = 10 bins")}
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| n | calibrated 1 - p | median max error"))
    error_rows = [line.split("|") for line in lines[header + 2:]]
    assert len(error_rows) == 2
    for cells in error_rows:  # | n | 1 - p | median | worst | bound (calibrated p) | bound (paper p) |
        assert float(cells[3]) <= float(cells[4]) <= float(cells[5])  # Theorem 3.1 holds at the calibrated p
    noise_rows = [line for line in lines if line.startswith(("| 1e+03 | ", "| 3e+03 | "))]
    assert len(noise_rows) == 2 * 2 * 3 + 2  # two protocols x two n x three eps, then the error rows
