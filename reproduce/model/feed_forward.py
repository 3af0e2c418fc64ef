"""Position-wise feed-forward network (section 3.3, eq. 2): FFN(x) = max(0, xW1 + b1)W2 + b2."""

from torch import Tensor, nn


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.inner = nn.Linear(d_model, d_ff)
        self.outer = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:  # [..., d_model] -> [..., d_model]
        return self.outer(self.inner(x).relu())
