"""Mechanisms as data: the laws of G they produce, checked against the papers' formulas.

* every law (upper and lower) has mean 1 - e^eps, total mass 1, and upper laws lie in
  [1 - e^(eps0+eps), e^eps0 - e^eps];
* the upper laws of krr/blh/hr/rappor/oue are Table 1 of Su-Cheng-Wang (arXiv:2504.07414), olh the
  enumerated hashing blanket, generic the 3-atom clone law; lower laws are Theorem 5 laws
  enumerated by hand; joint = product, parallel = mixture, finite = blanket of the matrix;
* Laplace: the discretised upper law is a mean-preserving spread of the paper's Appendix C law
  (E[(G - t)_+] >= exact for every t, same mean), the lower law a contraction of the x2 = 1/2 law.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from shuffle_reference import (
    clone_law,
    expected_positive_part,
    krr_lower_laws,
    krr_matrix,
    krr_upper_law,
    laplace_lower_stats,
    laplace_upper_stats_from_cdf,
    laplace_upper_stats_from_model,
    olh_lower_law,
    olh_upper_law,
    oue_flip,
    random_ldp_matrix,
    rappor_flip,
    table1_law,
    unary_lower_law,
)

from tablegen.engine import delta_bounds, eps_bounds
from tablegen.mechanisms import MECHANISMS, get_mechanism

EPS0S = (0.1, 0.7, 2.0, 5.0)
FRACTIONS = (0.0, 0.3, 0.9)

_RNG_MATRIX = random_ldp_matrix(np.random.default_rng(42), 4, 5, 1.3)

# (name, params) covering every registered mechanism
CONFIGS = [
    ("generic", {}),
    ("krr", {"k": 2}),
    ("krr", {"k": 3}),
    ("krr", {"k": 10}),
    ("blh", {}),
    ("olh", {}),
    ("olh", {"g": 4}),
    ("rappor", {}),
    ("oue", {}),
    ("hr", {}),
    ("laplace", {}),
    ("finite", {"matrix": _RNG_MATRIX.tolist()}),
    ("joint", {"base": "krr", "k": 3, "parts": 2}),
    ("joint", {"base": "rappor", "parts": 3}),
    ("parallel", {"bases": "krr,oue,generic", "weights": "0.2,0.5,0.3", "k": 4}),
]
CONFIG_IDS = [f"{n}{p}" if n != "finite" else "finite" for n, p in CONFIGS]


def _decompositions(name, eps0, params, lower=False):
    mech = get_mechanism(name)
    resolved = mech.resolve(params)
    build = mech.lower if lower else mech.upper
    return build(eps0, **resolved)


def _eps0s(name):
    """The eps0 grid, restricted to eps0 >= 1.3 for the 1.3-LDP test matrix."""
    return [e for e in EPS0S if name != "finite" or e >= 1.3]


def _canonical(values, probs, digits=11):
    """A finite law as sorted (value, prob) with equal values merged (rounded to ``digits``)."""
    values = np.round(np.asarray(values, dtype=float), digits) + 0.0
    probs = np.asarray(probs, dtype=float)
    uniq, inverse = np.unique(values, return_inverse=True)
    merged = np.bincount(inverse.ravel(), weights=probs, minlength=uniq.size)
    keep = merged > 1e-15
    return uniq[keep], merged[keep]


def _assert_same_law(got, want):
    gv, gp = _canonical(*got)
    wv, wp = _canonical(*want)
    assert gv.shape == wv.shape, (gv, wv)
    np.testing.assert_allclose(gv, wv, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(gp, wp, rtol=1e-9, atol=1e-14)


def test_registry_lists_every_mechanism():
    assert {"generic", "krr", "blh", "olh", "rappor", "oue", "hr", "laplace", "finite", "joint", "parallel"} <= set(
        MECHANISMS
    )
    for name, mech in MECHANISMS.items():
        assert mech.name == name
        assert get_mechanism(name) is mech


@pytest.mark.parametrize("name,params", CONFIGS, ids=CONFIG_IDS)
def test_laws_have_mean_one_minus_e_eps(name, params):
    """E[G] = sum c (u - e^eps v) = 1 - e^eps for the upper and the lower decompositions."""
    mech = get_mechanism(name)
    for eps0 in _eps0s(name):
        for lower in (False, True):
            if lower and mech.lower is None:
                continue
            for d in _decompositions(name, eps0, params, lower):
                assert np.all(d.c >= 0) and d.c.sum() <= 1 + 1e-12
                if lower:  # y ~ R(x2): the weights are a probability law
                    assert d.c.sum() == pytest.approx(1.0, abs=1e-9)
                for frac in FRACTIONS:
                    alpha = math.exp(frac * eps0)
                    mean = float(d.c @ (d.u - alpha * d.v))
                    assert mean == pytest.approx(1 - alpha, rel=1e-9, abs=1e-12), (name, eps0, frac, lower)
                    values, probs = d.law(frac * eps0)
                    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
                    assert float(values @ probs) == pytest.approx(1 - alpha, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name,params", CONFIGS, ids=CONFIG_IDS)
def test_upper_laws_lie_in_the_ldp_range(name, params):
    """A blanket law of an eps0-LDP randomizer lies in [1 - e^(eps0+eps), e^eps0 - e^eps] (docs/engine.md
    section 2).  Not the standard clone, whose atoms are scaled by 2 e^eps0 / (e^eps0 + 1)."""
    if name == "generic" or "generic" in str(params.get("bases", "")):
        pytest.skip("clone law: atoms outside the blanket range by design")
    for eps0 in _eps0s(name):
        for d in _decompositions(name, eps0, params):
            for frac in FRACTIONS:
                eps = frac * eps0
                values, _ = d.law(eps)
                tol = 1e-9 * math.exp(eps0 + eps)
                assert values.min() >= 1 - math.exp(eps0 + eps) - tol
                assert values.max() <= math.exp(eps0) - math.exp(eps) + tol


# hand-written laws (from the papers) of the engine's upper decompositions
PAPER_UPPER = [
    ("krr", {"k": 2}, lambda e0, e: krr_upper_law(e0, e, 2)),
    ("krr", {"k": 3}, lambda e0, e: krr_upper_law(e0, e, 3)),
    ("krr", {"k": 7}, lambda e0, e: krr_upper_law(e0, e, 7)),
    ("blh", {}, lambda e0, e: table1_law("blh", e0, e)),
    ("hr", {}, lambda e0, e: table1_law("hr", e0, e)),
    ("rappor", {}, lambda e0, e: table1_law("rappor", e0, e)),
    ("oue", {}, lambda e0, e: table1_law("oue", e0, e)),
    ("olh", {"g": 2}, lambda e0, e: table1_law("blh", e0, e)),
    ("olh", {"g": 5}, lambda e0, e: olh_upper_law(e0, e, 5)),
    ("generic", {}, lambda e0, e: clone_law(e0, e)),
]


@pytest.mark.parametrize("name,params,law", PAPER_UPPER, ids=[f"{n}{p}" for n, p, _ in PAPER_UPPER])
def test_upper_law_is_the_papers(name, params, law):
    for eps0 in EPS0S:
        (d,) = _decompositions(name, eps0, params)
        for frac in FRACTIONS:
            _assert_same_law(d.law(frac * eps0), law(eps0, frac * eps0))


def test_olh_default_buckets():
    """OLH's default g = round(e^eps0) + 1 (Wang et al. 2017)."""
    for eps0 in (0.5, 1.0, 2.0, 3.3):
        g = int(round(math.exp(eps0))) + 1
        (d,) = _decompositions("olh", eps0, {})
        _assert_same_law(d.law(0.2 * eps0), olh_upper_law(eps0, 0.2 * eps0, g))


PAPER_LOWER = [
    ("krr", {"k": 2}, lambda e0, e: krr_lower_laws(e0, e, 2)),
    ("krr", {"k": 3}, lambda e0, e: krr_lower_laws(e0, e, 3)),
    ("krr", {"k": 6}, lambda e0, e: krr_lower_laws(e0, e, 6)),
    ("blh", {}, lambda e0, e: [olh_lower_law(e0, e, 2)]),
    ("hr", {}, lambda e0, e: [olh_lower_law(e0, e, 2)]),
    ("olh", {"g": 3}, lambda e0, e: [olh_lower_law(e0, e, 3)]),
    ("olh", {"g": 5}, lambda e0, e: [olh_lower_law(e0, e, 5)]),
    ("rappor", {}, lambda e0, e: [unary_lower_law(e0, e, *rappor_flip(e0))]),
    ("oue", {}, lambda e0, e: [unary_lower_law(e0, e, *oue_flip(e0))]),
    # binary RR's two pairs and ternary RR's x2-distinct pair
    ("generic", {}, lambda e0, e: krr_lower_laws(e0, e, 2) + krr_lower_laws(e0, e, 3)[2:]),
]


@pytest.mark.parametrize("name,params,laws", PAPER_LOWER, ids=[f"{n}{p}" for n, p, _ in PAPER_LOWER])
def test_lower_laws_are_theorem_5_laws(name, params, laws):
    """The lower-bound decompositions are exactly the hand-enumerated Theorem 5 laws (as a set)."""
    for eps0 in EPS0S:
        got = _decompositions(name, eps0, params, lower=True)
        for frac in FRACTIONS:
            eps = frac * eps0
            want = laws(eps0, eps)
            got_laws = [_canonical(*d.law(eps)) for d in got]
            want_laws = [_canonical(*w) for w in want]
            # every engine law is one of ours, and every one of ours is present (duplicates allowed)
            for gl in got_laws:
                assert any(_same(gl, wl) for wl in want_laws), (name, eps0, frac, gl)
            for wl in want_laws:
                assert any(_same(gl, wl) for gl in got_laws), (name, eps0, frac, wl)


def _same(a, b) -> bool:
    return (
        a[0].shape == b[0].shape
        and np.allclose(a[0], b[0], rtol=1e-9, atol=1e-10)
        and np.allclose(a[1], b[1], rtol=1e-9, atol=1e-14)
    )


def _krr_rows(eps0, k):
    """k-RR blanket components (u, v, c) at eps0 (Example 4.0)."""
    b = math.exp(eps0)
    p = 1 / (b + k - 1)
    return [(b, 1.0, p), (1.0, b, p), (1.0, 1.0, (k - 2) * p)]


def _law_of_rows(rows, eps):
    alpha = math.exp(eps)
    values = [u - alpha * v for u, v, _ in rows] + [0.0]
    probs = [c for _, _, c in rows]
    return values, probs + [1.0 - sum(probs)]


@pytest.mark.parametrize("parts", [2, 3])
def test_joint_krr_is_the_product_decomposition(parts):
    """Section 6: components (prod u, prod v, prod c) of the parts, each at eps0 / parts."""
    for eps0 in (0.6, 3.0):
        rows = _krr_rows(eps0 / parts, 3)
        product = []
        for choice in itertools.product(rows, repeat=parts):
            product.append(tuple(float(np.prod([r[i] for r in choice])) for i in range(3)))
        (d,) = _decompositions("joint", eps0, {"base": "krr", "k": 3, "parts": parts})
        for frac in FRACTIONS:
            _assert_same_law(d.law(frac * eps0), _law_of_rows(product, frac * eps0))


def test_parallel_is_the_mixture():
    """Section 7: a mixture of the bases' decompositions with the selection probabilities."""
    w = (0.25, 0.75)
    for eps0 in (0.6, 3.0):
        b = math.exp(eps0)
        a = 2 * b / (b + 1)
        clone_rows = [(a * b, a, 0.5 / b), (a, a * b, 0.5 / b)]
        rows = [(u, v, w[0] * c) for u, v, c in _krr_rows(eps0, 5)]
        rows += [(u, v, w[1] * c) for u, v, c in clone_rows]
        (d,) = _decompositions("parallel", eps0, {"bases": "krr,generic", "weights": list(w), "k": 5})
        for frac in FRACTIONS:
            _assert_same_law(d.law(frac * eps0), _law_of_rows(rows, frac * eps0))


def _blanket_laws(matrix, eps):
    """Blanket laws of a matrix for every ordered input pair, built directly from the definition."""
    c = matrix.min(axis=0)
    laws = []
    for x0, x1 in itertools.permutations(range(matrix.shape[0]), 2):
        values = list((matrix[x0] - math.exp(eps) * matrix[x1]) / c) + [0.0]
        laws.append(_canonical(values, list(c) + [1 - c.sum()]))
    return laws


def test_finite_upper_is_the_blanket_of_the_matrix():
    matrix = _RNG_MATRIX
    for eps0 in (1.3, 2.0):
        got = _decompositions("finite", eps0, {"matrix": matrix.tolist()})
        for frac in FRACTIONS:
            eps = frac * eps0
            want = _blanket_laws(matrix, eps)
            got_laws = [_canonical(*d.law(eps)) for d in got]
            for wl in want:
                assert any(_same(gl, wl) for gl in got_laws)
            for gl in got_laws:
                assert any(_same(gl, wl) for wl in want)


def test_finite_with_krr_matrix_has_krr_law():
    for eps0 in (0.4, 2.2):
        got = _decompositions("finite", eps0, {"matrix": krr_matrix(4, eps0).tolist()})
        for frac in FRACTIONS:
            for d in got:  # all ordered pairs are equivalent for k-RR
                _assert_same_law(d.law(frac * eps0), krr_upper_law(eps0, frac * eps0, 4))


# --------------------------------------------------------------------------- Laplace


@pytest.mark.parametrize("eps0", [0.3, 1.0, 3.0])
def test_laplace_appendix_c_cdf_matches_the_model(eps0):
    """The paper's CDF (reference) agrees with the blanket built from R(x) = x + Lap(1/eps0)."""
    for frac in (0.1, 0.5):
        eps = frac * eps0
        for t in (-0.5, 0.0, 0.2, 0.5 * (math.exp(eps0) - math.exp(eps))):
            m1, p1 = laplace_upper_stats_from_cdf(eps0, eps, t)
            m2, p2 = laplace_upper_stats_from_model(eps0, eps, t)
            assert m1 == pytest.approx(1 - math.exp(eps), rel=1e-9, abs=1e-12)
            assert m2 == pytest.approx(1 - math.exp(eps), rel=1e-9, abs=1e-12)
            assert p1 == pytest.approx(p2, rel=1e-8, abs=1e-12)


@pytest.mark.parametrize("eps0", [0.05, 0.3, 1.0, 3.0, 6.0, 8.0])
def test_laplace_upper_is_a_mean_preserving_spread(eps0):
    """E[G] exact and E[(G - t)_+] >= the exact value from the Appendix C CDF, for every t."""
    (d,) = _decompositions("laplace", eps0, {})
    for frac in (0.05, 0.3, 0.5, 0.8):
        eps = frac * eps0
        values, probs = d.law(eps)
        top = math.exp(eps0) - math.exp(eps)
        for t in (-1.0, -0.2, 0.0, 0.05 * top, 0.3 * top, 0.7 * top):
            mean, exact = laplace_upper_stats_from_cdf(eps0, eps, t)
            assert float(values @ probs) == pytest.approx(mean, rel=1e-9, abs=1e-12)
            got = expected_positive_part(values, probs, t)
            assert got >= exact - 1e-12, (eps0, eps, t, got, exact)
            assert got <= exact * (1 + 1e-3) + 1e-4, (eps0, eps, t, got, exact)


@pytest.mark.parametrize("eps0", [0.05, 0.3, 1.0, 3.0, 6.0, 8.0])
def test_laplace_lower_is_a_mean_preserving_contraction(eps0):
    """Lower law vs the exact Theorem 5 law of (0, 1, x2 = 1/2): E[(G - t)_+] <= exact, same mean."""
    *_, d = _decompositions("laplace", eps0, {}, lower=True)
    for frac in (0.05, 0.3, 0.5, 0.8):
        eps = frac * eps0
        values, probs = d.law(eps)
        top = math.exp(eps0 / 2) - math.exp(eps - eps0 / 2)
        for t in (-1.0, -0.2, 0.0, 0.05 * top, 0.3 * top, 0.7 * top):
            mean, exact = laplace_lower_stats(eps0, eps, t)
            assert float(values @ probs) == pytest.approx(mean, rel=1e-9, abs=1e-12)
            got = expected_positive_part(values, probs, t)
            assert got <= exact + 1e-12, (eps0, eps, t, got, exact)
            assert got >= exact * (1 - 1e-3) - 1e-4, (eps0, eps, t, got, exact)


# --------------------------------------------------------------------------- finite-domain option


@pytest.mark.parametrize(
    "name,params", [("blh", {}), ("hr", {}), ("olh", {"g": 3}), ("rappor", {}), ("oue", {})]
)
def test_domain_option_is_no_looser_and_approaches_table1(name, params):
    """Exact small-domain decompositions certify a delta <= the domain-free one (Table 1), and
    the gap shrinks as the domain grows (docs/engine.md)."""
    kw = {"eps0": 1.0, "n": 500, "eps": 0.2, "lower": False}
    free = delta_bounds(name, **kw, **params).upper
    small = delta_bounds(name, domain=3, **kw, **params).upper
    large = delta_bounds(name, domain=6, **kw, **params).upper
    assert small <= large * (1 + 1e-9) and large <= free * (1 + 1e-9)


def test_domain_option_rejects_huge_output_spaces():
    with pytest.raises(ValueError, match="domain"):
        delta_bounds("rappor", eps0=1.0, n=10, eps=0.1, domain=16)
    with pytest.raises(ValueError, match="domain"):
        delta_bounds("oue", eps0=1.0, n=10, eps=0.1, domain=1)


def test_eps0_monotone_flags_follow_the_bases() -> None:
    """OLH's default g = round(e^eps0) + 1 changes the randomizer with eps0, and a composition
    with such a base inherits that: each part of a 2-joint OLH has g = 3 at eps0 = 1.82
    (e^0.91 = 2.48) and g = 4 at 1.84 (e^0.92 = 2.51), and the certified eps is smaller at 1.84,
    so a lookup may not round eps0 up there.  With g given, or bases without eps0-dependent
    defaults, it may."""
    joint, parallel = get_mechanism("joint"), get_mechanism("parallel")
    olh_default = {"base": "olh", "parts": 2}
    assert not get_mechanism("olh").eps0_monotone({}) and get_mechanism("olh").eps0_monotone({"g": 4})
    assert not joint.eps0_monotone(olh_default)
    assert joint.eps0_monotone({"base": "olh", "g": 5, "parts": 2})
    assert joint.eps0_monotone({"base": "krr", "k": 10, "parts": 2})
    assert not parallel.eps0_monotone({"bases": "krr,olh", "weights": "0.5,0.5", "k": 10})
    assert parallel.eps0_monotone({"bases": ["krr", "blh"], "weights": [0.5, 0.5], "k": 10})
    below, above = (eps_bounds("joint", eps0=e0, n=10**4, delta=1e-6, lower=False, **olh_default).upper
                    for e0 in (1.82, 1.84))
    assert above < below  # the reason for the flag
