"""Many rounds: certified eps of T shuffled collections composed, and the budgets it allows.

    from tablegen import compose
    compose.eps("krr", eps0=1.0, n=10**6, rounds=365, delta=1e-8, k=10).eps
    compose.eps_sequence([compose.Round("krr", 1.0, 10**6, {"k": 10}, times=300),
                          compose.Round("generic", 2.0, 10**5, times=65)], delta=1e-8)
    compose.rounds_max("krr", eps0=1.0, n=10**6, eps=1.0, delta=1e-8, k=10)
    compose.eps0_max("krr", rounds=365, eps=1.0, n=10**6, delta=1e-8, k=10)
    compose.eps("krr", eps0=3.0, n=10**5, rounds=1000, delta=1e-5, k=10, sample_rate=0.01)  # Poisson rate q

Each round's certified privacy profile (``tablegen.engine.delta_curve``, an upper bound on
delta(eps) for both orders of the neighbouring pair) becomes a pessimistic connect-the-dots
privacy-loss distribution (``profile.py``, ``pld.py``); Google's dp-accounting composes them
(arXiv:2207.04380; arXiv:1906.03049 for PLD composition).  Every step is an upper bound, so the
composed eps is certified: never below the exact composed eps of the analysis.  Subsampled rounds
(each user taking part with probability ``sample_rate``) use the decompositions of
``tablegen/mechanisms/subsample.py``.  Derivation and figures: docs/composition.md.
``dp_accounting`` is the ``compose`` extra.

The same rounds inside dp-accounting's own accountants, beside DP-SGD and the rest (docs/accounting.md;
loaded on first use, ImportError naming the extra without it):

    loss = compose.round_pld("krr", eps0=1.0, n=10**6, k=10)      # a dp-accounting PrivacyLossDistribution
    acc = compose.ShufflePLDAccountant(NeighboringRelation.REPLACE_SPECIAL)   # or ShuffleRDPAccountant
    acc.compose(compose.ShuffledRoundEvent("krr", 1.0, 10**6, {"k": 10}), 365)
    acc.compose(PoissonSampledDpEvent(0.01, GaussianDpEvent(1.0)), 1000).get_epsilon(1e-8)
"""

from typing import Any

from tablegen.compose.budget import Budget, eps0_max, rounds_max
from tablegen.compose.core import (
    MAX_ROUNDS,
    Composition,
    Round,
    checked_rounds,
    eps,
    eps_from_points,
    eps_from_round,
    eps_sequence,
    one_round,
)

ACCOUNTING = ("ShufflePLDAccountant", "ShuffleRDPAccountant", "ShuffledRoundEvent", "round_pld")


def __getattr__(name: str) -> Any:
    """The dp-accounting names (``accountants.py`` subclasses dp-accounting), imported on first use."""
    if name in ACCOUNTING:
        from tablegen.compose import pld

        pld.pld_module()  # ImportError naming the compose extra
        from tablegen.compose import accountants

        return getattr(accountants, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ACCOUNTING is left out: ``from tablegen.compose import *`` works without dp-accounting
__all__ = ["MAX_ROUNDS", "Budget", "Composition", "Round", "checked_rounds", "eps", "eps0_max", "eps_from_points",
           "eps_from_round", "eps_sequence", "one_round", "rounds_max"]
