"""The remote reader's requests run on fsspec's event loop: one thread per process, for good
(started here, before the leak guard of the first test counts threads)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def fsspec_loop() -> None:
    import fsspec.asyn

    fsspec.asyn.get_loop()
