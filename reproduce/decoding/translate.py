"""Translation of a text file with a trained checkpoint: sentencepiece -> beam search -> text.

Sentences are sorted by length and decoded in batches of ``max_sentences_per_batch`` (batching
similar lengths wastes little on padding); the output keeps the input's line order.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import sentencepiece
import torch
from tqdm import tqdm

from reproduce.config import DecodingConfig, ModelConfig, differing_settings
from reproduce.decoding.beam_search import beam_search
from reproduce.model.transformer import Transformer
from reproduce.special_tokens import EOS, PAD
from reproduce.training.checkpoints import CheckpointError, load_checkpoint

log = logging.getLogger(__name__)


def load_model(checkpoint: Path, device: torch.device | str = "cpu",
               expected_settings: dict | None = None) -> Transformer:
    """The model saved in a checkpoint (training checkpoint, final.pt or averaged.pt), in eval mode;
    refused when ``expected_settings`` (:func:`reproduce.config.trained_settings`) differ from
    the settings it was trained with."""
    state = load_checkpoint(checkpoint)
    if expected_settings is not None and state.get("settings") != expected_settings:
        differences = "; ".join(differing_settings(state.get("settings") or {}, expected_settings))
        raise CheckpointError(
            f"{checkpoint}: trained with other settings than the experiment now has ({differences}); "
            f"retrain the variant (`reproduce train ... --restart`) before decoding"
        )
    model = Transformer(ModelConfig.model_validate(state["model_config"]), state["vocab_size"])
    model.load_state_dict(state["model"])
    return model.to(device).eval()


def translate_sentences(
    model: Transformer,
    processor: sentencepiece.SentencePieceProcessor,
    sentences: list[str],
    decoding: DecodingConfig,
    device: torch.device | str = "cpu",
) -> list[str]:
    encoded = [ids + [EOS] for ids in processor.encode(sentences)]
    order = sorted(range(len(encoded)), key=lambda index: len(encoded[index]))
    translations: list[str] = [""] * len(encoded)
    batches = [
        order[start : start + decoding.max_sentences_per_batch]
        for start in range(0, len(order), decoding.max_sentences_per_batch)
    ]
    progress = tqdm(total=len(encoded), unit="sent", disable=not sys.stderr.isatty())
    for number, batch in enumerate(batches, start=1):
        longest = max(len(encoded[index]) for index in batch)
        source = torch.full((len(batch), longest), PAD, dtype=torch.long)
        for row, index in enumerate(batch):
            source[row, : len(encoded[index])] = torch.tensor(encoded[index])
        hypotheses = beam_search(
            model,
            source.to(device),
            beam_size=decoding.beam_size,
            alpha=decoding.length_penalty,
            max_length_offset=decoding.max_length_offset,
        )
        for index, tokens in zip(batch, hypotheses):
            translations[index] = processor.decode(tokens)
        progress.update(len(batch))
        if progress.disable and (number % 10 == 0 or number == len(batches)):
            log.info("decoded %d/%d batches", number, len(batches))
    progress.close()
    return translations


def translate_file(
    checkpoint: Path, spm_model: Path, source: Path, out: Path, decoding: DecodingConfig,
    expected_settings: dict | None = None,
) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_model(checkpoint, device, expected_settings)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    sentences = source.read_text(encoding="utf-8").splitlines()
    translations = translate_sentences(model, processor, sentences, decoding, device)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(out.name + ".tmp")
    temporary.write_text("".join(line + "\n" for line in translations), encoding="utf-8")
    temporary.replace(out)
