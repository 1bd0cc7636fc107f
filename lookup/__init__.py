"""shuffle-eps lookup: instant certified answers from precomputed tables (the light side).

Imports numpy (and zarr to read stores) only; the engine is imported lazily for live answers.
"""

__version__ = "0.1.0"
