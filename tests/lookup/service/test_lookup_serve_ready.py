"""Ready means warm (issue 57): ``/healthz`` and ``/readyz`` say 503 "starting" with Retry-After
until every worker of every pool has warmed up (each in its own initializer, so a worker
restarted later is warm before it takes work), ``/livez`` answers meanwhile; during the warm-up
an in-range question gets the table's certified answer at once (``"refined": false``), engine
work a 503 "starting", bad input its 400."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from test_lookup_serve import get
from test_lookup_serve_traffic import _workers

WARM_HOOK = '''
import functools, os, time
import lookup.service.app as _app
import lookup.answer.live as _live
import lookup.service.pool as _pool
_LOG = {log!r}
def _note(what):
    with open(_LOG, "a") as f:
        f.write(f"{{what}} {{os.getpid()}} {{time.time()!r}}\\n")
_warm = _app._worker_warm
@functools.wraps(_warm)
def _worker_warm():  # test servers only: each worker's warm-up takes 3 s more and notes when it ended
    time.sleep(3)
    try:
        return _warm()
    finally:
        _note("warm")
_app._worker_warm = _worker_warm
_eps = _live.eps
def _noted(mechanism, point, params):  # a client's live task notes its worker; at eps0 = 9.5 it takes 60 s
    if not getattr(_pool, "warming", lambda: False)():
        _note("task")
        if point["eps0"] == 9.5:
            time.sleep(60)
    return _eps(mechanism, point, params)
_live.eps = _noted
'''
INSIDE = "/v1/eps?mechanism=krr&k=3&eps0=1.37&n=57&delta=3.3e-6"  # between grid points: slack above 2%
LIVE = "/v1/eps?mechanism=krr&k=3&n=50&delta=1e-6&eps0="  # eps0 above the small table's grid


def _log(path: Path) -> list[tuple[str, int, float]]:
    if not path.exists():
        return []
    rows = (line.split() for line in path.read_text().splitlines())
    return [(what, int(pid), float(when)) for what, pid, when in rows]


def test_ready_only_once_every_worker_of_every_pool_is_warm(start_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "warm.log"
    server = start_server("--live-workers", "1", "--refine-workers", "2", "--retry-after", "4", ready=False,
                          hook=WARM_HOOK.format(log=str(log)))
    status, body, headers = get(f"{server.base}/healthz")
    assert status == 503 and json.loads(body)["status"] == "starting" and headers["Retry-After"] == "4", body
    assert json.loads(body)["ready"] is False
    status, body, headers = get(f"{server.base}/readyz")
    assert status == 503 and json.loads(body)["status"] == "starting" and headers["Retry-After"] == "4"
    assert get(f"{server.base}/livez")[:2] == (200, b'{"status": "alive"}')
    status, body, _ = get(server.base + INSIDE)  # the table's certified answer at once, not refined
    assert status == 200 and json.loads(body)["refined"] is False and json.loads(body)["source"] == "table"
    status, body, headers = get(server.base + LIVE + "6")  # engine work: "starting", not slow
    assert status == 503 and "starting" in json.loads(body)["error"] and headers["Retry-After"] == "4"
    assert get(server.base + LIVE + "-1")[0] == 400
    deadline = time.monotonic() + 60
    while get(f"{server.base}/healthz")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    ready_at = time.time()
    status, body, headers = get(f"{server.base}/readyz")
    assert status == 200 and json.loads(body)["status"] == "ok" and "Retry-After" not in headers
    assert json.loads(body)["warmed"] == {"live": [1, 1], "refine": [2, 2], "slice": [1, 1]}
    warmed = {pid for what, pid, when in _log(log) if what == "warm" and when <= ready_at}
    workers = {pid for pid, (nice, _) in _workers(server.process.pid).items() if nice in (2, 10, 15)}
    assert len(workers) == 4 and workers <= warmed, (workers, _log(log))  # each worker, not 4 warm-ups in any
    status, body, _ = get(server.base + LIVE + "6")
    assert status == 200 and json.loads(body)["source"] == "live"


def test_a_worker_restarted_later_is_warm_before_it_takes_work(start_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "warm.log"
    server = start_server("--live-workers", "1", "--live-timeout", "1", hook=WARM_HOOK.format(log=str(log)))
    status, body, _ = get(server.base + LIVE + "9.5")  # over its 1 s: its worker killed, a fresh one started
    assert status == 503 and "exceeded 1 s" in json.loads(body)["error"]
    status, body, _ = get(server.base + LIVE + "6")
    assert status == 200 and json.loads(body)["source"] == "live"
    tasks = [(pid, when) for what, pid, when in _log(log) if what == "task"]
    warm = {pid: when for what, pid, when in _log(log) if what == "warm"}
    (killed, _), (fresh, started) = tasks
    assert fresh != killed and fresh in warm and warm[fresh] < started, _log(log)
    assert get(f"{server.base}/healthz")[0] == 200


def test_the_server_process_warms_its_own_first_answers(table_path: Path) -> None:
    """The validation's first use of a mechanism imports it (0.16 s on the shipped table's first
    question after "ready", in the event loop): done for every row before ready."""
    from lookup.service.app import _warm_server
    from lookup.store.table import open_table

    seen: list[tuple[str, dict]] = []
    warmed = _warm_server(open_table(table_path), lambda mechanism, params, numbers: seen.append((mechanism, params)))
    assert warmed == 2
    assert seen == [("krr", {"k": 3}), ("generic", {})]


SLOW_ROUNDS = '''
import time
import lookup.answer.live as _live
import lookup.service.pool as _pool
_composed = _live.composed_eps
def _slow_rounds(*args, **kwargs):  # test servers only: a client's composition of rounds takes 4 s
    if not getattr(_pool, "warming", lambda: False)():
        time.sleep(4)
    return _composed(*args, **kwargs)
_live.composed_eps = _slow_rounds
'''


def test_rounds_never_hold_the_last_refinement_worker(start_server: Any) -> None:
    """Issue 57's k-RR k=1024 question stayed unrefined: two rounds questions held both refinement
    workers, so its refinement waited past its budget (a queue, not a slow or refused refinement).
    Two rounds questions made to take 4 s each: in-range questions asked once meanwhile are
    refined (within their budget) while both are still running, and both rounds questions are
    answered (one in a refinement worker, the other in the live pool)."""
    import threading

    base = start_server("--live-workers", "1", "--refine-workers", "2", hook=SLOW_ROUNDS).base
    rounds = [f"{base}/v1/eps?mechanism=krr&k=3&eps0={e0}&n=60&delta=1e-5&rounds=2" for e0 in (1.1, 1.3)]
    out: list[Any] = []
    threads = [threading.Thread(target=lambda url=url: out.append(get(url))) for url in rounds]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # both compositions running
    asked = 0
    while all(t.is_alive() for t in threads):  # each question asked once (a second asking would start a slice)
        query = f"{base}/v1/eps?mechanism=krr&k=3&eps0={1.37 + 0.0001 * asked:.4f}&n=57&delta=3.3e-6"
        answer = json.loads(get(query)[1])
        asked += 1
        if answer.get("refined") is not False:
            break
        time.sleep(0.02)
    refined_while_composing = all(t.is_alive() for t in threads)
    for thread in threads:
        thread.join(60)
    assert refined_while_composing and answer["source"] == "certified estimate", (asked, answer)
    table = json.loads(get(query + "&max_slack=none")[1])
    assert answer["eps"] <= table["eps"] and table["slack"] > 0.02
    assert [status for status, _, _ in out] == [200, 200]
