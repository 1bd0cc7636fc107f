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
