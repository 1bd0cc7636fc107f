"""Certified engine: delta(eps), eps(delta), eps0_max for a decomposition of G."""

from tablegen.engine.bounds import (
    Bounds,
    certifies,
    delta0_note,
    delta_bounds,
    delta_curve,
    eps0_max,
    eps_bounds,
    proves_above,
)
from tablegen.engine.renyi import RenyiBounds, rdp_bounds

__all__ = ["Bounds", "RenyiBounds", "certifies", "delta0_note", "delta_bounds", "delta_curve", "eps_bounds",
           "eps0_max", "proves_above", "rdp_bounds"]
