"""The zygote and the user's script (issue #34): spawn/forkserver workers need the script's
classes, so its top level runs again in the zygote, as in torch's workers; but only at the
first ``iter()``, never for a loader nobody iterates, and a script that starts loading at
its top level (no ``if __name__ == "__main__":``) gets one clear error naming the guard."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import conveyor

    with open(sys.argv[2], "a") as runs:  # one line each time this top level runs
        runs.write("ran\\n")


    class Squares(conveyor.Dataset):  # defined here: workers find it through the script
        def __len__(self):
            return 8

        def __getitem__(self, index):
            return torch.tensor(index * index)


    loader = conveyor.DataLoader(
        Squares(), batch_size=4, num_workers=2, multiprocessing_context=sys.argv[1]
    )
    {iterate}
    """
)
# A loader only built: wait (bounded) until the zygote idles with torch imported; a zygote
# that ran the script would have done so by then (the script is what imports torch there).
WAIT_FOR_IDLE_ZYGOTE = """
elif __name__ == "__main__":
    import time
    import psutil

    def zygote_idle():
        for child in psutil.Process().children(recursive=True):
            try:
                maps = child.memory_maps()
                if child.status() == psutil.STATUS_SLEEPING and any(
                    "libtorch_cpu" in m.path for m in maps
                ):
                    return True
            except psutil.Error:
                pass
        return False

    deadline = time.monotonic() + 60
    while not zygote_idle() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert zygote_idle(), "no zygote started"
"""
GUARDED = (
    'if __name__ == "__main__" and sys.argv[3] == "iterate":\n'
    "    print([b.tolist() for b in loader])" + WAIT_FOR_IDLE_ZYGOTE
)
UNGUARDED = "print([b.tolist() for b in loader])"


def _run(
    tmp_path: Path, body: str, context: str, iterate: bool
) -> tuple[subprocess.CompletedProcess[str], int]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(iterate=body))
    runs = tmp_path / "runs.txt"
    done = subprocess.run(
        [sys.executable, str(script), context, str(runs), "iterate" if iterate else "build"],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        cwd=tmp_path,
    )
    return done, len(runs.read_text().splitlines()) if runs.exists() else 0


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_a_loader_nobody_iterates_runs_none_of_the_script_elsewhere(
    tmp_path: Path, context: str
) -> None:
    done, runs = _run(tmp_path, GUARDED, context, iterate=False)
    assert done.returncode == 0, done.stderr
    assert runs == 1  # the script itself; the zygote imported torch, not the script


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_the_first_iter_imports_the_script_once_for_all_workers(
    tmp_path: Path, context: str
) -> None:
    done, runs = _run(tmp_path, GUARDED, context, iterate=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[[0, 1, 4, 9], [16, 25, 36, 49]]"
    assert runs == 2  # the script, then the zygote (its workers are forks of it)


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_a_script_loading_at_its_top_level_gets_an_error_naming_the_guard(
    tmp_path: Path, context: str
) -> None:
    done, _ = _run(tmp_path, UNGUARDED, context, iterate=True)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()
    message = "\n".join(last[-8:])
    assert "RuntimeError: " in message and 'if __name__ == "__main__":' in message
    assert "bootstrapping phase" in message
    assert 'train.py", line' in message  # where the script started loading
    assert "ConnectionResetError" not in done.stderr and "BrokenPipe" not in done.stderr
