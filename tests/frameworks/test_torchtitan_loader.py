"""torchtitan's data loader class, unmodified, on conveyor: ``ParallelAwareDataloader``
(torchtitan/components/dataloader.py) subclasses torchdata's ``StatefulDataLoader``; here
its module is imported with ``torchdata.stateful_dataloader`` answered by
``conveyor.stateful_dataloader``, so the class is built on conveyor's loader. It trains a
tiny causal LM for a few steps on packed conveyor rows (`PackedText` over token files,
process workers), checkpoints model, optimizer and loader in torchtitan's own format,
and resumes: the resumed run sees the same batches and ends with the same weights.

Runs where torchtitan is installed (``pip install torchtitan``: not one of conveyor's
dependencies; benchmarks/make-lm-venv.sh makes such an environment); skipped elsewhere.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install torchtitan)")
pytestmark = [pytest.mark.frameworks, pytest.mark.timeout(180)]

import conveyor.stateful_dataloader  # noqa: E402
from conveyor.text import PackedText, Packing, TokenFiles, TokenFileWriter  # noqa: E402

VOCAB, SEQ, BATCH = 512, 32, 4


@pytest.fixture
def titan_loader_class() -> Iterator[type]:
    """torchtitan's ParallelAwareDataloader with conveyor's StatefulDataLoader as its base."""
    saved = {name: sys.modules.get(name) for name in ("torchdata.stateful_dataloader",)}
    sys.modules.pop("torchtitan.components.dataloader", None)
    sys.modules["torchdata.stateful_dataloader"] = conveyor.stateful_dataloader
    try:
        module = importlib.import_module("torchtitan.components.dataloader")
        yield module.ParallelAwareDataloader
    finally:
        sys.modules.pop("torchtitan.components.dataloader", None)
        for name, value in saved.items():
            if value is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = value


@pytest.fixture
def corpus(tmp_path: Path) -> str:
    rng = np.random.default_rng(0)
    prefix = str(tmp_path / "corpus")
    with TokenFileWriter(prefix) as writer:
        for _ in range(300):
            writer.add(rng.integers(1, VOCAB, int(rng.integers(3, 40))))
    return prefix


def titan_batch(rows: list[dict[str, np.ndarray]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """torchtitan's batch layout: ({"input": tokens}, labels)."""
    tokens = torch.from_numpy(np.stack([row["input_ids"] for row in rows]))
    labels = torch.from_numpy(np.stack([row["labels"] for row in rows]))
    return {"input": tokens}, labels


def make_loader(loader_class: type, corpus: str) -> Any:
    dataset = PackedText(
        TokenFiles(corpus, unit_tokens=400), Packing(SEQ, boundaries=False), shuffle=True, seed=3
    )
    return loader_class(
        dataset,
        dp_rank=0,
        dp_world_size=1,
        batch_size=BATCH,
        num_workers=2,
        collate_fn=titan_batch,
    )


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.head = torch.nn.Linear(16, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(tokens)))


def train(
    model: TinyLM, optimizer: torch.optim.Optimizer, batches: Any, steps: int
) -> list[torch.Tensor]:
    seen = []
    for inputs, labels in itertools.islice(batches, steps):
        logits = model(inputs["input"])
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), ignore_index=-100
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen.append(inputs["input"].clone())
    return seen


def fresh() -> tuple[TinyLM, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = TinyLM()
    return model, torch.optim.SGD(model.parameters(), lr=0.5)


def test_torchtitan_loader_trains_and_resumes_exactly(
    titan_loader_class: type, corpus: str
) -> None:
    assert issubclass(titan_loader_class, conveyor.stateful_dataloader.StatefulDataLoader)
    model, optimizer = fresh()
    uninterrupted = train(model, optimizer, iter(make_loader(titan_loader_class, corpus)), 8)
    expected = [p.detach().clone() for p in model.parameters()]

    model, optimizer = fresh()
    loader = make_loader(titan_loader_class, corpus)
    batches = iter(loader)
    head = train(model, optimizer, batches, 3)
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "dataloader": loader.state_dict(),  # torchtitan: {"dp_rank_0": ..., "world_size": 1}
    }
    del batches, loader
    assert set(checkpoint["dataloader"]) == {"dp_rank_0", "world_size"}

    model, optimizer = fresh()
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    resumed = make_loader(titan_loader_class, corpus)
    resumed.load_state_dict(checkpoint["dataloader"])
    tail = train(model, optimizer, iter(resumed), 5)
    assert all(torch.equal(a, b) for a, b in zip(head + tail, uninterrupted, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), expected, strict=True))
