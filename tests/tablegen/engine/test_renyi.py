"""Certified Rényi DP (tablegen/engine/renyi.py) against values computed independently here.

* The generic randomizer's analysis is the clone pair P0 = (A + D, C - A + 1 - D),
  P1 = (A + 1 - D, C - A + D), C ~ Bin(n - 1, e^-eps0), A ~ Bin(C, 1/2), D ~ Bern(e^eps0/(e^eps0 + 1))
  (Feldman-McMillan-Talwar, Theorem 3.2): its Rényi divergence is summed exactly over the pmf here
  (no hockey-stick curve involved, so this also checks the formula of docs/renyi.md).
* k-RR's analysis is the blanket curve delta(g) = (1/n) E[(n1 (b - g) + n2 (1 - g b) + n3 (1 - g))_+]
  (g = e^eps, b = e^eps0, counts multinomial with probabilities q, q, (k - 2) q, q = 1/(b + k - 1)),
  the hockey-stick curve of its (symmetric) dominating pair in both orders; it is linear in g
  for each count, so the Rényi integrals are summed exactly here, in 40-digit decimals.
* n = 1: binary randomized response, whose Rényi divergence is a closed form.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, getcontext

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.special import gammaln, logsumexp

from tablegen.cli import main
from tablegen.engine import rdp_bounds

ORDERS = [2.0, 4.0, 16.0, 64.0]


def clone_pair_renyi(n: int, eps0: float, alpha: float) -> float:
    """D_alpha(P0 || P1) of the clone pair, summed over its pmf in log space."""
    log_p = -eps0
    log_q = math.log1p(-math.exp(-eps0))
    log_d1, log_d0 = -math.log1p(math.exp(-eps0)), -math.log1p(math.exp(eps0))
    p0 = np.full((n + 1, n + 1), -np.inf)
    p1 = np.full((n + 1, n + 1), -np.inf)
    for c in range(n):
        a = np.arange(c + 1)
        log_c = gammaln(n) - gammaln(c + 1) - gammaln(n - c) + c * log_p + (n - 1 - c) * log_q
        log_a = log_c + gammaln(c + 1) - gammaln(a + 1) - gammaln(c - a + 1) - c * math.log(2)
        for d, log_d in ((0, log_d0), (1, log_d1)):
            p0[a + d, c - a + 1 - d] = np.logaddexp(p0[a + d, c - a + 1 - d], log_a + log_d)
            p1[a + 1 - d, c - a + d] = np.logaddexp(p1[a + 1 - d, c - a + d], log_a + log_d)
    support = np.isfinite(p0) | np.isfinite(p1)
    return float(logsumexp(alpha * p0[support] + (1 - alpha) * p1[support]) / (alpha - 1))


def krr_blanket_renyi(k: int, n: int, eps0: float, alpha: int) -> float:
    """D_alpha from the exact k-RR blanket curve: sum over counts of exact integrals, 40 digits."""
    getcontext().prec = 40
    b = Decimal(eps0).exp()
    q = 1 / (b + k - 1)
    probs = [q, q, (k - 2) * q, 1 - k * q]
    total = Decimal(0)
    for n1 in range(n + 1):
        for n2 in range(n + 1 - n1):
            for n3 in range(n + 1 - n1 - n2):
                rest = n - n1 - n2 - n3
                top, bottom = n1 * b + n2 + n3, n1 + n2 * b + n3  # (top - g bottom)_+, zero from g = top/bottom
                if top <= bottom:
                    continue
                weight = Decimal(math.factorial(n)) / (math.factorial(n1) * math.factorial(n2) * math.factorial(n3)
                                                       * math.factorial(rest))
                for count, p in zip((n1, n2, n3, rest), probs, strict=True):
                    weight *= p**count
                end = (top / bottom).ln()
                for c in (Decimal(alpha - 1), Decimal(-alpha)):
                    total += weight / n * (top * ((c * end).exp() - 1) / c - bottom * (((c + 1) * end).exp() - 1)
                                           / (c + 1))
    return float((1 + alpha * (alpha - 1) * total).ln() / (alpha - 1))


def rr_renyi(eps0: float, alpha: float) -> float:
    """Binary RR: log((1-a)^(1-alpha) a^alpha + a^(1-alpha) (1-a)^alpha) / (alpha - 1), in logs."""
    log_a, log_b = -math.log1p(math.exp(-eps0)), -math.log1p(math.exp(eps0))
    return float(np.logaddexp((1 - alpha) * log_b + alpha * log_a, (1 - alpha) * log_a + alpha * log_b) / (alpha - 1))


@pytest.mark.parametrize(("n", "eps0"), [(2, 0.5), (30, 2.0), (80, 6.0), (120, 0.5)])
def test_generic_against_the_exact_clone_pair(n: int, eps0: float) -> None:
    r = rdp_bounds("generic", eps0=eps0, n=n, orders=ORDERS)
    for alpha, upper, lower in zip(ORDERS, r.rdp, r.rdp_lower, strict=True):
        exact = clone_pair_renyi(n, eps0, alpha)
        assert exact <= upper <= 1.01 * exact, (alpha, exact, upper)
        # the lower-bound pairs (binary and ternary RR) are eps0-LDP pairs, dominated by the clone pair
        assert 0 < lower <= exact * (1 + 1e-12), (alpha, lower, exact)


@pytest.mark.parametrize(("k", "n", "eps0"), [(4, 12, 1.0), (10, 16, 4.0)])
def test_krr_against_the_exact_blanket_curve(k: int, n: int, eps0: float) -> None:
    orders = [2, 8, 64]
    r = rdp_bounds("krr", eps0=eps0, n=n, orders=orders, k=k)
    for alpha, upper in zip(orders, r.rdp, strict=True):
        exact = krr_blanket_renyi(k, n, eps0, alpha)
        assert exact <= upper <= 1.01 * exact, (alpha, exact, upper)


@pytest.mark.parametrize("eps0", [0.5, 6.0, 20.0])
def test_one_user_is_randomized_response(eps0: float) -> None:
    orders = [1.1, 2.0, 64.0, 1024.0]
    r = rdp_bounds("generic", eps0=eps0, n=1, orders=orders)
    for alpha, upper in zip(orders, r.rdp, strict=True):
        exact = min(rr_renyi(eps0, alpha), eps0)
        assert exact <= upper <= exact * (1 + 1e-6), (alpha, exact, upper)


@pytest.mark.parametrize(("n", "eps0"), [(100, 0.5), (10**4, 4.0)])
def test_krr_never_above_generic(n: int, eps0: float) -> None:
    generic = rdp_bounds("generic", eps0=eps0, n=n, lower=False)
    for k in (3, 10):
        krr = rdp_bounds("krr", eps0=eps0, n=n, lower=False, k=k)
        assert np.all(np.array(krr.rdp) <= np.array(generic.rdp))


def test_default_orders_and_rounds_multiply() -> None:
    one = rdp_bounds("krr", eps0=1.0, n=10**5, k=10)
    many = rdp_bounds("krr", eps0=1.0, n=10**5, rounds=365, k=10)
    assert one.orders[:3] == (1.1, 1.2, 1.3) and one.orders[-4:] == (128.0, 256.0, 512.0, 1024.0)
    assert len(one.orders) == 156 and many.rounds == 365
    assert np.allclose(np.array(many.rdp), 365 * np.array(one.rdp), rtol=1e-12)
    assert np.allclose(np.array(many.rdp_lower), 365 * np.array(one.rdp_lower), rtol=1e-12)
    assert np.all(np.diff(one.rdp) >= 0)  # D_alpha is non-decreasing in alpha
    assert max(one.rdp) <= 1.0  # the pure-DP bound eps0


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"orders": [2, 1.0]}, "orders"), ({"orders": [2, float("nan")]}, "orders"), ({"orders": []}, "orders"),
    ({"orders": "2,4"}, "orders"), ({"orders": [2] * 1025}, "orders"), ({"orders": [2, "x"]}, "orders"),
    ({"orders": [2, 1e200]}, "orders"),
    ({"rounds": 0}, "rounds"), ({"rounds": 1.5}, "rounds"), ({"delta0": 1e-6}, "delta0"),
    ({"mechanism": "generic-closed-form"}, "mechanism"), ({"mechanism": "histogram"}, "mechanism"),
    ({"eps0": -1.0}, "eps0"), ({"n": 0}, "n must"),
])
def test_bad_input_names_the_parameter(kwargs: dict, named: str) -> None:
    args = {"mechanism": "generic", "eps0": 1.0, "n": 100, **kwargs}
    with pytest.raises(ValueError, match=named):
        rdp_bounds(args.pop("mechanism"), **args)


def test_cli_json_and_exit_status() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["rdp", "--mechanism", "krr", "--k", "10", "--eps0", "1", "--n", "1e4", "--orders",
                               "2,8", "--rounds", "3", "--json"])
    assert out.exit_code == 0, out.output
    answer = json.loads(out.output)
    assert answer["orders"] == [2.0, 8.0] and answer["rounds"] == 3 and answer["certified"] is True
    assert len(answer["rdp"]) == len(answer["rdp_lower"]) == 2 and answer["k"] == 10
    assert answer["rdp"][0] == pytest.approx(3 * rdp_bounds("krr", eps0=1, n=10**4, orders=[2], k=10).rdp[0])
    for bad in (["--orders", "0.5"], ["--orders", "2,x"], ["--rounds", "0"], ["--delta0", "0.01"]):
        out = runner.invoke(main, ["rdp", "--mechanism", "generic", "--eps0", "1", "--n", "100", *bad])
        assert out.exit_code == 2, out.output
        assert bad[0].lstrip("-") in out.output


def test_cli_conversion_through_dp_accounting() -> None:
    pytest.importorskip("dp_accounting")
    out = CliRunner().invoke(main, ["rdp", "--mechanism", "generic", "--eps0", "1", "--n", "1e4", "--delta", "1e-6",
                                    "--json"])
    answer = json.loads(out.output)
    # the conversion's own formula at its order (Canonne-Kamath-Steinke 2020, Proposition 12)
    a = answer["eps_via_rdp_order"]
    r = answer["rdp"][answer["orders"].index(a)]
    assert answer["eps_via_rdp"] == pytest.approx(r + math.log1p(-1 / a) - math.log(1e-6 * a) / (a - 1))
    assert 0 < answer["eps_via_rdp"] < 1.0
