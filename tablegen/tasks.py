"""A build's unit of work as plain data: the task of one (mechanism, eps0) slice, its result
with the provenance of the code that computed it, and the errors a build ends with.

A slice is every n and delta of one (mechanism, eps0) (``build.slice_values``); a result is
accepted only from the client's own code (``check_provenance``): docs/tables.md, "One task: a slice"."""

from __future__ import annotations

import functools
import hashlib
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tablegen
from tablegen.spec import Row, Spec

# the code a slice's values depend on, digested into every result's provenance (relative to tablegen/)
ENGINE_CODE = ("__init__.py", "engine", "mechanisms", "protocols", "decomposition.py", "limits.py", "validate.py")


@dataclass(frozen=True)
class Task:
    """What a worker needs for one (mechanism, eps0) slice: every n of the axis.  Plain data,
    cheap to ship; nothing in it refers to the client's disk."""

    slice: tuple[int, int]  # (row, eps0) indices
    family: str
    params: dict[str, Any]
    eps0: float
    ns: tuple[int, ...]
    deltas: list[float]
    lower: tuple[bool, ...]  # per n: lower bounds wanted
    resolution: float
    lower_resolution: float

    @property
    def label(self) -> str:
        return f"{Row(self.family, self.params).label} eps0 {self.eps0:g} (slice {self.slice[0]}_{self.slice[1]})"


@dataclass(frozen=True)
class SliceResult:
    """A computed slice as a task returns it: both arrays (n, delta), the compute seconds, the
    provenance of the code that computed it and the worker that ran it."""

    slice: tuple[int, int]
    eps: np.ndarray
    eps_lower: np.ndarray
    seconds: float
    provenance: dict[str, str]
    worker: str  # as messages name it (``worker_label``)
    address: str = ""  # the worker's address, by which the client leaves it out of later tasks


class BuildInterrupted(Exception):
    """A build stopped by SIGINT or SIGTERM; its finished slices stay in the staging store."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message or f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class BuildFailed(RuntimeError):
    """A build that cannot finish (a slice failing on every try, no worker running this engine);
    the message is one line, the finished slices stay in the staging store."""


class SliceError(RuntimeError):
    """A task's error, raised on the worker with the worker's name and the error in one line."""


class EngineMismatch(ValueError):
    """A result computed by other code than the client's (``provenance``)."""


def task(spec: Spec, r: int, e: int) -> Task:
    """The task computing slice (row ``r``, eps0 ``e``)."""
    s = spec.settings
    return Task((r, e), spec.rows[r].family, spec.rows[r].params, float(spec.eps0[e]),
                tuple(int(n) for n in spec.n), spec.delta.tolist(),
                tuple(spec.wants_lower(e, j) for j in range(spec.n.size)), s["resolution"], s["lower_resolution"])


def todo(spec: Spec, done: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (row, eps0) slices not in ``done``, the longest first (longest-processing-time order,
    so the stragglers do not start last and set the wall time): those with lower bounds, then
    by eps0 from the largest: a slice with lower bounds takes a few times one without, and the
    cost grows with eps0 (docs/cluster.md, "Stragglers: where a slice's time goes")."""
    slices = [(r, e) for r in range(spec.shape[0]) for e in range(spec.shape[1]) if (r, e) not in done]
    lower = [any(spec.wants_lower(e, j) for j in range(spec.n.size)) for e in range(spec.shape[1])]
    return sorted(slices, key=lambda s: (not lower[s[1]], -s[1], s[0]))


@functools.cache
def engine_digest() -> str:
    """SHA-256 over the path and bytes of every file of ``ENGINE_CODE`` (the same for every install
    of the same source; any edit of the engine, a mechanism or the version constants changes it)."""
    root = Path(tablegen.__file__).parent
    files = sorted(p for name in ENGINE_CODE
                   for p in ((root / name).rglob("*.py") if (root / name).is_dir() else [root / name]))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def provenance() -> dict[str, str]:
    """What computed a slice in this process: package and engine versions (read from the module
    at call time) and ``engine_digest``."""
    return {"package_version": tablegen.__version__, "engine_version": tablegen.ENGINE_VERSION,
            "engine_sha256": engine_digest()}


def check_provenance(result: SliceResult, expected: dict[str, str]) -> None:
    """EngineMismatch naming the worker and what differs unless ``result`` was computed by the
    ``expected`` code (``provenance``)."""
    got = result.provenance
    if got != expected:
        differs = ", ".join(f"{key} {got.get(key)!s:.12} (client: {want:.12})" for key, want in expected.items()
                            if got.get(key) != want)
        raise EngineMismatch(f"worker {result.worker} runs other code: {differs}; its result for slice "
                             f"{result.slice[0]}_{result.slice[1]} was refused")
