"""Regenerate the figures of docs/plots.md with the commands written there.

Run as ``python bench/docs_figures.py [--out DIR]``: every ``lookup plot ... --out FILE`` line of
docs/plots.md is run against the shipped table (into DIR instead of FILE's folder when given).
tests/bench/test_docs_figures.py runs them into a temporary folder and checks that the committed
figures carry the same title and axis labels (PNG metadata written by ``lookup.plot``).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "plots.md"


def commands(doc: Path = DOC) -> list[list[str]]:
    """The arguments of ``lookup`` of every ``lookup plot`` command line in ``doc``."""
    return [shlex.split(line)[1:] for line in doc.read_text().splitlines() if line.startswith("lookup plot ")]


def target(args: list[str]) -> Path:
    """The figure a command writes (its ``--out``), relative to the repository."""
    return Path(args[args.index("--out") + 1])


def run(args: list[str], out_dir: Path | None = None) -> Path:
    """Run one documented command on the shipped table, writing into ``out_dir`` if given."""
    from lookup.cli import main as lookup_main

    path = ROOT / target(args) if out_dir is None else out_dir / target(args).name
    args = [*args, "--table", str(ROOT / "data" / "default.zarr")]
    args[args.index("--out") + 1] = str(path)
    lookup_main.main(args, standalone_mode=False)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder to write into (default: as documented)")
    options = parser.parse_args()
    for args in commands():
        run(args, options.out)  # prints "wrote: FILE"


if __name__ == "__main__":
    main()
