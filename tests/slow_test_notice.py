"""A pytest plugin: a test still running after ``CONVEYOR_SLOW_TEST_NOTICE_S`` seconds says
so on the terminal, and again at every such interval (scripts/test.sh sets 20 s), so that
the suite's quiet dots never hide a long test (the Lightning ones take about a minute).

Off unless the variable is set. The notice comes from a thread that lives only while the
test's body runs, so the leak guard (tests/conftest.py) never sees it; it lifts output
capture for the moment it writes, as pytest does for its own live output.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    every_s = float(os.environ.get("CONVEYOR_SLOW_TEST_NOTICE_S") or 0)
    if every_s <= 0:
        yield
        return
    started = time.monotonic()
    done = threading.Event()

    capture = item.config.pluginmanager.getplugin("capturemanager")
    terminal = item.config.pluginmanager.getplugin("terminalreporter")

    def notice() -> None:
        while not done.wait(every_s):
            line = f"[{item.nodeid}: still running after {time.monotonic() - started:.0f} s]"
            if capture is None or terminal is None:
                print(line, file=sys.__stderr__, flush=True)
                continue
            with capture.global_and_fixture_disabled():  # the test's output stays captured
                terminal.write_line("")
                terminal.write_line(line)

    thread = threading.Thread(target=notice, name="slow-test-notice", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
