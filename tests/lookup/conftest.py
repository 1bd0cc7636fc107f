"""A small table built once per test session (krr k=3 and generic, small n, so exact sums and
live answers are cheap), and the independent reference of tests/tablegen on the path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tablegen"))

SPEC = """
title = "lookup test table"
[axes]
eps0 = [0.5, 1.0, 2.0, 4.0]
n = [20, 40, 80]
delta = [1e-9, 1e-7, 1e-5, 1e-3]
[settings]
resolution = 5
lower_resolution = 10
[[mechanism]]
family = "krr"
k = 3
[[mechanism]]
family = "generic"
"""


@pytest.fixture(scope="session")
def table_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tomllib

    from tablegen.build import build
    from tablegen.spec import spec_from_dict

    root = tmp_path_factory.mktemp("table")
    out = root / "small.zarr"
    build(spec_from_dict(tomllib.loads(SPEC), "lookup-test"), out, workers=0, progress=False, log=lambda _: None)
    return out
