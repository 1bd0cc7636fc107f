"""What a mechanism is: a name, its parameters, and its decompositions as functions of eps0.

``upper(eps0, **params)`` returns the decompositions whose bounds certify the mechanism
(the answer is the largest over the list, e.g. over input pairs of a finite randomizer);
``lower(eps0, **params)`` returns decompositions of concrete neighbouring pairs
(arXiv:2504.07414 Theorem 5), each an exact divergence, so the largest is a lower bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tablegen.decomposition import Decomposition


@dataclass(frozen=True)
class Param:
    """A mechanism parameter: default (None = absent), validator and help text."""

    default: Any
    check: Callable[[str, Any], Any]
    help: str
    required: bool = False
    eps0_default: bool = False  # the default depends on eps0 (so the randomizer changes with eps0)


@dataclass(frozen=True)
class Mechanism:
    """A randomizer family as data: decompositions of G for upper and lower bounds."""

    name: str
    summary: str
    reference: str
    upper: Callable[..., list[Decomposition]]
    lower: Callable[..., list[Decomposition]] | None
    params: dict[str, Param] = field(default_factory=dict)
    extra_delta: Callable[..., float] | None = None  # (eps, eps0, n, **params) -> added delta
    monotone_in_eps0: Callable[[dict[str, Any]], bool] | None = None  # overrides the rule below

    def eps0_monotone(self, params: dict[str, Any]) -> bool:
        """Whether rows with these parameters are one randomizer family in eps0 (a smaller eps0
        is a post-processing of a larger one, docs/lookup.md); False when a parameter's
        default depends on eps0 (OLH's g), so neighbouring eps0 are different randomizers.
        Compositions decide through ``monotone_in_eps0`` (from their bases)."""
        if self.monotone_in_eps0 is not None:
            return self.monotone_in_eps0(params)
        return not any(spec.eps0_default and params.get(name) is None for name, spec in self.params.items())

    def resolve(self, params: dict[str, Any]) -> dict[str, Any]:
        """Validate ``params`` against the declared ones, filling defaults."""
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            allowed = ", ".join(sorted(self.params)) or "none"
            raise ValueError(f"mechanism {self.name!r} has no parameter {unknown[0]!r} (allowed: {allowed})")
        out = {}
        for name, spec in self.params.items():
            value = params.get(name)
            if value is None:
                if spec.required:
                    raise ValueError(f"mechanism {self.name!r} needs parameter {name!r}: {spec.help}")
                out[name] = spec.default
            else:
                out[name] = spec.check(name, value)
        return out
