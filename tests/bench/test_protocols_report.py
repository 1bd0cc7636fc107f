"""The protocols report (docs/protocols.md and its figure) runs on a small case."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_protocols_report_small_case(tmp_path: Path) -> None:
    plot = tmp_path / "protocols_error.png"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "protocols_report.py"), "--n-values", "1000", "3000",
                          "--repeats", "2", "--plot", str(plot)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    error_rows = [line.split("|") for line in run.stdout.splitlines() if line.startswith("| 1e+03 | 0.0")
                  or line.startswith("| 3e+03 | 0.0")]
    assert len(error_rows) == 2
    for cells in error_rows:  # | n | 1 - p | median | worst | bound (calibrated p) | bound (paper p) |
        assert float(cells[3]) <= float(cells[4]) <= float(cells[5])  # Theorem 3.1 holds at the calibrated p
    noise_rows = [line for line in run.stdout.splitlines() if line.startswith(("| 1e+03 | ", "| 3e+03 | "))]
    assert len(noise_rows) == 2 * 2 * 3 + 2  # two protocols x two n x three eps, then the error rows
