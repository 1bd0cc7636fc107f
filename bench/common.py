"""What the bench sections share: their command line, the marked blocks of bench/RESULTS.md, child
processes timed as a whole, and the provenance line of a run.

A section is a module with ``PARTS`` (part name -> function of the parsed arguments returning Markdown
lines) and ``main(argv=None)``, which calls :func:`run`.  Every part's output is printed and, unless the
run is ``--quick`` (a smoke run) or ``--no-record``, written into its own block of the results file:

    <!-- bench engine/slice -->
    ...
    <!-- /bench engine/slice -->

A rerun replaces the block; a part never recorded before goes after its section's last block, else at the
end of its ``## section`` heading's text, else at the end of the file under a new ``## section`` heading.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "RESULTS.md"
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
Part = Callable[[argparse.Namespace], list[str]]


def parser(section: str, doc: str, parts: dict[str, Part]) -> argparse.ArgumentParser:
    """The options every section has; a section adds its own to what this returns."""
    p = argparse.ArgumentParser(prog=f"python -m bench {section}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=list(parts), default=list(parts), metavar="PART",
                   help=f"parts to run, of {', '.join(parts)} (default: all)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds: a smoke run, printed, not recorded "
                   "(unless --results names a file)")
    p.add_argument("--results", type=Path, default=None, help="record into this file (default bench/RESULTS.md)")
    p.add_argument("--no-record", action="store_true", help="print only")
    return p


def print_parts(section: str, doc: str, parts: dict[str, Callable[[bool], None]], argv: Sequence[str] | None) -> None:
    """The ``main`` of a section that only prints (``PRINT_ONLY`` in bench/__main__.py, whose dispatcher
    records it): ``--only`` and ``--quick``, the chosen parts run in order."""
    p = argparse.ArgumentParser(prog=f"python -m bench {section}", description=doc.split("\n\n")[0])
    p.add_argument("--only", nargs="+", choices=list(parts), default=list(parts))
    p.add_argument("--quick", action="store_true", help="small sizes only, printed")
    args = p.parse_args(argv)
    for name in args.only:
        parts[name](args.quick)


def timed_compute(*options: str) -> tuple[float, dict[str, Any]]:
    """(whole-process seconds, JSON answer) of ``tablegen compute OPTIONS --json`` in a fresh interpreter."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tablegen.cli", "compute", *options, "--json"], capture_output=True,
                         text=True, check=True)
    return time.perf_counter() - start, json.loads(out.stdout)


def run(section: str, parts: dict[str, Part], args: argparse.Namespace, argv: Sequence[str] | None) -> None:
    """Run the chosen parts in order, print each and record it (see the module docstring)."""
    target = None if args.no_record else args.results or (None if args.quick else RESULTS)
    command = shlex.join(["python", "-m", "bench", section, *(sys.argv[1:] if argv is None else argv)])
    for i, name in enumerate(args.only):
        lines = parts[name](args)
        print(("\n" if i else "") + "\n".join(lines), flush=True)
        if target is not None:
            record(target, section, name, [f"`{command}`: {provenance()}", "", *lines])


def record(path: Path, section: str, part: str, lines: list[str]) -> None:
    """Replace (or add) the block of ``section/part`` in the Markdown file ``path``."""
    key = f"{section}/{part}"
    block = f"<!-- bench {key} -->\n" + "\n".join(lines).strip("\n") + f"\n<!-- /bench {key} -->"
    text = path.read_text() if path.exists() else ""
    found = re.search(rf"<!-- bench {re.escape(key)} -->\n.*?<!-- /bench {re.escape(key)} -->", text, re.S)
    if found:
        text = text[:found.start()] + block + text[found.end():]
    elif ends := list(re.finditer(rf"<!-- /bench {re.escape(section)}/[\w-]+ -->", text)):
        text = text[:ends[-1].end()] + "\n\n" + block + text[ends[-1].end():]
    elif heading := re.search(rf"^## {re.escape(section)}\n", text, re.M):  # a section without blocks yet: its end
        following = re.compile(r"^## ", re.M).search(text, heading.end())
        at = following.start() if following else len(text)
        text = text[:at].rstrip("\n") + "\n\n" + block + "\n" + ("\n" + text[at:] if following else "")
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + f"## {section}\n\n{block}\n"
    path.write_text(text)


def provenance() -> str:
    """Date, commit and machine of this run."""
    import numpy

    return (f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, commit {commit()}; {_cpu()}, "
            f"{os.cpu_count()} logical cores{_memory()}, Python {platform.python_version()}, numpy {numpy.__version__}")


def commit() -> str:
    """The checkout's short commit, and whether tablegen/ or lookup/ differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    dirty = " (uncommitted changes in tablegen/ or lookup/)" if git("status", "--porcelain", "tablegen", "lookup") \
        else ""
    return (git("rev-parse", "--short", "HEAD") or "(not a git checkout)") + dirty


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory() -> str:
    try:
        return f", {int(Path('/proc/meminfo').read_text().split()[1]) / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        return ""


@dataclass
class Child:
    """One process run to its end: wall seconds, peak resident MiB (NaN without GNU time), stdout, and
    ``error`` (None, 'timeout > S s', 'out of memory (...)' or its last stderr line)."""

    wall_s: float
    rss_mib: float
    stdout: str
    error: str | None = None


GNU_TIME = Path("/usr/bin/time")


def child(argv: list[str], *, mem_gib: float = 0.0, timeout: float | None = None, one_core: bool = False,
          env: dict[str, str] | None = None, cwd: Path = ROOT) -> Child:
    """Run ``argv`` as a fresh process.  Its peak memory is read by ``/usr/bin/time -f %M``: the child's
    own rusage would count this (larger) process's memory, which a fork takes along until the exec.
    ``mem_gib`` caps its address space (a call that outgrows it fails instead of bringing the machine
    down); ``one_core`` pins it to core 0 (taskset) with one BLAS/OpenMP thread."""
    env = {**os.environ, **(env or {}), **(THREAD_ENV if one_core else {})}
    pin = ["taskset", "-c", "0"] if one_core and shutil.which("taskset") else []

    with tempfile.NamedTemporaryFile("r") as report:
        timer = [str(GNU_TIME), "-f", "%M", "-o", report.name] if GNU_TIME.exists() else []
        start = time.perf_counter()
        try:
            done = subprocess.run(timer + pin + argv, capture_output=True, text=True, cwd=cwd, env=env,
                                  timeout=timeout,
                                  preexec_fn=(lambda: cap_memory(mem_gib)) if mem_gib > 0 else None)
        except subprocess.TimeoutExpired:
            return Child(time.perf_counter() - start, float("nan"), "", f"timeout > {timeout:g} s")
        wall = time.perf_counter() - start
        peak = [w for w in report.read().split() if w.isdigit()]
    rss = int(peak[-1]) / 1024 if peak else float("nan")
    if done.returncode == 0:
        return Child(wall, rss, done.stdout)
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("Command ")]
    last = lines[-1] if lines else f"exit code {done.returncode}"
    if "MemoryError" in done.stderr or "Unable to allocate" in done.stderr:
        last = f"out of memory (> {mem_gib:g} GiB address space): {last[:120]}"
    return Child(wall, rss, done.stdout, last)


def cap_memory(gib: float) -> None:
    """Cap this process's address space at ``gib`` GiB (MemoryError beyond it); 0: no cap.  A cap it runs
    under already (``ulimit -v``) stays in force."""
    import resource

    if gib > 0:
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        limit = int(gib * 2**30) if hard == resource.RLIM_INFINITY else min(int(gib * 2**30), hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def label(family: str, params: dict) -> str:
    """'krr k=10'."""
    return family + "".join(f" {k}={v}" for k, v in params.items())


def spread(values: Sequence[float], scale: float = 1.0, unit: str = "") -> str:
    """'min / median / max unit'."""
    import statistics

    low, mid, high = (scale * v for v in (min(values), statistics.median(values), max(values)))
    return f"{low:.3g} / {mid:.3g} / {high:.3g}" + (f" {unit}" if unit else "")


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)]


def blanket_eps_bounds(mechanism: str, **query: Any) -> Any:
    """``tablegen.engine.eps_bounds`` without binary RR's exact path (tablegen/engine/binary.py): the
    blanket upper bound and Theorem 5 lower bound every row of the default table holds, k = 2 included."""
    from tablegen.engine import binary, eps_bounds

    applies = binary.applies
    binary.applies = lambda q: False
    try:
        return eps_bounds(mechanism, **query)
    finally:
        binary.applies = applies
