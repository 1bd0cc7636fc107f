"""A small table built once per test session (krr k=3 and generic, small n, so exact sums and
live answers are cheap), and the independent reference of tests/tablegen and the bombs of trust/
on the path of the tests in every room."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tablegen"))
sys.path.insert(0, str(Path(__file__).parent / "trust"))  # test_lookup_bombs, whose files device/ measures too
sys.path.insert(0, str(Path(__file__).parent / "service"))  # test_lookup_serve, whose helpers answer/ uses too

SPEC = """
title = "lookup test table"
[axes]
eps0 = [0.5, 1.0, 2.0, 4.0]
n = [20, 40, 80]
delta = [1e-9, 1e-7, 1e-5, 1e-3]
[settings]
resolution = 5
lower_resolution = 10
lower_every = [1, 1]
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


SLOW_HOOK = '''
import os
if os.environ.get("SHUFFLE_EPS_TEST_SLOW"):  # test servers only: every engine call made slow
    import functools, time
    import lookup.answer.live as _live
    import lookup.service.pool as _pool
    _pause = float(os.environ["SHUFFLE_EPS_TEST_SLOW"])
    def _slow(call):
        @functools.wraps(call)
        def wrapped(*args, **kwargs):
            if not _pool.warming():  # a worker's warm-up at start is not a client's task
                time.sleep(_pause)
            return call(*args, **kwargs)
        return wrapped
    for _name in ("eps", "eps_upper", "certifies", "proves_above", "delta", "delta_upper", "eps0_max",
                  "composed_eps"):
        setattr(_live, _name, _slow(getattr(_live, _name)))
'''


class HttpServer:
    """``lookup serve`` in a subprocess on a free loopback port (its log in a file); ``hook`` is
    Python run at the start of the server and of each worker (a sitecustomize module on PYTHONPATH,
    which runs in a venv too, unlike usercustomize), to inject faults."""

    def __init__(self, table: Path, tmp: Path, *args: str, slow: float = 0.0, hook: str = "",
                 ready: bool = True) -> None:
        import os
        import subprocess
        import time
        import urllib.request

        hooks = tmp / "hook"
        hooks.mkdir(exist_ok=True)
        (hooks / "sitecustomize.py").write_text(SLOW_HOOK + hook)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])),
               "SHUFFLE_EPS_TEST_SLOW": str(slow) if slow else ""}
        env.pop("SHUFFLE_EPS_CACHE", None)
        self.log = tmp / f"server-{time.monotonic_ns()}.log"
        self.log_file = self.log.open("w")
        self.process = subprocess.Popen([sys.executable, "-m", "lookup.cli", "serve", "--port", "0", "--table",
                                         str(table), "--no-access-log", *args], stdout=self.log_file,
                                        stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        self.base = ""
        while time.monotonic() < deadline and self.process.poll() is None:
            for line in self.log.read_text().splitlines():
                if line.startswith("serving "):
                    self.base = "http://" + line.split()[1]
            if self.base and not ready:  # listening: the caller watches it warm up
                return
            if self.base:
                try:
                    with urllib.request.urlopen(self.base + "/healthz", timeout=5) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the server did not start: {self.log.read_text()}")

    def stop(self) -> int:
        import subprocess

        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_file.close()
        return self.process.returncode


@pytest.fixture(scope="module")
def start_server(table_path: Path, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """start_server(*cli_args, slow=seconds, hook=code, ready=False) -> HttpServer, stopped at the end of the
    module; returned once /healthz says ready (ready=False: once it listens)."""
    started: list[HttpServer] = []

    def start(*args: str, slow: float = 0.0, hook: str = "", ready: bool = True) -> HttpServer:
        server = HttpServer(table_path, tmp_path_factory.mktemp("serve"), *args, slow=slow, hook=hook, ready=ready)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
