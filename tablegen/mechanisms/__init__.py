"""The registry of mechanisms: each one a ``Mechanism`` (laws of G as data).

Adding a randomizer is one entry: a ``Mechanism`` with its upper decompositions (and lower-bound
pairs) as functions of eps0, listed in ``bases.py`` (a single randomizer, which compositions may
name as their base) or in ``_ALL`` below.
"""

from __future__ import annotations

from lookup.format import PROTOCOLS
from tablegen.mechanisms.base import Mechanism, Param
from tablegen.mechanisms.bases import BASES
from tablegen.mechanisms.combined import JOINT, PARALLEL
from tablegen.validate import unknown_name

_ALL = [*BASES.values(), JOINT, PARALLEL]
MECHANISMS: dict[str, Mechanism] = {m.name: m for m in _ALL}


def get_mechanism(name: str) -> Mechanism:
    """The mechanism called ``name``, in any case (``"kRR"`` is ``"krr"``, as ``lookup.answer.api.mechanism_name``
    reads it); ValueError suggesting the closest known name otherwise (the known names include the
    multi-message protocols, which have their own accounting)."""
    lower = name.lower() if isinstance(name, str) else name
    try:
        return MECHANISMS[lower]
    except (KeyError, TypeError):
        if lower in PROTOCOLS:
            raise ValueError(f"mechanism={name!r} is a multi-message protocol with noise parameter p, not an "
                             f"eps0-LDP randomizer: use `tablegen compute --mechanism {name} --p P` or "
                             f"`tablegen calibrate` / `lookup calibrate`") from None
        raise unknown_name("mechanism", name, [*MECHANISMS, "generic-closed-form", *PROTOCOLS]) from None


__all__ = ["MECHANISMS", "Mechanism", "Param", "get_mechanism"]
