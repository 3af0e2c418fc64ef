"""Dropout noise that belongs to the token (reproduce/model/dropout.py): right in distribution
(keep-probability 1 - P_drop, kept units scaled by 1 / (1 - P_drop), independent across sites,
steps, tokens and features), the same for a token in whichever pass it is computed, and the same
hash on the host and on the device."""

import hashlib

import numpy as np
import pytest
import torch

from reproduce.config import ModelConfig
from reproduce.model.architectures import build_model
from reproduce.data.encoded import EncodedCorpus
from reproduce.model.layers import Residual
from reproduce.model.dropout import (AttentionDropout, TokenDropout, apply_mask, keep_mask, mix32,
                                     mix32_host, mix_host, step_key, token_keys)
from reproduce.model.token_layout import TokenLayout
from reproduce.training.batching import collate
from reproduce.training.teacher_forcing import TeacherForcedStates
from tests.training_fixtures import random_corpus, small_variant

PAIRS, POSITIONS, FEATURES = 4000, 16, 64  # 4,096,000 units a site


def _keys(seed: int = 1, step: int = 1, side: int = 0) -> torch.Tensor:
    sizes = np.full(PAIRS, POSITIONS)
    return torch.from_numpy(token_keys(step_key(seed, step), np.arange(PAIRS), sizes, side))


def _mask(site: int, keys: torch.Tensor, p: float) -> torch.Tensor:
    dropout = TokenDropout(p, FEATURES)
    dropout.set_site(site)
    return dropout(torch.ones(len(keys), FEATURES), keys) != 0


def _within(observed: float, expected: float, count: int, sigmas: float = 5.0) -> bool:
    """``observed`` rate within ``sigmas`` binomial standard deviations of ``expected``."""
    return abs(observed - expected) <= sigmas * (expected * (1 - expected) / count) ** 0.5


def test_the_device_hash_is_the_host_hash_bit_for_bit():
    values = np.random.default_rng(0).integers(0, 2**32, 10_000, dtype=np.uint32)
    device = mix32(torch.from_numpy(values.view(np.int32))).numpy()
    assert np.array_equal(device, mix32_host(values).view(np.int32))
    # MurmurHash3_x86_32 of the empty string is fmix32(seed): its published values for seeds 1
    # and 0xFFFFFFFF; splitmix64's first output for seed 0: mix(0 + golden gamma)
    assert mix32_host(np.array([1, 0xFFFFFFFF], dtype=np.uint32)).tolist() == [0x514E28B7,
                                                                                 0x81F16F39]
    assert int(mix_host(np.array([0x9E3779B97F4A7C15], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF


# The bits of each named noise scheme (model.dropout_noise) on the case of the test below.
SCHEME_BITS = {"fmix32-16": "561a7a7fd2eeb5d652b042a07a89455e2badd58af72b78399ebb75cb53280855"}


def test_the_noise_is_the_bits_its_scheme_is_named_for():
    """The trained settings name the noise scheme, so that a run drawn with another is not
    resumed as this one: a change of the noise's bits must come with a new name (and here, its
    bits). The masks of a token site and an attention site for a few tokens of step 7."""
    keys = torch.from_numpy(token_keys(step_key(1, 7), np.arange(5), np.array([3, 2, 4, 1, 6]),
                                       side=1))
    site = TokenDropout(0.1, 24)
    site.set_site(5)
    tokens = site(torch.ones(len(keys), 24), keys).ne(0)
    attention = AttentionDropout(0.1)
    attention.set_site(9)
    weights = attention(torch.ones(2, 3, 4, 5), keys[:8].view(2, 4)).ne(0)
    bits = np.packbits(torch.cat([tokens.flatten(), weights.flatten()]).numpy())
    assert hashlib.sha256(bits.tobytes()).hexdigest() == SCHEME_BITS[ModelConfig().dropout_noise]


@pytest.mark.parametrize("p", [0.0, 2**-16, 0.1, 0.3, 0.5, 0.7, 1 - 2**-16])
def test_the_keep_mask_is_the_top_bits_of_the_hash_compared_with_p(p):
    """keep_mask's shortcut (the top 16 bits read before fmix32's last xorshift, compared as
    unsigned through a flipped sign bit) keeps exactly the units that its definition does."""
    values = np.random.default_rng(1).integers(0, 2**32, 200_000, dtype=np.uint32)
    values[:4] = [0, 1, 2**31, 2**32 - 1]
    top_bits = mix32_host(values) >> np.uint32(16)
    keys = torch.from_numpy(values.view(np.int32).copy())
    assert torch.equal(keep_mask(keys, p), torch.from_numpy(top_bits >= round(p * 2**16)))
    assert torch.equal(keys, torch.from_numpy(values.view(np.int32)))  # its input left as it was


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_hash_is_the_same_bits_compiled_and_on_the_gpu(device):
    """int32 products wrap in every backend as uint32's do: eager and torch.compile'd (Inductor's
    C++ on the CPU, Triton on the GPU), the keys and the keep mask are the host's bits, and the
    masked units are the same (torch 2.11's Inductor failed to lower the mask's eager form on
    the GPU)."""
    values = np.random.default_rng(2).integers(0, 2**32, 100_000, dtype=np.uint32)
    keys = torch.from_numpy(values.view(np.int32).copy()).to(device)
    hashed = mix32_host(values)
    keep = torch.from_numpy(hashed >> np.uint32(16) >= round(0.1 * 2**16))
    x = torch.randn(len(values), dtype=torch.float32, device=device)
    for mode in ("eager", "compiled"):
        mixer = mix32 if mode == "eager" else torch.compile(mix32, dynamic=False)
        masker = (keep_mask if mode == "eager"
                  else torch.compile(keep_mask, dynamic=False))
        dropout = (_drop if mode == "eager" else torch.compile(_drop, dynamic=False))
        assert np.array_equal(mixer(keys).cpu().numpy(), hashed.view(np.int32)), mode
        assert torch.equal(masker(keys, 0.1).cpu(), keep), mode
        assert torch.equal(dropout(x, keys, 0.1).cpu(), x.cpu() * keep * (1.0 / 0.9)), mode


def _drop(x, keys, p):
    return apply_mask(x, keep_mask(keys, p), p)


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_units_are_kept_with_probability_one_minus_p_and_scaled_by_its_inverse(p):
    dropout = TokenDropout(p, FEATURES)
    x = torch.randn(PAIRS * POSITIONS, FEATURES, dtype=torch.float64)
    y = dropout(x, _keys())
    kept = y != 0
    assert _within(kept.double().mean().item(), 1 - p, kept.numel())
    assert torch.equal(y[kept], x[kept] * (1 / (1 - p)))
    assert torch.equal(dropout.eval()(x, _keys()), x)  # off in evaluation


def test_sites_steps_tokens_and_features_draw_independent_noise():
    p = 0.3
    keys = _keys()
    site = _mask(1, keys, p)
    count = site.numel()
    pairs_of_masks = {
        "another site": _mask(2, keys, p),
        "another step": _mask(1, _keys(step=2), p),
        "another seed": _mask(1, _keys(seed=2), p),
        "the other side": _mask(1, _keys(side=1), p),
        "the next position": torch.roll(site, 1, dims=0),
        "the next feature": torch.roll(site, 1, dims=1),
    }
    for name, other in pairs_of_masks.items():
        both = (site & other).double().mean().item()
        assert _within(both, (1 - p) ** 2, count), name  # P(both kept) = P(kept)^2
    # and the keep rate of each feature, and of each position, is 1 - p (no feature or position
    # is favoured)
    per_feature = site.double().mean(dim=0)
    per_position = site.view(PAIRS, POSITIONS, FEATURES).double().mean(dim=(0, 2))
    assert all(_within(rate, 1 - p, PAIRS * POSITIONS) for rate in per_feature.tolist())
    assert all(_within(rate, 1 - p, PAIRS * FEATURES) for rate in per_position.tolist())


def test_attention_dropout_keeps_one_minus_p_independently_of_heads_and_key_positions():
    p, batch, heads, length = 0.2, 64, 4, 32
    dropout = AttentionDropout(p)
    dropout.set_site(5)
    query_keys = torch.from_numpy(token_keys(step_key(1, 1), np.arange(batch),
                                             np.full(batch, length), 1)).view(batch, length)
    kept = dropout(torch.ones(batch, heads, length, length), query_keys) != 0
    assert _within(kept.double().mean().item(), 1 - p, kept.numel())
    both_heads = (kept[:, 0] & kept[:, 1]).double().mean().item()
    both_keys = (kept[..., 0] & kept[..., 1]).double().mean().item()
    assert _within(both_heads, (1 - p) ** 2, kept[:, 0].numel())
    assert _within(both_keys, (1 - p) ** 2, kept[..., 0].numel())


def test_every_dropout_site_of_a_model_has_its_own_number():
    for architecture in ("transformer", "rnn"):
        variant = small_variant(steps=1)
        config = variant.model.model_copy(update={"architecture": architecture, "layers": 2})
        model = build_model(config, 40)
        bases = [module.base for module in model.modules() if hasattr(module, "base")]
        assert len(bases) == len(set(bases)) > 3, architecture
    rebuilt = build_model(config, 40)
    assert [m.base for m in rebuilt.modules() if hasattr(m, "base")] == bases  # stable


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
@pytest.mark.parametrize("attention_dropout", [0.0, 0.2])
def test_a_sentence_meets_the_same_noise_in_whatever_pass_it_is_computed(tmp_path, architecture,
                                                                         attention_dropout):
    """Pairs 0-5 in one pass, and pairs 0-2 and 3-5 in two passes of other widths: every token's
    training-mode states are the same (float summation order aside)."""
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "corpus", 6, seed=5))
    variant = small_variant(steps=1, dropout=0.3)
    config = variant.model.model_copy(update={"architecture": architecture,
                                              "attention_dropout": attention_dropout})
    torch.manual_seed(0)
    model = TeacherForcedStates(build_model(config, corpus.vocab_size)).train()
    key = step_key(7, 3)

    def states(indices, multiple):
        batch = collate(corpus, np.array(indices), multiple=multiple, step_key=key)
        return model(batch.source, batch.target_input, batch.source_index, batch.target_index,
                     batch.source_noise, batch.target_noise)  # [N, d], pair by pair

    whole = states(range(6), 1)
    parts = torch.cat([states([0, 1, 2], 8), states([3, 4, 5], 16)])
    assert torch.allclose(whole, parts, atol=1e-5)
    other_step = collate(corpus, np.arange(6), step_key=step_key(7, 4))
    assert not torch.equal(other_step.target_noise, collate(corpus, np.arange(6),
                                                            step_key=key).target_noise)


def test_a_layout_without_keys_still_drops_in_training():
    dropout = TokenDropout(0.5, 8)
    x = torch.ones(1000, 8)
    layout = TokenLayout(torch.zeros(10, 100, dtype=torch.bool))
    assert layout.noise is None
    assert 0.4 < (dropout(x, layout.noise) == 0).double().mean().item() < 0.6


def test_residual_dropout_drops_the_sublayers_output_before_the_residual_add():
    """Section 5.4: LayerNorm(x + Dropout(Sublayer(x))). A zero sub-layer output leaves
    LayerNorm(x) whole (x itself is never dropped); with x zero, the output is the norm of the
    sub-layer's output with its units dropped, not of all of it."""
    residual = Residual(FEATURES, 0.5).double()
    keys = _keys()[:500]
    x, sublayer = torch.randn(2, 500, FEATURES, dtype=torch.float64).unbind()
    layout = TokenLayout(torch.zeros(1, 500, dtype=torch.bool), noise=keys)
    assert torch.equal(residual(x, torch.zeros_like(sublayer), layout), residual.norm(x))
    dropped = residual(torch.zeros_like(x), sublayer, layout)
    kept = _mask(0, keys, 0.5)  # the site's number: no model numbered this one
    assert torch.equal(dropped, residual.norm(torch.where(kept, sublayer * 2, 0.0)))
    assert not torch.allclose(dropped, residual.norm(sublayer))


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_the_embeddings_are_dropped_in_training(architecture):
    """Section 5.4: dropout on the sums of the embeddings and the positional encodings (the
    recurrent baseline: on its embeddings). In training a share P_drop of their units is zero
    and the rest is the evaluation's sum over 1 - P_drop."""
    p = 0.3
    config = ModelConfig(architecture=architecture, layers=1, d_model=FEATURES, d_ff=32,
                         heads=2, d_k=8, d_v=8, dropout=p)
    model = build_model(config, 50)
    tokens = torch.randint(4, 50, (40, 25), generator=torch.Generator().manual_seed(0))
    keys = _keys()[: tokens.numel()]
    if architecture == "transformer":
        layout = TokenLayout.of(tokens, noise=keys)
        embed = lambda: model._embed(tokens, layout)  # noqa: E731
    else:
        embed = lambda: model._embed(tokens, keys.view(tokens.shape))  # noqa: E731
    trained = embed()  # a built model is in training mode
    evaluated = model.eval() and embed()
    kept = trained != 0
    assert _within(kept.double().mean().item(), 1 - p, kept.numel())
    assert torch.allclose(trained[kept], evaluated[kept] / (1 - p), rtol=1e-6, atol=1e-6)
