"""``lookup.eps``, ``lookup.delta``, ``lookup.eps0_max``: table first, engine where it pays.

Each call broadcasts its array arguments and answers every query it can from the table with
the conservative rules (``rules.py``) in one vectorised pass.  Queries outside the grid in the
unsafe directions (eps0 above it, n or delta below it), or for a mechanism or parameter value
the table cannot answer, are computed live by the engine.  A table answer whose slack estimate
exceeds ``max_slack`` (default ``MAX_SLACK`` = 2%; unknown at the grid's edge) is refined by the
engine (``refine.py``: estimate, then certify); ``max_slack=None`` answers from the table alone
and never imports the engine for in-grid queries.  Live answers are cached in memory and, with
``$SHUFFLE_EPS_CACHE`` set to a directory, on disk.  With ``live=False`` (or without the engine
installed) nothing is refined and an off-grid query is an error that says what the table covers.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lookup.answer import gaussian, refine, rules
from lookup.answer import live as live_engine
from lookup.device.files import chord, locate
from lookup.format import EPS0_MIN, EPS0_MIN_TEXT, N_LIMIT
from lookup.store.table import Table, TableError, open_table

MAX_SLACK = 0.02  # default: table answers estimated more than 2% above the live value are refined
MAX_SLACK_EPS0 = 0.01  # eps0_max's default: its answers stay within 1% below the engine's eps0_max
CLOSED_FORM = "generic-closed-form"  # Theorem 3.1 of arXiv:2012.12803, computed for any eps0-LDP randomizer
SOURCE = "<U18"  # "table", "certified estimate", "live"


@dataclass(frozen=True)
class Answer:
    """A certified value with its lower bound (NaN unknown), where it came from (``"table"``,
    ``"certified estimate"`` or ``"live"``), the grid corner used (table answers only: eps0
    rounded up, n down, the chord's grid deltas ``delta`` <= ``delta_upper``, and ``k`` for
    k-RR read at another grid k; NaN otherwise), the estimated relative slack over the live
    certified value (NaN where unknown, e.g. from the grid edge), whether a table answer
    came from the edge of the grid, and whether the value is certified: False only for a table
    answer from a table opened with ``verified=False`` that nothing vouches for, or refuted
    (docs/trust.md).  ``refuted``: None, or where this call's refinement proved a value of the
    table wrong (where and by how much); the table is refused from then on (``lookup.trust.origin.refute``).
    ``note``: None, or why a live eps is eps0 (one query, an n delta0 term using up delta:
    ``tablegen.engine.delta0_note``)."""

    value: Any
    lower: Any
    source: Any
    corner: dict[str, Any]
    slack: Any
    edge: Any
    certified: Any = True
    refuted: str | None = None
    note: str | None = None


def mechanism_name(name: Any) -> Any:
    """A mechanism name as the registry and the tables spell it, lower case: names are accepted in
    any case (``"kRR"`` is ``"krr"``), here for lookup and in ``tablegen.mechanisms.get_mechanism``
    for the engine.  Anything but a string unchanged (its user refuses it)."""
    return name.lower() if isinstance(name, str) else name


def eps(mechanism: str, *, eps0: Any = None, n: Any, delta: Any, table: Any = None, live: bool = True,
        max_slack: float | None = MAX_SLACK, rounds: Any = None, sample_rate: Any = None, quick: bool = False,
        **params: Any) -> Answer:
    """Certified eps of n users of ``mechanism`` at eps0 for ``delta`` (arrays broadcast); with
    ``rounds`` = T, of T identical rounds composed (scalar queries; ``lookup/answer/composed.py``), each
    user taking part in each round with probability ``sample_rate`` (live; docs/composition.md).
    ``quick=True`` (the service's first refinement of a question): one engine evaluation where it
    suffices, the smooth estimate inflated by half a step certified and published with its slack
    unknown (NaN: no bracket against a value the engine refused), beside the table's lower bound (or
    none) instead of one the engine proves near it (``refine.eps``, ``refine.lower_eps``).

    Args:
        mechanism: a family of the engine's registry (``krr``, ``generic``, ``laplace``, ...), or
            ``gaussian`` (``sigma``, ``inputs``: no eps0, answered live, ``lookup/answer/gaussian.py``;
            with ``rounds``, no ``sample_rate``).
        eps0: the local randomizer's eps0 (scalar or array; required but for gaussian).
        n: the number of users, an integer >= 1 (scalar or array).
        delta: in (0, 1) (scalar or array).
        table: a ``Table`` (``open_table``), a path, or None for the shipped table.
        live: whether the engine may answer what the table cannot (off the grid, or refinements).
        max_slack: refine table answers whose slack estimate exceeds it (None: the table alone).
        rounds: T identical rounds composed (None: one round).
        sample_rate: each user's probability of taking part in a round (with ``rounds``).
        quick: the service's first refinement (see above).
        **params: the family's parameters (``k`` for k-RR, ``g`` for OLH, ``sigma`` for gaussian, ...).

    Returns:
        An ``Answer``: ``value`` (certified eps, never below the exact value of the analysis),
        ``lower`` (a lower bound, NaN where none), ``source``, ``slack`` and the grid corner used.
    """
    max_slack, params, mechanism = checked_max_slack(max_slack), checked_params(params), mechanism_name(mechanism)
    if mechanism == gaussian.NAME:
        others = {"eps0": eps0, "sample_rate": sample_rate}
        if rounds is not None:
            return _gaussian_composed(live, params, others, rounds, n=n, delta=delta)
        return _gaussian("eps", live, params, others, table, max_slack, n=n, delta=delta)
    _eps0_given(mechanism, params, eps0)
    if sample_rate is not None and rounds is None:
        raise ValueError("sample_rate needs rounds (T subsampled rounds composed; rounds=1 for one round)")
    if rounds is not None:
        return _composed(mechanism, params, table, live, max_slack is not None, eps0=eps0, n=n, delta=delta,
                         rounds=rounds, sample_rate=sample_rate)
    if mechanism == CLOSED_FORM:
        return _closed_form(params, table, live, eps0=eps0, n=n, delta=delta)
    if table is None:
        table = default_table()
    if isinstance(table, Table) and all(type(v) in (float, int) for v in (eps0, n, delta)):
        fast = _scalar_eps(table, mechanism, params, eps0, n, delta, max_slack)
        if fast is not None:
            return fast
    q = _Queries(mechanism, params, table, eps0=eps0, n=n, delta=delta)
    c, (value, lower, slack, outside, edge) = _from_table(q, rules.eps_at, "delta")
    if c is not None:
        if max_slack is not None and live and live_engine.available():
            # a row answered at grid eps0 only (OLH), between grid eps0: no table value, but an
            # estimate to certify (cheaper than the search)
            unordered = c.unordered & q.within_ranges()
            outside &= ~unordered
            value[unordered], lower[unordered], slack[unordered] = np.inf, np.nan, np.nan
    source = q.live(live, outside, lambda i: live_engine.eps(q.mechanism, q.point(i), q.params), value, lower)
    q.note = _delta0_note(q, value, source)
    todo = q.loose(live, max_slack, source, slack)
    if todo.size:
        from lookup.answer.estimate import eps_estimate

        inside = todo[~edge[todo]]  # off the grid's ranges: no estimate, the engine's search
        guess = np.full(q.size, np.nan)
        guess[inside] = eps_estimate(q.table, q.rows, *(q.args[k][inside] for k in ("eps0", "n", "delta")))
        tighter = q.rows is not None and q.rows.tighter_live
        if tighter:  # the row's values are far above the engine's: scaled by the row's lower / upper
            guess[inside] *= [_lower_ratio(q, i) for i in inside]  # (NaN where unknown: the engine's search)
        for i in todo:
            value[i], slack[i], source[i], lower[i] = _checked(
                q, i, "eps", lambda point, v=value[i], s=slack[i], g=guess[i]: refine.eps(
                    q.mechanism, point, q.params, v, s, g, min(max_slack, refine.STEP), quick), lower[i])
            if not quick:
                # the engine's lower bound on such a row is within 0.03% of its certified eps (ratio 1)
                ratio = 1.0 if tighter else _lower_ratio(q, i)
                lower[i] = refine.lower_eps(q.mechanism, q.point(i), q.params, value[i], lower[i], ratio)
    return q.answer(value, lower, source, q.grid(c, source, delta=True), slack, edge)


def _lower_ratio(q: _Queries, i: int, eps0: float | None = None) -> float:
    """``estimate.lower_ratio`` at query ``i`` (at ``eps0`` if given): the table's lower / upper at
    the nearest grid point with lower bounds; NaN where the table has none."""
    from lookup.answer.estimate import lower_ratio

    if q.rows is None or q.rows.lower is None:
        return math.nan
    point = q.point(i)
    return lower_ratio(q.table, q.rows.lower, point["eps0"] if eps0 is None else eps0, point["n"], point["delta"])


def _delta0_note(q: _Queries, value: np.ndarray, source: np.ndarray) -> str | None:
    """The engine's note on one query's live eps equal to eps0 (``live.delta0_note``: an n delta0
    term using up delta); None otherwise."""
    if q.size != 1 or source[0] != "live" or not value[0] >= q.args["eps0"][0]:
        return None
    return live_engine.delta0_note(q.mechanism, q.point(0), q.params)


def _checked(q: _Queries, i: int, kind: str, refinement: Any, lower: float) -> tuple[float, float, str, float]:
    """(value, slack, source, lower) of query ``i`` refined by ``refinement(point)`` (a ``refine``
    function), every refinement a check of the table (issue 37): its value proved wrong there
    (``refine.Refuted``), or its lower bound above the engine's certified value, refutes it
    (``lookup.trust.origin.refute``: its trust record forgotten, later opens in this process refused,
    this ``Table`` no longer certified, ``q.refuted`` the detail) and the engine's certified
    value is answered, without the table's lower bound."""
    from lookup.trust import origin as trust

    point = q.point(i)
    try:
        value, slack, source = refinement(point)
    except refine.Refuted as found:
        detail, (value, slack, source) = found.detail, found.refined
    else:
        if not (source != "table" and lower > value):
            return value, slack, source, lower
        detail = (f"at {refine.where(q.mechanism, q.params, point)} the table's lower bound {lower!r} is above the "
                  f"engine's certified {kind} {value!r}")
    q.refuted = q.refuted or detail
    with contextlib.suppress(TableError):
        trust.refute(q.table, detail)
    return value, slack, source, math.nan


def _closed_form(params: dict[str, Any], table: Any, live: bool, **args: Any) -> Answer:
    """``eps("generic-closed-form", ...)``: the closed form of arXiv:2012.12803
    (Theorem 3.1) for any eps0-LDP randomizer, as ``tablegen compute`` answers
    it (computed, never read from a table; no lower bound)."""
    if params:
        raise ValueError(f"{CLOSED_FORM} takes no mechanism parameters, got {', '.join(sorted(params))}")
    q = _Queries(CLOSED_FORM, params, table, **args)
    value = q.nan()

    def compute(i: int) -> tuple[float, float]:
        from tablegen.mechanisms.generic import closed_form_eps

        point = q.point(i)
        return closed_form_eps(point["eps0"], int(point["n"]), point["delta"]), math.nan

    source = q.live(live, np.ones(q.size, bool), compute, value, q.nan())
    return q.answer(value, q.nan(), source, q.grid(None, source, delta=True), q.nan(), np.zeros(q.size, bool))


def _composed(mechanism: str, params: dict[str, Any], table: Any, live: bool, precise: bool, **args: Any) -> Answer:
    """``eps(..., rounds=T)``: one scalar query, the composition code imported only here; ``precise``
    (a ``max_slack``): the engine's composition (tens of milliseconds once its process is warm, the
    round's PLD kept for any T), the table's only where the engine cannot answer or ``live`` is off
    (``max_slack=None``: the table's, composed from its curve: looser, docs/composition.md)."""
    from lookup.answer import composed

    if any(np.ndim(v) for v in args.values()):
        raise ValueError("rounds takes scalar eps0, n, delta and rounds (one query at a time)")
    rate = args.pop("sample_rate")
    composition = {"rounds": args.pop("rounds"), **({} if rate is None else {"sample_rate": rate})}
    q = _Queries(mechanism, params, table, **args)
    a = composed.eps(mechanism, q.table, q.params, {**q.point(0), **composition}, live, precise)
    return Answer(a["value"], math.nan, a["source"], a["corner"], math.nan, False,
                  a["source"] != "table" or q.table.certified)


def delta(mechanism: str, *, eps0: Any = None, n: Any, eps: Any, table: Any = None, live: bool = True,
          max_slack: float | None = MAX_SLACK, **params: Any) -> Answer:
    """Certified delta at ``eps`` (arrays broadcast); refined by one engine evaluation (with its
    lower bound, published where larger than the table's) where the table's slack estimate exceeds
    ``max_slack``.

    Args:
        mechanism, eps0, n, table, live, max_slack, **params: as for ``eps``.
        eps: the eps at which delta is certified, >= 0 (scalar or array).

    Returns:
        An ``Answer`` whose ``value`` is the certified delta and ``lower`` its lower bound.
    """
    max_slack, params, mechanism = checked_max_slack(max_slack), checked_params(params), mechanism_name(mechanism)
    if mechanism == gaussian.NAME:
        return _gaussian("delta", live, params, {"eps0": eps0}, n=n, eps=eps)
    _eps0_given(mechanism, params, eps0)
    _eps_only(mechanism)
    q = _Queries(mechanism, params, table, eps0=eps0, n=n, eps=eps)
    c, (value, lower, slack, outside, edge) = _from_table(q, rules.delta_at, "eps")
    source = q.live(live, outside, lambda i: live_engine.delta(q.mechanism, q.point(i), q.params), value, lower)
    for i in q.loose(live, max_slack, source, slack):
        value[i], slack[i], source[i], lower[i] = _checked(
            q, i, "delta", lambda point, v=value[i], s=slack[i]: refine.delta(q.mechanism, point, q.params, v, s),
            lower[i])
        lower[i] = np.fmax(lower[i], _engine_delta_lower(q, i))
    return q.answer(value, lower, source, q.grid(c, source), slack, edge)


def _from_table(q: _Queries, at: Any, target: str) -> tuple[Any, tuple[np.ndarray, ...]]:
    """The grid corner (None without a row) and (value, lower, slack, outside, edge) read by ``at``
    (``rules.eps_at`` or ``rules.delta_at``) at each query's eps0 and ``target`` (delta or eps); where
    the table has no row, every query outside it and nothing read."""
    if q.rows is None:
        return None, (q.nan(), q.nan(), q.nan(), np.ones(q.size, bool), np.zeros(q.size, bool))
    c = rules.corner(q.table, q.args["eps0"], q.args["n"], q.rows.upper)
    return c, at(q.table, q.rows, c, q.args["eps0"], q.args[target])


def _engine_delta_lower(q: _Queries, i: int) -> float:
    """The engine's lower bound on the exact delta at query ``i`` (``live.delta``: evaluated, and
    cached, by ``refine.delta``; NaN where the engine has none).  Never above the published
    delta: where it is above the table's, the refinement refuted the table."""
    try:
        return live_engine.delta(q.mechanism, q.point(i), q.params)[1]
    except ValueError:
        return math.nan


def eps0_max(mechanism: str, *, eps: Any, n: Any, delta: Any, table: Any = None, live: bool = True,
             max_slack: float | None = MAX_SLACK_EPS0, **params: Any) -> Answer:
    """Largest eps0 whose certified eps at (n, delta) is <= ``eps``: grid eps0 rounded down,
    refined by the engine (estimate, then certify) where the slack estimate exceeds ``max_slack``.

    Args:
        mechanism, n, delta, table, live, **params: as for ``eps``.
        eps: the target eps after shuffling, > 0 (scalar or array).
        max_slack: refine where the slack estimate exceeds it (default 1%; None: the table alone).

    Returns:
        An ``Answer`` whose ``value`` is an eps0 at which eps is certified (the local budget).
    """
    max_slack, params, mechanism = checked_max_slack(max_slack), checked_params(params), mechanism_name(mechanism)
    if mechanism == gaussian.NAME:
        gaussian.checked("eps0_max", params, {})  # refused: no eps0
    gaussian.foreign(mechanism, params)
    _eps_only(mechanism)
    q = _Queries(mechanism, params, table, eps=eps, n=n, delta=delta)
    value, slack, outside, edge = q.nan(), q.nan(), np.ones(q.size, bool), np.zeros(q.size, bool)
    if q.rows is not None:
        value, slack, outside, edge = rules.eps0_max_at(q.table, q.rows, q.args["n"], q.args["eps"], q.args["delta"])
    source = q.live(live, outside, lambda i: (live_engine.eps0_max(q.mechanism, q.point(i), q.params), math.nan),
                    value, q.nan())
    todo = q.loose(live, max_slack, source, slack)
    if todo.size:
        from lookup.answer.estimate import eps0_estimate

        inside = todo[~edge[todo]]
        guess = np.full(q.size, np.nan)
        n_, eps_, delta_ = (q.args[k][inside] for k in ("n", "eps", "delta"))
        if q.rows is not None and q.rows.tighter_live:  # the row's eps far above the engine's: the eps0
            # where the row's eps, scaled by its lower / upper near the table's answer, meets the target
            eps_ = eps_ / np.array([_lower_ratio(q, i, float(value[i])) for i in inside])
        # the bracket's top: where the table says the answer must be below (the grid's largest eps0
        # where it says nothing: a row measured against its lower bound may have none above)
        top = np.where(np.isnan(slack[inside]), q.table.eps0[-1], value[inside] * (1 + slack[inside]))
        guess[inside] = eps0_estimate(q.table, q.rows, n_, eps_, delta_, value[inside], top)
        step = min(max_slack, refine.STEP_EPS0)
        bisect = q.rows is not None and q.rows.tighter_live  # the engine's eps0_max search: the blanket bound
        for i in todo:
            value[i], slack[i], source[i], _ = _checked(
                q, i, "eps0_max", lambda point, v=value[i], s=slack[i], g=guess[i]: refine.eps0_max(
                    q.mechanism, point, q.params, v, s, g, step, bisect), math.nan)
    return q.answer(value, q.nan(), source, {}, slack, edge)


def _scalar_eps(table: Table, mechanism: str, params: dict[str, Any], eps0: float, n: float, delta: float,
                max_slack: float | None) -> Answer | None:
    """The table answer of one query in plain Python (the same rules as ``rules.eps_at``, via
    ``device.locate``/``device.chord``); None when it needs the general path."""
    _check_domain({"eps0": eps0, "n": n, "delta": delta})
    row = table.row(mechanism, {k: v for k, v in params.items() if v is not None})
    cell = locate(*table.axis_lists, eps0, n, delta) if row is not None else None
    if cell is None or (not table.eps0_monotone[row] and table.axis_lists[0][cell.eps0_up] != eps0):
        return None
    surface = table.upper[row]
    top_n = len(table.axis_lists[1]) - 1
    value = min(chord(lambda d: float(surface[cell.eps0_up, cell.n_down, d]), cell), eps0)
    far = surface[max(cell.eps0_down, 0), min(cell.n_up, top_n)]
    opposite = float(far[cell.hi])  # as rules.eps_at: log-log between the grid deltas
    if cell.t:
        deltas = table.axis_lists[2]
        w = math.log(deltas[cell.hi] / delta) / math.log(deltas[cell.hi] / deltas[cell.lo])
        opposite = float(far[cell.lo]) ** w * opposite ** (1 - w)
    slack = math.nan if cell.edge or opposite <= 0 else value / min(opposite, eps0) - 1
    deltas = table.axis_lists[2]
    lower = math.nan
    if cell.eps0_down >= 0 and cell.n_up <= top_n and delta <= deltas[-1]:
        lower = min(float(table.lower[row, cell.eps0_down, cell.n_up, cell.hi]), value)
    if rules.tighter_live(table, row):  # as rules.eps_at: measured against the row's lower bound
        slack = math.nan if cell.edge or not lower > 0 else value / lower - 1
    if max_slack is not None and not slack <= max_slack:
        return None
    grid = {"eps0": table.axis_lists[0][cell.eps0_up], "n": table.axis_lists[1][cell.n_down],
            "delta": deltas[cell.lo], "delta_upper": deltas[cell.hi]}
    return Answer(value, lower, "table", grid, slack, cell.edge, table.certified)


def _eps0_given(mechanism: str, params: dict[str, Any], eps0: Any) -> None:
    """ValueError where an eps0-LDP mechanism is asked without eps0, or with gaussian's parameters."""
    gaussian.foreign(mechanism, params)
    if eps0 is None:
        raise ValueError(f"mechanism {mechanism!r} needs eps0, the local privacy parameter ({EPS0_MIN_TEXT})")


def _gaussian(kind: str, live: bool, params: dict[str, Any], others: dict[str, Any], table: Any = None,
              max_slack: float | None = None, **args: Any) -> Answer:
    """``eps`` or ``delta`` of mechanism gaussian (``lookup/answer/gaussian.py``): eps from the sigma
    device file that answers for ``table`` (``gaussian.device_file``: the one ``table`` names, else the
    shipped one) where it covers the query and its slack (bounded by the file's own lower bound) is within
    ``max_slack`` or nothing live can do better (source "table"), every other query live (arrays broadcast,
    sigma with them: certified, slack 0); no grid corner; what it does not take refused by name, and
    without live computation a ``TableError`` where no file answers."""
    gaussian.checked(kind, params, others)
    shape, flat = _broadcast({"sigma": params["sigma"], **args})
    device = gaussian.device_file(table) if kind == "eps" else None
    can_live = live and live_engine.available()
    size = math.prod(shape)
    value, lower = np.full(size, np.nan), np.full(size, np.nan)
    source, slack, edge = np.full(size, "live", SOURCE), np.zeros(size), np.zeros(size, bool)
    for i in range(size):
        point = {k: float(v[i]) for k, v in flat.items()}
        stored = None if device is None else gaussian.device_eps(device, point)
        if stored is not None and (not can_live or max_slack is None or stored[2] <= max_slack):
            (value[i], lower[i], slack[i]), source[i] = stored, "table"
        elif not can_live:
            missing = ("the sigma device files hold eps, not delta" if kind == "delta" else None if device is None
                       else f"the device file does not cover sigma={point['sigma']:g} n={point['n']:g} "
                            f"delta={point['delta']:g}")
            raise TableError(gaussian.no_live(live) if missing is None else gaussian.no_live(live, missing))
        else:
            value[i], lower[i] = gaussian.bounds(kind, point)
    return Answer(*(_shaped(a, shape) for a in (value, lower, source)), {}, _shaped(slack, shape),
                  _shaped(edge, shape), _shaped(~edge, shape))


def _gaussian_composed(live: bool, params: dict[str, Any], others: dict[str, Any], rounds: Any,
                       **args: Any) -> Answer:
    """``eps("gaussian", ..., rounds=T)``: one scalar query, T rounds composed live
    (``gaussian.composed``), labelled as every composed answer (source live, no lower bound, slack
    and corner unknown); refused as ``_gaussian`` refuses, rounds checked by ``tablegen.compose``."""
    gaussian.checked("eps", params, others)
    if any(np.ndim(v) for v in (params["sigma"], *args.values(), rounds)):
        raise ValueError("rounds takes scalar sigma, n, delta and rounds (one query at a time)")
    _, flat = _broadcast({"sigma": params["sigma"], **args})
    if not live_engine.available():
        raise TableError(gaussian.no_live(live))
    from tablegen.compose import checked_rounds

    point = {**{k: float(v[0]) for k, v in flat.items()}, "rounds": checked_rounds(rounds)}
    if not live:
        raise TableError(gaussian.no_live(live))
    return Answer(gaussian.composed(point), math.nan, "live", {}, math.nan, False, True)


def _shaped(a: np.ndarray, shape: tuple[int, ...]) -> Any:
    """A flat answer array in the queries' broadcast shape (a Python scalar for scalar queries)."""
    return a.reshape(shape) if shape else a[0].item()


def _broadcast(args: dict[str, Any]) -> tuple[tuple[int, ...], dict[str, np.ndarray]]:
    """The queries' shape and each argument broadcast to it, flat, as floats, checked against ``DOMAIN``."""
    arrays = {name: _numbers(name, value) for name, value in args.items()}
    try:
        shaped = np.broadcast_arrays(*arrays.values())
    except ValueError:
        shapes = ", ".join(f"{k}{np.shape(v)}" for k, v in arrays.items())
        raise ValueError(f"arguments do not broadcast together: {shapes}") from None
    flat = {k: v.ravel().astype(float) for k, v in zip(arrays, shaped, strict=True)}
    _check_domain(flat)
    return shaped[0].shape, flat


def _eps_only(mechanism: str) -> None:
    if mechanism == CLOSED_FORM:
        raise ValueError(f"mechanism={CLOSED_FORM} answers eps only (the closed form gives eps at delta)")


@functools.cache
def default_table() -> Table:
    """The default table, opened and verified once per process (``open_table(path)`` rereads a
    table republished while the process runs)."""
    return open_table()


class _Queries:
    """Validated, broadcast query arrays, the table and the mechanism's rows in it."""

    def __init__(self, mechanism: str, params: dict[str, Any], table: Any, **args: Any) -> None:
        if not isinstance(mechanism, str) or not mechanism:
            raise ValueError(f"mechanism must be a mechanism name, got {mechanism!r}")
        self.mechanism = mechanism
        self.params = {k: v for k, v in params.items() if v is not None}
        self.shape, self.args = _broadcast(args)
        self.size = math.prod(self.shape)
        self.table: Table = table if isinstance(table, Table) else (
            default_table() if table is None else open_table(table))
        self.rows = rules.rows(self.table, mechanism, self.params)
        self.refuted: str | None = None  # set by ``_checked`` where a refinement proves the table wrong
        self.note: str | None = None  # set by ``eps`` (``_delta0_note``)

    def nan(self) -> np.ndarray:
        return np.full(self.size, np.nan)

    def point(self, i: int) -> dict[str, float]:
        return {k: float(v[i]) for k, v in self.args.items()}

    def within_ranges(self) -> np.ndarray:
        """Queries inside the table's axis ranges (eps0, n and delta between their grid ends)."""
        t, a = self.table, self.args
        return ((a["eps0"] >= t.eps0[0]) & (a["eps0"] <= t.eps0[-1]) & (a["n"] >= t.n[0]) & (a["n"] <= t.n[-1])
                & (a["delta"] >= t.delta[0]) & (a["delta"] <= t.delta[-1]))

    def live(self, allowed: bool, outside: np.ndarray, compute: Any, value: np.ndarray,
             lower: np.ndarray) -> np.ndarray:
        """Queries ``outside`` the table computed live (``compute(i)`` -> (value, lower)), in
        place; returns the source of every answer."""
        source = np.where(outside, "live", "table").astype(SOURCE)
        if outside.any():
            self.require_live(allowed, outside)
            for i in np.flatnonzero(outside):
                value[i], lower[i] = compute(i)
        return source

    def loose(self, allowed: bool, max_slack: float | None, source: np.ndarray, slack: np.ndarray) -> np.ndarray:
        """Indices of the table answers to refine: slack estimate above ``max_slack`` or unknown
        (none with ``max_slack=None``, ``live=False`` or without the engine)."""
        if max_slack is None or not allowed:
            return np.zeros(0, int)
        todo = np.flatnonzero(loose(source, slack, max_slack))
        return todo if todo.size and live_engine.available() else np.zeros(0, int)

    def grid(self, c: rules.Corner | None, source: np.ndarray, delta: bool = False) -> dict[str, np.ndarray]:
        """The grid values a table answer was read at (NaN for other answers): eps0 rounded up,
        n down, for eps the grid deltas of the chord (``delta`` = ``delta_upper`` on a grid
        delta), and ``k`` where k-RR was read at another grid k."""
        not_table = source != "table"
        if c is None:  # no row: every answer is live
            c = rules.corner(self.table, self.args["eps0"], self.args["n"])
        out = {"eps0": self.table.eps0[c.eps0_up], "n": self.table.n[c.n_down]}
        if delta:
            lo, hi = rules.delta_bracket(self.table.delta, self.args["delta"])
            out.update(delta=self.table.delta[lo], delta_upper=self.table.delta[hi])
        if self.rows is not None and self.rows.k is not None:
            out["k"] = np.full(self.size, self.rows.k)
        return {k: np.where(not_table, np.nan, v) for k, v in out.items()}

    def require_live(self, allowed: bool, todo: np.ndarray) -> None:
        if allowed and live_engine.available():
            return
        i = int(np.flatnonzero(todo)[0])
        why = ("live computation is off (--no-live, live=False)" if not allowed
               else "the engine (tablegen) is not installed")
        cover = self.table.coverage()
        detail = (f"mechanisms {', '.join(cover['mechanisms'])}; eps0 {cover['eps0'][0]:g}..{cover['eps0'][1]:g}; "
                  f"n {cover['n'][0]:g}..{cover['n'][1]:g} (larger n answered at the largest); "
                  f"delta {cover['delta'][0]:g}..{cover['delta'][1]:g}")
        target = " ".join([self.mechanism, *(f"{k}={number_text(v)}"
                                             for k, v in [*self.params.items(), *self.point(i).items()])])
        name = f"{cover['table']} (digest {cover['digest'][:16]})" if cover["digest"] else cover["table"]
        raise TableError(f"the table cannot answer {target} and {why}. The table {name} covers: {detail}")

    def answer(self, value: np.ndarray, lower: np.ndarray, source: np.ndarray, grid: dict[str, np.ndarray],
               slack: np.ndarray, edge: np.ndarray) -> Answer:
        slack = np.where(source == "live", 0.0, slack)
        edge = edge & (source == "table")
        def out(a: np.ndarray) -> Any:
            return _shaped(a, self.shape)

        certified = (source != "table") | self.table.certified
        return Answer(out(value), out(lower), out(source), {k: out(v) for k, v in grid.items()}, out(slack),
                      out(edge), out(certified), self.refuted, self.note)


def loose(source: Any, slack: Any, max_slack: float | None) -> np.ndarray:
    """Where a table answer's slack estimate is above ``max_slack`` or unknown (the answers the
    engine refines; none for ``max_slack=None``)."""
    if max_slack is None:
        return np.zeros(np.shape(source), bool)
    return (np.asarray(source) == "table") & ~(np.asarray(slack, dtype=float) <= max_slack)


def checked_max_slack(value: Any) -> float | None:
    """``max_slack``: None (table only) or a number >= 0 (0: refine every table answer whose
    slack is not known to be 0)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"max_slack must be a number >= 0 (a fraction: 0.02 is 2%) or None (table only), "
                         f"got max_slack={value!r}")
    return float(value)


def number_text(value: Any) -> str:
    """A number in full as a person writes it (1000000, 1e-08, 0.5: integral floats without '.0'),
    anything else as str (the messages here and the CLIs' text output)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


NUMERIC_PARAMS = ("k", "g", "domain", "delta0", "parts", "sigma")


def checked_params(params: dict[str, Any]) -> dict[str, Any]:
    """The mechanism parameters given (None: not given), numeric ones written as text ("10", as a
    query string or a form gives them) parsed as numbers, so that k="10" finds the table's k = 10
    row as k=10 does; a bool is refused (True is not a count)."""
    out = {}
    for name, value in params.items():
        if value is None:
            continue
        if name in NUMERIC_PARAMS and isinstance(value, bool):
            raise ValueError(f"{name} must be a number, got {name}={value!r}")
        out[name] = parse_number(name, value) if name in NUMERIC_PARAMS and isinstance(value, str) else value
    return out


def parse_max_slack(text: str | None, kind: str = "eps") -> float | None:
    """``--max-slack`` / ``max_slack=`` text: a number, or ``none`` for table-only answers;
    absent (None): the default of the query ``kind`` (``MAX_SLACK``; ``MAX_SLACK_EPS0`` for eps0_max)."""
    if text is None:
        return MAX_SLACK_EPS0 if kind == "eps0_max" else MAX_SLACK
    if text.strip().lower() == "none":
        return None
    return parse_number("max_slack", text)


def _numbers(name: str, value: Any) -> np.ndarray:
    try:
        given = np.asarray(value)
        if given.dtype.kind not in "iuf":  # not bools (n=True is no count), strings or objects
            raise TypeError
        array = given.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {name}={value!r}") from None
    if array.size == 0:
        raise ValueError(f"{name} is empty")
    return array


# comparisons only (NaN fails them, a < inf is finiteness), so the same test serves a Python float
# without building an array (the scalar hot path) and an array
DOMAIN = {
    "eps0": (lambda a: (a >= EPS0_MIN) & (a < math.inf), f"{EPS0_MIN_TEXT} and finite"),
    "eps": (lambda a: (a >= 0) & (a < math.inf), ">= 0 and finite"),
    "n": (lambda a: (a >= 1) & (a <= N_LIMIT) & (a == a // 1), "an integer in [1, 1e18]"),
    "delta": (lambda a: (a > 0) & (a < 1), "in (0, 1)"),
    "sigma": (lambda a: (a >= gaussian.SIGMA_MIN) & (a <= gaussian.SIGMA_MAX), gaussian.SIGMA_ALLOWED),
}


def _check_domain(args: dict[str, Any]) -> None:
    for name, value in args.items():
        ok, allowed = DOMAIN[name]
        if isinstance(value, float) and ok(value):  # a valid Python float: no array built
            continue
        with np.errstate(invalid="ignore"):  # inf // 1 is NaN: inf already fails a < inf
            bad = ~ok(np.asarray(value))
        if bad.any():
            raise ValueError(f"{name} must be {allowed}, got {name}={float(np.asarray(value)[bad][0])!r}")


KEYS = {"eps": ("eps", "eps_lower"), "delta": ("delta", "delta_lower"), "eps0_max": ("eps0", None)}


def json_ready(kind: str, a: Answer, rounds: int | None = None) -> dict[str, Any]:
    """The answer of ``lookup.<kind>`` as the CLI and HTTP endpoint print it (NaN as null)."""
    value, lower = KEYS[kind]
    out = {value: a.value, **({lower: a.lower} if lower else {}), **({"rounds": rounds} if rounds else {})}
    return finite({**out, "certified": bool(np.all(a.certified)), "source": a.source, "corner": a.corner,
                   "slack": a.slack, "edge": a.edge, **({"note": a.note} if a.note else {})})


def finite(value: Any) -> Any:
    """NaN (unknown) replaced by None, recursively, so the JSON is standard."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def parse_number(name: str, text: str) -> float:
    """A finite number from command-line or query-string text, in ASCII digits only (``float``
    alone reads any Unicode decimal digit: ``1e-৪``, a Bengali four that looks like an eight, was
    answered at 1e-4, issue 55); ValueError naming ``name``."""
    if isinstance(text, str) and not text.isascii():
        raise ValueError(f"{name} must be a number written in ASCII digits, got {name}={text!r}")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {name}={text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {name}={text!r}")
    return value
