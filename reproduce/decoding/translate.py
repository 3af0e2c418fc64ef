"""Translation of a text file with a trained checkpoint: sentencepiece -> beam search -> text.

Sentences are sorted by length and decoded (in ``decoding.precision``: fp32, TF32 products, or
bf16 / fp16 autocast) in batches of at most ``max_sentences_per_batch``
sentences and ``max_tokens_per_batch`` cached positions (batching similar lengths wastes little
on padding); the output keeps the input's line order and has
exactly one line per input line: only ``\n`` ends a source line (:mod:`reproduce.files`),
and a translation holding a line break of its own is an error rather than a shifted file. An
empty (or blank) source line gives an empty line, without running the model on it. Progress is
logged as decoding goes (:mod:`reproduce.stage_progress`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sentencepiece
import torch
from pydantic import ValidationError

from reproduce.config import DecodingConfig, ModelConfig
from reproduce.data.bpe import load_sentencepiece, sentencepiece_sha256
from reproduce.decoding.beam_search import beam_search
from reproduce.errors import CheckpointError, DataError
from reproduce.files import read_lines, write_text_whole
from reproduce.model.architectures import Seq2Seq, build_model
from reproduce.provenance import Pieces, check_same_pieces, check_trained_with
from reproduce.stage_progress import StageProgress
from reproduce.special_tokens import EOS, PAD
from reproduce.training.checkpoints import load_checkpoint
from reproduce.training.precision import autocast_dtype

log = logging.getLogger(__name__)


RETRAIN = "retrain the variant (`reproduce train ... --restart`) before decoding or scoring it"


def load_model(checkpoint: Path, device: torch.device | str = "cpu",
               expected_settings: dict | None = None, pieces: tuple[Pieces, ...] = ()) -> Seq2Seq:
    """The model saved in a checkpoint (training checkpoint, final.pt or averaged.pt), in eval mode;
    refused when it was not trained with ``expected_settings``
    (:func:`reproduce.provenance.trained_settings`) or on each of ``pieces`` (those of the files
    it is about to meet)."""
    state = load_checkpoint(checkpoint)
    if expected_settings is not None:
        check_trained_with(checkpoint, state, expected_settings, RETRAIN)
    try:
        config, vocab_size = ModelConfig.model_validate(state["model_config"]), state["vocab_size"]
    except (KeyError, ValidationError) as error:
        raise _unusable(checkpoint, error) from error
    for met in pieces:
        check_same_pieces(checkpoint, state, met, "use the files of its dataset")
    model = build_model(config, vocab_size)
    # What torch raises for the weights of another model (missing, unexpected or misshapen
    # tensors) is wrapped here, where the file is known; elsewhere a RuntimeError is a bug.
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise _unusable(checkpoint, error) from error
    return model.to(device).eval()


def _unusable(checkpoint: Path, error: Exception) -> CheckpointError:
    detail = " ".join(line.strip() for line in str(error).splitlines()[:2])
    return CheckpointError(f"{checkpoint}: cannot use the checkpoint: {type(error).__name__}: "
                           f"{detail or 'no details'}")


def translate_sentences(
    model: Seq2Seq,
    processor: sentencepiece.SentencePieceProcessor,
    sentences: list[str],
    decoding: DecodingConfig,
    device: torch.device | str = "cpu",
    source_name: str = "input",
) -> list[str]:
    """One translation per sentence, in order. A sentence without pieces (empty, or blank) is
    translated as an empty line without running the model, as Moses and fairseq do: given only
    the end of sentence, a model invents a sentence, which BLEU would count against it."""
    decoding = decoding.on(torch.device(device).type, model.config.architecture)
    encoded = [ids + [EOS] for ids in processor.encode(sentences)]
    check_source_lengths((len(ids) for ids in encoded), decoding.max_source_pieces,
                         model.config.position_limit, source_name)
    translations: list[str] = [""] * len(encoded)
    order = sorted((index for index, ids in enumerate(encoded) if len(ids) > 1),
                   key=lambda index: len(encoded[index]))
    batches = _batches(order, [len(ids) for ids in encoded], decoding)
    with (StageProgress(f"decode {source_name}", len(order), "sentences", log) as progress,
          decoding_arithmetic(decoding, torch.device(device).type)):
        for batch in batches:
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
                check_every=decoding.check_every,
                cuda_graphs=decoding.cuda_graphs,
            )
            for index, tokens in zip(batch, hypotheses, strict=True):
                translations[index] = processor.decode(tokens)
            progress.update(len(batch))
    return translations


@contextmanager
def decoding_arithmetic(decoding: DecodingConfig, device_type: str) -> Iterator[None]:
    """``decoding.precision`` inside: bf16 or fp16 autocast, or fp32 tensors whose CUDA matrix
    products run in TF32 (tf32) or in IEEE fp32 (every other precision, whatever the process set
    before). A recorded graph keeps the casts it made: autocast's cache would free them on
    exit."""
    dtype = autocast_dtype(decoding.precision)
    with (cuda_matrix_products_in_tf32(decoding.precision == "tf32"),
          torch.autocast(device_type, dtype=dtype, enabled=dtype is not None,
                         cache_enabled=not decoding.cuda_graphs)):
        yield


@contextmanager
def cuda_matrix_products_in_tf32(enabled: bool) -> Iterator[None]:
    """cuBLAS's fp32 products in TF32 (``enabled``) or IEEE fp32 inside; torch's setting is the
    process's, and is put back as it was. Through ``fp32_precision`` where torch has it (2.9
    on, where reading the older ``allow_tf32`` while it says tf32 raises), else
    ``allow_tf32``."""
    matmul = torch.backends.cuda.matmul
    name, value = (("fp32_precision", "tf32" if enabled else "ieee")
                   if hasattr(matmul, "fp32_precision") else ("allow_tf32", enabled))
    before = getattr(matmul, name)
    setattr(matmul, name, value)
    try:
        yield
    finally:
        setattr(matmul, name, before)


def _batches(order: list[int], lengths: list[int], decoding: DecodingConfig) -> list[list[int]]:
    """``order`` (sentences by increasing length) cut into consecutive batches, each within
    ``max_sentences_per_batch`` and ``max_tokens_per_batch``: a batch of n sentences whose longest
    source has L pieces caches up to n x beam x (L + max_length_offset) positions. A sentence
    over the token bound on its own is a batch of one."""
    batches: list[list[int]] = []
    for index in order:
        positions = decoding.beam_size * (lengths[index] + decoding.max_length_offset)
        if batches and (len(batches[-1]) < decoding.max_sentences_per_batch
                        and (len(batches[-1]) + 1) * positions
                        <= decoding.max_tokens_per_batch):
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches


def decoding_device() -> torch.device:
    """Where decoding and perplexity run: the GPU where there is one."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sentencepiece_pieces(spm_model: Path,
                         processor: sentencepiece.SentencePieceProcessor) -> Pieces:
    """The pieces that ``processor`` (loaded from ``spm_model``) makes."""
    return Pieces(str(spm_model), processor.vocab_size(), sentencepiece_sha256(spm_model))


def translate_file(
    checkpoint: Path, spm_model: Path, source: Path, out: Path, decoding: DecodingConfig,
    expected_settings: dict | None = None,
) -> None:
    processor = load_sentencepiece(spm_model)
    device = decoding_device()
    model = load_model(checkpoint, device, expected_settings,
                       (sentencepiece_pieces(spm_model, processor),))
    write_translations(model, processor, source, out, decoding, device)


def write_translations(model: Seq2Seq, processor: sentencepiece.SentencePieceProcessor,
                       source: Path, out: Path, decoding: DecodingConfig,
                       device: torch.device) -> None:
    """Translate the lines of ``source`` into ``out``, one line each."""
    sentences = read_lines(source)
    translations = translate_sentences(model, processor, sentences, decoding, device, str(source))
    _check_one_line_each(translations, len(sentences), source)
    write_text_whole(out, "".join(line + "\n" for line in translations))


def check_source_lengths(lengths: Iterable[int], max_source_pieces: int,
                         position_limit: int | None, source_name: str) -> None:
    """Refuse, before any decoding, a line longer than ``decoding.max_source_pieces`` or than
    learned positions reach (row E), whichever is less. Beam search runs a line's length +
    ``max_length_offset`` steps, each attending to the whole line: one line of 51,000 words (a
    file whose line breaks were lost) decoded for a quarter of an hour without an end in sight."""
    if position_limit is not None and position_limit < max_source_pieces:
        limit, beyond = position_limit, (
            f"the model's learned positions (model.max_positions={position_limit}); shorten or "
            f"drop the line, or train with a larger max_positions")
    else:
        limit, beyond = max_source_pieces, (
            f"decoding.max_source_pieces={max_source_pieces}; split the line (were the file's "
            f"line breaks lost?) or drop it, or raise decoding.max_source_pieces")
    for number, length in enumerate(lengths, start=1):
        if length > limit:
            raise DataError(f"{source_name} line {number}: {length} pieces (end of sentence "
                            f"included), more than {beyond}")


def _check_one_line_each(translations: list[str], expected: int, source: Path) -> None:
    if len(translations) != expected:
        raise DataError(f"{source}: {expected} lines in, {len(translations)} translations out")
    for number, line in enumerate(translations, start=1):
        if "\n" in line:
            raise DataError(
                f"{source} line {number}: its translation holds a line break ({line[:80]!r})"
            )
