"""The paper-figure command runs on a small case and writes labelled PNGs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_paper_figures_small_case(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "paper_figures.py"), "--points", "2", "--only",
                          "clones", "--out", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    for name in ("clones_2a.png", "clones_2b.png", "clones_2c.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert out.count("| yes |") == 3  # certified generic <= closed form, >= the 2RR lower bound


def test_fft_figures_small_case(tmp_path: Path) -> None:
    """One randomizer, two small n: single, 2-joint and 4-joint curves with the generic bound."""
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "paper_figures.py"), "--points", "2", "--only", "fft",
                          "--rows", "10-RR", "--n-range", "100", "1000", "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    for name in ("fft_0.1.png", "fft_4.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    rows = [line for line in run.stdout.splitlines() if line.startswith("| fft_")]
    assert len(rows) == 2 and all("| n = 1e3: single " in r and "2-joint" in r and "4-joint" in r for r in rows)
    assert all(r.endswith("| yes |") for r in rows)  # every upper <= generic, every lower <= its upper
