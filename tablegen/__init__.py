"""shuffle-eps table generator: mechanisms, certified engine, grids, distributed build, export.

The heavy side of shuffle-eps.  ``tablegen.engine`` computes certified (upper) and lower
bounds on the shuffled (eps, delta) of an eps0-LDP randomizer; ``tablegen.mechanisms``
holds the randomizers as data (laws of the privacy amplification random variable G).
"""

__version__ = "0.1.0"
ENGINE_VERSION = "3"  # 3: Laplace upper cells in s = e^(-eps0 t) and t (mechanisms/laplace.py)
# 2: lattice step refined for the tilted law (lattice.refine_step)
