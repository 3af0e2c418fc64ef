"""Token-count batching: micro-batches of a fixed token budget, steps of a fixed number of them,
fused device passes, and the resumable stream."""

import numpy as np

from reproduce.data.encoded import EncodedCorpus
from reproduce.special_tokens import BOS, EOS, PAD
from reproduce.training.batching import (
    MicroBatchStream, StreamPosition, collate, device_passes, evaluation_batches, pack_batches,
    pack_micro_batches,
)
from reproduce.model.dropout import mix_host, step_key
from tests.training_fixtures import VOCAB, random_corpus, write_encoded


def padding_waste(batches, corpus):
    """Fraction of the padded tensors' cells (both sides) that hold padding."""
    real = cells = 0
    for indices in batches:
        source, target = corpus.source_lengths[indices] + 1, corpus.target_lengths[indices] + 1
        real += int(source.sum() + target.sum())
        cells += len(indices) * int(source.max() + target.max())
    return 1.0 - real / cells


def wmt_like_lengths(pairs, seed=0):
    rng = np.random.default_rng(seed)
    source = np.clip(rng.lognormal(np.log(26), 0.6, pairs).astype(int), 1, 240)
    target = np.clip((source * rng.normal(1.05, 0.15, pairs)).astype(int), 1, 240)
    return source, target


def wmt_like_corpus(folder, pairs, seed) -> EncodedCorpus:
    """An encoded corpus of ``pairs`` random-token pairs (64 pieces) of WMT-like lengths."""
    source, target = wmt_like_lengths(pairs, seed=seed)
    rng = np.random.default_rng(0)
    write_encoded(folder, 64, [(rng.integers(4, 64, s).tolist(), rng.integers(4, 64, t).tolist())
                               for s, t in zip(source, target, strict=True)])
    return EncodedCorpus.open(folder)


def test_evaluation_batches_fit_the_padded_limit_and_hold_every_pair_once():
    rng = np.random.default_rng(0)
    source_lengths, target_lengths = rng.integers(1, 60, 1000), rng.integers(1, 60, 1000)
    batches = pack_batches(source_lengths, target_lengths, max_tokens=400, max_source_tokens=256)
    assert sorted(np.concatenate(batches).tolist()) == list(range(1000))
    for batch in batches:
        longest = max((source_lengths[batch] + 1).max(), (target_lengths[batch] + 1).max())
        assert longest * len(batch) <= 400


def test_overlong_and_empty_pairs_are_left_out():
    batches = pack_batches(np.array([3, 300, 5, 0]), np.array([4, 4, 500, 3]), max_tokens=1000,
                           max_source_tokens=256)
    assert sorted(np.concatenate(batches).tolist()) == [0]
    micro = pack_micro_batches(np.array([3, 300, 5, 0]), np.array([4, 4, 500, 3]), 100, 256)
    assert sorted(np.concatenate(micro).tolist()) == [0]


def test_micro_batches_hold_the_budget_on_both_sides_without_systematic_overshoot():
    source, target = wmt_like_lengths(50_000)
    budget = 3125
    batches = pack_micro_batches(source, target, budget, 256)
    assert sorted(np.concatenate(batches).tolist()) == list(range(50_000))
    source_sizes, target_sizes = source + 1, target + 1
    per_batch = np.array([(source_sizes[b].sum(), target_sizes[b].sum()) for b in batches])
    for (source_total, target_total), batch in zip(per_batch, batches, strict=True):
        # a pair joins only while it overshoots by at most half its own size, on each side
        last_source, last_target = source_sizes[batch].max(), target_sizes[batch].max()
        assert source_total <= budget + last_source / 2 and target_total <= budget + last_target / 2
    full = per_batch[:-1]  # the last micro-batch holds what is left
    binding = full.max(axis=1)  # the side that filled up
    assert abs(binding.mean() - budget) / budget < 0.01
    # The other side is close too (lengths correlate).
    assert np.all(full.min(axis=1) > 0.6 * budget)


def test_device_passes_split_a_micro_batch_by_length_into_as_few_passes_as_hold_the_tokens(
        tmp_path):
    """A pass is bounded by its real tokens on each side (EOS and BOS included), not by its
    padded size: a pass of many short sentences and one of few long ones take as many."""
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "c", 500, seed=1))
    micro_batch = pack_micro_batches(corpus.source_lengths, corpus.target_lengths, 400, 256)[3]

    def tokens(indices):
        return max(int(lengths[indices].sum()) + len(indices)
                   for lengths in (corpus.source_lengths, corpus.target_lengths))

    for max_tokens, expected in ((1, len(micro_batch)), (150, None), (10**6, 1)):
        passes = device_passes(micro_batch, corpus, max_tokens)
        assert sorted(np.concatenate(passes).tolist()) == sorted(micro_batch.tolist())
        assert all(tokens(indices) <= max_tokens for indices in passes if len(indices) > 1)
        # Each pass is as large as fits.
        for current, following in zip(passes, passes[1:], strict=False):
            assert tokens(np.append(current, following[0])) > max_tokens
        if expected is None:
            assert 1 < len(passes) < len(micro_batch)
        else:
            assert len(passes) == expected
    # The padded size is not the bound: one pass holds what padded would take several.
    padded = max(int(lengths[micro_batch].max()) + 1
                 for lengths in (corpus.source_lengths, corpus.target_lengths)) * len(micro_batch)
    assert padded > tokens(micro_batch)
    assert len(device_passes(micro_batch, corpus, tokens(micro_batch))) == 1


def test_similar_lengths_are_batched_together_so_padding_is_small(tmp_path):
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "c", 2000, seed=1))
    batches = pack_micro_batches(corpus.source_lengths, corpus.target_lengths, 100, 256)
    assert padding_waste(batches, corpus) < 0.25  # random source lengths; targets match them
    shuffled = np.random.default_rng(0).permutation(len(corpus))
    naive = [shuffled[i : i + len(b)] for i, b in zip(np.cumsum([0] + [len(b) for b in batches]),
                                                      batches, strict=False)]
    assert padding_waste(batches, corpus) < padding_waste(naive, corpus)


def test_collate_adds_eos_to_sources_and_bos_eos_to_targets_and_rounds_widths(tmp_path):
    """Every row of a batch in any order of pairs, sides of other lengths than each other: the
    sentence's tokens, EOS / BOS, then PAD; the tokens' flat positions; each token's dropout key
    as its pair alone would have it."""
    rng = np.random.default_rng(3)
    write_encoded(tmp_path / "c", VOCAB, [
        (rng.integers(4, VOCAB, rng.integers(1, 20)).tolist(),
         rng.integers(4, VOCAB, rng.integers(1, 20)).tolist()) for _ in range(40)])
    corpus = EncodedCorpus.open(tmp_path / "c")
    indices = np.array([17, 3, 39, 0, 22, 8])
    batch = collate(corpus, indices, multiple=8, step_key=step_key(5, 2))
    sources = [corpus.source(i).tolist() for i in indices]
    targets = [corpus.target(i).tolist() for i in indices]
    source_width = -(-max(len(s) + 1 for s in sources) // 8) * 8
    target_width = -(-max(len(t) + 1 for t in targets) // 8) * 8
    assert batch.source.shape == (6, source_width) and batch.target_input.shape == (6, target_width)
    for row, (source, target) in enumerate(zip(sources, targets, strict=True)):
        source_padding = [PAD] * (source_width - len(source) - 1)
        assert batch.source[row].tolist() == source + [EOS] + source_padding
        padding = [PAD] * (target_width - len(target) - 1)
        assert batch.target_input[row].tolist() == [BOS] + target + padding
        assert batch.target_output[row].tolist() == target + [EOS] + padding
    for side, (sentences, width, positions, keys) in enumerate([
            (sources, source_width, batch.source_index, batch.source_noise),
            (targets, target_width, batch.target_index, batch.target_noise)]):
        assert positions.tolist() == [row * width + t for row, sentence in enumerate(sentences)
                                      for t in range(len(sentence) + 1)]
        assert keys.tolist() == [_token_key(step_key(5, 2), int(pair), side, t)
                                 for pair, sentence in zip(indices, sentences, strict=True)
                                 for t in range(len(sentence) + 1)]


def _token_key(step: int, pair: int, side: int, position: int) -> int:
    """A token's dropout key as reproduce/model/dropout.py defines it, one token at a time: the
    top 32 bits of splitmix64's finaliser of step + mix(2 pair + side) + position x gamma (mod
    2^64), as an int32."""
    sentence = int(mix_host(np.array([2 * pair + side], dtype=np.uint64))[0])
    counter = (step + sentence + position * 0x9E3779B97F4A7C15) % 2**64
    top = int(mix_host(np.array([counter], dtype=np.uint64))[0]) >> 32
    return top - 2**32 if top >= 2**31 else top


def test_the_stream_is_deterministic_resumable_and_lands_on_the_token_budget(tmp_path):
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "c", 300, seed=3))
    first = MicroBatchStream(corpus, 300, 8, 256, seed=4)
    steps = [first.next_step() for _ in range(30)]  # several epochs
    assert all(len(group) == 8 for group in steps)
    per_step = np.array([[sum(int(lengths[b].sum()) + len(b) for b in group)
                          for lengths in (corpus.source_lengths, corpus.target_lengths)]
                         for group in steps])
    assert abs(per_step.max(axis=1).mean() - 300) / 300 < 0.1
    replay = MicroBatchStream(corpus, 300, 8, 256, seed=4)
    for group in steps[:10]:
        assert all(np.array_equal(a, b) for a, b in zip(group, replay.next_step(), strict=True))
    resumed = MicroBatchStream(corpus, 300, 8, 256, seed=4)
    resumed.seek(StreamPosition(**vars(replay.position)))
    for group in steps[10:]:
        assert all(np.array_equal(a, b) for a, b in zip(group, resumed.next_step(), strict=True))


def test_a_pair_is_left_out_by_its_target_too_empty_or_one_position_too_long():
    """The target side is held to the same limits as the source: an empty target (EOS alone)
    or one of ``max_source_tokens + 1`` positions is out; ``max_source_tokens`` positions fit."""
    source, target = np.array([3, 3, 3, 255, 256]), np.array([0, 255, 256, 3, 3])
    for batches in (pack_batches(source, target, max_tokens=10**6, max_source_tokens=256),
                    pack_micro_batches(source, target, 10**6, 256)):
        assert sorted(np.concatenate(batches).tolist()) == [1, 3]


def test_pairs_are_packed_in_order_of_target_then_source_size():
    """Pairs are sorted by (target, source) length before packing: the target first, the
    source breaking ties."""
    source, target = np.array([1, 5, 3, 2]), np.array([4, 2, 2, 9])
    (batch,) = pack_micro_batches(source, target, 10**6, 256)
    assert batch.tolist() == [2, 1, 0, 3]


def test_device_passes_sort_by_length_and_are_bounded_by_the_target_side_too(tmp_path):
    """A rank's pairs go to the passes sorted by (target, source) size; a pass closes when
    either side would exceed ``max_tokens``: here the short sources (2 positions each) would all
    fit in 20, the targets (10 each) only two by two."""
    write_encoded(tmp_path / "sorted", VOCAB, [([5] * n, [6] * n) for n in (5, 1, 3, 2)])
    corpus = EncodedCorpus.open(tmp_path / "sorted")
    (single,) = device_passes(np.arange(4), corpus, 10**6)
    assert single.tolist() == [1, 3, 2, 0]
    write_encoded(tmp_path / "long", VOCAB, [([5], [6] * 9)] * 4)
    passes = device_passes(np.arange(4), EncodedCorpus.open(tmp_path / "long"), 20)
    assert [len(indices) for indices in passes] == [2, 2]


def test_each_epoch_visits_every_micro_batch_once_in_a_new_order(tmp_path):
    """Section 5.1 trains for many epochs; each epoch visits all micro-batches once, in an
    order drawn afresh (seeded by the epoch), not the first epoch's order again."""
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "c", 300, seed=3))
    stream = MicroBatchStream(corpus, 40, 1, 256, seed=4)
    count = len(stream.batches)
    visits = [int(stream.next_step()[0][0]) for _ in range(2 * count)]
    firsts = sorted(int(batch[0]) for batch in stream.batches)
    assert sorted(visits[:count]) == firsts and sorted(visits[count:]) == firsts
    assert visits[:count] != visits[count:]


def test_evaluation_batches_hold_a_pair_whose_target_is_the_longest_sentence(tmp_path):
    """Dev loss and perplexity score every pair exactly once: the limit evaluation packs under
    is set by the longest sentence on either side, so a target longer than every source is not
    left out; and a width is the longest sentence plus EOS, no wider, with ``multiple`` 1."""
    write_encoded(tmp_path / "c", VOCAB, [([5] * 3, [6] * 4), ([5] * 2, [6] * 30), ([5], [6])])
    corpus = EncodedCorpus.open(tmp_path / "c")
    batches = evaluation_batches(corpus, max_tokens=1)
    assert sorted(np.concatenate(batches).tolist()) == [0, 1, 2]
    batch = collate(corpus, np.array([0, 1]))
    assert batch.source.shape == (2, 4) and batch.target_output.shape == (2, 31)


def test_a_pair_overshooting_the_budget_by_exactly_half_its_size_still_joins():
    """A pair joins while it overshoots the budget by at most half its own size: with a budget
    of 10, a pair of 8 positions after one of 6 (total 14, over by 4 = 8 / 2) joins; one of 9
    after 6 (over by 5 > 4.5) starts the next micro-batch."""
    joins = pack_micro_batches(np.array([5, 7]), np.array([5, 7]), 10, 256)
    assert [batch.tolist() for batch in joins] == [[0, 1]]
    splits = pack_micro_batches(np.array([5, 8]), np.array([5, 8]), 10, 256)
    assert [batch.tolist() for batch in splits] == [[0], [1]]
