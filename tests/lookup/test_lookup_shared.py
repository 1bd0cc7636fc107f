"""The served table's rows in memory once (``lookup.shared``): the server writes them into a private
directory, each worker maps them read-only and answers exactly as from the table it opened; a
directory written for another table, or not private, is not used (the worker decodes its rows
itself); the directory is removed when the server stops, and at the next start where its server died."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lookup
from lookup import pool, shared
from lookup.api import json_ready
from lookup.table import Table, TableError, open_table

QUERIES = [("krr", {"k": 3}, 0.7, 30, 3e-8), ("krr", {"k": 3}, 1.5, 50, 1e-6), ("generic", {}, 2.9, 79, 2e-4),
           ("generic", {}, 4.0, 20, 1e-9), ("generic", {}, 0.5, 80, 1e-3), ("krr", {"k": 3}, 3.3, 41, 5e-5)]


@pytest.fixture()
def published(table_path: Path) -> Any:
    """(the server's copy of the table, the directory it published), removed at the end.  The copy
    (``replace``) shares the cached table's surfaces, which ``publish`` does not replace."""
    table = replace(open_table(table_path))
    directory = shared.publish(table)
    assert directory is not None
    yield table, directory
    shared.remove(directory)


def bits(row: np.ndarray) -> bytes:
    return np.ascontiguousarray(row, dtype="<f8").tobytes()


def answers(table: Table) -> list[Any]:
    """Table answers (no engine) of eps, delta and eps0-max at ``QUERIES`` (a refusal: its message)."""
    out: list[Any] = []
    for mechanism, params, eps0, n, delta in QUERIES:
        for kind, numbers in (("eps", {"eps0": eps0, "n": n, "delta": delta}),
                              ("delta", {"eps0": eps0, "n": n, "eps": 0.5 * eps0}),
                              ("eps0_max", {"eps": 0.5 * eps0, "n": n, "delta": delta})):
            try:
                answer = getattr(lookup, kind)(mechanism, table=table, live=False, max_slack=None, **numbers, **params)
                out.append(json_ready(kind, answer))
            except TableError as err:
                out.append(str(err))
    return out


def test_the_directory_is_private_named_by_the_server_and_records_the_table(published: Any) -> None:
    table, directory = published
    info = os.lstat(directory)
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
    assert directory.name.startswith(f"{shared.PREFIX}{os.getpid()}-") and directory.parent == shared.places()[0]
    record = json.loads((directory / shared.RECORD).read_text())
    assert record["digest"] == table.digest and record["shape"] == list(table.upper.shape)
    rows = table.upper.shape[0]
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [shared.RECORD, *(f"{name}-{r}.npy" for name in shared.SURFACES for r in range(rows))])
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o400 for p in directory.iterdir())  # nobody writes them again


def test_a_workers_rows_are_read_only_maps_of_the_servers_files(published: Any, table_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    server, directory = published
    monkeypatch.setattr(pool, "_WORKER_TABLE", None)
    pool.worker_start(str(table_path), 0, 0, str(directory))  # what each worker runs at its start
    worker, opened = pool.worker_table(), open_table(table_path)
    assert worker is not opened and worker.digest == opened.digest
    for table in (server, worker):  # the server answers from the same maps
        for name in shared.SURFACES:
            for r in range(opened.upper.shape[0]):
                row = getattr(table, name).row(r)
                assert isinstance(row.base, np.memmap) and not row.flags.writeable
                assert Path(row.base.filename).parent == directory
                assert bits(row) == bits(getattr(opened, name).row(r))  # bit for bit, NaN lower bounds too
    with pytest.raises(ValueError, match="read-only"):
        worker.upper.row(0)[0, 0, 0] = 0.0


def test_answers_from_mapped_rows_equal_those_of_the_opened_table(published: Any, table_path: Path) -> None:
    server, directory = published
    worker = shared.mapped(open_table(table_path), directory)
    assert isinstance(worker.upper.row(0).base, np.memmap)
    expected = answers(open_table(table_path))
    assert answers(worker) == expected and answers(server) == expected
    for mechanism, params, eps0, n, delta in QUERIES[:2]:  # refined: the estimate read from the rows, certified
        refined = [json_ready("eps", lookup.eps(mechanism, eps0=eps0, n=n, delta=delta, table=table, live=True,
                                                max_slack=0.0, quick=True, **params))
                   for table in (worker, open_table(table_path))]
        assert refined[0] == refined[1]


def test_a_directory_of_another_table_or_not_private_is_not_used(published: Any, table_path: Path) -> None:
    _, directory = published
    opened = open_table(table_path)
    other = replace(opened, digest="0" * 64)
    assert shared.mapped(other, directory) is other  # another table's digest: its own rows, decoded
    assert shared.mapped(opened, directory / "missing") is opened and shared.mapped(opened, None) is opened
    directory.chmod(0o750)
    try:
        assert shared.mapped(opened, directory) is opened  # others may enter: not trusted
    finally:
        directory.chmod(0o700)
    assert shared.mapped(opened, directory) is not opened


def test_a_row_file_that_does_not_read_back_as_the_row_is_decoded(published: Any, table_path: Path) -> None:
    _, directory = published
    damaged = directory / "upper-1.npy"
    damaged.chmod(0o600)
    damaged.unlink()
    np.save(damaged, np.zeros((2, 2)))
    worker, opened = shared.mapped(open_table(table_path), directory), open_table(table_path)
    assert not isinstance(worker.upper.row(1).base, np.memmap) and bits(worker.upper.row(1)) == bits(
        opened.upper.row(1))
    assert isinstance(worker.upper.row(0).base, np.memmap)


def test_stale_directories_of_dead_servers_are_removed(published: Any) -> None:
    _, live_dir = published
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    stale = shared.places()[0] / f"{shared.PREFIX}{int(dead.stdout)}-test"
    stale.mkdir(mode=0o700)
    (stale / "upper-0.npy").write_bytes(b"x")
    assert stale in shared.remove_stale()
    assert not stale.exists() and live_dir.is_dir()  # this process's own directory stays
    shared.remove(live_dir)
    assert not live_dir.exists()


def _shared_directory(pid: int) -> Path:
    found = [p for place in shared.places() for p in place.glob(f"{shared.PREFIX}{pid}-*")]
    assert len(found) == 1, found
    return found[0]


def _mapped_files(pid: int) -> set[str]:
    """The files mapped by process ``pid`` (/proc/PID/maps)."""
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {line.split(maxsplit=5)[5] for line in lines if len(line.split(maxsplit=5)) == 6}


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            pass
    return found


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc (Linux)")
def test_the_service_shares_its_rows_with_its_workers_and_removes_them_at_shutdown(start_server: Any) -> None:
    from test_lookup_serve import get

    server = start_server("--live-workers", "1", "--refine-workers", "1")
    deadline = time.monotonic() + 60
    while not json.loads(get(f"{server.base}/healthz")[1])["workers_ready"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    directory = _shared_directory(server.process.pid)
    assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
    files = {str(p) for p in directory.glob("*.npy")}
    maps = {pid: _mapped_files(pid) & files for pid in _children(server.process.pid)}
    assert files <= _mapped_files(server.process.pid)  # the server's own rows are these maps
    assert any(found for found in maps.values()), maps  # the refinement worker warmed up on them
    status, body, _ = get(f"{server.base}/v1/eps?mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-6&max_slack=0")
    assert status == 200 and json.loads(body)["eps"] > 0
    server.stop()  # SIGTERM: uvicorn's graceful shutdown, the application's lifespan ends
    assert not directory.exists()
