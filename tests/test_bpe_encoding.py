"""Sentencepiece training and the binarized corpus format."""

import logging

import numpy as np
import pytest
import sentencepiece
from sentencepiece import sentencepiece_model_pb2

from reproduce.config import BpeConfig
from reproduce.data.bpe import encode_split, train_sentencepiece
from reproduce.data.encoded import EncodedCorpus, token_dtype
from reproduce.data.tiny_corpus import generate_corpus
from reproduce.special_tokens import BOS, EOS, PAD, UNK


def _write_corpus(tmp_path, pairs):
    (tmp_path / "train.src").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "train.tgt").write_text("".join(t + "\n" for _, t in pairs))
    return tmp_path / "train.src", tmp_path / "train.tgt"


def test_shared_vocabulary_round_trips_and_reserves_the_special_ids(tmp_path):
    pairs = generate_corpus(2000, 0, 0, seed=5)["train"]
    src, tgt = _write_corpus(tmp_path, pairs)
    model = train_sentencepiece(src, tgt, BpeConfig(vocab_size=300), tmp_path / "bpe" / "spm")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
    assert ((processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
            == (PAD, UNK, BOS, EOS))
    assert processor.vocab_size() == 300
    for source, target in pairs[:50]:  # one vocabulary for both languages
        assert processor.decode(processor.encode(source)) == source
        assert processor.decode(processor.encode(target)) == target


def test_encoded_corpus_holds_exactly_the_sentencepiece_ids(tmp_path):
    pairs = generate_corpus(500, 0, 0, seed=6)["train"]
    src, tgt = _write_corpus(tmp_path, pairs)
    model = train_sentencepiece(src, tgt, BpeConfig(vocab_size=200), tmp_path / "spm")
    encode_split(model, src, tgt, tmp_path / "encoded")
    corpus = EncodedCorpus.open(tmp_path / "encoded")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
    assert len(corpus) == 500 and corpus.vocab_size == 200
    for index in (0, 17, 499):
        assert corpus.source(index).tolist() == processor.encode(pairs[index][0])
        assert corpus.target(index).tolist() == processor.encode(pairs[index][1])
    assert corpus.target_lengths[17] == len(processor.encode(pairs[17][1]))
    assert not (tmp_path / "encoded.tmp").exists()


def test_large_vocabularies_switch_to_32_bit_ids():
    assert token_dtype(37000) == np.uint16
    assert token_dtype(70000) == np.int32


def test_ids_stay_16_bit_exactly_while_the_largest_id_fits_in_16_bits():
    """A vocabulary of 65536 pieces has ids 0..65535, all in uint16; one piece more needs id
    65536, which uint16 would wrap to 0 (PAD)."""
    assert token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.int32


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_sentencepiece_trains_with_the_configured_settings_on_both_sides(tmp_path, model_type):
    """The model records the settings it was trained with: every one must be the configuration's
    (a BPE vocabulary of its size and coverage, sampled as configured), trained on the source
    and the target file together, which is what makes the vocabulary shared (section 5.1)."""
    pairs = generate_corpus(2000, 0, 0, seed=5)["train"]
    src, tgt = _write_corpus(tmp_path, pairs)
    config = BpeConfig(vocab_size=300, model_type=model_type, character_coverage=0.9995,
                       input_sentence_size=1500, seed=3)
    model = train_sentencepiece(src, tgt, config, tmp_path / "bpe" / "spm")
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.read_bytes())
    spec = proto.trainer_spec
    assert list(spec.input) == [str(src), str(tgt)]
    assert spec.model_type == {"bpe": spec.BPE, "unigram": spec.UNIGRAM}[model_type]
    assert spec.vocab_size == 300 and len(proto.pieces) == 300
    assert spec.character_coverage == pytest.approx(0.9995)
    assert spec.input_sentence_size == 1500 and spec.shuffle_input_sentence
    # Both files in place under the prefix asked for, no temporary one left beside them.
    assert sorted(path.name for path in model.parent.iterdir()) == ["spm.model", "spm.vocab"]


def test_a_vocabulary_smaller_than_asked_is_a_warning_naming_both_sizes(tmp_path, caplog):
    """A train split with fewer distinct pieces than bpe.vocab_size gives a smaller vocabulary
    (sentencepiece's soft limit): the run goes on, and says so as a warning, not in passing."""
    src, tgt = _write_corpus(tmp_path, generate_corpus(200, 0, 0, seed=5)["train"])
    with caplog.at_level(logging.INFO, logger="reproduce.data.bpe"):
        model = train_sentencepiece(src, tgt, BpeConfig(vocab_size=5000, seed=3),
                                    tmp_path / "bpe" / "spm")
    size = sentencepiece.SentencePieceProcessor(model_file=str(model)).vocab_size()
    assert size < 5000
    (record,) = [record for record in caplog.records if "pieces" in record.getMessage()]
    assert record.levelno == logging.WARNING
    assert f"{size} pieces, fewer than bpe.vocab_size=5000" in record.getMessage()
