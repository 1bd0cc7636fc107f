"""Docs: regenerate the pages and figures of docs/ that a command makes, into ``--out`` (the docs
folder; ``--quick``: a temporary one, tiny cases).

Parts (``python -m bench docs [--only PART ...] [--quick] [--out DIR]``):

* ``plots``: every ``lookup plot ... --out FILE`` line of docs/plots.md, run against the shipped table
  (tests/bench/test_docs_bench.py checks that the committed figures carry the same title and labels).
* ``papers``: the papers' numerical figures recomputed by the certified engine (bench/paper_figures.py:
  ``--figures`` of clones, fft, parallel; ``--points``, ``--rows``, ``--n-range``), with their checks
  (docs/paper-figures.md).
* ``mechanisms``: docs/mechanisms.md, each randomizer of the registry, its parameters, the law of G its
  bound uses (from the code's docstrings), and the tightness over a table (``--table``: certified eps over
  its lower bound, minus one, over the cells that carry a lower bound, eps below eps0 and above 1e-6).
* ``tightness``: docs/tightness.md, upper against lower bound over a grid of every mechanism
  (bench/tightness.py; ``--jobs``, ``--cache``, ``--mem-gib``, ``--cell-timeout``, ``--retry-errors``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shlex
import tempfile
from pathlib import Path

import numpy as np

from bench import common

DOCS = common.ROOT / "docs"
PLOTS = DOCS / "plots.md"


def _shown(page: Path) -> str:
    """A page written, as the results file records it: relative to the repository where inside it."""
    return str(page.relative_to(common.ROOT)) if page.is_relative_to(common.ROOT) else str(page)


def _out(args: argparse.Namespace) -> Path:
    """The docs folder to write into: ``--out``, else docs/ (``--quick``: a temporary folder)."""
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="bench-docs-")) if args.quick else DOCS
    return Path(args.out)


def plot_commands(doc: Path = PLOTS) -> list[list[str]]:
    """The arguments of ``lookup`` of every ``lookup plot`` command line in ``doc``."""
    return [shlex.split(line)[1:] for line in doc.read_text().splitlines() if line.startswith("lookup plot ")]


def plots(args: argparse.Namespace) -> list[str]:
    from lookup.cli.commands import main as lookup_main

    written = []
    for command in plot_commands():
        target = _out(args) / Path(command[command.index("--out") + 1]).relative_to("docs")
        target.parent.mkdir(parents=True, exist_ok=True)
        command = [*command, "--table", str(common.ROOT / "data" / "default.zarr")]
        command[command.index("--out") + 1] = str(target)
        lookup_main.main(command, standalone_mode=False)  # prints "wrote: FILE"
        written.append(f"- `lookup {shlex.join(command[:command.index('--out')])}` -> {target.name}")
    return ["### Figures of docs/plots.md", "", *written]


def papers(args: argparse.Namespace) -> list[str]:
    from bench import paper_figures

    rows = args.rows or (["10-RR"] if args.quick else list(paper_figures.FFT_ROWS))
    n_range = tuple(args.n_range or ((100, 1000) if args.quick else (1e4, 1e7)))
    points = args.points or (2 if args.quick else 9)
    out = _out(args) / "figures"
    return ["### The papers' figures (docs/paper-figures.md)", "",
            *paper_figures.make(out, args.figures, points, rows, n_range)]


def _settings(table: Path) -> str:
    """The table's engine settings in words, from its ``certification`` attribute."""
    settings = json.loads(json.loads((table / "zarr.json").read_text())["attributes"]["certification"])
    method = f"{settings['method']} engine; " if "method" in settings else ""
    return (f"{method}upper bound at resolution {settings['resolution']:g}, "
            f"lower bound at resolution {settings['lower_resolution']:g}, on every "
            f"{settings['lower_every'][0]}th eps0 and {settings['lower_every'][1]}th n")


def _gaps(table: Path, quick: bool) -> dict[str, tuple[int, float, float, float]]:
    """Per row: cells with a lower bound, median, 90% and max of certified eps / lower bound - 1."""
    import xarray as xr

    ds = xr.open_zarr(table)
    if quick:
        ds = ds.isel(mechanism=slice(0, 2))
    eps, low = ds["eps"].values, ds["eps_lower"].values
    eps0 = ds["eps0"].values[:, None, None]
    out = {}
    for i, name in enumerate(ds["mechanism"].values):
        ok = np.isfinite(low[i]) & (low[i] > 0) & (eps[i] < eps0 * 0.999) & (eps[i] > 1e-6)
        gap = eps[i][ok] / low[i][ok] - 1
        out[str(name)] = (int(ok.sum()), *(np.quantile(gap, [0.5, 0.9]).tolist() if gap.size else [np.nan] * 2),
                          float(gap.max()) if gap.size else np.nan)
    return out


LOWER_BEFORE = common.ROOT / "bench" / "data" / "lower_bounds_v2.json"  # engine version 2, recorded


def _large_eps0(quick: bool) -> list[str]:
    """Lower bound before (engine version 2, ``LOWER_BEFORE``) and now, with the certified eps now,
    for every row of the recorded grid (eps0 4, 6, 8; n 1e2..1e6; delta 1e-8 and 1e-12): one table
    per delta, a row per (mechanism, eps0), a column per n; a lower bound that moved is in bold."""
    from tablegen.engine import eps_bounds

    recorded = json.loads(LOWER_BEFORE.read_text())["rows"]
    if quick:
        recorded = [r for r in recorded if r["mechanism"] == "hr" and r["eps0"] == 8.0 and r["n"] <= 1000]
    cells: dict[tuple[float, str, float], list[str]] = {}
    for r in recorded:
        params = {"k": r["k"]} if "k" in r else {}
        now = eps_bounds(r["mechanism"], eps0=r["eps0"], n=r["n"], delta=r["delta"], **params)
        before, after = r["lower"] or 0.0, now.lower or 0.0
        moved = abs(after - before) > 1e-3 * max(before, 1e-300)
        text = f"**{before:.3g} -> {after:.3g}**" if moved else f"{after:.3g}"
        row = r["mechanism"] + "".join(f" {k}={v}" for k, v in params.items())
        cells.setdefault((r["delta"], row, r["eps0"]), []).append(f"{text} / {now.upper:.3g}")
    lines = ["", "## Lower bounds at large eps0", "",
             "Lower bound / certified eps of `tablegen compute` (engine defaults) at eps0 4, 6 and 8; where the",
             "lower bound moved since engine version 2 (recorded in `bench/data/lower_bounds_v2.json`), before",
             "-> now in bold (the FFT lower path's finer lattices where its bound was 0, docs/engine.md; Laplace's",
             "exact pairs, docs/soundness.md).",
             "Gaps that remain are the analyses' (the lower-bound pairs are concrete datasets; the upper",
             "bounds of blh/hr are Table 1's domain-free blanket, 8 = eps0 at n <= 1e4 for eps0 = 8)."]
    for delta in sorted({key[0] for key in cells}, reverse=True):
        lines += ["", f"delta = {delta:g}:", "", "| mechanism | eps0 | n = 1e2 | 1e3 | 1e4 | 1e5 | 1e6 |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {row} | {eps0:g} | " + " | ".join(values) + " |"
                  for (d, row, eps0), values in cells.items() if d == delta]
    return lines


KEPT_SECTIONS = ("## Binary randomized response", "## Shuffled Gaussian", "## Laplace: the exact pairs")


def _kept_sections() -> list[str]:
    """The sections written from other benches' measured tables (``python -m bench binary``, ``python -m
    bench gaussian``, ``python -m bench engine --only laplace``), kept as they are when the page is
    regenerated."""
    page = (common.ROOT / "docs" / "mechanisms.md").read_text()
    lines: list[str] = []
    for title in KEPT_SECTIONS:
        start = page.find(title)
        if start >= 0:
            end = page.find("\n## ", start + 1)
            lines += ["", *page[start:end if end >= 0 else None].rstrip("\n").split("\n")]
    return lines


def mechanisms(args: argparse.Namespace) -> list[str]:
    from tablegen.mechanisms import MECHANISMS

    table = Path(args.table)
    shown = _shown(table)
    lines = ["# Mechanism reference", "",
             "Every randomizer tablegen knows (`tablegen compute --mechanism NAME`, `lookup eps --mechanism NAME`).",
             "A mechanism is data: the decompositions of G = u - e^eps v (probability c) its certified bound",
             "uses, and the neighbouring pairs of its lower bound (Su-Cheng-Wang (arXiv:2504.07414) Theorems 4-5).",
             "Generated by `python -m bench docs --only mechanisms` from the registry and", f"`{shown}`.",
             "", "## Tightness over the default table", "",
             "certified eps / lower bound - 1 over the table cells that carry a lower bound "
             "(eps below eps0 and above 1e-6). The table computes its bounds at its own settings "
             f"({_settings(table)}), so these gaps are wider than the engine's "
             "defaults give (docs/tightness.md: krr k=10 median 0.09%); the gaps of blh/hr, generic and "
             "laplace are mostly their lower-bound pairs.", "",
             "| row | cells | median | 90% | max |", "|---|---|---|---|---|"]
    for name, (count, median, q90, top) in _gaps(table, args.quick).items():
        lines.append(f"| {name} | {count} | {median:.2%} | {q90:.2%} | {top:.2%} |")
    lines += _kept_sections() + _large_eps0(args.quick)
    for name, m in MECHANISMS.items():
        lines += ["", f"## {name}", "", m.summary + ".", "", f"Reference: {m.reference}.", ""]
        if m.params:
            lines += ["| parameter | meaning |", "|---|---|",
                      *(f"| `{p}` | {spec.help} |" for p, spec in m.params.items()), ""]
        lines += ["Law of G (upper bound):", "", "```", inspect.getdoc(m.upper) or "(see the module docstring)", "```"]
        if m.lower is None:
            lines += ["", "No lower bound."]
    page = _out(args) / "mechanisms.md"
    page.write_text("\n".join(lines) + "\n")
    return [f"- wrote {_shown(page)}: {len(MECHANISMS)} mechanisms, tightness over `{shown}`"]


def tightness(args: argparse.Namespace) -> list[str]:
    from bench import tightness as grid

    if args.quick:
        cases, eps0s, ns, deltas, cache = grid.CASES[1:2], [1.0], [10**2], [1e-6], ""
    else:
        cases, eps0s, ns, deltas, cache = grid.CASES, grid.EPS0S, grid.NS, grid.DELTAS, args.cache
    page = _out(args) / "tightness.md"
    page.write_text(grid.run(cases, eps0s, ns, deltas, args.jobs, cache, args.mem_gib, args.cell_timeout,
                             args.retry_errors))
    return [f"- wrote {_shown(page)}: {len(cases)} mechanisms x {len(eps0s)} eps0 x {len(ns)} n x {len(deltas)} deltas"]


PARTS: dict[str, common.Part] = {"plots": plots, "papers": papers, "mechanisms": mechanisms, "tightness": tightness}


def main(argv: list[str] | None = None) -> None:
    p = common.parser("docs", __doc__, PARTS)
    p.add_argument("--out", type=Path, default=None, help="the docs folder to write into (default docs/)")
    p.add_argument("--figures", nargs="+", choices=["clones", "fft", "parallel"],
                   default=["clones", "fft", "parallel"], help="papers: which figures")
    p.add_argument("--points", type=int, default=None, help="papers: points per curve (default 9; --quick 2)")
    p.add_argument("--rows", nargs="+", default=None, help="papers, fft: the randomizers (10-RR, BLH, RAPPOR, "
                   "OUE, Laplace)")
    p.add_argument("--n-range", nargs=2, type=float, default=None, metavar=("N_MIN", "N_MAX"),
                   help="papers, fft and parallel: the range of n (default 1e4 1e7)")
    p.add_argument("--table", default=str(common.ROOT / "data" / "default.zarr"), help="mechanisms: the table")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="tightness: worker processes")
    p.add_argument("--cache", default="/tmp/tightness_cells.jsonl", help="tightness: JSON-lines cache ('' for none)")
    p.add_argument("--mem-gib", type=float, default=9.0, help="tightness: address-space cap per worker, GiB")
    p.add_argument("--cell-timeout", type=float, default=300.0, help="tightness: seconds per cell (0: no cap)")
    p.add_argument("--retry-errors", action="store_true", help="tightness: recompute cached cells that raised")
    common.run("docs", PARTS, p.parse_args(argv), argv)


if __name__ == "__main__":
    main()
