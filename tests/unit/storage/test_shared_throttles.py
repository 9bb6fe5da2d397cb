"""A throttle heard by one worker process reaches its siblings (memory shared at fork), and
the other ranks of a torchrun job on the machine (a file board keyed by the job).

With process workers each process keeps its own limit and pace per host; the board of
`conveyor.storage.shared_throttles` is what tells the others that the store throttles, so
that they slow down and ask larger ranges before being throttled themselves.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import fsspec.asyn
import pytest
from scripted_source import FAST, ScriptedSource

from conveyor.storage import RangedReader, shared_throttles
from conveyor.storage.host_limits import HEARD_WITHIN_S, host_limit, throttled_before
from conveyor.storage.shared_throttles import BOARD_FILE_NAME, last_throttle, note_throttle

BLOCK = 4096
DATA = os.urandom(24 * BLOCK)


def _throttled_in_a_child(host: str) -> None:
    child = multiprocessing.get_context("fork").Process(target=note_throttle, args=(host,))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0


def test_a_throttle_noted_in_a_forked_process_is_heard_here() -> None:
    host = f"shared-board-{os.getpid()}-a"
    assert last_throttle(host) is None
    _throttled_in_a_child(host)
    assert last_throttle(host) is not None


def test_after_a_sibling_was_throttled_this_process_paces_and_asks_larger_ranges() -> None:
    source = ScriptedSource(DATA)  # never throttles this process
    source.host = f"shared-board-{os.getpid()}-b"
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read(BLOCK) == DATA[:BLOCK]  # this process's first requests
        _throttled_in_a_child(source.host)  # meanwhile a sibling is throttled
        assert reader.read() == DATA[BLOCK:]
    spans = [(end - start) // BLOCK for start, end in source.requests]
    assert max(spans) == 4 and len(source.requests) < 24, spans
    limit = host_limit(source.host, fsspec.asyn.get_loop())
    assert limit.pace.rate is not None and limit.throttles == 0  # heard, not its own


def test_a_sibling_throttle_before_any_request_here_asks_larger_ranges_unpaced() -> None:
    source = ScriptedSource(DATA)
    source.host = f"shared-board-{os.getpid()}-c"
    _throttled_in_a_child(source.host)
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA
    assert max((end - start) // BLOCK for start, end in source.requests) == 4
    assert host_limit(source.host, fsspec.asyn.get_loop()).pace.rate is None  # nothing to learn


# -- the ranks of a torchrun job: separate process trees on one machine share a file board

_NOTE = "from conveyor.storage.shared_throttles import note_throttle; note_throttle({host!r})"
_READ = (
    "from conveyor.storage.shared_throttles import last_throttle;"
    "print(last_throttle({host!r}) is not None)"
)


def _fresh_interpreter(code: str, tmp: Path, run_id: str | None) -> str:
    """Run ``code`` in a new interpreter (no board inherited), as another rank would."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RUN_ID"}
    env["TMPDIR"] = str(tmp)
    if run_id is not None:
        env["TORCHELASTIC_RUN_ID"] = run_id
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_throttle_heard_by_one_rank_is_heard_by_another_rank_of_the_job(
    tmp_path: Path,
) -> None:
    host = "ranks-board-a"
    _fresh_interpreter(_NOTE.format(host=host), tmp_path, run_id="job-1")
    assert _fresh_interpreter(_READ.format(host=host), tmp_path, run_id="job-1") == "True"
    # another job, and a process outside torchrun, hear nothing of it
    assert _fresh_interpreter(_READ.format(host=host), tmp_path, run_id="job-2") == "False"
    assert _fresh_interpreter(_READ.format(host=host), tmp_path, run_id=None) == "False"
    board = tmp_path / f"conveyor-{os.getuid()}" / BOARD_FILE_NAME
    assert board.stat().st_size == 64 * 16 and stat.S_IMODE(board.stat().st_mode) == 0o600


def test_a_board_folder_others_can_write_is_not_used(tmp_path: Path) -> None:
    folder = tmp_path / f"conveyor-{os.getuid()}"
    folder.mkdir(mode=0o700)
    folder.chmod(0o777)  # anyone could swap the board: each process keeps its own
    host = "ranks-board-b"
    _fresh_interpreter(_NOTE.format(host=host), tmp_path, run_id="job-1")
    assert _fresh_interpreter(_READ.format(host=host), tmp_path, run_id="job-1") == "False"
    assert not (folder / BOARD_FILE_NAME).exists()


def test_a_time_from_an_earlier_boot_is_no_throttle(monkeypatch: pytest.MonkeyPatch) -> None:
    host = f"shared-board-{os.getpid()}-d"
    note_throttle(host)
    assert last_throttle(host) is not None
    later = time.monotonic() - 3600.0  # this boot's clock is behind the time on the board
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert last_throttle(host) is None


def test_a_throttle_heard_long_ago_no_longer_asks_larger_ranges() -> None:
    source = ScriptedSource(DATA)
    source.host = f"shared-board-{os.getpid()}-e"
    loop = fsspec.asyn.get_loop()
    note_throttle(source.host)
    assert throttled_before(source.host, loop)
    key, offset = shared_throttles._place(source.host)
    long_ago = time.monotonic() - HEARD_WITHIN_S - 1.0
    struct.pack_into("<Qd", shared_throttles._board, offset, key, long_ago)
    assert not throttled_before(source.host, loop)
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA
    assert max((end - start) // BLOCK for start, end in source.requests) == 1
