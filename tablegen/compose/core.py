"""Composition of shuffled rounds: one round's certified PLD (profile.py, pld.py), identical
rounds self-composed, different rounds on a common loss lattice (docs/composition.md steps 2-7)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tablegen import limits, validate
from tablegen.compose import pld
from tablegen.compose.profile import POINTS, TAIL, Vertices, envelope, sample, tail_edge

MAX_ROUNDS = 10**6
# a sequence with a Gaussian round: a lattice this much finer, and the round's profile also sampled at points / 2
# lattice points geometric near 0 (its e_hi, where delta <= 1e-30, is 47x its eps at delta 1e-6 at sigma 1, n 1e4:
# on 100 uniform points one round composed to 0.0724 against the engine's 0.0602, now 0.0608; 100 rounds 0.863 ->
# 0.707, about 1.2x the time)
GAUSSIAN_FINER = 16
MAX_LATTICE = 10**7  # lattice steps a round's losses may span on a given lattice (its dense pmf: 80 MB)
GAUSSIAN = "gaussian"  # bits plus N(0, sigma^2): no eps0, params {"sigma": sigma} (tablegen.engine.gaussian)


@dataclass(frozen=True)
class Round:
    """One kind of round: mechanism, eps0, n, the mechanism's parameters, how many times, and the
    probability q that each user takes part (Poisson sampling; 1: every user, docs/composition.md).
    A Gaussian round (``Round.gaussian``) has no eps0 (None) and its noise in ``params["sigma"]``."""

    mechanism: str
    eps0: float | None
    n: int
    params: dict[str, Any] = field(default_factory=dict)
    times: int = 1
    sample_rate: float = 1.0

    @classmethod
    def gaussian(cls, sigma: float, n: int, times: int = 1) -> Round:
        """``times`` rounds of the shuffled Gaussian on bits: each of n users reports its bit plus N(0, sigma^2)."""
        return cls(GAUSSIAN, None, n, {"sigma": sigma}, times)

    def key(self) -> str:
        return json.dumps([self.mechanism, self.eps0, self.n, self.params, self.sample_rate], sort_keys=True,
                          default=str)

    def profile(self, eps: np.ndarray) -> np.ndarray:
        """Certified delta at each eps >= 0, for both orders of the pair (profile.py's input)."""
        if self.mechanism == GAUSSIAN:  # symmetric: y -> 1 - y exchanges the pair (tablegen.engine.gaussian)
            from tablegen.engine import gaussian

            return gaussian.delta_curve(self.params["sigma"], self.n, eps, smallest=TAIL * 1e-5)
        from tablegen.engine import delta_curve
        from tablegen.mechanisms import get_mechanism
        from tablegen.mechanisms.subsample import subsampled

        mechanism = subsampled(get_mechanism(self.mechanism), self.sample_rate)  # itself at q = 1
        return delta_curve(mechanism, eps0=self.eps0, n=self.n, eps=eps, **self.params)

    def top(self) -> float:
        """An eps whose certified delta is <= profile.TAIL, where the tail search starts: eps0 for an
        eps0-LDP round (delta(eps0) = 0), and for the Gaussian the eps where the single-user bound E[G_+],
        valid for every n, is <= TAIL."""
        if self.mechanism == GAUSSIAN:
            from tablegen.engine import gaussian

            return gaussian.single_user_eps(self.params["sigma"], TAIL)
        assert self.eps0 is not None  # _checked
        return self.eps0


@dataclass(frozen=True)
class Composition:
    """Certified composed eps at delta for that many rounds, and the floating-point bound on delta
    that was set aside before reading eps (pld.delta_slack)."""

    eps: float
    delta: float
    rounds: int
    fp_delta_bound: float


def checked_rounds(rounds: Any) -> int:
    return validate.integer_at_least("rounds", rounds, 1, MAX_ROUNDS)


def eps(mechanism: str, *, eps0: float | None = None, n: int, rounds: int, delta: float, points: int = POINTS,
        sample_rate: float = 1.0, **params: Any) -> Composition:
    """Certified eps of ``rounds`` identical shuffled rounds at total ``delta``, each user taking
    part in each round with probability ``sample_rate`` (the Gaussian: no eps0, ``sigma=`` in params)."""
    return eps_sequence([Round(mechanism, eps0, n, params, checked_rounds(rounds), sample_rate)], delta=delta,
                        points=points)


def eps_sequence(rounds: Sequence[Round], *, delta: float, points: int = POINTS) -> Composition:
    """Certified eps of a sequence of rounds (different mechanisms, eps0, n) at total ``delta``."""
    delta = validate.open_unit("delta", delta)
    total, composite = compose_rounds(rounds, points)
    return _read(composite, total, delta)


def gaussian_eps(*, sigma: float, n: int, rounds: int, delta: float, points: int = POINTS) -> Composition:
    """Certified eps of ``rounds`` identical rounds of the shuffled Gaussian on bits (noise sd ``sigma``):
    ``eps`` of ``Round.gaussian(sigma, n, rounds)``."""
    return eps(GAUSSIAN, n=n, rounds=rounds, delta=delta, points=points, sigma=sigma)


def eps_from_round(single: pld.Composite, *, rounds: int, delta: float) -> Composition:
    """Certified eps of ``rounds`` identical rounds from one round's PLD (``one_round``): the value
    ``eps`` gives for the same round, without sampling its profile again (a cached round answers
    any number of rounds in milliseconds)."""
    rounds, delta = checked_rounds(rounds), validate.open_unit("delta", delta)
    return _read(pld.self_composed(single, rounds), rounds, delta)


def _read(composite: pld.Composite, total: int, delta: float) -> Composition:
    value = pld.eps_for_delta(composite, delta)
    if not math.isfinite(value):
        raise ValueError(f"delta={delta!r} is too small to certify for {total} rounds: the composed "
                         f"infinity mass and floating-point bound are {pld.delta_slack(composite):.3g}")
    return Composition(value, delta, total, pld.delta_slack(composite))


def compose_rounds(rounds: Sequence[Round], points: int = POINTS) -> tuple[int, pld.Composite]:
    """(number of rounds, composed PLD) of a sequence, identical rounds grouped and self-composed."""
    groups: dict[str, Round] = {}
    counts: dict[str, int] = {}
    for r in _checked(rounds):
        groups.setdefault(r.key(), r)
        counts[r.key()] = counts.get(r.key(), 0) + r.times
    edges = {key: tail_edge(r.profile, r.top()) for key, r in groups.items()}
    gaussian = [r.mechanism == GAUSSIAN for r in groups.values()]
    finer = GAUSSIAN_FINER if any(gaussian) else 1
    discretization = min(edges.values()) / validate.integer_at_least("points", points, 2, 10**5) / finer
    hulls = {key: envelope(*sample(r.profile, edges[key], discretization, points, points // 2 if near else 0),
                           discretization)
             for (key, r), near in zip(groups.items(), gaussian, strict=True)}
    result = None
    for key, v in zip(hulls, coarsest(list(hulls.values())), strict=True):
        group = pld.self_composed(pld.connect_dots(v), counts[key])
        result = group if result is None else pld.composed(result, group)
    assert result is not None
    return sum(counts.values()), result


def coarsest(hulls: list[Vertices]) -> list[Vertices]:
    """The same vertices on the coarsest common lattice (the gcd of all vertex indices): exact,
    and fewer lattice cells make the FFTs shorter and their floating-point bound smaller."""
    g = int(np.gcd.reduce(np.concatenate([v.index for v in hulls]))) or 1
    return [Vertices(v.index // g, v.delta, v.discretization * g) for v in hulls]


def _checked(rounds: Sequence[Round]) -> list[Round]:
    if not rounds:
        raise ValueError("rounds must list at least one round")
    out = []
    for r in rounds:
        times = validate.integer_at_least("times", r.times, 1, MAX_ROUNDS)
        if r.mechanism == GAUSSIAN:
            out.append(Round(GAUSSIAN, None, limits.checked_n(r.n), _gaussian_params(r), times))
            continue
        if r.eps0 is None:
            raise ValueError(f"a {r.mechanism!r} round needs eps0, the local privacy parameter "
                             f"({limits.EPS0_MIN_TEXT})")
        e0 = limits.minimum_eps0(r.eps0)
        users = validate.integer_at_least("n", r.n, 1)
        out.append(Round(r.mechanism, e0, users, dict(r.params), times, validate.rate("sample_rate", r.sample_rate)))
    if sum(r.times for r in out) > MAX_ROUNDS:
        raise ValueError(f"rounds must be an integer in [1, {MAX_ROUNDS}] in all, got {sum(r.times for r in out)}")
    return out


def _gaussian_params(r: Round) -> dict[str, float]:
    """A Gaussian round's params, {"sigma": sigma} with sigma in the engine's range (``inputs`` may be
    "unit" or "bits": one analysis answers both, lookup/answer/gaussian.py); ValueError naming what it
    may not have."""
    from lookup.answer.gaussian import checked_inputs
    from tablegen.mechanisms import gaussian as law

    why = "its privacy comes from sigma, the noise's standard deviation"
    if r.eps0 is not None:
        raise ValueError(f"a gaussian round takes no eps0 ({why}), got eps0={r.eps0!r}")
    if r.sample_rate != 1:
        raise ValueError(f"a gaussian round takes no sample_rate (subsampled Gaussian rounds are not certified), "
                         f"got sample_rate={r.sample_rate!r}")
    others = sorted(set(r.params) - {"sigma", "inputs"})
    if others:
        raise ValueError(f"a gaussian round takes no {others[0]} ({why}); its parameters are sigma and inputs")
    checked_inputs(r.params.get("inputs"))
    if "sigma" not in r.params:
        raise ValueError("a gaussian round needs sigma, the noise's standard deviation")
    return {"sigma": law.check_sigma(r.params["sigma"])}


def eps_from_points(eps_points: np.ndarray, upper: np.ndarray, *, rounds: int, delta: float,
                    discretization: float) -> Composition:
    """Certified eps of ``rounds`` identical rounds whose profile is known only at some points
    (delta(e_j) <= upper_j for both orders, e.g. a table's curve): each e_j is rounded UP to the
    discretization (the profile is non-increasing, so the point stays an upper bound)."""
    rounds, delta = checked_rounds(rounds), validate.open_unit("delta", delta)
    index = np.ceil(np.asarray(eps_points, dtype=float) / discretization * (1 + 1e-12)).astype(np.int64)
    hull = coarsest([envelope(index, upper, discretization)])[0]
    composite = pld.self_composed(pld.connect_dots(hull), rounds)
    return Composition(pld.eps_for_delta(composite, delta), delta, rounds, pld.delta_slack(composite))


def one_round(mechanism: str, *, eps0: float | None = None, n: int, points: int = POINTS, sample_rate: float = 1.0,
              **params: Any) -> pld.Composite:
    """The certified PLD of one round (to be self-composed any number of times)."""
    return compose_rounds([Round(mechanism, eps0, n, params, sample_rate=sample_rate)], points)[1]


def lattice_round(mechanism: str, *, eps0: float | None = None, n: int, discretization: float, points: int = POINTS,
                  sample_rate: float = 1.0, **params: Any) -> pld.Composite:
    """The certified PLD of one round on a given lattice (another library's discretization): the
    profile sampled at about ``points`` multiples of ``discretization`` up to e_hi, as in
    ``compose_rounds`` (which picks its lattice itself)."""
    r = _checked([Round(mechanism, eps0, n, params, sample_rate=sample_rate)])[0]
    return _on_lattice(r.profile, r.top(), discretization, points)


def _on_lattice(profile: Any, top: float, discretization: float, points: int) -> pld.Composite:
    """A round's PLD from its certified ``profile`` on the lattice ``discretization``, cut where the profile
    is below TAIL (searched down from ``top``, whose delta is below it)."""
    discretization = validate.positive_finite("value_discretization_interval", discretization)
    e_hi = tail_edge(profile, top)
    if e_hi / discretization > MAX_LATTICE:  # the dense pmf and every FFT would hold that many values
        raise ValueError(f"value_discretization_interval={discretization!r} is too fine: the round's losses span "
                         f"[0, {e_hi:.4g}], more than {MAX_LATTICE:.0e} steps; take it >= {e_hi / MAX_LATTICE:.2g}")
    points = validate.integer_at_least("points", points, 2, 10**5)
    return pld.connect_dots(envelope(*sample(profile, e_hi, discretization, points), discretization))
