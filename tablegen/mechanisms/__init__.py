"""The registry of mechanisms: each one a ``Mechanism`` (laws of G as data).

Adding a randomizer is one entry: a ``Mechanism`` with its upper decompositions (and lower-bound
pairs) as functions of eps0, listed in ``_ALL`` below.
"""

from __future__ import annotations

from tablegen.mechanisms.base import Mechanism, Param
from tablegen.mechanisms.composition import JOINT, PARALLEL
from tablegen.mechanisms.finite import FINITE
from tablegen.mechanisms.frequency import MECHANISMS as FREQUENCY_ORACLES
from tablegen.mechanisms.generic import GENERIC
from tablegen.mechanisms.laplace import LAPLACE

_ALL = [GENERIC, *FREQUENCY_ORACLES, LAPLACE, FINITE, JOINT, PARALLEL]
MECHANISMS: dict[str, Mechanism] = {m.name: m for m in _ALL}


def get_mechanism(name: str) -> Mechanism:
    """The mechanism called ``name``; ValueError listing the known names otherwise."""
    try:
        return MECHANISMS[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(MECHANISMS) + ["generic-closed-form"])
        raise ValueError(f"unknown mechanism={name!r}; known mechanisms: {known}") from None


__all__ = ["MECHANISMS", "Mechanism", "Param", "get_mechanism"]
