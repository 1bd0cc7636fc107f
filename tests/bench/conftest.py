"""Run a bench section in this process (its figures stay open for inspection)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the bench package lives beside the installed ones, at the repository's root
    sys.path.insert(0, str(ROOT))


@pytest.fixture()
def run_bench(capsys: pytest.CaptureFixture) -> Callable[..., tuple[str, list]]:
    """``run_bench("docs", "--only", "papers", *args)`` -> (stdout, the matplotlib figures it left open); the
    section records nothing (``--no-record``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.__main__ import SECTIONS

    def run(section: str, *args: str) -> tuple[str, list]:
        module = importlib.import_module(SECTIONS[section][0])
        plt.close("all")
        module.main([*args, "--no-record"])
        return capsys.readouterr().out, [plt.figure(n) for n in plt.get_fignums()]

    yield run
    plt.close("all")
