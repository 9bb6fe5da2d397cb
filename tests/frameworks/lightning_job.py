"""A small Lightning job (CPU, gloo) that records which samples each rank saw, in order.

Run as a script by tests/frameworks/test_lightning.py (Lightning's ddp launcher re-runs
the script in every rank, which pytest itself cannot be):
    python lightning_job.py --loader conveyor --strategy ddp --devices 2 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

N = 64


class Numbers(torch.utils.data.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([float(index)])


def make_loader(kind: str, shuffle: bool) -> Any:
    if kind == "conveyor":
        import conveyor

        return conveyor.DataLoader(Numbers(), batch_size=4, shuffle=shuffle, num_workers=2)
    return torch.utils.data.DataLoader(Numbers(), batch_size=4, shuffle=shuffle, num_workers=2)


class Model(L.LightningModule):
    def __init__(self, kind: str, out: Path) -> None:
        super().__init__()
        self.kind, self.out = kind, out
        self.layer = torch.nn.Linear(1, 1)
        self.seen: dict[str, list[int]] = {"train": [], "val": []}
        self.loader_types: set[str] = set()

    def _record(self, stage: str, batch: torch.Tensor) -> None:
        self.seen[stage] += [int(x) for x in batch.reshape(-1)]

    def training_step(self, batch: torch.Tensor, _: int) -> torch.Tensor:
        self._record("train", batch)
        loader = self.trainer.train_dataloader
        self.loader_types.add(f"{type(loader).__module__}.{type(loader).__name__}")
        return self.layer(batch).sum()

    def validation_step(self, batch: torch.Tensor, _: int) -> None:
        self._record("val", batch)

    def predict_step(self, batch: torch.Tensor, _: int) -> torch.Tensor:
        return batch

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> Any:
        return make_loader(self.kind, shuffle=True)

    def val_dataloader(self) -> Any:
        return make_loader(self.kind, shuffle=False)

    def predict_dataloader(self) -> Any:
        return make_loader(self.kind, shuffle=False)

    def on_fit_end(self) -> None:
        record = {"seen": self.seen, "loader_types": sorted(self.loader_types)}
        path = self.out / f"fit-rank{self.global_rank}.json"
        path.write_text(json.dumps(record))


class Writer(BasePredictionWriter):
    def __init__(self, out: Path) -> None:
        super().__init__(write_interval="batch")
        self.out = out
        self.rows: list[Any] = []

    def write_on_batch_end(
        self, trainer: Any, module: Any, prediction: Any, indices: Any, batch: Any, *_: Any
    ) -> None:
        self.rows.append([list(map(int, indices)), [int(x) for x in prediction.reshape(-1)]])

    def on_predict_end(self, trainer: Any, module: Any) -> None:
        path = self.out / f"predict-rank{trainer.global_rank}.json"
        path.write_text(json.dumps(self.rows))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loader", choices=["conveyor", "torch"], required=True)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    L.seed_everything(7, verbose=False)
    common: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": args.devices,
        "strategy": args.strategy,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    model = Model(args.loader, args.out)
    L.Trainer(max_epochs=1, **common).fit(model)
    writer = Writer(args.out)
    L.Trainer(callbacks=[writer], **common).predict(model, return_predictions=False)
    os.environ.pop("LOCAL_RANK", None)


if __name__ == "__main__":
    main()
