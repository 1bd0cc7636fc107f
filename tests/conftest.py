"""Settings for every test: a private cache home, so the tables spot-certified during a run
(lookup.trust.origin remembers them under $XDG_CACHE_HOME/shuffle-eps/trusted) are this run's only."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def private_cache_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(Path(tmp_path_factory.mktemp("cache-home"))))
        yield
