"""Certified upper bounds on E[(G_1 + ... + G_n)_+] for many (eps, n) at once, with no FFT per n.

The certified steps of ``fourier.py`` (randomized rounding onto a lattice, tilting at the
saddlepoint), evaluated by Parseval on the nodes where |psi|^n can matter instead of by an inverse
FFT, vectorised over a batch of evaluations (eps_b, n_b); all quantities in lattice units.  The
result bounds delta = step E[(S + c)_+] / n from above, or is NaN where an evaluation needs more
than ``MAX_NODES`` nodes (the caller then uses the FFT path).  Lower bounds: ``lower.py``.  The
steps and why each is safe: docs/engine.md, "The spectral path".
"""

from __future__ import annotations

import numpy as np
from scipy.fft import next_fast_len, rfft

from lookup.format import UNIT_ROUNDOFF as U
from tablegen import limits
from tablegen.decomposition import Decomposition
from tablegen.engine.lattice import align_step, refine_step, saddlepoint_rows, tilted_log_weights, tilted_moments

TINY = float(np.nextafter(0.0, 1.0))
FP_SAFETY = 8.0
TAIL_LOG = 40.0  # Chernoff tails, dropped nodes (and the lower bound's period) sized to e^-40 of the main term
# the period K of the upper bound is sized to e^-12: aliasing only adds (any K certifies); delta
# measured within 1.7e-6 of its values at e^-40 on 4,200 random (law, eps0, eps, n), 3.9e-5 for
# k-RR k = 1024 at eps0 6 (slices' eps within 6e-5); slices 5-13% faster than at e^-15 (fewer
# nodes near 0 and in every window); the lower bound subtracts its aliasing and keeps TAIL_LOG
ALIAS_LOG = 12.0
MAX_NODES = 16384  # per evaluation (half lattices); beyond this the FFT path is cheaper
MAX_ALL_NODES = 2**18  # lattice-anchored laws (few users off the heaviest atom; psi by one FFT): FFT path beyond
USELESS_LOG = 100.0  # plans whose tilt factor exceeds e^this are declined (``_Plan``)
MAX_PERIOD = 10**9  # k * x mod K stays exact in int64 (k <= K / 2, x < K: below 5e17)
SMALL_PERIOD = 2048  # periods up to this sum every node (psi from one FFT): no far cells to bound
BATCH_NODES = 2_000_000  # live nodes x points handled per numpy pass
RESOLUTION = 20.0
FAR_GRID = 128  # first cells of the bound on |psi| away from 0, then refined where needed
FAR_SPLIT = 16
FAR_LEVELS = 3
FAR_CELLS = 100_000  # per chunk of FAR_ROWS rows: refinement stops there (weaker bound used)
FAR_ROWS = 64
PHASE_PRODUCT_ERR = 24 * U  # what summing by parts adds to psi's error, per unit weight (``_psi_by_parts``)
GROUP_PHASE_ERR = 5 * FAR_SPLIT * U  # the phase recurrence of _Lattice._pair_abs_psi over a group (per unit weight)
SPREAD_USERS = 200.0  # half-split the heavy atoms only when n P(G is not the heaviest atom) >= this
CHERNOFF_GRID = 24  # mu values of the Chernoff table (any is valid): 48 cost 9% of a Laplace slice, same to 2.7e-5
SADDLE_RTOL = 1e-9  # lambda only centres the tilted law (any lambda certifies)
FLOOR_Z = 2.0  # lambda is at least FLOOR_Z / sd(S') (per n-octave): keeps the period near 20 sd(S')
# theta where the split bound B is tabulated (B(0) = 1); it only decides which far cells are
# refined and summed (cost; values only through the e^-40 bound on dropped nodes): 65 points
# gave the same slices as 129, Laplace's 8% faster
SPLIT_GRID = np.linspace(0.0, np.pi, 65)
HALF_FINER = 1.6  # half-split lattices are finer: every user then carries rounding variance step^2/4
DENSE_RATIO = 12  # a dense form is built when the support spans <= this many cells per pair
# cost model (ns, this machine's numpy) for the form of each psi evaluation: the pair form costs
# PAIR_NS per node and pair; the dense form HORNER_NODE_NS per node and cell plus HORNER_STEP_NS
# per cell (one numpy pass per degree); psi at every node of a period K by one FFT (``spectrum``)
# costs about FFT_NS K log2 K, shared by the evaluations of one law row with that period
PAIR_NS, HORNER_NODE_NS, HORNER_STEP_NS, FFT_NS = 35.0, 3.0, 4000.0, 1.0


def delta_upper(d: Decomposition, eps: np.ndarray, n: np.ndarray, resolution: float = RESOLUTION,
                useless_log: float = USELESS_LOG, phase_products: bool = False) -> np.ndarray:
    """Certified upper bound on (1/n) E[(G_1+...+G_n)_+] for each pair (eps_b, n_b) (broadcast).

    NaN where the spectral path declines (too many frequencies, or a tilt factor above e^``useless_log``:
    ``_Plan``); the caller uses the FFT path.  ``phase_products``: the pair form may take long runs of
    phases as products (``_psi_by_parts``: cheaper, a little more error; off, the tables' values stay
    those they were built with).
    """
    eps_b, n_b = np.broadcast_arrays(np.asarray(eps, dtype=float), np.asarray(n, dtype=np.int64))
    unique, row = np.unique(eps_b.ravel(), return_inverse=True)
    return delta_pairs(d, unique, row.ravel(), n_b.ravel(), resolution, useless_log,
                       phase_products).reshape(eps_b.shape)


def delta_pairs(d: Decomposition, eps: np.ndarray, row: np.ndarray, n: np.ndarray,
                resolution: float = RESOLUTION, useless_log: float = USELESS_LOG, phase_products: bool = False
                ) -> np.ndarray:
    """Upper bounds for the pairs (eps[row_b], n_b): the per-eps work (rounding, tilting, bounds
    on |psi|) is done once per distinct eps and shared by every n (NaN where declined)."""
    out = np.full(row.shape, np.nan)
    split = spread(d, n)
    for half in (True, False):
        pairs = np.flatnonzero(split == half)
        if pairs.size:
            for which, law, law_row, _ in _laws(d, eps, row[pairs], n[pairs], resolution, half):
                _fill(out, pairs[which], law, law_row, n[pairs[which]], half, useless_log, phase_products)
    return out


def spread(d: Decomposition, n: np.ndarray) -> np.ndarray:
    """Where a sum of n users is spread: n P(G not at the heaviest atom) >= SPREAD_USERS (the
    half-split lattice of step 1; the lower path answers only there, at every eps)."""
    return np.asarray(n) * (1.0 - float(np.max(np.append(d.c, d.rest)))) >= SPREAD_USERS


def _laws(d: Decomposition, eps: np.ndarray, row: np.ndarray, n: np.ndarray, resolution: float,
          half: bool, floor_z: float = FLOOR_Z) -> list[tuple[np.ndarray, _Lattice, np.ndarray, np.ndarray]]:
    """The lattice laws of the pairs (eps[row_b], n_b): (which pairs, law, each one's law row, the
    law rows' eps) for those tilted at the saddlepoint and, near eps = 0, where the saddlepoint
    lambda is tiny and the period ~ TAIL_LOG / lambda explodes, for those tilted at a floor
    lambda instead, floor_z / sd(S') per law row and n-octave (the identity of step 2 holds for
    any lambda)."""
    used, local = np.unique(row, return_inverse=True)
    local = local.ravel()
    law = _Lattice(d, eps[used], resolution, half, _most_users(local, n, used.size))
    bucket = np.floor(np.log2(n)).astype(np.int64)
    floor = floor_z / (np.sqrt(2.0 ** (bucket + 1)) * law.sd_cells[local])
    low = law.lam[local] < floor
    out = [(np.flatnonzero(~low), law, local[~low], eps[used])]
    if low.any():
        keys, key_row = np.unique(np.stack([local[low], bucket[low]]), axis=1, return_inverse=True)
        floors = floor_z / (np.sqrt(2.0 ** (keys[1] + 1)) * law.sd_cells[keys[0]])
        tilted = _Lattice(d, eps[used[keys[0]]], resolution, half,
                          _most_users(key_row.ravel(), n[low], keys.shape[1]), floors)
        out.append((np.flatnonzero(low), tilted, key_row.ravel(), eps[used[keys[0]]]))
    return out


def _fill(out: np.ndarray, pairs: np.ndarray, law: _Lattice, row: np.ndarray, n: np.ndarray, half: bool,
          useless_log: float, phase_products: bool) -> None:
    """out[pairs] = upper bounds for (law row, n) (NaN stays where the plan declines)."""
    if not pairs.size:
        return
    plan = _Plan(law, row, n, MAX_NODES if half else MAX_ALL_NODES, useless_log=useless_log,
                 phase_products=phase_products)
    for idx in plan.batches():
        out[pairs[idx]] = plan.evaluate(idx)


def spread_plans(d: Decomposition, eps: np.ndarray, row: np.ndarray, n: np.ndarray, resolution: float,
                 tail_log: float = TAIL_LOG, floor_z: float = FLOOR_Z, phase_products: bool = False
                 ) -> list[tuple[np.ndarray, _Plan, np.ndarray]]:
    """Steps 1-4 on the half-split lattice for the pairs (eps[row_b], n_b), without the final
    bound: the shared part of upper and lower bounds (``lower.py`` uses ``plan.law``,
    ``plan.batches()`` and ``plan.parseval``), as (which pairs, plan, its law rows' eps) for the
    pairs tilted at the saddlepoint and those tilted at a floor lambda (``_laws``); the period
    and the nodes summed sized at e^-``tail_log`` (``phase_products``: as in ``delta_upper``)."""
    return [(which, _Plan(law, law_row, n[which], MAX_NODES, tail_log, tail_log, phase_products=phase_products),
             law_eps)
            for which, law, law_row, law_eps in _laws(d, eps, row, n, resolution, True, floor_z)]


def _most_users(row: np.ndarray, n: np.ndarray, rows: int) -> np.ndarray:
    """The largest n of each row's pairs (what ``lattice.refine_step`` sizes the step for)."""
    most = np.ones(rows)
    np.maximum.at(most, row, n)
    return most


class _Lattice:
    """Per-eps part: rounded, tilted law (depends on eps only, never on n)."""

    def __init__(self, d: Decomposition, eps: np.ndarray, resolution: float, half: bool, n: np.ndarray,
                 lam_floor: np.ndarray | None = None) -> None:
        alpha = np.exp(eps)[:, None]
        u, v = np.append(d.u, 0.0)[None, :], np.append(d.v, 0.0)[None, :]
        probs = np.append(d.c, d.rest)
        values = u - alpha * v
        err_values = 3 * U * (np.abs(u) + alpha * np.abs(v))
        mean = values @ probs
        sd = np.sqrt(((values - mean[:, None]) ** 2) @ probs)
        order = np.argsort(probs)[::-1]
        first = values[:, order[0]]
        gap = np.abs(values[:, order[1]] - first) if probs.size > 1 else np.zeros_like(first)
        # lattice-anchored laws: only users off the heaviest atom (a share ``rare``) carry rounding
        # noise, at most step^2 / 4 each, so with rare < 1/4 the cells can be 1 / (2 sqrt(rare))
        # times wider and the noise stays below 1 / (16 resolution^2) of var(S) (k-RR with large k)
        rare = max(1.0 - float(probs[order[0]]), 1e-300)
        wider = 1.0 if half else max(1.0, 0.5 / np.sqrt(rare))
        cells = resolution * (HALF_FINER if half else 1.0)
        step = np.where(sd > 0, sd * wider / cells, 1.0)
        # refined where the law that decides delta is much narrower than G (lattice.refine_step)
        moments = tilted_moments(values, probs)
        step = align_step(gap, refine_step(values, probs, step, half, cells, n, moments))
        offset = first - step / 2 if half else first  # heaviest atoms at 1/2 (or on the lattice)
        x = (values - offset[:, None]) / step[:, None]
        err_offset = U * np.abs(offset) + err_values[:, order[0]] + U * step
        err_x = (err_values + err_offset[:, None] + U * np.abs(values - offset[:, None])) / step[:, None]
        x = x + err_x + 4 * U * (np.abs(x) + 1)  # pushed up: G only grows (upper bound)
        k = np.floor(x)
        t = x - k
        split_points = np.concatenate([k, k + 1], axis=1)  # (B, 2J) integer-valued floats
        split_probs = np.concatenate([probs * (1 - t), probs * t], axis=1)
        # the law on distinct points (B, P), P <= 2J, and for psi the atoms by their lower cell,
        # psi(theta) = sum_q e^(i theta y_q) (a_q + b_q e^(i theta)) (B, Q), Q <= min(P, J);
        # a sum of m probabilities carries a relative error (m - 1) U
        self.points, merged, point_err = _merge_points(split_points, split_probs[..., None])
        self.probs = merged[..., 0]
        self.pair_base, self.pair_probs, pair_err = _merge_points(k, np.stack([probs * (1 - t), probs * t], axis=-1))
        self.merge_err = np.maximum(point_err, pair_err)
        self.step = step
        self.ratio = offset / step  # c = n * ratio, error bound below
        self.ratio_err = (err_offset + U * np.abs(offset)) / step + 2 * U * np.abs(self.ratio)
        self.positive = np.max(values, axis=1) > 0
        self.sd_cells = np.maximum(sd / step, 1.0)  # sd of G in lattice cells (>= resolution)
        self._tilt(lam_floor, moments[0] * step)  # Newton from the unrounded law's lambda
        self._dense_form()
        self._chernoff_table()
        self._split_table()

    def _tilt(self, lam_floor: np.ndarray | None, start: np.ndarray) -> None:
        """Saddlepoint lambda (tilted mean = -ratio, Newton from ``start``), raised to
        ``lam_floor`` where given, and the tilted moments, per eps."""
        target = -self.ratio
        lam = saddlepoint_rows(self.points, self.probs, target, self.positive, SADDLE_RTOL, start)
        if lam_floor is not None:
            lam = np.where(self.positive, np.maximum(lam, lam_floor), lam)
        logw, log_m = tilted_log_weights(self.points, self.probs, lam)
        w = np.exp(logw)
        mean = np.sum(w * self.points, axis=1)
        dev = self.points - mean[:, None]
        self.lam, self.log_mgf, self.weights = lam, log_m, w
        self.mean = mean
        self.var = np.sum(w * dev**2, axis=1)
        self.mu4 = np.sum(w * dev**4, axis=1)
        self.centre = np.round(mean)
        # error of psi from the tilted weights (exp of lambda x) and the merged probabilities
        # (the points' sums are exact up to merge_err, relative), whatever the form of the sum
        self.weight_err = np.sum(w * np.abs(lam[:, None] * self.points), axis=1) * 2 * U + 2 * self.merge_err
        # in pair form each term is e^(i phi) (a + b e^(i theta)): two phases (cos, sin) and a
        # complex product per term, 12 U per unit weight (24 U in all, sum w = 1); the sum's own
        # error is added by _dense_form, which chooses the form (``spectrum``: the FFT's)
        self.psi_err = self.weight_err + 24 * U * np.sum(w, axis=1)
        with np.errstate(divide="ignore"):
            log_pair = np.log(self.pair_probs) - log_m[:, None, None]
        shift = lam[:, None, None] * (self.pair_base[:, :, None] + np.array([0.0, 1.0]))
        self.pair_weights = np.exp(log_pair + shift)  # (B, Q, 2): tilted weights of y_q and y_q + 1
        self.mgf_err = 4 * U * (np.max(np.abs(lam[:, None] * self.points), axis=1) + 2.0) + 2 * self.merge_err

    def _dense_form(self) -> None:
        """The form psi is summed in, and that sum's error added to ``psi_err``.

        Pair form: Q terms per node, each with its own phase (a cosine and a sine); the sum
        adds 4 Q U.  Dense form (``dense``, for the rows ``dense_rows`` whose support spans
        D + 1 <= DENSE_RATIO Q cells and whose error bound below is within the pair form's, so
        ``psi_err`` and the values stay those of the pair form; laws with many atoms, e.g.
        Laplace; ``dense_for`` chooses per evaluation): with c the centre and z = e^(i theta),
        psi(theta) = P(z) + conj(z) M(conj(z)), P(z) = sum_{d >= 0} w_(c+d) z^d and
        M(y) = sum_{d >= 1} w_(c-d) y^(d-1), each by Horner's rule from its top degree (one
        complex multiply-add per cell, no phases).  The computed z~ has |z~ - z| <= 9.4 U
        (theta = 2 pi k / K carries 2.35 U theta <= 7.4 U, cos and sin 1 ulp each).  Horner's
        step at degree d errs by at most (sqrt 5 (1 + 9.4 U) + 1) U |acc| <= 3.25 U (sum of the
        weights at degrees >= d), as the weights are >= 0: 3.25 U (sum_x w_x |x - c| + S) over
        the steps (S = sum w); |z~^d - z^d| <= 9.4 U d (1 + 9.4 U)^d adds 9.4 U sum_x w_x |x - c|;
        the last product and sum 3.3 U S.  In all at most U (13 sum_x w_x |x - c| + 7 S), about
        10 sd(G) / step U.
        ``dense`` is (P, M): arrays (D+ + 1, B) and (D-, B), row d holding the weights of
        every law row at degree d."""
        rel = self.points - self.centre[:, None]
        live = self.weights > 0
        above = np.max(np.where(live, rel, 0.0), axis=1)
        below = np.max(np.where(live, -rel, 0.0), axis=1)
        total = np.sum(self.weights, axis=1) * (1 + 1e-9)
        pair_err = 4 * self.pair_base.shape[1] * U * total
        self.psi_err = self.psi_err + pair_err
        spread = np.sum(self.weights * np.abs(rel), axis=1) * (1 + 1e-9)
        self.dense_rows = ((above + below + 1 <= DENSE_RATIO * self.pair_base.shape[1])
                           & (U * (13 * spread + 7 * total) <= pair_err))
        self.dense = None
        if not self.dense_rows.any():
            return
        live &= self.dense_rows[:, None]
        # top degree of P and of M per row (-1: none), over the dense rows
        self.dense_top = (np.where(self.dense_rows, above, -1).astype(np.int64),
                          np.where(self.dense_rows, below - 1, -1).astype(np.int64))
        law_row = np.broadcast_to(np.arange(rel.shape[0])[:, None], rel.shape)
        up, down = live & (rel >= 0), live & (rel < 0)
        forward = np.zeros((int(self.dense_top[0].max()) + 1, rel.shape[0]))
        backward = np.zeros((int(self.dense_top[1].max()) + 1, rel.shape[0]))
        forward[rel[up].astype(np.int64), law_row[up]] = self.weights[up]
        backward[(-rel[down]).astype(np.int64) - 1, law_row[down]] = self.weights[down]
        self.dense = (forward, backward)

    def spectrum(self, rows: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray]:
        """psi at every node theta_k = 2 pi k / K, k = 0..K/2, of the law rows ``rows`` (shape
        (rows, K/2 + 1)), by one real FFT: the tilted weights folded onto Z mod K by their
        offset from the centre, h_j = sum of w_x over x - c = j (mod K), give
        psi(theta_k) = sum_j h_j e^(2 pi i j k / K) = conj(rfft(h)_k), no phase computed per
        node.  Error bound per row: ``weight_err`` plus the FFT's 5 U log2(K) ||h||_1 (the
        standard-model bound of ``fourier.py``, per output, ||h||_1 = sum w) plus P U sum w for
        the fold's sums (P points)."""
        rel = np.mod((self.points[rows] - self.centre[rows, None]).astype(np.int64), period)
        at = (np.arange(rows.size)[:, None] * period + rel).ravel()
        h = np.bincount(at, self.weights[rows].ravel(), rows.size * period).reshape(rows.size, period)
        total = np.sum(self.weights[rows], axis=1) * (1 + 1e-9)
        err = self.weight_err[rows] + (5 * np.log2(max(period, 2)) + self.points.shape[1]) * U * total
        return np.conj(rfft(h, axis=1)), err

    def dense_for(self, nodes: int) -> bool:
        """Whether ``nodes`` evaluations of psi are cheaper in the dense form (cost model above)."""
        if self.dense is None:
            return False
        cells = sum(t.shape[0] for t in self.dense)
        return cells * (HORNER_NODE_NS * nodes + HORNER_STEP_NS) < PAIR_NS * nodes * self.pair_base.shape[1]

    def horner(self, rows: np.ndarray, cos_t: np.ndarray, sin_t: np.ndarray) -> np.ndarray:
        """psi_row(theta) in the dense form (see _dense_form), z = cos_t + i sin_t, law rows
        ``rows``.  The evaluations are laid out one law row per line, lines ordered by top
        degree (highest first), so that each Horner step runs on the prefix of lines still
        live, with one coefficient per line (no gather per node, no steps above a row's degree)."""
        groups, group = np.unique(rows, return_inverse=True)
        group = group.ravel()
        count = np.bincount(group, minlength=groups.size)
        pos = np.empty(rows.size, dtype=np.int64)
        pos[np.argsort(group, kind="stable")] = ramp(count)
        z = cos_t + 1j * sin_t
        psi = np.zeros(rows.size, dtype=complex)
        for table, top, power, factor in zip(self.dense, self.dense_top, (z, np.conj(z)), (1.0, np.conj(z)),
                                             strict=True):  # P(z), then conj(z) M(conj(z))
            rank = np.argsort(-top[groups], kind="stable")  # line -> group
            line = np.empty(groups.size, dtype=np.int64)
            line[rank] = np.arange(groups.size)
            tops = top[groups[rank]]
            grid = np.zeros((groups.size, int(count.max())), dtype=complex)
            grid[line[group], pos] = power
            acc = np.zeros_like(grid)
            degrees = np.arange(int(tops[0]), -1, -1)
            lines = np.searchsorted(-tops, -degrees, side="right")  # lines with top >= d
            coef = table[: degrees.size, groups[rank]][:, :, None]
            for d, live in zip(degrees.tolist(), lines.tolist(), strict=True):
                a = acc[:live]
                np.multiply(a, grid[:live], out=a)
                a += coef[d, :live]
            psi += acc[line[group], pos] * factor
        return psi

    def dense_nodes(self, rows: np.ndarray) -> np.ndarray:
        """Which of these evaluations (law rows ``rows``) to sum in the dense form."""
        if self.dense_for(rows.size):
            return self.dense_rows[rows]
        return np.zeros(rows.size, dtype=bool)

    def _abs_psi(self, rows: np.ndarray, theta: np.ndarray, width: np.ndarray, group: int) -> np.ndarray:
        """|psi_row(theta)| at cell midpoints that come in groups of ``group`` consecutive cells of
        one row and one ``width`` (within ``psi_err`` plus the phase errors ``far_cells`` adds)."""
        out = np.empty(rows.size)
        dense = self.dense_nodes(rows)  # per row: whole groups
        if dense.any():
            out[dense] = np.abs(self.horner(rows[dense], np.cos(theta[dense]), np.sin(theta[dense])))
        if not dense.all():
            out[~dense] = self._pair_abs_psi(rows[~dense], theta[~dense], width[~dense], group)
        return out

    def _pair_abs_psi(self, rows: np.ndarray, theta: np.ndarray, width: np.ndarray, group: int) -> np.ndarray:
        """Pair form, psi(theta) = A + e^(i theta) B with A = sum_q a_q e^(i theta (y_q - c)) and B
        the same with b_q (two products of the phases with the weights per group: one batched
        matrix product); the phases e^(i theta (y_q - c)) of a group's cells by the recurrence
        e^(i (theta + width) y) = e^(i theta y) e^(i width y) from the group's first cell (one
        complex product per cell and pair instead of an exponential; a loop over the group's
        cells, each product one vectorised pass).  The j-th cell's phase carries the first
        exponential's error (U |theta y| for its argument, 2 U for cosine and sine) and j times
        the step's (U |width y| + 2 U) and a product's (sqrt 5 U): in all U |theta_j y|
        (<= pi U |y|, inside 16 U (|y| + 1)) plus 2 U + (group - 1) 4.3 U <= GROUP_PHASE_ERR
        per unit weight.  The sums (any order: Q U relative each, 2 U per term for the products)
        and e^(i theta) B (9.4 U for the exponential, sqrt 5 U for the product, per unit of b)
        stay inside the pair form's 24 U + 4 Q U per unit weight in ``psi_err``."""
        first = slice(None, None, group)  # cells (groups, group): a group's cells share its row
        rel = self.pair_base[rows[first]] - self.centre[rows[first], None]
        phases = np.empty((rel.shape[0], group, rel.shape[1]), dtype=complex)
        phases[:, 0] = np.exp(1j * theta[first, None] * rel)
        step = np.exp(1j * width[first, None] * rel)
        for j in range(1, group):
            np.multiply(phases[:, j - 1], step, out=phases[:, j])
        sums = phases @ self.pair_weights[rows[first]].astype(complex)  # (groups, group, 2): A and B
        return np.abs(sums[..., 0] + np.exp(1j * theta).reshape(sums.shape[:2]) * sums[..., 1]).ravel()

    def _chernoff_table(self) -> None:
        """log E_lambda[e^(mu (K - mean))] on a grid of mu > 0 and mu < 0, per eps."""
        mu = np.geomspace(1e-6, 1e2, CHERNOFF_GRID)[None, :] / np.sqrt(np.maximum(self.var, 1e-300))[:, None]
        dev = self.points - self.mean[:, None]
        with np.errstate(divide="ignore"):
            logw = np.where(self.weights > 0, np.log(np.maximum(self.weights, 1e-300)), -np.inf)
        self.mu = mu
        self.chernoff = []
        for sign in (1.0, -1.0):
            expo = logw[:, None, :] + sign * mu[:, :, None] * dev[:, None, :]
            top = np.max(expo, axis=2, keepdims=True)
            log_mgf = top[:, :, 0] + np.log(np.sum(np.exp(expo - top), axis=2))
            reach = np.max(np.where(self.weights > 0, sign * dev, 0.0), axis=1)
            self.chernoff.append((log_mgf, reach))

    def chernoff_width(self, row: np.ndarray, n: np.ndarray, side: int, tail: float = TAIL_LOG) -> np.ndarray:
        """a with P_lambda(+-(S' - n mean) >= a) <= e^-tail: min over the mu grid of
        (n Lambda_c(mu) + tail)/mu, capped by the support (any mu is valid: a coarse grid is safe)."""
        log_mgf, reach = self.chernoff[side]
        width = np.min((n[:, None] * log_mgf[row] + tail) / self.mu[row], axis=1)
        return np.minimum(width, reach[row] * n) + 1.0

    def _split_table(self) -> None:
        """theta1, where the Taylor bound |psi|^2 <= 1 - 0.8 v theta^2 holds (step 4), and log B on
        a grid of theta (``SPLIT_GRID``), per eps.  B(theta) = sum_q |w_q0 + w_q1 e^(i theta)| >=
        |psi(theta)| groups the two cells y_q, y_q + 1 of the rounded atoms with lower cell y_q
        (the pair form's tilted weights; grouping further only lowers the sum, by the triangle
        inequality) and is non-increasing on [0, pi] (|a + b e^(i theta)|^2 = a^2 + b^2 + 2 a b
        cos theta with a, b >= 0), so B at a grid point bounds |psi| beyond it."""
        v = self.var * (1 - 1e-9)
        self.theta1 = np.minimum(np.sqrt(2.4 * v / (self.mu4 * (1 + 1e-9) + 3 * v * v)), np.pi)
        w0, w1 = self.pair_weights[:, :, 0], self.pair_weights[:, :, 1]
        s = np.sin(SPLIT_GRID / 2)[None, :, None] ** 2
        inner = ((w0 + w1) ** 2)[:, None, :] - 4 * (w0 * w1)[:, None, :] * s
        bound = np.sum(np.sqrt(np.maximum(inner, 0.0)), axis=2) + self.psi_err[:, None]
        with np.errstate(divide="ignore"):
            self.log_split = np.log(np.minimum(bound, 1.0))

    def far_cells(self, rows: np.ndarray, t_low: np.ndarray, t_high: np.ndarray,
                  k_high: np.ndarray) -> tuple[np.ndarray, ...]:
        """Cells tiling [theta1, pi] for the law rows ``rows``, each with a certified bound on
        sup |psi| over it: (owner, start, width, log bound), ``owner`` indexing ``rows``, sorted by
        owner then start.

        Rows where B at theta1 alone leaves the whole of [theta1, pi] out for the row's smallest
        n (large n) get that one cell.  Other cells [a, a + h] are bounded by
        min(|psi(mid)| + L h / 2, B(a)) with L = sum_j w_j
        |x_j - centre| >= |psi'| and B the split bound at the grid point below a; the Lipschitz
        term is widened by 1e-12 so that float gaps between neighbouring cells are covered.  A
        cell is split FAR_SPLIT-fold (FAR_LEVELS times at most) where that can change which
        nodes some evaluation of its row sums: its bound is above ``t_low`` (the cell is live for
        the row's smallest n), |psi(mid)| below ``t_high`` (it could be dead for the largest n),
        and it holds more than two nodes of the row's largest period ``k_high``.
        """
        theta1 = self.theta1[rows]
        rel = self.points[rows] - self.centre[rows, None]
        lipschitz = np.sum(self.weights[rows] * np.abs(rel), axis=1)
        # psi's error, the phases' (16 U (|x - c| + 1)) and the phase recurrence's along a group of
        # cells (GROUP_PHASE_ERR, ``_pair_abs_psi``)
        slack = self.psi_err[rows] + 16 * U * (np.max(np.abs(rel), axis=1) + 1) + GROUP_PHASE_ERR
        # rows whose split bound at theta1 already leaves [theta1, pi] out for every n: one cell
        whole = self.log_split[rows, np.searchsorted(SPLIT_GRID, theta1, side="right") - 1]
        quick = np.exp(whole) <= t_low
        done: list[tuple[np.ndarray, ...]] = [(np.flatnonzero(quick), theta1[quick], np.pi - theta1[quick],
                                               np.exp(whole[quick]))]
        # B is non-increasing: from the first grid point beyond theta1 where it is <= t_low on,
        # every node is left out for every n of the row (one cell, bounded by B there); the cells
        # where |psi| is evaluated tile [theta1, that point], as wide as FAR_GRID cells over
        # [theta1, pi] would be, in groups of FAR_SPLIT
        rest = np.flatnonzero(~quick)
        log_b = self.log_split[rows[rest]]
        beyond = (SPLIT_GRID > theta1[rest, None]) & (np.exp(log_b) <= t_low[rest, None])
        cut = np.argmax(beyond, axis=1)
        tail = beyond[np.arange(rest.size), cut]
        done.append((rest[tail], SPLIT_GRID[cut[tail]], np.pi - SPLIT_GRID[cut[tail]], np.exp(log_b[tail, cut[tail]])))
        end = np.where(tail, SPLIT_GRID[cut], np.pi)
        share = (end - theta1[rest]) / (np.pi - theta1[rest])
        count = FAR_SPLIT * np.ceil(FAR_GRID / FAR_SPLIT * share).astype(np.int64)
        owner = np.repeat(rest, count)
        width = np.repeat((end - theta1[rest]) / count, count)
        start = theta1[owner] + width * ramp(count)
        for level in range(FAR_LEVELS + 1):
            mid = start + width / 2
            psi = self._abs_psi(rows[owner], mid, width, FAR_SPLIT)
            split_bound = np.exp(self.log_split[rows[owner], np.searchsorted(SPLIT_GRID, start, side="right") - 1])
            bound = np.minimum(psi + lipschitz[owner] * (width / 2 + 1e-12) + slack[owner], split_bound)
            split = ((bound > t_low[owner]) & (psi + slack[owner] < t_high[owner])
                     & (width * k_high[owner] > 4 * np.pi))
            if level == FAR_LEVELS or split.sum() * FAR_SPLIT > FAR_CELLS:
                split[:] = False
            done.append((owner[~split], start[~split], width[~split], bound[~split]))
            if not split.any():
                break
            owner, width = np.repeat(owner[split], FAR_SPLIT), np.repeat(width[split] / FAR_SPLIT, FAR_SPLIT)
            start = np.repeat(start[split], FAR_SPLIT) + width * np.tile(np.arange(FAR_SPLIT), split.sum())
        owner, start, width, bound = (np.concatenate(parts) for parts in zip(*done, strict=True))
        order = np.lexsort((start, owner))
        with np.errstate(divide="ignore"):
            log_bound = np.log(np.minimum(bound[order], 1.0))
        return owner[order], start[order], width[order], log_bound

class _Plan:
    """Per-(eps, n) part: shift, period K, node cut-off and the dropped-node bound."""

    def __init__(self, law: _Lattice, row: np.ndarray, n: np.ndarray, max_nodes: int,
                 alias_log: float = ALIAS_LOG, tail_log: float = TAIL_LOG, useless_log: float = USELESS_LOG,
                 phase_products: bool = False) -> None:
        self.law, self.row, self.n, self.max_nodes = law, row, n, max_nodes
        self.phase_products = phase_products
        self.alias_log, self.tail_log = alias_log, tail_log
        nf = n.astype(float)
        lam = law.lam[row]
        self.int_part, self.frac = _split_shift(law.ratio[row], law.ratio_err[row], n)
        self.first, self.a0 = _first_positive(self.int_part, self.frac)
        self.log_scale = nf * law.log_mgf[row] + lam * (self.int_part + self.frac)
        self.log_err = nf * law.mgf_err[row] + 4 * U * np.abs(lam * (self.int_part + self.frac)) + 1e-12
        size = np.maximum(law.chernoff_width(row, nf, 0, alias_log), alias_log / np.maximum(lam, 1e-300))
        size = size + law.chernoff_width(row, nf, 1, alias_log) + 2.0
        self.period = _smooth_periods(np.ceil(np.minimum(size, 2.0**52)).astype(np.int64))
        self.zero = ~law.positive[row]  # every G' <= 0: E[(S' + c)_+] = 0
        # declined: E[G] >= 0 (eps = 0, no tilt: left to the FFT path), a period beyond MAX_PERIOD (k x mod K
        # would leave int64), or a tilt whose factor e^(n log M + lambda c) step / n alone exceeds e^useless_log
        # (at USELESS_LOG the bound would need a Parseval sum below e^-100 to fall under 1; the shuffled
        # Gaussian's high clips reach e^700 there, at up to 0.3 s an evaluation).  Declining only loses a bound.
        scale = self.log_scale + np.log(law.step[row]) - np.log(nf)
        self.declined = (lam <= 0) | (scale > useless_log) | (self.period > MAX_PERIOD)
        self.ranges, self.sup_log = self._windows(nf)
        self.nodes = np.bincount(self.ranges[0], self.ranges[2] - self.ranges[1] + 1, n.size).astype(np.int64)

    def _windows(self, n: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """The nodes summed, as ranges (pair, first k, last k) sorted by pair and disjoint, and
        log sup |psi|^n over the nodes left out (``-inf`` when none is).

        Near 0 every node with theta <= min(theta_g, theta1) is summed, theta_g^2 = TAIL_LOG /
        (0.4 n v); the Taylor bound gives |psi|^n <= e^(-0.4 n v theta_g^2) on the rest of
        [0, theta1].  On [theta1, pi] the nodes of every cell of ``far_cells`` whose bound has
        n log bound > -TAIL_LOG are summed (windows around the near-returns of |psi|), the
        others are left out with that bound.  Node ranges are widened by one node on each side
        (only more is summed), then made disjoint.  Periods up to SMALL_PERIOD sum every node
        (nothing left out: bounding the far cells would cost more than the nodes they save).
        """
        law, row, period = self.law, self.row, self.period.astype(float)
        v = law.var[row] * (1 - 1e-9)
        tail_log = self.tail_log
        theta_g = np.sqrt(tail_log / (0.4 * n * v))
        every = self.period <= SMALL_PERIOD
        near = np.where(every, np.pi, np.minimum(theta_g, law.theta1[row]))
        sup = np.where(~every & (theta_g < law.theta1[row]), -0.4 * n * v * theta_g**2, -np.inf)
        pair = [np.arange(n.size)]
        lo, hi = [np.zeros(n.size, np.int64)], [np.ceil(near * period / (2 * np.pi) + 1e-6)]
        # pairs ``batches`` declines whatever their far cells (``declined``, or the near range alone beyond
        # max_nodes) and those whose G' <= 0 get none: their sup is +inf
        lost = self.declined | (hi[0] > self.max_nodes)
        sup = np.where(lost, np.inf, sup)
        far = ~(every | lost | self.zero)
        rows = np.unique(row[far])
        for i in range(0, rows.size, FAR_ROWS):
            chunk = rows[i : i + FAR_ROWS]
            mine = np.flatnonzero(np.isin(row, chunk) & far)
            local = np.searchsorted(chunk, row[mine])
            t_low, t_high, k_high = np.full(chunk.size, np.inf), np.zeros(chunk.size), np.zeros(chunk.size)
            np.minimum.at(t_low, local, np.exp(-tail_log / n[mine]))
            np.maximum.at(t_high, local, np.exp(-tail_log / n[mine]))
            np.maximum.at(k_high, local, period[mine])
            owner, start, width, log_bound = law.far_cells(chunk, t_low, t_high, k_high)
            first = np.searchsorted(owner, np.arange(chunk.size))
            count = np.bincount(owner, minlength=chunk.size)
            # every (pair, cell of its row)
            cells = runs(first[local], count[local])
            owner_pair = np.repeat(mine, count[local])
            log_psi_n = n[owner_pair] * log_bound[cells]
            live = log_psi_n > -tail_log
            dead_sup = np.full(n.size, -np.inf)
            np.maximum.at(dead_sup, owner_pair[~live], log_psi_n[~live])
            sup = np.maximum(sup, dead_sup)
            scale = period[owner_pair[live]] / (2 * np.pi)
            pair.append(owner_pair[live])
            lo.append(np.floor(start[cells[live]] * scale - 1e-6).astype(np.int64))
            hi.append(np.ceil((start[cells[live]] + width[cells[live]]) * scale + 1e-6))
        pair, lo, hi = np.concatenate(pair), np.concatenate(lo), np.concatenate(hi)
        order = np.lexsort((lo, pair))  # stable: the near range of a pair comes first
        pair, lo = pair[order], np.maximum(lo[order], 0)
        hi = np.minimum(hi[order], np.minimum(self.period // 2, 2**31 - 1)[pair]).astype(np.int64)
        # disjoint: each range starts after every earlier range of its pair ends (running max of
        # hi per pair: pair * 2^32 + hi increases with pair, so one accumulate serves every pair)
        reach = np.maximum.accumulate(pair * 2**32 + hi) - pair * 2**32
        before = np.concatenate([[-1], reach[:-1]])
        before[np.flatnonzero(np.diff(pair, prepend=-1))] = -1
        lo = np.maximum(lo, before + 1)
        keep = hi >= lo
        return (pair[keep], lo[keep], hi[keep]), sup

    def batches(self) -> list[np.ndarray]:
        """Pair indices grouped so that each numpy pass stays within BATCH_NODES."""
        ok = np.flatnonzero(~self.zero & ~self.declined & (self.nodes <= self.max_nodes))
        cost = (self.nodes[ok] + 1) * self.law.pair_base.shape[1]
        out, start, total = [], 0, 0
        for i, c in enumerate(cost):
            if total and total + c > BATCH_NODES:
                out.append(ok[start:i])
                start, total = i, 0
            total += c
        if start < ok.size:
            out.append(ok[start:])
        zero = np.flatnonzero(self.zero)
        return ([zero] if zero.size else []) + out

    def evaluate(self, idx: np.ndarray) -> np.ndarray:
        if self.zero[idx].all():
            return np.zeros(idx.size)
        return self.upper(idx, *self.parseval(idx))

    def upper(self, idx: np.ndarray, value: np.ndarray, err: np.ndarray) -> np.ndarray:
        """The certified upper bound on delta for pairs ``idx`` from their ``parseval``."""
        upper = value + err
        log_delta = self.log_scale[idx] + self.log_err[idx] + np.log(np.where(upper > 0, upper, np.nan))
        log_delta += np.log(self.law.step[self.row[idx]]) - np.log(self.n[idx].astype(float))
        with np.errstate(over="ignore"):
            # never 0 for a positive expectation: an underflow is replaced by the smallest float
            return np.where(self.zero[idx], 0.0, np.maximum(np.exp(log_delta) * (1 + 1e-9), TINY))

    def parseval(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """T of step 3 for pairs ``idx`` (summed over the live nodes) and a bound on its error,
        floating point (step 5) plus dropped nodes (step 4): the exact K-periodised expectation
        lies within T +- error."""
        law = self.law
        pair, lo, hi = self.ranges
        first, last = np.searchsorted(pair, idx), np.searchsorted(pair, idx, side="right")
        ranges = runs(first, last - first)
        length = hi[ranges] - lo[ranges] + 1
        row = np.repeat(np.repeat(np.arange(idx.size), last - first), length)
        k = runs(lo[ranges], length)
        # per-pair quantities first, then spread over that pair's nodes
        pr = self.row[idx]
        period_p = self.period[idx]
        period = period_p[row]
        periodf = period.astype(float)
        sin_t, cos_t, half_sin2 = _node_trig(period_p, row, k)
        re, im, psi_err = self._psi(pr, period_p, row, k, cos_t, sin_t)
        n_p = self.n[idx]
        n = n_p.astype(float)[row]
        abs_psi = np.maximum(np.hypot(re, im), 1e-300)
        log_abs, arg = np.log(abs_psi), np.arctan2(im, re)
        lam_p = law.lam[pr]
        decay = np.exp(-lam_p)[row]
        a0 = self.a0[idx][row]
        drift = ((n_p * law.centre[pr].astype(np.int64) - self.first[idx]) % period_p)[row]
        # Ghat = e^(-lambda a0) N / w^2 with N = a0 + (1 - a0) z, w = 1 - z (w = w_re + i w_im, the
        # real part by expm1 and sin^2: no cancellation near theta = 0), in real arithmetic as
        # N conj(w^2) / |w|^4: a dozen roundings, each within a few U of |N| |w|^2 (inside the
        # 32 U below; the complex operations cost 4 times as much).  N itself can cancel (at
        # theta = pi when a0 = (1 - a0) e^-lambda): its absolute error, <= 3 U (a0 + (1 - a0)
        # e^-lambda) <= 3 U, costs each term at most 4 U (|psi|^n / K) e^(-lambda a0) / |w|^2,
        # and |w| >= 1 - e^-lambda, sum_k weight |psi|^n / K <= 1.01 (the weights sum to K, and
        # |psi| <= sum w <= 1 + P U): added once per pair (``n_err``, 9 U e^(-lambda a0) /
        # (1 - e^-lambda)^2, twice that)
        w_re, w_im = -np.expm1(-lam_p)[row] + 2 * decay * half_sin2, decay * sin_t
        n_re, n_im = a0 + (1 - a0) * (decay * cos_t), -(1 - a0) * (decay * sin_t)
        sq_re, sq_im, w_abs2 = w_re * w_re - w_im * w_im, 2 * w_re * w_im, w_re * w_re + w_im * w_im
        ghat_scale = np.exp(-lam_p * self.a0[idx])  # e^(-lambda a0), per pair
        scale = ghat_scale[row] / (w_abs2 * w_abs2)
        ghat_re, ghat_im = (n_re * sq_re + n_im * sq_im) * scale, (n_im * sq_re - n_re * sq_im) * scale
        total_phase = n * arg + 2 * np.pi * ((k * drift) % period) / periodf
        size = np.exp(n * log_abs) / periodf  # |psi|^n / K
        real = size * (ghat_re * np.cos(total_phase) - ghat_im * np.sin(total_phase))
        weight = np.where((k == 0) | (2 * k == period), 1.0, 2.0)
        value = np.bincount(row, weight * real, idx.size)
        rel_err = (n * psi_err[row] / abs_psi + 4 * U * (n * np.abs(log_abs) + n * np.abs(arg) + 8.0)
                   + 16 * U / np.sqrt(w_abs2) + 32 * U)
        term_abs = size * np.hypot(ghat_re, ghat_im)
        n_err = 9 * U * ghat_scale / np.expm1(-lam_p) ** 2
        fp = FP_SAFETY * (np.bincount(row, weight * term_abs * rel_err, idx.size) + n_err)
        return value, fp + self._dropped(idx)

    def _psi(self, pr: np.ndarray, period_p: np.ndarray, row: np.ndarray, k: np.ndarray, cos_t: np.ndarray,
             sin_t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """psi (real, imaginary) at the nodes theta = 2 pi k / K of pairs ``row`` (law rows
        ``pr``, periods ``period_p``) and its error bound per pair.  A law row and period whose
        nodes cost more in the pair form than one FFT (``FFT_NS``) read them from its spectrum
        (``_Lattice.spectrum``: evaluations that sum most nodes of their period, e.g. the
        lattice-anchored laws); the others are summed in the law's form (``_Lattice._dense_form``).
        Pair form: phases from exact integers, (k x) mod K in int64 (k can be anywhere up to K / 2)."""
        re, im = np.empty(row.size), np.empty(row.size)
        psi_err = self.law.psi_err[pr]
        fft = self._by_fft(pr, period_p, row)
        if fft.any():
            on = fft[row]
            psi, psi_err[fft] = self._spectrum_nodes(pr, period_p, row[on], k[on], fft)
            re[on], im[on] = psi.real, psi.imag
        rest = np.flatnonzero(~fft[row])
        dense = self.law.dense_nodes(pr[row[rest]])
        if dense.any():
            at = rest[dense]
            psi = self.law.horner(pr[row[at]], cos_t[at], sin_t[at])
            re[at], im[at] = psi.real, psi.imag
        if not dense.all():
            at = rest[~dense]
            re[at], im[at], product = self._pair_psi(pr, period_p, row[at], k[at], cos_t[at], sin_t[at])
            if product:
                pairs = np.unique(row[at])
                psi_err[pairs] += PHASE_PRODUCT_ERR * np.sum(self.law.weights[pr[pairs]], axis=1) * (1 + 1e-9)
        return re, im, psi_err

    def _by_fft(self, pr: np.ndarray, period_p: np.ndarray, row: np.ndarray) -> np.ndarray:
        """Which pairs take psi from their (law row, period)'s spectrum: where the pair form's
        cost of all their nodes exceeds the FFT's."""
        nodes = np.bincount(row, minlength=pr.size)
        rows = self.law.lam.size
        keys, combo = np.unique(period_p * rows + pr, return_inverse=True)  # by period, then law row
        period = keys // rows
        pair_cost = PAIR_NS * self.law.pair_base.shape[1] * np.bincount(combo, nodes, keys.size)
        fft_cost = FFT_NS * period * np.log2(np.maximum(period, 2))
        # longer periods stay in the pair form, whose passes are bounded by BATCH_NODES (memory)
        return ((pair_cost > fft_cost) & (period <= limits.SPECTRUM_MAX_PERIOD))[combo]

    def _spectrum_nodes(self, pr: np.ndarray, period_p: np.ndarray, row: np.ndarray, k: np.ndarray,
                        fft: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """psi at the nodes (``row``, ``k``) of the pairs ``fft`` from one spectrum per (law row,
        period), those of one period in one FFT; and the error bound of each such pair."""
        rows = self.law.lam.size
        keys, combo = np.unique(period_p[fft] * rows + pr[fft], return_inverse=True)  # as in _by_fft
        law_row, period = keys % rows, keys // rows
        length = period // 2 + 1
        offset = np.cumsum(length) - length
        table, err = np.empty(int(length.sum()), dtype=complex), np.empty(keys.size)
        bounds = np.flatnonzero(np.diff(period, prepend=-1, append=-1))  # runs of one period (keys sorted)
        for run_first, run_last in zip(bounds[:-1], bounds[1:], strict=True):
            # at most SPECTRUM_CELLS (rows x period) per FFT call: the same spectra, bounded memory
            rows_per_call = max(1, limits.SPECTRUM_CELLS // int(period[run_first]))
            for first in range(run_first, run_last, rows_per_call):
                last = min(first + rows_per_call, run_last)
                psi, err[first:last] = self.law.spectrum(law_row[first:last], int(period[first]))
                table[offset[first] : offset[first] + psi.size] = psi.ravel()
        pair_combo = np.zeros(pr.size, dtype=np.int64)
        pair_combo[fft] = combo.ravel()
        return table[offset[pair_combo[row]] + k], err[combo.ravel()]

    def _pair_psi(self, pr: np.ndarray, period_p: np.ndarray, row: np.ndarray, k: np.ndarray, cos_t: np.ndarray,
                  sin_t: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """psi = sum_q e^(i phase_q) (a_q + b_q e^(i theta)) (pair form, see _Lattice), and whether it
        was summed by parts (``_psi_by_parts``, with ``phase_products``: PHASE_PRODUCT_ERR more error)."""
        law = self.law
        rel_p = np.mod((law.pair_base[pr] - law.centre[pr, None]).astype(np.int64), period_p[:, None])
        parts = _phase_parts(row, k) if self.phase_products else None
        if parts is not None:
            psi = _psi_by_parts(rel_p, period_p, law.pair_weights[pr], row, parts, cos_t + 1j * sin_t)
            return psi.real, psi.imag, True
        cos_p, sin_p = _direct_phases(rel_p, period_p, row, k)
        pair = law.pair_weights[pr][row]
        coef_re = pair[:, :, 0] + pair[:, :, 1] * cos_t[:, None]
        coef_im = pair[:, :, 1] * sin_t[:, None]
        re = np.einsum("ij,ij->i", coef_re, cos_p) - np.einsum("ij,ij->i", coef_im, sin_p)
        im = np.einsum("ij,ij->i", coef_re, sin_p) + np.einsum("ij,ij->i", coef_im, cos_p)
        return re, im, False

    def _dropped(self, idx: np.ndarray) -> np.ndarray:
        """sup |psi|^n over dropped nodes times (1/K) sum_k |Ghat_k| (Parseval bound)."""
        lam, period = self.law.lam[self.row[idx]], self.period[idx].astype(float)
        a0 = self.a0[idx]
        x = np.exp(-lam * period)
        c2 = (1 + x) / ((1 - x) * -np.expm1(-2 * lam))
        return np.exp(self.sup_log[idx] - lam * a0) * (a0 * np.sqrt(c2) + c2)


def _node_trig(period_p: np.ndarray, row: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, ...]:
    """sin theta, cos theta and sin(theta / 2)^2 at the nodes theta = 2 pi k / K (K of each
    node's pair, ``row``), read from one table per period where its nodes outnumber the table's
    K / 2 + 1 entries (the lattice-anchored laws sum every node), computed by the same float
    operations (the same numbers)."""
    periods, which = np.unique(period_p, return_inverse=True)
    node_period = which.ravel()[row]
    size = periods // 2 + 1
    tabled = np.bincount(node_period, minlength=periods.size) > size
    sizes = np.where(tabled, size, 0)
    offset = np.cumsum(sizes) - sizes
    use = tabled[node_period]
    parts = []
    for theta in (2 * np.pi * ramp(sizes) / np.repeat(periods.astype(float), sizes),
                  2 * np.pi * k[~use] / period_p[row[~use]].astype(float)):
        parts.append((np.sin(theta), np.cos(theta), np.sin(theta / 2) ** 2))
    at = offset[node_period[use]] + k[use]
    out = [np.empty(k.size) for _ in range(3)]
    for value, table, direct in zip(out, *parts, strict=True):
        value[use], value[~use] = table[at], direct
    return tuple(out)


def _merge_points(points: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same law with each lattice point once per row: ``probs`` (B, N, m) of equal points
    added (rows padded with zero-probability copies of their first point), and (m - 1) U per
    row, m the most points merged into one (the relative error of its float sum): atoms closer
    than a cell share points, e.g. 388 points -> about 50 for the Laplace law at eps0 = 1."""
    order = np.argsort(points, axis=1, kind="stable")
    x, p = np.take_along_axis(points, order, axis=1), np.take_along_axis(probs, order[..., None], axis=1)
    new = np.ones(x.shape, dtype=bool)
    new[:, 1:] = x[:, 1:] != x[:, :-1]
    group = np.cumsum(new, axis=1) - 1
    rows = np.broadcast_to(np.arange(x.shape[0])[:, None], x.shape)
    size = int(group[:, -1].max()) + 1
    merged_p = np.zeros((x.shape[0], size, p.shape[2]))
    np.add.at(merged_p, (rows, group), p)
    merged_x = np.repeat(x[:, :1], size, axis=1)
    merged_x[rows[new], group[new]] = x[new]
    start = np.flatnonzero(new.ravel())
    runs = np.diff(np.append(start, new.size))  # points per merged point, row-major
    most = np.zeros(x.shape[0], dtype=np.int64)
    np.maximum.at(most, start // x.shape[1], runs)
    return merged_x, merged_p, (most - 1) * U


def _phase_parts(row: np.ndarray, k: np.ndarray) -> tuple[int, int, np.ndarray, ...] | None:
    """k = h + l with l = k mod s, s a power of two near the square root of the nodes per pair:
    (s, span, the distinct (pair, h) as pair * span + h, each node's index among them, the same for
    (pair, l)), or None where the nodes do not come in runs long enough for ``_psi_by_parts`` to pay
    (more than a quarter as many parts as nodes, or a grid of parts twice the nodes)."""
    if row.size == 0:
        return None
    per_pair = row.size / np.unique(row).size
    split = 2 ** int(np.clip(np.round(np.log2(per_pair) / 2), 2, 10))
    low = k % split
    span = int(k.max()) - int(k.max()) % split + 1
    high_key, high_at = np.unique(row * span + (k - low), return_inverse=True)  # span <= K / 2 + 1: exact
    low_key, low_at = np.unique(row * split + low, return_inverse=True)
    pairs = int(row.max()) + 1
    grid = np.bincount(high_key // span, minlength=pairs) @ np.bincount(low_key // split, minlength=pairs)
    if 4 * (high_key.size + low_key.size) > row.size or grid > 2 * row.size:
        return None
    return split, span, high_key, high_at.ravel(), low_key, low_at.ravel()


def _psi_by_parts(rel_p: np.ndarray, period_p: np.ndarray, weights: np.ndarray, row: np.ndarray,
                  parts: tuple[int, int, np.ndarray, ...], z: np.ndarray) -> np.ndarray:
    """The pair form's psi at the nodes (pair ``row``, k = h + l: ``_phase_parts``), z = e^(i theta)
    per node, as A + z B with A = sum_q a_q e^(i phase_q(h)) e^(i phase_q(l)) and B the same with b_q:
    e^(i phase(k)) = e^(i phase(h)) e^(i phase(l)) exactly ((h x + l x) mod K = (k x) mod K), each part's
    phase computed directly once per distinct (pair, part), and per pair A and B for every (h, l) of its
    parts by one product [H a; H b] L^T (no cosine, sine or product per node and atom).

    Error, per unit weight, beyond the direct pair form's (``psi_err``): the two parts' phases err by
    eps_d <= 2.36 U 2 pi + 2^0.5 U <= 16.3 U each (the angle's three roundings, then cosine and sine
    within an ulp: |e^(ia) - e^(ib)| <= |a - b|), their product by 2 eps_d + eps_d^2, 16.3 U more than
    one direct phase; the roundings (H scaled by a and b: U, the products with L: 2.24 U, z B: 2.24 U,
    A + z B: U; 6.6 U in all) at most 6.6 U more; the sums over q in any order stay inside the pair
    form's 4 Q U.  22.9 U in all: ``PHASE_PRODUCT_ERR`` (24 U)."""
    split, span, high_key, high_at, low_key, low_at = parts
    high_pair, low_pair = high_key // span, low_key // split
    cos_h, sin_h = _direct_phases(rel_p, period_p, high_pair, high_key % span)
    cos_l, sin_l = _direct_phases(rel_p, period_p, low_pair, low_key % split)
    high, low = cos_h + 1j * sin_h, cos_l + 1j * sin_l
    pairs = rel_p.shape[0]
    n_high, n_low = np.bincount(high_pair, minlength=pairs), np.bincount(low_pair, minlength=pairs)
    first_high, first_low = np.cumsum(n_high) - n_high, np.cumsum(n_low) - n_low
    size = n_high * n_low
    offset = np.cumsum(size) - size
    a_part, b_part = np.empty(int(size.sum()), dtype=complex), np.empty(int(size.sum()), dtype=complex)
    for p in np.flatnonzero(size).tolist():
        h, lows = high[first_high[p] : first_high[p] + n_high[p]], low[first_low[p] : first_low[p] + n_low[p]]
        # numpy's own loops: a BLAS product would start threads, which contend with the build's processes
        sums = np.einsum("hq,lq->hl", np.concatenate([h * weights[p, :, 0], h * weights[p, :, 1]]), lows)
        a_part[offset[p] : offset[p] + size[p]] = sums[: n_high[p]].ravel()
        b_part[offset[p] : offset[p] + size[p]] = sums[n_high[p] :].ravel()
    at = offset[row] + (high_at - first_high[row]) * n_low[row] + (low_at - first_low[row])
    return a_part[at] + z * b_part[at]


def _direct_phases(rel_p: np.ndarray, period_p: np.ndarray, row: np.ndarray, k: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi ((k x) mod K) / K from exact integers ((k x) mod K in int64)."""
    phase = (2 * np.pi / period_p.astype(float))[row, None] * ((k[:, None] * rel_p[row]) % period_p[row, None])
    return np.cos(phase), np.sin(phase)


def ramp(counts: np.ndarray) -> np.ndarray:
    """0, 1, ..., c - 1 for each c of ``counts``, concatenated."""
    return runs(np.zeros_like(counts), counts)


def runs(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """s, s + 1, ..., s + c - 1 for each (s, c) of integer ``starts`` and ``counts``, concatenated
    (``np.repeat(starts, counts) + ramp(counts)`` with one repeat)."""
    total = np.arange(int(np.sum(counts)))
    return total + np.repeat(starts - (np.cumsum(counts) - counts), counts)


def _smooth_periods(period: np.ndarray) -> np.ndarray:
    """Each period raised to the next 2-3-5-smooth integer up to MAX_PERIOD (any K at least the
    Chernoff size certifies, step 3): FFTs of such lengths are fast and evaluations of one law
    row at nearby n share one (``_Plan._psi``)."""
    values, inverse = np.unique(period, return_inverse=True)
    smooth = np.array([next_fast_len(int(v), real=True) if v <= MAX_PERIOD else int(v) for v in values],
                      dtype=np.int64)
    return smooth[inverse.ravel()]


def _split_shift(ratio: np.ndarray, ratio_err: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """c = n * ratio as an exact integer part and a fraction in [0, 1), pushed up by its error."""
    whole = np.floor(ratio)
    nf = n.astype(float)
    scaled = nf * (ratio - whole)
    scaled = scaled + nf * ratio_err + 2 * U * scaled
    carry = np.floor(scaled)
    return n * whole.astype(np.int64) + carry.astype(np.int64), scaled - carry


def _first_positive(int_part: np.ndarray, frac: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First lattice index s0 with s0 + c > 0 and a0 = s0 + c in (0, 1]."""
    on = frac <= 0
    return np.where(on, -int_part + 1, -int_part), np.where(on, 1.0, frac)


