"""``lookup plot``: pictures of certified privacy from a table (matplotlib, imported lazily).

Kinds (each returns the matplotlib Figure and writes ``out``; PNG or SVG by the suffix):

* ``eps-vs-n``: certified eps against n at fixed (eps0, delta) for some mechanisms, the lower
  bound as triangles where the table stores one, and the generic closed form
  (arXiv:2012.12803, Theorem 3.1) for scale;
* ``eps-vs-eps0``: certified eps against eps0 at fixed (n, delta);
* ``privacy-curve``: certified delta against eps for one setting (the chord between grid deltas);
* ``eps0-max``: the largest certified local budget eps0 against n for a target (eps, delta);
* ``slack``: where the conservative lookup of a table is tight or loose: the grid-cell slack
  bound (conservative corner over opposite corner) over (eps0, n) at one delta.

Every point is a lookup answer (``source`` table or live; ``max_slack=None``: the table is drawn as
it is, not refined), so the curves are certified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import lookup
from lookup.store.table import Table

KINDS = ("eps-vs-n", "eps-vs-eps0", "privacy-curve", "eps0-max", "slack")


def _figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6.4, 4.2))


def _finish(fig: Any, ax: Any, xlabel: str, ylabel: str, title: str, out: str | Path, legend: bool = True) -> Any:
    """Label the axes, add the legend, write ``out``; returns the figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=7)
    fig.tight_layout()
    # title and axis labels also as metadata: tests compare them with the committed docs figures
    fig.savefig(out, dpi=120, metadata={"Title": title, "Description": f"x: {xlabel}; y: {ylabel}"})
    return fig


def _label(mechanism: str, params: dict[str, Any]) -> str:
    return " ".join([mechanism, *(f"{k}={v}" for k, v in params.items())])


def _series(rows: list[tuple[str, dict[str, Any]]], table: Table, **query: Any) -> list[tuple[str, Any]]:
    return [(_label(m, p), lookup.eps(m, table=table, max_slack=None, **query, **p)) for m, p in rows]


def eps_vs_n(rows: list[tuple[str, dict[str, Any]]], *, eps0: float, delta: float, table: Table,
             out: str | Path, closed_form: bool = True) -> Any:
    n = np.unique(np.round(np.geomspace(table.n[0], table.n[-1], 60)))
    fig, ax = _figure()
    for (mechanism, params), (label, a) in zip(rows, _series(rows, table, eps0=eps0, n=n, delta=delta), strict=True):
        line, = ax.loglog(n, a.value, label=f"{label} (certified)")
        _lower_marks(ax, table, mechanism, params, line.get_color(), eps0=eps0, delta=delta)
    if closed_form:
        from tablegen.mechanisms.generic import closed_form_eps

        ax.loglog(n, [min(closed_form_eps(eps0, int(m), delta), eps0) for m in n], "k:",
                  label="generic, closed form (Thm 3.1)")
    title = f"eps0 = {eps0:g}, delta = {delta:g} (triangles: lower bounds)"
    return _finish(fig, ax, "n (users)", "shuffled eps", title, out)


def _lower_marks(ax: Any, table: Table, mechanism: str, params: dict[str, Any], color: Any, **query: Any) -> None:
    """Lower bounds as triangles at the grid n where the table has one (> 0): they are stored on a
    sub-grid, and neither a band joining them nor one dropping to 0 elsewhere would be a bound."""
    a = lookup.eps(mechanism, table=table, max_slack=None, n=table.n, **query, **params)
    lower = np.nan_to_num(np.asarray(a.lower, dtype=float), nan=0.0)
    # the surface carries each stored bound to smaller n unchanged: a grid n stores its own bound
    # where its answer differs from the next larger n's
    shown = (lower > 0) & (lower != np.append(lower[1:], 0.0))
    if shown.any():
        ax.loglog(table.n[shown], lower[shown], "v", color=color, ms=4)


def eps_vs_eps0(rows: list[tuple[str, dict[str, Any]]], *, n: int, delta: float, table: Table,
                out: str | Path) -> Any:
    eps0 = table.eps0
    fig, ax = _figure()
    for label, a in _series(rows, table, eps0=eps0, n=n, delta=delta):
        ax.semilogy(eps0, a.value, "o-", ms=3, label=f"{label} (certified)")
    ax.plot(eps0, eps0, "k:", label="eps = eps0 (no amplification)")
    return _finish(fig, ax, "eps0 (local)", "shuffled eps", f"n = {n:g}, delta = {delta:g}", out)


def privacy_curve(mechanism: str, params: dict[str, Any], *, eps0: float, n: int, table: Table,
                  out: str | Path) -> Any:
    top = lookup.eps(mechanism, eps0=eps0, n=n, delta=table.delta[0], table=table, max_slack=None, **params).value
    eps = np.linspace(0.0, top, 80)[1:]
    a = lookup.delta(mechanism, eps0=eps0, n=n, eps=eps, table=table, max_slack=None, **params)
    fig, ax = _figure()
    ax.semilogy(eps, a.value, label="certified delta(eps)")
    return _finish(fig, ax, "eps", "delta", f"{_label(mechanism, params)}, eps0 = {eps0:g}, n = {n:g}", out)


def eps0_max_vs_n(rows: list[tuple[str, dict[str, Any]]], *, eps: float, delta: float, table: Table,
                  out: str | Path) -> Any:
    n = table.n
    fig, ax = _figure()
    for m, p in rows:
        a = lookup.eps0_max(m, eps=eps, n=n, delta=delta, table=table, max_slack=None, **p)
        ax.semilogx(n, a.value, "o-", ms=3, label=_label(m, p))
    title = f"local budget for (eps, delta) = ({eps:g}, {delta:g})"
    return _finish(fig, ax, "n (users)", "largest certified eps0", title, out)


def slack_map(mechanism: str, params: dict[str, Any], *, delta: float, table: Table, out: str | Path) -> Any:
    row = table.row(mechanism, params)
    if row is None:
        raise ValueError(f"{mechanism} {params} is not a row of {table.path}")
    d = int(np.searchsorted(table.delta, delta, side="left").clip(0, table.delta.size - 1))
    surface = table.upper[row, :, :, d]
    with np.errstate(divide="ignore", invalid="ignore"):
        cell = surface[1:, :-1] / surface[:-1, 1:] - 1  # eps0 rounded up, n down, over the opposite corner
    fig, ax = _figure()
    image = ax.pcolormesh(table.n, table.eps0, np.log10(np.clip(cell, 1e-4, None)), shading="flat", cmap="viridis")
    fig.colorbar(image, ax=ax, label="log10 slack bound of a lookup in the cell")
    ax.set_xscale("log")
    return _finish(fig, ax, "n (users)", "eps0", f"{_label(mechanism, params)} at delta = {table.delta[d]:g}", out,
                   legend=False)
