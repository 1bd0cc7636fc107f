"""Set-ups of the papers' numerical figures, recomputed with our certified engine (live): the ``papers``
part of the docs section (``python -m bench docs --only papers``; docs/paper-figures.md).

* clones-2a / clones-2b (Feldman-McMillan-Talwar (arXiv:2012.12803) Figure 2a, 2b): generic eps0-LDP randomizer,
  eps0 = 0.1 and 6, delta = 1e-6, n from 1e5 to 1e7: our certified generic bound ("Clones"
  numerical analysis, Theorem 3.2, certified), the closed form of Theorem 3.1 ("Clones,
  Theoretical") and the binary-RR lower bound ("2RR, lower bound").
* clones-2c: the same against eps0 from 0.01 to 8 at n = 1e6.
* fft-2-3 (Su-Cheng-Wang (arXiv:2504.07414) Figures 2-3): 10-RR, BLH, RAPPOR, OUE and Laplace at low
  (0.1) and large (4.0) eps0, delta = 1e-6, certified upper and lower bounds against n for the
  single randomizer and its 2- and 4-joint compositions (k attributes, eps0 / k each; the
  total is eps0-LDP), with the generic eps0 bound for comparison.
* parallel (Su-Cheng-Wang (arXiv:2504.07414) Appendix E, Figures 5-6): 10-RR and BLH, and their parallel
  composition (each user picks one with probability 1/2, full eps0), at eps0 = 0.1 and 4.0; the
  paper: "the amplification curve of the parallel composition lies between those of all
  individual components".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tablegen.engine import eps_bounds
from tablegen.mechanisms.generic import closed_form_eps

DELTA = 1e-6


def _plt():  # noqa: ANN202
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _clones_plot(x: np.ndarray, generic: list[float], closed: list[float], rr_lower: list[float], xlabel: str,
                 title: str, out: Path) -> None:
    """The three curves of Feldman-McMillan-Talwar (arXiv:2012.12803) Figure 2 against ``x``."""
    fig, ax = _plt().subplots(figsize=(6, 4))
    ax.loglog(x, generic, "-", label="generic, certified (Clones, numerical)")
    ax.loglog(x, closed, ":", label="Clones, Theoretical (Thm 3.1)")
    ax.loglog(x, rr_lower, "--", label="2RR, lower bound")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("central eps")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def clones_vs_n(eps0: float, points: int, out: Path) -> list[str]:
    n = np.unique(np.round(np.geomspace(1e5, 1e7, points))).astype(int)
    generic = [eps_bounds("generic", eps0=eps0, n=int(m), delta=DELTA, lower=False).upper for m in n]
    closed = [closed_form_eps(eps0, int(m), DELTA) for m in n]
    rr_lower = [eps_bounds("krr", eps0=eps0, n=int(m), delta=DELTA, k=2).lower for m in n]
    _clones_plot(n, generic, closed, rr_lower, "n (users)",
                 f"eps0 = {eps0:g}, delta = 1e-6 (arXiv:2012.12803 Fig 2)", out)
    ok = all(g <= c for g, c in zip(generic, closed, strict=True)) and all(
        lo <= g for lo, g in zip(rr_lower, generic, strict=True))
    return [f"| {out.name} | eps0 = {eps0:g} | n = 1e5: {generic[0]:.4g} (closed form {closed[0]:.4g}, 2RR lower "
            f"{rr_lower[0]:.4g}); n = 1e7: {generic[-1]:.4g} ({closed[-1]:.4g}, {rr_lower[-1]:.4g}) | "
            f"{'yes' if ok else 'NO'} |"]


def clones_vs_eps0(points: int, out: Path) -> list[str]:
    eps0 = np.geomspace(0.01, 8, points)
    generic = [eps_bounds("generic", eps0=float(e), n=10**6, delta=DELTA, lower=False).upper for e in eps0]
    closed = [min(closed_form_eps(float(e), 10**6, DELTA), float(e)) for e in eps0]
    rr_lower = [eps_bounds("krr", eps0=float(e), n=10**6, delta=DELTA, k=2).lower for e in eps0]
    _clones_plot(eps0, generic, closed, rr_lower, "eps0", "n = 1e6, delta = 1e-6 (arXiv:2012.12803 Fig 2c)",
                 out)
    ok = all(g <= c * (1 + 1e-12) for g, c in zip(generic, closed, strict=True))
    return [f"| {out.name} | n = 1e6 | eps0 = 0.01: {generic[0]:.4g} (closed form {closed[0]:.4g}); eps0 = 8: "
            f"{generic[-1]:.4g} ({closed[-1]:.4g}) | {'yes' if ok else 'NO'} |"]


def _short(n: int) -> str:
    """1e+07 -> 1e7."""
    return f"{n:.0e}".replace("e+0", "e").replace("e+", "e")


JOINT_PARTS = (1, 2, 4)  # "k-joint": k attributes, each randomized with eps0 / k (section 8)


def _bounds(name: str, params: dict, eps0: float, n: np.ndarray) -> tuple[list, list]:
    """Certified upper and lower bounds against n (NaN where the mechanism has no lower bound)."""
    bounds = [eps_bounds(name, eps0=eps0, n=int(m), delta=DELTA, **params) for m in n]
    return [b.upper for b in bounds], [b.lower if b.lower is not None else np.nan for b in bounds]


def _joint_bounds(name: str, params: dict, parts: int, eps0: float, n: np.ndarray) -> tuple[list, list]:
    """The same for ``parts`` jointly composed copies."""
    if parts > 1:
        name, params = "joint", {"base": name, "parts": parts, **params}
    return _bounds(name, params, eps0, n)


FFT_ROWS = {"10-RR": ("krr", {"k": 10}), "BLH": ("blh", {}), "RAPPOR": ("rappor", {}), "OUE": ("oue", {}),
            "Laplace": ("laplace", {})}


def fft_figures(points: int, out_dir: Path, titles: list[str], n_range: tuple[float, float]) -> list[str]:
    n = np.unique(np.round(np.geomspace(*n_range, points))).astype(int)
    lines = []
    plt = _plt()
    for eps0 in (0.1, 4.0):
        fig, axes = plt.subplots(1, len(titles), figsize=(3.4 * len(titles), 3.6), sharey=True, squeeze=False)
        for ax, title in zip(axes[0], titles, strict=True):
            name, params = FFT_ROWS[title]
            generic = [eps_bounds("generic", eps0=eps0, n=int(m), delta=DELTA, lower=False).upper for m in n]
            ax.loglog(n, generic, ":", color="gray", label="generic (standard clone)")
            cells, ok = [], True
            for parts, color in zip(JOINT_PARTS, ("C0", "C1", "C2"), strict=True):
                upper, lower = _joint_bounds(name, params, parts, eps0, n)
                label = "single" if parts == 1 else f"{parts}-joint"
                ax.loglog(n, upper, "-", color=color, label=f"{label}, certified upper")
                ax.loglog(n, lower, "--", color=color, label=f"{label}, lower bound")
                ok &= all(u <= g * (1 + 1e-3) for u, g in zip(upper, generic, strict=True))
                ok &= all(not lo > u for lo, u in zip(lower, upper, strict=True))
                cells.append(f"{label} {upper[-1]:.4g} (lower {lower[-1]:.4g})")
            ax.set_title(f"{title}, eps0 = {eps0:g}", fontsize=9)
            ax.set_xlabel("n (users)")
            values = f"n = {_short(n[-1])}: {'; '.join(cells)}; generic {generic[-1]:.4g}"
            lines.append(f"| fft_{eps0:g}.png | {title} eps0 = {eps0:g} | {values} | {'yes' if ok else 'NO'} |")
        axes[0, 0].set_ylabel("central eps")
        axes[0, 0].legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(out_dir / f"fft_{eps0:g}.png", dpi=100)
    return lines


def parallel_figures(points: int, out_dir: Path, n_range: tuple[float, float]) -> list[str]:
    n = np.unique(np.round(np.geomspace(*n_range, points))).astype(int)
    curves = [("10-RR", "krr", {"k": 10}), ("BLH", "blh", {}),
              ("parallel 10-RR | BLH", "parallel", {"bases": "krr,blh", "weights": "0.5,0.5", "k": 10})]
    lines = []
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    for ax, eps0 in zip(axes, (0.1, 4.0), strict=True):
        uppers = []
        for (label, name, params), color in zip(curves, ("C0", "C1", "C3"), strict=True):
            upper, lower = _bounds(name, params, eps0, n)
            ax.loglog(n, upper, "-", color=color, label=f"{label}, certified upper")
            ax.loglog(n, lower, "--", color=color, label=f"{label}, lower bound")
            uppers.append(np.array(upper))
        low, high = np.minimum(uppers[0], uppers[1]), np.maximum(uppers[0], uppers[1])
        between = bool(np.all((low <= uppers[2] * (1 + 1e-3)) & (uppers[2] <= high * (1 + 1e-3))))
        ax.set_title(f"parallel composition, eps0 = {eps0:g}", fontsize=9)
        ax.set_xlabel("n (users)")
        lines.append(f"| fft_parallel.png | eps0 = {eps0:g} | n = {_short(n[-1])}: 10-RR {uppers[0][-1]:.4g}, BLH "
                     f"{uppers[1][-1]:.4g}, parallel {uppers[2][-1]:.4g} | {'yes' if between else 'NO'} (between) |")
    axes[0].set_ylabel("central eps")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out_dir / "fft_parallel.png", dpi=100)
    return lines


def make(out: Path, figures: list[str], points: int, rows: list[str], n_range: tuple[float, float]) -> list[str]:
    """Write the PNGs of ``figures`` (of clones, fft, parallel) into ``out``; their Markdown summary."""
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| figure | setting | values | ours <= the looser bound |", "|---|---|---|---|"]
    if "clones" in figures:
        lines += clones_vs_n(0.1, points, out / "clones_2a.png")
        lines += clones_vs_n(6.0, points, out / "clones_2b.png")
        lines += clones_vs_eps0(points, out / "clones_2c.png")
    if "fft" in figures:
        lines += fft_figures(points, out, rows, n_range)
    if "parallel" in figures:
        lines += parallel_figures(points, out, n_range)
    return lines
