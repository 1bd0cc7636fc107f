"""Build step: the wheel carries the shipped tables.

The tables live in ``data/`` at the top of the repository (where ``tablegen build`` writes
them); a wheel or an install from source gets a copy of every published ``data/*.zarr`` as
``lookup/_data/*.zarr``, and of every device file ``data/*.sheps`` (the shuffled Gaussian's sigma
file), where ``lookup.store.table.shipped_table`` finds it.  An editable install
reads ``data/`` in place.  Everything else is declared in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithTables(build_py):
    """``build_py`` that also copies ``data/*.zarr`` and ``data/*.sheps`` into the built ``lookup/_data/``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "lookup" / "_data"
        shutil.rmtree(target, ignore_errors=True)  # a table removed from data/ leaves no stale copy
        for store in sorted(Path("data").glob("*.zarr")):
            if (store / "MANIFEST.sha256").is_file():  # published tables only, never a torn build
                shutil.copytree(store, target / store.name)
        for device in sorted(Path("data").glob("*.sheps")):  # one file each, sealed by its own SHA-256
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(device, target / device.name)


setup(cmdclass={"build_py": BuildWithTables})
