"""The model computes on a batch's tokens only (reproduce.model.token_layout): padding changes
neither a sentence's loss nor its gradient, and never reaches a matrix product."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from reproduce.config import ModelConfig
from reproduce.data.encoded import EncodedCorpus
from reproduce.model.architectures import build_model
from reproduce.model.flops import TransformerFlops
from reproduce.model.token_layout import TokenLayout
from reproduce.special_tokens import BOS, EOS, PAD
from reproduce.training.batching import collate, target_tokens
from reproduce.training.projected_loss import projected_label_smoothed_loss
from reproduce.training.teacher_forcing import TeacherForcedStates
from tests.training_fixtures import random_corpus

VOCAB = 40
LENGTHS = [(5, 3), (2, 6), (7, 1), (1, 4)]  # (source, target) words, EOS/BOS not counted


def test_pad_and_unpad_are_inverse_and_positions_start_at_each_sentence():
    padding = torch.tensor([[False, False, False, True], [False, True, True, True], [False] * 4])
    layout = TokenLayout(padding)
    assert layout.index.tolist() == [0, 1, 2, 4, 8, 9, 10, 11]
    assert layout.positions().tolist() == [0, 1, 2, 0, 0, 1, 2, 3]
    tokens = torch.randn(8, 5)
    padded = layout.pad(tokens)
    assert padded.shape == (3, 4, 5) and (padded[padding] == 0).all()
    assert torch.equal(layout.unpad(padded), tokens)
    assert layout.select(torch.tensor([1, 1])).index.tolist() == [0, 4]


def test_collate_gives_the_token_positions_of_its_padding(tmp_path):
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "c", 50, seed=3))
    batch = collate(corpus, np.arange(0, 50, 7), multiple=8)
    assert torch.equal(batch.source_index, TokenLayout.of(batch.source).index)
    assert torch.equal(batch.target_index, TokenLayout.of(batch.target_input).index)
    assert torch.equal(target_tokens(batch.target_output, batch.target_index),
                       batch.target_output[batch.target_output.ne(PAD)])


def _pairs(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randint(4, VOCAB, (s,), generator=generator),
             torch.randint(4, VOCAB, (t,), generator=generator))
            for s, t in LENGTHS]


def _padded(pairs, width=12):
    """Source ids + EOS, BOS + target ids, target ids + EOS; right-padded to ``width``."""
    source, target_input, target_output = (torch.full((len(pairs), width), PAD) for _ in range(3))
    for row, (s, t) in enumerate(pairs):
        source[row, : len(s) + 1] = torch.cat([s, torch.tensor([EOS])])
        target_input[row, : len(t) + 1] = torch.cat([torch.tensor([BOS]), t])
        target_output[row, : len(t) + 1] = torch.cat([t, torch.tensor([EOS])])
    return source, target_input, target_output


def _loss_and_gradients(model, source, target_input, target_output):
    model.zero_grad()
    states = TeacherForcedStates(model)(source, target_input, TokenLayout.of(source).index,
                                        TokenLayout.of(target_input).index)
    loss, _ = projected_label_smoothed_loss(states, model.embedding.weight,
                                            target_output[target_output.ne(PAD)], 0.1)
    loss.backward()
    return loss.detach(), [parameter.grad.clone() for parameter in model.parameters()]


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_a_padded_batch_gives_the_summed_loss_and_gradients_of_its_sentences_alone(architecture):
    torch.manual_seed(0)
    config = ModelConfig(architecture=architecture, layers=2, d_model=16, d_ff=24, heads=2,
                         dropout=0.0)
    model = build_model(config, VOCAB).double()
    pairs = _pairs()
    batch_loss, batch_gradients = _loss_and_gradients(model, *_padded(pairs))
    alone = [_loss_and_gradients(model, *_padded([pair], width=len(max(pair, key=len)) + 1))
             for pair in pairs]
    assert torch.allclose(batch_loss, sum(loss for loss, _ in alone), rtol=1e-12, atol=0)
    for index, gradient in enumerate(batch_gradients):
        assert torch.allclose(gradient, sum(grads[index] for _, grads in alone), rtol=1e-9,
                              atol=1e-12)


def test_padding_never_reaches_a_matrix_product():
    """On a batch that is 60% padding, the matrix products (everything but attention's) come
    to the exact count for the real tokens: encoder x source tokens, decoder and output
    projection x target tokens."""
    config = ModelConfig(layers=2, d_model=16, d_ff=24, heads=2, d_k=4, d_v=6, dropout=0.0)
    model = build_model(config, VOCAB)
    source, target_input, _ = _padded(_pairs(), width=16)
    with FlopCounterMode(display=False) as counter:
        states = TeacherForcedStates(model)(source, target_input, TokenLayout.of(source).index,
                                            TokenLayout.of(target_input).index)
        F.linear(states, model.embedding.weight)
    counts = counter.get_flop_counts()["Global"]
    matrices = counts.get(torch.ops.aten.mm, 0) + counts.get(torch.ops.aten.addmm, 0)
    sources = np.array([s + 1 for s, _ in LENGTHS])  # + EOS
    targets = np.array([t + 1 for _, t in LENGTHS])  # + BOS
    exact = TransformerFlops(config, VOCAB)
    assert matrices == exact.forward(sources, targets) - exact.attention(sources, targets)
    assert (sources.sum() + targets.sum()) / (2 * source.numel()) < 0.4
