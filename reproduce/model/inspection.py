"""Attention weights of a whole model for one batch, for the paper's Figures 3-5.

The training and decoding paths use the fused SDPA kernel, which returns no weights. This walks
the same layers and asks each attention module for the weights it applies
(``attention_weights``, recomputed from the module's own projections and masks), so inspection
costs nothing unless it is called.
"""

from __future__ import annotations

import torch
from torch import Tensor

from reproduce.model.token_layout import TokenLayout
from reproduce.model.transformer import Transformer

KINDS = ("encoder_self", "decoder_self", "cross")


@torch.no_grad()
def attention_maps(model: Transformer, source: Tensor,
                   target_input: Tensor) -> dict[str, list[Tensor]]:
    """Per kind (encoder self-attention, decoder self-attention, encoder-decoder attention), one
    ``[B, h, queries, keys]`` tensor per layer, for ``source`` ``[B, S]`` and the decoder input
    ``target_input`` ``[B, T]`` (BOS then the target tokens, as in teacher forcing)."""
    was_training = model.training
    model.eval()
    maps: dict[str, list[Tensor]] = {kind: [] for kind in KINDS}
    source_layout, target_layout = TokenLayout.of(source), TokenLayout.of(target_input)
    x = model._embed(source, source_layout)
    for layer in model.encoder:
        maps["encoder_self"].append(layer.attention.attention_weights(x, source_layout))
        x = layer(x, source_layout)
    memory = x
    y = model._embed(target_input, target_layout)
    for layer in model.decoder:
        maps["decoder_self"].append(layer.self_attention.attention_weights(y, target_layout,
                                                                           causal=True))
        attended = layer.self_attention(y, target_layout, causal=True)
        after_self = layer.self_attention_residual(y, attended, target_layout)
        maps["cross"].append(layer.cross_attention.attention_weights(after_self, target_layout,
                                                                     memory, source_layout))
        y = layer(y, target_layout, memory, source_layout)
    model.train(was_training)
    return maps
