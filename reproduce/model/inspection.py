"""Attention weights of a whole model for one batch, for the paper's Figures 3-5.

The training and decoding paths use the fused SDPA kernel, which returns no weights. This walks
the same layers and asks each attention module for the weights it applies
(``attention_weights``, recomputed from the module's own projections and masks), so inspection
costs nothing unless it is called.
"""

from __future__ import annotations

import torch
from torch import Tensor

from reproduce.model.transformer import Transformer
from reproduce.special_tokens import PAD

KINDS = ("encoder_self", "decoder_self", "cross")


@torch.no_grad()
def attention_maps(model: Transformer, source: Tensor, target_input: Tensor) -> dict[str, list[Tensor]]:
    """Per kind (encoder self-attention, decoder self-attention, encoder-decoder attention), one
    ``[B, h, queries, keys]`` tensor per layer, for ``source`` ``[B, S]`` and the decoder input
    ``target_input`` ``[B, T]`` (BOS then the target tokens, as in teacher forcing)."""
    was_training = model.training
    model.eval()
    maps: dict[str, list[Tensor]] = {kind: [] for kind in KINDS}
    padding = source.eq(PAD)
    x = model._embed(source)
    for layer in model.encoder:
        maps["encoder_self"].append(layer.attention.attention_weights(x, key_padding=padding))
        x = layer(x, padding)
    memory = x
    y = model._embed(target_input)
    for layer in model.decoder:
        maps["decoder_self"].append(layer.self_attention.attention_weights(y, causal=True))
        after_self = layer.self_attention_residual(y, layer.self_attention(y, causal=True))
        maps["cross"].append(layer.cross_attention.attention_weights(after_self, memory, padding))
        y = layer(y, memory, padding)
    model.train(was_training)
    return maps
