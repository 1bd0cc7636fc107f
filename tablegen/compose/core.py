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
from tablegen.compose.profile import POINTS, Vertices, envelope, sample, tail_edge

MAX_ROUNDS = 10**6
MAX_LATTICE = 10**7  # lattice steps a round's losses may span on a given lattice (its dense pmf: 80 MB)


@dataclass(frozen=True)
class Round:
    """One kind of round: mechanism, eps0, n, the mechanism's parameters, how many times, and the
    probability q that each user takes part (Poisson sampling; 1: every user, docs/composition.md)."""

    mechanism: str
    eps0: float
    n: int
    params: dict[str, Any] = field(default_factory=dict)
    times: int = 1
    sample_rate: float = 1.0

    def key(self) -> str:
        return json.dumps([self.mechanism, self.eps0, self.n, self.params, self.sample_rate], sort_keys=True,
                          default=str)

    def profile(self, eps: np.ndarray) -> np.ndarray:
        from tablegen.engine import delta_curve
        from tablegen.mechanisms import get_mechanism
        from tablegen.mechanisms.subsample import subsampled

        mechanism = subsampled(get_mechanism(self.mechanism), self.sample_rate)  # itself at q = 1
        return delta_curve(mechanism, eps0=self.eps0, n=self.n, eps=eps, **self.params)


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


def eps(mechanism: str, *, eps0: float, n: int, rounds: int, delta: float, points: int = POINTS,
        sample_rate: float = 1.0, **params: Any) -> Composition:
    """Certified eps of ``rounds`` identical shuffled rounds at total ``delta``, each user taking
    part in each round with probability ``sample_rate``."""
    return eps_sequence([Round(mechanism, eps0, n, params, checked_rounds(rounds), sample_rate)], delta=delta,
                        points=points)


def eps_sequence(rounds: Sequence[Round], *, delta: float, points: int = POINTS) -> Composition:
    """Certified eps of a sequence of rounds (different mechanisms, eps0, n) at total ``delta``."""
    delta = validate.open_unit("delta", delta)
    total, composite = compose_rounds(rounds, points)
    return _read(composite, total, delta)


def gaussian_eps(*, sigma: float, n: int, rounds: int, delta: float, points: int = POINTS) -> Composition:
    """Certified eps of ``rounds`` identical rounds of the shuffled Gaussian on bits (noise sd ``sigma``):
    its certified profile (``tablegen.engine.gaussian.delta_curve``, symmetric in the pair's order)
    made a PLD as any round's (profile.py; the top of the tail search is where the single-user bound,
    valid for every n, is below ``profile.TAIL``)."""
    rounds, delta = checked_rounds(rounds), validate.open_unit("delta", delta)
    points = validate.integer_at_least("points", points, 2, 10**5)
    profile, top = _gaussian_profile(sigma, n)
    e_hi = tail_edge(profile, top)
    hull = envelope(*sample(profile, e_hi, e_hi / points, points), e_hi / points)
    return _read(pld.self_composed(pld.connect_dots(hull), rounds), rounds, delta)


def _gaussian_profile(sigma: float, n: int) -> tuple[Any, float]:
    """(profile, top) of a round of the shuffled Gaussian: ``tablegen.engine.gaussian.delta_curve`` and the
    single-user bound's eps at TAIL (valid for every n), where the tail search starts."""
    from tablegen.compose.profile import TAIL
    from tablegen.engine import gaussian

    def profile(eps: np.ndarray) -> np.ndarray:
        return gaussian.delta_curve(sigma, n, eps)

    return profile, gaussian.single_user_eps(gaussian.law.check_sigma(sigma), TAIL)


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
    edges = {key: tail_edge(r.profile, r.eps0) for key, r in groups.items()}
    discretization = min(edges.values()) / validate.integer_at_least("points", points, 2, 10**5)
    hulls = {key: envelope(*sample(r.profile, edges[key], discretization, points), discretization)
             for key, r in groups.items()}
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
        e0 = limits.minimum_eps0(r.eps0)
        users = validate.integer_at_least("n", r.n, 1)
        times = validate.integer_at_least("times", r.times, 1, MAX_ROUNDS)
        out.append(Round(r.mechanism, e0, users, dict(r.params), times, validate.rate("sample_rate", r.sample_rate)))
    if sum(r.times for r in out) > MAX_ROUNDS:
        raise ValueError(f"rounds must be an integer in [1, {MAX_ROUNDS}] in all, got {sum(r.times for r in out)}")
    return out


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


def one_round(mechanism: str, *, eps0: float, n: int, points: int = POINTS, sample_rate: float = 1.0,
              **params: Any) -> pld.Composite:
    """The certified PLD of one round (to be self-composed any number of times)."""
    return compose_rounds([Round(mechanism, eps0, n, params, sample_rate=sample_rate)], points)[1]


def lattice_round(mechanism: str, *, eps0: float, n: int, discretization: float, points: int = POINTS,
                  sample_rate: float = 1.0, **params: Any) -> pld.Composite:
    """The certified PLD of one round on a given lattice (another library's discretization): the
    profile sampled at about ``points`` multiples of ``discretization`` up to e_hi, as in
    ``compose_rounds`` (which picks its lattice itself)."""
    r = _checked([Round(mechanism, eps0, n, params, sample_rate=sample_rate)])[0]
    return _on_lattice(r.profile, r.eps0, discretization, points)


def gaussian_lattice_round(*, sigma: float, n: int, discretization: float, points: int = POINTS) -> pld.Composite:
    """``lattice_round`` for one round of the shuffled Gaussian on bits (``gaussian_eps``'s profile)."""
    profile, top = _gaussian_profile(sigma, n)
    return _on_lattice(profile, top, discretization, points)


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
