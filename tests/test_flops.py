"""Exact FLOP accounting, checked against PyTorch's own FLOP counter on the real model."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from reproduce.config import ModelConfig
from reproduce.decoding.beam_search import beam_search
from reproduce.gpu_peak_rates import peak_rate
from reproduce.model.flops import TransformerFlops, peak_flops
from reproduce.model.transformer import Transformer
from reproduce.special_tokens import EOS

CONFIG = ModelConfig(layers=2, d_model=16, d_ff=24, heads=2, d_k=4, d_v=6, dropout=0.0)
VOCAB = 50


def _counted(model, source_length, target_length, backward=False):
    generator = torch.Generator().manual_seed(source_length * 100 + target_length)
    source = torch.randint(4, VOCAB, (1, source_length), generator=generator)
    target = torch.randint(4, VOCAB, (1, target_length), generator=generator)
    with FlopCounterMode(display=False) as counter:
        logits = model(source, target)
        if backward:
            logits.sum().backward()
    return counter.get_total_flops()


def _causal_savings(config, target_length):
    """The counter charges causal self-attention for all t^2 query-key pairs; we count t(t+1)/2."""
    pairs_skipped = target_length**2 - target_length * (target_length + 1) // 2
    return 2 * config.layers * config.heads * (config.d_k + config.d_v) * pairs_skipped


@pytest.mark.parametrize("lengths", [[(7, 5)], [(3, 9), (12, 4), (1, 1)]])
def test_forward_flops_equal_the_torch_counter_on_the_real_model(lengths):
    model = Transformer(CONFIG, VOCAB)
    counted = sum(_counted(model, s, t) - _causal_savings(CONFIG, t) for s, t in lengths)
    sources, targets = zip(*lengths, strict=True)
    assert TransformerFlops(CONFIG, VOCAB).forward(list(sources), list(targets)) == counted


@pytest.mark.parametrize(("source_length", "beam"), [(5, 1), (9, 1), (6, 3)])
def test_beam_search_flops_equal_the_torch_counter_on_the_real_search(source_length, beam):
    """One sentence whose hypotheses all run to the length limit (source + offset; checked):
    the counter charges every row the search computes, which are the live hypotheses but for
    the first step's dead ones (``beam - 1`` rows at one position, attending to it and the
    source)."""
    torch.manual_seed(source_length)
    model, offset = Transformer(CONFIG, VOCAB).eval(), 4
    with torch.no_grad():
        model.embedding.weight[EOS] = -10 * model.embedding.weight.abs().max()  # never chosen
    source = torch.randint(4, VOCAB, (1, source_length))
    source[0, -1] = EOS
    with FlopCounterMode(display=False) as counter:
        hypotheses = beam_search(model, source, beam_size=beam, max_length_offset=offset)
    steps = source_length + offset
    assert len(hypotheses[0]) == steps - 1  # every step ran; the last one forced EOS (dropped)
    flops = TransformerFlops(CONFIG, VOCAB)
    dead_rows = (beam - 1) * (flops.per_target_token() + 2 * CONFIG.layers * CONFIG.heads
                              * (CONFIG.d_k + CONFIG.d_v) * (1 + source_length))
    assert flops.beam_search([source_length], [steps], beam) == (counter.get_total_flops()
                                                                 - dead_rows)


def test_training_is_three_forward_passes():
    model = Transformer(CONFIG, VOCAB)
    assert _counted(model, 6, 8, backward=True) == 3 * _counted(model, 6, 8)
    flops = TransformerFlops(CONFIG, VOCAB)
    assert flops.training([6], [8]) == 3 * flops.forward([6], [8])


def test_source_tokens_skip_the_decoder_and_the_output_projection():
    base = TransformerFlops(ModelConfig(), 37000)
    parameters = Transformer(ModelConfig(), 37000).num_parameters()
    # base: cross-attention and the 37k-word output projection make a target token ~1.9x a source
    # token
    assert 1.5 * base.per_source_token() < base.per_target_token() < 2 * base.per_source_token()
    # and 6 N (src + tgt) counts a balanced 25k+25k step's matrix work about twice (issue 10)
    exact = 3 * (base.per_source_token() + base.per_target_token()) * 25_000
    assert 1.9 < 6 * parameters * 50_000 / exact < 2.1


def test_peak_rates_by_device_name():
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops("cpu") is None
    # TF32's dense tensor-core peak, where TF32 units exist: half of BF16's from the A100 on
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H100 NVL",
                 "NVIDIA A100-SXM4-80GB"):
        assert peak_rate(name, "tf32").flops_per_second == peak_flops(name) / 2
    assert peak_rate("Tesla V100-SXM2-16GB", "tf32") is None
