"""Position-wise feed-forward network (section 3.3, eq. 2): FFN(x) = max(0, xW1 + b1)W2 + b2.

Initialised as every linear layer of the Transformer (:mod:`reproduce.model.transformer`):
Xavier-uniform weights, zero biases.
"""

from torch import Tensor, nn


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.inner = nn.Linear(d_model, d_ff)
        self.outer = nn.Linear(d_ff, d_model)
        for linear in (self.inner, self.outer):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:  # [..., d_model] -> [..., d_model]
        return self.outer(self.inner(x).relu())
