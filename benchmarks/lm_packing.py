"""Language-model data, side by side in one run: packing token files, best-fit padding,
tokenization in workers, resume time and state size; conveyor next to the peers that
install here (Grain, Hugging Face datasets + DataCollatorWithFlattening).

    LM_VENV=~/.cache/conveyor-lm bash benchmarks/make-lm-venv.sh
    ~/.cache/conveyor-lm/bin/python benchmarks/lm_packing.py [--tokens 16000000] [--repeats 3]

Every variant runs ``--repeats`` times, interleaved with the others; the table shows the
median and its ratio to the reference of its section. Timings on a shared 2-core machine
are noisy: the load (``os.getloadavg``) is printed beside them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import conveyor
from conveyor.text import (
    JsonlDocuments,
    PackedText,
    Packing,
    TokenFiles,
    TokenFileWriter,
    Tokenizer,
    collate_packed,
    hf_tokenizer,
)

SEQ = 4096
BATCH = 8


def write_corpus(root: Path, tokens: int, seed: int = 0) -> tuple[str, np.ndarray]:
    """A token file of log-normal document lengths (median ~400 tokens), with index."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(6.0, 1.0, tokens // 400 + 1).astype(np.int64), 1, 32768)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    prefix = str(root / "corpus")
    data = rng.integers(0, 50000, int(lengths.sum())).astype(np.uint16)
    with TokenFileWriter(prefix) as writer:
        at = 0
        for length in lengths.tolist():
            writer.add(data[at : at + length])
            at += length
    return prefix, lengths


def timed(run: Callable[[], int]) -> float:
    """Tokens per second of one call of ``run`` (which returns the tokens it made)."""
    started = time.perf_counter()
    tokens = run()
    return tokens / (time.perf_counter() - started)


# -- packing token files into 4,096-token int64 rows, one process -------------------------


def conveyor_concat(prefix: str) -> Callable[[], int]:
    def run() -> int:
        dataset = PackedText(TokenFiles(prefix), Packing(SEQ, boundaries=False))
        loader = conveyor.DataLoader(dataset, batch_size=BATCH, collate_fn=collate_packed)
        return sum(int(batch["input_ids"].numel()) for batch in loader)

    return run


def numpy_ceiling(prefix: str) -> Callable[[], int]:
    """Slices of the memory-mapped file cast to int64 tensors: no labels, no positions."""

    def run() -> int:
        tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
        total = 0
        step = SEQ * BATCH
        for start in range(0, tokens.size - step, step):
            batch = torch.from_numpy(tokens[start : start + step].astype(np.int64)).view(BATCH, SEQ)
            labels = torch.from_numpy(tokens[start + 1 : start + step + 1].astype(np.int64))
            total += batch.numel() + 0 * labels.numel()
        return total

    return run


def grain_concat(prefix: str, lengths: np.ndarray) -> Callable[[], int] | None:
    try:
        import grain
        from grain.experimental import ConcatThenSplitIterDataset
    except ImportError:
        return None

    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))

    def run() -> int:
        tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
        docs = grain.MapDataset.range(len(lengths)).map(
            lambda i: {"input_ids": tokens[starts[i] : starts[i] + lengths[i]].astype(np.int64)}
        )
        packed = ConcatThenSplitIterDataset(
            docs.to_iter_dataset(), length_struct={"input_ids": SEQ}
        )
        batched = packed.batch(BATCH)
        total = 0
        for batch in batched:
            total += int(torch.from_numpy(batch["input_ids"]).numel())
        return total

    return run


def _litdata_document(item: tuple[str, int, int]) -> Any:
    prefix, start, length = item
    tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
    return torch.from_numpy(tokens[start : start + length].astype(np.int32))


def litdata_tokens(prefix: str, lengths: np.ndarray, root: Path) -> Callable[[], int] | None:
    """LitData's token loader: documents written once by ``optimize`` into its chunks, then
    read back as blocks of SEQ + 1 tokens (its pretraining recipe). ``optimize`` is not
    timed."""
    try:
        import litdata as ld
    except ImportError:
        return None
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    out = root / "litdata"
    items = [(prefix, int(a), int(n)) for a, n in zip(starts, lengths, strict=True)]
    ld.optimize(
        fn=_litdata_document,
        inputs=items,
        output_dir=str(out),
        chunk_size=(SEQ + 1) * 512,
        item_loader=ld.TokensLoader(),
        num_workers=1,
        verbose=False,
        start_method="fork",
    )

    def run() -> int:
        dataset = ld.StreamingDataset(str(out), item_loader=ld.TokensLoader(block_size=SEQ + 1))
        loader = ld.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=0)
        total = 0
        for batch in loader:
            inputs = batch[:, :-1].long()
            total += int(inputs.numel())
        return total

    return run


def hf_flattening(prefix: str, lengths: np.ndarray) -> Callable[[], int] | None:
    try:
        from transformers import DataCollatorWithFlattening
    except ImportError:
        return None
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    collator = DataCollatorWithFlattening(return_position_ids=True)

    def run() -> int:
        # the HF recipe: documents grouped greedily up to SEQ tokens per row, flattened
        tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
        total = 0
        row: list[dict[str, Any]] = []
        filled = 0
        for start, whole in zip(starts.tolist(), lengths.tolist(), strict=True):
            length = min(whole, SEQ)
            if filled + length > SEQ:
                out = collator(row)
                total += int(out["input_ids"].numel())
                row, filled = [], 0
            row.append({"input_ids": tokens[start : start + length].tolist()})
            filled += length
        return total

    return run


# -- best-fit padding ------------------------------------------------------------------


def padding_of(prefix: str, method: str, window: int) -> float:
    dataset = PackedText(TokenFiles(prefix), Packing(SEQ, method=method, window=window))  # type: ignore[arg-type]
    rows = 0
    pad = 0
    for row in dataset:
        rows += 1
        pad += int((row["labels"] == -100).sum()) - (len(row["cu_seqlens"]) - 2)
    return pad / (rows * SEQ)


# -- tokenization in workers -----------------------------------------------------------


def text_corpus(root: Path, megabytes: float) -> tuple[str, list[str], Any]:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers, trainers

    rng = np.random.default_rng(1)
    words = [
        "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), int(rng.integers(2, 9))))
        for _ in range(5000)
    ]
    texts: list[str] = []
    size = 0
    while size < megabytes * 1e6:
        text = " ".join(rng.choice(words, int(rng.lognormal(5.0, 0.8))))
        texts.append(text)
        size += len(text)
    url = str(root / "texts.jsonl")
    with open(url, "w") as out:
        for text in texts:
            out.write(json.dumps({"text": text}) + "\n")
    tok = HFTokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        texts[:2000],
        trainers.BpeTrainer(vocab_size=8000, special_tokens=["[UNK]", "</s>"], show_progress=False),
    )
    return url, texts, tok


def bare_tokenizer(texts: list[str], tok: Any, method: str) -> Callable[[], int]:
    """The tokenizer alone on texts in memory, batches of 256, its own threads (2 cores)."""
    encode = getattr(tok, method)

    def run() -> int:
        total = 0
        for start in range(0, len(texts), 256):
            total += sum(len(e.ids) + 1 for e in encode(texts[start : start + 256]))
        return total

    return run


class _TitanTokenizer:
    """torchtitan's tokenizer interface (encode with bos/eos) over the same HF tokenizer."""

    def __init__(self, tok: Any) -> None:
        self.tok, self.eos = tok, tok.token_to_id("</s>")

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids: list[int] = self.tok.encode(text).ids
        return ([self.eos] if add_bos else []) + ids + ([self.eos] if add_eos else [])


def torchtitan_text(url: str, tok: Any) -> Callable[[], int] | None:
    """torchtitan's HuggingFaceTextDataset (its c4 loader on a local JSONL directory),
    through its ParallelAwareDataloader, one process (its default: no workers)."""
    try:
        from torchtitan.components.dataloader import ParallelAwareDataloader
        from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset
    except ImportError:
        return None
    directory = str(Path(url).parent / "titan")
    os.makedirs(directory, exist_ok=True)
    if not os.path.exists(directory + "/train.jsonl"):
        os.link(url, directory + "/train.jsonl")

    def run() -> int:
        dataset = HuggingFaceTextDataset("c4_test", directory, _TitanTokenizer(tok), seq_len=SEQ)
        loader = ParallelAwareDataloader(dataset, dp_rank=0, dp_world_size=1, batch_size=BATCH)
        return sum(int(inputs["input"].numel()) for inputs, _ in loader)

    return run


def conveyor_tokenizing(url: str, tok: Any, workers: int) -> Callable[[], int]:
    def run() -> int:
        tokenizer = Tokenizer(hf_tokenizer(tok), eos_id=tok.token_to_id("</s>"))
        source = JsonlDocuments(url, unit_bytes=1 << 20)  # ~6 units: both workers busy
        pad = tok.get_vocab_size() + 1  # an id the tokenizer never gives: counts padding
        packing = Packing(SEQ, boundaries=False, pad_id=pad)
        dataset = PackedText(source, packing, tokenizer=tokenizer)
        loader = conveyor.DataLoader(
            dataset, batch_size=BATCH, num_workers=workers, collate_fn=collate_packed
        )
        return sum(int((batch["input_ids"] != pad).sum()) for batch in loader)

    return run


# -- resume time and state size --------------------------------------------------------


def resume_cost(prefix: str, sources: int) -> tuple[float, int, int]:
    """Seconds from a new loader's construction to its first batch after loading a
    checkpoint taken mid-unit with 2 workers (resumed without workers: another topology);
    the size in bytes (JSON) of one worker's state and of the merged progress."""

    def make() -> PackedText:
        named = {f"s{i}": TokenFiles(prefix, unit_tokens=1 << 20) for i in range(sources)}
        return PackedText(named, Packing(SEQ, boundaries=False), shuffle=True)

    loader = conveyor.DataLoader(make(), batch_size=BATCH, num_workers=2)
    iterator = iter(loader)
    for _ in itertools.islice(iterator, 37):
        pass
    state = loader.state_dict()
    del iterator
    import pickle

    worker_states = [pickle.loads(s) for s in state["workers"]["states"] if s is not None]
    one = len(json.dumps(worker_states[0]))
    merged = conveyor.merge_checkpoints([state])
    started = time.perf_counter()
    resumed = conveyor.DataLoader(make(), batch_size=BATCH)  # in process, as the peers
    resumed.load_state_dict(merged)
    next(iter(resumed))
    seconds = time.perf_counter() - started
    return seconds, one, len(json.dumps(merged["elastic"]))


def _size(state: Any) -> int:
    """Bytes of a state as JSON, or pickled when it holds bytes or arrays."""
    try:
        return len(json.dumps(state))
    except TypeError:
        import pickle

        return len(pickle.dumps(state))


def peer_resumes(prefix: str, lengths: np.ndarray, root: Path, url: str, tok: Any) -> list[str]:
    """Rows of the resume table for the peers that keep a state: 37 batches, checkpoint,
    a new loader restored from it, seconds to its first batch."""
    rows = []
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    try:
        import grain
        from grain.experimental import ConcatThenSplitIterDataset

        tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")

        def grain_iter() -> Any:
            docs = grain.MapDataset.range(len(lengths)).map(
                lambda i: {"input_ids": tokens[starts[i] : starts[i] + lengths[i]].astype(np.int64)}
            )
            packed = ConcatThenSplitIterDataset(
                docs.to_iter_dataset(), length_struct={"input_ids": SEQ}
            )
            return iter(packed.batch(BATCH))

        it = grain_iter()
        for _ in range(37):
            next(it)
        state = it.get_state()
        started = time.perf_counter()
        again = grain_iter()
        again.set_state(state)
        next(again)
        rows.append(
            f"| Grain ConcatThenSplit | {time.perf_counter() - started:.3f} "
            f"| {_size(state)} B | same pipeline only |"
        )
    except ImportError:
        pass
    try:
        import litdata as ld

        out = str(root / "litdata")

        def litdata_loader() -> Any:
            dataset = ld.StreamingDataset(out, item_loader=ld.TokensLoader(block_size=SEQ + 1))
            return ld.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=0)

        loader = litdata_loader()
        it = iter(loader)
        for _ in range(37):
            next(it)
        state = loader.state_dict()
        del it
        started = time.perf_counter()
        again = litdata_loader()
        again.load_state_dict(state)
        next(iter(again))
        rows.append(
            f"| LitData TokensLoader | {time.perf_counter() - started:.3f} "
            f"| {_size(state)} B | same world size and workers |"
        )
    except (ImportError, FileNotFoundError):
        pass
    try:
        from torchtitan.components.dataloader import ParallelAwareDataloader
        from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset

        directory = str(Path(url).parent / "titan")

        def titan_loader() -> Any:
            dataset = HuggingFaceTextDataset(
                "c4_test", directory, _TitanTokenizer(tok), seq_len=SEQ
            )
            return ParallelAwareDataloader(dataset, dp_rank=0, dp_world_size=1, batch_size=2)

        loader = titan_loader()
        it = iter(loader)
        for _ in range(5):
            next(it)
        state = loader.state_dict()
        del it
        started = time.perf_counter()
        again = titan_loader()
        again.load_state_dict(state)
        next(iter(again))
        rows.append(
            f"| torchtitan HuggingFaceTextDataset | {time.perf_counter() - started:.3f} "
            f"| {_size(state)} B | same dp world size (asserted) |"
        )
    except ImportError:
        pass
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=16_000_000)
    parser.add_argument("--text-mb", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prefix, lengths = write_corpus(root, args.tokens)
        print(
            f"load before: {os.getloadavg()}; {int(lengths.sum()):,} tokens, "
            f"{len(lengths):,} documents"
        )
        packers: dict[str, Callable[[], int] | None] = {
            "numpy slices (ceiling)": numpy_ceiling(prefix),
            "conveyor PackedText concat": conveyor_concat(prefix),
            "Grain ConcatThenSplit": grain_concat(prefix, lengths),
            "LitData TokensLoader (after optimize)": litdata_tokens(prefix, lengths, root),
            "HF DataCollatorWithFlattening": hf_flattening(prefix, lengths),
        }
        runs: dict[str, list[float]] = {name: [] for name, run in packers.items() if run}
        for _ in range(args.repeats):
            for name, run in packers.items():
                if run is not None:
                    runs[name].append(timed(run))
        print(
            "\n| packing token files into 4,096-token int64 rows, 1 process "
            "| M tokens/s | vs conveyor |"
        )
        print("|---|---|---|")
        ours = statistics.median(runs["conveyor PackedText concat"])
        for name, values in runs.items():
            median = statistics.median(values)
            print(f"| {name} | {median / 1e6:.1f} | {median / ours:.2f}x |")
        missing = [name for name, run in packers.items() if run is None]
        if missing:
            print(f"(not installed: {', '.join(missing)})")
        print("\n| best-fit padding, log-normal lengths, seq_len 4,096 | padding |")
        print("|---|---|")
        for window in (64, 1024):
            print(f"| best_fit window {window} | {padding_of(prefix, 'best_fit', window):.3%} |")
        print(f"| concat | {padding_of(prefix, 'concat', 1):.3%} |")
        url, texts, tok = text_corpus(root, args.text_mb)
        tokenizing = {
            "bare encode_batch (2 threads)": bare_tokenizer(texts, tok, "encode_batch"),
            "bare encode_batch_fast (2 threads)": bare_tokenizer(texts, tok, "encode_batch_fast"),
            "conveyor 2 process workers": conveyor_tokenizing(url, tok, 2),
            "torchtitan HuggingFaceTextDataset (1 process)": torchtitan_text(url, tok),
        }
        tok_runs: dict[str, list[float]] = {name: [] for name, run in tokenizing.items() if run}
        for _ in range(args.repeats):
            for name, run in tokenizing.items():
                if run is not None:
                    tok_runs[name].append(timed(run))
        bare = statistics.median(tok_runs["bare encode_batch (2 threads)"])
        fast = statistics.median(tok_runs["bare encode_batch_fast (2 threads)"])
        print("\n| tokenization + packing, 2 cores | M tokens/s | vs encode_batch | vs _fast |")
        print("|---|---|---|---|")
        for name, values in tok_runs.items():
            median = statistics.median(values)
            print(f"| {name} | {median / 1e6:.2f} | {median / bare:.2f}x | {median / fast:.2f}x |")
        print(
            "\n| resume mid-unit, 2 workers -> 0 | seconds to first batch "
            "| one worker's state | merged state |"
        )
        print("|---|---|---|---|")
        for sources in (1, 64):
            seconds, one, merged = resume_cost(prefix, sources)
            print(f"| conveyor, {sources} source(s) | {seconds:.3f} | {one} B | {merged} B |")
        print("\n| peers: resume mid-epoch | seconds to first batch | state | resumes on |")
        print("|---|---|---|---|")
        for row in peer_resumes(prefix, lengths, root, url, tok):
            print(row)
        print(f"\nload after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
