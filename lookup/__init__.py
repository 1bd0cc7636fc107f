"""shuffle-eps lookup: instant certified answers from precomputed tables (the light side).

    import lookup
    a = lookup.eps("krr", eps0=2.0, n=10**6, delta=1e-8, k=10)
    a.value, a.lower, a.source, a.slack

Imports numpy only (numcodecs when a table is opened: not zarr, nor the whole table; see
lookup/store/table.py); the engine is imported lazily for live answers.
"""

from lookup.answer.api import Answer, delta, eps, eps0_max
from lookup.answer.calibration import calibrate
from lookup.store.table import Table, TableError, open_table

__version__ = "0.1.0"
__all__ = ["Answer", "Table", "TableError", "calibrate", "delta", "eps", "eps0_max", "open_table"]
