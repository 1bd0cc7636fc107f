"""``python -m bench --list`` | ``python -m bench SECTION [--quick] [--only PART ...] [options]``.

``python -m bench SECTION --help`` lists a section's parts and options.  A full run replaces the
section's blocks in bench/RESULTS.md; ``--quick`` is a smoke run (tiny sizes, printed only).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from collections.abc import Callable
from pathlib import Path

# section -> (module, what it measures); bench/README.md has the typical times and who quotes them
SECTIONS: dict[str, tuple[str, str]] = {
    "engine": ("bench.engine_bench", "live eps(delta): query, check and lower-bound time, whole-process "
               "`tablegen compute`, spectral vs FFT path, slices, query sweeps"),
    "table": ("bench.table_bench", "table build (whole process and workers), --dry-run sizing, grid slack, "
              "compact store size and load, device files"),
    "lookup": ("bench.lookup_bench", "lookup CLI process, import/open/latency, slack and inverse answers "
               "against live, lower bounds, first open of a custom table, the HTTP service"),
    "compose": ("bench.compose_bench", "composition of rounds: time, tightness against basic/advanced, "
                "its figure, joint compositions"),
    "protocols": ("bench.protocols_bench", "shuffled binary-sum and histogram protocols: calibrated noise, "
                  "simulated error (docs/protocols.md)"),
    "docs": ("bench.docs_bench", "regenerates docs pages and figures: plots.md figures, paper figures, "
             "mechanisms.md, tightness.md"),
    # written beside this consolidation (issue 28), each a module with main(argv=None)
    "subsample": ("bench.subsample_bench", "amplification by subsampling (bench/subsample_bench.py)"),
    "rdp": ("bench.rdp_bench", "Renyi-DP accounting (bench/rdp_bench.py)"),
    "binary": ("bench.binary_bench", "binary RR (k-RR, k = 2): the exact worst case certified, against the "
               "blanket bound and an independent exact oracle; whole-process time (bench/binary_bench.py)"),
    "gaussian": ("bench.gaussian_bench", "the shuffled Gaussian on bits: published routes against ours certified, "
                 "the lower bounds, whole-process time (bench/gaussian_bench.py)"),
    "service": ("bench.service_bench", "the HTTP service under load: 32 clients, mixed questions, slow clients "
                "(bench/service_bench.py, --load)"),
}
# sections whose main only prints: the dispatcher records what they print as one block, SECTION/all
PRINT_ONLY = {"subsample", "rdp", "service", "binary", "gaussian"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--list":
        width = max(map(len, SECTIONS))
        print("\n".join(f"{name:<{width}}  {what}" for name, (_, what) in SECTIONS.items()))
        return 0
    if argv[0] not in SECTIONS:
        print(f"unknown section {argv[0]!r}; one of: {', '.join(SECTIONS)} (python -m bench --list)", file=sys.stderr)
        return 2
    module = importlib.import_module(SECTIONS[argv[0]][0])
    if argv[0] in PRINT_ONLY:
        record_printed(argv[0], module.main, argv[1:])
    else:  # records its own parts (bench/common.py)
        module.main(argv[1:])
    return 0


def record_printed(section: str, main: Callable[[list[str]], object], argv: list[str],
                   path: Path | None = None) -> None:
    """Run a section that only prints, and record what it printed as its one block ``section/all``
    (a ``--quick`` run is printed only, as for the other sections)."""
    from bench import common

    printed, shown = io.StringIO(), sys.stdout

    class Tee(io.TextIOBase):
        def write(self, text: str) -> int:
            printed.write(text)
            return shown.write(text)

    with contextlib.redirect_stdout(Tee()):
        main(argv)
    if "--quick" not in argv:
        command = " ".join(["python", "-m", "bench", section, *argv])
        common.record(path or common.RESULTS, section, "all",
                      [f"`{command}`: {common.provenance()}", "", printed.getvalue().strip("\n")])


if __name__ == "__main__":
    sys.exit(main())
