"""Figures 3-5: what the attention heads of a trained model look at, for chosen sentences.

The paper shows encoder self-attention in layer 5 of 6 (long-distance dependencies, anaphora
resolution). We plot, for each chosen sentence and layer, every head of the three kinds of
attention: encoder self-attention (source x source), decoder self-attention (target x target,
causal) and encoder-decoder attention (target x source). The target is the model's own
translation, fed back with teacher forcing as in training (BOS y_1 .. y_m), so the decoder
attends exactly as it did while producing it. The weights come from
:func:`reproduce.model.inspection.attention_maps`, which recomputes them from each layer's own
projections; they are the ones the fused SDPA path applies (tests/test_attention_weights.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import sentencepiece  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from reproduce.decoding.translate import load_model  # noqa: E402
from reproduce.errors import CheckpointError, UsageError  # noqa: E402
from reproduce.files import read_text  # noqa: E402
from reproduce.model.inspection import KINDS, attention_maps  # noqa: E402
from reproduce.special_tokens import BOS, EOS  # noqa: E402
from reproduce.tables.plots import save_figure  # noqa: E402

TITLES = {"encoder_self": "encoder self-attention", "decoder_self": "decoder self-attention",
          "cross": "encoder-decoder attention"}


def _read_lines(path: Path) -> list[str]:
    lines = read_text(path).split("\n")  # UTF-8 or an error naming the line
    return lines[:-1] if lines and lines[-1] == "" else lines


def chosen_lines(path: Path, sentences: list[int]) -> list[str]:
    """Lines ``sentences`` (0-based) of ``path``; an index past the end names the file."""
    lines = _read_lines(path)
    missing = [index for index in sentences if not 0 <= index < len(lines)]
    if missing:
        raise UsageError(f"{path}: has {len(lines)} lines; sentence indices {missing} are out of "
                         f"range (expected 0..{len(lines) - 1})")
    return [lines[index] for index in sentences]


def heads_figure(weights: torch.Tensor, query_labels: list[str], key_labels: list[str],
                 title: str) -> Figure:
    """One heat map per head of ``weights`` ``[h, queries, keys]`` (rows: queries)."""
    heads = weights.size(0)
    columns = min(heads, 4)
    rows = math.ceil(heads / columns)
    size = 0.22 * max(len(query_labels), len(key_labels)) + 1.5
    figure, grid = plt.subplots(rows, columns, figsize=(columns * size, rows * size),
                                squeeze=False)
    for head, axes in enumerate(grid.flat):
        if head >= heads:
            axes.axis("off")
            continue
        axes.imshow(weights[head].numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
        axes.set_title(f"head {head + 1}", fontsize=8)
        axes.set_xticks(range(len(key_labels)), key_labels, rotation=90, fontsize=6)
        axes.set_yticks(range(len(query_labels)), query_labels, fontsize=6)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return figure


def plot_attention(checkpoint: Path, spm_model: Path, source_file: Path, target_file: Path,
                   sentences: list[int], layers: list[int] | None, out_dir: Path) -> list[Path]:
    """Write ``{kind}_sentence{index}_layer{layer}.png`` for every chosen sentence (0-based line
    of ``source_file``/``target_file``), layer (1-based; None = the last) and attention kind."""
    sources, targets = chosen_lines(source_file, sentences), chosen_lines(target_file, sentences)
    model = load_model(checkpoint)
    if model.config.architecture != "transformer":
        raise CheckpointError(
            f"{checkpoint}: a model.architecture {model.config.architecture} model has no "
            f"attention heads to plot; Figures 3-5 need a Transformer checkpoint")
    available = len(model.encoder)
    layers = layers or [available]
    if any(not 1 <= layer <= available for layer in layers):
        raise UsageError(f"{checkpoint}: the model has layers 1..{available}; got {layers}")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for index, source_text, target_text in zip(sentences, sources, targets, strict=True):
        source_ids = processor.encode(source_text) + [EOS]
        target_ids = processor.encode(target_text)
        maps = attention_maps(model, torch.tensor([source_ids]), torch.tensor([[BOS] + target_ids]))
        source_labels = processor.id_to_piece(source_ids[:-1]) + ["</s>"]
        target_labels = ["<s>"] + processor.id_to_piece(target_ids)
        labels = {"encoder_self": (source_labels, source_labels),
                  "decoder_self": (target_labels, target_labels),
                  "cross": (target_labels, source_labels)}
        for layer in layers:
            for kind in KINDS:
                title = (f"{TITLES[kind]}, layer {layer} of {available}, sentence {index}: "
                         f"{source_text[:60]!r}")
                figure = heads_figure(maps[kind][layer - 1][0], *labels[kind], title)
                path = out_dir / f"{kind}_sentence{index}_layer{layer}.png"
                save_figure(figure, path)
                written.append(path)
    return written
