"""Certified LOWER bounds on delta = (1/n) E[(G_1 + ... + G_n)_+] on the spectral path (no FFT).

The plan of ``spectral.py`` with every step the other way round: the aliasing, dropped-node and
floating-point bounds subtracted from the main term, the rounding's excess (Hoeffding, through the
characteristic function of the unrounded law) subtracted, the coordinates' float error taken off.
NaN (the caller uses the FFT path) where the plan declines or the bound is more than ``MAX_GAP``
below the upper bound of the same evaluation; only half-split lattices (``SPREAD_USERS``).  The
proof: docs/engine.md, "Lower bounds on the spectral path".
"""

from __future__ import annotations

import numpy as np
from scipy.special import erfc

from tablegen.decomposition import Decomposition
from tablegen.engine import spectral
from tablegen.engine.lattice import log_probs, tilted_log_weights

U = spectral.U
TAIL_LOG = spectral.TAIL_LOG
# the period (aliasing) and the nodes summed (dropped-node bound) sized to e^-15 instead of e^-40:
# both bounds are subtracted, each within about 1e-4 of the main term (e^-15 times the ratio
# of the periodised weight's bound, or of (1/K) sum |Ghat|, to the main term: about the
# tilted threshold's z-score, below 10), beside the rounding term's ~3e-3 at RESOLUTION; half as
# many nodes and windows (lower slices of k-RR k=512 1.8x faster, the same bounds to 1e-5 but
# for 0.2% of cells; at e^-12, 3.6% of cells lost more than 1e-3)
LOWER_TAIL_LOG = 15.0
# near eps = 0 the law is tilted at lambda >= LOWER_FLOOR_Z / sd(S') (spectral._laws; the upper path's
# FLOOR_Z is 2): periods of 1e9 and 16k-node sums at tiny eps become about 30 sd(S'); at 2 the
# lower bounds there lost up to 8% (the worst cells of a holdout), at 0.5 none lost 0.1% but 0.1%
# of cells, and Laplace's lower slices at eps0 = 1 are as fast (7x faster than the saddlepoint)
LOWER_FLOOR_Z = 0.5
RESOLUTION = 30.0  # cells per sd of G (times HALF_FINER): the rounding term scales like 1/resolution^2
MAX_GAP = 0.05  # largest relative width of the bracket of E[Y_+] accepted (else the FFT path)
# ... and on the lower slices, which have no FFT path to fall back on: a wider bracket's lower end is a
# lower bound all the same (docs/engine.md).  Declined at 0.05, 52% of the evaluations of Laplace's
# lower slice at eps0 7.86 gave nothing, and its cells' bounds were found 11x lower in eps (median) by
# probing below them; at 0.9 5%: the lower bounds 2.06x higher (median, every n; up to 22x), the lower
# half of the slice 2.5x faster (docs/engine.md, "Slices")
SLICE_MAX_GAP = 0.9
PAIR_ATOMS = 12  # the bound on |psi_G| away from 0 uses the pairs of this many heaviest atoms
CELL_PHASE = 0.25  # cells of t are this wide in phase t d of the farthest such pair that n
PAIR_USERS = 1.0  # users weigh at least this much (n w_ab: a far atom of negligible weight, e.g.
# HR's rare atom at large eps0 n = 1e4, 300 times farther, would cost 300 times the cells) ...
MAX_CELLS = 4096  # ... up to this many per evaluation (wider cells: weaker, still valid)
NOISE_LOG = 20.0  # cells up to e^(-n t^2 / 8) = e^-NOISE_LOG (e^-80 cost 2x the cosines for a change below 1e-9)
# the cells are first REFINE times wider; only those whose piece exceeds REFINE_SHARE of the Taylor
# range's are cut into REFINE (where |psi|^n has decayed the coarse bound already is negligible:
# the others together add at most MAX_CELLS / REFINE * REFINE_SHARE, 2.6%, of that piece, itself
# ~3e-3 of the bound); BLH's lower slices 1.5x faster, Laplace's (66 pairs of atoms) 2x
REFINE, REFINE_SHARE = 16, 1e-4
DROP_BLOCK = 2**18  # edges x pairs per pass of _cell_drops


def delta_lower(d: Decomposition, eps: np.ndarray, n: np.ndarray, resolution: float = RESOLUTION,
                max_gap: float = MAX_GAP, phase_products: bool = False) -> np.ndarray:
    """Certified lower bound on (1/n) E[(G_1+...+G_n)_+] for each pair (eps_b, n_b) (broadcast).

    NaN where the spectral path declines; the caller uses the FFT path there.  The live path
    (``eps_bounds``, ``proves_above``, and so ``verify``): period and nodes at e^-TAIL_LOG, tilted
    at the saddlepoint, as engine 4, so a stored lower bound an earlier engine proved with a thin
    margin is proved again.  ``max_gap``: the widest rounding bracket answered (a caller without an
    FFT path to fall back on takes SLICE_MAX_GAP: the bracket's lower end is certified at any width).
    ``phase_products``: as in ``spectral.delta_upper``.
    """
    eps_b, n_b = np.broadcast_arrays(np.asarray(eps, dtype=float), np.asarray(n, dtype=np.int64))
    return delta_lower_upper(d, eps_b.ravel(), n_b.ravel(), resolution, TAIL_LOG, 0.0, max_gap,
                             phase_products)[0].reshape(eps_b.shape)


def delta_lower_upper(d: Decomposition, eps: np.ndarray, n: np.ndarray, resolution: float = RESOLUTION,
                      tail_log: float = LOWER_TAIL_LOG, floor_z: float = LOWER_FLOOR_Z,
                      max_gap: float = SLICE_MAX_GAP, phase_products: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``delta_lower`` for pairs (eps_b, n_b) (1-D), and from the same Parseval sums a certified
    UPPER bound on the same delta (``spectral._Plan.upper``: aliasing and dropped nodes added,
    valid at any period and resolution; NaN where the plan declines).  By default at the lower
    slices' settings (``LOWER_TAIL_LOG``, ``LOWER_FLOOR_Z``: cheaper, within about 1e-4 of the
    live path's delta; ``SLICE_MAX_GAP``)."""
    lower, upper = np.full(eps.size, np.nan), np.full(eps.size, np.nan)
    pairs = np.flatnonzero(spectral.spread(d, n))
    if pairs.size:
        used, row = np.unique(eps[pairs], return_inverse=True)
        plans = spectral.spread_plans(d, used, row.ravel(), n[pairs], resolution, tail_log, floor_z, phase_products)
        for which, plan, law_eps in plans:
            atoms = _Atoms(d, law_eps, plan.law)
            for idx in plan.batches():
                lower[pairs[which[idx]]], upper[pairs[which[idx]]] = _bound(plan, atoms, idx, max_gap)
    return lower, upper


def chernoff_upper(d: Decomposition, eps: np.ndarray, n: int) -> np.ndarray:
    """Upper bound on (1/n) E[(G_1+...+G_n)_+] per eps: y_+ <= e^(mu y) / (e mu) for every mu > 0,
    so E[S_+] <= M(mu)^n / (e mu), minimised over a fixed grid of mu (any mu is valid).  Cheap
    and loose (a factor ~ 10-100): used to skip lower-bound pairs that cannot be the largest."""
    values, probs = d.atoms(eps)
    values = values[:, None, :]
    sd = np.sqrt(np.maximum(np.var(values, axis=2, where=probs > 0), 1e-300))
    mu = np.geomspace(1e-7, 1e2, 120)[None, :, None] / sd[:, :, None]
    with np.errstate(divide="ignore", over="ignore"):
        expo = log_probs(probs) + mu * values
        top = np.max(expo, axis=2, keepdims=True)
        log_m = top[..., 0] + np.log(np.sum(np.exp(expo - top), axis=2))
        log_bound = n * log_m - np.log(np.e * mu[..., 0]) - np.log(n)
        return np.exp(np.min(log_bound, axis=1) + 1e-6)


class _Atoms:
    """The unrounded law in lattice units, tilted at the lattice law's lambda, per eps: what the
    rounding correction (step 2) and the coordinate slack (step 1) need."""

    def __init__(self, d: Decomposition, eps: np.ndarray, law: object) -> None:
        alpha = np.exp(eps)[:, None]
        u, v = np.append(d.u, 0.0)[None, :], np.append(d.v, 0.0)[None, :]
        probs = np.append(d.c, d.rest)
        step = law.step[:, None]
        offset = law.ratio[:, None] * step
        x = (u - alpha * v - offset) / step
        lam = law.lam[:, None]
        logw, self.log_mgf = tilted_log_weights(x, probs, law.lam)
        w = np.exp(logw)
        self.x, self.w = x, w  # psi_G(t) = sum_j w_j e^(i t x_j) per eps
        mean = np.sum(w * x, axis=1)
        dev = x - mean[:, None]
        var, mu4 = np.sum(w * dev**2, axis=1), np.sum(w * dev**4, axis=1)
        self.var = var * (1 - 1e-9)
        self.theta1 = np.sqrt(2.4 * self.var / (mu4 * (1 + 1e-9) + 3 * var * var)) * (1 - 1e-9)
        # generous floating-point bounds (lattice units): |x_up - x_true| per user, error of log M
        magnitude = np.max(np.abs(u) + alpha * np.abs(v), axis=1) + np.abs(offset[:, 0]) + step[:, 0]
        self.dx = 64 * U * magnitude / step[:, 0] + 16 * U * (np.max(np.abs(x), axis=1) + 2)
        self.mgf_err = 16 * U * (np.max(np.abs(lam * x), axis=1) + 2) + law.lam * 2 * self.dx
        self.pairs = _pair_table(x, w)


def _pair_table(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per eps: distances d_ab and weights 2 w_a w_b of the pairs of the PAIR_ATOMS heaviest
    tilted atoms (any set of pairs gives a valid bound: every pair's term is >= 0)."""
    top = np.argsort(w, axis=1)[:, ::-1][:, :PAIR_ATOMS]
    xs, ws = np.take_along_axis(x, top, 1), np.take_along_axis(w, top, 1)
    a, b = np.triu_indices(xs.shape[1], 1)
    return np.abs(xs[:, a] - xs[:, b]), 2 * ws[:, a] * ws[:, b] * (1 - 1e-9)


def _gauss_piece(kappa: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Upper bound on int_lo^hi e^(-kappa t^2) dt (0 <= lo <= hi <= inf, kappa > 0)."""
    root = np.sqrt(kappa)
    diff = np.maximum(erfc(lo * root) - erfc(np.minimum(hi, 1e300) * root), 0.0)
    return np.sqrt(np.pi) / (2 * root) * diff * (1 + 1e-9) + 1e-300


def _min_one_minus_cos(y: np.ndarray) -> np.ndarray:
    """Per cell [y[i], y[i + 1]] of consecutive edges ``y`` (0 <= y, ascending within a cell; along
    the first axis, each column on its own), min of 1 - cos over it, minus a floating-point
    margin: 0 where the cell holds a multiple of 2 pi, else the smaller end value (1 - cos is
    unimodal between consecutive multiples).  Cosines and turns are taken once per edge
    (neighbouring cells share it); slices, no gathers."""
    period = 2 * np.pi
    one_minus, turns = 1 - np.cos(y), np.floor(y / period)
    holds = turns[1:] > turns[:-1]
    # or a cell starting on a multiple: np.mod (as costly as the cosine) only where y - turns *
    # period is 0, which every exact multiple y = k period gives (y / period is then k exactly)
    maybe = y[:-1] - turns[:-1] * period == 0
    holds[maybe] |= np.mod(y[:-1][maybe], period) == 0
    ends = np.minimum(one_minus[:-1], one_minus[1:]) - 8 * U * (y[1:] + 1)
    return np.where(holds, 0.0, np.maximum(ends, 0.0))


def _cell_drops(edges: np.ndarray, edge_owner: np.ndarray, dist: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """sum over pairs of weight * (min over the cell of 1 - cos(t d)) for every two consecutive
    ``edges`` (rows of ``dist`` and ``weight``: the edges' owners); as many pairs at a time as
    keep an array within DROP_BLOCK values (one for the long edge lists of many cells, all 66 of
    12 atoms for the short ones of refined cells: numpy's per-call cost decides there).  Entries
    spanning two owners are not cells (the caller reads each owner's cells only)."""
    drop = np.zeros(max(edges.size - 1, 0))
    below = edge_owner[:-1]
    block = max(1, DROP_BLOCK // max(edges.size, 1))
    for p in range(0, dist.shape[1], block):
        mins = _min_one_minus_cos(edges[:, None] * dist[edge_owner, p : p + block])
        drop += np.sum(weight[below, p : p + block] * mins, axis=1)
    return drop


def _cell_pieces(start: np.ndarray, end: np.ndarray, count: np.ndarray, a: np.ndarray, n: np.ndarray,
                 dist: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[start, end] of each group cut into ``count`` equal cells (the last edge is ``end`` itself:
    the cells tile the interval exactly); per cell its group, first edge and bound on
    int_cell e^(-a t^2) |psi(t)|^n dt with |psi|^2 <= 1 - sum_pairs weight min_cell (1 - cos t dist)
    (per group: ``a``, ``n`` and rows of ``dist``, ``weight``)."""
    width = (end - start) / count
    # a pair whose phase spans 2 pi over one cell has min (1 - cos) = 0 on every cell: left out
    useful = dist * width[:, None] < 2 * np.pi
    keep = np.any(useful, axis=0)
    dist, weight = dist[:, keep], np.where(useful, weight, 0.0)[:, keep]
    edge_owner = np.repeat(np.arange(start.size), count + 1)
    first_edge = np.cumsum(count + 1) - (count + 1)
    edges = start[edge_owner] + spectral.ramp(count + 1) * width[edge_owner]
    edges[first_edge + count] = end
    owner = np.repeat(np.arange(start.size), count)
    first = spectral.runs(first_edge, count)
    drop = _cell_drops(edges, edge_owner, dist, weight)[first]
    with np.errstate(divide="ignore"):
        log_psi = 0.5 * n[owner] * np.log(np.maximum(1 - drop * (1 - 1e-9), 0.0))
    return owner, first, np.exp(log_psi) * _gauss_piece(a[owner], edges[first], edges[first + 1]), edges


def _noise_integral(atoms: _Atoms, rows: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Upper bound on int_R e^(-n t^2 / 8) |psi_G(t)|^n dt (step 2), per pair."""
    a = n / 8.0
    theta1 = atoms.theta1[rows]
    # [0, theta1]: Taylor, |psi|^n <= e^(-0.4 n v t^2)
    core = _gauss_piece(a + 0.4 * n * atoms.var[rows], np.zeros_like(a), theta1)
    # beyond: cells of [theta1, far], |psi|^2 <= 1 - sum_pairs 2 w_a w_b min_cell (1 - cos t d_ab),
    # coarse first, refined where they matter (any tiling gives a bound); the tail from far on
    far = np.maximum(np.sqrt(NOISE_LOG / a), theta1)
    dist, weight = atoms.pairs[0][rows], atoms.pairs[1][rows]
    heavy = n[:, None] * weight >= PAIR_USERS
    reach = np.max(np.where(heavy, dist, 0.0), axis=1)
    cells = np.clip(np.ceil((far - theta1) * reach / CELL_PHASE), 1, MAX_CELLS).astype(np.int64)
    coarse = -(-cells // REFINE)
    owner, first, piece, edges = _cell_pieces(theta1, far, coarse, a, n, dist, weight)
    fine = piece > REFINE_SHARE * core[owner]
    group = owner[fine]
    fine_owner, _, fine_piece, _ = _cell_pieces(edges[first[fine]], edges[first[fine] + 1], np.full(group.size, REFINE),
                                                a[group], n[group], dist[group], weight[group])
    middle = np.bincount(owner[~fine], piece[~fine], rows.size) + np.bincount(group[fine_owner], fine_piece, rows.size)
    tail = _gauss_piece(a, far, np.full_like(a, np.inf))
    return 2.0 * (core + middle + tail)


def _bound(plan: object, atoms: _Atoms, idx: np.ndarray, max_gap: float) -> tuple[np.ndarray, np.ndarray]:
    """The certified lower bound on delta for the pairs ``idx`` of ``plan`` (steps 1-3), and the
    upper bound from the same sums."""
    law = plan.law
    zero = plan.zero[idx]
    if zero.all():
        return np.zeros(idx.size), np.zeros(idx.size)
    rows, n = plan.row[idx], plan.n[idx]
    nf = n.astype(float)
    lam, period = law.lam[rows], plan.period[idx].astype(float)
    value, err = plan.parseval(idx)
    alias = _aliasing(plan, idx, lam, period)
    c_up = plan.int_part[idx] + plan.frac[idx]
    slack = nf * (atoms.dx[rows] + 4 * law.ratio_err[rows] + 8 * U * np.abs(law.ratio[rows]))
    slack += 8 * U * (np.abs(c_up) + 1)
    log_rel = nf * (atoms.log_mgf[rows] - law.log_mgf[rows] + atoms.mgf_err[rows] + law.mgf_err[rows])
    log_rel += nf * lam * lam / 8 + np.log(nf / 8)
    with np.errstate(over="ignore"):
        rounding = np.exp(log_rel) * _noise_integral(atoms, rows, nf)
    main = value - err - alias - slack - rounding
    # declined (NaN: the FFT path answers) where the bracket [main, value + err] of E[Y_+] is
    # wider than ``max_gap``: rounding noise on a comb-like sum (few atoms, small n) costs first order;
    # and wherever main, the lower end, proves nothing
    declined = (main < (1 - max_gap) * (value + err)) | ~(main > 0)
    log_delta = plan.log_scale[idx] - plan.log_err[idx] + np.log(np.where(main > 0, main, 1.0))
    log_delta += np.log(law.step[rows]) - np.log(nf)
    out = np.where(declined, np.nan, np.exp(log_delta) * (1 - 1e-9))
    return np.where(zero, 0.0, out), plan.upper(idx, value, err)


def _aliasing(plan: object, idx: np.ndarray, lam: np.ndarray, period: np.ndarray) -> np.ndarray:
    """Bound on E_lambda[sum_{m != 0} g(Y' + m K)], g(y) = y_+ e^(-lambda y) (step 3).

    Inside the Chernoff window Y' in (y_lo, y_hi): the terms m >= 1 sit at >= A = y_lo + K,
    where g is decreasing once A >= 1/lambda, so they sum to <= g(A) + (1/K) int_A^inf g; the
    terms m <= -1 sit at <= y_hi - K and vanish when that is <= 0 (else <= sup g + int g / K).
    Outside (probability <= 2 e^-TAIL_LOG) the whole periodised weight, <= sup g + int g / K
    (g is unimodal).
    """
    law, rows, n = plan.law, plan.row[idx], plan.n[idx].astype(float)
    centre = n * law.mean[rows] + plan.int_part[idx] + plan.frac[idx]
    y_lo = centre - law.chernoff_width(rows, n, 1, plan.alias_log)
    y_hi = centre + law.chernoff_width(rows, n, 0, plan.alias_log)
    whole = 1.0 / (np.e * lam) + 1.0 / (lam * lam * period)
    a = y_lo + period
    tail = np.where(a * lam >= 1.0, a * np.exp(-lam * a) + (a / lam + 1 / lam**2) * np.exp(-lam * a) / period, whole)
    below = np.where(y_hi - period <= 0, 0.0, whole)
    return tail + below + 2 * np.exp(-plan.alias_log) * whole
