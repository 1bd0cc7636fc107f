"""The docs stand alone: no reference to a file outside the repository, to a machine's absolute
path, to a private network address, or to a script or page that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("bench/*.md")])
OUTSIDE = re.compile(r"\.\./shared|shared/papers|DESIGN\.md|STYLE\.md|/work/|/root/|/home/[a-z]")
PRIVATE_ADDRESS = re.compile(r"\b(10\.\d+\.\d+\.\d+|192\.168\.\d+\.\d+|172\.(1[6-9]|2\d|3[01])\.\d+\.\d+)\b")
SCRIPT = re.compile(r"\b((?:bench|examples|tests|tablegen|lookup|workflows)/[\w/.-]+\.(?:py|toml|c|h|md))\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_path_outside_the_repository(page: Path) -> None:
    text = page.read_text()
    found = [(n, line) for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, f"{_name(page)} refers outside the repository: {found[:3]}"
    assert not PRIVATE_ADDRESS.search(text), f"{_name(page)} names a private network address; use a host name"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_named_files_exist(page: Path) -> None:
    text = page.read_text()
    missing = sorted({m for m in SCRIPT.findall(text) if not re.search(r"\*|[A-Z]{4}", m) and not (ROOT / m).exists()})
    links = [m for m in LINK.findall(text) if not re.match(r"[a-z]+:", m)]
    missing += [m for m in links if not (page.parent / m).exists()]
    assert not missing, f"{_name(page)} names files that do not exist: {missing}"


def test_the_check_can_fail(tmp_path: Path) -> None:
    """The patterns catch what they are for (a test that could never fail checks nothing)."""
    assert OUTSIDE.search("see `../shared/DESIGN.md` section 3")
    assert OUTSIDE.search("engine: /work/main @ 53c2744")
    assert PRIVATE_ADDRESS.search("--scheduler tcp://10.0.0.1:8786")
    assert not PRIVATE_ADDRESS.search("--scheduler tcp://scheduler-host:8786")
    assert SCRIPT.findall("`python bench/spectral_bench.py`") == ["bench/spectral_bench.py"]
