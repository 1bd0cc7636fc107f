"""tablegen/allocator.py: a worker keeps freed arrays instead of faulting them in again."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = """
import resource, sys
import numpy as np
from tablegen import allocator
if sys.argv[1] == "set":
    assert allocator.keep_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    np.ones(2 * 2**20)  # 16 MiB, filled, dropped
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(mode: str) -> int:
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}  # what a dask nanny gives its workers
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_arrays_are_reused_under_the_dask_worker_environment():
    """40 arrays of 16 MiB: hundreds of page faults each as dask leaves the allocator (the
    memory goes back to the kernel every time), those of the first one alone once set."""
    plain, kept = _page_faults("plain"), _page_faults("set")
    assert plain > 40 * 8, plain  # a fault per 2 MiB page at least (transparent huge pages; 4 KiB pages: 4096)
    assert kept < plain / 10, (kept, plain)


RELEASE_CHILD = """
import os
import numpy as np
from tablegen import allocator

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

assert allocator.keep_freed_memory()
arrays = [np.ones(2 * 2**20) for _ in range(20)]  # 320 MiB from the heap, then freed: kept
del arrays
kept = rss()
assert allocator.release_freed_memory()
print(kept, rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_the_kept_heap_is_handed_back_after_a_slice():
    """A worker under dask's --memory-limit must not stay above its pause threshold between
    tasks: 320 MiB freed stay resident under the kept-heap setting until released."""
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, "-c", RELEASE_CHILD], env=env, capture_output=True, text=True, check=True)
    kept, released = (int(v) for v in out.stdout.split())
    assert kept - released > 250 * 2**20, (kept, released)
