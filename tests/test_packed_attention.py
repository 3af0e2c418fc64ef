"""Attention over packed sentences (reproduce.model.packed_attention): each sentence attends only
to itself, as if run alone (eq. 1 in float64); the varlen kernel, on a GPU, computes the same."""

import itertools

import pytest
import torch

from reproduce.model.attention import CrossAttention, SelfAttention
from reproduce.model.packed_attention import (attend_flex, attend_packed, attend_padded,
                                              sentence_blocks, varlen_available)
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
    torch.testing.assert_close(attend_packed(q, q, q, layout, layout, False, "varlen"),
                               attend_padded(q, q, q, layout, layout, False), rtol=0, atol=0)


# Sentences across several tiles of 16 tokens, and tokens that fill no whole tile.
TILED_CASES = [("encoder", [5, 1, 19, 3, 40, 2, 17], [5, 1, 19, 3, 40, 2, 17], False),
               ("decoder", [5, 1, 19, 3, 40, 2, 17], [5, 1, 19, 3, 40, 2, 17], True),
               ("cross", [5, 1, 19, 3, 40, 2, 17], [30, 2, 3, 22, 1, 9, 4], False)]


@pytest.mark.parametrize(("kind", "q_lengths", "k_lengths", "causal"), TILED_CASES)
def test_flex_attention_in_tiles_of_several_sentences_equals_each_sentence_alone(
        kind, q_lengths, k_lengths, causal):
    """FlexAttention over the packed tokens in tiles of 16, compiled on the CPU for these sizes
    as training compiles it (its kernel computes only the tiles the block mask lists, as on a
    GPU; forward only there), float32, against eq. 1 for each sentence alone in float64."""
    torch.manual_seed(0)
    q = torch.randn(sum(q_lengths), 3, 8)
    k, v = torch.randn(sum(k_lengths), 3, 8), torch.randn(sum(k_lengths), 3, 8)
    out = torch.compile(attend_flex, dynamic=False)(q, k, v, _layout(q_lengths),
                                                    _layout(k_lengths), causal, 16)
    torch.testing.assert_close(out.double(), _alone(q, k, v, q_lengths, k_lengths, causal),
                               rtol=0, atol=1e-5)


@pytest.mark.parametrize(("kind", "q_lengths", "k_lengths", "causal"), TILED_CASES)
def test_the_flex_tiles_are_every_tile_with_a_pair_of_one_sentence_and_none_beyond(
        kind, q_lengths, k_lengths, causal):
    """The tiles a block of queries computes: every tile that holds a query and a key it may
    attend (a tile left out loses that pair's term), within the span of those tiles (a tile
    beyond it is only work); the mask within a tile, query by query."""
    block = 16
    queries, keys = _layout(q_lengths), _layout(k_lengths)
    mask = sentence_blocks(queries, keys, causal, block)
    q_rows = torch.repeat_interleave(torch.arange(len(q_lengths)), torch.tensor(q_lengths))
    k_rows = torch.repeat_interleave(torch.arange(len(k_lengths)), torch.tensor(k_lengths))
    allowed = q_rows[:, None] == k_rows[None, :]
    if causal:
        allowed &= queries.positions()[:, None] >= keys.positions()[None, :]
    counts, indices = mask.kv_num_blocks[0, 0], mask.kv_indices[0, 0]
    for tile in range(-(-sum(q_lengths) // block)):
        rows = allowed[tile * block:(tile + 1) * block]
        needed = {key // block for key in rows.any(0).nonzero().squeeze(1).tolist()}
        computed = set(indices[tile, :counts[tile]].tolist())
        assert needed <= computed and computed <= set(range(min(needed), max(needed) + 1))
    n, m = sum(q_lengths), sum(k_lengths)
    within = torch.tensor([[bool(mask.mask_mod(0, 0, torch.tensor(i), torch.tensor(j)))
                            for j in range(m)] for i in range(n)])
    assert torch.equal(within, allowed)


def test_a_passs_layers_share_one_flex_mask_and_compile_as_one_graph():
    """Layers over the same tokens build the block mask once (the layout keeps it), inside one
    graph (``fullgraph``: no break), as the compiled pass builds its layouts."""
    lengths = [5, 1, 19, 3, 40, 2, 17]
    layout = _layout(lengths)

    def two_layers(q, padding, index):
        tokens = TokenLayout(padding, index)
        x = attend_flex(q, q, q, tokens, tokens, True, 16)
        return attend_flex(x, x, x, tokens, tokens, True, 16), len(tokens.masks)

    q = torch.randn(sum(lengths), 3, 8, dtype=torch.float64)
    compiled = torch.compile(two_layers, fullgraph=True, backend="aot_eager")
    out, masks = compiled(q, layout.padding, layout.index)
    x = _alone(q, q, q, lengths, lengths, True)
    assert masks == 1
    torch.testing.assert_close(out, _alone(x, x, x, lengths, lengths, True), rtol=0, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["varlen", "flex"])
@pytest.mark.parametrize(("kind", "q_lengths", "k_lengths", "causal"), CASES + TILED_CASES)
def test_packed_attention_on_the_gpu_follows_the_padded_reference(kind, q_lengths, k_lengths,
                                                                  causal, kernel):
    """bf16 flash (varlen) or compiled FlexAttention over packed tokens against float32 padded
    SDPA of the same inputs, forward and backward, with Q, K, V as the model hands them over:
    views into one fused projection. FlexAttention runs its tiles of 128 tokens and of 16."""
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
    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    exact = attend_padded(*leaves, queries, keys, causal)
    exact_grads = torch.autograd.grad(exact, leaves, grad.float())
    runs = ({"varlen": lambda: attend_packed(q, k, v, queries, keys, causal, "varlen")}
            if kernel == "varlen" else
            {block: lambda block=block: torch.compile(attend_flex, dynamic=False)(
                q, k, v, queries, keys, causal, block)
             for block in (128, 16)})
    for run in runs.values():
        out = run()
        grads = torch.autograd.grad(out, (q, k, v), grad)
        for got, want in ((out, exact), *zip(grads, exact_grads, strict=True)):
            assert not got.isnan().any()
            assert float((got.float() - want).norm() / want.norm()) < 1e-2


@pytest.mark.parametrize("kernel", ["varlen", "flex"])
@pytest.mark.parametrize("radius", [None, 2])
def test_the_model_on_packed_tokens_equals_the_model_on_the_padded_batch_in_float64(radius,
                                                                                  kernel):
    """Teacher-forced decoder states with a packed kernel asked for (on a CPU: the packed
    layers' code around the padded reference) against the padded batch's code path; a band
    (restricted self-attention) keeps the padded form."""
    from reproduce.training.teacher_forcing import TeacherForcedStates
    from tests.test_model import random_tokens, tiny_model

    model = tiny_model(attention_radius=radius).double()
    source, target = random_tokens(4, 9, seed=1), random_tokens(4, 7, seed=2)
    source[1, 3:], source[3, 6:], target[0, 2:], target[2, 5:] = 0, 0, 0, 0
    indexes = TokenLayout.of(source).index, TokenLayout.of(target).index
    states = {packed: TeacherForcedStates(model, packed)(source, target, *indexes)
              for packed in (None, kernel)}
    torch.testing.assert_close(states[kernel], states[None], rtol=0, atol=1e-12)


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

    def outputs(packed):
        layout = TokenLayout(_layout(lengths).padding, noise=noise, packed=packed)
        keys = TokenLayout(_layout(source_lengths).padding, packed=packed)
        return (self_attention(x, layout, causal=True),
                cross_attention(x, layout, memory, keys))

    padded, packed = outputs(None), outputs("varlen")
    for got, want in zip(packed, padded, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    self_attention.eval()
    cross_attention.eval()
    assert not torch.allclose(outputs(False)[0], padded[0])
    assert not torch.allclose(outputs(False)[1], padded[1])
