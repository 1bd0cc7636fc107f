"""A command that needs an optional dependency the installation lacks says, in one line, which
extra to install (no traceback)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lookup.cli.commands import main as lookup_main
from lookup.cli.extras import missing_dependency
from tablegen.cli import main as tablegen_main

SMOKE = Path(__file__).resolve().parents[3] / "workflows" / "smoke.toml"


@pytest.mark.parametrize(("main", "args", "module", "extra"), [
    (lookup_main, ["plot", "slack", "--delta", "1e-8", "--out", "x.png"], "matplotlib", "plot"),
    (tablegen_main, ["verify", str(SMOKE.parents[1] / "data" / "default.zarr")], "xarray", "build"),
    (tablegen_main, ["build", "--spec", str(SMOKE), "--out", "t.zarr", "--workers", "0"], "xarray", "build"),
    (tablegen_main, ["build", "--spec", str(SMOKE), "--out", "t.zarr", "--no-progress"], "distributed", "build"),
])
def test_missing_extra_is_one_line(main, args, module, extra, monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert f"needs the Python package '{module}'" in lines[0] and f"pip install 'shuffle-eps[{extra}]'" in lines[0]
    assert not any(tmp_path.iterdir())  # stopped before writing anything


def test_unknown_missing_module_is_not_blamed_on_an_extra() -> None:
    assert missing_dependency(ModuleNotFoundError("no", name="not_a_dependency")) is None
    assert "pip install 'shuffle-eps'" in missing_dependency(ModuleNotFoundError("no", name="scipy.special"))


def test_serve_without_its_extra_is_one_line(monkeypatch, tmp_path) -> None:
    monkeypatch.delitem(sys.modules, "lookup.service.app", raising=False)  # imported afresh, without starlette
    for name in ["starlette", *(m for m in sys.modules if m.startswith("starlette."))]:  # submodules imported
        monkeypatch.setitem(sys.modules, name, None)  # by earlier tests are found without their package
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(lookup_main, ["serve", "--port", "0"])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert "pip install 'shuffle-eps[serve]'" in result.output


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_serve_port_out_of_range_is_refused(port: str) -> None:
    result = CliRunner().invoke(lookup_main, ["serve", "--port", port])
    assert result.exit_code == 2 and "--port must be in 0..65535" in result.output, result.output
