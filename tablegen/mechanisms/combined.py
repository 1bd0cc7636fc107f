"""Compositions of randomizers (arXiv:2504.07414 sections 6 and 7).

* ``joint``: each user applies ``parts`` randomizers of the ``base`` mechanism to ``parts``
  attributes, each with eps0 / parts (total eps0-LDP); the decomposition is the Cartesian
  product (section 6), for the upper bound and for the lower-bound pairs.
* ``parallel``: each user picks one of the ``bases`` with probability ``weights`` and applies it
  with the full eps0; the decomposition is the mixture (section 7).
"""

from __future__ import annotations

import itertools
from typing import Any

from tablegen import limits, validate
from tablegen.decomposition import MAX_COMPONENTS, Decomposition, joint, parallel
from tablegen.mechanisms.base import Mechanism, Param
from tablegen.mechanisms.bases import base_mechanism
from tablegen.mechanisms.frequency import categories

PAPER = "Su, Cheng, Wang, arXiv:2504.07414, sections 6 and 7"


def _base_name(name: str, value: object) -> str:
    return base_mechanism(str(value), f"mechanism in {name}").name


def _names(name: str, value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    if len(items) < 1:
        raise ValueError(f"{name} must list at least one mechanism")
    return tuple(_base_name(name, item.strip()) for item in items)


def _weights(name: str, value: object) -> tuple[float, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(validate.nonnegative_finite(name, w) for w in items)


MAX_PARTS = 32  # attributes of a joint composition (the product is built part by part)


def _parts(name: str, value: object) -> int:
    return validate.integer_at_least(name, value, 1, MAX_PARTS)


def _base_params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k in ("k", "g") and v is not None}


def _bases_monotone(params: dict[str, Any]) -> bool:
    """A joint or parallel composition is one family in eps0 when each base is: a product or a
    mixture of post-processings is a post-processing.  (OLH with its default g is not.)"""
    names = [params["base"]] if params.get("base") is not None else _names("bases", params.get("bases") or [])
    bases = [base_mechanism(str(name)) for name in names]
    return all(m.eps0_monotone({k: v for k, v in _base_params(params).items() if k in m.params}) for m in bases)


def _component(name: str, eps0: float, params: dict[str, Any], lower: bool) -> list[Decomposition]:
    mech = base_mechanism(name)
    kwargs = mech.resolve({k: v for k, v in _base_params(params).items() if k in mech.params})
    build = mech.lower if lower else mech.upper
    if build is None:
        raise ValueError(f"mechanism {name!r} has no lower bound")
    return build(eps0, **kwargs)


def _checked_parts(eps0: float, base: str, parts: int, params: dict[str, Any]) -> None:
    """``limits.check_joint`` on the base's upper decompositions and lower-bound pairs alike, before
    either product is built (a query builds both: the upper one must not be built in vain)."""
    kinds = [False] + ([True] if base_mechanism(base).lower is not None else [])
    for d in (d for lower in kinds for d in _component(base, eps0 / parts, params, lower)):
        limits.check_joint(base, parts, d.c.size, MAX_COMPONENTS)


def joint_upper(eps0: float, base: str, parts: int, **params: Any) -> list[Decomposition]:
    """Cartesian product of ``parts`` copies of the base decomposition at eps0 / parts (refused
    before it is built where it is too costly: ``_checked_parts``)."""
    _checked_parts(eps0, base, parts, params)
    options = _component(base, eps0 / parts, params, lower=False)
    return [joint(list(choice)) for choice in itertools.product(options, repeat=parts)]


def joint_lower(eps0: float, base: str, parts: int, **params: Any) -> list[Decomposition]:
    """Product of the base's lower-bound pairs (the same pair in every attribute)."""
    _checked_parts(eps0, base, parts, params)
    options = _component(base, eps0 / parts, params, lower=True)
    return [joint([d] * parts, up=False) for d in options]


def parallel_upper(
    eps0: float, bases: tuple[str, ...], weights: tuple[float, ...], **params: Any
) -> list[Decomposition]:
    """Mixture of the bases' decompositions with the selection probabilities."""
    _check_weights(bases, weights)
    options = [_component(b, eps0, params, lower=False) for b in bases]
    return [parallel(list(choice), list(weights)) for choice in itertools.product(*options)]


def parallel_lower(
    eps0: float, bases: tuple[str, ...], weights: tuple[float, ...], **params: Any
) -> list[Decomposition]:
    """Mixture of the bases' pairs with x2 distinct from x0 and x1 (the last pair of each).

    The input is shared by all bases, so only pairs of the same kind may be mixed; every
    lower-bound list ends with its x2-distinct pair, which exists for domains of >= 3 values
    (not for binary RR: then no lower bound is given).
    """
    _check_weights(bases, weights)
    if "krr" in bases and (params.get("k") or 3) < 3:
        return []
    return [parallel([_component(b, eps0, params, lower=True)[-1] for b in bases], list(weights))]


def _check_weights(bases: tuple[str, ...], weights: tuple[float, ...]) -> None:
    if len(bases) != len(weights) or abs(sum(weights) - 1.0) > 1e-9:
        raise ValueError(f"weights must give one probability per base and sum to 1, got {list(weights)}")


_K = Param(None, categories, "k of a krr base")
_G = Param(None, categories, "g of an olh base")

JOINT = Mechanism(
    "joint",
    "joint composition: `parts` attributes, each randomized by `base` with eps0/parts",
    PAPER,
    joint_upper,
    joint_lower,
    {"base": Param(None, _base_name, "base mechanism name", required=True),
     "parts": Param(2, _parts, f"number of attributes, 1..{MAX_PARTS} (default 2)"), "k": _K, "g": _G},
    monotone_in_eps0=_bases_monotone,
)

PARALLEL = Mechanism(
    "parallel",
    "parallel composition: one of `bases` chosen with probabilities `weights`, full eps0",
    PAPER,
    parallel_upper,
    parallel_lower,
    {"bases": Param(None, _names, "comma-separated base mechanisms", required=True),
     "weights": Param(None, _weights, "comma-separated probabilities, one per base", required=True),
     "k": _K, "g": _G},
    monotone_in_eps0=_bases_monotone,
)
