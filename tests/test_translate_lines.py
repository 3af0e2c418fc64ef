"""Translation of a list of lines: empty lines stay empty without the model, order is kept,
progress is logged as sentences are decoded, a line over the bound stops it all beforehand,
batches keep within their bounds, and neither batching nor how often beam search reads which
sentences are done changes a translation, even a trained model's."""

import logging
import re

import pytest
import torch
import torch.nn.functional as F

from reproduce.config import BpeConfig, DecodingConfig, ModelConfig
from reproduce.data.bpe import load_sentencepiece, train_sentencepiece
from reproduce.data.tiny_corpus import generate_corpus
from reproduce.decoding import translate
from reproduce.decoding.beam_search import beam_search
from reproduce.decoding.translate import (_check_one_line_each, cuda_matrix_products_in_tf32,
                                          translate_sentences)
from reproduce.errors import DataError
from reproduce.model.architectures import build_model
from reproduce.special_tokens import BOS, EOS, PAD
from tests.training_fixtures import one_torch_thread  # noqa: F401 (autouse: one torch thread)

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
    return recording(build_model(config, processor.vocab_size()).eval())


def recording(built):
    """``built``, recording the sources it encodes: each row's pieces, and each batch's rows."""
    built.encoded_rows, built.encoded_batches = [], []
    encode = built.encode

    def recording_encode(source, *args, **kwargs):
        rows = [row[row.ne(PAD)].tolist() for row in source]
        built.encoded_rows.extend(rows)
        built.encoded_batches.append(rows)
        return encode(source, *args, **kwargs)

    built.encode = recording_encode
    return built


@pytest.fixture(scope="module")
def trained(processor):
    """A tiny model trained 60 steps on the tiny corpus, on the module's one thread (another
    count sums in another order, and gives another model): its translations end where it learned
    to end them, at varied steps well before their length limit."""
    torch.manual_seed(0)
    pairs = generate_corpus(300, 0, 0, seed=3)["train"]
    sources = [ids + [EOS] for ids in processor.encode([source for source, _ in pairs])]
    targets = [ids + [EOS] for ids in processor.encode([target for _, target in pairs])]
    config = ModelConfig(layers=1, d_model=32, d_ff=64, heads=2, d_k=16, d_v=16, dropout=0.0)
    built = build_model(config, processor.vocab_size())
    optimiser = torch.optim.Adam(built.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(60):
        batch = torch.randint(len(pairs), (32,), generator=generator).tolist()
        source = _padded([sources[index] for index in batch])
        target = _padded([[BOS] + targets[index] for index in batch])
        logits = built(source, target[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), target[:, 1:].flatten(), ignore_index=PAD)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return built.eval()


def _padded(rows: list[list[int]]) -> torch.Tensor:
    batch = torch.full((len(rows), max(map(len, rows))), PAD)
    for number, row in enumerate(rows):
        batch[number, : len(row)] = torch.tensor(row)
    return batch


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


def test_batches_keep_within_both_bounds_in_length_order(model, processor):
    """A batch of n sentences whose longest source has L pieces holds at most
    max_sentences_per_batch sentences and n x beam x (L + offset) <= max_tokens_per_batch
    positions; a sentence over the token bound alone is a batch of its own."""
    lines = [" ".join(["the small house is old"] * repeat) for repeat in (1, 2, 1, 3, 1, 2, 6)]
    lengths = sorted(len(ids) + 1 for ids in processor.encode(lines))
    positions = [DECODING.beam_size * (length + DECODING.max_length_offset) for length in lengths]
    budget = 3 * positions[2]  # the three shortest together, and never the longest with another
    assert positions[-1] > budget / 2
    bounded = DECODING.model_copy(update={"max_sentences_per_batch": 4,
                                          "max_tokens_per_batch": budget})
    translations = translate_sentences(model, processor, lines, bounded)
    batches = [[len(row) for row in batch] for batch in model.encoded_batches]
    assert [length for batch in batches for length in batch] == lengths
    assert batches[0] == lengths[:3] and batches[-1] == lengths[-1:]
    for batch in batches:
        assert len(batch) <= 4
        assert (len(batch) == 1 or len(batch) * DECODING.beam_size
                * (max(batch) + DECODING.max_length_offset) <= budget)
    sentence_bound = DECODING.model_copy(update={"max_sentences_per_batch": 4})
    assert translate_sentences(model, processor, lines, sentence_bound) == translations


def test_a_trained_models_translations_are_the_same_however_batched_or_read(trained, processor):
    """The tiny test sentences through a trained model: its translations end at many different
    steps, and they are the same whether the search reads which sentences are done every step
    or every 4 or 8, and whether batches are bounded by sentences or by positions."""
    lines = [source for source, _ in generate_corpus(0, 0, 40, seed=3)["test"]]
    decoding = DecodingConfig(max_sentences_per_batch=16)
    expected = translate_sentences(trained, processor, lines, decoding)
    ended = [len(processor.encode(line)) for line, source in zip(expected, lines, strict=True)
             if len(processor.encode(line)) < len(processor.encode(source)) + 50]
    assert len(ended) > 3 / 4 * len(lines) and len(set(ended)) > 5, (ended, expected)
    for update in ({"check_every": 4}, {"check_every": 8},
                   {"max_tokens_per_batch": 4 * 70 * 5, "check_every": 4}):
        changed = decoding.model_copy(update=update)
        assert translate_sentences(trained, processor, lines, changed) == expected, update


@pytest.mark.parametrize("settings", [{"beam_size": 3}, {"length_penalty": 2.0},
                                      {"max_length_offset": 2}])
def test_the_decoding_settings_are_the_searchs(trained, processor, settings):
    """Each of beam size, alpha and the length offset reaches the search: the lines translate
    as ``beam_search`` given that setting translates their pieces, and not as the defaults do."""
    lines = [source for source, _ in generate_corpus(0, 0, 40, seed=3)["test"]]
    decoding = DecodingConfig(**settings)
    translated = translate_sentences(trained, processor, lines, decoding)
    arguments = {"beam_size": decoding.beam_size, "alpha": decoding.length_penalty,
                 "max_length_offset": decoding.max_length_offset}
    expected = [processor.decode(beam_search(trained, torch.tensor([ids + [EOS]]),
                                             **arguments)[0])
                for ids in processor.encode(lines)]
    assert translated == expected
    assert translated != translate_sentences(trained, processor, lines, DecodingConfig())


def test_auto_settings_reach_the_search_as_the_devices_values(model, processor, monkeypatch):
    """``check_every`` and ``cuda_graphs`` at auto reach ``beam_search`` as their values for the
    device that decodes (a CPU here: every step, eager), never as ``"auto"``."""
    seen = []
    search = translate.beam_search
    monkeypatch.setattr(translate, "beam_search", lambda *args, **kwargs: (
        seen.append((kwargs["check_every"], kwargs["cuda_graphs"])) or search(*args, **kwargs)))
    translate_sentences(model, processor, ["the house is small", "a dog"], DECODING)
    assert DECODING.check_every == DECODING.cuda_graphs == "auto"
    assert seen == [(1, False)]


def cuda_products_in_tf32() -> bool:
    """Whether torch asks cuBLAS for TF32 products of fp32 tensors now."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        return matmul.fp32_precision == "tf32"
    return matmul.allow_tf32


def test_tf32_decoding_asks_cuda_for_tf32_products_and_puts_the_setting_back(trained, processor):
    """``decoding.precision: tf32``: the search runs with cuBLAS's fp32 products in TF32, and
    every other precision in IEEE fp32 even where the process asked for TF32 before; after
    decoding, the process's setting is as it was. On a CPU the setting changes no product: the
    same translations as fp32 (tests/test_gpu.py: what it changes on a GPU)."""
    lines = [source for source, _ in generate_corpus(0, 0, 6, seed=3)["test"]]
    seen = []
    hook = trained.encoder[0].feed_forward.register_forward_hook(
        lambda *_: seen.append(cuda_products_in_tf32()))
    try:
        fp32 = translate_sentences(trained, processor, lines, DecodingConfig())
        assert set(seen) == {False} and not cuda_products_in_tf32()
        seen.clear()
        tf32 = translate_sentences(trained, processor, lines, DecodingConfig(precision="tf32"))
        assert set(seen) == {True} and not cuda_products_in_tf32()
        seen.clear()
        with cuda_matrix_products_in_tf32(True):  # the process asked for TF32 before
            assert translate_sentences(trained, processor, lines, DecodingConfig()) == fp32
            assert set(seen) == {False} and cuda_products_in_tf32()
    finally:
        hook.remove()
    assert tf32 == fp32 and not cuda_products_in_tf32()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_decoding_in_lower_precision_runs_the_products_in_it_and_the_scores_in_fp32(
        trained, processor, precision):
    """``decoding.precision``: the model's matrix products under autocast (a hook reads the
    output projection's dtype), log-probabilities in fp32 (beam search upcasts the logits), a
    translation for every line; fp32 (the default) computes in fp32 as before."""
    lines = [source for source, _ in generate_corpus(0, 0, 12, seed=3)["test"]]
    seen = []
    hook = trained.encoder[0].feed_forward.register_forward_hook(
        lambda module, inputs, output: seen.append(output.dtype))
    try:
        fp32 = translate_sentences(trained, processor, lines, DecodingConfig())
        assert set(seen) == {torch.float32}
        seen.clear()
        lower = translate_sentences(trained, processor, lines,
                                    DecodingConfig(precision=precision))
    finally:
        hook.remove()
    assert set(seen) == {torch.bfloat16 if precision == "bf16" else torch.float16}
    assert len(lower) == len(fp32) and all(isinstance(line, str) for line in lower)
    assert sum(a == b for a, b in zip(lower, fp32, strict=True)) >= len(lines) // 2


def test_a_translation_holding_a_line_break_is_refused_naming_its_line(tmp_path):
    """One output line per input line: a translation that holds ``\\n`` of its own would shift
    every later line against its reference, so it is an error naming the line, not a file."""
    _check_one_line_each(["ein Haus", "zwei"], 2, tmp_path / "in.txt")  # fine
    with pytest.raises(DataError, match=r"in\.txt line 2: its translation holds a line break"):
        _check_one_line_each(["ein Haus", "zwei\nHäuser", "drei"], 3, tmp_path / "in.txt")
    with pytest.raises(DataError, match=r"3 lines in, 2 translations out"):
        _check_one_line_each(["ein Haus", "zwei"], 3, tmp_path / "in.txt")
