"""Sentencepiece training and the binarized corpus format."""

import numpy as np
import sentencepiece

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
