"""Run a bench script in this process (its figures stay open for inspection)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def run_bench(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Callable[..., tuple[str, list]]:
    """``run_bench("paper_figures", *args)`` -> (stdout, the matplotlib figures it left open)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def run(name: str, *args: str) -> tuple[str, list]:
        path = ROOT / "bench" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        plt.close("all")
        monkeypatch.setattr(sys, "argv", [str(path), *args])
        module.main()
        return capsys.readouterr().out, [plt.figure(n) for n in plt.get_fignums()]

    yield run
    plt.close("all")
