"""numcodecs' decoders for a table's chunks (``blosc``, ``zstd``, ``vlen``), without the cost of
its package ``__init__``.

``import numcodecs`` imports every codec it has, ``multiprocessing``, and scans the entry points
of every installed distribution: about 100 ms on an idle 2-core machine, 40% of a shell query's
whole process (``lookup eps ...``), where the chunks need two extension modules.  So where
numcodecs is not imported yet and no other thread runs (nothing can import it meanwhile: a shell
query), the modules are loaded beneath a bare stand-in for the package, which is removed at once;
a later ``import numcodecs`` (zarr's) runs the real ``__init__`` and finds these same modules.
Elsewhere (numcodecs already imported, or other threads running) it is the ordinary import.
The bytes decoded are the same either way: the modules are numcodecs' own.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

NAMES = ("blosc", "zstd", "vlen")


def module(name: str) -> Any:
    """``numcodecs.<name>`` (one of ``NAMES``), loaded as cheaply as it safely can be."""
    if name not in NAMES:
        raise ValueError(f"codec module must be one of {NAMES}, got {name!r}")
    full = f"numcodecs.{name}"
    if full in sys.modules:
        return sys.modules[full]
    if "numcodecs" in sys.modules or threading.active_count() > 1:
        return importlib.import_module(full)
    spec = importlib.util.find_spec("numcodecs")
    if spec is None or not spec.submodule_search_locations:
        return importlib.import_module(full)  # raises the ordinary ModuleNotFoundError
    stand_in = types.ModuleType("numcodecs")
    stand_in.__path__ = list(spec.submodule_search_locations)
    sys.modules["numcodecs"] = stand_in
    try:
        return importlib.import_module(full)
    finally:
        if sys.modules.get("numcodecs") is stand_in:
            del sys.modules["numcodecs"]
