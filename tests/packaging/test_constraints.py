"""CI's pinned versions (.ci/constraints.txt) and its drift report (.ci/drift.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("drift", ROOT / ".ci" / "drift.py")
drift = importlib.util.module_from_spec(spec)
spec.loader.exec_module(drift)


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    names = {drift.canonical(re.split(r"[<>=\[ ;]", r, maxsplit=1)[0]) for r in requirements}
    return names - {"shuffle-eps"}


def test_every_declared_dependency_is_pinned() -> None:
    """CI installs nothing unpinned that the package asks for by name."""
    pins = drift.pinned(ROOT / ".ci" / "constraints.txt")
    assert _declared() <= set(pins), sorted(_declared() - set(pins))
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version) for version in pins.values())


def test_drift_names_moved_and_new_packages(tmp_path: Path) -> None:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# pins\nNumPy==2.4.6\ndp_accounting==0.5.0  # comment\nscipy==1.17.1\n")
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"install": [{"metadata": {"name": n, "version": v}} for n, v in [
        ("shuffle-eps", "0.1.0"), ("numpy", "2.4.6"), ("dp-accounting", "0.6.0"), ("scipy", "1.17.1"),
        ("zarr", "3.1.6")]]}))
    assert drift.drift(report, constraints) == ["dp-accounting 0.5.0 -> 0.6.0", "zarr new: 3.1.6"]
