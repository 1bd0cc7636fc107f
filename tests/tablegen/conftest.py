"""The helpers of tablegen's tests (``shuffle_reference``, the independent reference, and
``dask_processes``) and the protocols' exact references on the path of the tests in every folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "protocols"))  # test_protocols, which test_forgeries.py uses
sys.path.insert(0, str(Path(__file__).parent))
