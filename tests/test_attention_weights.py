"""Attention weights for inspection (Figures 3-5) and restricted self-attention (section 4):
the recomputed weights times V give exactly what the fused SDPA path computes."""

import pytest
import torch

from reproduce.config import ModelConfig
from reproduce.model.attention import CrossAttention, SelfAttention, band_mask
from reproduce.model.inspection import attention_maps
from reproduce.model.token_layout import TokenLayout
from reproduce.model.transformer import DecoderCache, Transformer

D_MODEL, HEADS, D_K, D_V = 32, 4, 8, 6


def _merge_heads(module, weights, v):
    context = weights @ v  # [B, h, Tq, d_v]
    batch, _, length, _ = context.shape
    return module.output(context.transpose(1, 2).reshape(batch, length, HEADS * D_V))


def _inputs(batch=2, length=7, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, D_MODEL, generator=generator)
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[1, -3:] = True  # the second sentence is 3 tokens shorter
    return x, padding


def _self_attention(radius=None):
    torch.manual_seed(0)
    return SelfAttention(D_MODEL, HEADS, D_K, D_V, dropout=0.0, radius=radius).eval()


@pytest.mark.parametrize("radius", [None, 0, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_weights_times_values_equal_the_sdpa_output(radius, causal):
    module, (x, padding) = _self_attention(radius), _inputs()
    layout = TokenLayout(padding)
    with torch.no_grad():
        weights = module.attention_weights(layout.unpad(x), layout, causal)
        v = module.qkv(x).split(module.sizes, dim=-1)[2].masked_fill(padding[..., None], 0.0)
        v = v.view(2, 7, HEADS, D_V).transpose(1, 2)
        expected = module(layout.unpad(x), layout, causal=causal)  # [N, d] at the tokens
    assert weights.shape == (2, HEADS, 7, 7)
    assert torch.allclose(weights.sum(-1), torch.ones(2, HEADS, 7))
    assert torch.allclose(layout.unpad(_merge_heads(module, weights, v)), expected, atol=1e-6)
    assert (weights[1, :, :-3, -3:] == 0).all()  # real tokens put no weight on padding
    if causal:
        assert (weights.triu(1) == 0).all()  # no weight on later positions


def test_cross_attention_weights_times_values_equal_the_sdpa_output():
    torch.manual_seed(0)
    module = CrossAttention(D_MODEL, HEADS, D_K, D_V, dropout=0.0).eval()
    x, _ = _inputs(length=5, seed=1)
    memory, memory_padding = _inputs(length=7, seed=2)
    memory_layout = TokenLayout(memory_padding)
    queries = TokenLayout.dense(2, 5, "cpu")
    with torch.no_grad():
        weights = module.attention_weights(queries.unpad(x), queries, memory_layout.unpad(memory),
                                           memory_layout)
        v = module.kv(memory).split(module.kv_sizes, dim=-1)[1]
        v = v.view(2, 7, HEADS, D_V).transpose(1, 2)
        expected = module(queries.unpad(x), queries, memory_layout.unpad(memory), memory_layout)
    assert weights.shape == (2, HEADS, 5, 7) and (weights[1, :, :, -3:] == 0).all()
    assert torch.allclose(queries.unpad(_merge_heads(module, weights, v)), expected, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_keys_outside_the_radius_get_zero_weight(causal):
    radius, length = 2, 9
    module, (x, _) = _self_attention(radius), _inputs(length=length)
    layout = TokenLayout.dense(2, length, "cpu")
    with torch.no_grad():
        weights = module.attention_weights(layout.unpad(x), layout, causal=causal)
    i, j = torch.meshgrid(torch.arange(length), torch.arange(length), indexing="ij")
    outside = ((i - j).abs() > radius) | ((j > i) if causal
                                          else torch.zeros_like(i, dtype=torch.bool))
    assert (weights[..., outside] == 0).all()
    assert (weights[..., ~outside] > 0).all()


def test_band_mask_by_hand():
    assert band_mask(4, 4, radius=1, causal=False).int().tolist() == [
        [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    # Two new decoder positions (3 and 4) after 3 cached ones, radius 1, causal.
    assert band_mask(2, 5, radius=1, causal=True, offset=3).int().tolist() == [
        [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]


def _model(**overrides):
    torch.manual_seed(0)
    config = ModelConfig(layers=2, d_model=D_MODEL, d_ff=64, heads=HEADS, d_k=D_K, d_v=D_V,
                         dropout=0.0, **overrides)
    return Transformer(config, 40).eval()


def test_a_radius_at_least_the_length_equals_full_attention():
    source = torch.randint(4, 40, (2, 9), generator=torch.Generator().manual_seed(3))
    target = torch.randint(4, 40, (2, 8), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = _model()(source, target)
        assert torch.allclose(_model(attention_radius=9)(source, target), full, atol=1e-5)
        assert not torch.allclose(_model(attention_radius=1)(source, target), full, atol=1e-3)


def test_restricted_incremental_decoding_equals_the_full_pass():
    model = _model(attention_radius=2)
    source = torch.randint(4, 40, (2, 6), generator=torch.Generator().manual_seed(5))
    target = torch.randint(4, 40, (2, 7), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        encoded = model.encode(source)
        full = model.decode(target, encoded)
        cache = DecoderCache()
        steps = [model.decode(target[:, t : t + 1], encoded, cache) for t in range(7)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_restricted_encoder_stays_finite_when_padding_is_far_from_every_real_token():
    model = _model(attention_radius=1)
    source = torch.randint(4, 40, (2, 9), generator=torch.Generator().manual_seed(7))
    source[1, 2:] = 0  # PAD: 7 padding positions, most more than 1 away from a real token
    with torch.no_grad():
        encoded = model.encode(source)
        alone = model.encode(source[1:, :2])
    weights = attention_maps(model, source, source[:, :4])["encoder_self"]
    assert torch.isfinite(encoded.memory).all()
    assert all(torch.isfinite(layer).all() for layer in weights)
    assert all((layer[1, :, :2, 2:] == 0).all() for layer in weights)  # none on padding
    # Padding changes nothing for the real tokens: the sentence encoded without it agrees.
    assert torch.allclose(encoded.memory[1, :2], alone.memory[0], atol=1e-5)


def test_model_attention_maps_reproduce_the_models_own_output():
    """Rebuild the decoder's output from the inspected weights of every layer: it must equal
    the SDPA path's, so the plotted weights are the ones the model used."""
    model = _model()
    source = torch.randint(4, 40, (2, 6), generator=torch.Generator().manual_seed(8))
    source[1, -2:] = 0
    target = torch.randint(4, 40, (2, 5), generator=torch.Generator().manual_seed(9))
    maps = attention_maps(model, source, target)
    assert [m.shape for m in maps["encoder_self"]] == [(2, HEADS, 6, 6)] * 2
    assert [m.shape for m in maps["decoder_self"]] == [(2, HEADS, 5, 5)] * 2
    assert [m.shape for m in maps["cross"]] == [(2, HEADS, 5, 6)] * 2
    # Every position computed as a token (padding too, which the masks hide from real ones).
    sources, targets = TokenLayout.dense(2, 6, "cpu"), TokenLayout.dense(2, 5, "cpu")
    with torch.no_grad():
        memory = model._embed(source, sources)
        for layer, weights in zip(model.encoder, maps["encoder_self"], strict=True):
            attention = layer.attention
            v = attention.qkv(memory).split(attention.sizes, dim=-1)[2]
            v = v.view(2, 6, HEADS, D_V).transpose(1, 2)
            merged = sources.unpad(_merge_heads(attention, weights, v))
            memory = layer.attention_residual(memory, merged, sources)
            memory = layer.feed_forward_residual(memory, layer.feed_forward(memory), sources)
        memory = sources.pad(memory)
        real = source.ne(0)  # the model computes no values at padding (zeros there)
        assert torch.allclose(memory[real], model.encode(source).memory[real], atol=1e-5)
        y = model._embed(target, targets)
        for index, layer in enumerate(model.decoder):
            attention = layer.self_attention
            v = attention.qkv(y).split(attention.sizes, dim=-1)[2]
            v = v.view(2, 5, HEADS, D_V).transpose(1, 2)
            merged = targets.unpad(_merge_heads(attention, maps["decoder_self"][index], v))
            y = layer.self_attention_residual(y, merged, targets)
            cross = layer.cross_attention
            v = cross.kv(memory).split(cross.kv_sizes, dim=-1)[1]
            v = v.view(2, 6, HEADS, D_V).transpose(1, 2)
            merged = targets.unpad(_merge_heads(cross, maps["cross"][index], v))
            y = layer.cross_attention_residual(y, merged, targets)
            y = layer.feed_forward_residual(y, layer.feed_forward(y), targets)
        y = targets.pad(y)
        assert torch.allclose(y, model.decoder_states(target, model.encode(source)), atol=1e-5)


def test_attention_maps_are_the_evaluation_modes_and_leave_the_model_in_its_mode():
    """Figures 3-5 show the trained model's attention: with dropout in the model, the maps of a
    model in training mode are those of the same model in evaluation mode (no embedding or
    residual dropout on the way), and the model is handed back in the mode it came in."""
    torch.manual_seed(0)
    config = ModelConfig(layers=2, d_model=D_MODEL, d_ff=64, heads=HEADS, d_k=D_K, d_v=D_V,
                         dropout=0.3)
    model = Transformer(config, 40).train()
    source = torch.randint(4, 40, (2, 6), generator=torch.Generator().manual_seed(8))
    target = torch.randint(4, 40, (2, 5), generator=torch.Generator().manual_seed(9))
    torch.manual_seed(1)
    in_training = attention_maps(model, source, target)
    assert model.training
    in_evaluation = attention_maps(model.eval(), source, target)
    assert not model.training
    for kind, layers in in_evaluation.items():
        for trained, evaluated in zip(in_training[kind], layers, strict=True):
            assert torch.equal(trained, evaluated), kind
