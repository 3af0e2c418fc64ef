"""The shared source-target vocabulary (section 5.1: byte-pair encoding, 37k tokens for EN-DE,
32k word-pieces for EN-FR) with sentencepiece, and the encoding of every split into ids."""

from __future__ import annotations

import hashlib
import logging
from itertools import islice
from pathlib import Path

import sentencepiece

from reproduce.config import BpeConfig
from reproduce.data.encoded import EncodedCorpusWriter
from reproduce.errors import ConfigError, DataError, UnwritableOutputError
from reproduce.files import count_lines, iter_lines
from reproduce.special_tokens import BOS, EOS, PAD, UNK
from reproduce.stage_progress import StageProgress

log = logging.getLogger(__name__)

ENCODE_CHUNK_LINES = 200_000


def load_sentencepiece(spm_model: Path) -> sentencepiece.SentencePieceProcessor:
    """The processor of ``spm_model``, or one clear error naming the file."""
    if not spm_model.is_file():
        raise DataError(f"{spm_model}: no such sentencepiece model file")
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    except (OSError, RuntimeError) as error:
        raise DataError(
            f"{spm_model}: not a sentencepiece model ({str(error).splitlines()[0]})"
        ) from None


def sentencepiece_sha256(spm_model: Path) -> str:
    """The digest that names the pieces ``spm_model`` makes: an encoded split's ``meta.json``
    records it, and checkpoints carry it on (:class:`reproduce.provenance.Pieces`)."""
    return hashlib.sha256(spm_model.read_bytes()).hexdigest()


def train_sentencepiece(train_src: Path, train_tgt: Path, config: BpeConfig,
                        model_prefix: Path, threads: int = 1) -> Path:
    """Train on a shuffled sample of ``input_sentence_size`` sentences from both sides.

    ``hard_vocab_limit=False`` lets a small corpus (the tiny default) end with fewer pieces than
    asked instead of failing; the size actually reached is logged.
    """
    for path in (train_src, train_tgt):
        if path.stat().st_size == 0:
            raise DataError(f"{path}: empty; the vocabulary is trained on the prepared train split")
        for _ in iter_lines(path):  # sentencepiece would skip undecodable lines without a word
            pass
    model_prefix.parent.mkdir(parents=True, exist_ok=True)
    temporary = model_prefix.with_name(model_prefix.name + ".tmp")
    Path(str(temporary) + ".model").touch()  # an unwritable folder, named, before training
    sentencepiece.set_random_generator_seed(config.seed)
    try:
        _train(train_src, train_tgt, config, temporary, threads)
    except RuntimeError as error:  # sentencepiece's one error type: settings it cannot meet
        raise ConfigError(
            f"{train_src}, {train_tgt}: sentencepiece cannot train with bpe.vocab_size="
            f"{config.vocab_size} and bpe.character_coverage={config.character_coverage}: "
            f"{_sentencepiece_reason(error)}"
        ) from None
    size = _check_written(temporary, model_prefix)
    for suffix in (".model", ".vocab"):
        Path(str(temporary) + suffix).replace(Path(str(model_prefix) + suffix))
    model = Path(str(model_prefix) + ".model")
    if size < config.vocab_size:  # hard_vocab_limit=False: fewer than asked, not an error
        log.warning("sentencepiece model %s: %d pieces, fewer than bpe.vocab_size=%d: the train "
                    "split holds no more distinct pieces; the models are built for %d",
                    model, size, config.vocab_size, size)
    else:
        log.info("sentencepiece model %s: %d pieces", model, size)
    return model


def _check_written(temporary: Path, model_prefix: Path) -> int:
    """The size of the vocabulary sentencepiece wrote under ``temporary``, once its model loads and
    its vocabulary lists every piece: sentencepiece reports no failed write (a full disk), and a
    truncated model must never be renamed into place."""
    model, vocabulary = (Path(str(temporary) + suffix) for suffix in (".model", ".vocab"))
    try:
        size = sentencepiece.SentencePieceProcessor(model_file=str(model)).vocab_size()
        complete = vocabulary.read_bytes().count(b"\n") == size
    except (RuntimeError, OSError):
        complete = False
    if not complete:
        model.unlink(missing_ok=True)
        vocabulary.unlink(missing_ok=True)
        raise UnwritableOutputError(f"{model_prefix}.model", "sentencepiece wrote an incomplete "
                                    "model, as a full disk leaves it")
    return size


def _train(train_src: Path, train_tgt: Path, config: BpeConfig, model_prefix: Path,
           threads: int) -> None:
    sentencepiece.SentencePieceTrainer.train(
        input=[str(train_src), str(train_tgt)],
        model_prefix=str(model_prefix),
        vocab_size=config.vocab_size,
        model_type=config.model_type,
        character_coverage=config.character_coverage,
        input_sentence_size=config.input_sentence_size,
        shuffle_input_sentence=True,
        seed_sentencepiece_size=min(1_000_000, config.input_sentence_size),
        hard_vocab_limit=False,
        pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
        num_threads=threads,
        minloglevel=1,
    )


def _sentencepiece_reason(error: RuntimeError) -> str:
    """The sentence of sentencepiece's message that says what is wrong, without its source location
    (``INTERNAL: src/trainer_interface.cc(638) [check] Vocabulary size is smaller ...``)."""
    text = " ".join(str(error).split())
    return text.rsplit("] ", 1)[-1] if "] " in text else text


def encode_split(spm_model: Path, src_txt: Path, tgt_txt: Path, out_dir: Path,
                 threads: int = 1) -> None:
    """Encode a split in chunks on ``threads`` threads into an :mod:`reproduce.data.encoded`
    directory, logging the pairs done, rate and ETA as it goes (minutes for a WMT training
    split)."""
    processor = load_sentencepiece(spm_model)
    writer = EncodedCorpusWriter(
        out_dir, processor.vocab_size(),
        {"spm_model_sha256": sentencepiece_sha256(spm_model)},
    )
    sources, targets = iter_lines(src_txt), iter_lines(tgt_txt)
    with StageProgress(f"encode {src_txt}", count_lines(src_txt), "pairs", log) as progress:
        while True:
            source_lines = list(islice(sources, ENCODE_CHUNK_LINES))
            target_lines = list(islice(targets, ENCODE_CHUNK_LINES))
            if len(source_lines) != len(target_lines):
                raise DataError(f"{src_txt} and {tgt_txt} do not have the same number of lines")
            if not source_lines:
                break
            writer.write(
                processor.encode(source_lines, num_threads=threads),
                processor.encode(target_lines, num_threads=threads),
            )
            progress.update(len(source_lines))
    writer.close()
