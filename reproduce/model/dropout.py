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

The hash is splitmix64's finaliser (Steele, Lea and Flood 2014, "Fast splittable pseudorandom
number generators"; the mixing function of Java's SplittableRandom), a counter-based generator
in the sense of Salmon et al. (2011, "Parallel random numbers: as easy as 1, 2, 3"): each output
is a function of its counter alone, so no state is carried and nothing is sequential. The host
hashes (seed, step, pair, side, position) into one 64-bit key per token while it collates a
batch (:func:`token_keys`); on the device a site mixes each token's key with a key per feature,
``[N, 1] + [1, d]``, element-wise, and keeps a unit where the top 24 bits of the hash reach
``P_drop * 2^24``: keep-probability ``1 - P_drop`` (to 2^-24), kept units scaled by
``1 / (1 - P_drop)``. Under ``torch.compile`` the hash fuses into one kernel per site that reads
``N + d`` keys; in eager mode it is a dozen element-wise integer kernels.

Without keys (a module called on its own in training mode) a site draws random keys from torch's
generator: the noise is then right in distribution but not tied to the token.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

# splitmix64's constants (as unsigned 64-bit integers).
_GAMMA = 0x9E3779B97F4A7C15
_MULTIPLY_1 = 0xBF58476D1CE4E5B9
_MULTIPLY_2 = 0x94D049BB133111EB
_UINT64 = 2**64
_KEEP_BITS = 24  # the hash's top bits compared with the drop probability
_SIGN_BIT = -(2**63)  # as an int64


def _signed(value: int) -> int:
    """An unsigned 64-bit constant as the int64 with the same bits (torch has no uint64 maths)."""
    return value - _UINT64 if value >= 2**63 else value


def mix_host(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on ``uint64`` arrays (wrapping arithmetic)."""
    z = values.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(_MULTIPLY_1)
        z ^= z >> np.uint64(27)
        z *= np.uint64(_MULTIPLY_2)
        z ^= z >> np.uint64(31)
    return z


def _shift_right(z: Tensor, bits: int) -> Tensor:
    """Logical right shift of int64 bits (``>>`` on int64 is arithmetic: the sign bit spreads)."""
    shifted = z >> bits
    shifted &= (1 << (64 - bits)) - 1
    return shifted


def mix(z: Tensor) -> Tensor:
    """:func:`mix_host` on int64 tensors, bit for bit (int64 products wrap as uint64's do)."""
    z = z ^ _shift_right(z, 30)
    z = z * _signed(_MULTIPLY_1)
    z = z ^ _shift_right(z, 27)
    z = z * _signed(_MULTIPLY_2)
    return z ^ _shift_right(z, 31)


def step_key(seed: int, step: int) -> int:
    """The key of one optimizer step of a run: all of its tokens' keys derive from it."""
    with np.errstate(over="ignore"):
        seeded = mix_host(np.array([seed % _UINT64], dtype=np.uint64))
        return int(mix_host(seeded + np.uint64(step % _UINT64))[0])


def token_keys(step: int, pairs: np.ndarray, sizes: np.ndarray, side: int) -> np.ndarray:
    """``int64 [sum(sizes)]``: the keys of the tokens of ``pairs`` (corpus indices), ``sizes[i]``
    positions each, in the order collate lays them out (pair by pair, position by position).

    ``step`` is :func:`step_key`'s; ``side`` tells the source (0) from the target (1)."""
    sentence = mix_host(pairs.astype(np.uint64) * np.uint64(2) + np.uint64(side))
    starts = np.cumsum(sizes) - sizes  # where each pair's tokens start
    positions = (np.arange(int(np.sum(sizes))) - np.repeat(starts, sizes)).astype(np.uint64)
    with np.errstate(over="ignore"):
        keys = (np.uint64(step) + np.repeat(sentence, sizes)
                + positions * np.uint64(_GAMMA))
    return mix_host(keys).view(np.int64)


def site_base(site: int) -> int:
    """The key of a dropout site, as an int64: its features' keys derive from it."""
    return int(mix_host(np.array([site], dtype=np.uint64) + np.uint64(_GAMMA)).view(np.int64)[0])


def counter_keys(base: int, count: int, device: torch.device | None) -> Tensor:
    """``int64 [count]``: the keys of a site's ``count`` features."""
    counters = torch.arange(count, dtype=torch.int64, device=device)
    return mix(counters * _signed(_GAMMA) + base)


def keep_mask(keys: Tensor, p: float) -> Tensor:
    """True where the hashed ``keys`` keep their unit: with probability ``1 - p``; bit for bit
    ``_shift_right(mix(keys), 64 - _KEEP_BITS) >= round(p * 2**_KEEP_BITS)``, in 9 element-wise
    kernels rather than 15, most in place (eager CPU training spent a quarter of its time here).

    mix's last xorshift (``z ^ z >>> 31``) leaves the top 31 bits of ``z`` as they are, so the
    top 24 are read before it; and they reach the threshold when ``z`` does ``threshold << 40``
    as unsigned integers, which is a signed comparison once both have their sign bit flipped."""
    z = keys ^ _shift_right(keys, 30)  # a new tensor: ``keys`` is left as it was
    z *= _signed(_MULTIPLY_1)
    z ^= _shift_right(z, 27)
    z *= _signed(_MULTIPLY_2)
    z ^= _SIGN_BIT
    threshold = round(p * 2**_KEEP_BITS) << (64 - _KEEP_BITS)
    return z >= threshold - 2**63  # threshold ^ _SIGN_BIT, as an int64


def apply_mask(x: Tensor, keep: Tensor, p: float) -> Tensor:
    """Kept units scaled by ``1 / (1 - p)``, dropped ones zero (inverted dropout)."""
    return torch.where(keep, x * (1.0 / (1.0 - p)), torch.zeros((), dtype=x.dtype,
                                                                 device=x.device))


def random_keys(shape: torch.Size, device: torch.device) -> Tensor:
    """Keys from torch's generator, for a site used without the tokens' keys."""
    return torch.randint(-(2**63), 2**63 - 1, shape, dtype=torch.int64, device=device)


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
        # (head, key position) -> head * 2^32 + position: a counter whatever the padded width
        head = torch.arange(heads, dtype=torch.int64, device=weights.device) << 32
        position = torch.arange(keys_count, dtype=torch.int64, device=weights.device)
        features = mix((head[:, None] + position) * _signed(_GAMMA) + self.base)  # [h, Tk]
        keys = query_keys[:, None, :, None] + features[None, :, None, :]
        return apply_mask(weights, keep_mask(keys, self.p), self.p)


def number_sites(model: nn.Module) -> None:
    """Give every dropout site of ``model`` its own number, in ``named_modules`` order."""
    sites = (module for _, module in model.named_modules() if isinstance(module, DropoutSite))
    for number, module in enumerate(sites, start=1):
        module.set_site(number)
