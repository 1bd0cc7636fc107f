"""``lookup plot``: every kind writes a non-empty image with the expected axis labels."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from lookup.cli import plot
from lookup.cli.commands import main
from lookup.store.table import open_table

ROWS = [("krr", {"k": 3}), ("generic", {})]


@pytest.mark.parametrize(
    ("kind", "call", "labels"),
    [
        ("eps-vs-n", lambda t, out: plot.eps_vs_n(ROWS, eps0=2.0, delta=1e-6, table=t, out=out),
         ("n (users)", "shuffled eps")),
        ("eps-vs-eps0", lambda t, out: plot.eps_vs_eps0(ROWS, n=40, delta=1e-6, table=t, out=out),
         ("eps0 (local)", "shuffled eps")),
        ("privacy-curve", lambda t, out: plot.privacy_curve("krr", {"k": 3}, eps0=2.0, n=40, table=t, out=out),
         ("eps", "delta")),
        ("eps0-max", lambda t, out: plot.eps0_max_vs_n(ROWS, eps=1.0, delta=1e-6, table=t, out=out),
         ("n (users)", "largest certified eps0")),
        ("slack", lambda t, out: plot.slack_map("krr", {"k": 3}, delta=1e-6, table=t, out=out),
         ("n (users)", "eps0")),
    ],
)
def test_each_kind_writes_a_labelled_png(table_path: Path, tmp_path: Path, kind: str, call, labels) -> None:
    out = tmp_path / f"{kind}.png"
    fig = call(open_table(table_path), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    assert (fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()) == labels


def test_cli_writes_svg_and_reports_missing_options(table_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "curve.svg"
    result = CliRunner().invoke(main, ["plot", "eps-vs-n", "--mechanisms", "krr k=3,generic", "--eps0", "2",
                                       "--delta", "1e-6", "--table", str(table_path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert b"<svg" in out.read_bytes()[:500]
    result = CliRunner().invoke(main, ["plot", "eps-vs-n", "--table", str(table_path), "--out", str(out)])
    assert result.exit_code == 2 and "needs --eps0, --delta" in result.stderr
    result = CliRunner().invoke(main, ["plot", "eps-vs-n", "--mechanisms", "krr kk=3", "--eps0", "2", "--delta",
                                       "1e-6", "--table", str(table_path), "--out", str(out)])
    assert result.exit_code == 2 and "unknown parameter 'kk'" in result.stderr
    result = CliRunner().invoke(main, ["plot", "eps-vs-n", "--mechanisms", "krr k=3 k=4", "--eps0", "2", "--delta",
                                       "1e-6", "--table", str(table_path), "--out", str(out)])
    assert result.exit_code == 2 and "'k' given more than once" in result.stderr


def test_rows_with_commas_in_values_use_semicolons(table_path: Path, tmp_path: Path) -> None:
    from lookup.cli.commands import _row, _rows

    rows = [_row(r) for r in _rows("parallel bases=krr,blh weights=0.5,0.5 k=10; finite matrix=[[0.7,0.3],[0.3,0.7]]")]
    assert rows == [("parallel", {"bases": "krr,blh", "weights": "0.5,0.5", "k": 10}),
                    ("finite", {"matrix": [[0.7, 0.3], [0.3, 0.7]]})]
    assert [r[0] for r in map(_row, _rows("krr k=10,generic"))] == ["krr", "generic"]


def test_a_missing_out_directory_is_one_line_and_status_2(table_path: Path, tmp_path: Path) -> None:
    missing = tmp_path / "some" / "missing"
    result = CliRunner().invoke(main, ["plot", "eps-vs-n", "--mechanisms", "krr k=3", "--eps0", "2", "--delta",
                                       "1e-6", "--table", str(table_path), "--out", str(missing / "x.png")])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "--out" in result.stderr and str(missing) in result.stderr
    assert not missing.exists()
