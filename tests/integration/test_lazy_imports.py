"""`import conveyor` stays cheap: the DataPipe operations, formats and storage load on first use.

Each check runs in a fresh interpreter (the test process has imported everything already).
The lazy names must behave exactly as eager ones: ``from conveyor import X``, identity with
the module that defines them, typed DataPipe methods without importing the operations first.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

HEAVY = (
    "conveyor.datapipes.iter",
    "conveyor.datapipes.map",
    "conveyor.datapipes.profiling",
    "conveyor.formats.reading",
    "conveyor.formats.decoders",
    "conveyor.storage",
    "conveyor.mixture",
    "conveyor.engine.workers.ray_workers",
)


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_conveyor_leaves_operations_formats_and_storage_unloaded() -> None:
    out = _run(
        f"""
        import sys
        import conveyor
        loader = conveyor.DataLoader(conveyor.TensorDataset(__import__("torch").arange(6)))
        assert [int(b) for (b,) in loader] == list(range(6))
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
        """
    )
    assert out.strip() == "[]"


def test_lazy_names_are_the_defining_modules_objects() -> None:
    out = _run(
        """
        import conveyor
        from conveyor import TarShards, Mixture, DFIterDataPipe
        from conveyor.datapipes.iter.shards import TarShards as defined
        from conveyor.datapipes import iter as iter_ops, profile_pipeline
        from conveyor.formats import ShardWriter, iter_samples
        import conveyor.formats.writer as writer
        assert TarShards is defined is conveyor.TarShards
        assert Mixture is __import__("conveyor.mixture").mixture.Mixture
        assert DFIterDataPipe.__module__.startswith("conveyor.datapipes.dataframe")
        assert iter_ops.Mapper.__module__ == "conveyor.datapipes.iter.callable"
        assert ShardWriter is writer.ShardWriter and callable(iter_samples)
        assert callable(profile_pipeline)
        assert {"TarShards", "Mixture", "DFIterDataPipe"} <= set(dir(conveyor))
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_typed_methods_work_before_the_operations_are_imported() -> None:
    out = _run(
        """
        import sys
        from conveyor.datapipes import IterDataPipe

        class Numbers(IterDataPipe[int]):
            def __iter__(self):
                return iter(range(6))

        assert "conveyor.datapipes.iter" not in sys.modules
        pipe = Numbers().map(lambda x: x * 10).batch(4)
        print(list(pipe))
        """
    )
    assert out.strip() == "[[0, 10, 20, 30], [40, 50]]"


def test_unknown_attributes_still_raise_attribute_error() -> None:
    out = _run(
        """
        import conveyor, conveyor.datapipes, conveyor.formats
        for module in (conveyor, conveyor.datapipes, conveyor.formats):
            try:
                getattr(module, "no_such_name")
            except AttributeError as error:
                print(type(error).__name__, "no_such_name" in str(error))
        """
    )
    assert out.split() == ["AttributeError", "True"] * 3


def test_workers_import_numpy_random_only_when_the_dataset_draws_from_it() -> None:
    """A worker seeds NumPy's global generator when ``numpy.random`` is first imported
    (~10 ms of every worker's start otherwise); the draws are torch's all the same."""
    out = _run(
        """
        import sys
        import torch, torch.utils.data as tud
        import conveyor

        class Loaded:
            def __len__(self):
                return 4
            def __getitem__(self, i):
                return "numpy.random" in sys.modules

        class Draws:
            def __len__(self):
                return 8
            def __getitem__(self, i):
                import numpy.random
                return float(numpy.random.rand())

        print([bool(b) for b in conveyor.DataLoader(Loaded(), num_workers=2)])
        def epoch(module):
            generator = torch.Generator().manual_seed(5)
            loader = module.DataLoader(Draws(), batch_size=2, num_workers=2, generator=generator)
            return [b.tolist() for b in loader]
        ours = epoch(conveyor)
        assert "numpy.random" not in sys.modules  # imported in the workers only
        print(ours == epoch(tud))
        """
    )
    assert out.splitlines() == ["[False, False, False, False]", "True"]


def test_submodules_are_attributes_of_the_package_as_in_torch() -> None:
    """``import torch.utils.data`` makes ``.datapipes`` reachable; ``import conveyor`` too,
    though the DataPipes load only when reached."""
    out = _run(
        """
        import sys
        import conveyor, conveyor.stats
        assert "conveyor.datapipes" not in sys.modules
        wrapper, walk = conveyor.datapipes.iter.IterableWrapper, conveyor.graph.traverse_dps
        print(wrapper.__name__, walk.__name__)
        from conveyor.stats import progress
        import conveyor.stats.progress
        print(callable(progress), conveyor.stats.progress is progress)
        """
    )
    assert out.splitlines() == ["IterableWrapper traverse_dps", "True True"]


def test_import_holds_garbage_collection_off_and_restores_the_users_setting() -> None:
    out = _run(
        """
        import gc, sys
        import torch
        started = []

        def importing():
            package = sys.modules.get("conveyor")
            return package is not None and "_LAZY" not in vars(package)

        gc.callbacks.append(lambda phase, info: phase == "start" and started.append(importing()))
        import conveyor
        collections_during_import = sum(started)
        enabled_after = gc.isenabled()
        del sys.modules["conveyor"]
        for name in [m for m in sys.modules if m.startswith("conveyor.")]:
            del sys.modules[name]
        gc.disable()
        import conveyor
        print(collections_during_import, enabled_after, gc.isenabled())
        """
    )
    assert out.split() == ["0", "True", "False"]
