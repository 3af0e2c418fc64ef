"""Scaled dot-product attention (eq. 1) over packed sentences: ``[N, h, d]`` in, ``[N, h, d_v]``
out.

A pass holds the tokens of many sentences one after another (:class:`TokenLayout`); a query
attends only to the keys of its own sentence (and, ``causal``, only to the earlier ones). Three
ways compute the same function:

* **varlen**: ``torch.nn.attention.varlen.varlen_attn``, flash attention over the packed tokens
  with cumulative sentence offsets (``cu_seqlens``): no padding cells, no mask, one kernel for
  encoder, decoder and encoder-decoder attention alike. CUDA only, in bf16 or fp16. Its tiles
  are a sentence's: a sentence of 30 tokens fills 30 x 30 of a 128 x 128 tile;
* **flex**: FlexAttention over the packed tokens, whose tiles are blocks of 128 consecutive
  tokens whatever sentences they hold: a block of queries meets only the key blocks of its own
  sentences (:func:`sentence_blocks`), and a mask within them keeps each query to its sentence.
  Short sentences share tiles: over synthetic WMT-length passes, 11-66% fewer tiles than
  varlen's, the fewer the shorter the sentences (BENCHMARKS.md). CUDA only, and only compiled
  (uncompiled, FlexAttention computes every query against every key);
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
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from reproduce.model.token_layout import TokenLayout

# cuDNN's attention is left out: it builds an execution plan for every new (batch, length)
# shape, and on an H100 batches of unseen shapes ran 6x slower with it.
PADDED_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
VARLEN_DTYPES = (torch.bfloat16, torch.float16)
FLEX_BLOCK = 128  # tokens a side of FlexAttention's tiles, its kernels' default


def varlen_available(q: Tensor) -> bool:
    """Whether the varlen kernel can take ``q`` (and K, V of its kind): CUDA, bf16 or fp16,
    and a torch that has the API."""
    return q.is_cuda and q.dtype in VARLEN_DTYPES and _varlen_function() is not None


def attend_packed(q: Tensor, k: Tensor, v: Tensor, queries: TokenLayout, keys: TokenLayout,
                  causal: bool, kernel: str | None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V within each sentence: q ``[N, h, d_k]`` at the tokens of
    ``queries``, k ``[M, h, d_k]`` and v ``[M, h, d_v]`` at those of ``keys`` (the same layout
    for self-attention); returns ``[N, h, d_v]``. ``kernel`` asks for ``"varlen"`` (see
    :func:`varlen_available`) or ``"flex"`` (CUDA); otherwise, or where it cannot run, the
    padded reference."""
    if kernel == "varlen" and varlen_available(q):
        return _attend_varlen(q, k, v, queries, keys, causal)
    if kernel == "flex" and q.is_cuda:
        return attend_flex(q, k, v, queries, keys, causal)
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


def attend_flex(q: Tensor, k: Tensor, v: Tensor, queries: TokenLayout, keys: TokenLayout,
                causal: bool, block: int = FLEX_BLOCK) -> Tensor:
    """FlexAttention over the packed tokens, its tiles ``block`` tokens a side
    (:func:`sentence_blocks`). On a CPU forward only (FlexAttention has no CPU backward);
    compiled there, it computes only the listed tiles, as on a GPU."""
    # the pass's other layers meet the same tiles: a layout's queries attend to themselves or
    # to one other layout (the decoder's, to the encoder's output)
    key = ("flex", keys is queries, causal, block)
    if key not in queries.masks:
        queries.masks[key] = sentence_blocks(queries, keys, causal, block)
    mask = queries.masks[key]
    heads_first = [x.transpose(0, 1).unsqueeze(0).contiguous() for x in (q, k, v)]  # [1, h, N|M, d]
    return flex_attention(*heads_first, block_mask=mask).squeeze(0).transpose(0, 1)


def sentence_blocks(queries: TokenLayout, keys: TokenLayout, causal: bool,
                    block: int = FLEX_BLOCK) -> BlockMask:
    """Which tiles of ``block`` queries x ``block`` keys FlexAttention computes, and the mask
    within them. Tokens are in sentence order on both sides, so a block of queries, whose
    tokens run from sentence a to sentence b, meets the keys from a's first to b's last: the
    key blocks between theirs (in causal self-attention, none after its own block). Within a
    tile a query keeps to its own sentence's keys (and, causal, the earlier ones). Built on the
    device from the layouts, no host synchronisation."""
    n, m = queries.index.numel(), keys.index.numel()
    # each token's sentence (its row of the batch), for whole tiles: the positions after the
    # last token, which a tile reaches, are in no sentence (nor the same one on both sides)
    query_rows = _whole_tiles(torch.div(queries.index, queries.length, rounding_mode="floor"),
                              block, -1)
    key_rows = _whole_tiles(torch.div(keys.index, keys.length, rounding_mode="floor"), block, -2)
    query_blocks, key_blocks = -(-n // block), -(-m // block)
    device = query_rows.device
    first = torch.arange(query_blocks, device=device) * block  # each query block's first token
    last = (first + block - 1).clamp(max=n - 1)
    key_starts = keys.cumulative_lengths().long()  # [B + 1]: each sentence's first key
    lowest = key_starts[query_rows[first]] // block
    highest = (key_starts[query_rows[last] + 1] - 1) // block
    if causal:  # self-attention: a query's keys are its own token and the tokens before it
        highest = torch.minimum(highest, torch.arange(query_blocks, device=device))
    counts = (highest - lowest + 1).clamp(min=0).to(torch.int32)
    indices = (lowest[:, None] + torch.arange(key_blocks, device=device)).clamp(
        max=key_blocks - 1).to(torch.int32)  # the first counts[i] of row i are read

    def same_sentence(batch, head, query, key):
        allowed = query_rows[query] == key_rows[key]
        # causal self-attention: within a sentence, token order is position order
        return allowed & (key <= query) if causal else allowed

    return BlockMask.from_kv_blocks(counts[None, None], indices[None, None], BLOCK_SIZE=block,
                                    mask_mod=same_sentence, seq_lengths=(n, m))


def _whole_tiles(values: Tensor, block: int, fill: int) -> Tensor:
    """``values`` ``[N]`` followed by ``fill`` up to a whole number of ``block``s."""
    return F.pad(values, (0, -values.numel() % block), value=fill)
