"""``lookup serve`` at its two ends: a port already taken is one line and status 2; SIGTERM
leaves no semaphore to multiprocessing's resource tracker (no "leaked semaphore" warning)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SERVE = [sys.executable, "-m", "lookup.cli", "serve", "--host", "127.0.0.1"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_one_line_naming_it(workers: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([*SERVE, "--port", str(port), "--workers", workers], capture_output=True, text=True,
                             timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and f"127.0.0.1:{port} is already in use" in out.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_sigterm_leaves_no_leaked_semaphore(tmp_path: Path) -> None:
    """Two server processes (spawned by uvicorn) on the shipped table, whose chunks numcodecs'
    blosc decodes under a multiprocessing lock made in each of them: stopped by SIGTERM, each
    unlinks it (it was left to the resource tracker, which warned at shutdown)."""
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        server = subprocess.Popen([*SERVE, "--port", str(_free_port()), "--workers", "2", "--live-workers", "1",
                                   "--no-access-log"], stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while log.read_text().count("Application startup complete") < 2 and server.poll() is None:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            server.send_signal(signal.SIGTERM)
            server.wait(60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    time.sleep(0.5)  # the resource tracker writes its warning as it exits, after the server
    text = log.read_text()
    assert "Stopping parent process" in text and "leaked semaphore" not in text, text
