"""Independent reference computations for the engine tests (no import from ``tablegen``).

Everything here is written from the papers' formulas or from the definition of the shuffle
model, never from the engine's code paths:

* ``exact_delta``: (1/n) E[(G_1 + ... + G_n)_+] exactly for a law with a few atoms, by
  enumerating the multinomial counts of the atoms (vectorised, log-probabilities by gammaln);
* ``worst_divergence``: brute force of the real shuffle model: for every dataset pair differing
  in user 1 (the other users' inputs arbitrary), the exact law of the multiset of outputs and the
  hockey-stick divergence in both directions;
* the laws of G of Table 1 (Su-Cheng-Wang, arXiv:2504.07414), of the standard clone (docs/engine.md),
  the Theorem 5 lower-bound laws written out by hand, and the Laplace mechanism's law from the
  paper's Appendix C CDF and from the model R(x) = x + Lap(1/eps0) by quadrature.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from scipy import integrate
from scipy.special import gammaln, logsumexp

# --------------------------------------------------------------------------- exact sums


def compositions(n: int, m: int) -> np.ndarray:
    """All (c_1, ..., c_m) of non-negative integers with sum n, shape (C(n+m-1, m-1), m)."""
    rows = np.zeros((1, 0), dtype=np.int64)
    remaining = np.array([n], dtype=np.int64)
    for _ in range(m - 1):  # choose the next count in 0..remaining for every partial row
        reps = remaining + 1
        parent = np.repeat(np.arange(remaining.size), reps)
        value = np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps)
        rows = np.column_stack([rows[parent], value])
        remaining = remaining[parent] - value
    return np.column_stack([rows, remaining])


def exact_delta(values, probs, n: int) -> float:
    """(1/n) E[(G_1 + ... + G_n)_+] for i.i.d. G with P(G = values[j]) = probs[j]."""
    values = np.asarray(values, dtype=float)
    probs = np.asarray(probs, dtype=float)
    assert values.shape == probs.shape
    assert abs(probs.sum() - 1.0) < 1e-12, probs.sum()
    keep = probs > 0
    values, inverse = np.unique(values[keep], return_inverse=True)  # merge equal atoms
    probs = np.bincount(inverse.ravel(), weights=probs[keep])
    counts = compositions(n, values.size).astype(float)
    logp = gammaln(n + 1) - gammaln(counts + 1).sum(axis=1) + counts @ np.log(probs)
    total = counts @ values
    pos = total > 0
    return float(np.exp(logp[pos]) @ total[pos]) / n


def chernoff_log_delta(values, probs, n: int) -> float:
    """log of a Chernoff upper bound on (1/n) E[(G_1 + ... + G_n)_+].

    E[S_+] = int_0^inf P(S > t) dt <= int_0^inf M(lam)^n e^(-lam t) dt = M(lam)^n / lam for every
    lam > 0; minimised over a fixed grid of lam (any lam is valid, so the grid is safe).
    """
    values = np.asarray(values, dtype=float)
    probs = np.asarray(probs, dtype=float)
    keep = probs > 0
    values, probs = values[keep], probs[keep]
    lams = np.geomspace(1e-6, 1e3, 4000) / max(float(np.abs(values).max()), 1e-12)
    log_m = logsumexp(np.log(probs)[None, :] + lams[:, None] * values[None, :], axis=1)
    return float(np.min(n * log_m - np.log(lams))) - math.log(n)


def expected_positive_part(values, probs, shift: float = 0.0) -> float:
    """E[(G - shift)_+] for a finite law."""
    values = np.asarray(values, dtype=float)
    return float(np.asarray(probs, dtype=float) @ np.maximum(values - shift, 0.0))


# --------------------------------------------------------------------------- paper laws of G
# Each returns (values, probabilities) at (eps0, eps), including the atom G = 0.


def table1_law(name: str, eps0: float, eps: float):
    """Table 1 of arXiv:2504.07414: atoms 1-e^(eps0+eps), e^eps0-e^(eps0+eps), 1-e^eps, 0, e^eps0-e^eps."""
    b, a = math.exp(eps0), math.exp(eps)
    values = [1 - b * a, b - b * a, 1 - a, 0.0, b - a]
    if name == "blh" or name == "hr":
        s = 1 / (2 * (b + 1))
        probs = [s, s, s, (b - 1) / (b + 1), s]
    elif name == "rappor":
        h = math.exp(eps0 / 2)
        s = 1 / (h + 1) ** 2
        probs = [s, s / h, h * s, 1 - 1 / h, s]
    elif name == "oue":
        s = 1 / (2 * (b + 1))
        probs = [s, 1 / (2 * b * (b + 1)), b / (2 * (b + 1)), 0.5 * (1 - 1 / b), s]
    else:
        raise KeyError(name)
    return values, probs


def delta0_term(eps: float, eps0: float, n: float, delta0: float) -> float:
    """Theorem 3.8's extra delta of an (eps0, delta0)-LDP randomizer (Feldman-McMillan-Talwar,
    arXiv:2012.12803, Lemma C.1): (e^eps + 1)(1 + e^(-eps0/2)) n delta0."""
    return (math.exp(eps) + 1) * (1 + math.exp(-eps0 / 2)) * n * delta0


def krr_upper_law(eps0: float, eps: float, k: int):
    """Table 1, k-RR row: p = 1/(e^eps0 + k - 1) for the extreme atoms, (k-2)p at 1-e^eps, (e^eps0-1)p at 0."""
    b, a = math.exp(eps0), math.exp(eps)
    p = 1 / (b + k - 1)
    return [1 - b * a, b - b * a, 1 - a, 0.0, b - a], [p, 0.0, (k - 2) * p, (b - 1) * p, p]


def krr_lower_laws(eps0: float, eps: float, k: int):
    """Theorem 5 laws G = (R(x0)(y) - a R(x1)(y)) / R(x2)(y), y ~ R(x2), for the k-RR triples.

    R(x)(y) = e^eps0 p if y = x else p.  Triples: x2 = x1, x2 = x0, and (k >= 3) x2 distinct.
    """
    b, a = math.exp(eps0), math.exp(eps)
    p = 1 / (b + k - 1)
    laws = [
        # x2 = x1: y = x0 w.p. p, y = x1 w.p. e^eps0 p, another value w.p. (k - 2) p
        ([(b * p - a * p) / p, (p - a * b * p) / (b * p), (p - a * p) / p], [p, b * p, (k - 2) * p]),
        # x2 = x0: y = x0 w.p. e^eps0 p, y = x1 w.p. p, another value w.p. (k - 2) p
        ([(b * p - a * p) / (b * p), (p - a * b * p) / p, (p - a * p) / p], [b * p, p, (k - 2) * p]),
    ]
    if k >= 3:
        laws.append(([b - a, 1 - a * b, (1 - a) / b, 1 - a], [p, p, b * p, (k - 3) * p]))
    return laws


def clone_law(eps0: float, eps: float):
    """The 3-atom standard-clone law of docs/engine.md (Feldman-McMillan-Talwar, arXiv:2012.12803, Thm 3.2)."""
    b, a = math.exp(eps0), math.exp(eps)
    return [2 * b * (b - a) / (b + 1), 2 * b * (1 - a * b) / (b + 1), 0.0], [1 / (2 * b), 1 / (2 * b), 1 - 1 / b]


def olh_upper_law(eps0: float, eps: float, g: int):
    """Domain-free blanket of local hashing into g buckets, by enumeration.

    The report is (h, b) with P(b | h, x) = f(b, h(x))/(e^eps0 + g - 1), f = e^eps0 on a match, 1
    otherwise; with an unbounded domain min_x f(b, h(x)) = 1, so c(h, b) = P(h)/(e^eps0+g-1) and G =
    f(b, h(x0)) - a f(b, h(x1)); (h(x0), h(x1)) is uniform on [g]^2 for a pairwise independent hash.
    """
    beta, a = math.exp(eps0), math.exp(eps)
    values, probs = [], []
    for h0, h1, b in itertools.product(range(g), repeat=3):
        f0 = beta if b == h0 else 1.0
        f1 = beta if b == h1 else 1.0
        values.append(f0 - a * f1)
        probs.append(1.0 / g**2 / (beta + g - 1))
    values.append(0.0)
    probs.append(1.0 - sum(probs))
    return values, probs


def olh_lower_law(eps0: float, eps: float, g: int):
    """Theorem 5 law of local hashing (3-wise independent hash): (h(x0), h(x1), h(x2)) uniform on [g]^3."""
    beta, a = math.exp(eps0), math.exp(eps)
    values, probs = [], []
    for h0, h1, h2, b in itertools.product(range(g), repeat=4):
        f = [beta if b == h else 1.0 for h in (h0, h1, h2)]
        values.append((f[0] - a * f[1]) / f[2])
        probs.append(f[2] / (beta + g - 1) / g**3)
    return values, probs


def unary_lower_law(eps0: float, eps: float, one_if_true: float, one_if_false: float):
    """Theorem 5 law of a unary encoding: only the bits at coordinates x0, x1, x2 matter."""
    a = math.exp(eps)

    def prob(bits, x):
        out = 1.0
        for coord, bit in enumerate(bits):
            q = one_if_true if coord == x else one_if_false
            out *= q if bit else 1 - q
        return out

    values, probs = [], []
    for bits in itertools.product((0, 1), repeat=3):
        values.append((prob(bits, 0) - a * prob(bits, 1)) / prob(bits, 2))
        probs.append(prob(bits, 2))
    return values, probs


def rappor_flip(eps0: float) -> tuple[float, float]:
    """RAPPOR: a bit is kept w.p. e^(eps0/2)/(e^(eps0/2)+1): P(1 | true), P(1 | false)."""
    h = math.exp(eps0 / 2)
    return h / (h + 1), 1 / (h + 1)


def oue_flip(eps0: float) -> tuple[float, float]:
    """OUE: P(1 | true) = 1/2, P(1 | false) = 1/(e^eps0 + 1)."""
    return 0.5, 1 / (math.exp(eps0) + 1)


# --------------------------------------------------------------------------- brute force shuffle


def krr_matrix(k: int, eps0: float) -> np.ndarray:
    b = math.exp(eps0)
    return (np.ones((k, k)) + (b - 1) * np.eye(k)) / (b + k - 1)


def unary_matrix(d: int, one_if_true: float, one_if_false: float) -> np.ndarray:
    """Randomizer matrix of a unary encoding over d inputs: outputs are the 2^d bit vectors."""
    outs = list(itertools.product((0, 1), repeat=d))
    m = np.ones((d, len(outs)))
    for x in range(d):
        for j, bits in enumerate(outs):
            for coord, bit in enumerate(bits):
                q = one_if_true if coord == x else one_if_false
                m[x, j] *= q if bit else 1 - q
    return m


def ldp_eps(matrix: np.ndarray) -> float:
    """Local epsilon of a strictly positive matrix."""
    return float(max(np.max(np.log(matrix[:, j][:, None] / matrix[:, j][None, :])) for j in range(matrix.shape[1])))


def random_ldp_matrix(rng: np.random.Generator, inputs: int, outputs: int, eps0: float) -> np.ndarray:
    """A random row-stochastic matrix with local epsilon exactly eps0 (mixing with uniform)."""
    base = rng.dirichlet(np.ones(outputs), size=inputs)
    uniform = np.full((inputs, outputs), 1.0 / outputs)
    while ldp_eps(0.999999 * base + 1e-6 * uniform) < eps0:  # too flat: sharpen it
        base = base**3
        base /= base.sum(axis=1, keepdims=True)
    lo, hi = 0.0, 1.0  # weight of base; ldp_eps increases with it
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if ldp_eps(mid * base + (1 - mid) * uniform) < eps0:
            lo = mid
        else:
            hi = mid
    return lo * base + (1 - lo) * uniform


@functools.cache
def _multiset_index(n_out: int, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """All ordered output tuples ([n_out]^n) and the index of their multiset (the shuffled view)."""
    tuples = np.array(list(itertools.product(range(n_out), repeat=n)), dtype=np.int64).reshape(-1, n)
    _, inverse = np.unique(np.sort(tuples, axis=1), axis=0, return_inverse=True)
    return tuples, inverse.ravel(), int(inverse.max()) + 1


def shuffled_law(matrix: np.ndarray, inputs) -> np.ndarray:
    """Exact law of the multiset of outputs when user i holds inputs[i] (enumerating all outputs)."""
    tuples, inverse, size = _multiset_index(matrix.shape[1], len(inputs))
    prob = np.ones(tuples.shape[0])
    for i, x in enumerate(inputs):
        prob *= matrix[x][tuples[:, i]]
    return np.bincount(inverse, weights=prob, minlength=size)


def hockey_stick(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    """D_alpha(P || Q) = sum (P - alpha Q)_+."""
    return float(np.maximum(p - alpha * q, 0.0).sum())


def worst_divergence(matrix: np.ndarray, n: int, eps_list) -> np.ndarray:
    """max over x0 != x1 and every (x2..xn) of max(D(P||Q), D(Q||P)), for each eps in eps_list.

    The shuffled output depends on the others' inputs only through their multiset, so the
    others range over multisets (all datasets are covered).
    """
    alphas = np.exp(np.asarray(eps_list, dtype=float))
    best = np.zeros(alphas.size)
    kin = matrix.shape[0]
    for rest in itertools.combinations_with_replacement(range(kin), n - 1):
        laws = {x: shuffled_law(matrix, (x,) + rest) for x in range(kin)}
        for x0, x1 in itertools.combinations(range(kin), 2):
            p, q = laws[x0], laws[x1]
            for j, alpha in enumerate(alphas):
                best[j] = max(best[j], hockey_stick(p, q, alpha), hockey_stick(q, p, alpha))
    return best


def pair_divergence(matrix: np.ndarray, x0: int, x1: int, x2: int, n: int, eps: float) -> float:
    """D_(e^eps)(M(x0, x2, .., x2) || M(x1, x2, .., x2)) by brute force."""
    p = shuffled_law(matrix, (x0,) + (x2,) * (n - 1))
    q = shuffled_law(matrix, (x1,) + (x2,) * (n - 1))
    return hockey_stick(p, q, math.exp(eps))


# --------------------------------------------------------------------------- Laplace (Appendix C)


def laplace_cdf_L(t: float, eps0: float, eps: float) -> float:
    """Pr[L <= t] of Su-Cheng-Wang (arXiv:2504.07414) Appendix C (L = gamma * G given the blanket component)."""
    gamma = math.exp(-eps0 / 2)
    a = math.exp(eps)
    if t < gamma * (1 - math.exp(eps0 + eps)):
        return 0.0
    if t < gamma * (1 - a):
        return 0.5 * math.sqrt(a / (1 - math.exp(eps0 / 2) * t))
    if t < gamma * (math.exp(eps0) - a):
        return 1 - 0.5 * (math.exp(eps0 / 2) * t + a) ** -0.5
    return 1.0


def laplace_upper_stats_from_cdf(eps0: float, eps: float, shift: float) -> tuple[float, float]:
    """(E[G], E[(G - shift)_+]) with G = L/gamma w.p. gamma, else 0, from the paper's CDF.

    For X = L/gamma with survival S(x) = 1 - F_L(gamma x) on [lo, hi]:
    E[(X - s)_+] = int_s^hi S(x) dx (+ (lo - s) for s < lo) and E[X] = lo + int_lo^hi S.
    """
    gamma = math.exp(-eps0 / 2)
    a, b = math.exp(eps), math.exp(eps0)
    lo, mid, hi = 1 - b * a, 1 - a, b - a

    def surv(x):
        return 1.0 - laplace_cdf_L(gamma * x, eps0, eps)

    def integral(start):
        start = min(max(start, lo), hi)
        pieces = [(start, max(start, mid)), (max(start, mid), hi)]
        return sum(integrate.quad(surv, u, w, epsabs=1e-14, epsrel=1e-12, limit=200)[0] for u, w in pieces if w > u)

    mean_x = lo + integral(lo)
    pos_x = integral(shift) + max(lo - shift, 0.0)
    mean = gamma * mean_x
    positive = gamma * pos_x + (1 - gamma) * max(-shift, 0.0)
    return mean, positive


def _laplace_density(y: float, centre: float, eps0: float) -> float:
    return 0.5 * eps0 * math.exp(-eps0 * abs(y - centre))


def laplace_upper_stats_from_model(eps0: float, eps: float, shift: float) -> tuple[float, float]:
    """(E[G], E[(G - shift)_+]) of the blanket law built directly from R(x) = x + Lap(1/eps0), x in [0, 1].

    c(y) = min_x R(x)(y) = (eps0/2) exp(-eps0 max(|y|, |y - 1|)), G = (R(0)(y) - a R(1)(y)) / c(y)
    with weight c(y) dy, and G = 0 with the remaining mass.
    """
    a, b = math.exp(eps), math.exp(eps0)

    def blanket(y):
        return 0.5 * eps0 * math.exp(-eps0 * max(abs(y), abs(y - 1)))

    def numerator(y):  # c(y) * G(y)
        return _laplace_density(y, 0.0, eps0) - a * _laplace_density(y, 1.0, eps0)

    tail = 0.5 * math.exp(-eps0)  # mass of c on y <= 0 (and on y >= 1)
    g_left, g_right = b - a, 1 - b * a  # G on y <= 0 and on y >= 1
    mass_mid = integrate.quad(blanket, 0, 1, points=[0.5], epsabs=1e-15, epsrel=1e-13)[0]
    mean = tail * (g_left + g_right) + integrate.quad(numerator, 0, 1, points=[0.5], epsabs=1e-13, epsrel=1e-12)[0]

    def pos(y):
        return max(numerator(y) - shift * blanket(y), 0.0)

    positive = tail * (max(g_left - shift, 0) + max(g_right - shift, 0))
    positive += integrate.quad(pos, 0, 1, points=[0.5], epsabs=1e-15, epsrel=1e-12, limit=400)[0]
    rest = 1 - 2 * tail - mass_mid
    positive += rest * max(-shift, 0.0)
    return mean, positive


def laplace_lower_stats(eps0: float, eps: float, shift: float) -> tuple[float, float]:
    """(E[G], E[(G - shift)_+]) of the Theorem 5 law for the pair (0, 1), x2 = 1/2, from the model."""
    a = math.exp(eps)
    h = math.exp(eps0 / 2)

    def numerator(y):  # R(1/2)(y) * G(y)
        return _laplace_density(y, 0.0, eps0) - a * _laplace_density(y, 1.0, eps0)

    def pos(y):
        return max(numerator(y) - shift * _laplace_density(y, 0.5, eps0), 0.0)

    tail = 0.5 * math.exp(-eps0 / 2)  # P(y <= 0) = P(y >= 1) under R(1/2)
    g_left, g_right = h - a / h, 1 / h - a * h
    mean = tail * (g_left + g_right) + integrate.quad(numerator, 0, 1, points=[0.5], epsabs=1e-13, epsrel=1e-12)[0]
    positive = tail * (max(g_left - shift, 0) + max(g_right - shift, 0))
    positive += integrate.quad(pos, 0, 1, points=[0.5], epsabs=1e-15, epsrel=1e-12, limit=400)[0]
    return mean, positive


def binary_rr_delta(eps0: float, eps: float, n: int) -> float:
    """Exact delta of binary RR after shuffling: the largest hockey-stick divergence over every count m
    of ones among the other n - 1 users and both directions, from the counts' own laws (no reduction)."""
    from scipy.stats import binom

    p = math.exp(eps0) / (1 + math.exp(eps0))
    q, g, worst = 1 - p, math.exp(eps), 0.0
    for m in range(n):
        s = np.convolve(binom.pmf(np.arange(n - m), n - 1 - m, q), binom.pmf(np.arange(m + 1), m, p))
        p0 = np.concatenate([s * p, [0.0]]) + np.concatenate([[0.0], s * q])
        p1 = np.concatenate([s * q, [0.0]]) + np.concatenate([[0.0], s * p])
        worst = max(worst, np.maximum(p0 - g * p1, 0).sum(), np.maximum(p1 - g * p0, 0).sum())
    return float(worst)
