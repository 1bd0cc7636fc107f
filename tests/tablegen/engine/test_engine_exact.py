"""The engine against values computed independently of it.

1. Brute force of the real shuffle model (tiny n): the exact law of the multiset of outputs for
   every pair of datasets differing in user 1, and the hockey-stick divergence both ways.  The
   certified delta must be >= the worst case, the lower bound <= it.
2. Exact (1/n) E[(G_1 + ... + G_n)_+] by enumeration of multinomial counts for the laws of G
   written out from the papers (Table 1 of Su-Cheng-Wang (arXiv:2504.07414), the standard clone of
   Su-Cheng-Wang arXiv:2504.07414, Theorem 5 laws), for n up to 150: the certified value is an upper bound and tight,
   the lower bound is below the exact value of its pair.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from shuffle_reference import (
    binary_rr_delta,
    clone_law,
    exact_delta,
    expected_positive_part,
    krr_lower_laws,
    krr_matrix,
    krr_upper_law,
    olh_lower_law,
    olh_upper_law,
    oue_flip,
    pair_divergence,
    random_ldp_matrix,
    rappor_flip,
    table1_law,
    unary_lower_law,
    unary_matrix,
    worst_divergence,
)

from tablegen.engine import delta_bounds, proves_above

EPS_FRACTIONS = (0.1, 0.3, 0.6)  # eps as a fraction of eps0
ABS = 1e-15  # absolute slack allowed above an exact value (the engine adds ~1e-16 of rounding slack)
TIGHT = 5e-3  # relative excess of the certified delta over the exact one (the design target: 0.5%)


def _certified(name: str, eps0: float, n: int, eps: float, **params) -> tuple[float, float | None]:
    b = delta_bounds(name, eps0=eps0, n=n, eps=eps, **params)
    return b.upper, b.lower


# --------------------------------------------------------------------------- 1. brute force


def _check_brute_force(matrix, name, eps0, n, params, check_lower=True, check_generic=True):
    eps_list = [f * eps0 for f in EPS_FRACTIONS]
    worst = worst_divergence(matrix, n, eps_list)
    for eps, exact in zip(eps_list, worst, strict=False):
        upper, lower = _certified(name, eps0, n, eps, **params)
        assert upper >= exact, (name, params, eps0, n, eps, upper, exact)
        if check_generic:
            generic = delta_bounds("generic", eps0=eps0, n=n, eps=eps, lower=False).upper
            assert generic >= exact, ("generic", eps0, n, eps, generic, exact)
        if check_lower:
            assert lower is not None
            assert lower <= exact + ABS, (name, params, eps0, n, eps, lower, exact)


@pytest.mark.parametrize("eps0", [0.5, 1.5, 3.0])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_krr_brute_force_shuffle(k, n, eps0):
    """k-RR (k = 2 is binary RR): certified delta >= exact worst case >= lower bound."""
    _check_brute_force(krr_matrix(k, eps0), "krr", eps0, n, {"k": k})


@pytest.mark.parametrize("eps0", [0.5, 2.0])
@pytest.mark.parametrize("k", [3, 4])
def test_krr_lower_bound_is_the_exact_divergence_of_its_pairs(k, eps0):
    """Theorem 5: each pair's divergence (brute force) equals (1/n) E[(sum G)_+] of its law
    (enumeration); the engine's lower bound is close below the largest of them."""
    matrix = krr_matrix(k, eps0)
    triples = [(0, 1, 1), (0, 1, 0), (0, 1, 2)]  # same order as krr_lower_laws
    for n in (2, 4, 5):
        for frac in EPS_FRACTIONS:
            eps = frac * eps0
            brute = [pair_divergence(matrix, *t, n, eps) for t in triples]
            for law, value in zip(krr_lower_laws(eps0, eps, k), brute, strict=False):
                assert exact_delta(*law, n) == pytest.approx(value, rel=1e-10, abs=1e-15)
            lower = delta_bounds("krr", eps0=eps0, n=n, eps=eps, k=k).lower
            assert lower <= max(brute) + ABS
            assert lower >= 0.9 * max(brute), (k, eps0, n, eps, lower, brute)


def test_krr_blanket_upper_is_strictly_above_the_worst_case_for_n_ge_4():
    """The k-RR blanket law (Table 1) is not exactly attained for n >= 4 (brute force), so no
    lower bound can meet it there: tightness tests must allow the analysis' own gap."""
    eps0, eps, k = 1.0, 0.3, 3
    for n in (2, 3):
        worst = worst_divergence(krr_matrix(k, eps0), n, [eps])[0]
        assert exact_delta(*krr_upper_law(eps0, eps, k), n) == pytest.approx(worst, rel=1e-10)
    for n in (4, 5):
        worst = worst_divergence(krr_matrix(k, eps0), n, [eps])[0]
        assert exact_delta(*krr_upper_law(eps0, eps, k), n) > worst * (1 + 1e-3)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(3, 3), (3, 4), (2, 3)])
def test_finite_matrix_brute_force_shuffle(shape, seed):
    """A random eps0-LDP matrix: finite upper (and generic) >= exact worst case >= finite lower."""
    rng = np.random.default_rng(1000 * seed + 10 * shape[0] + shape[1])
    eps0 = [0.7, 1.5, 2.5][seed]
    matrix = random_ldp_matrix(rng, shape[0], shape[1], eps0)
    for n in (2, 3, 4):
        _check_brute_force(matrix, "finite", eps0, n, {"matrix": matrix.tolist()})


@pytest.mark.parametrize("eps0", [0.8, 2.5])
def test_finite_matrix_of_krr_matches_krr(eps0):
    """The finite mechanism given k-RR's matrix certifies the same delta as krr (same law)."""
    for n in (3, 40):
        for frac in EPS_FRACTIONS:
            eps = frac * eps0
            a = delta_bounds("finite", eps0=eps0, n=n, eps=eps, matrix=krr_matrix(4, eps0).tolist())
            b = delta_bounds("krr", eps0=eps0, n=n, eps=eps, k=4)
            assert a.upper == pytest.approx(b.upper, rel=1e-6, abs=1e-15)
            assert a.lower <= a.upper


@pytest.mark.parametrize("name,flip", [("rappor", rappor_flip), ("oue", oue_flip)])
@pytest.mark.parametrize("eps0", [0.8, 2.5])
def test_unary_encodings_brute_force_small_domain(name, flip, eps0):
    """RAPPOR / OUE on a domain of 3 values: Table 1 (domain-free) still certifies, the lower
    bound (Theorem 5 pair on three coordinates) is below the exact worst case."""
    matrix = unary_matrix(3, *flip(eps0))
    for n in (2, 3):
        _check_brute_force(matrix, name, eps0, n, {})


@pytest.mark.parametrize("name,flip", [("rappor", rappor_flip), ("oue", oue_flip)])
@pytest.mark.parametrize("eps0", [0.8, 2.5])
def test_unary_encodings_domain_option_brute_force(name, flip, eps0):
    """domain=3: the exact optimal decomposition of the 3-value matrix still certifies and is no
    looser than the domain-free Table 1 bound (to 1e-4: each upper bound carries its own
    aliasing, measured within 4e-5 of delta, spectral.ALIAS_LOG)."""
    matrix = unary_matrix(3, *flip(eps0))
    for n in (2, 3):
        _check_brute_force(matrix, name, eps0, n, {"domain": 3}, check_generic=False)
        for frac in EPS_FRACTIONS:
            exact_domain = delta_bounds(name, eps0=eps0, n=n, eps=frac * eps0, domain=3, lower=False).upper
            free = delta_bounds(name, eps0=eps0, n=n, eps=frac * eps0, lower=False).upper
            assert exact_domain <= free * (1 + 1e-4)


@pytest.mark.parametrize("eps0", [1.0, 3.0])
@pytest.mark.parametrize("k", [2, 3])
def test_joint_krr_brute_force(k, eps0):
    """Joint composition of two k-RR with eps0/2 each = the product randomizer (Kronecker)."""
    part = krr_matrix(k, eps0 / 2)
    matrix = np.kron(part, part)
    for n in (2, 3) if k == 2 else (2,):
        _check_brute_force(matrix, "joint", eps0, n, {"base": "krr", "parts": 2, "k": k})


@pytest.mark.parametrize("eps0", [1.0, 2.5])
def test_parallel_krr_oue_brute_force(eps0):
    """Parallel composition: output (i, R_i(x)) w.p. w_i; here 3-RR and OUE on 3 values."""
    w = (0.3, 0.7)
    matrix = np.hstack([w[0] * krr_matrix(3, eps0), w[1] * unary_matrix(3, *oue_flip(eps0))])
    for n in (2, 3):
        _check_brute_force(matrix, "parallel", eps0, n, {"bases": "krr,oue", "weights": w, "k": 3})


@pytest.mark.parametrize("eps0", [1.0, 2.5])
def test_parallel_with_generic_brute_force(eps0):
    """Parallel composition of 3-RR with an arbitrary eps0-LDP randomizer, certified by the
    'generic' base (upper bound only: the generic lower pair is a different randomizer)."""
    rng = np.random.default_rng(7)
    w = (0.6, 0.4)
    other = random_ldp_matrix(rng, 3, 3, eps0)
    matrix = np.hstack([w[0] * krr_matrix(3, eps0), w[1] * other])
    for n in (2, 3, 4):
        _check_brute_force(
            matrix, "parallel", eps0, n, {"bases": "krr,generic", "weights": w, "k": 3}, check_lower=False
        )


# --------------------------------------------------------------------------- 2. exact sums

# (engine mechanism, params, law of G at (eps0, eps) written from the papers)
UPPER_LAWS = [
    ("krr", {"k": 2}, lambda e0, e: krr_upper_law(e0, e, 2)),
    ("krr", {"k": 3}, lambda e0, e: krr_upper_law(e0, e, 3)),
    ("krr", {"k": 10}, lambda e0, e: krr_upper_law(e0, e, 10)),
    ("blh", {}, lambda e0, e: table1_law("blh", e0, e)),
    ("hr", {}, lambda e0, e: table1_law("hr", e0, e)),
    ("rappor", {}, lambda e0, e: table1_law("rappor", e0, e)),
    ("oue", {}, lambda e0, e: table1_law("oue", e0, e)),
    ("olh", {"g": 3}, lambda e0, e: olh_upper_law(e0, e, 3)),
    ("generic", {}, lambda e0, e: clone_law(e0, e)),
]
FEW_ATOMS = {"krr", "generic"}  # <= 4 atoms: exact enumeration is cheap up to n = 150

EXACT_CASES = [(0.1, 0.3), (0.5, 0.2), (1.0, 0.3), (2.0, 0.3), (2.0, 0.5), (4.0, 0.25)]


def _ids(case):
    return f"{case[0]}-{case[1]}"


def _exact(params, law, eps0, eps, n):
    """The exact delta of the analysis the engine certifies: the law's for every row but binary RR, whose
    engine path is the exact worst case over datasets (tablegen/engine/binary.py): every dataset's."""
    return binary_rr_delta(eps0, eps, n) if params.get("k") == 2 else exact_delta(*law(eps0, eps), n)


BINARY_TIGHT = 0.03  # binary RR's certified delta: the first of 1.02, 1.1, 1.5 times its exact lower bound


@pytest.mark.parametrize("mech,params,law", UPPER_LAWS, ids=[f"{m}{p}" for m, p, _ in UPPER_LAWS])
def test_upper_bound_against_exact_sum(mech, params, law):
    """exact <= certified <= exact (1 + TIGHT) + ABS for the paper's law of G."""
    ns = (2, 7, 60, 150) if mech in FEW_ATOMS else (2, 7, 40)
    for eps0, frac in EXACT_CASES:
        eps = eps0 * frac
        for n in ns:
            exact = _exact(params, law, eps0, eps, n)
            upper = delta_bounds(mech, eps0=eps0, n=n, eps=eps, lower=False, **params).upper
            assert upper >= exact, (mech, params, eps0, eps, n, upper, exact)
            tight = BINARY_TIGHT if params.get("k") == 2 else TIGHT
            assert upper <= exact * (1 + tight) + ABS, (mech, params, eps0, eps, n, upper, exact)


# far tails and large eps0: tightness is stated in eps (the design target: ~0.5% of e^eps - 1)
TAIL_CASES = [(1.0, 0.7), (4.0, 0.6), (6.0, 0.5)]


@pytest.mark.parametrize("mech,params,law", UPPER_LAWS, ids=[f"{m}{p}" for m, p, _ in UPPER_LAWS])
def test_upper_bound_tight_in_eps_far_tails(mech, params, law):
    """exact(eps) <= certified(eps) <= exact(eps') with e^eps' - 1 = (1 - 2e-3)(e^eps - 1)."""
    ns = (60, 150) if mech in FEW_ATOMS else (40,)
    for eps0, frac in TAIL_CASES:
        eps = eps0 * frac
        eps_smaller = math.log1p((1 - 2e-3) * math.expm1(eps))
        for n in ns:
            exact = _exact(params, law, eps0, eps, n)
            upper = delta_bounds(mech, eps0=eps0, n=n, eps=eps, lower=False, **params).upper
            assert upper >= exact, (mech, params, eps0, eps, n, upper, exact)
            top = exact * (1 + BINARY_TIGHT) if params.get("k") == 2 else _exact(params, law, eps0, eps_smaller, n)
            assert upper <= top, (mech, params, eps0, eps, n, upper, exact)


# large eps0 and k: sd(G) is set by the rare atom 1 - e^eps e^eps0, which the law that decides
# delta (tilted to mean 0) barely weighs; a step sized from sd(G) alone was 2.4-10x loose here
LARGE_EPS0_CASES = [(32, 7.5, 200, 6.0), (32, 7.5, 200, 6.5), (64, 7.0, 200, 5.5), (16, 6.0, 150, 4.5),
                    (10, 8.0, 200, 6.5)]


@pytest.mark.parametrize("k,eps0,n,eps", LARGE_EPS0_CASES)
def test_upper_bound_tight_at_large_eps0_and_k(k, eps0, n, eps):
    exact = exact_delta(*krr_upper_law(eps0, eps, k), n)
    upper = delta_bounds("krr", eps0=eps0, n=n, eps=eps, lower=False, k=k).upper
    assert exact <= upper <= exact * (1 + TIGHT) + ABS, (upper, exact)


@pytest.mark.xfail(
    strict=True,
    reason="tightness spec 1e-3 not met: certified delta exceeds the exact value by up to ~0.3% "
    "(e.g. binary RR eps0=0.5 eps=0.2 n=2; RAPPOR eps0=0.5 eps=0.2 n=60; 10-RR eps0=2 eps=1 n=150)",
)
def test_upper_bound_within_1e3_of_exact_sum():
    """The requested tighter target: certified <= exact (1 + 1e-3) + 1e-15."""
    cases = [
        ("krr", {"k": 2}, krr_upper_law(0.5, 0.2, 2), 0.5, 0.2, 2),
        ("rappor", {}, table1_law("rappor", 0.5, 0.2), 0.5, 0.2, 60),
        ("krr", {"k": 10}, krr_upper_law(2.0, 1.0, 10), 2.0, 1.0, 150),
    ]
    for mech, params, law, eps0, eps, n in cases:
        exact = exact_delta(*law, n)
        upper = delta_bounds(mech, eps0=eps0, n=n, eps=eps, lower=False, **params).upper
        assert upper <= exact * (1 + 1e-3) + 1e-15, (mech, eps0, eps, n, upper / exact - 1)


def _unary_law(flip):
    return lambda e0, e: unary_lower_law(e0, e, *flip(e0))


# (engine mechanism, params, Theorem-5 laws of the engine's pairs written by hand, max n)
LOWER_LAWS = [
    ("krr", {"k": 2}, lambda e0, e: krr_lower_laws(e0, e, 2), 100),
    ("krr", {"k": 3}, lambda e0, e: krr_lower_laws(e0, e, 3), 100),
    ("krr", {"k": 10}, lambda e0, e: krr_lower_laws(e0, e, 10), 100),
    ("blh", {}, lambda e0, e: [olh_lower_law(e0, e, 2)], 20),
    ("olh", {"g": 3}, lambda e0, e: [olh_lower_law(e0, e, 3)], 20),
    ("rappor", {}, lambda e0, e: [_unary_law(rappor_flip)(e0, e)], 20),
    ("oue", {}, lambda e0, e: [_unary_law(oue_flip)(e0, e)], 20),
]


LOWER_CASES = [(0.1, 0.3), (1.0, 0.3), (2.0, 0.5), (4.0, 0.25)]


@pytest.mark.parametrize("mech,params,laws,nmax", LOWER_LAWS, ids=[f"{m}{p}" for m, p, _, _ in LOWER_LAWS])
def test_lower_bound_against_exact_sum(mech, params, laws, nmax):
    """engine lower <= max over its pairs of the exact divergence (and not absurdly loose)."""
    for eps0, frac in LOWER_CASES:
        eps = eps0 * frac
        for n in (7, nmax):  # n = 2 .. 5: brute force above
            exact = (binary_rr_delta(eps0, eps, n) if params.get("k") == 2  # every dataset's (engine/binary.py)
                     else max(exact_delta(*law, n) for law in laws(eps0, eps)))
            lower = delta_bounds(mech, eps0=eps0, n=n, eps=eps, **params).lower
            assert lower <= exact + ABS, (mech, params, eps0, eps, n, lower, exact)
            if exact > 1e-6:
                assert lower >= 0.7 * exact, (mech, params, eps0, eps, n, lower, exact)


@pytest.mark.parametrize("mech,params,law", UPPER_LAWS, ids=[f"{m}{p}" for m, p, _ in UPPER_LAWS])
def test_single_user_is_expected_positive_part(mech, params, law):
    """n = 1: delta = E[G_+] exactly (the engine may add only float slack)."""
    for eps0, frac in EXACT_CASES:
        eps = eps0 * frac
        exact = expected_positive_part(*law(eps0, eps))
        upper = delta_bounds(mech, eps0=eps0, n=1, eps=eps, lower=False, **params).upper
        assert upper >= exact
        assert upper == pytest.approx(exact, rel=1e-8)


def test_single_user_krr_lower_is_expected_positive_part():
    for eps0, frac in EXACT_CASES:
        eps = eps0 * frac
        exact = max(expected_positive_part(*law) for law in krr_lower_laws(eps0, eps, 3))
        lower = delta_bounds("krr", eps0=eps0, n=1, eps=eps, k=3).lower
        assert lower <= exact
        assert lower == pytest.approx(exact, rel=1e-8)


def test_generic_approx_dp_adds_theorem_3_8_term():
    """(eps0, delta0)-LDP: the certified delta is the pure one plus (e^eps+1)(1+e^(-eps0/2)) n delta0."""
    eps0, eps, n, delta0 = 1.0, 0.3, 50, 1e-9
    pure = delta_bounds("generic", eps0=eps0, n=n, eps=eps, lower=False).upper
    approx = delta_bounds("generic", eps0=eps0, n=n, eps=eps, lower=False, delta0=delta0).upper
    extra = (math.exp(eps) + 1) * (1 + math.exp(-eps0 / 2)) * n * delta0
    assert approx == pytest.approx(pure + extra, rel=1e-9)
    assert approx >= exact_delta(*clone_law(eps0, eps), n) + extra


@pytest.mark.parametrize("k", [3])
def test_proves_above_only_what_the_exact_lower_pairs_confirm(k):
    """proves_above(eps, delta) claims the exact eps(delta) > eps, i.e. some lower-bound pair's
    exact delta at eps exceeds delta (enumeration): never at a delta just above the largest of
    them, and (spectral lower path, n = 1000) at 90% of it.  (k = 2 proves more, from every dataset
    of the exact path: tests/tablegen/engine/test_binary.py.)"""
    eps0, n = 1.0, 1000
    for eps in eps0 * np.array([0.02, 0.05, 0.1]):
        exact = max(exact_delta(*law, n) for law in krr_lower_laws(eps0, eps, k))
        assert not proves_above("krr", eps0=eps0, n=n, eps=eps, delta=exact * (1 + 1e-6), k=k)
        assert proves_above("krr", eps0=eps0, n=n, eps=eps, delta=exact * 0.9, k=k)


def test_proves_above_at_a_finer_resolution_proves_thinner_margins_and_only_true_ones():
    """At 60 cells per sd (verify's second try) the rounding term is a quarter of the one at 30:
    a delta 0.5% below the lower pairs' exact delta (enumeration, k-RR k = 3, n = 1000) is proved
    there and not at 30 for some eps; a delta just above the exact one never is, at either."""
    eps0, n, thin = 1.0, 1000, []
    for eps in eps0 * np.array([0.02, 0.05, 0.1, 0.2]):
        exact = max(exact_delta(*law, n) for law in krr_lower_laws(eps0, eps, 3))
        for resolution in (30.0, 60.0):
            assert not proves_above("krr", eps0=eps0, n=n, eps=eps, delta=exact * (1 + 1e-6), k=3,
                                    resolution=resolution)
        coarse, fine = (proves_above("krr", eps0=eps0, n=n, eps=eps, delta=exact * 0.995, k=3, resolution=r)
                        for r in (30.0, 60.0))
        assert fine or not coarse
        thin.append(fine and not coarse)
    assert any(thin)
