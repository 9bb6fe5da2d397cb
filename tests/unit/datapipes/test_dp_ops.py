"""Operations without a torch counterpart, and edge cases of those with one."""

from __future__ import annotations

import pytest
import torch

from conveyor.datapipes.iter import IterableWrapper, Mapper
from conveyor.datapipes.iter.bucketing import pad_batch
from conveyor.datapipes.map import SequenceWrapper


def pair(x: int) -> list[int]:
    return [x, x]


def test_flatmap() -> None:
    assert list(IterableWrapper(range(3)).flatmap(pair)) == [0, 0, 1, 1, 2, 2]
    assert list(IterableWrapper([[1, 2], [], [3]]).flatmap()) == [1, 2, 3]
    rows = IterableWrapper([("a", [1, 2]), ("b", [3])])
    assert list(rows.flatmap(lambda xs: xs, input_col=1)) == [1, 2, 3]
    with pytest.raises(ValueError, match="input_col"):
        IterableWrapper([1]).flatmap(input_col=0)


def test_header_stops_pulling_at_the_limit() -> None:
    pulled = []
    dp = IterableWrapper(range(100)).map(lambda x: pulled.append(x) or x).header(3)
    assert list(dp) == [0, 1, 2]
    assert pulled == [0, 1, 2]
    assert len(IterableWrapper(range(10)).header(4)) == 4
    assert list(IterableWrapper(range(2)).header(None)) == [0, 1]
    with pytest.raises(ValueError, match="limit"):
        IterableWrapper([1]).header(-1)


def test_cycle_and_repeat() -> None:
    assert list(IterableWrapper(range(3)).cycle(2)) == [0, 1, 2, 0, 1, 2]
    assert list(IterableWrapper(range(3)).cycle(0)) == []
    forever = iter(IterableWrapper(range(2)).cycle())
    assert [next(forever) for _ in range(5)] == [0, 1, 0, 1, 0]
    assert list(IterableWrapper([]).cycle()) == []  # an empty input ends instead of spinning
    assert len(IterableWrapper(range(3)).cycle(4)) == 12
    assert list(IterableWrapper("ab").repeat(3)) == ["a", "a", "a", "b", "b", "b"]
    with pytest.raises(ValueError, match="repetition"):
        IterableWrapper([1]).repeat(0)
    with pytest.raises(ValueError, match="count"):
        IterableWrapper([1]).cycle(-1)


def test_in_memory_cache_replays_without_reading_the_input() -> None:
    reads = []
    dp = IterableWrapper(range(5)).map(lambda x: reads.append(x) or x).in_memory_cache()
    assert list(dp) == [0, 1, 2, 3, 4]
    assert list(dp) == [0, 1, 2, 3, 4]
    assert reads == [0, 1, 2, 3, 4]
    assert len(dp) == 5


def test_in_memory_cache_size_limit_falls_back_to_the_input() -> None:
    reads = []
    blobs = IterableWrapper(range(4)).map(lambda x: reads.append(x) or torch.zeros(300_000))
    dp = blobs.in_memory_cache(size=2)  # 2 MB: two 1.2 MB tensors do not fit
    assert len(list(dp)) == 4
    assert len(list(dp)) == 4
    assert reads == [0, 1, 2, 3] * 2


def test_in_memory_cache_replay_state_rebuilds_in_a_fresh_graph() -> None:
    dp = IterableWrapper(range(6)).in_memory_cache()
    list(dp)
    it = iter(dp)
    head = [next(it), next(it)]
    state = dp.state_dict()
    assert state["replay"] is True
    fresh = IterableWrapper(range(6)).in_memory_cache()
    fresh.load_state_dict(state)
    assert head + list(fresh) == list(range(6))
    assert list(fresh) == list(range(6))  # the rebuilt cache is complete


def test_bucketbatch_groups_similar_items() -> None:
    words = IterableWrapper(["aaaa", "b", "cc", "ddd", "e", "ffff", "gg", "h"])
    batches = list(words.bucketbatch(2, batch_num=2, sort_key=len))
    assert batches == [["b", "cc"], ["ddd", "aaaa"], ["e", "h"], ["gg", "ffff"]]
    assert list(IterableWrapper(range(5)).bucketbatch(2, drop_last=True, batch_num=4)) == [
        [0, 1],
        [2, 3],
    ]


def test_padded_batch() -> None:
    seqs = IterableWrapper([[1, 2, 3], [4], [5, 6]])
    (batch,) = list(seqs.padded_batch(3, padding_value=-1))
    assert batch.tolist() == [[1, 2, 3], [4, -1, -1], [5, 6, -1]]
    mixed = pad_batch([torch.ones(2, 1, dtype=torch.int64), torch.full((1, 3), 0.5)])
    assert mixed.dtype == torch.float32 and mixed.shape == (2, 2, 3)
    with pytest.raises(ValueError, match="same number of dimensions"):
        pad_batch([torch.ones(2), torch.ones(2, 2)])


def test_greedy_join_round_robin_and_uneven_ends() -> None:
    joined = IterableWrapper(range(3)).greedy_join(IterableWrapper("ab"), IterableWrapper([]))
    assert list(joined) == [0, "a", 1, "b", 2]
    assert len(joined) == 5


def test_concat_and_zip_validate_inputs() -> None:
    from conveyor.datapipes.iter import Concater, Zipper

    with pytest.raises(ValueError, match="at least one"):
        Concater()
    assert list(Zipper()) == []  # like zip() and torch's Zipper
    with pytest.raises(TypeError, match="IterDataPipe"):
        Zipper(IterableWrapper([1]), [2])  # type: ignore[arg-type]


def test_to_map_and_back() -> None:
    dp = IterableWrapper([("a", 1), ("b", 2)]).to_map()
    assert dp["b"] == 2 and len(dp) == 2
    with pytest.raises(IndexError, match="invalid"):
        dp["z"]
    keyed = IterableWrapper(range(3)).to_map(lambda x: (x, x * x))
    assert list(keyed.to_iter()) == [0, 1, 4]
    with pytest.warns(UserWarning, match="duplicate key"):
        IterableWrapper([(1, "x"), (1, "y")]).to_map()[1]
    with pytest.raises(ValueError, match="pair"):
        IterableWrapper([1]).to_map()[1]


def test_to_map_is_lazy() -> None:
    reads = []
    dp = IterableWrapper(range(3)).map(lambda x: reads.append(x) or (x, x)).to_map()
    assert reads == []
    assert dp[2] == 2
    assert reads == [0, 1, 2]


def test_map_style_ops() -> None:
    seq = SequenceWrapper(range(7))
    assert [seq.map(lambda x: x * 2)[i] for i in range(7)] == [0, 2, 4, 6, 8, 10, 12]
    batches = seq.batch(3)
    assert len(batches) == 3 and batches[2] == [6]
    with pytest.raises(IndexError):
        seq.batch(3, drop_last=True)[2]
    both = seq.concat(SequenceWrapper("xy"))
    assert len(both) == 9 and both[8] == "y"
    zipped = seq.zip(SequenceWrapper("abc"))
    assert len(zipped) == 3 and zipped[1] == (1, "b")
    assert list(seq.to_iter(indices=[6, 0])) == [6, 0]
    assert seq.nonblocking_get(3) == 3
    assert seq.state_dict() == {"version": 1}


def test_map_shuffle_is_seeded_and_changes_per_pass() -> None:
    dp = SequenceWrapper(range(20)).shuffle().set_seed(4)
    first = list(dp)
    assert sorted(first) == list(range(20)) and first != list(range(20))
    second = list(dp)
    assert second != first
    assert list(dp.set_seed(4)) == first
    assert list(dp.set_shuffle(False)) == list(range(20))
    assert list(SequenceWrapper("abc").shuffle(indices=[2, 1]).set_shuffle(False)) == ["c", "b"]


def test_iter_shuffle_reproducible_and_full_with_big_buffer() -> None:
    def run(seed: int) -> list[int]:
        return list(IterableWrapper(range(50)).shuffle(buffer_size=100).set_seed(seed))

    assert run(1) == run(1) != run(2)
    assert sorted(run(1)) == list(range(50))
    batches = IterableWrapper([[0, 1], [2, 3]]).shuffle(unbatch_level=1).set_seed(0)
    assert sorted(batches) == [0, 1, 2, 3]
    with pytest.raises(AssertionError, match="buffer_size"):
        IterableWrapper([1]).shuffle(buffer_size=0)


def test_fork_copies_and_catch_up() -> None:
    a, b = IterableWrapper([[1], [2]]).fork(2, copy="deep")
    first = list(a)
    first[0].append(99)
    assert list(b) == [[1], [2]]  # b caught up from the buffer, with its own copies
    (only,) = IterableWrapper(range(2)).fork(1)
    assert list(only) == [0, 1]
    with pytest.raises(ValueError, match="copy"):
        IterableWrapper([1]).fork(2, copy="weird")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_instances"):
        IterableWrapper([1]).fork(0)


def test_fork_restart_while_siblings_run_warns_like_torch() -> None:
    a, b = IterableWrapper(range(5)).fork(2)
    it_a, it_b = iter(a), iter(b)
    next(it_a), next(it_b)
    with pytest.warns(UserWarning, match="not exhausted"):
        assert next(iter(a)) == 0
    with pytest.raises(RuntimeError, match="invalidated"):
        next(it_b)


def test_demux_branch_that_stops_early_does_not_hold_items() -> None:
    even, odd = IterableWrapper(range(100)).demux(2, lambda x: x % 2, buffer_size=5)
    it = iter(odd)
    assert next(it) == 1
    del it  # odd stops: its items are dropped instead of overflowing the buffer
    assert list(even) == list(range(0, 100, 2))


def test_map_with_columns_validates_the_function() -> None:
    with pytest.raises(ValueError, match="positional"):
        IterableWrapper([(1, 2)]).map(lambda a: a, input_col=[0, 1])
    with pytest.raises(ValueError, match="output_col"):
        Mapper(IterableWrapper([1]), abs, None, 0)
    with pytest.raises(ValueError, match="single-element"):
        IterableWrapper([(1, 2)]).map(abs, input_col=0, output_col=[0, 1])
