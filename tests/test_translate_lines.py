"""Translation of a list of lines: empty lines stay empty without the model, order is kept,
progress is logged as sentences are decoded, and a line over the bound stops it all beforehand."""

import logging
import re

import pytest
import torch

from reproduce.config import BpeConfig, DecodingConfig, ModelConfig
from reproduce.data.bpe import load_sentencepiece, train_sentencepiece
from reproduce.data.tiny_corpus import generate_corpus
from reproduce.decoding.translate import translate_sentences
from reproduce.errors import DataError
from reproduce.model.architectures import build_model
from reproduce.special_tokens import EOS, PAD

DECODING = DecodingConfig(beam_size=2, max_length_offset=3, max_sentences_per_batch=2)
PROGRESS = re.compile(r"decode input: (\d+)/(\d+) sentences \(\d+\.\d%\), \S+ sentences/s, "
                      r"elapsed \d\d:\d\d:\d\d, ETA (\d\d:\d\d:\d\d|\?), last progress \d+ s ago$")


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spm")
    pairs = generate_corpus(300, 0, 0, seed=3)["train"]
    (folder / "train.src").write_text("".join(s + "\n" for s, _ in pairs))
    (folder / "train.tgt").write_text("".join(t + "\n" for _, t in pairs))
    model = train_sentencepiece(folder / "train.src", folder / "train.tgt",
                                BpeConfig(vocab_size=120), folder / "spm")
    return load_sentencepiece(model)


@pytest.fixture()
def model(processor):
    """A tiny untrained model that records every source batch it encodes."""
    torch.manual_seed(0)
    config = ModelConfig(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8, dropout=0.0)
    built = build_model(config, processor.vocab_size()).eval()
    built.encoded_rows = []
    encode = built.encode

    def recording_encode(source, *args, **kwargs):
        built.encoded_rows.extend(row[row.ne(PAD)].tolist() for row in source)
        return encode(source, *args, **kwargs)

    built.encode = recording_encode
    return built


def test_empty_and_blank_lines_give_empty_lines_in_place_without_the_model(model, processor):
    lines = ["the house is small", "", "a dog", "   ", "", "the small house is old"]
    translations = translate_sentences(model, processor, lines, DECODING)
    assert len(translations) == len(lines)
    assert [translations[index] for index in (1, 3, 4)] == ["", "", ""]
    assert [EOS] not in model.encoded_rows  # never a source of the end of sentence alone
    assert len(model.encoded_rows) == 3
    alone = translate_sentences(model, processor, [lines[0], lines[2], lines[5]], DECODING)
    assert [translations[index] for index in (0, 2, 5)] == alone


def test_only_empty_lines_never_run_the_model(model, processor):
    assert translate_sentences(model, processor, ["", "", " "], DECODING) == ["", "", ""]
    assert model.encoded_rows == []


def test_decoding_logs_sentences_done_rate_and_eta(model, processor, monkeypatch, caplog):
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "0")  # a line after every batch
    lines = ["the house is small", "a dog", "", "the small house is old", "a cat is here"]
    with caplog.at_level(logging.INFO, logger="reproduce.decoding.translate"):
        translate_sentences(model, processor, lines, DECODING)
    progress = [PROGRESS.match(record.getMessage()) for record in caplog.records]
    counts = [(int(match[1]), int(match[2])) for match in progress if match]
    # Batches of two, the empty line not decoded; the timer may log before the first batch ends,
    # and repeat a line between batches.
    assert sorted(set(counts) - {(0, 4)}) == [(2, 4), (4, 4)] and counts == sorted(counts)
    assert caplog.records[-1].getMessage().startswith("decode input: done, 4 sentences in ")


def test_a_line_over_the_bound_is_refused_before_any_sentence_is_decoded(model, processor):
    lines = ["a dog", "the small house is old and the dog is small", "the house is small"]
    pieces = [len(ids) + 1 for ids in processor.encode(lines)]  # and the end of sentence
    bound = pieces[1] - 1
    assert max(pieces[0], pieces[2]) <= bound
    with pytest.raises(DataError, match=rf"^corpus\.txt line 2: {pieces[1]} pieces \(end of "
                                        rf"sentence included\), more than "
                                        rf"decoding\.max_source_pieces={bound}; "):
        translate_sentences(model, processor, lines,
                            DECODING.model_copy(update={"max_source_pieces": bound}),
                            source_name="corpus.txt")
    assert model.encoded_rows == []  # not even the lines within the bound
    at_bound = DECODING.model_copy(update={"max_source_pieces": pieces[1]})
    assert len(translate_sentences(model, processor, lines, at_bound)) == 3
    assert len(model.encoded_rows) == 3
