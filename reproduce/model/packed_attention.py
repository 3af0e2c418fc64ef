"""Scaled dot-product attention (eq. 1) over packed sentences: ``[N, h, d]`` in, ``[N, h, d_v]``
out.

A pass holds the tokens of many sentences one after another (:class:`TokenLayout`); a query
attends only to the keys of its own sentence (and, ``causal``, only to the earlier ones). Two
ways compute the same function:

* **varlen**: ``torch.nn.attention.varlen.varlen_attn``, flash attention over the packed tokens
  with cumulative sentence offsets (``cu_seqlens``): no padding cells, no mask, one kernel for
  encoder, decoder and encoder-decoder attention alike. CUDA only, in bf16 or fp16;
* **padded** (the reference, on every device and precision): the tokens scattered into a
  right-padded ``[B, h, T, d]`` batch, SDPA with the key-padding mask (or ``is_causal``: right
  padding follows every real query, so the causal mask hides it already), gathered back.

``varlen_attn`` is a young API whose arguments change between releases: earlier ones took
``is_causal``, 2.11 and 2.13 a ``window_size`` (``(-1, 0)`` is causal).
:func:`_causal_argument` reads which from its signature once.
"""

from __future__ import annotations

import inspect
from functools import cache

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from reproduce.model.token_layout import TokenLayout

# cuDNN's attention is left out: it builds an execution plan for every new (batch, length)
# shape, and on an H100 batches of unseen shapes ran 6x slower with it.
PADDED_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
VARLEN_DTYPES = (torch.bfloat16, torch.float16)


def varlen_available(q: Tensor) -> bool:
    """Whether the varlen kernel can take ``q`` (and K, V of its kind): CUDA, bf16 or fp16,
    and a torch that has the API."""
    return q.is_cuda and q.dtype in VARLEN_DTYPES and _varlen_function() is not None


def attend_packed(q: Tensor, k: Tensor, v: Tensor, queries: TokenLayout, keys: TokenLayout,
                  causal: bool, varlen: bool) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V within each sentence: q ``[N, h, d_k]`` at the tokens of
    ``queries``, k ``[M, h, d_k]`` and v ``[M, h, d_v]`` at those of ``keys`` (the same layout
    for self-attention); returns ``[N, h, d_v]``. ``varlen`` asks for the varlen kernel (see
    :func:`varlen_available`); otherwise, or where it cannot run, the padded reference."""
    if varlen and varlen_available(q):
        return _attend_varlen(q, k, v, queries, keys, causal)
    return attend_padded(q, k, v, queries, keys, causal)


def attend_padded(q: Tensor, k: Tensor, v: Tensor, queries: TokenLayout, keys: TokenLayout,
                  causal: bool) -> Tensor:
    """The reference: pad to ``[B, h, T, d]``, SDPA, unpad."""
    qb, kb, vb = (layout.pad(x).transpose(1, 2) for layout, x in
                  ((queries, q), (keys, k), (keys, v)))  # [B, h, T, d]
    mask = None if causal else ~keys.padding[:, None, None, :]  # True = may attend
    with sdpa_kernel(PADDED_KERNELS):
        context = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, is_causal=causal)
    return queries.unpad(context.transpose(1, 2))  # [N, h, d_v]


def _attend_varlen(q: Tensor, k: Tensor, v: Tensor, queries: TokenLayout, keys: TokenLayout,
                   causal: bool) -> Tensor:
    arguments = {_causal_argument(): (-1, 0) if _causal_argument() == "window_size" else True}
    return _varlen_function()(q, k, v, queries.cumulative_lengths(), keys.cumulative_lengths(),
                              queries.length, keys.length, **(arguments if causal else {}))


@cache
def _varlen_function():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@cache
def _causal_argument() -> str:
    parameters = inspect.signature(_varlen_function()).parameters
    return "window_size" if "window_size" in parameters else "is_causal"
