"""worker_type="ray" options: checked at construction, with the argument's name; no Ray needed."""

from __future__ import annotations

import importlib.util
import pickle
import subprocess
import sys

import pytest

import conveyor
from conveyor.engine import ray_workers
from conveyor.engine.ray_workers import RayWorkers

from sample_datasets import Range


def _has_ray() -> bool:
    return importlib.util.find_spec("ray") is not None


@pytest.mark.parametrize("worker_type", ["process", "thread", None])
@pytest.mark.parametrize(
    ("argument", "value"), [("ray_remote_args", {"num_cpus": 1}), ("max_worker_restarts", 2)]
)
def test_ray_arguments_with_another_kind_are_refused(
    worker_type: str | None, argument: str, value: object
) -> None:
    with pytest.raises(ValueError, match=f"{argument} applies to worker_type='ray' only"):
        conveyor.DataLoader(Range(4), num_workers=1, worker_type=worker_type, **{argument: value})


def test_missing_ray_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_workers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"pip install conveyor\[ray\]"):
        conveyor.DataLoader(Range(4), num_workers=1, worker_type="ray")


@pytest.mark.skipif(not _has_ray(), reason="needs the ray extra")
def test_bad_ray_arguments_name_themselves() -> None:
    with pytest.raises(TypeError, match="ray_remote_args should be None or a dict"):
        conveyor.DataLoader(Range(4), num_workers=1, worker_type="ray", ray_remote_args=[1])
    with pytest.raises(ValueError, match=r"max_worker_restarts should be None \(the default"):
        conveyor.DataLoader(Range(4), num_workers=1, worker_type="ray", max_worker_restarts=-1)


@pytest.mark.skipif(not _has_ray(), reason="needs the ray extra")
def test_ray_kind_is_chosen_and_pickles_with_its_settings() -> None:
    loader = conveyor.DataLoader(
        Range(4), num_workers=2, worker_type="ray", ray_remote_args={"num_cpus": 0.5},
        max_worker_restarts=3,
    )  # fmt: skip
    assert loader.worker_type == "ray"
    kind = pickle.loads(pickle.dumps(loader._conveyor_options.workers.kind))
    assert isinstance(kind, RayWorkers)
    assert (kind.remote_args, kind.max_worker_restarts) == ({"num_cpus": 0.5}, 3)


def test_import_conveyor_does_not_import_ray() -> None:
    code = "import sys, conveyor; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.skipif(not _has_ray(), reason="needs the ray extra")
def test_defaults_spread_the_actors_and_replace_lost_ones() -> None:
    """A lost node costs no sample with default arguments: the actors are spread over the
    nodes, and up to num_workers lost ones are replaced (tests/ray_workers: a real cluster)."""
    kind = conveyor.DataLoader(
        Range(4), num_workers=2, worker_type="ray"
    )._conveyor_options.workers.kind
    assert isinstance(kind, RayWorkers) and kind.max_worker_restarts is None
    assert ray_workers.actor_options({}) == {"scheduling_strategy": "SPREAD"}
    chosen = {"scheduling_strategy": "DEFAULT", "num_cpus": 2}
    assert ray_workers.actor_options(chosen) == chosen
