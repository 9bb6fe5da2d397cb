"""RecycledBuffers: big in-process batches reuse memory only once nothing refers to it."""

from __future__ import annotations

import gc

import torch

import conveyor
from conveyor.transport.recycled import RecycledBuffers

MIB = 1 << 20


def test_small_requests_are_declined() -> None:
    buffers = RecycledBuffers(min_bytes=MIB)
    assert buffers.allocate(1000, torch.float32) is None


def test_a_buffer_is_reused_after_its_last_view_dies() -> None:
    buffers = RecycledBuffers(min_bytes=MIB)
    first = buffers.allocate(MIB, torch.uint8)
    assert first is not None
    address = first.data_ptr()
    view = first[10:20]
    del first
    gc.collect()
    assert buffers.free_buffers == 0  # a view is alive
    del view
    gc.collect()
    assert buffers.free_buffers == 1
    again = buffers.allocate(MIB // 4, torch.float32)
    assert again is not None and again.data_ptr() == address and again.dtype == torch.float32


def test_live_buffers_are_never_handed_out_twice() -> None:
    buffers = RecycledBuffers(min_bytes=MIB)
    held = [buffers.allocate(MIB, torch.uint8) for _ in range(3)]
    addresses = {t.data_ptr() for t in held if t is not None}
    assert len(addresses) == 3


def test_a_buffer_far_too_big_is_not_used_for_a_small_request() -> None:
    buffers = RecycledBuffers(min_bytes=MIB)
    big = buffers.allocate(8 * MIB, torch.uint8)
    assert big is not None
    address = big.data_ptr()
    del big
    gc.collect()
    small = buffers.allocate(MIB, torch.uint8)
    assert small is not None and small.data_ptr() != address
    assert buffers.free_buffers == 1  # the big one waits for a request it fits


def test_free_list_is_bounded() -> None:
    buffers = RecycledBuffers(min_bytes=MIB, keep=2)
    held = [buffers.allocate(MIB, torch.uint8) for _ in range(4)]
    del held
    gc.collect()
    assert buffers.free_buffers == 2


class _Images(conveyor.Dataset[torch.Tensor]):
    """Samples of 64 KiB stamped with their index: batches of 32 are 2 MiB stacks."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((256, 256), index % 251, dtype=torch.uint8)


def test_in_process_loader_batches_kept_by_the_user_stay_intact() -> None:
    loader = conveyor.DataLoader(_Images(), batch_size=32, num_workers=0)
    kept = list(loader)  # every batch alive at once: no buffer may be reused
    assert len(kept) == 8
    for number, batch in enumerate(kept):
        expected = torch.tensor([(number * 32 + i) % 251 for i in range(32)], dtype=torch.uint8)
        assert torch.equal(batch[:, 0, 0], expected)
        assert torch.equal(batch.amax(dim=(1, 2)), batch.amin(dim=(1, 2)))


def test_in_process_loader_reuses_buffers_when_batches_are_dropped() -> None:
    loader = conveyor.DataLoader(_Images(), batch_size=32, num_workers=0)
    addresses = set()
    for number, batch in enumerate(loader):
        addresses.add(batch.data_ptr())
        assert int(batch[0, 0, 0]) == (number * 32) % 251
        del batch
    assert len(addresses) <= 2  # one batch alive at a time: a buffer or two in turn
