"""Positional information (section 3.5): sinusoids, or a learned embedding (Table 3, row E)."""

from __future__ import annotations

import math

import torch
from torch import nn

from reproduce.errors import ConfigError


def sinusoidal_table(length: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Returns a ``[length, d_model]`` float32 tensor.
    """
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # [L, 1]
    frequency = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
    )  # [d_model/2] = 1 / 10000^(2i/d_model)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table.float()


class SinusoidalPositions(nn.Module):
    """Fixed sinusoids, computed once and extended on demand for longer inputs."""

    def __init__(self, d_model: int, initial_length: int = 1024):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", sinusoidal_table(initial_length, d_model), persistent=False)

    def forward(self, positions: torch.Tensor, end: int) -> torch.Tensor:
        """Encodings of ``positions`` ``[N]``, each below ``end``: ``[N, d_model]``."""
        if end > self.table.size(0):
            self.table = sinusoidal_table(2 * end, self.d_model).to(self.table)  # device, dtype
        return self.table[positions]


class LearnedPositions(nn.Module):
    """A trained embedding per position (row E), limited to ``max_positions`` positions."""

    def __init__(self, d_model: int, max_positions: int):
        super().__init__()
        self.embedding = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d_model**-0.5)

    def forward(self, positions: torch.Tensor, end: int) -> torch.Tensor:
        """Embeddings of ``positions`` ``[N]``, each below ``end``: ``[N, d_model]``."""
        if end > self.embedding.num_embeddings:
            raise ConfigError(
                f"sequence of {end} positions is longer than the learned positional "
                f"embedding's model.max_positions={self.embedding.num_embeddings}"
            )
        return self.embedding(positions)
