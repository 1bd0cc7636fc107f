"""The build on a real multi-process dask cluster (scheduler and workers started from the ``dask``
command line on 127.0.0.1): workers that cannot see the client's output, a worker SIGKILLed
mid-build, a worker running another engine (refused, named), retries, an unreachable scheduler,
a stopped build's tasks stopping on the workers, a scheduler dying mid-build, a cluster over TLS."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from dask_processes import dask_cluster, running_tasks, tls_files, wait_until
from distributed import Client, LocalCluster

from tablegen import ENGINE_VERSION, store
from tablegen import build as builder
from tablegen import cluster as connection
from tablegen.spec import load_spec

SPEC = """
title = "cluster test table"
[axes]
eps0 = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
n = [50, 200, 800]
delta = [1e-6, 1e-3]
[settings]
resolution = 4
lower_resolution = 6
lower_every = [2, 2]
[[mechanism]]
family = "krr"
k = 3
[[mechanism]]
family = "generic"
"""
SLICES = 12
OTHER_ENGINE = "import tablegen\ntablegen.ENGINE_VERSION = '0'  # another install's engine\n"
SLOW_ROW = """
import time
from tablegen import build
real = build.__dict__.setdefault("real_slice_values", build.slice_values)  # dask may run a preload twice


def slow(task):
    if task.slice[0] == 1:  # the second row: the engine again and again for 10 minutes, as a slow spec's slice
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            real(task)
    return real(task)


build.slice_values = slow
"""


def values(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with xr.open_zarr(path) as ds:
        return ds["eps"].values, ds["eps_lower"].values


def assert_same_table(got: Path, want: Path) -> None:
    for a, b in zip(values(got), values(want), strict=True):
        np.testing.assert_array_equal(a, b)


def quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "spec.toml"
    path.write_text(SPEC)
    return path


@pytest.fixture(scope="module")
def reference(spec_path: Path) -> Path:
    """The table built in this process without dask (``--workers 0``)."""
    out = spec_path.parent / "reference.zarr"
    builder.build(load_spec(spec_path), out, workers=0, progress=False, log=quiet)
    return out


def cli_build(cwd: Path, spec: Path, out: str, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tablegen.cli", "build", "--spec", str(spec), "--out", out, "--no-progress",
               *extra]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def start_build(cwd: Path, spec: Path, out: Path, scheduler: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "tablegen.cli", "build", "--spec", str(spec), "--out", str(out), "--no-progress",
               "--scheduler", scheduler]
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def slow_slice_running(client: Client) -> bool:
    """A slice of the second row (SLOW_ROW: minutes) runs in a worker thread."""
    return any(key.split("-")[2] == "1" for key in running_tasks(client))


def test_a_real_cluster_whose_workers_cannot_see_the_output(spec_path: Path, reference: Path, tmp_path: Path) -> None:
    """Workers in their own working and temporary directories, the client writing a relative
    --out under a folder they never use: first a worker of another engine alone (refused, named,
    the build ends with one line), then two workers of this engine (bit-identical to
    --workers 0), then one of them SIGKILLed mid-build (its nanny restarts it; still identical)."""
    client_dir = tmp_path / "client"
    client_dir.mkdir()
    (tmp_path / "other_engine.py").write_text(OTHER_ENGINE)
    with dask_cluster(tmp_path / "cluster") as cluster:
        cluster.start_worker("other", "--preload", str(tmp_path / "other_engine.py"))
        other = cluster.wait_for({"other"})["other"]
        refused = cli_build(client_dir, spec_path, "t.zarr", "--scheduler", cluster.address)
        assert refused.returncode == 1, refused.stderr
        assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
        assert f"worker other ({other}) runs other code: engine_version 0 (client: {ENGINE_VERSION})" in refused.stderr
        assert "no worker left" in refused.stderr and not (client_dir / "t.zarr").exists()
        cluster.stop("other")

        cluster.start_worker("a")
        cluster.start_worker("b")
        addresses = cluster.wait_for({"a", "b"})
        done = cli_build(client_dir, spec_path, "t.zarr", "--scheduler", cluster.address)
        assert done.returncode == 0, done.stderr
        assert "dask dashboard:" in done.stdout and f"computed {SLICES * 3} curves" in done.stdout
        assert_same_table(client_dir / "t.zarr", reference)
        assert not store.staging_path(client_dir / "t.zarr").exists()

        # one worker SIGKILLed once the client has kept a slice: the nanny restarts it, the
        # scheduler reruns its task, the table is the same
        with Client(cluster.address, timeout=30) as client:
            pid = client.run(os.getpid, workers=[addresses["a"]])[addresses["a"]]
        command = [sys.executable, "-m", "tablegen.cli", "build", "--spec", str(spec_path), "--out", "killed.zarr",
                   "--no-progress", "--scheduler", cluster.address]
        running = subprocess.Popen(command, cwd=client_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while not store.finished(client_dir / "killed.zarr.staging", 3) and time.time() < deadline:
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        assert len(store.finished(client_dir / "killed.zarr.staging", 3)) < SLICES, "not caught mid-build"
        out, err = running.communicate(timeout=180)
        assert running.returncode == 0, err
        assert f"computed {SLICES * 3} curves" in out
        assert_same_table(client_dir / "killed.zarr", reference)
    for name in ("other", "a", "b"):  # no worker wrote anything of the build where it runs
        assert not list((tmp_path / "cluster" / name).rglob("*.zarr*")), name


def test_a_slice_failing_on_every_try_ends_the_build_with_one_message(spec_path: Path, reference: Path,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cluster object passed from Python (``client=``): a slice that fails once is retried
    (the table is still the reference's); one that fails on every try ends the build with one
    message naming the slice, the worker and the error, tried 1 + RETRIES times."""
    real, calls, lock = builder.slice_values, {}, threading.Lock()

    def flaky(t: builder.Task) -> tuple[np.ndarray, np.ndarray]:
        with lock:
            calls[t.slice] = calls.get(t.slice, 0) + 1
            first = calls[t.slice] == 1
        if t.slice == (1, 2) and (first or broken):
            raise RuntimeError("disk on fire")
        return real(t)

    monkeypatch.setattr(builder, "slice_values", flaky)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        broken = False
        builder.build(load_spec(spec_path), tmp_path / "t.zarr", client=client, progress=False, log=quiet)
        assert_same_table(tmp_path / "t.zarr", reference)
        assert calls[(1, 2)] == 2 and client.status == "running"  # the caller's client stays open
        broken, calls = True, {}
        with pytest.raises(builder.BuildFailed) as failed:
            builder.build(load_spec(spec_path), tmp_path / "u.zarr", client=client, progress=False, log=quiet)
    message = str(failed.value)  # named as dask counts: retries=2, so 3 tries; the worker by its name and address
    assert re.match(r"slice generic eps0 1\.5 \(slice 1_2\) failed on every one of its 3 tries \(retries=2\): "
                    r"worker [01] \(inproc://[^)]+\): ", message), message
    assert "RuntimeError: disk on fire" in message and "\n" not in message and "the same command resumes" in message
    assert calls[(1, 2)] == 1 + builder.RETRIES and not (tmp_path / "u.zarr").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _other_protocol() -> Iterator[int]:
    """A peer on 127.0.0.1 that answers every connection with an HTTP error and closes it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.mark.parametrize("peer", ["nobody", "http"])
def test_an_unreachable_scheduler_is_one_line_exit_2_and_nothing_written(spec_path: Path, tmp_path: Path,
                                                                         peer: str) -> None:
    with _other_protocol() as http_port:
        port = http_port if peer == "http" else _free_port()
        start = time.monotonic()
        result = cli_build(tmp_path, spec_path, "t.zarr", "--scheduler", f"tcp://127.0.0.1:{port}", timeout=60)
        seconds = time.monotonic() - start
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: no dask scheduler answered at --scheduler tcp://127.0.0.1:{port}")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert seconds < builder.CONNECT_SECONDS + 15
    assert sorted(p.name for p in tmp_path.iterdir()) == []


class _Scheduler:
    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses

    def scheduler_info(self, n_workers: int = -1) -> dict:
        return {"workers": {f"tcp://10.0.0.{i}:1": {"status": s} for i, s in enumerate(self.statuses)}}


def test_a_stalled_build_says_which_workers_are_paused() -> None:
    line = connection._stalled(_Scheduler(["running", "paused", "paused"]), 5)
    assert "5 slices submitted, 3 workers, 2 paused by dask for memory (tcp://10.0.0.1:1, tcp://10.0.0.2:1)" in line
    assert "no worker is connected" in connection._stalled(_Scheduler([]), 5)


def test_a_stopped_build_leaves_no_slice_computing_on_the_workers(spec_path: Path, tmp_path: Path) -> None:
    """Issue 48: dask cannot interrupt a task in a worker thread, so a build stopped mid-slice left
    it computing for minutes.  A slice of 10 minutes running on the worker: the build stopped by
    SIGINT (exit 130, one line), then another one killed (SIGKILL: the client gone), and each
    time the worker's thread is free within seconds."""
    (tmp_path / "slow.py").write_text(SLOW_ROW)
    out = tmp_path / "t.zarr"
    with dask_cluster(tmp_path / "cluster") as cluster:
        cluster.start_worker("a", "--preload", str(tmp_path / "slow.py"))
        cluster.wait_for({"a"})
        with cluster.client() as client:
            for signum in (signal.SIGINT, signal.SIGKILL):
                running = start_build(tmp_path, spec_path, out, cluster.address)
                wait_until(lambda: slow_slice_running(client), 60, "no slice of the second row started")
                running.send_signal(signum)
                _, err = running.communicate(timeout=60)
                assert running.returncode == (130 if signum == signal.SIGINT else -signal.SIGKILL), err
                if signum == signal.SIGINT:
                    assert err.startswith("error: build stopped by SIGINT: ") and len(err.splitlines()) == 1, err
                seconds = wait_until(lambda: not running_tasks(client), 10, "the worker still computes a slice of "
                                     f"the build stopped by {signal.Signals(signum).name}")
                assert seconds < 10 and not out.exists()


def test_a_scheduler_that_dies_mid_build_is_one_line_naming_it(spec_path: Path, tmp_path: Path) -> None:
    """Issue 48: a scheduler SIGKILLed mid-build gave a 35-line traceback ending in "cancelled";
    now one line naming the scheduler and the slices kept, exit status 1."""
    (tmp_path / "slow.py").write_text(SLOW_ROW)
    out = tmp_path / "t.zarr"
    with dask_cluster(tmp_path / "cluster") as cluster:
        cluster.start_worker("a", "--preload", str(tmp_path / "slow.py"))
        cluster.wait_for({"a"})
        running = start_build(tmp_path, spec_path, out, cluster.address)
        with cluster.client() as client:
            wait_until(lambda: slow_slice_running(client), 60, "no slice of the second row started")
        cluster.stop("scheduler")
        _, err = running.communicate(timeout=60)
    kept = len(store.finished(store.staging_path(out), 3))
    assert running.returncode == 1, err
    assert err == (f"error: the dask scheduler {cluster.address} went away mid-build; {kept} of {SLICES} slices are "
                   f"kept in {store.staging_path(out)}: the same command resumes\n")


def test_a_build_over_tls_equals_the_reference_and_a_plain_client_is_refused(spec_path: Path, reference: Path,
                                                                            tmp_path: Path) -> None:
    """Issue 48: a scheduler and a worker listening on tls:// only, with certificates of a CA made
    here; `tablegen build --scheduler tls://... --tls-ca-file --tls-cert --tls-key` builds the
    table of --workers 0; a tcp:// client, and a tls:// one without the client's files, are
    refused with one line, exit status 2, nothing written."""
    files = {name: str(path) for name, path in tls_files(tmp_path).items()}
    served = ("--tls-ca-file", files["ca"], "--tls-cert", files["cert"], "--tls-key", files["key"])
    client = ("--tls-ca-file", files["ca"], "--tls-cert", files["client_cert"], "--tls-key", files["client_key"])
    with dask_cluster(tmp_path / "cluster", served) as cluster:
        assert cluster.address.startswith("tls://127.0.0.1:")
        cluster.start_worker("a")
        worker = cluster.wait_for({"a"}, builder.client_security(cluster.address, *client[1::2]))["a"]
        assert worker.startswith("tls://")
        done = cli_build(tmp_path, spec_path, "t.zarr", "--scheduler", cluster.address, *client)
        assert done.returncode == 0, done.stderr
        assert_same_table(tmp_path / "t.zarr", reference)
        plain = cli_build(tmp_path, spec_path, "u.zarr", "--scheduler", cluster.address.replace("tls:", "tcp:"),
                          timeout=60)
        no_files = cli_build(tmp_path, spec_path, "u.zarr", "--scheduler", cluster.address, timeout=60)
    assert plain.returncode == 2 and plain.stderr.startswith("error: no dask scheduler answered at --scheduler tcp://")
    assert no_files.returncode == 2 and "needs the client's TLS files: --tls-ca-file and --tls-cert" in no_files.stderr
    for refused in (plain, no_files):
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert not list(tmp_path.glob("u.zarr*"))
