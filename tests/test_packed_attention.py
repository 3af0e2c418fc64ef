"""Attention over packed sentences (reproduce.model.packed_attention): each sentence attends only
to itself, as if run alone (eq. 1 in float64); the varlen kernel, on a GPU, computes the same."""

import itertools

import pytest
import torch

from reproduce.model.attention import CrossAttention, SelfAttention
from reproduce.model.packed_attention import attend_packed, attend_padded, varlen_available
from reproduce.model.token_layout import TokenLayout


def _layout(lengths, device="cpu"):
    padding = torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None]
    return TokenLayout(padding.to(device))


def attend_each_sequence(q, k, v, starts_q: list[int], starts_k: list[int], causal: bool):
    """Eq. 1 within each sequence ``starts[i]:starts[i + 1]`` of queries and keys, in the
    inputs' dtype; a sequence without keys gives zeros (as flash does), a token outside every
    sequence NaN (never written)."""
    out = q.new_full((q.size(0), q.size(1), v.size(2)), float("nan"))
    spans_q = zip(starts_q[:-1], starts_q[1:], strict=True)
    spans_k = zip(starts_k[:-1], starts_k[1:], strict=True)
    for (a, b), (c, d) in zip(spans_q, spans_k, strict=True):
        qi, ki, vi = (x.transpose(0, 1) for x in (q[a:b], k[c:d], v[c:d]))  # [h, n|m, d]
        scores = qi @ ki.transpose(-1, -2) / qi.size(-1) ** 0.5
        if causal:
            scores = scores.masked_fill(~torch.ones(b - a, d - c, dtype=torch.bool).tril(),
                                        float("-inf"))
        out[a:b] = (scores.softmax(-1) @ vi).transpose(0, 1)
    return out


def _alone(q, k, v, q_lengths, k_lengths, causal):
    """Eq. 1 for each sentence on its own, in float64."""
    starts = [[0, *itertools.accumulate(lengths)] for lengths in (q_lengths, k_lengths)]
    return attend_each_sequence(q.double(), k.double(), v.double(), *starts, causal)


CASES = [("encoder", [5, 1, 9, 3], [5, 1, 9, 3], False),
         ("decoder", [4, 7, 2, 6], [4, 7, 2, 6], True),
         ("cross", [4, 7, 2, 6], [5, 1, 9, 3], False)]


@pytest.mark.parametrize(("kind", "q_lengths", "k_lengths", "causal"), CASES)
def test_padded_attention_equals_each_sentence_alone_in_float64(kind, q_lengths, k_lengths,
                                                                 causal):
    torch.manual_seed(0)
    q = torch.randn(sum(q_lengths), 3, 8, dtype=torch.float64)
    k = torch.randn(sum(k_lengths), 3, 8, dtype=torch.float64)
    v = torch.randn(sum(k_lengths), 3, 5, dtype=torch.float64)
    out = attend_padded(q, k, v, _layout(q_lengths), _layout(k_lengths), causal)
    assert out.shape == (sum(q_lengths), 3, 5)
    torch.testing.assert_close(out, _alone(q, k, v, q_lengths, k_lengths, causal), rtol=0,
                               atol=1e-12)


def test_the_cumulative_lengths_are_where_each_sentence_begins():
    assert _layout([5, 1, 9, 3]).cumulative_lengths().tolist() == [0, 5, 6, 15, 18]
    assert _layout([5, 1, 9, 3]).cumulative_lengths().dtype == torch.int32


def test_without_cuda_varlen_falls_back_to_the_padded_reference():
    q = torch.randn(6, 2, 4)
    assert not varlen_available(q)
    layout = _layout([2, 4])
    torch.testing.assert_close(attend_packed(q, q, q, layout, layout, False, varlen=True),
                               attend_padded(q, q, q, layout, layout, False), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize(("kind", "q_lengths", "k_lengths", "causal"), CASES)
def test_varlen_attention_on_the_gpu_follows_the_padded_reference(kind, q_lengths, k_lengths,
                                                                  causal):
    """bf16 flash over packed tokens against float32 padded SDPA of the same inputs, forward and
    backward, with Q, K, V as the model hands them over: views into one fused projection."""
    torch.manual_seed(0)
    queries, keys = _layout(q_lengths, "cuda"), _layout(k_lengths, "cuda")
    heads, d = 8, 64
    fused_q = torch.randn(sum(q_lengths), 3 * heads * d, device="cuda", dtype=torch.bfloat16)
    fused_k = torch.randn(sum(k_lengths), 3 * heads * d, device="cuda", dtype=torch.bfloat16)
    q = fused_q[:, :heads * d].view(-1, heads, d).requires_grad_()
    k = fused_k[:, heads * d:2 * heads * d].view(-1, heads, d).requires_grad_()
    v = fused_k[:, 2 * heads * d:].view(-1, heads, d).requires_grad_()
    assert varlen_available(q)
    grad = torch.randn(sum(q_lengths), heads, d, device="cuda", dtype=torch.bfloat16)
    out = attend_packed(q, k, v, queries, keys, causal, varlen=True)
    grads = torch.autograd.grad(out, (q, k, v), grad)
    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    exact = attend_padded(*leaves, queries, keys, causal)
    exact_grads = torch.autograd.grad(exact, leaves, grad.float())
    for got, want in ((out, exact), *zip(grads, exact_grads, strict=True)):
        assert not got.isnan().any()
        assert float((got.float() - want).norm() / want.norm()) < 1e-2


@pytest.mark.parametrize("radius", [None, 2])
def test_the_model_on_packed_tokens_equals_the_model_on_the_padded_batch_in_float64(radius):
    """Teacher-forced decoder states with ``varlen`` asked for (on a CPU: the packed layers' code
    around the padded reference) against the padded batch's code path; a band (restricted
    self-attention) keeps the padded form."""
    from reproduce.training.teacher_forcing import TeacherForcedStates
    from tests.test_model import random_tokens, tiny_model

    model = tiny_model(attention_radius=radius).double()
    source, target = random_tokens(4, 9, seed=1), random_tokens(4, 7, seed=2)
    source[1, 3:], source[3, 6:], target[0, 2:], target[2, 5:] = 0, 0, 0, 0
    indexes = TokenLayout.of(source).index, TokenLayout.of(target).index
    states = {varlen: TeacherForcedStates(model, varlen_attention=varlen)(source, target, *indexes)
              for varlen in (False, True)}
    torch.testing.assert_close(states[True], states[False], rtol=0, atol=1e-12)


def test_a_bucketed_pass_counts_its_dummy_tokens_in_the_rows_that_hold_them():
    """``cumulative_lengths`` reads the tokens' positions, not the PAD ids: a bucketed pass's
    dummy tokens are PAD ids at token positions (here two in row 1's padding, three in the
    dummy row 2, whose first position is not a token)."""
    tokens = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [2, 0, 0, 0]])
    index = torch.tensor([0, 1, 2, 4, 6, 7, 9, 10, 11])
    assert TokenLayout.of(tokens, index).cumulative_lengths().tolist() == [0, 3, 6, 9]
    assert TokenLayout.of(tokens).cumulative_lengths().tolist() == [0, 3, 4, 5]


def test_attention_dropout_keeps_the_padded_form_when_varlen_is_asked_for():
    """The varlen kernel has no attention dropout: with it on in training, self- and
    encoder-decoder attention compute the dropped weights on the padded batch, varlen asked for
    or not (and the dropout does change the output)."""
    torch.manual_seed(0)
    self_attention = SelfAttention(16, 2, 4, 4, dropout=0.5).double().train()
    cross_attention = CrossAttention(16, 2, 4, 4, dropout=0.5).double().train()
    lengths, source_lengths = [3, 5], [4, 2]
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(sum(lengths), 16, dtype=torch.float64, generator=generator)
    memory = torch.randn(sum(source_lengths), 16, dtype=torch.float64, generator=generator)
    noise = torch.randint(-(2**31), 2**31 - 1, (sum(lengths),), dtype=torch.int32,
                          generator=generator)

    def outputs(varlen):
        layout = TokenLayout(_layout(lengths).padding, noise=noise, varlen=varlen)
        keys = TokenLayout(_layout(source_lengths).padding, varlen=varlen)
        return (self_attention(x, layout, causal=True),
                cross_attention(x, layout, memory, keys))

    padded, packed = outputs(False), outputs(True)
    for got, want in zip(packed, padded, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    self_attention.eval()
    cross_attention.eval()
    assert not torch.allclose(outputs(False)[0], padded[0])
    assert not torch.allclose(outputs(False)[1], padded[1])
