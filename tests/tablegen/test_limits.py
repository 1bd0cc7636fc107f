"""The live engine's supported domain (tablegen/limits.py): refusals before any heavy work, the
answers beyond the engine's own range, the FFT memory guard, and the CLI's exit codes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from shuffle_reference import exact_delta, krr_lower_laws, krr_upper_law

from tablegen import limits
from tablegen.cli import main
from tablegen.engine import bounds as accountant
from tablegen.engine import certifies, delta_bounds, eps0_max, eps_bounds, proves_above, spectral
from tablegen.engine.bounds import delta_of_decomposition
from tablegen.limits import CellBudget, WindowTooLarge
from tablegen.mechanisms import get_mechanism


def _no_heavy_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every lattice evaluation (spectral path, FFT path) fail the test if it runs."""
    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a lattice evaluation ran before the refusal")

    monkeypatch.setattr(spectral, "delta_upper", forbidden)
    monkeypatch.setattr(accountant, "delta_of_decomposition", forbidden)


@pytest.mark.parametrize(("call", "name", "allowed"), [
    (lambda: eps_bounds("krr", eps0=50, n=10**6, delta=1e-8, k=10), "eps0", "[1e-06, 40]"),
    (lambda: eps_bounds("generic", eps0=1e3, n=10**6, delta=1e-8), "eps0", "[1e-06, 40]"),
    (lambda: delta_bounds("krr", eps0=41, n=10**6, eps=1.0, k=10), "eps0", "[1e-06, 40]"),
    (lambda: eps_bounds("krr", eps0=1, n=1e19, delta=1e-8, k=10), "n", "[1, 1000000000000000000]"),
    (lambda: eps_bounds("generic", eps0=1e-100, n=1, delta=5e-324), "eps0", ">= 1e-06 and finite"),
    (lambda: delta_bounds("krr", eps0=1e-13, n=5, eps=1e-14, k=2), "eps0", ">= 1e-06 and finite"),
    (lambda: eps_bounds("krr", eps0=1, n=10**6, delta=1e-8, k=10**9), "k", "[2, 100000000]"),
    (lambda: eps_bounds("laplace", eps0=25, n=10**6, delta=1e-8), "eps0", "eps0 <= 20"),
    (lambda: eps_bounds("hr", eps0=30, n=10**6, delta=1e-8), "eps0", "eps0 <= 20"),
    (lambda: delta_bounds("laplace", eps0=25, n=10**6, eps=20.0), "eps0", "eps0 <= 20"),
])
def test_refused_before_any_lattice_work(monkeypatch: pytest.MonkeyPatch, call: Any, name: str, allowed: str) -> None:
    _no_heavy_work(monkeypatch)
    with pytest.raises(ValueError) as err:
        call()
    assert f"{name}=" in str(err.value) or f"{name} must" in str(err.value)
    assert allowed in str(err.value)


def test_costly_joint_products_are_refused_before_they_are_built(monkeypatch: pytest.MonkeyPatch) -> None:
    from tablegen.mechanisms import combined as composition

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the joint product was built before the refusal")

    monkeypatch.setattr(composition, "joint", forbidden)
    _no_heavy_work(monkeypatch)
    with pytest.raises(ValueError, match=r"parts must be an integer in \[1, 6\].*got parts=7"):
        eps_bounds("joint", eps0=8.0, n=10**6, delta=1e-8, base="laplace", parts=7)
    # the work model: sum over the factors of (product so far, merged to the cap) x (part size)
    assert limits.joint_work(4, 3, 10**5) == 4 + 16 + 64
    assert limits.joint_work(10, 3, 50) == 10 + 100 + 500


def test_the_engine_itself_refuses_eps0_above_its_range() -> None:
    with pytest.raises(ValueError, match=r"eps0 must be in \[1e-06, 20\]"):
        accountant.Query("krr", 20.5, 100, {"k": 10})


@pytest.mark.parametrize(("mechanism", "params"), [("krr", {"k": 10}), ("generic", {}), ("rappor", {})])
@pytest.mark.parametrize("eps0", [25.0, 40.0])
def test_eps0_above_the_engine_answers_eps0_with_a_close_lower_bound(monkeypatch: pytest.MonkeyPatch,
                                                                     mechanism: str, params: dict, eps0: float) -> None:
    _no_heavy_work(monkeypatch)
    b = eps_bounds(mechanism, eps0=eps0, n=10**6, delta=1e-8, **params)
    assert b.upper == eps0  # eps <= eps0 always (the local guarantee)
    assert 0.99 * eps0 <= b.lower <= eps0
    assert "eps0" in b.detail["bound"]


def test_eps0_above_the_engine_delta_certifies_and_proves() -> None:
    eps0, n = 30.0, 10**5
    assert delta_bounds("krr", eps0=eps0, n=n, eps=eps0, k=10).upper == 0.0
    b = delta_bounds("krr", eps0=eps0, n=n, eps=29.0, k=10)
    # any eps0-DP pair has delta(eps) <= 1 - e^(eps - eps0), and the lower bound is below it
    assert b.upper == pytest.approx(-math.expm1(-1.0), rel=1e-8) and 0.99 * b.upper <= b.lower <= b.upper
    assert certifies("krr", eps0=eps0, n=n, eps=29.0, delta=0.64, k=10)
    assert not certifies("krr", eps0=eps0, n=n, eps=29.0, delta=0.6, k=10)
    assert proves_above("krr", eps0=eps0, n=n, eps=29.0, delta=0.6, k=10)
    assert not proves_above("krr", eps0=eps0, n=n, eps=29.0, delta=0.64, k=10)
    assert eps0_max("krr", eps=30.0, n=n, delta=1e-8, k=10) >= 30.0  # eps0 = eps is always certified


def test_generic_with_delta0_above_the_engine_needs_delta_at_least_delta0() -> None:
    b = eps_bounds("generic", eps0=30, n=10**4, delta=1e-6, delta0=1e-7)
    assert b.upper == 30.0
    with pytest.raises(ValueError, match="delta0"):
        eps_bounds("generic", eps0=30, n=10**4, delta=1e-8, delta0=1e-7)


def test_n_above_the_engine_is_certified_by_monotonicity_and_closed_form(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluated: list[int] = []
    real = spectral.delta_upper

    def spy(d: Any, eps: Any, n: Any, *args: Any) -> Any:
        evaluated.extend(np.atleast_1d(n).tolist())
        return real(d, eps, n, *args)

    monkeypatch.setattr(spectral, "delta_upper", spy)
    at_max = eps_bounds("krr", eps0=1.0, n=limits.N_MAX, delta=1e-8, lower=False, k=10).upper
    values = []
    for n in (10**13, 10**15, 10**18):
        b = eps_bounds("krr", eps0=1.0, n=n, delta=1e-8, k=10)
        assert b.lower is None and b.detail["n_engine"] == limits.N_MAX and b.detail["bound"]
        values.append(b.upper)
    assert max(evaluated) <= limits.N_MAX  # the engine never ran at n itself
    # eps is non-increasing in n, at most eps0, and positive
    assert 0 < values[2] <= values[1] <= values[0] <= at_max <= 1.0


def test_n_above_the_engine_delta_is_below_the_value_at_n_max() -> None:
    b = delta_bounds("generic", eps0=1.0, n=10**14, eps=1e-5)
    at_max = delta_bounds("generic", eps0=1.0, n=limits.N_MAX, eps=1e-5, lower=False).upper
    assert 0 < b.upper <= at_max and b.lower is None and b.detail["n_engine"] == limits.N_MAX


def test_cell_budget() -> None:
    budget = CellBudget(total=10**6, per_call=1000)
    budget.spend(1000)
    assert budget.left == 10**6 - 1000 - limits.FFT_CALL_CELLS
    with pytest.raises(WindowTooLarge) as big:
        budget.spend(1001)
    assert not big.value.exhausted
    with pytest.raises(WindowTooLarge) as spent:
        CellBudget(total=limits.FFT_CALL_CELLS, per_call=1000).spend(10)
    assert spent.value.exhausted


@pytest.mark.parametrize("per_call", [400, 5])
def test_fft_guard_only_moves_bounds_the_safe_way(per_call: int) -> None:
    """A window over the per-call cap is coarsened (400 cells) or declined (5 cells): the upper
    bound stays above the exact value and the lower bound below it (exact sums, k = 3)."""
    eps0, n, k = 2.0, 60, 3
    (up,) = get_mechanism("krr").upper(eps0, k=k)
    low = get_mechanism("krr").lower(eps0, k=k)[2]  # x2 distinct from x0, x1
    for eps in (0.2, 0.6, 1.2):
        exact_up = exact_delta(*krr_upper_law(eps0, eps, k), n)
        values, probs = krr_lower_laws(eps0, eps, k)[2]
        exact_low = exact_delta(values, probs, n)
        plain_up, plain_low = delta_of_decomposition(up, eps, n), delta_of_decomposition(low, eps, n, False)
        guarded_up = delta_of_decomposition(up, eps, n, budget=CellBudget(per_call=per_call))
        guarded_low = delta_of_decomposition(low, eps, n, False, budget=CellBudget(per_call=per_call))
        assert guarded_up >= exact_up and 0 <= guarded_low <= exact_low
        assert guarded_up != plain_up and guarded_low != plain_low  # the windows (2,500-8,192 cells) were capped


CORNERS = """
import json, sys
from tablegen.engine import eps_bounds
out = []
for mechanism, eps0, n, delta, params, lower in [
        ("krr", 12.0, 10**6, 1e-8, {"k": 10}, True),     # was: std::bad_alloc (2.9 GB)
        ("krr", 15.0, 10**6, 1e-8, {"k": 10}, True),     # was: a 4.5 GiB array
        ("krr", 1.0, 10**12, 1e-8, {"k": 10}, True),     # was: a 7.2 GiB array
        ("laplace", 1.0, 10**13, 1e-8, {}, True),        # was: a 10 GiB array
        ("generic", 1.0, 10**15, 1e-300, {}, False),     # was: an 80 GiB array
        ("krr", 1.0, 10**6, 1e-8, {"k": 10**6}, False)]:
    b = eps_bounds(mechanism, eps0=eps0, n=n, delta=delta, **params, lower=lower)
    out.append([eps0, b.upper, b.lower])
print(json.dumps(out))
"""


def test_former_memory_exhaustion_cases_run_under_a_2gb_address_space() -> None:
    """The inputs that exhausted memory (issue 25) answer under a 2 GB address-space limit."""
    limit = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({2 * 1024**3}, {2 * 1024**3}))
    """)
    done = subprocess.run([sys.executable, "-c", limit + CORNERS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for eps0, upper, lower in json.loads(done.stdout):
        assert 0 < upper <= eps0
        assert lower is None or 0 <= lower <= upper


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize(("args", "expected"), [
    (["--mechanism", "krr", "--k", "10", "--eps0", "50", "--n", "1e6", "--delta", "1e-8"], "eps0 must be in [1e-06"),
    (["--mechanism", "laplace", "--eps0", "25", "--n", "1e6", "--delta", "1e-8"], "eps0 <= 20"),
    (["--mechanism", "krr", "--k", "10", "--eps0", "1", "--n", "1e19", "--delta", "1e-8"], "n must be an integer in"),
    (["--mechanism", "krr", "--k", "1e9", "--eps0", "1", "--n", "1e6", "--delta", "1e-8"], "k must be an integer in"),
    (["--mechanism", "joint", "--base", "laplace", "--parts", "7", "--eps0", "8", "--n", "1e6", "--delta", "1e-8"],
     "parts must be an integer in [1, 6]"),
])
def test_cli_refusals_exit_2(args: list[str], expected: str) -> None:
    out = run("compute", *args, "--json")
    assert out.exit_code == 2 and expected in out.output and "Traceback" not in out.output


def test_cli_answers_beyond_the_engine_with_labels() -> None:
    out = run("compute", "--mechanism", "krr", "--k", "10", "--eps0", "1", "--n", "1e15", "--delta", "1e-8", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["certified"] is True and data["eps_lower"] is None and data["n_engine"] == limits.N_MAX
    assert 0 < data["eps"] <= 1.0 and data["bound"]
    out = run("compute", "--mechanism", "generic", "--eps0", "25", "--n", "1e6", "--delta", "1e-8", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["eps"] == 25.0 and 24.75 <= data["eps_lower"] <= 25.0 and "eps0" in data["bound"]


@pytest.mark.parametrize("eps0", [1e-6, 3e-6, 1e-5, 1e-4, 1e-3])
@pytest.mark.parametrize("delta", [1e-300, 1e-12])
def test_smallest_eps0_certified_against_binary_rr_at_one_user(eps0: float, delta: float) -> None:
    """At n = 1 the exact eps of binary randomized response is log1p(expm1(eps0) - delta (e^eps0 + 1))
    (its hockey-stick divergence (e^eps0 - e^eps)/(e^eps0 + 1) = delta): from EPS0_MIN up the
    certified value is never below it (below EPS0_MIN the double-precision laws fell short)."""
    exact = math.log1p(math.expm1(eps0) - delta * (math.exp(eps0) + 1))
    bounds = eps_bounds("krr", eps0=eps0, n=1, delta=delta, k=2)
    assert bounds.upper >= exact * (1 - 1e-12) and bounds.lower <= exact * (1 + 1e-12)
