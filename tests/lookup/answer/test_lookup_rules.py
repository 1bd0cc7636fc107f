"""Table answers are certified: checked against exact sums of the k-RR law (independent of the
engine and the table), monotone in every argument, vectorised like scalar calls."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shuffle_reference import exact_delta, krr_lower_laws, krr_upper_law

import lookup

EPS0 = st.floats(0.3, 4.0)
N = st.integers(20, 120)
DELTA = st.floats(1e-9, 1e-3).map(float)
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)


@SETTINGS
@given(eps0=EPS0, n=N, delta=DELTA)
def test_eps_from_the_table_is_certified(table_path: Path, eps0: float, n: int, delta: float) -> None:
    a = lookup.eps("krr", eps0=eps0, n=n, delta=delta, table=table_path, live=False, k=3)
    assert a.source == "table"
    assert exact_delta(*krr_upper_law(eps0, a.value, 3), n) <= delta * (1 + 1e-9)
    if np.isfinite(a.lower) and a.lower > 0:
        assert max(exact_delta(*law, n) for law in krr_lower_laws(eps0, a.lower, 3)) > delta


@SETTINGS
@given(eps0=EPS0, n=N, eps=st.floats(0.05, 3.0))
def test_delta_and_eps0_max_from_the_table_are_certified(table_path: Path, eps0: float, n: int, eps: float) -> None:
    a = lookup.delta("krr", eps0=eps0, n=n, eps=eps, table=table_path, k=3)
    assert exact_delta(*krr_upper_law(eps0, eps, 3), n) <= a.value * (1 + 1e-9)
    budget = lookup.eps0_max("krr", eps=eps, n=n, delta=1e-6, table=table_path, k=3)
    assert exact_delta(*krr_upper_law(budget.value, eps, 3), n) <= 1e-6 * (1 + 1e-9)


@SETTINGS
@given(eps0=EPS0, n=N, delta=DELTA, factor=st.floats(1.0, 3.0))
def test_monotone_in_each_argument(table_path: Path, eps0: float, n: int, delta: float, factor: float) -> None:
    def value(e0: float, users: int, d: float) -> float:
        return lookup.eps("generic", eps0=e0, n=users, delta=d, table=table_path).value

    base = value(eps0, n, delta)
    assert value(min(eps0 * factor, 4.0), n, delta) >= base
    assert value(eps0, int(n * factor), delta) <= base
    assert value(eps0, n, min(delta * factor, 1e-3)) <= base


def test_not_below_the_live_certified_value(table_path: Path) -> None:
    from tablegen.engine import eps_bounds

    rng = np.random.default_rng(1)
    for eps0, n, delta in zip(rng.uniform(0.5, 4, 8), rng.integers(20, 81, 8), 10 ** rng.uniform(-9, -3, 8),
                              strict=True):
        a = lookup.eps("generic", eps0=eps0, n=n, delta=delta, table=table_path)
        live = eps_bounds("generic", eps0=eps0, n=int(n), delta=delta, lower=False).upper
        assert a.value >= live * (1 - 1e-3)  # both certified; the engine's own precision
        assert a.slack >= -1e-3


def test_arrays_broadcast_and_equal_scalar_calls(table_path: Path) -> None:
    eps0 = np.array([[0.7], [1.5], [3.0]])
    n = np.array([25, 60, 80, 500])
    a = lookup.eps("krr", eps0=eps0, n=n, delta=1e-6, table=table_path, k=3, max_slack=None)
    assert a.value.shape == a.lower.shape == a.source.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            one = lookup.eps("krr", eps0=float(eps0[i, 0]), n=int(n[j]), delta=1e-6, table=table_path, k=3,
                             max_slack=None)
            assert one.value == a.value[i, j] and one.source == a.source[i, j]
    assert a.edge[:, 3].all() and not a.edge[:, :3].any()  # n above the grid: the edge value
    assert (a.source == "table").all()


def test_off_grid_goes_live_or_explains_coverage(table_path: Path) -> None:
    from tablegen.engine import eps_bounds

    for query in [dict(eps0=5.0, n=40, delta=1e-6), dict(eps0=1.0, n=10, delta=1e-6),
                  dict(eps0=1.0, n=40, delta=1e-11)]:
        a = lookup.eps("krr", table=table_path, k=3, **query)
        assert a.source == "live"
        assert a.value == eps_bounds("krr", k=3, **query).upper
        with pytest.raises(lookup.TableError, match="covers: mechanisms krr k=3, generic; eps0 0.5..4"):
            lookup.eps("krr", table=table_path, k=3, live=False, **query)
    assert lookup.eps("krr", eps0=1.0, n=40, delta=1e-6, table=table_path, k=7).source == "live"
    assert lookup.eps("rappor", eps0=1.0, n=40, delta=1e-6, table=table_path).source == "live"
    tight = lookup.eps("krr", eps0=1.3, n=50, delta=2e-6, table=table_path, max_slack=0.0, k=3)
    assert tight.source in ("certified estimate", "live")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(eps0=-1.0, n=40, delta=1e-6), "eps0 must be >= 1e-06"),
        (dict(eps0=1.0, n=40.5, delta=1e-6), "n must be an integer in \\[1, 1e18\\]"),
        (dict(eps0=1.0, n=40, delta=1.5), "delta must be in (0, 1)"),
        (dict(eps0=[1.0, 2.0], n=[40, 50, 60], delta=1e-6), "do not broadcast"),
        (dict(eps0="abc", n=40, delta=1e-6), "eps0 must be a number"),
    ],
)
def test_bad_input_names_the_parameter(table_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        lookup.eps("krr", table=table_path, k=3, **kwargs)


def test_corner_is_grid_values_and_only_on_table_answers(table_path: Path) -> None:
    t = lookup.open_table(table_path)
    for eps0 in (1.5, [1.5, 3.0]):  # the scalar and the array path
        a = lookup.eps("krr", eps0=eps0, n=50, delta=1e-6, k=3, table=t, max_slack=None)
        assert np.all(a.source == "table")
        assert np.all(a.corner["delta"] == 1e-7) and np.all(a.corner["delta_upper"] == 1e-5)
        assert set(np.ravel(a.corner["eps0"])) <= set(t.eps0) and np.all(a.corner["n"] == 40)
    on_grid = lookup.eps("krr", eps0=2.0, n=40, delta=1e-5, k=3, table=t)  # slack 0: no refinement
    assert on_grid.corner == {"eps0": 2.0, "n": 40.0, "delta": 1e-5, "delta_upper": 1e-5}
    forced = lookup.eps("krr", eps0=[1.5, 3.0], n=50, delta=1e-6, k=3, table=t, max_slack=0.0)
    refined = forced.source != "table"
    assert refined[0] and all(np.isnan(v[refined]).all() and not np.isnan(v[~refined]).any()
                              for v in forced.corner.values())
    assert np.all(forced.slack[~refined] <= 0.01)  # kept: within 1% of the smooth estimate
