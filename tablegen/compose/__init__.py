"""Many rounds: certified eps of T shuffled collections composed, and the budgets it allows.

    from tablegen import compose
    compose.eps("krr", eps0=1.0, n=10**6, rounds=365, delta=1e-8, k=10).eps

A round of the shuffled Gaussian is ``Round.gaussian(sigma, n)`` (or ``compose.eps("gaussian", sigma=...)``).
Also ``eps_sequence``, ``rounds_max``, ``eps0_max``, ``sigma_min`` (the Gaussian's noise for T rounds)
and, inside dp-accounting's accountants, ``round_pld``, ``ShuffledRoundEvent``, ``ShufflePLDAccountant``,
``ShuffleRDPAccountant`` (the ``compose`` extra).  Derivation, examples and figures: docs/composition.md
and docs/accounting.md.
"""

from typing import Any

from tablegen.compose.budget import Budget, Noise, eps0_max, rounds_max, sigma_min
from tablegen.compose.core import (
    MAX_ROUNDS,
    Composition,
    Round,
    checked_rounds,
    eps,
    eps_from_points,
    eps_from_round,
    eps_sequence,
    gaussian_eps,
    one_round,
)

ACCOUNTING = ("ShufflePLDAccountant", "ShuffleRDPAccountant", "ShuffledRoundEvent", "ShuffledGaussianRoundEvent",
              "round_pld", "gaussian_round_pld")


def __getattr__(name: str) -> Any:
    """The dp-accounting names (``accountants.py`` subclasses dp-accounting), imported on first use."""
    if name in ACCOUNTING:
        from tablegen.compose import pld

        pld.pld_module()  # ImportError naming the compose extra
        from tablegen.compose import accountants

        return getattr(accountants, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ACCOUNTING is left out: ``from tablegen.compose import *`` works without dp-accounting
__all__ = ["MAX_ROUNDS", "Budget", "Composition", "Noise", "Round", "checked_rounds", "eps", "eps0_max",
           "eps_from_points", "eps_from_round", "eps_sequence", "gaussian_eps", "one_round", "rounds_max", "sigma_min"]
