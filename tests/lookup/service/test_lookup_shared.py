"""The served table's rows in memory once (``lookup.service.shared``): the server writes them into a sealed
memfd, each worker maps it read-only and answers exactly as from the table it opened; rows written
for another table, or a file not sealed, are not used (the worker decodes its rows itself); nobody,
the service's own account included, can change them once sealed (issue 55)."""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lookup
from lookup.answer.api import json_ready
from lookup.service import pool, shared
from lookup.store.table import Table, TableError, open_table

QUERIES = [("krr", {"k": 3}, 0.7, 30, 3e-8), ("krr", {"k": 3}, 1.5, 50, 1e-6), ("generic", {}, 2.9, 79, 2e-4),
           ("generic", {}, 4.0, 20, 1e-9), ("generic", {}, 0.5, 80, 1e-3), ("krr", {"k": 3}, 3.3, 41, 5e-5)]


@pytest.fixture()
def published(table_path: Path) -> Any:
    """(the server's copy of the table, the sealed rows it published), closed at the end.  The copy
    (``replace``) shares the cached table's surfaces, which ``publish`` does not replace."""
    if shared.sealing() is None:
        pytest.skip("no sealed memfd on this system: every process decodes its own rows")
    table = replace(open_table(table_path))
    rows = shared.publish(table)
    assert rows is not None
    yield table, rows
    shared.remove(rows)


def _is_mapped(row: np.ndarray) -> bool:
    """Whether ``row`` is a view of a memory map (the sealed rows), not decoded memory."""
    base = row
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)


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


def test_the_rows_are_a_sealed_memfd_found_by_no_path(published: Any) -> None:
    table, rows = published
    seals = fcntl.fcntl(rows.fd, fcntl.F_GET_SEALS)
    assert seals & shared.sealing() == shared.sealing()
    record = json.loads(rows.handle)
    assert record["pid"] == os.getpid() and record["digest"] == table.digest
    assert record["shape"] == list(table.upper.shape)
    assert os.readlink(f"/proc/self/fd/{rows.fd}").startswith(f"/memfd:{shared.NAME}")


def _tamper(rows: Any) -> list[str]:
    """Every way the service's own account tried to change the shared rows after the server checked
    them (issue 55: ``chmod 600`` then an edit of a row file, and all processes answered it); the
    ways that succeeded."""
    done = []
    if isinstance(rows, Path):  # the row files of before: owner-writable after a chmod
        target = rows / "upper-0.npy"
        target.chmod(0o600)
        data = bytearray(target.read_bytes())
        header = len(data) - int(np.prod(np.load(target, mmap_mode="r").shape)) * 8
        values = np.frombuffer(bytes(data[header:]), dtype="<f8") * 0.5
        with open(target, "r+b") as handle:
            handle.seek(header)
            handle.write(values.tobytes())
        return ["chmod and rewrite"]
    path = f"/proc/self/fd/{rows.fd}"
    os.chmod(path, 0o600)  # permissions do not matter: the seals do
    for flags in (os.O_RDWR, os.O_WRONLY):
        try:
            fd = os.open(path, flags)
        except OSError:
            continue
        try:
            os.pwrite(fd, np.zeros(8).tobytes(), 0)
            done.append("write")
        except OSError:
            pass
        try:
            os.ftruncate(fd, 0)
            done.append("truncate")
        except OSError:
            pass
        try:
            mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            done.append("writable map")
        except OSError:
            pass
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 0)
        except OSError:
            pass
        os.close(fd)
    return done


def test_the_shared_rows_cannot_be_changed_after_the_server_checked_them(table_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 55: the rows under /dev/shm were mode 0400, which does not stop their owner: chmod 600,
    a row scaled by 0.5, and the server and its workers answered it, certified.  Now every way to
    write, truncate or map them writable fails, and the answers are unchanged."""
    expected = answers(open_table(table_path))
    server = replace(open_table(table_path))
    rows = shared.publish(server)
    assert rows is not None, "no shared rows"
    try:
        handle = rows.handle if hasattr(rows, "handle") else str(rows)
        monkeypatch.setattr(pool, "_WORKER_TABLE", None)
        pool.worker_start(str(table_path), 0, 0, handle)  # a worker started after the server checked them
        assert _tamper(rows) == []
        assert answers(server) == expected and answers(pool.worker_table()) == expected
        assert answers(shared.mapped(open_table(table_path), handle)) == expected  # a worker started later
    finally:
        shared.remove(rows)


def test_a_workers_rows_are_read_only_maps_of_the_servers_sealed_rows(published: Any, table_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    server, rows = published
    monkeypatch.setattr(pool, "_WORKER_TABLE", None)
    pool.worker_start(str(table_path), 0, 0, rows.handle)  # what each worker runs at its start
    worker, opened = pool.worker_table(), open_table(table_path)
    assert worker is not opened and worker.digest == opened.digest
    for table in (server, worker):  # the server answers from the same maps
        for name in shared.SURFACES:
            for r in range(opened.upper.shape[0]):
                row = getattr(table, name).row(r)
                assert _is_mapped(row) and not row.flags.writeable
                assert bits(row) == bits(getattr(opened, name).row(r))  # bit for bit, NaN lower bounds too
    with pytest.raises(ValueError, match="read-only"):
        worker.upper.row(0)[0, 0, 0] = 0.0


def test_answers_from_mapped_rows_equal_those_of_the_opened_table(published: Any, table_path: Path) -> None:
    server, rows = published
    worker = shared.mapped(open_table(table_path), rows.handle)
    assert _is_mapped(worker.upper.row(0))
    expected = answers(open_table(table_path))
    assert answers(worker) == expected and answers(server) == expected
    for mechanism, params, eps0, n, delta in QUERIES[:2]:  # refined: the estimate read from the rows, certified
        refined = [json_ready("eps", lookup.eps(mechanism, eps0=eps0, n=n, delta=delta, table=table, live=True,
                                                max_slack=0.0, quick=True, **params))
                   for table in (worker, open_table(table_path))]
        assert refined[0] == refined[1]


def test_rows_of_another_table_unsealed_or_another_file_are_not_used(published: Any, table_path: Path) -> None:
    _, rows = published
    opened = open_table(table_path)
    other = replace(opened, digest="0" * 64)
    assert shared.mapped(other, rows.handle) is other  # another table's digest: its own rows, decoded
    assert shared.mapped(opened, None) is opened
    record = json.loads(rows.handle)
    unsealed = os.memfd_create("unsealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(unsealed, record["size"])
        info = os.fstat(unsealed)
        forged = {**record, "fd": unsealed, "dev": info.st_dev, "ino": info.st_ino}
        assert shared.mapped(opened, json.dumps(forged)) is opened  # writable: never mapped
        assert shared.mapped(opened, json.dumps({**record, "fd": unsealed})) is opened  # another file
    finally:
        os.close(unsealed)
    assert shared.mapped(opened, "not json") is opened
    assert shared.mapped(opened, rows.handle) is not opened


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
    memfd = f"/memfd:{shared.NAME} (deleted)"
    assert memfd in _mapped_files(server.process.pid)  # the server's own rows are these maps
    maps = {pid: memfd in _mapped_files(pid) for pid in _children(server.process.pid)}
    assert any(maps.values()), maps  # the refinement worker warmed up on them
    assert not list(Path("/dev/shm").glob(f"shuffle-eps-rows-{server.process.pid}-*"))  # nothing found by path
    status, body, _ = get(f"{server.base}/v1/eps?mechanism=krr&k=3&eps0=1.5&n=50&delta=1e-6&max_slack=0")
    assert status == 200 and json.loads(body)["eps"] > 0
    server.stop()  # SIGTERM: uvicorn's graceful shutdown, the application's lifespan ends
