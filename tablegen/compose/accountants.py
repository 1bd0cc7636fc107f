"""Shuffled rounds inside Google's dp-accounting, beside DP-SGD and the rest.

``round_pld`` exports one round's certified privacy-loss distribution as dp-accounting's
``PrivacyLossDistribution``; ``ShuffledRoundEvent`` is a ``DpEvent`` for one round, which
``ShufflePLDAccountant`` and ``ShuffleRDPAccountant`` take wherever their parents take an event.
A round is certified for substitution neighbours (``REPLACE_SPECIAL``, the default here, or
``REPLACE_ONE``) and refused under ``ADD_OR_REMOVE_ONE``.  The neighbouring relation and what the
exported objects guarantee: docs/accounting.md; the certified profile: docs/composition.md.
"""

from __future__ import annotations

import ast
import math
from typing import Any

import attr
from dp_accounting import dp_event, privacy_accountant
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution
from dp_accounting.rdp import rdp_privacy_accountant

from tablegen.compose import core, pld
from tablegen.compose.profile import POINTS

NeighboringRelation = privacy_accountant.NeighboringRelation
ErrorDetails = privacy_accountant.PrivacyAccountant.CompositionErrorDetails
SUBSTITUTION = (NeighboringRelation.REPLACE_ONE, NeighboringRelation.REPLACE_SPECIAL)
DEFAULT_RELATION = NeighboringRelation.REPLACE_SPECIAL  # a substitution; DP-SGD's events accounted as under add/remove
DISCRETIZATION = 1e-4  # dp-accounting's default value_discretization_interval
SAMPLING = (dp_event.PoissonSampledDpEvent, dp_event.SampledWithReplacementDpEvent,
            dp_event.SampledWithoutReplacementDpEvent)


def round_pld(mechanism: str, *, eps0: float | None = None, n: int, sample_rate: float = 1.0,
              value_discretization_interval: float = DISCRETIZATION, points: int = POINTS,
              **params: Any) -> PrivacyLossDistribution:
    """The certified PLD of one shuffled round (each user taking part with probability
    ``sample_rate``) as a pessimistic dp-accounting ``PrivacyLossDistribution``, symmetric (one
    PLD bounds both orders of every pair: dp-accounting's REMOVE and ADD directions alike), on the
    lattice ``value_discretization_interval`` so that it composes with dp-accounting's PLDs:
    ``round_pld(...).self_compose(365).compose(from_gaussian_mechanism(...))``.  The shuffled Gaussian:
    ``round_pld("gaussian", n=n, sigma=sigma)`` (no eps0; ``gaussian_round_pld``)."""
    composite = core.lattice_round(mechanism, eps0=eps0, n=n, discretization=value_discretization_interval,
                                   points=points, sample_rate=sample_rate, **params)
    return _lift(PrivacyLossDistribution(composite.pmf), value_discretization_interval)


def gaussian_round_pld(*, sigma: float, n: int, value_discretization_interval: float = DISCRETIZATION,
                       points: int = POINTS) -> PrivacyLossDistribution:
    """``round_pld`` for one round of the shuffled Gaussian on bits (each of n users reports its bit plus
    N(0, sigma^2); tablegen.engine.gaussian): its certified profile, symmetric in the pair's order."""
    return round_pld(core.GAUSSIAN, n=n, value_discretization_interval=value_discretization_interval, points=points,
                     sigma=sigma)


def _lift(loss: PrivacyLossDistribution, discretization: float) -> PrivacyLossDistribution:
    """``loss`` mixed with weight eta into a point mass at +infinity: delta becomes
    delta + eta (1 - delta).  With c = CURVE_ROUNDING and d0 the computed delta at eps = 0,
    eta >= c / (1 - d0 - c) gives eta (1 - delta) >= c (1 - eta) at every eps >= 0 (where the exact
    delta <= d0 + c): the lifted curve is above the exact one there despite the rounding.  Twice
    that is taken: the division and subtraction round too."""
    c = pld.CURVE_ROUNDING
    gap = 1.0 - float(loss.get_delta_for_epsilon(0.0)) - c
    eta = 1.0 if gap <= c else min(1.0, 2 * c / gap)
    infinite = PrivacyLossDistribution.create_from_rounded_probability({0: 0.0}, 1.0, discretization)
    return loss.compute_mixture(infinite, 1.0 - eta)


def _joined(name: Any) -> Any:
    """The mechanism name back from ``DpEvent.from_named_tuple``, which turns "krr" into
    "['k', 'r', 'r']" (see ``to_named_tuple``); any other value unchanged."""
    if isinstance(name, str) and name.startswith("[") and name.endswith("]"):
        try:
            chars = ast.literal_eval(name)
        except (ValueError, SyntaxError):
            return name
        if isinstance(chars, list) and all(isinstance(c, str) and len(c) == 1 for c in chars):
            return "".join(chars)
    return name


def _params_dict(params: Any) -> dict[str, Any]:
    """``params`` as a dict (None: no parameters); ValueError naming ``params`` where it is not a dict."""
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"params must be a dict of the mechanism's parameters (e.g. {{'k': 10}}) or None, "
                         f"got params={params!r}")
    return dict(params or {})


def _with_keywords(params: Any, keywords: dict[str, Any]) -> Any:
    """``params`` with the mechanism parameters given as keywords (``k=10``) added; unchanged
    without any; ValueError where a parameter is given both ways."""
    if not keywords:
        return params
    given = _params_dict(params)
    both = sorted(set(given) & set(keywords))
    if both:
        raise ValueError(f"mechanism parameter {both[0]!r} given twice: in params and as a keyword")
    return {**given, **keywords}


@attr.s(frozen=True, slots=True, auto_attribs=True, init=False)
class ShuffledRoundEvent(dp_event.DpEvent):
    """One shuffled round: every user (each with probability ``sample_rate``, Poisson) sends one
    report of the eps0-LDP randomizer ``mechanism``, its parameters as keywords the way
    ``round_pld`` takes them (``ShuffledRoundEvent("krr", 1.0, 10**6, k=10)``) or as the dict
    ``params`` (``{"k": 10}``, kept in ``params`` either way); the n reports (n public) are
    shuffled.  Certified for substitution neighbours (REPLACE_ONE, REPLACE_SPECIAL) by
    ``tablegen.engine`` (arXiv:2504.07414; docs/engine.md)."""

    mechanism: str = attr.ib(converter=_joined)
    eps0: float
    n: int
    params: dict[str, Any] | None = None
    sample_rate: float = 1.0

    def __init__(self, mechanism: str, eps0: float, n: int, params: dict[str, Any] | None = None,
                 sample_rate: float = 1.0, **mechanism_params: Any) -> None:
        self.__attrs_init__(mechanism, eps0, n, _with_keywords(params, mechanism_params), sample_rate)

    def parameters(self) -> dict[str, Any]:
        """``params`` (None: no parameters); ValueError naming ``params`` where it is not a dict."""
        return _params_dict(self.params)

    def kwargs(self) -> dict[str, Any]:
        return {"eps0": self.eps0, "n": self.n, "sample_rate": self.sample_rate, **self.parameters()}

    def to_named_tuple(self) -> Any:
        """dp-accounting's NamedTuple form, the mechanism name kept whole (dp-accounting 0.6 maps
        every sequence field element-wise, a string too, and writes str(list of characters))."""
        return super().to_named_tuple()._replace(mechanism=self.mechanism)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ShuffledGaussianRoundEvent(dp_event.DpEvent):
    """One shuffled round of the Gaussian on bits: each of the n users (n public) reports its bit plus
    N(0, sigma^2), and the reports are shuffled (``gaussian_round_pld``; docs/soundness.md, "Shuffled
    Gaussian on bits").  Certified for substitution neighbours; ``ShufflePLDAccountant`` only (no Rényi
    bound for it yet)."""

    sigma: float
    n: int


ROUND_EVENTS = (ShuffledRoundEvent, ShuffledGaussianRoundEvent)


def _refusal(accountant: Any, event: dp_event.DpEvent) -> ErrorDetails | None:
    """Why ``event`` (a shuffled round, or one inside a sampling event) cannot be accounted here."""
    if isinstance(event, SAMPLING) and _holds_round(event.event):
        return ErrorDetails(event, f"a ShuffledRoundEvent inside {type(event).__name__} cannot be expressed in "
                                   "dp-accounting (its sampled events take Gaussian or Laplace only); give the rate "
                                   "to the round itself: ShuffledRoundEvent(..., sample_rate=q) (Poisson sampling "
                                   "of users, certified)")
    if isinstance(event, ShuffledGaussianRoundEvent) and isinstance(accountant, ShuffleRDPAccountant):
        return ErrorDetails(event, "a ShuffledGaussianRoundEvent has no certified Rényi bound yet: use "
                                   "ShufflePLDAccountant")
    if isinstance(event, ROUND_EVENTS) and accountant.neighboring_relation not in SUBSTITUTION:
        return ErrorDetails(event, "a ShuffledRoundEvent is certified for substitution neighbours (n public), not "
                                   f"{accountant.neighboring_relation}: construct the accountant with "
                                   "neighboring_relation=NeighboringRelation.REPLACE_SPECIAL (a Poisson-sampled "
                                   "Gaussian is accounted as under add/remove) or REPLACE_ONE")
    return None


def _holds_round(event: dp_event.DpEvent) -> bool:
    if isinstance(event, ROUND_EVENTS):
        return True
    if isinstance(event, dp_event.ComposedDpEvent):
        return any(_holds_round(e) for e in event.events)
    return isinstance(event, (dp_event.SelfComposedDpEvent, *SAMPLING)) and _holds_round(event.event)


class _Rounds:
    """What both accountants add to their parent: ``ShuffledRoundEvent`` (its loss computed, and
    its input checked, in the parent's check pass, before dp-accounting's ledger records it) and
    the refusals of ``_refusal``; every other event goes to the parent."""

    _rounds: dict[str, Any]

    def _maybe_compose(self, event: dp_event.DpEvent, count: int, do_compose: bool) -> ErrorDetails | None:
        refusal = _refusal(self, event)
        if refusal is not None or not isinstance(event, ROUND_EVENTS):
            return refusal or super()._maybe_compose(event, count, do_compose)  # type: ignore[misc]
        key = repr(event)
        if key not in self._rounds:
            self._rounds[key] = self._round(event)
        if do_compose and count > 0:
            self._add(self._rounds[key], count)
        return None

    def _round(self, event: ShuffledRoundEvent) -> Any:
        raise NotImplementedError

    def _add(self, loss: Any, count: int) -> None:
        raise NotImplementedError


class ShufflePLDAccountant(_Rounds, pld_privacy_accountant.PLDAccountant):
    """dp-accounting's PLD accountant that also composes ``ShuffledRoundEvent`` (``round_pld`` on
    its lattice, self-composed ``count`` times); at eps < 0 each round's curve rounding
    (``pld.CURVE_ROUNDING``) is added to delta before eps is read (docs/accounting.md).  Its
    neighbouring relation defaults to ``REPLACE_SPECIAL``: a round is certified for the
    substitution of one user's data (its parent's default, ``ADD_OR_REMOVE_ONE``, refuses rounds)."""

    def __init__(self, neighboring_relation: NeighboringRelation = DEFAULT_RELATION,
                 value_discretization_interval: float = DISCRETIZATION) -> None:
        super().__init__(neighboring_relation, value_discretization_interval)
        self._shift = 0.0
        self._rounds = {}

    def _round(self, event: ShuffledRoundEvent | ShuffledGaussianRoundEvent) -> PrivacyLossDistribution:
        if isinstance(event, ShuffledGaussianRoundEvent):
            return gaussian_round_pld(sigma=event.sigma, n=event.n,
                                      value_discretization_interval=self._value_discretization_interval)
        return round_pld(event.mechanism, value_discretization_interval=self._value_discretization_interval,
                         **event.kwargs())

    def _add(self, loss: PrivacyLossDistribution, count: int) -> None:
        self._pld = self._pld.compose(loss.self_compose(count))
        self._shift += count * pld.CURVE_ROUNDING

    def get_epsilon(self, target_delta: float) -> float:
        if target_delta <= self._shift:
            return math.inf
        return super().get_epsilon(target_delta - self._shift)

    def get_delta(self, target_epsilon: float) -> float:
        return min(1.0, super().get_delta(target_epsilon) + self._shift)


class ShuffleRDPAccountant(_Rounds, rdp_privacy_accountant.RdpAccountant):
    """dp-accounting's RDP accountant that also composes ``ShuffledRoundEvent``: ``count`` times the
    round's certified Rényi divergences at the accountant's orders (``rdp_bounds``, both orders of
    every pair, docs/renyi.md).  Refuses (eps0, delta0)-LDP rounds, whose divergence can be infinite.
    Its neighbouring relation defaults to ``REPLACE_SPECIAL``, as ``ShufflePLDAccountant``'s."""

    def __init__(self, orders: Any = None, neighboring_relation: NeighboringRelation = DEFAULT_RELATION) -> None:
        super().__init__(orders, neighboring_relation)
        self._rounds = {}

    def _round(self, event: ShuffledRoundEvent) -> Any:
        return round_rdp(event, self._orders)

    def _add(self, loss: Any, count: int) -> None:
        self._rdp = self._rdp + count * loss


def round_rdp(event: ShuffledRoundEvent, orders: Any) -> Any:
    """Certified Rényi divergences of one round at ``orders`` (numpy array)."""
    import numpy as np

    from tablegen.engine.renyi import rdp_bounds
    from tablegen.mechanisms import get_mechanism
    from tablegen.mechanisms.subsample import subsampled

    mechanism: Any = event.mechanism
    if event.sample_rate != 1:
        mechanism = subsampled(get_mechanism(event.mechanism), event.sample_rate)
    bounds = rdp_bounds(mechanism, eps0=event.eps0, n=event.n, orders=list(orders), lower=False,
                        **event.parameters())
    return np.asarray(bounds.rdp)
