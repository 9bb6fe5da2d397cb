"""``conveyor doctor MODULE:FUNCTION``: text and JSON, and its errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conveyor.cli.main import main

FACTORY = textwrap.dedent(
    """
    import time
    from conveyor import DataLoader

    class Slow:
        def __len__(self):
            return 200

        def __getitem__(self, i):
            time.sleep(0.004)
            return i

    def make_loader():
        return DataLoader(Slow(), batch_size=2, num_workers=1, worker_type="thread")

    def not_a_loader():
        return 3
    """
)


@pytest.fixture
def factory(tmp_path: Path) -> Path:
    path = tmp_path / "doctor_factory.py"
    path.write_text(FACTORY)
    return path


def test_doctor_prints_its_verdict(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["doctor", f"{factory}:make_loader", "--batches", "12", "--step-ms", "2"])
    out = capsys.readouterr().out
    assert status == 0
    assert "bottleneck: I/O latency" in out and "counterfactual:" in out


def test_doctor_json(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["doctor", f"{factory}:make_loader", "--batches", "8", "--json", "--no-counterfactual"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bottleneck"] and report["measured_gain"] is None


def test_doctor_errors(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", f"{factory}:not_a_loader"]) == 1
    assert main(["doctor", f"{factory}:missing"]) == 1
    assert main(["doctor", "no-colon"]) == 1
    err = capsys.readouterr().err
    assert "not a DataLoader" in err and "no function 'missing'" in err
    assert "expected MODULE:FUNCTION" in err
