"""The published package: the sdist and the wheel built from it carry the shipped tables, and a
plain (non-editable) install answers from them in any working directory.

The wheel is built once per module with the installed setuptools (no build isolation, no
download) from a copy of the checkout, then installed without dependencies into a fresh
virtual environment that reuses this interpreter's packages (its site directories, in a .pth file).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from lookup.store.table import open_table, read_verified

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "lookup", "tablegen", "data")
TABLES = ("default.zarr", "protocols.zarr")
QUERY = ["--mechanism", "krr", "--k", "10", "--eps0", "2", "--n", "1e6", "--delta", "1e-8", "--json"]
BUILD = "import sys; from setuptools import build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"


def _setuptools_is_recent() -> bool:
    try:
        return int(metadata.version("setuptools").split(".")[0]) >= 77
    except metadata.PackageNotFoundError:
        return False


pytestmark = pytest.mark.skipif(not _setuptools_is_recent(),
                                reason="needs setuptools>=77 (pip install -e '.[test]')")


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _build(hook: str, source: Path, out: Path) -> Path:
    """``build_meta.<hook>`` run in ``source``, writing into ``out``: the path it built."""
    return out / _run([sys.executable, "-c", BUILD, hook, str(out)], cwd=source).strip().splitlines()[-1]


def _untar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tar:
        # the "data" filter where this Python has it (3.11.4+): no links or paths out of dest
        tar.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, and the wheel built from the unpacked sdist (as ``python -m build`` does)."""
    root = tmp_path_factory.mktemp("dist")
    source, out = root / "checkout", root / "dist"
    ignore = shutil.ignore_patterns("__pycache__", "*.staging", "*.egg-info", "build", "_data")
    source.mkdir()
    out.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    sdist = _build("build_sdist", source, out)
    _untar(sdist, root / "unpacked")
    return {"sdist": sdist, "wheel": _build("build_wheel", next((root / "unpacked").iterdir()), out)}


@pytest.fixture(scope="module")
def venv(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed, its dependencies from this
    interpreter's site directories (listed in a .pth file: ``--system-site-packages`` would give
    the *base* Python's, which lacks them when the tests themselves run in a virtual
    environment); pip comes from here too (``python -m pip --python``)."""
    env = tmp_path_factory.mktemp("venv") / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], cwd=env.parent)
    python = str(env / "bin" / "python")
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=env.parent).strip())
    sites = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    (purelib / "_test_dependencies.pth").write_text("\n".join(sites) + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index",
          "--force-reinstall", str(dist["wheel"])], cwd=env.parent)
    return env


def _clean_env() -> dict[str, str]:
    """This environment without anything that points at the checkout or another table."""
    drop = {"PYTHONPATH", "SHUFFLE_EPS_TABLE", "SHUFFLE_EPS_PROTOCOL_TABLE", "SHUFFLE_EPS_CACHE"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.mark.parametrize("kind", ["sdist", "wheel"])
def test_distributions_carry_verifiable_tables(dist: dict[str, Path], kind: str, tmp_path: Path) -> None:
    """Every shipped table is in the archive, whole: its SHA-256 manifest matches its files and
    it loads to the same table as the checkout's."""
    if kind == "wheel":
        with zipfile.ZipFile(dist["wheel"]) as archive:
            archive.extractall(tmp_path)
        stores = tmp_path / "lookup" / "_data"
    else:
        _untar(dist["sdist"], tmp_path)
        stores = next(tmp_path.iterdir()) / "data"
        sources = {p.name for p in (next(tmp_path.iterdir()) / "lookup" / "device" / "c").iterdir()}
        assert {"shuffle_eps_device.h", "shuffle_eps_device.c", "shuffle_eps_query.c"} <= sources  # the C reader
    for name in TABLES:
        assert (stores / name / "MANIFEST.sha256").is_file(), f"{name} missing from the {kind}"
        assert read_verified(stores / name)  # raises on any mismatch
    # the shuffled Gaussian's sigma file, byte for byte (its header seals it: lookup.device.files)
    assert (stores / "gaussian.sheps").read_bytes() == (ROOT / "data" / "gaussian.sheps").read_bytes()
    shipped, checkout = open_table(stores / "default.zarr"), open_table(ROOT / "data" / "default.zarr")
    assert shipped.labels() == checkout.labels()
    assert (shipped.upper == checkout.upper).all()


def test_installed_wheel_answers_from_any_directory(venv: Path, tmp_path: Path) -> None:
    """``lookup eps`` answers from the table the wheel carries and ``tablegen compute`` computes
    live, run from a directory outside the checkout with the installed package only."""
    env = _clean_env()
    located = _run([str(venv / "bin" / "python"), "-c", "import lookup, tablegen; print(lookup.__file__); "
                    "print(tablegen.__file__); print(lookup.open_table().path)"], cwd=tmp_path, env=env)
    assert all(Path(line).is_relative_to(venv) for line in located.split()), located
    table = json.loads(_run([str(venv / "bin" / "lookup"), "eps", *QUERY], cwd=tmp_path, env=env))
    live = json.loads(_run([str(venv / "bin" / "tablegen"), "compute", *QUERY], cwd=tmp_path, env=env))
    checkout = open_table(ROOT / "data" / "default.zarr")
    row = checkout.row("krr", {"k": 10})
    e, j, d = (list(axis).index(v) for axis, v in ((checkout.eps0, 2.0), (checkout.n, 1e6), (checkout.delta, 1e-8)))
    assert table["source"] == "table" and table["eps"] == checkout.upper[row, e, j, d]
    # both are certified upper bounds with a lower bound below the other's upper bound (the table
    # stores lower bounds on a sub-grid only: None elsewhere)
    assert live["certified"] and live["eps_lower"] <= table["eps"]
    assert table["eps_lower"] is None or table["eps_lower"] <= live["eps"]
    assert live["eps"] == pytest.approx(table["eps"], rel=0.05)
    calibration = json.loads(_run([str(venv / "bin" / "lookup"), "calibrate", "--mechanism", "histogram", "--eps",
                                   "1", "--delta", "1e-6", "--n", "1e5", "--json"], cwd=tmp_path, env=env))
    assert calibration["source"] == "table" and 0 < calibration["p"] < 1


WORKER_SPEC = """
title = "a worker from the wheel"
[axes]
eps0 = [1.0, 2.0]
n = [50, 200]
delta = [1e-6, 1e-3]
[settings]
resolution = 4
lower_resolution = 6
lower_every = [1, 1]
[[mechanism]]
family = "krr"
k = 3
"""


def test_a_dask_worker_installed_from_the_wheel_serves_the_client(venv: Path, tmp_path: Path) -> None:
    """The cluster recipe (docs/cluster.md): workers get the package as the wheel built by
    ``pip wheel``, nothing of the checkout. A ``dask worker`` run by the wheel's venv, in a
    directory of its own, computes a build whose client runs from the checkout: the client accepts
    its results (same engine code) and the table equals one computed without dask."""
    import tomllib

    import numpy as np
    import xarray as xr
    from distributed import Client, LocalCluster

    from tablegen.build import build
    from tablegen.spec import spec_from_dict

    spec = spec_from_dict(tomllib.loads(WORKER_SPEC), "wheel-worker")
    build(spec, tmp_path / "local.zarr", workers=0, progress=False, log=lambda _: None)
    home = tmp_path / "worker"
    home.mkdir()
    with LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster, timeout=30) as client:
        worker = subprocess.Popen([str(venv / "bin" / "python"), "-m", "distributed.cli.dask_worker",
                                   cluster.scheduler_address, "--nthreads", "1", "--no-dashboard",
                                   "--local-directory", str(home)], cwd=home, env=_clean_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client.wait_for_workers(1, timeout=60)
            located = client.run(lambda: __import__("tablegen").__file__)
            assert all(Path(path).is_relative_to(venv) for path in located.values()), located
            build(spec, tmp_path / "cluster.zarr", client=client, progress=False, log=lambda _: None)
        finally:
            worker.terminate()
            worker.wait(30)
    with xr.open_zarr(tmp_path / "local.zarr") as want, xr.open_zarr(tmp_path / "cluster.zarr") as got:
        for name in ("eps", "eps_lower"):
            np.testing.assert_array_equal(got[name].values, want[name].values)
