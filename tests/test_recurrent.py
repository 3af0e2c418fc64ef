"""The recurrent baseline (model.architecture: rnn): Luong-style attention, incremental decoding,
padding, exact FLOPs and parameters by hand, and the real trainer and decoder around it."""

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from reproduce.config import ModelConfig
from reproduce.decoding.translate import load_model
from reproduce.model.architectures import build_model
from reproduce.model.flops import RecurrentFlops, model_flops
from reproduce.model.parameter_count import analytic_parameter_count
from reproduce.model.recurrent import RecurrentSeq2Seq
from reproduce.model.transformer import DecoderCache
from reproduce.special_tokens import BOS, EOS, PAD
from reproduce.training.checkpoints import load_checkpoint
from reproduce.training.assembly import build_trainer
from tests.training_fixtures import TINY, random_corpus, small_variant

VOCAB = 40
KINDS = ["multiplicative", "additive"]


def tiny_rnn(kind: str, seed: int = 0, **overrides) -> RecurrentSeq2Seq:
    torch.manual_seed(seed)
    settings = dict(architecture="rnn", rnn_attention=kind, layers=2, d_model=16, dropout=0.0)
    return build_model(ModelConfig(**(settings | overrides)), VOCAB).eval()


def random_tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, VOCAB, (batch, length), generator=generator)


@pytest.mark.parametrize("kind", KINDS)
def test_incremental_decoding_equals_the_full_forward_pass(kind):
    model = tiny_rnn(kind)
    source = random_tokens(3, 7)
    source[2, 4:] = PAD
    target = torch.cat([torch.full((3, 1), BOS), random_tokens(3, 9, seed=7)], dim=1)
    full = model(source, target)
    encoded, cache = model.encode(source), DecoderCache()
    steps = [model.decode(target[:, t : t + 1], encoded, cache) for t in range(target.size(1))]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    assert cache.length == target.size(1)
    # A prefix of several tokens, then the rest, after beam search's row reordering.
    order = torch.tensor([2, 0, 1])
    encoded, cache = model.encode(source).select(order), DecoderCache()
    first = model.decode(target[order, :4], encoded, cache)
    cache.reorder(torch.tensor([1, 2, 0]))  # rows now 0, 1, 2 of the original batch
    rest = model.decode(target[:, 4:], encoded.select(torch.tensor([1, 2, 0])), cache)
    assert torch.allclose(first[torch.tensor([1, 2, 0])], full[:, :4], atol=1e-5)
    assert torch.allclose(rest, full[:, 4:], atol=1e-5)
    assert cache.length == target.size(1)  # positions decoded, several a call or one


@pytest.mark.parametrize("kind", KINDS)
def test_a_sentence_gives_the_same_outputs_alone_and_inside_a_padded_batch(kind):
    model = tiny_rnn(kind)
    short_source, short_target = random_tokens(1, 4), random_tokens(1, 3, seed=2)
    alone = model(short_source, short_target)
    batch_source, batch_target = torch.full((3, 9), PAD), torch.full((3, 7), PAD)
    batch_source[1, :4], batch_target[1, :3] = short_source[0], short_target[0]
    batch_source[[0, 2]] = random_tokens(2, 9, seed=5)
    batch_target[[0, 2]] = random_tokens(2, 7, seed=6)
    in_batch = model(batch_source, batch_target)
    assert torch.allclose(alone[0], in_batch[1, :3], atol=1e-5)
    # Padding reaches neither the encoder's states (packed) nor the attention (masked).
    encoded = model.encode(batch_source)
    assert encoded.memory[1, 4:].abs().max() == 0
    assert torch.allclose(encoded.memory[1, :4], model.encode(short_source).memory[0], atol=1e-6)


def test_the_decoder_starts_from_the_encoders_final_states_layer_by_layer():
    model = tiny_rnn("multiplicative")
    source = random_tokens(2, 5)
    source[1, 3:] = PAD
    encoded = model.encode(source)
    assert encoded.hidden.shape == encoded.cell.shape == (2, 2, 16)  # [B, layers, d_model]
    # The top layer's final states: forward = the output at the last real position, backward =
    # the output at the first position (it ran right to left), each d_model/2 wide.
    for row, length in enumerate([5, 3]):
        assert torch.allclose(encoded.hidden[row, -1, :8], encoded.memory[row, length - 1, :8])
        assert torch.allclose(encoded.hidden[row, -1, 8:], encoded.memory[row, 0, 8:])


@pytest.mark.parametrize("kind", KINDS)
def test_attention_weights_are_a_distribution_over_real_source_positions(kind):
    model = tiny_rnn(kind)
    source = random_tokens(2, 6)
    source[0, 2:] = PAD
    encoded = model.encode(source)
    queries = torch.randn(2, 3, 16)
    weights = model.attention.weights(queries, encoded.keys, encoded.padding)
    assert torch.allclose(weights.sum(dim=-1), torch.ones(2, 3))
    assert weights[0, :, 2:].abs().max() == 0
    if kind == "multiplicative":  # Luong's "general" score h_t^T W_a h_s, by hand
        W = model.attention.key_projection.weight
        scores = torch.einsum("td,de,se->ts", queries[1], W, encoded.memory[1])
        assert torch.allclose(weights[1], torch.softmax(scores, dim=-1), atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_the_attentional_state_combines_the_attention_context_with_the_decoder_state(kind):
    """Luong eq. 5: h~_t = tanh(W_c [c_t; h_t]), with c_t the attention-weighted sum of the
    encoder states over the real source positions: the context, not h_t again, fills the first
    half of what W_c sees."""
    model = tiny_rnn(kind)
    source = random_tokens(2, 6)
    source[0, 3:] = PAD
    target = torch.cat([torch.full((2, 1), BOS), random_tokens(2, 4, seed=3)], dim=1)
    encoded = model.encode(source)
    seen = []
    handle = model.combine.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    with torch.no_grad():
        states = model.decoder_states(target, encoded)
    handle.remove()
    (combined,) = seen
    outputs = combined[..., 16:]
    context = model.attention.weights(outputs, encoded.keys, encoded.padding) @ encoded.memory
    assert torch.allclose(combined[..., :16], context, atol=1e-6)
    assert torch.allclose(states, torch.tanh(combined @ model.combine.weight.T), atol=1e-6)


def test_both_lstms_read_the_shared_embedding_times_sqrt_d_model_and_the_logits_use_it_too():
    """The module's docstring: one embedding matrix for source, target and output, initialised
    N(0, d_model^-0.5) and multiplied by sqrt(d_model) (here 4) on input, as the Transformer's
    (section 3.4); the logits are h~_t times the same matrix."""
    model = tiny_rnn("multiplicative")
    source = random_tokens(2, 5)
    target = torch.cat([torch.full((2, 1), BOS), random_tokens(2, 3, seed=4)], dim=1)
    inputs = []
    hooks = [lstm.register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
             for lstm in (model.encoder, model.decoder)]
    with torch.no_grad():
        logits = model(source, target)
        states = model.decoder_states(target, model.encode(source))
    for hook in hooks:
        hook.remove()
    assert torch.allclose(inputs[0], model.embedding.weight[source] * 4)
    assert torch.allclose(inputs[1], model.embedding.weight[target] * 4)
    assert torch.allclose(logits, states @ model.embedding.weight.T, atol=1e-6)


def test_parameters_equal_the_hand_count():
    # d = 4, V = 10, one layer: embedding 40; encoder 2 directions x (4*2*(4+2) + 2*4*2) = 2 x 64;
    # decoder 4*4*(4+4) + 2*4*4 = 160; W_a 16; W_c 2*4*4 = 32.
    multiplicative = ModelConfig(architecture="rnn", layers=1, d_model=4)
    assert analytic_parameter_count(multiplicative, 10) == 40 + 128 + 160 + 16 + 32
    additive = multiplicative.model_copy(update={"rnn_attention": "additive"})
    assert analytic_parameter_count(additive, 10) == 40 + 128 + 160 + 16 + 16 + 4 + 32
    for kind in KINDS:
        model = tiny_rnn(kind, layers=3)
        assert model.num_parameters() == analytic_parameter_count(model.config, VOCAB)


def test_flops_equal_the_hand_count():
    """d = 4 (2 units per encoder direction), 2 layers, V = 10, one pair of s = 3, t = 2."""
    config = ModelConfig(architecture="rnn", layers=2, d_model=4)
    encoder_layer = 2 * (2 * 4 * 2 * (4 + 2))  # 2 directions x 2 x 4 gates x 2 units x (in + units)
    per_source = 2 * encoder_layer + 2 * 4 * 4  # + W_a h_s
    decoder_layer = 2 * 4 * 4 * (4 + 4)
    per_target = 2 * decoder_layer + 2 * 8 * 4 + 2 * 4 * 10  # + W_c [c; h] + output projection
    pairs = 2 * 3 * (2 * 4 + 2 * 4)  # score and context, per (target, source) pair
    assert (encoder_layer, per_source, per_target, pairs) == (192, 416, 656, 96)
    flops = model_flops(config, 10)
    assert isinstance(flops, RecurrentFlops)
    assert flops.forward([3], [2]) == 3 * 416 + 2 * 656 + 96 == 2656
    additive = model_flops(config.model_copy(update={"rnn_attention": "additive"}), 10)
    assert additive.forward([3], [2]) == 2656 + 2 * (2 * 4 * 4)  # + W_1 h_t per target token
    assert flops.training([3, 1], [2, 5]) == 3 * (flops.forward([3], [2]) + flops.forward([1], [5]))


@pytest.mark.parametrize("kind", KINDS)
def test_flops_outside_the_lstms_equal_the_torch_counter_on_the_real_model(kind):
    """torch's counter has no formula for aten.lstm (it counts 0, checked here), so it measures
    everything but the recurrent layers: attention, W_c and the output projection."""
    model = tiny_rnn(kind)
    flops = RecurrentFlops(model.config, VOCAB)
    source, target = random_tokens(1, 7), random_tokens(1, 5, seed=3)
    with FlopCounterMode(display=False) as counter:
        model.encoder(torch.randn(1, 7, 16))
    assert counter.get_total_flops() == 0
    with FlopCounterMode(display=False) as counter:
        model(source, target)
    lstm = 7 * 2 * 2 * 2 * 4 * 8 * (16 + 8) + 5 * 2 * 2 * 4 * 16 * (16 + 16)
    assert counter.get_total_flops() == flops.forward([7], [5]) - lstm


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 400, seed=1), random_corpus(folder / "dev", 40, seed=2)


def rnn_variant(steps: int, dropout: float, kind: str = "multiplicative", **training):
    variant = small_variant(steps, dropout, **training)
    model = variant.model.model_copy(update={"architecture": "rnn", "rnn_attention": kind})
    return variant.model_copy(update={"model": model})


@pytest.mark.parametrize("kind", KINDS)
def test_the_trainer_lowers_the_loss_and_saves_a_model_translate_loads(corpora, tmp_path, kind):
    train, dev = corpora
    trainer = build_trainer(rnn_variant(40, 0.0, kind, warmup_steps=10), TINY, train, dev, tmp_path)
    assert isinstance(trainer.model, RecurrentSeq2Seq) and isinstance(trainer.flops, RecurrentFlops)
    trainer.run()
    rows = [json.loads(line)
            for line in (tmp_path / "train/metrics.jsonl").read_text().splitlines()]
    losses = [row["train_loss"] for row in rows if "train_loss" in row]
    assert losses[-1] < losses[0] - 0.3
    summary = json.loads((tmp_path / "train/summary.json").read_text())
    assert summary["parameters"] == analytic_parameter_count(trainer.config, 40)
    assert summary["training_flops"] > 0
    model = load_model(tmp_path / "train/final.pt")
    assert isinstance(model, RecurrentSeq2Seq) and model.config.rnn_attention == kind
    source, target = torch.tensor([[5, 9, 12, EOS], [7, 30, EOS, PAD]]), random_tokens(2, 4)
    assert torch.equal(model(source, target), trainer.model.eval()(source, target))


def test_resuming_equals_an_uninterrupted_run_bitwise(corpora, tmp_path):
    train, dev = corpora
    variant = rnn_variant(9, 0.1)
    build_trainer(variant, TINY, train, dev, tmp_path / "straight").run()
    build_trainer(variant, TINY, train, dev, tmp_path / "resumed").run(stop_after_steps=5)
    assert not (tmp_path / "resumed/train/final.pt").exists()
    second = build_trainer(variant, TINY, train, dev, tmp_path / "resumed")
    assert second.step == 5  # goes on from its checkpoint (a fresh start would end equal too)
    second.run()
    straight = load_checkpoint(tmp_path / "straight/train/final.pt")["model"]
    resumed = load_checkpoint(tmp_path / "resumed/train/final.pt")["model"]
    for name, tensor in straight.items():
        assert torch.equal(tensor, resumed[name]), name


def test_each_decoder_layer_starts_from_that_encoder_layers_final_hidden_and_cell_states():
    """The bridge (module docstring): decoder layer l starts from encoder layer l's final forward
    and backward states concatenated, its cell state as well as its hidden state (the encoder's
    final states taken here from its own stack, run on the embeddings with the real lengths)."""
    model = tiny_rnn("multiplicative")
    source = random_tokens(2, 5)
    source[1, 3:] = PAD
    target = torch.cat([torch.full((2, 1), BOS), random_tokens(2, 3, seed=4)], dim=1)
    initial_states = []
    hooks = [lstm.register_forward_pre_hook(lambda module, args: initial_states.append(args[1]))
             for lstm in model.decoder.layers]
    with torch.no_grad():
        _, (hidden, cell) = model.encoder(model._embed(source, None), torch.tensor([5, 3]))
        model.decoder_states(target, model.encode(source))
    for hook in hooks:
        hook.remove()
    assert len(initial_states) == 2  # [layers * 2, B, d/2] -> per layer [1, B, d]
    for layer, (first_hidden, first_cell) in enumerate(initial_states):
        forward, backward = 2 * layer, 2 * layer + 1
        assert torch.equal(first_hidden[0], torch.cat([hidden[forward], hidden[backward]], -1))
        assert torch.equal(first_cell[0], torch.cat([cell[forward], cell[backward]], -1))


def test_dropout_applies_between_stacked_lstms_and_to_the_attentional_state():
    """Zaremba et al. 2014, as Luong et al. (module docstring): besides the embeddings, the
    outputs of each LSTM layer below the top, in the encoder and the decoder, and h~_t before the
    output projection are dropped: a share of about P_drop of their units is zero in what the
    next step reads, the rest is the value computed over 1 - P_drop."""
    p = 0.5
    torch.manual_seed(0)
    config = ModelConfig(architecture="rnn", layers=2, d_model=16, dropout=p)
    model = build_model(config, VOCAB).train()
    source, target = random_tokens(4, 6), random_tokens(4, 5, seed=2)
    computed, read = {}, {}  # what a layer computes, what the next one reads
    hooks = [model.combine.register_forward_hook(
        lambda module, args, output: computed.__setitem__("attentional state", output.tanh()))]
    for name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        hooks.append(stack.layers[0].register_forward_hook(
            lambda module, args, output, name=name: computed.__setitem__(name, output[0].data)))
        hooks.append(stack.layers[1].register_forward_pre_hook(
            lambda module, args, name=name: read.__setitem__(name, args[0].data)))
    with torch.no_grad():  # (the encoder's LSTMs read packed sequences: their .data)
        read["attentional state"] = model.decoder_states(target, model.encode(source))
    for hook in hooks:
        hook.remove()
    assert computed.keys() == read.keys() == {"encoder", "decoder", "attentional state"}
    for name, values in read.items():
        kept = values != 0
        assert 0.35 < kept.double().mean().item() < 0.65, name
        assert torch.allclose(values[kept], computed[name][kept] / (1 - p), atol=1e-6), name


def test_parameters_start_uniform_in_plus_minus_a_tenth_and_the_embedding_normal():
    """Luong et al. section 4.1: every parameter but the shared embedding uniform in [-0.1, 0.1]
    (mean 0, standard deviation 0.1 / sqrt 3); the embedding N(0, d_model^-0.5) as the
    Transformer's (module docstring)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(architecture="rnn", layers=2, d_model=64), 1000)
    uniform = []
    for name, parameter in model.named_parameters():
        values = parameter.detach().flatten().double()
        if name == "embedding.weight":
            assert abs(values.mean().item()) < 0.005
            assert abs(values.std().item() / 64**-0.5 - 1) < 0.02
        else:
            assert values.abs().max().item() <= 0.1, name
            assert values.min().item() < -0.05 and values.max().item() > 0.05, name
            uniform.append(values)
    uniform = torch.cat(uniform)
    assert uniform.numel() > 50_000
    assert abs(uniform.mean().item()) < 0.002
    assert abs(uniform.std().item() / (0.1 / 3**0.5) - 1) < 0.02


def test_the_additive_score_is_v_a_transposed_times_tanh_of_w1_query_plus_w2_key():
    """Bahdanau et al. (2015) appendix A.1.2 with Luong's query h_t: score(h_t, h_s) =
    v_a^T tanh(W_1 h_t + W_2 h_s), softmax over the real source positions; by hand."""
    model = tiny_rnn("additive")
    source = random_tokens(2, 6)
    source[0, 2:] = PAD
    encoded = model.encode(source)
    queries = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        weights = model.attention.weights(queries, encoded.keys, encoded.padding)
    attention = model.attention
    W_1, W_2 = attention.query_projection.weight, attention.key_projection.weight
    v_a = attention.vector.weight[0]
    for row, length in enumerate([2, 6]):
        h_s = encoded.memory[row, :length]
        scores = torch.tanh((queries[row] @ W_1.T)[:, None] + (h_s @ W_2.T)[None]) @ v_a
        assert torch.allclose(weights[row, :, :length], torch.softmax(scores, dim=-1), atol=1e-6)
    assert weights[0, :, 2:].abs().max() == 0
