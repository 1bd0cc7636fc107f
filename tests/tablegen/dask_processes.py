"""Helpers for tests that start ``dask scheduler`` processes from the command line."""

from __future__ import annotations

import json
import time
from pathlib import Path


def scheduler_address(info: Path, timeout: float = 60) -> str:
    """The address in a ``--scheduler-file``, once the scheduler has written all of it.

    The scheduler creates the file before it writes its JSON, so a reader that only waits for the
    file to exist can read an empty or partial document: wait until it parses and names an address."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            return json.loads(info.read_text())["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.1)
    raise AssertionError(f"the scheduler wrote no address to {info} within {timeout:.0f} s")
