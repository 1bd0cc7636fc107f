"""Shuffled-histogram protocols: exact accounting against brute force, calibration, simulation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tablegen.protocols import simulate
from tablegen.protocols.accounting import calibrate, delta_bounds, eps_bounds, paper_p


def count_law(n: int, p: float) -> np.ndarray:
    """Law of the number of noise messages, by convolving n Bernoulli(p) (no binomial formula)."""
    law = np.array([1.0])
    for _ in range(n):
        law = np.convolve(law, [1 - p, p])
    return law


def hockey(P: np.ndarray, Q: np.ndarray, eps: float) -> float:
    return float(np.maximum(P - math.exp(eps) * Q, 0.0).sum())


def exact_binary(eps: float, n: int, p: float) -> float:
    law = count_law(n, p)
    P, Q = np.append(0.0, law), np.append(law, 0.0)  # S + 1 vs S (counts 0..n+1)
    return max(hockey(P, Q, eps), hockey(Q, P, eps))


def exact_histogram(eps: float, n: int, p: float) -> float:
    law = np.append(count_law(n, p), 0.0)
    up = np.append(0.0, law[:-1])
    P, Q = np.outer(up, law), np.outer(law, up)  # (X + 1, Y) vs (X, Y + 1)
    return max(hockey(P, Q, eps), hockey(Q, P, eps))


def test_binary_sum_law_is_what_the_shuffler_shows() -> None:
    """Enumerate every noise draw of 4 users: the multiset of messages is the count x + z."""
    n, p, x = 4, 0.7, np.array([1, 0, 1, 0])
    law = np.zeros(2 * n + 1)
    for z in itertools.product([0, 1], repeat=n):
        law[int(x.sum() + sum(z))] += p ** sum(z) * (1 - p) ** (n - sum(z))
    np.testing.assert_allclose(law[2:7], count_law(n, p), rtol=1e-13)


@pytest.mark.parametrize("protocol, exact", [("binary-sum", exact_binary), ("histogram", exact_histogram)])
@pytest.mark.parametrize("n, p", [(5, 0.6), (40, 0.8), (200, 0.9), (150, 0.55)])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5, 1.5])
def test_delta_brackets_the_brute_force(protocol: str, exact, n: int, p: float, eps: float) -> None:
    upper, lower = delta_bounds(protocol, eps=eps, n=n, p=p)
    truth = exact(eps, n, p)
    assert lower <= truth * (1 + 1e-12) + 1e-300
    assert upper >= truth
    assert upper <= truth * (1 + 1e-9) + 1e-25


@pytest.mark.parametrize("protocol, exact", [("binary-sum", exact_binary), ("histogram", exact_histogram)])
def test_eps_within_a_thousandth_of_exact(protocol: str, exact) -> None:
    n, p, delta = 200, 0.8, 1e-6
    upper, lower = eps_bounds(protocol, delta=delta, n=n, p=p)
    assert exact(upper, n, p) <= delta  # certified
    assert exact(lower, n, p) > delta  # the true eps is above the lower bound
    assert upper <= lower * 1.001


def test_histogram_is_not_twice_the_binary_sum() -> None:
    hist = eps_bounds("histogram", delta=1e-8, n=10**5, p=0.97)[0]
    single = eps_bounds("binary-sum", delta=1e-8, n=10**5, p=0.97)[0]
    assert single < hist < 2 * single


@pytest.mark.parametrize("protocol", ["binary-sum", "histogram"])
@pytest.mark.parametrize("eps, delta, n", [(1.0, 1e-6, 10**5), (0.5, 1e-8, 10**6), (0.2, 1e-5, 10**6)])
def test_calibrated_p_meets_its_target_and_beats_the_paper(protocol: str, eps: float, delta: float, n: int) -> None:
    p = calibrate(protocol, eps=eps, delta=delta, n=n)
    assert 0.5 < p < 1
    assert delta_bounds(protocol, eps=eps, n=n, p=p)[0] <= delta
    assert p >= paper_p(protocol, eps=eps, delta=delta, n=n)
    more = 1 - (1 - p) * 0.99  # 1% less noise already fails: the calibration is tight
    assert delta_bounds(protocol, eps=eps, n=n, p=more)[1] > delta


def test_calibration_that_cannot_succeed_says_so() -> None:
    with pytest.raises(ValueError, match="more users are needed"):
        calibrate("histogram", eps=0.1, delta=1e-10, n=50)


@pytest.mark.parametrize("kwargs, message", [
    (dict(eps=-1.0, n=10, p=0.7), "eps"), (dict(eps=1.0, n=0, p=0.7), "n"), (dict(eps=1.0, n=10, p=1.0), "p must"),
])
def test_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        delta_bounds("binary-sum", **kwargs)
    with pytest.raises(ValueError, match="unknown protocol"):
        delta_bounds("sum", eps=1.0, n=10, p=0.7)


def test_simulated_protocols_estimate_the_counts() -> None:
    rng = np.random.default_rng(0)
    n, d, p = 20_000, 5, 0.99
    x = rng.integers(0, d, n)
    est = simulate.histogram_analyzer(simulate.shuffle(simulate.histogram_randomizer(x, d, p, rng), rng), n, d, p)
    bound = simulate.paper_error_bound(n, p, beta=1e-6)
    assert np.abs(est - np.bincount(x, minlength=d) / n).max() <= bound
    bits = rng.integers(0, 2, n)
    mean = simulate.binary_analyzer(simulate.shuffle(simulate.binary_randomizer(bits, p, rng), rng), n, p)
    assert abs(mean - bits.mean()) <= bound
    with pytest.raises(ValueError, match=r"values must be in \[0, d\)"):
        simulate.histogram_randomizer(np.array([0, 7]), 5, p, rng)


def _spec(tmp_path, eps: str = "[0.5, 1.0, 2.0]"):
    spec = tmp_path / "spec.toml"
    spec.write_text(f"[axes]\neps = {eps}\nn = [1000, 10000]\ndelta = [1e-8, 1e-6]\n")
    return spec


def test_interrupted_calibration_build_resumes(tmp_path, monkeypatch) -> None:
    """Killed after two slices: nothing published, the rerun computes only the other four and
    gives the table of an uninterrupted build."""
    import xarray as xr

    from tablegen import calibration as table
    from tablegen.store import StoreError, staging_path

    spec, out = _spec(tmp_path), tmp_path / "p.zarr"
    real, calls = table.slice_values, []

    def crash_on_third(*args):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(table, "slice_values", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        table.build_calibration(spec, out)
    assert not out.exists() and len(list(staging_path(out).glob("*.npy"))) == 2
    with pytest.raises(StoreError, match="another spec"):
        table.build_calibration(_spec(tmp_path, "[0.5, 1.0]"), out)  # same --out, other spec: refused
    _spec(tmp_path)
    monkeypatch.setattr(table, "slice_values", real)
    resumed = table.build_calibration(spec, out)
    assert (resumed["computed"], resumed["skipped"]) == (4, 2) and not staging_path(out).exists()
    fresh = table.build_calibration(spec, tmp_path / "fresh.zarr")
    assert fresh["computed"] == 6
    a, b = (xr.open_zarr(p)["p"].values for p in (out, tmp_path / "fresh.zarr"))
    np.testing.assert_array_equal(a, b)
    assert a[1, 1, 1, 1] == calibrate("histogram", eps=1.0, delta=1e-6, n=10000)  # an independent cell
    assert table.build_calibration(spec, out)["computed"] == 0  # published and up to date


def test_unstamped_staging_is_not_trusted(tmp_path) -> None:
    """Found in review: a staging directory whose stamp is gone (a kill while it was being
    removed) must not lend its slices to another spec of the same shape."""
    import xarray as xr

    from tablegen import calibration as table
    from tablegen.store import staging_path

    out = tmp_path / "p.zarr"
    staging = staging_path(out)
    staging.mkdir()
    np.save(staging / "0_0.npy", np.full((2, 2), 0.6))  # a stray slice of some other build
    result = table.build_calibration(_spec(tmp_path), out)
    assert result["computed"] == 6
    assert xr.open_zarr(out)["p"].values[0, 0, 0, 0] != 0.6
