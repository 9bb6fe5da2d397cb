"""Code that inspects or re-creates a loader, compared with torch.utils.data and torchdata.

Frameworks do more than iterate a loader: torchtitan validates keyword arguments against
``inspect.signature(StatefulDataLoader.__init__)``; Lightning rebuilds a user's DataLoader
subclass from ``vars(loader)`` and the ``__init__`` signature to inject its sampler,
patching ``__setattr__``/``__delattr__`` (and deleting attributes) meanwhile; Lightning's
CombinedLoader pickles itself mid-epoch, leaving out iterators of torch's iterator class;
PyG's loaders wrap the iterator ``_get_iterator`` returns; accelerate asks
``isinstance(dataset, IterableDataset)`` of Hugging Face streams; MONAI swaps the
multiprocessing context's ``Process`` for a thread. Each test here reproduces one of those
causes with torch's (or torchdata's) loader as the oracle.
"""

from __future__ import annotations

import inspect
import pickle
import queue
import threading
from collections.abc import Iterator
from multiprocessing.context import SpawnContext
from typing import Any

import pytest
import torch
import torch.utils.data as tud
import torch.utils.data._utils.worker as tud_worker
import torch.utils.data.dataloader as tud_loader
import torch.utils.data.distributed as tud_distributed
import torchdata.stateful_dataloader as tdata
import torchdata.stateful_dataloader.sampler as tdata_sampler

import conveyor
import conveyor.dataloader
import conveyor.distributed
import conveyor.stateful_dataloader as cstateful
import conveyor.stateful_dataloader.sampler as cstateful_sampler

JOIN_TIMEOUT_S = 30.0

# (conveyor's class, the class whose constructor it mirrors)
SIGNATURES = [
    (conveyor.DataLoader, tud.DataLoader),
    (cstateful.StatefulDataLoader, tdata.StatefulDataLoader),
    (conveyor.TensorDataset, tud.TensorDataset),
    (conveyor.StackDataset, tud.StackDataset),
    (conveyor.ConcatDataset, tud.ConcatDataset),
    (conveyor.ChainDataset, tud.ChainDataset),
    (conveyor.Subset, tud.Subset),
    (conveyor.SequentialSampler, tud.SequentialSampler),
    (conveyor.RandomSampler, tud.RandomSampler),
    (conveyor.SubsetRandomSampler, tud.SubsetRandomSampler),
    (conveyor.WeightedRandomSampler, tud.WeightedRandomSampler),
    (conveyor.BatchSampler, tud.BatchSampler),
    (conveyor.DistributedSampler, tud_distributed.DistributedSampler),
    (cstateful_sampler.RandomSampler, tdata_sampler.RandomSampler),
    (cstateful_sampler.BatchSampler, tdata_sampler.BatchSampler),
    (cstateful_sampler.StatefulDistributedSampler, tdata_sampler.StatefulDistributedSampler),
]


def _shape(cls: type) -> list[tuple[str, Any, Any]]:
    return [
        (p.name, p.kind, p.default) for p in inspect.signature(cls.__init__).parameters.values()
    ]


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=lambda c: c.__qualname__)
def test_constructor_signature_is_the_originals(ours: type, theirs: type) -> None:
    mine, original = _shape(ours), _shape(theirs)
    assert mine[: len(original)] == original  # names, order, kinds and defaults
    for name, kind, _ in mine[len(original) :]:
        assert kind is inspect.Parameter.KEYWORD_ONLY, name  # conveyor's additions


def test_torchtitan_style_kwarg_validation_accepts_every_loader_argument() -> None:
    # ParallelAwareDataloader rejects what the signature does not name.
    valid = set(inspect.signature(cstateful.StatefulDataLoader.__init__).parameters)
    wanted = {"batch_size", "num_workers", "pin_memory", "persistent_workers", "prefetch_factor"}
    assert wanted <= valid


# --------------------------------------------------------------- plain attributes


class _Recording(conveyor.DataLoader[Any]):
    """Records the attribute names assigned through ``__setattr__``, in order."""

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__.setdefault("assigned", []).append(name)
        super().__setattr__(name, value)


class _TorchRecording(tud.DataLoader[Any]):
    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__.setdefault("assigned", []).append(name)
        super().__setattr__(name, value)


def test_attributes_are_set_as_torch_sets_them() -> None:
    ours = _Recording(list(range(8)), batch_size=2, num_workers=0)
    theirs = _TorchRecording(list(range(8)), batch_size=2, num_workers=0)
    torch_names = theirs.assigned
    assert [n for n in ours.assigned if n in set(torch_names)] == torch_names
    public = {k: v for k, v in vars(theirs).items() if not k.startswith("_") and k != "assigned"}
    for name, value in public.items():
        assert name in vars(ours), name
        if name not in ("sampler", "batch_sampler", "collate_fn"):  # conveyor's own classes
            assert vars(ours)[name] == value, name


def test_deleting_an_attribute_behaves_as_torch() -> None:
    # Lightning's patched __delattr__ (re-instantiating subclasses) deletes attributes.
    for cls in (conveyor.DataLoader, tud.DataLoader):
        loader = cls(list(range(4)))
        del loader.collate_fn
        with pytest.raises(AttributeError):
            _ = loader.collate_fn
        loader.collate_fn = lambda batch: batch
        del loader.dataset  # only setting it is forbidden after __init__
        with pytest.raises(AttributeError):
            _ = loader.dataset


def test_setting_an_attribute_still_reconfigures_the_loader() -> None:
    loader = conveyor.DataLoader(list(range(6)), batch_size=2)
    loader.collate_fn = sum
    assert list(loader) == [1, 5, 9]
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        loader.batch_size = 3


class _OwnPrivateNames(conveyor.DataLoader[Any]):
    """Private names subclasses use for themselves (PopTorch's loader sets `_options`)."""

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        self._options = {"replication_factor": 2}
        self._resume = "theirs"
        self._collectives = None
        super().__init__(dataset, **kwargs)
        self._options = {"replication_factor": 3}
        self._epoch_iterator = None
        self._dropped_state = "theirs"
        self._held_iterator = "theirs"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_subclass_s_private_attributes_leave_the_loader_alone(num_workers: int) -> None:
    loader = _OwnPrivateNames(list(range(10)), batch_size=4, num_workers=num_workers)
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert loader.state_dict()["in_epoch"] is False
    assert loader._options == {"replication_factor": 3}


class _RenamedArguments(conveyor.DataLoader[Any]):
    """Lightning's test subclass: ``__init__`` arguments kept under other names."""

    def __init__(self, num_features: int, dataset: Any, *args: Any, **kwargs: Any) -> None:
        self.num_features = num_features
        super().__init__(dataset, *args, **kwargs)


class _TorchRenamedArguments(tud.DataLoader[Any]):
    def __init__(self, num_features: int, dataset: Any, *args: Any, **kwargs: Any) -> None:
        self.num_features = num_features
        super().__init__(dataset, *args, **kwargs)


def test_reinstantiation_from_vars_and_signature_injects_a_sampler() -> None:
    # What Lightning's _get_dataloader_init_args_and_kwargs does with **kwargs subclasses.
    def rebuild(loader: Any, base: type, sampler: Any) -> Any:
        attrs = {k: v for k, v in vars(loader).items() if not k.startswith("_")}
        attrs["multiprocessing_context"] = loader.multiprocessing_context
        params = dict(inspect.signature(loader.__init__).parameters)
        params.update(inspect.signature(base.__init__).parameters)
        params.pop("self", None)
        kwargs = {k: v for k, v in attrs.items() if k in params and params[k].default is not v}
        kwargs["dataset"] = attrs["dataset"]
        kwargs.update(sampler=sampler, shuffle=False, batch_sampler=None)
        return type(loader)(**kwargs)

    results = []
    for module, cls in ((conveyor, _RenamedArguments), (tud, _TorchRenamedArguments)):
        loader = cls(3, list(range(10)), batch_size=3, shuffle=True)
        sampler = tud_distributed.DistributedSampler(
            list(range(10)), num_replicas=2, rank=1, shuffle=False
        )
        rebuilt = rebuild(loader, module.DataLoader, sampler)
        assert rebuilt.sampler is sampler and rebuilt.num_features == 3
        results.append([b.tolist() for b in rebuilt])
    assert results[0] == results[1] == [[1, 3, 5], [7, 9]]


# ------------------------------------------------------------------- iterators


@pytest.mark.parametrize(
    ("num_workers", "torch_class"),
    [(0, tud_loader._SingleProcessDataLoaderIter), (2, tud_loader._MultiProcessingDataLoaderIter)],
)
def test_iterators_are_torch_s_iterator_classes(num_workers: int, torch_class: type) -> None:
    loader = conveyor.DataLoader(list(range(4)), num_workers=num_workers)
    iterator = iter(loader)
    assert isinstance(iterator, tud_loader._BaseDataLoaderIter)
    assert isinstance(iterator, torch_class)
    assert isinstance(iterator, conveyor.dataloader._BaseDataLoaderIter)
    with pytest.raises(NotImplementedError, match="cannot be pickled"):
        pickle.dumps(iterator)
    assert [int(x) for x in iterator] == [0, 1, 2, 3]


def test_a_loader_pickles_mid_epoch_as_torch_s_does() -> None:
    # Lightning's CombinedLoader pickles the loaders it holds while an epoch runs.
    loader = conveyor.DataLoader(list(range(4)))
    iterator = iter(loader)
    next(iterator)
    copy = pickle.loads(pickle.dumps(loader))
    assert [int(x) for x in copy] == [0, 1, 2, 3]
    assert [int(x) for x in iterator] == [1, 2, 3]


class _Wrapped:
    """PyG's DataLoaderIterator: another object around the loader's iterator."""

    def __init__(self, iterator: Any) -> None:
        self.iterator = iterator

    def __iter__(self) -> _Wrapped:
        return self

    def __next__(self) -> Any:
        return next(self.iterator) * 10

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        self.iterator._reset(loader, first_iter)


class _WrappingLoader(conveyor.DataLoader[Any]):
    def _get_iterator(self) -> Any:
        return _Wrapped(super()._get_iterator())


class _TorchWrappingLoader(tud.DataLoader[Any]):
    def _get_iterator(self) -> Any:
        return _Wrapped(super()._get_iterator())


@pytest.mark.parametrize(
    ("num_workers", "persistent"), [(0, False), (2, False), (2, True)], ids=str
)
def test_get_iterator_may_return_a_wrapper(num_workers: int, persistent: bool) -> None:
    kwargs = {"batch_size": 2, "num_workers": num_workers, "persistent_workers": persistent}
    ours = _WrappingLoader(list(range(6)), **kwargs)
    theirs = _TorchWrappingLoader(list(range(6)), **kwargs)
    for _ in range(2):  # persistent workers: the second epoch resets the wrapped iterator
        iterator = iter(ours)
        assert isinstance(iterator, _Wrapped)
        assert [b.tolist() for b in iterator] == [b.tolist() for b in theirs]
        assert ours.stats().samples == 6  # the epoch the wrapper ran
    state = ours.state_dict()
    assert state["in_epoch"] is False
    iterator = iter(ours)
    next(iterator)
    assert ours.state_dict()["in_epoch"] is True
    del iterator


def test_torch_s_collate_module_names_exist() -> None:
    # collate functions written for torch import these (MONAI: np_str_obj_array_pattern)
    import torch.utils.data._utils.collate as theirs

    import conveyor._utils.collate as ours

    for name in ("np_str_obj_array_pattern", "default_collate_err_msg_format"):
        assert getattr(ours, name) == getattr(theirs, name)


# ------------------------------------------------------------------ isinstance


class _TorchStream(tud.IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(3))


class _TorchMap(tud.Dataset[int]):
    def __getitem__(self, index: int) -> int:
        return index


def test_torch_instances_are_instances_of_conveyor_s_bases() -> None:
    stream, mapping = _TorchStream(), _TorchMap()
    sampler = tud.SequentialSampler(range(3))
    # accelerate switches on isinstance(dataset, IterableDataset) (a Hugging Face stream)
    assert isinstance(stream, conveyor.IterableDataset)
    assert isinstance(stream, conveyor.Dataset) and isinstance(mapping, conveyor.Dataset)
    assert not isinstance(mapping, conveyor.IterableDataset)
    assert isinstance(sampler, conveyor.Sampler)
    # the concrete classes, and the DataPipe bases, stay conveyor's own
    assert not isinstance(sampler, conveyor.SequentialSampler)
    assert not isinstance(tud.TensorDataset(torch.zeros(2)), conveyor.TensorDataset)
    assert not isinstance(stream, conveyor.IterDataPipe)
    assert not isinstance(3, conveyor.Dataset)
    # as before, both ways
    assert isinstance(conveyor.TensorDataset(torch.zeros(2)), tud.Dataset)


# ---------------------------------------------------------- a context of threads


class _ThreadProcess(threading.Thread):
    """MONAI's shim: a thread that looks like a process to torch's loader."""

    @property
    def pid(self) -> int:
        return id(self)

    def run(self) -> None:
        try:
            super().run()
        finally:  # torch's worker loop set its worker-info global in this (main) process
            tud_worker._worker_info = None


class _ThreadQueue(queue.Queue[Any]):
    """MONAI's shim: a thread queue that looks like a process queue."""

    def close(self) -> None:
        pass

    def cancel_join_thread(self) -> None:
        pass


class _ThreadContext(SpawnContext):
    _name = "processthread"
    Process = _ThreadProcess  # type: ignore[assignment]
    Queue = _ThreadQueue  # type: ignore[assignment]


class _Squares(conveyor.Dataset[int]):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> int:
        return index * index


def test_a_context_whose_process_is_a_thread_runs_thread_workers() -> None:
    theirs = tud.DataLoader(
        _Squares(), batch_size=3, num_workers=2, multiprocessing_context=_ThreadContext()
    )
    ours = conveyor.DataLoader(
        _Squares(), batch_size=3, num_workers=2, multiprocessing_context=_ThreadContext()
    )
    assert ours.worker_type == "thread"
    assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]
    assert tud.get_worker_info() is None  # the main process is no worker afterwards
    with pytest.raises(ValueError, match="starts its workers as threads"):
        conveyor.DataLoader(
            _Squares(),
            num_workers=2,
            worker_type="process",
            multiprocessing_context=_ThreadContext(),
        )
