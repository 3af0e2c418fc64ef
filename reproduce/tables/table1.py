"""Table 1 (section 4): complexity per layer, sequential operations and maximum path length of
self-attention, recurrent, convolutional and restricted self-attention layers, shown twice:

* **analytically**, the paper's formulas as printed (n = sequence length, d = representation
  dimension, k = kernel width, r = neighbourhood size);
* **measured** on the machine at hand: the FLOPs of one layer's forward pass, counted by
  ``torch.utils.flop_counter`` while it runs, and its wall time (``torch.utils.benchmark``), for
  n in 16..1024 and d = 512, beside exact FLOP formulas of the same layers.

The layers measured: this package's multi-head self-attention (h = 8, d_k = d_v = 64, Q/K/V and
output projections included), ``torch.nn.RNN`` (the plain tanh recurrence; an LSTM does 4x its
matrix products), ``torch.nn.Conv1d`` (width k, same padding) and this package's restricted
self-attention (radius r). Restricted self-attention is a band *mask* over the dense n x n scores,
so it executes as many FLOPs as full attention; the O(r n d) of the paper needs a kernel that
computes only the band, which the formula column gives.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
from torch import nn
from torch.utils.benchmark import Timer
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from reproduce.files import write_text_whole
from reproduce.model.attention import SelfAttention
from reproduce.model.token_layout import TokenLayout
from reproduce.tables.plots import save_figure, table1_figure

ANALYTIC = pd.DataFrame(
    [
        ("Self-Attention", "O(n^2 · d)", "O(1)", "O(1)"),
        ("Recurrent", "O(n · d^2)", "O(n)", "O(n)"),
        ("Convolutional", "O(k · n · d^2)", "O(1)", "O(log_k(n))"),
        ("Self-Attention (restricted)", "O(r · n · d)", "O(1)", "O(n/r)"),
    ],
    columns=["Layer Type", "Complexity per Layer", "Sequential Operations",
             "Maximum Path Length"],
)
LENGTHS = [16, 32, 64, 128, 256, 512, 1024]
HEADS = 8

# The CPU SDPA kernel has no FLOP formula in torch.utils.flop_counter; it computes exactly the
# two products Q K^T and (weights) V that the registered GPU kernels are counted with.
_CPU_SDPA = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu:
        lambda query, key, value, *args, out_shape=None, **kwargs:
            sdpa_flop_count(query, key, value),
}


class OneSentence(nn.Module):
    """This package's attention, which takes a layout's tokens ``[N, d]``, on one unpadded
    sentence ``[1, n, d]`` as the torch layers take it."""

    def __init__(self, attention: SelfAttention):
        super().__init__()
        self.attention = attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layout = TokenLayout.dense(x.size(0), x.size(1), x.device)
        return layout.pad(self.attention(layout.unpad(x), layout))


@dataclass(frozen=True)
class LayerSpec:
    name: str
    build: Callable[[], nn.Module]
    # Forward FLOPs (multiply-add = 2) of the layer on one sequence of length n.
    flops: Callable[[int], int]
    # The input the layer takes, from [1, n, d].
    prepare: Callable[[torch.Tensor], torch.Tensor] = lambda x: x


def layer_specs(d: int, kernel: int, radius: int) -> list[LayerSpec]:
    """The four layer types of Table 1 at dimension ``d`` with their exact FLOP formulas."""
    heads, head_dim = HEADS, d // HEADS
    return [
        LayerSpec("Self-Attention",
                  lambda: OneSentence(SelfAttention(d, heads, head_dim, head_dim, dropout=0.0)),
                  lambda n: 8 * n * d * d + 4 * n * n * d),
        LayerSpec("Recurrent", lambda: nn.RNN(d, d, batch_first=True),
                  lambda n: 4 * n * d * d),
        LayerSpec("Convolutional", lambda: nn.Conv1d(d, d, kernel, padding=kernel // 2),
                  lambda n: 2 * kernel * n * d * d, prepare=lambda x: x.transpose(1, 2)),
        LayerSpec("Self-Attention (restricted)",
                  lambda: OneSentence(SelfAttention(d, heads, head_dim, head_dim, dropout=0.0,
                                                    radius=radius)),
                  lambda n: 8 * n * d * d + 4 * band_entries(n, radius) * d),
    ]


def band_entries(n: int, radius: int) -> int:
    """Query-key pairs with |i - j| <= radius in a sequence of n (fewer near the ends)."""
    return sum(min(i + radius, n - 1) - max(i - radius, 0) + 1 for i in range(n))


def count_flops(layer: nn.Module, x: torch.Tensor) -> int:
    """FLOPs of one forward pass, counted operator by operator as it runs."""
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=_CPU_SDPA) as counter:
        layer(x)
    return counter.get_total_flops()


def wall_seconds(layer: nn.Module, x: torch.Tensor, threads: int, min_run_time: float) -> float:
    """Median wall time of one forward pass (``torch.utils.benchmark``, warm-up included)."""
    with torch.no_grad():
        timer = Timer("layer(x)", globals={"layer": layer, "x": x}, num_threads=threads)
        return timer.blocked_autorange(min_run_time=min_run_time).median


def measure_table1(lengths: list[int] = LENGTHS, d: int = 512, kernel: int = 3, radius: int = 16,
                   threads: int = 1, min_run_time: float = 0.2) -> pd.DataFrame:
    """One row per layer type and length: FLOPs counted, FLOPs by formula, wall time."""
    torch.manual_seed(0)
    rows = []
    for spec in layer_specs(d, kernel, radius):
        layer = spec.build().eval()
        for n in lengths:
            x = spec.prepare(torch.randn(1, n, d))
            rows.append({
                "layer": spec.name, "n": n, "d": d,
                "FLOPs counted": count_flops(layer, x),
                "FLOPs formula": spec.flops(n),
                "wall ms": 1000 * wall_seconds(layer, x, threads, min_run_time),
            })
    return pd.DataFrame(rows)


def machine_description(threads: int) -> str:
    processor = platform.processor() or platform.machine()
    return (f"{processor}, {threads} thread(s), torch {torch.__version__}, batch 1, "
            "forward pass, float32")


def table1_notes(kernel: int, radius: int) -> list[str]:
    return [
        "Analytic: the paper's Table 1 as printed (n sequence length, d representation "
        "dimension, k kernel width, r neighbourhood size).",
        "Measured: one layer's forward pass on one sequence. FLOPs counted = "
        "torch.utils.flop_counter while the layer runs (a multiply-add is 2 FLOPs); FLOPs "
        "formula = self-attention 8nd^2 (Q, K, V, output projections) + 4n^2d (QK^T and the "
        f"weighted sum of V); recurrent (torch.nn.RNN, tanh) 4nd^2; convolutional "
        f"(torch.nn.Conv1d, k = {kernel}) 2knd^2; restricted self-attention (r = {radius}) "
        "8nd^2 + 4·(pairs with |i-j| <= r)·d, about 8nd^2 + 4n(2r+1)d.",
        "Restricted self-attention here is a band mask over the dense n x n scores: it runs as "
        "many FLOPs as full self-attention (FLOPs counted), and its O(r·n·d) (FLOPs formula) "
        "needs a kernel that computes the band only.",
        "wall ms: median of torch.utils.benchmark.Timer.blocked_autorange, after warm-up. "
        "The recurrent layer's n sequential steps (Sequential Operations O(n)) show in its time "
        "per FLOP.",
    ]


def render_table1(out_dir: Path, lengths: list[int] = LENGTHS, d: int = 512, kernel: int = 3,
                  radius: int = 16, threads: int = 1, min_run_time: float = 0.2) -> list[Path]:
    """Measure, then write ``table1.md``, ``table1.csv`` and ``table1.png`` to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(threads)
    measured = measure_table1(lengths, d, kernel, radius, threads, min_run_time)
    machine = machine_description(threads)
    paths = [out_dir / "table1.md", out_dir / "table1.csv", out_dir / "table1.png"]
    write_text_whole(paths[0], markdown_table1(measured, machine, kernel, radius))
    write_text_whole(paths[1], measured.to_csv(index=False))
    save_figure(table1_figure(measured, machine), paths[2])
    return paths


def markdown_table1(measured: pd.DataFrame, machine: str, kernel: int, radius: int) -> str:
    shown = measured.copy()
    for column in ("FLOPs counted", "FLOPs formula"):
        shown[column] = [f"{value:.3e}" for value in shown[column]]
    shown["wall ms"] = [f"{value:.3g}" for value in shown["wall ms"]]
    notes = "\n".join(f"- {note}" for note in table1_notes(kernel, radius))
    return (
        "# Table 1 — complexity per layer, analytic and measured\n\n"
        "## Analytic (the paper's formulas)\n\n"
        f"{ANALYTIC.to_markdown(index=False)}\n\n"
        f"## Measured on this machine ({machine})\n\n"
        f"{shown.to_markdown(index=False, disable_numparse=True)}\n\nNotes:\n\n{notes}\n"
    )
