"""shuffle-eps table generator: mechanisms, certified engine, grids, distributed build, export.

The heavy side of shuffle-eps.  ``tablegen.engine`` computes certified (upper) and lower
bounds on the shuffled (eps, delta) of an eps0-LDP randomizer; ``tablegen.mechanisms``
holds the randomizers as data (laws of the privacy amplification random variable G).
"""

__version__ = "0.1.0"
ENGINE_VERSION = "5"  # what each version changed: docs/engine.md, "Engine versions"
# engines whose certified eps are the same, bit for bit (4 and 5 changed lower bounds only, which stay
# valid lower bounds): a table published by any of them is up to date for the others (store.up_to_date)
SAME_CERTIFIED_EPS = ("3", "4", "5")
