"""The single randomizers: every entry of the registry (``tablegen.mechanisms``) but the compositions
of ``combined.py``, which name their bases here (so the compositions import their bases without a
circle through the registry that lists them).
"""

from __future__ import annotations

from tablegen.mechanisms.base import Mechanism
from tablegen.mechanisms.finite import FINITE
from tablegen.mechanisms.frequency import MECHANISMS as FREQUENCY_ORACLES
from tablegen.mechanisms.generic import GENERIC
from tablegen.mechanisms.laplace import LAPLACE
from tablegen.validate import unknown_name

BASES: dict[str, Mechanism] = {m.name: m for m in [GENERIC, *FREQUENCY_ORACLES, LAPLACE, FINITE]}


def base_mechanism(name: str, kind: str = "mechanism") -> Mechanism:
    """The single randomizer called ``name``, in any case; ValueError naming ``kind`` and the known
    names, the closest suggested, otherwise."""
    lower = name.lower() if isinstance(name, str) else name
    try:
        return BASES[lower]
    except (KeyError, TypeError):
        raise unknown_name(kind, name, BASES) from None
