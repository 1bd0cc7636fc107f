"""A least-recently-used map of bounded size: the service's answer caches and eps0 slices
(``lookup/service/pool.py``, ``lookup/service/app.py``) and the one-round PLDs of ``lookup/answer/live.py``."""

from __future__ import annotations

import collections
from typing import Any


class LRU:
    """The ``size`` most recently used entries (none for size 0), with a count of hits."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.hits = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: str) -> Any:
        """The entry of ``key``, now the most recent (None: not kept)."""
        found = self.entries.get(key)
        if found is not None:
            self.entries.move_to_end(key)
            self.hits += 1
        return found

    def put(self, key: str, value: Any) -> None:
        if not self.size:
            return
        self.entries[key] = value
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
