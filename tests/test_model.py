"""The model against section 3: encodings, masks, shared embeddings, incremental decoding."""

import math

import pytest
import torch

from reproduce.config import ModelConfig
from reproduce.model import key_values
from reproduce.model.key_values import StaticKeyValues, StaticPositions
from reproduce.model.layers import DecoderLayer, EncoderLayer
from reproduce.model.parameter_count import analytic_parameter_count
from reproduce.model.positional import SinusoidalPositions, sinusoidal_table
from reproduce.model.token_layout import TokenLayout
from reproduce.model.transformer import DecoderCache, Transformer
from reproduce.special_tokens import BOS, EOS, PAD

VOCAB = 40


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    settings = dict(layers=2, d_model=32, d_ff=64, heads=4, d_k=8, d_v=8, dropout=0.0)
    return Transformer(ModelConfig(**(settings | overrides)), VOCAB).eval()


def random_tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, VOCAB, (batch, length), generator=generator)


@pytest.mark.parametrize("position, index", [(0, 0), (1, 0), (1, 1), (7, 4), (50, 10), (123, 31)])
def test_sinusoidal_encoding_equals_the_papers_formula(position, index):
    d_model = 32
    table = sinusoidal_table(200, d_model)
    angle = position / 10000 ** ((index - index % 2) / d_model)
    expected = math.sin(angle) if index % 2 == 0 else math.cos(angle)
    assert table[position, index].item() == pytest.approx(expected, abs=1e-6)


def test_positions_past_the_initial_table_get_the_papers_encodings():
    """A sentence longer than the table built at first (1,024 positions) extends it: the
    encodings there and before are still eq. (section 3.5)'s, read off ``sinusoidal_table``
    (checked against the formula above)."""
    positions = SinusoidalPositions(16, initial_length=4)
    assert torch.equal(positions(torch.arange(5), 5), sinusoidal_table(5, 16))
    assert torch.equal(positions(torch.arange(30), 30), sinusoidal_table(30, 16))
    assert torch.equal(positions(torch.tensor([3, 2]), 4), sinusoidal_table(4, 16)[[3, 2]])


def test_an_extended_table_keeps_the_dtype_the_module_was_cast_to():
    """Past the table built at first, the encodings come in the module's dtype still (a float64
    model's sums of embeddings and positions stay float64, as the formula's values)."""
    positions = SinusoidalPositions(16, initial_length=4).double()
    extended = positions(torch.arange(30), 30)
    assert extended.dtype == torch.float64
    assert torch.equal(extended, sinusoidal_table(30, 16).double())


def test_embeddings_and_output_projection_share_one_matrix():
    model = tiny_model()
    embedding_parameters = [p for p in model.parameters() if p.shape == (VOCAB, 32)]
    assert len(embedding_parameters) == 1
    source, target = random_tokens(1, 5), random_tokens(1, 4, seed=2)
    logits = model(source, target)
    logits[0, 0, 7].backward()
    assert model.embedding.weight.grad[7].abs().sum() > 0  # used by the output projection


def test_changing_later_target_tokens_leaves_earlier_outputs_unchanged():
    model = tiny_model()
    source = random_tokens(2, 6)
    target = random_tokens(2, 8, seed=3)
    altered = target.clone()
    altered[:, 5:] = random_tokens(2, 3, seed=4)
    original, changed = model(source, target), model(source, altered)
    assert torch.allclose(original[:, :5], changed[:, :5], atol=1e-6)
    assert not torch.allclose(original[:, 5:], changed[:, 5:], atol=1e-3)


def test_padding_does_not_change_the_outputs_at_real_positions():
    model = tiny_model()
    short_source, short_target = random_tokens(1, 4), random_tokens(1, 3, seed=2)
    alone = model(short_source, short_target)
    batch_source = torch.full((3, 9), PAD)
    batch_target = torch.full((3, 7), PAD)
    batch_source[0, :4], batch_target[0, :3] = short_source[0], short_target[0]
    batch_source[1:], batch_target[1:] = random_tokens(2, 9, seed=5), random_tokens(2, 7, seed=6)
    in_batch = model(batch_source, batch_target)
    assert torch.allclose(alone[0], in_batch[0, :3], atol=1e-5)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
@pytest.mark.parametrize("capacity", [None, 12])
def test_incremental_decoding_equals_the_full_forward_pass(positional, capacity):
    """On the growing cache, and (a capacity) on keys and values in buffers of 12 positions,
    written where the device's position says: the stale positions beyond it never count."""
    model = tiny_model(positional=positional, max_positions=64)
    source = random_tokens(3, 7)
    source[2, 5:] = PAD
    target = torch.cat([torch.full((3, 1), BOS), random_tokens(3, 9, seed=7)], dim=1)
    full = model(source, target)
    encoded = model.encode(source)
    cache = DecoderCache()
    if capacity is not None:
        cache = DecoderCache(static=StaticPositions(capacity, torch.zeros((), dtype=torch.long)))
    steps = [model.decode(target[:, t : t + 1], encoded, cache) for t in range(target.size(1))]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    if capacity is None:
        assert cache.length == target.size(1)
    else:  # counted on the device only
        assert int(cache.static.written) == target.size(1) and cache.length == 0


@pytest.mark.parametrize("overrides", [{}, {"attention_radius": 2}])
def test_a_static_cache_reads_only_the_window_its_caller_reaches(overrides, monkeypatch):
    """Keys and values in buffers of 16 positions, of which each step reads a window of the
    first 4, 8, ... (the positions written, rounded up): during a step the buffers beyond it
    hold NaN, which any read would spread, and the steps still equal the full pass."""
    monkeypatch.setattr(key_values, "READ_WINDOW_STRIDE", 4)
    model = tiny_model(**overrides)
    source = random_tokens(3, 7)
    target = torch.cat([torch.full((3, 1), BOS), random_tokens(3, 9, seed=7)], dim=1)
    full = model(source, target)
    encoded = model.encode(source)
    positions = StaticPositions(16, torch.zeros((), dtype=torch.long))
    cache, steps, windows = DecoderCache(static=positions), [], []

    def beyond_the_window(value: float) -> None:
        for layer in cache.layers:
            for buffer in layer["self"].values():
                buffer[:, :, positions.window :] = value

    for t in range(target.size(1)):
        windows.append(positions.reach(t + 1))
        beyond_the_window(float("nan"))
        steps.append(model.decode(target[:, t : t + 1], encoded, cache))
        beyond_the_window(0.0)  # as never written: a later window holds them, masked
    assert windows == [4] * 4 + [8] * 4 + [12] * 2
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_a_static_cache_reorders_its_window_in_place_and_leaves_the_rest():
    """Beam search's reorder on static buffers: the window's rows move (in the same memory, which
    a replayed graph reads), and the positions after it, never written yet, are left alone."""
    positions = StaticPositions(8, torch.zeros((), dtype=torch.long), window=4)
    store = StaticKeyValues(positions)
    store["keys"] = torch.arange(3.0).view(3, 1, 1, 1).expand(3, 2, 8, 4).clone()
    store["values"] = store["keys"].clone()
    addresses = [buffer.data_ptr() for buffer in store.values()]
    store.reorder(torch.tensor([2, 2, 0]))
    assert [buffer.data_ptr() for buffer in store.values()] == addresses
    for buffer in store.values():
        assert buffer[:, :, :4].flatten(1).eq(torch.tensor([[2.0], [2.0], [0.0]])).all()
        assert buffer[:, :, 4:].flatten(1).eq(torch.tensor([[0.0], [1.0], [2.0]])).all()


@pytest.mark.parametrize(("positions", "window"), [(1, 32), (32, 32), (33, 64), (90, 90)])
def test_a_window_is_the_positions_reached_rounded_up_to_the_stride_within_the_capacity(
        positions, window):
    static = StaticPositions(90, torch.zeros((), dtype=torch.long))
    assert static.window == 90  # all of it until a caller narrows it
    assert static.reach(positions) == static.window == window


def test_a_cached_prefix_of_several_tokens_is_causal_too():
    model = tiny_model()
    source, target = random_tokens(2, 5), random_tokens(2, 6, seed=8)
    full = model(source, target)
    encoded, cache = model.encode(source), DecoderCache()
    first = model.decode(target[:, :4], encoded, cache)
    rest = model.decode(target[:, 4:], encoded, cache)
    assert torch.allclose(torch.cat([first, rest], dim=1), full, atol=1e-5)


def test_heads_of_any_size_independent_of_d_model():
    for heads, d_k, d_v in [(1, 32, 32), (2, 4, 16), (8, 2, 2)]:
        model = tiny_model(heads=heads, d_k=d_k, d_v=d_v)
        assert model(random_tokens(2, 5), random_tokens(2, 4)).shape == (2, 4, VOCAB)
        assert model.num_parameters() == analytic_parameter_count(model.config, VOCAB)


def test_learned_positions_refuse_sequences_longer_than_configured():
    model = tiny_model(positional="learned", max_positions=8)
    with pytest.raises(ValueError, match="max_positions=8"):
        model(random_tokens(1, 9), random_tokens(1, 3))


def test_dropout_is_applied_in_training_only():
    model = tiny_model(dropout=0.5)
    source, target = random_tokens(2, 5), random_tokens(2, 4)
    assert torch.equal(model(source, target), model(source, target))
    model.train()
    assert not torch.equal(model(source, target), model(source, target))


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = tiny_model()
    token = torch.tensor([[EOS]])
    expected = model.embedding.weight[EOS] * math.sqrt(32) + sinusoidal_table(1, 32)[0]
    assert torch.allclose(model._embed(token, TokenLayout.of(token))[0], expected, atol=1e-6)


def test_every_linear_layer_has_xavier_uniform_weights_and_zero_biases():
    """Xavier-uniform: U(-a, a) with a = sqrt(6 / (fan_in + fan_out)), for each projection
    inside a fused weight (Q, K, V) as if separate; drawn at a size where the largest entry
    reaches nearly a and the variance is a^2 / 3."""
    model = tiny_model(d_model=64, d_ff=256, heads=4, d_k=16, d_v=16)
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    # encoder: Q/K/V, W^O, FFN x2; decoder: self Q/K/V, W^O, cross Q, K/V, W^O, FFN x2
    assert len(linears) == 2 * 4 + 2 * 7
    for name, linear in linears:
        parent, leaf = name.rsplit(".", 1)
        fused = {"qkv": "sizes", "kv": "kv_sizes"}.get(leaf)
        sizes = getattr(model.get_submodule(parent), fused) if fused else [linear.out_features]
        for block in torch.split(linear.weight.detach(), sizes):
            bound = math.sqrt(6 / (block.size(0) + block.size(1)))
            assert block.abs().max() <= bound, name
            assert block.abs().max() > 0.95 * bound, name
            assert block.var().item() == pytest.approx(bound**2 / 3, rel=0.15), name
        assert linear.bias is None or not linear.bias.any(), name


@pytest.mark.parametrize("overrides", [{}, {"attention_radius": 2},
                                       {"positional": "learned", "max_positions": 64}])
def test_a_step_on_a_static_cache_reads_nothing_from_the_host_count(overrides, monkeypatch):
    """What a replayed CUDA graph needs of a step: no read of the device (a host
    synchronisation, which capture refuses) and nothing taken from the host's count of positions
    (a recorded graph would replay its value of the recording forever)."""
    from tests.test_beam_search import HostReads

    model = tiny_model(**overrides)
    source, target = random_tokens(3, 7), random_tokens(3, 4, seed=7)
    encoded = model.encode(source)
    static = DecoderCache(static=StaticPositions(12, torch.zeros((), dtype=torch.long)))
    growing = DecoderCache()
    for t in range(3):  # the first step fills the caches' buffers and the source's keys
        model.decode(target[:, t : t + 1], encoded, static)
        model.decode(target[:, t : t + 1], encoded, growing)
    expected = model.decode(target[:, 3:4], encoded, growing)
    static.length = 999  # a host count that the step must not read
    reads = HostReads(monkeypatch)
    with torch.inference_mode():
        step = model.decode(target[:, 3:4], encoded, static)
    assert reads.count == 0
    assert torch.allclose(step, expected, atol=1e-5)


def _randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter drawn at random (biases and layer-norm gains too) in float64, so that no
    term of a formula hides behind a zero bias or a unit gain."""
    generator = torch.Generator().manual_seed(seed)
    module.double()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
                            * 0.3)
    return module.eval()


def _layer_norm(x, norm):
    """LayerNorm written out: (x - mean) / sqrt(biased variance + eps) * gain + bias."""
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias


def _multi_head(x_q, x_kv, w_q, b_q, w_k, b_k, w_v, b_v, output, heads, causal):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = softmax(Q_i K_i^T / sqrt(d_k))
    V_i, one head at a time, for one sentence ``x_q`` [Tq, d] against ``x_kv`` [Tk, d]; head i
    owns rows i*d_k..(i+1)*d_k of each fused projection."""
    d_k, d_v = w_q.size(0) // heads, w_v.size(0) // heads
    contexts = []
    for i in range(heads):
        rows_k, rows_v = slice(i * d_k, (i + 1) * d_k), slice(i * d_v, (i + 1) * d_v)
        q = x_q @ w_q[rows_k].T + b_q[rows_k]
        k = x_kv @ w_k[rows_k].T + b_k[rows_k]
        v = x_kv @ w_v[rows_v].T + b_v[rows_v]
        scores = q @ k.T / math.sqrt(d_k)
        if causal:
            later = torch.ones(len(x_q), len(x_kv), dtype=torch.bool).triu(1)
            scores = scores.masked_fill(later, float("-inf"))
        contexts.append(scores.softmax(-1) @ v)
    return torch.cat(contexts, -1) @ output.weight.T + output.bias


def _self_attention_reference(module, x, causal):
    w_q, w_k, w_v = module.qkv.weight.split(module.sizes)
    b_q, b_k, b_v = module.qkv.bias.split(module.sizes)
    return _multi_head(x, x, w_q, b_q, w_k, b_k, w_v, b_v, module.output, module.heads, causal)


def _cross_attention_reference(module, x, memory):
    w_k, w_v = module.kv.weight.split(module.kv_sizes)
    b_k, b_v = module.kv.bias.split(module.kv_sizes)
    return _multi_head(x, memory, module.query.weight, module.query.bias, w_k, b_k, w_v, b_v,
                       module.output, module.heads, False)


def _feed_forward_reference(module, x):
    """Eq. 2: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2."""
    hidden = torch.clamp(x @ module.inner.weight.T + module.inner.bias, min=0)
    return hidden @ module.outer.weight.T + module.outer.bias


LAYER_CONFIG = ModelConfig(layers=1, d_model=12, d_ff=20, heads=3, d_k=5, d_v=3, dropout=0.0)


def _sentences(lengths, seed):
    """A right-padded batch of random vectors ``[B, T, d]`` and its layout (PAD beyond each
    sentence's length)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), max(lengths), LAYER_CONFIG.d_model, generator=generator,
                    dtype=torch.float64)
    padding = torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None]
    return x, padding


@pytest.mark.parametrize("packed", [None, "varlen", "flex"])
def test_an_encoder_layer_is_post_norm_self_attention_then_feed_forward(packed):
    """Section 3.1 and 5.4, each sentence alone: y = LayerNorm(x + MultiHead(x, x, x)),
    out = LayerNorm(y + FFN(y)), written out head by head in float64 against the layer on a
    padded batch (and on packed tokens)."""
    layer = _randomize(EncoderLayer(LAYER_CONFIG))
    lengths = [4, 6, 1]
    x, padding = _sentences(lengths, seed=1)
    layout = TokenLayout(padding, packed=packed)
    with torch.no_grad():
        out = layout.pad(layer(layout.unpad(x), layout))
        for row, length in enumerate(lengths):
            alone = x[row, :length]
            y = _layer_norm(alone + _self_attention_reference(layer.attention, alone, False),
                            layer.attention_residual.norm)
            expected = _layer_norm(y + _feed_forward_reference(layer.feed_forward, y),
                                   layer.feed_forward_residual.norm)
            torch.testing.assert_close(out[row, :length], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("packed", [None, "varlen", "flex"])
def test_a_decoder_layer_is_masked_self_attention_cross_attention_then_feed_forward(packed):
    """Section 3.1: masked self-attention (position i sees positions <= i), attention over the
    encoder's output of the same sentence, the FFN, each in LayerNorm(x + Sublayer(x)); written
    out head by head in float64, each sentence alone."""
    layer = _randomize(DecoderLayer(LAYER_CONFIG), seed=2)
    target_lengths, source_lengths = [5, 2, 3], [3, 6, 1]
    x, padding = _sentences(target_lengths, seed=3)
    memory, memory_padding = _sentences(source_lengths, seed=4)
    layout = TokenLayout(padding, packed=packed)
    memory_layout = TokenLayout(memory_padding, packed=packed)
    with torch.no_grad():
        out = layout.pad(layer(layout.unpad(x), layout, memory_layout.unpad(memory),
                               memory_layout))
        for row, (length, source_length) in enumerate(zip(target_lengths, source_lengths,
                                                          strict=True)):
            alone, encoded = x[row, :length], memory[row, :source_length]
            y = _layer_norm(alone + _self_attention_reference(layer.self_attention, alone, True),
                            layer.self_attention_residual.norm)
            z = _layer_norm(y + _cross_attention_reference(layer.cross_attention, y, encoded),
                            layer.cross_attention_residual.norm)
            expected = _layer_norm(z + _feed_forward_reference(layer.feed_forward, z),
                                   layer.feed_forward_residual.norm)
            torch.testing.assert_close(out[row, :length], expected, rtol=0, atol=1e-12)


def test_learned_positions_accept_a_sequence_of_exactly_max_positions():
    """``max_positions`` positions are 0..max_positions-1: a sentence of that length fits (one
    longer is refused, above)."""
    model = tiny_model(positional="learned", max_positions=8)
    assert model(random_tokens(1, 8), random_tokens(1, 8)).shape == (1, 8, VOCAB)


def test_every_parameter_takes_part_in_the_output():
    """Every layer of both stacks, and each of its sub-layers' own layer norm, gets a gradient:
    none is skipped or stands in for another."""
    model = tiny_model()
    model(random_tokens(2, 5), random_tokens(2, 4, seed=2)).square().sum().backward()
    unused = [name for name, p in model.named_parameters()
              if p.grad is None or not p.grad.abs().sum() > 0]
    assert unused == []


def test_with_attention_dropout_in_training_the_decoder_stays_causal():
    """Attention dropout computes the weights itself (not SDPA's ``is_causal``): the decoder's
    self-attention must still hide later target tokens (section 3.2.3). Without token keys the
    noise is torch's: the same seed gives both passes the same."""
    model = tiny_model(attention_dropout=0.3).train()
    source = random_tokens(2, 6)
    target = random_tokens(2, 8, seed=3)
    altered = target.clone()
    altered[:, 5:] = random_tokens(2, 3, seed=4)
    torch.manual_seed(5)
    original = model(source, target)
    torch.manual_seed(5)
    changed = model(source, altered)
    assert torch.allclose(original[:, :5], changed[:, :5], atol=1e-6)
    assert not torch.allclose(original[:, :5], model.eval()(source, target)[:, :5], atol=1e-3)


def test_selecting_rows_of_an_encoding_gives_those_sentences_encoder_outputs():
    """Beam search repeats and drops sentences with ``select``: row i of the result is sentence
    ``indices[i]``, its tokens' states and its padding."""
    model = tiny_model()
    source = random_tokens(3, 6)
    source[0, 4:], source[2, 2:] = PAD, PAD
    encoded = model.encode(source)
    indices = torch.tensor([2, 2, 0, 1])
    selected = encoded.select(indices)
    assert torch.equal(selected.layout.padding, encoded.layout.padding[indices])
    assert torch.equal(selected.memory, encoded.memory[indices])


def test_incremental_decoding_extends_the_sinusoid_table_as_the_full_pass_does():
    """Each step tells the positional encoding the end of the positions decoded so far, the new
    one included: past the table built at first (here 4 positions) it grows, and the steps still
    equal the full pass."""
    model = tiny_model()
    model.positions = SinusoidalPositions(32, initial_length=4)
    source = random_tokens(2, 3)  # the encoder leaves the table as it is
    target = torch.cat([torch.full((2, 1), BOS), random_tokens(2, 6, seed=7)], dim=1)
    encoded, cache = model.encode(source), DecoderCache()
    steps = [model.decode(target[:, t : t + 1], encoded, cache) for t in range(target.size(1))]
    model.positions = SinusoidalPositions(32, initial_length=4)
    assert torch.allclose(torch.cat(steps, dim=1), model(source, target), atol=1e-5)
