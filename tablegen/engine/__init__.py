"""Certified engine: delta(eps), eps(delta), eps0_max for a decomposition of G."""

from tablegen.engine.accountant import (
    Bounds,
    certifies,
    delta_bounds,
    delta_curve,
    eps0_max,
    eps_bounds,
    proves_above,
)

__all__ = ["Bounds", "certifies", "delta_bounds", "delta_curve", "eps_bounds", "eps0_max", "proves_above"]
