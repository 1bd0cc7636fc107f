"""The paper-figure command runs on small cases and writes PNGs with checked summaries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _figures(out: Path, *args: str) -> list[str]:
    """Run bench/paper_figures.py into ``out``; the summary table's rows."""
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "paper_figures.py"), "--points", "2", "--out", str(out),
                          *args], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return [line for line in run.stdout.splitlines() if line.startswith("| ") and ".png |" in line]


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_paper_figures_small_case(tmp_path: Path) -> None:
    rows = _figures(tmp_path, "--only", "clones")
    for name in ("clones_2a.png", "clones_2b.png", "clones_2c.png"):
        _assert_png(tmp_path / name)
    assert len(rows) == 3 and all(r.endswith("| yes |") for r in rows)  # generic <= closed form, >= 2RR lower


def test_fft_figures_small_case(tmp_path: Path) -> None:
    """One randomizer, two small n: single, 2-joint and 4-joint curves with the generic bound."""
    rows = _figures(tmp_path, "--only", "fft", "--rows", "10-RR", "--n-range", "100", "1000")
    for name in ("fft_0.1.png", "fft_4.png"):
        _assert_png(tmp_path / name)
    assert len(rows) == 2 and all("| n = 1e3: single " in r and "2-joint" in r and "4-joint" in r for r in rows)
    assert all(r.endswith("| yes |") for r in rows)  # every upper <= generic, every lower <= its upper


def test_parallel_figure_small_case(tmp_path: Path) -> None:
    """Appendix E: the parallel composition's curve lies between 10-RR's and BLH's."""
    rows = _figures(tmp_path, "--only", "parallel", "--n-range", "100", "1000")
    _assert_png(tmp_path / "fft_parallel.png")
    assert len(rows) == 2 and all(r.endswith("| yes (between) |") for r in rows)
