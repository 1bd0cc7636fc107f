"""Tables: build time (whole process, and local workers), --dry-run sizing, grid slack of a built
table, size and load time of the compact store, device files computed for one deployment.

Parts (``python -m bench table [--only PART ...] [--quick]``):

* ``build``: (1) ``tablegen build --workers 0`` as a whole process (wall, peak RSS) of a spec with one
  eps0 (1.0), n at 100 per decade over 1e2..1e9 and 25 deltas, no settings, for k-RR k = 10 and the
  generic randomizer (issue 28: <= 4 s on 2 cores); (2) a slice of ``workflows/default.toml`` (every
  mechanism row, 3 eps0, n 1e2 and 1e4, its settings) built from scratch by ``tablegen build
  --workers 1`` and ``--workers 2`` (LocalCluster, publish included): tasks per second and speed-up.
* ``sizing``: ``tablegen build --dry-run --json`` of ``workflows/default.toml`` and ``full.toml``
  (timed on ``--sample`` tasks, sized for 100 cores).
* ``slack``: for each (eps0, n) cell of a built table (``--table``), the ratio of the conservative corner
  (eps0 rounded up, n rounded down) to the opposite one bounds any lookup's overshoot inside the cell;
  the chord between bracketing deltas adds at most the ratio of neighbouring deltas' eps.  Median, 90%
  and max over cells, per family.
* ``store``: a synthetic table shaped like a dense default (log eps of ``data/default.zarr`` interpolated
  in (log eps0, log n, log delta) onto dense axes, capped at eps0: smooth like a dense build, NOT certified;
  lower bounds 0.99 eps on every 4th eps0 and 10th n up to 1e6) published in the compact store at
  ``--bits`` mantissa bits (and float64 with ``--float64``): store size (eps and eps_lower apart), publish
  time, the reader's open in a fresh process (``lookup.store.table.open_store``: manifest and decoding, no
  provenance, since nothing vouches for synthetic values; time, peak RSS), scalar ``lookup.eps`` p50 / p90
  over 20,000 random in-grid queries, and the same queries on ``data/default.zarr``.
* ``publish``: the client's publish of a finished staging store (``build.publish``, whole process:
  wall, peak RSS) for synthetic staging stores of ``--publish-gb`` GB of float64 cells (eps and
  eps_lower; rows of 200 eps0 x 995 n x 40 delta, smooth values shaped as eps, NOT certified) and of
  twice that: the peak must not grow with the table (issue 36: <= 1 GB at 2 GB and at 4 GB).
* ``device``: ``tablegen export --device`` of three deployments (k-RR k = 10 at eps0 1.37, n 1e3..1e8,
  deltas 1e-8, 1e-6; generic at eps0 2.2, n 1e4..1e9, delta 1e-9; Laplace at eps0 1, n 1e3..1e8, delta
  1e-8) at each ``--slacks`` value, whole processes: size, stored n, worst slack, wall, peak RSS; then the
  max-slack 0.5% files' answers (``lookup.device.files``) against the live certified value at ``--queries``
  random n (target: within [1, 1.005]).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

from bench import common

DEFAULT_SPEC = common.ROOT / "workflows" / "default.toml"
DEFAULT_TABLE = common.ROOT / "data" / "default.zarr"
DEPLOYMENTS = [
    ("k-RR k=10", "krr", {"k": 10}, 1.37, 1e3, 1e8, [1e-8, 1e-6]),
    ("generic", "generic", {}, 2.2, 1e4, 1e9, [1e-9]),
    ("Laplace", "laplace", {}, 1.0, 1e3, 1e8, [1e-8]),
]


def _tablegen(*args: str, **kw: object) -> common.Child:
    return common.child([sys.executable, "-m", "tablegen.cli", *args], **kw)


def _toml(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def write_spec(path: Path, title: str, axes: dict, mechanisms: list[dict], settings: dict | None = None) -> Path:
    """A grid spec file (TOML) with these axes, mechanism rows and settings."""
    lines = [f"title = {json.dumps(title)}", "", "[axes]", *(f"{k} = {_toml(v)}" for k, v in axes.items())]
    if settings:
        lines += ["", "[settings]", *(f"{k} = {_toml(v)}" for k, v in settings.items() if v is not None)]
    for row in mechanisms:
        lines += ["", "[[mechanism]]", *(f"{k} = {_toml(v)}" for k, v in row.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def build(args: argparse.Namespace) -> list[str]:
    from tablegen.spec import load_spec

    per_decade, count = (1, 3) if args.quick else (100, 25)
    axes = {"eps0": [1.0], "n": {"start": 1e2, "stop": 1e4 if args.quick else 1e9, "per_decade": per_decade},
            "delta": np.geomspace(1e-12, 1e-3, count).tolist()}
    whole = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in ({"family": "krr", "k": 10}, {"family": "generic"}):
            spec = write_spec(Path(tmp) / f"{row['family']}.toml", "bench: one slice", axes, [row])
            run = _tablegen("build", "--spec", str(spec), "--out", str(Path(tmp) / f"{row['family']}.zarr"),
                            "--workers", "0", "--no-progress")
            whole.append([common.label(row["family"], {k: v for k, v in row.items() if k != "family"}),
                          f"**{run.error}**" if run.error else f"{run.wall_s:.2f}", f"{run.rss_mib:.0f}"])
        raw = load_spec(DEFAULT_SPEC).canonical()
        pick = [raw["eps0"][0], raw["eps0"][len(raw["eps0"]) // 2], raw["eps0"][-1]]
        mechanisms = raw["mechanisms"][:2] if args.quick else raw["mechanisms"]
        deltas = raw["delta"][:3] if args.quick else raw["delta"]
        settings = tomllib.loads(DEFAULT_SPEC.read_text()).get("settings", {})  # as written there
        spec = write_spec(Path(tmp) / "slice.toml", "bench: slice of the default spec",
                          {"eps0": pick[:1] if args.quick else pick, "n": [100.0, 1e4], "delta": deltas},
                          mechanisms, settings)
        tasks = load_spec(spec)
        workers, base = [], None
        for count_workers in (1,) if args.quick else (1, 2):
            run = _tablegen("build", "--spec", str(spec), "--out", str(Path(tmp) / f"w{count_workers}.zarr"),
                            "--workers", str(count_workers), "--no-progress")
            rate = len(tasks.rows) * tasks.eps0.size / run.wall_s
            base = base or rate
            workers.append([count_workers, f"**{run.error}**" if run.error else f"{run.wall_s:.1f}",
                            f"{rate:.2f}", f"{rate / base:.2f}"])
    return [f"### Whole process `tablegen build --workers 0`: one eps0 (1.0), {per_decade} n per decade over "
            f"1e2..{axes['n']['stop']:.0e}, {count} deltas, no settings", "",
            *common.table(["mechanism", "wall s", "peak RSS MiB"], whole), "",
            f"### Local workers: {len(tasks.rows)} mechanisms x eps0 {tasks.eps0.tolist()} x n [1e2, 1e4] x "
            f"{tasks.delta.size} deltas of `workflows/default.toml` with its settings, from scratch, publish included",
            "", *common.table(["workers", "wall s", "(mechanism, eps0) slices/s", "speed-up"], workers)]


def sizing(args: argparse.Namespace) -> list[str]:
    rows = []
    for name in ("default",) if args.quick else ("default", "full"):
        sample = 1 if args.quick else args.sample
        run = _tablegen("build", "--spec", str(common.ROOT / "workflows" / f"{name}.toml"), "--out",
                        str(Path(tempfile.gettempdir()) / "bench-dry-run.zarr"), "--dry-run", "--json",
                        "--sample", str(sample), "--cores", "100")
        if run.error:
            rows.append([f"{name}.toml", f"**{run.error}**", "", "", "", "", ""])
            continue
        f = json.loads(run.stdout)
        rows.append([f"{name}.toml", f["slices"], f["cells"], f"{f['seconds_per_slice']:.2f} ({f['sampled_slices']})",
                     f"{f['core_hours']:.1f} ({f['core_hours_low']:.1f}-{f['core_hours_high']:.1f})",
                     f"{f['wall_hours']:.2f}", f"{f['raw_bytes'] / 1e6:.0f}"])
    return ["### `tablegen build --dry-run` sizing", "",
            *common.table(["spec", "slices", "cells", "s per slice (sampled)", "core-hours (2 s.e.)",
                           "hours on 100 cores", "raw MB"], rows)]


def slack(args: argparse.Namespace) -> list[str]:
    import xarray as xr

    ds = xr.open_zarr(args.table)
    if args.quick:
        ds = ds.isel(mechanism=slice(0, 2))
    eps = ds["eps"].values  # (mechanism, eps0, n, delta)
    corner, opposite = eps[:, 1:, :-1, :], eps[:, :-1, 1:, :]  # eps0 rounded up, n rounded down; the other corner
    cell = corner / opposite - 1
    chord = eps[:, :, :, :-1] / eps[:, :, :, 1:] - 1  # smaller delta / larger delta
    families = ds["family"].values
    eps0 = ds["eps0"].values[None, :-1, None, None]
    rows = []
    for family in dict.fromkeys(families):
        mine = families == family
        c = cell[mine][(opposite[mine] > 1e-6) & (opposite[mine] < eps0 * 0.999)]
        d = chord[mine][eps[mine][..., 1:] > 1e-6]
        rows.append([family, int(mine.sum()), f"{np.median(c):.1%}", f"{np.quantile(c, 0.9):.1%}", f"{c.max():.1%}",
                     f"{np.median(d):.1%}", f"{d.max():.1%}"])
    return [f"### Grid slack of `{args.table}`", "",
            "Bound on the lookup's overshoot inside a grid cell (eps0 x n corners; the delta chord separately), "
            "over cells where the opposite corner is above 1e-6 and below eps0.", "",
            *common.table(["family", "rows", "eps0 x n cell: median", "90%", "max", "delta chord: median", "max"],
                          rows)]


def synthetic(rows: int, n_eps0: int, per_decade: int, n_delta: int) -> tuple[object, dict[str, np.ndarray]]:
    """(spec, values) of the synthetic table of the ``store`` part."""
    import xarray as xr
    from scipy.interpolate import RegularGridInterpolator

    from tablegen.spec import spec_from_dict

    with xr.open_zarr(DEFAULT_TABLE) as ds:
        coarse = np.log(ds["eps"].values[:rows].astype(float))
        axes = (np.log(ds["eps0"].values), np.log(ds["n"].values.astype(float)), np.log(ds["delta"].values))
        mechanisms = [{"family": str(f), **json.loads(str(p))}
                      for f, p in zip(ds["family"].values[:rows], ds["params"].values[:rows], strict=True)]
    spec = spec_from_dict({
        "title": "synthetic dense table (python -m bench table --only store)",
        "axes": {"eps0": np.geomspace(0.05, 8, n_eps0).tolist(),
                 "n": {"start": 1e2, "stop": 1e9, "per_decade": per_decade},
                 "delta": np.geomspace(1e-12, 1e-3, n_delta).tolist()},
        "mechanism": mechanisms,
    }, "store-bench")
    grid = np.meshgrid(np.log(spec.eps0), np.log(spec.n.astype(float)), np.log(spec.delta), indexing="ij")
    points = np.stack([g.ravel() for g in grid], axis=-1)
    eps = np.empty(spec.shape)
    for r in range(rows):
        f = RegularGridInterpolator(axes, coarse[r], bounds_error=False, fill_value=None)
        eps[r] = np.exp(f(points)).reshape(grid[0].shape)
    eps = np.minimum(eps, spec.eps0[None, :, None, None])
    lower = np.full_like(eps, np.nan)
    wanted = np.flatnonzero((np.arange(spec.n.size) % 10 == 0) & (spec.n <= 1e6))
    lower[:, ::4, wanted] = 0.99 * eps[:, ::4, wanted]
    return spec, {"eps": eps, "eps_lower": lower}


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _scalar_latency(path: Path, count: int, trusted: bool = True) -> tuple[float, float]:
    """p50, p90 of scalar ``lookup.eps`` (us) on the table at ``path``: opened by ``open_table``
    where ``trusted``, else read by the reader alone (``open_store``: its manifest checked, no
    provenance or spot checks; for synthetic values nothing vouches for)."""
    import lookup
    from lookup.store.table import _load_table, open_store

    t = lookup.open_table(path) if trusted else open_store(path, _load_table, "")
    family, params = t.families[1], t.params[1]
    rng = np.random.default_rng(0)
    queries = zip(rng.uniform(0.05, 8, count).tolist(), np.round(10 ** rng.uniform(2, 9, count)).tolist(),
                  (10 ** rng.uniform(-12, -3, count)).tolist(), strict=True)
    times = []
    for eps0, n, delta in queries:
        start = time.perf_counter()
        lookup.eps(family, eps0=eps0, n=n, delta=delta, table=t, max_slack=None, **params)
        times.append(time.perf_counter() - start)
    times.sort()
    return statistics.median(times) * 1e6, times[int(0.9 * len(times))] * 1e6


def store(args: argparse.Namespace) -> list[str]:
    from tablegen import store as stores
    from tablegen.build import dataset

    start = time.perf_counter()
    shape = (2, 4, 5, 5) if args.quick else (20, 80, 100, 25)
    spec, values = synthetic(*shape)
    ds = dataset(spec, values, "python -m bench table --only store")
    made = time.perf_counter() - start
    count = 2000 if args.quick else 20000
    forms = [(f"float32, {b} mantissa bits, rounded up / down", b) for b in args.bits]
    forms += [("float64 (before the compact store)", None)] if args.float64 else []
    rows = []
    # the synthetic tables are vouched for by nothing (lookup.trust.origin refuses them at a spot check): they
    # are read by the reader alone (open_store), so the times are the reader's, without provenance
    with tempfile.TemporaryDirectory() as root:
        for name, bits in forms:
            out = Path(root) / (f"m{bits}.zarr" if bits else "f64.zarr")
            start = time.perf_counter()
            if bits is None:
                stores.publish(ds, out)
            else:
                stores.publish(ds, out, stores.CERTIFIED_ROUNDING, bits)
            written = time.perf_counter() - start
            opened = common.child([sys.executable, "-c", "from lookup.store.table import _load_table, open_store; "
                                   f"open_store({str(out)!r}, _load_table, '')"])
            p50, p90 = _scalar_latency(out, count, trusted=False)
            rows.append([name, f"{_size(out) / 1e6:.2f}", f"{_size(out / 'eps') / 1e6:.2f}",
                         f"{_size(out / 'eps_lower') / 1e6:.2f}", f"{written:.1f}", f"{opened.wall_s:.2f}",
                         f"{opened.rss_mib:.0f}", f"{p50:.1f} / {p90:.1f}"])
    p50, p90 = _scalar_latency(DEFAULT_TABLE, count)
    return ["### Compact store: size and load time", "",
            f"- synthetic table {' x '.join(map(str, spec.shape))} (mechanism, eps0, n, delta) = "
            f"{math.prod(spec.shape) / 1e6:.1f} M cells; lower bounds on every 4th eps0 and 10th n up to n = 1e6 "
            f"({np.isfinite(values['eps_lower']).mean():.1%} of cells); made in {made:.0f} s", "",
            *common.table(["form", "store MB", "eps MB", "eps_lower MB", "publish s", "open_store process wall s",
                           "its peak RSS MiB", f"scalar lookup.eps p50 / p90 us ({count})"], rows), "",
            f"- the same scalar queries on `data/default.zarr`, same conditions: p50 {p50:.1f} us, p90 {p90:.1f} us"]


def _export(out: Path, family: str, params: dict, eps0: float, n_min: float, n_max: float, deltas: list[float],
            slack_: float) -> common.Child:
    argv = ["export", "--device", "--mechanism", family, "--eps0", repr(eps0), "--n-min", f"{n_min:g}",
            "--n-max", f"{n_max:g}", "--delta", ",".join(f"{d:g}" for d in deltas), "--max-slack", repr(slack_),
            "--out", str(out), "--json", *(f"--{name}={value}" for name, value in params.items())]
    return _tablegen(*argv)


def device(args: argparse.Namespace) -> list[str]:
    from lookup.device.files import read_device
    from tablegen.engine import eps_bounds

    slacks = [0.005] if args.quick else args.slacks
    deployments = DEPLOYMENTS[:1] if args.quick else DEPLOYMENTS
    queries = 3 if args.quick else args.queries
    sizes, answers, files = [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, family, params, eps0, n_min, n_max, deltas in deployments:
            for max_slack in slacks:
                out = Path(tmp) / f"{family}-{max_slack}.dev"
                run = _export(out, family, params, eps0, n_min, n_max, deltas, max_slack)
                where = (f"{name}, eps0 {eps0:g}, n {n_min:g}..{n_max:g}, delta "
                         f"{', '.join(f'{d:g}' for d in deltas)}")
                if run.error:
                    sizes.append([where, f"{max_slack:.1%}", f"**{run.error}**", "", "", "", ""])
                    continue
                report = json.loads(run.stdout)
                files[name, max_slack] = out
                sizes.append([where, f"{max_slack:.1%}", len(report["n"]),
                              f"{report['bytes']} ({report['bytes'] / 1024:.1f})", f"{report['worst_slack']:.3%}",
                              f"{run.wall_s:.1f}", f"{run.rss_mib:.0f}"])
        rng = np.random.default_rng(0)
        for name, family, params, eps0, n_min, n_max, deltas in deployments:
            if (name, 0.005) not in files:
                continue
            reader = read_device(str(files[name, 0.005]))
            ratios = []
            for i in range(queries):
                n = int(10 ** rng.uniform(math.log10(n_min), math.log10(n_max)))
                delta = deltas[i % len(deltas)]
                live = eps_bounds(family, eps0=eps0, n=n, delta=delta, lower=False, **params).upper
                ratios.append(reader.eps(params, eps0, n, delta) / live)
            r = np.array(ratios)
            answers.append([name, f"{r.min():.5f}", f"{np.median(r):.5f}", f"{r.max():.5f}", int(np.sum(r < 1))])
    return ["### Device file size and export time against --max-slack (whole process)", "",
            *common.table(["deployment", "max-slack", "stored n", "file bytes (KiB)", "worst slack", "export wall s",
                           "peak RSS MiB"], sizes), "",
            f"### Answers from the max-slack 0.5% files against the live certified value ({queries} random n per "
            "deployment, seed 0, at the stored deltas)", "",
            *common.table(["deployment", "min answer/live", "median", "max", "below live"], answers)]


PUBLISH_AXES = {"eps0": {"start": 0.05, "stop": 10.0, "step": 0.05},
                "n": {"start": 1e2, "stop": 1e9, "per_decade": 142},
                "delta": {"start": 1e-12, "stop": 1e-3, "per_decade": 4.4}}
PUBLISH_CHILD = """import sys
from pathlib import Path
from tablegen.build import publish
from tablegen.spec import load_spec
root = Path(sys.argv[1])
publish(load_spec(root / "spec.toml"), root / "t.zarr.staging", root / "t.zarr", "python -m bench table --only publish")
"""


def _synthetic_staging(root: Path, gb: float) -> tuple[int, int]:
    """A finished staging store at ``root``/t.zarr.staging of at least ``gb`` GB of float64 cells
    (both variables); (rows, cells)."""
    from tablegen import build as builder
    from tablegen import store as stores
    from tablegen.spec import load_spec

    probe = load_spec(write_spec(root / "spec.toml", "probe", PUBLISH_AXES, [{"family": "krr", "k": 2}]))
    per_row = math.prod(probe.shape[1:])
    rows = math.ceil(gb * 1e9 / (2 * 8 * per_row))
    spec = load_spec(write_spec(root / "spec.toml", "synthetic staging (python -m bench table --only publish)",
                                PUBLISH_AXES, [{"family": "krr", "k": list(range(2, 2 + rows))}]))
    staging = stores.open_staging(root / "t.zarr", builder.header(spec), spec.shape)
    n, delta = spec.n[:, None], spec.delta[None, :]
    for r in range(rows):
        for e, eps0 in enumerate(spec.eps0):
            eps = np.minimum(eps0, (1 + 0.1 * r) * np.sqrt(np.log(1 / delta) / n) * np.exp(eps0 / 2))
            stores.write_slice(staging, (r, e), eps, np.where(e % 4 == 0, 0.99 * eps, np.nan), builder.header(spec))
    return rows, math.prod(spec.shape)


def publish(args: argparse.Namespace) -> list[str]:
    lines = ["publish of a synthetic staging store (build.publish in a fresh process; 2 float64 variables)", ""]
    results = []
    for gb in (args.publish_gb, 2 * args.publish_gb):
        with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
            rows, cells = _synthetic_staging(Path(scratch), gb)
            staged = _size(Path(scratch) / "t.zarr.staging")
            run = common.child([sys.executable, "-c", PUBLISH_CHILD, scratch], timeout=3600)
            if run.error:
                raise SystemExit(f"publish failed: {run.error}")
            results.append((f"{2 * 8 * cells / 1e9:.2f} GB ({rows} rows)", f"{staged / 1e9:.2f} GB",
                            f"{_size(Path(scratch) / 't.zarr') / 1e6:.0f} MB", f"{run.wall_s:.0f} s",
                            f"{run.rss_mib:.0f} MiB"))
    return lines + common.table(["float64 cells", "staging on disk", "published", "wall", "peak RSS"], results)


PARTS: dict[str, common.Part] = {"build": build, "sizing": sizing, "slack": slack, "store": store, "device": device,
                                 "publish": publish}


def main(argv: list[str] | None = None) -> None:
    p = common.parser("table", __doc__, PARTS)
    p.add_argument("--sample", type=int, default=6, help="sizing: tasks timed per spec")
    p.add_argument("--table", default=str(DEFAULT_TABLE), help="slack: the built table")
    p.add_argument("--bits", type=int, nargs="+", default=[12], help="store: mantissa bits of each form")
    p.add_argument("--float64", action="store_true", help="store: also the float64 form (slow, large)")
    p.add_argument("--slacks", type=float, nargs="+", default=[0.001, 0.005, 0.02], help="device: --max-slack values")
    p.add_argument("--queries", type=int, default=40, help="device: random n per deployment against live")
    p.add_argument("--publish-gb", type=float, default=2.0, help="publish: float64 cells of the smaller store, GB")
    p.add_argument("--scratch", default=None, help="publish: folder for the synthetic stores (default: $TMPDIR)")
    common.run("table", PARTS, p.parse_args(argv), argv)


if __name__ == "__main__":
    main()
