"""Token-count batching and the micro-batch stream that forms optimizer steps."""

import numpy as np
import torch

from reproduce.data.encoded import EncodedCorpus
from reproduce.special_tokens import BOS, EOS, PAD
from reproduce.training.batching import MicroBatchStream, StreamPosition, collate, pack_batches, padding_waste
from tests.training_fixtures import random_corpus


def test_every_batch_fits_the_token_limit_and_every_pair_appears_once():
    rng = np.random.default_rng(0)
    source_lengths, target_lengths = rng.integers(1, 60, 1000), rng.integers(1, 60, 1000)
    batches = pack_batches(source_lengths, target_lengths, max_tokens=400, max_source_tokens=256)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(1000))
    for batch in batches:
        longest = max((source_lengths[batch] + 1).max(), (target_lengths[batch] + 1).max())
        assert longest * len(batch) <= 400


def test_overlong_pairs_are_left_out():
    batches = pack_batches(np.array([3, 300, 5]), np.array([4, 4, 500]), max_tokens=1000, max_source_tokens=256)
    assert sorted(np.concatenate(batches).tolist()) == [0]


def test_similar_lengths_are_batched_together_so_padding_is_small(tmp_path):
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "c", 2000, seed=1))
    batches = pack_batches(corpus.source_lengths, corpus.target_lengths, 200, 256)
    assert padding_waste(batches, corpus) < 0.25  # random source lengths; targets match them
    shuffled = np.random.default_rng(0).permutation(len(corpus))
    naive = [shuffled[i : i + len(b)] for i, b in zip(np.cumsum([0] + [len(b) for b in batches]), batches)]
    assert padding_waste(batches, corpus) < padding_waste(naive, corpus)


def test_collate_adds_eos_to_sources_and_bos_eos_to_targets(tmp_path):
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "c", 10, seed=2))
    batch = collate(corpus, np.array([0, 1]))
    for row in (0, 1):
        source, target = corpus.source(row).tolist(), corpus.target(row).tolist()
        assert batch.source[row, : len(source) + 1].tolist() == source + [EOS]
        assert batch.target_input[row, : len(target) + 1].tolist() == [BOS] + target
        assert batch.target_output[row, : len(target) + 1].tolist() == target + [EOS]
        assert torch.all(batch.source[row, len(source) + 1 :] == PAD)


def test_the_stream_is_deterministic_resumable_and_reaches_the_token_budget(tmp_path):
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "c", 300, seed=3))
    first = MicroBatchStream(corpus, 120, 256, 300, seed=4)
    steps = [first.next_step() for _ in range(30)]  # several epochs
    for group in steps:
        assert sum(int(corpus.target_lengths[b].sum()) + len(b) for b in group) >= 300
    replay = MicroBatchStream(corpus, 120, 256, 300, seed=4)
    for group in steps[:10]:
        assert all(np.array_equal(a, b) for a, b in zip(group, replay.next_step()))
    resumed = MicroBatchStream(corpus, 120, 256, 300, seed=4,
                               position=StreamPosition(**vars(replay.position)))
    for group in steps[10:]:
        assert all(np.array_equal(a, b) for a, b in zip(group, resumed.next_step()))
