"""The composition figure runs on a small case: a labelled PNG, and ours below basic composition."""

from __future__ import annotations

from pathlib import Path

from figure_checks import assert_png, labels


def test_composition_figure_small_case(run_bench, tmp_path: Path) -> None:
    out, figures = run_bench("compose", "--only", "figure", "--out", str(tmp_path / "c.png"), "--points", "2",
                             "--max-rounds", "20", "--settings", "generic eps0=1 n=100")
    assert_png(tmp_path / "c.png")
    assert labels(figures) == {("rounds T", "total certified eps (delta=1e-06)")}
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| generic")]
    assert [int(r[2]) for r in rows] == [1, 20]
    ours, basic = float(rows[1][3]), float(rows[1][4])
    assert ours < basic  # 20 rounds: the PLD beats T * eps
