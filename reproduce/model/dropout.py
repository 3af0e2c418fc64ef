"""Dropout whose noise belongs to the token (section 5.4, "Residual Dropout": "we apply dropout to
the output of each sub-layer, before it is added to the sub-layer input and normalized ... to the
sums of the embeddings and the positional encodings").

``nn.Dropout`` draws its mask from a generator's stream, so a token's mask depends on where the
token sits in the tensor of its forward pass: on which other sentences share the pass, in which
order, on which rank. Here every mask bit is a hash of what it masks: the training seed, the step,
the sentence pair's index in the corpus, the side (source or target), the token's position, the
dropout site in the model and the feature. A step may then be cut into any number of passes, on
any number of ranks, and every token still meets the same noise: the trained model depends on
neither (up to float summation order).

Two counter-based hashes (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3": each
output is a function of its counter alone, so no state is carried and nothing is sequential). The
host hashes (seed, step, pair, side, position) into one key per token while it collates a batch
(:func:`token_keys`), with splitmix64's finaliser (Steele, Lea and Flood 2014, "Fast splittable
pseudorandom number generators"), and keeps its top 32 bits. On the device a site adds each
token's key to a key per feature, ``[N, 1] + [1, d]``, and mixes the sum with MurmurHash3's 32-bit
finaliser (Appleby's ``fmix32``), element-wise; it keeps a unit where the top 16 bits of the hash
reach ``P_drop * 2^16``: keep-probability ``1 - P_drop`` (to 2^-16), kept units scaled by
``1 / (1 - P_drop)``. That per-unit work is in 32 bits because it is most of the cost: int32
element-wise kernels move half the bytes of int64 ones, and a GPU multiplies int32 in one
instruction, int64 in several (on one CPU thread the 64-bit hash took 5 times as long, 15% of a
tiny model's training step). Under ``torch.compile`` the hash fuses into one kernel per site that
reads ``N + d`` keys; in eager mode it is a dozen element-wise integer kernels.

The scheme has a name in the trained settings (``model.dropout_noise``), and a test pins its bits
to that name: a change of the hash is a new name, under which a checkpoint drawn with the old one
is not resumed.

Without keys (a module called on its own in training mode) a site draws random keys from torch's
generator: the noise is then right in distribution but not tied to the token.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

# The two finalisers, each xorshift, multiply, xorshift, multiply, xorshift: (shift, multiplier,
# shift, multiplier, shift), the multipliers as unsigned integers. splitmix64's hashes the host's
# keys, fmix32's (MurmurHash3) the device's units.
_SPLITMIX64 = (30, 0xBF58476D1CE4E5B9, 27, 0x94D049BB133111EB, 31)
_FMIX32 = (16, 0x85EBCA6B, 13, 0xC2B2AE35, 16)
# Counter increments (the golden ratio): 64-bit for the host's keys, 32-bit for the features'
_GAMMA = 0x9E3779B97F4A7C15
_GAMMA_32 = 0x9E3779B9
_UINT64 = 2**64
_KEEP_BITS = 16  # the hash's top bits compared with the drop probability
_SIGN_BIT = -(2**31)  # as an int32


def _signed(value: int) -> int:
    """An unsigned 32-bit constant as the int32 with the same bits (torch has no uint32 maths)."""
    return value - 2**32 if value >= 2**31 else value


def _finalise_host(values: np.ndarray, dtype: type, finaliser: tuple) -> np.ndarray:
    """``finaliser`` on ``values`` as unsigned ``dtype`` integers (wrapping arithmetic)."""
    shift_1, multiplier_1, shift_2, multiplier_2, shift_3 = (dtype(c) for c in finaliser)
    z = values.astype(dtype, copy=True)
    with np.errstate(over="ignore"):
        z ^= z >> shift_1
        z *= multiplier_1
        z ^= z >> shift_2
        z *= multiplier_2
        z ^= z >> shift_3
    return z


def mix_host(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on ``uint64`` arrays."""
    return _finalise_host(values, np.uint64, _SPLITMIX64)


def mix32_host(values: np.ndarray) -> np.ndarray:
    """fmix32 on ``uint32`` arrays."""
    return _finalise_host(values, np.uint32, _FMIX32)


def _top_32_bits(values: np.ndarray) -> np.ndarray:
    """``uint64`` -> ``int32``: the upper half of each value's bits."""
    return (values >> np.uint64(32)).astype(np.uint32).view(np.int32)


def _shift_right(z: Tensor, bits: int) -> Tensor:
    """Logical right shift of int32 bits (``>>`` on int32 is arithmetic: the sign bit spreads)."""
    shifted = z >> bits
    shifted &= (1 << (32 - bits)) - 1
    return shifted


def _fmix32_until_last_xorshift(keys: Tensor) -> Tensor:
    """fmix32 on int32 ``keys`` without its last xorshift, in a new tensor (``keys`` is left as
    it was; int32 products wrap as uint32's do)."""
    shift_1, multiplier_1, shift_2, multiplier_2, _ = _FMIX32
    z = keys ^ _shift_right(keys, shift_1)
    z *= _signed(multiplier_1)
    z ^= _shift_right(z, shift_2)
    z *= _signed(multiplier_2)
    return z


def mix32(z: Tensor) -> Tensor:
    """:func:`mix32_host` on int32 tensors, bit for bit."""
    z = _fmix32_until_last_xorshift(z)
    return z ^ _shift_right(z, _FMIX32[-1])


def step_key(seed: int, step: int) -> int:
    """The key of one optimizer step of a run: all of its tokens' keys derive from it."""
    with np.errstate(over="ignore"):
        seeded = mix_host(np.array([seed % _UINT64], dtype=np.uint64))
        return int(mix_host(seeded + np.uint64(step % _UINT64))[0])


def token_keys(step: int, pairs: np.ndarray, sizes: np.ndarray, side: int) -> np.ndarray:
    """``int32 [sum(sizes)]``: the keys of the tokens of ``pairs`` (corpus indices), ``sizes[i]``
    positions each, in the order collate lays them out (pair by pair, position by position).

    ``step`` is :func:`step_key`'s; ``side`` tells the source (0) from the target (1)."""
    sentence = mix_host(pairs.astype(np.uint64) * np.uint64(2) + np.uint64(side))
    starts = np.cumsum(sizes) - sizes  # where each pair's tokens start
    positions = (np.arange(int(np.sum(sizes))) - np.repeat(starts, sizes)).astype(np.uint64)
    with np.errstate(over="ignore"):
        keys = (np.uint64(step) + np.repeat(sentence, sizes)
                + positions * np.uint64(_GAMMA))
    return _top_32_bits(mix_host(keys))


def site_base(site: int) -> int:
    """The key of a dropout site, as an int32: its features' keys derive from it."""
    return int(_top_32_bits(mix_host(np.array([site], dtype=np.uint64) + np.uint64(_GAMMA)))[0])


def counter_keys(base: int, count: int, device: torch.device | None) -> Tensor:
    """``int32 [count]``: the keys of a site's ``count`` features."""
    counters = torch.arange(count, dtype=torch.int32, device=device)
    return mix32(counters * _signed(_GAMMA_32) + base)


def keep_mask(keys: Tensor, p: float) -> Tensor:
    """True where the hashed int32 ``keys`` keep their unit: with probability ``1 - p``; bit
    for bit ``_shift_right(mix32(keys), 32 - _KEEP_BITS) >= round(p * 2**_KEEP_BITS)``, in 10
    element-wise kernels rather than 14, most in place.

    fmix32's last xorshift (``z ^ z >>> 16``) leaves the top 16 bits of ``z`` as they are, so
    they are read before it; and they reach the threshold when ``z`` does ``threshold << 16``
    as unsigned integers, which is a signed comparison once both have their sign bit flipped."""
    z = _fmix32_until_last_xorshift(keys)
    z ^= _SIGN_BIT
    threshold = round(p * 2**_KEEP_BITS) << (32 - _KEEP_BITS)
    return z >= threshold - 2**31  # threshold ^ _SIGN_BIT, as an int32


def apply_mask(x: Tensor, keep: Tensor, p: float) -> Tensor:
    """Kept units scaled by ``1 / (1 - p)``, dropped ones zero (inverted dropout): products with
    the mask as 0/1 numbers and with the scale, whose backward is two products. ``torch.where``
    forward and backward took 4-5 times as long on a CPU thread, and so did a bool tensor's
    conversion to floats, which its bytes' (``uint8``) is not. The scale stays a Python number,
    applied in ``x``'s arithmetic: in bfloat16 ``1 / 0.9`` itself is 0.16% off. Compiled, the
    conversion is fused into one kernel either way, and torch 2.11's Inductor cannot lower a bool
    tensor's ``view`` as bytes: the mask converts as it is."""
    mask = keep if torch.compiler.is_compiling() else keep.view(torch.uint8)
    return x * mask.to(x.dtype) * (1.0 / (1.0 - p))


def random_keys(shape: torch.Size, device: torch.device) -> Tensor:
    """Keys from torch's generator, for a site used without the tokens' keys."""
    return torch.randint(-(2**31), 2**31 - 1, shape, dtype=torch.int32, device=device)


class DropoutSite(nn.Module):
    """A place in the model where dropout applies; :func:`number_sites` numbers them once the
    model is built (the order of ``named_modules``), so that every site draws its own noise."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.base = site_base(0)

    def set_site(self, site: int) -> None:
        self.base = site_base(site)

    def active(self) -> bool:
        return self.training and self.p > 0.0

    def extra_repr(self) -> str:
        return f"p={self.p}"


class TokenDropout(DropoutSite):
    """Dropout of ``x [..., features]`` keyed by ``keys [...]``, one key per token (section 5.4's
    residual and embedding dropout). The features' keys are the site's constants, computed once
    (a buffer: they follow the model to its device, and checkpoints leave them out)."""

    def __init__(self, p: float, features: int):
        super().__init__(p)
        self.register_buffer("feature_keys", counter_keys(self.base, features, None),
                             persistent=False)

    def set_site(self, site: int) -> None:
        super().set_site(site)
        self.feature_keys = counter_keys(self.base, self.feature_keys.numel(),
                                         self.feature_keys.device)

    def forward(self, x: Tensor, keys: Tensor | None) -> Tensor:
        if not self.active():
            return x
        if keys is None:
            keys = random_keys(x.shape[:-1], x.device)
        keep = keep_mask(keys.unsqueeze(-1) + self.feature_keys, self.p)  # [..., features]
        return apply_mask(x, keep, self.p)


class AttentionDropout(DropoutSite):
    """Dropout of attention weights ``[B, h, Tq, Tk]``, keyed by the query token's key and the
    (head, key position) pair (tensor2tensor's attention dropout; off in the paper's base)."""

    def forward(self, weights: Tensor, query_keys: Tensor | None) -> Tensor:
        if not self.active():
            return weights
        batch, heads, queries, keys_count = weights.shape
        if query_keys is None:
            query_keys = random_keys((batch, queries), weights.device)
        # (head, key position) -> head * 2^16 + position: a counter whatever the padded width
        # (sentences are far shorter than 2^16 positions)
        head = torch.arange(heads, dtype=torch.int32, device=weights.device) << 16
        position = torch.arange(keys_count, dtype=torch.int32, device=weights.device)
        features = mix32((head[:, None] + position) * _signed(_GAMMA_32) + self.base)  # [h, Tk]
        keys = query_keys[:, None, :, None] + features[None, :, None, :]
        return apply_mask(weights, keep_mask(keys, self.p), self.p)


def number_sites(model: nn.Module) -> None:
    """Give every dropout site of ``model`` its own number, in ``named_modules`` order."""
    sites = (module for _, module in model.named_modules() if isinstance(module, DropoutSite))
    for number, module in enumerate(sites, start=1):
        module.set_site(number)
