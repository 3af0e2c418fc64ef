"""The progress lines of a long stage: items done, rate and ETA at every interval, and lines
from the timer while one item is slow, so that a log tells a slow item from a stuck stage; and
the stages that log them (decoding's are in test_translate_lines.py)."""

import logging
import re
import time

import pytest
import torch

from reproduce.config import BpeConfig, Cleaning, ModelConfig, Source
from reproduce.data import bpe
from reproduce.data.download import file_name
from reproduce.data.prepare import prepare_split
from reproduce.files import count_lines, read_lines
from reproduce.data.tiny_corpus import generate_corpus
from reproduce.errors import ConfigError
from reproduce.model.transformer import Transformer
from reproduce.scoring.perplexity import checkpoint_perplexity
from reproduce import stage_progress
from reproduce.stage_progress import StageProgress, interval_seconds
from reproduce.training.checkpoints import save_checkpoint
from tests.corpus_archives import wmt_like_members, write_tgz
from tests.training_fixtures import VOCAB, random_corpus

LINE = re.compile(r"slow stage: (\d+)/10 items \((\d+\.\d)%\), (\S+) items/s, elapsed "
                  r"\d\d:\d\d:\d\d, ETA (\d\d:\d\d:\d\d|\?), last progress (\d+) s ago$")
log = logging.getLogger("tests.stage")


def test_a_slow_item_still_gets_lines_with_items_done_rate_and_eta(monkeypatch, caplog):
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "0.2")
    with caplog.at_level(logging.INFO, logger="tests.stage"):
        with StageProgress("slow stage", 10, "items", log) as progress:
            progress.update(4)
            time.sleep(1.3)  # one slow item: the count stays at 4 while the timer speaks
            progress.update(6)
    messages = [record.getMessage() for record in caplog.records]
    during = [LINE.match(message) for message in messages]
    stuck = [match for match in during if match and match[1] == "4"]
    assert len(stuck) >= 3
    assert all(match[2] == "40.0" and float(match[3]) > 0 and match[4] != "?" for match in stuck)
    assert int(stuck[-1][5]) >= 1  # the slow item shows as time since the last progress
    assert messages[-1].startswith("slow stage: done, 10 items in 00:00:01 (")


def test_without_a_total_the_eta_is_unknown(monkeypatch, caplog):
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "0")
    with caplog.at_level(logging.INFO, logger="tests.stage"):
        with StageProgress("count", None, "lines", log) as progress:
            progress.update(3)
    assert re.search(r"^count: 3 lines, \S+ lines/s, elapsed 00:00:00, ETA \?, ",
                     caplog.records[0].getMessage())


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_an_unreadable_interval_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", value)
    with pytest.raises(ConfigError, match="REPRODUCE_PROGRESS_SECONDS"):
        StageProgress("stage", 1, "items", log)


def _progress_counts(caplog, what: str) -> list[tuple[int, int]]:
    """(done, total) of each progress line of the stage ``what``, but the timer's lines before
    the first item (a loaded machine may log one with interval 0)."""
    pattern = re.compile(rf"{re.escape(what)}: (\d+)/(\d+) pairs \(\d+\.\d%\), \S+ pairs/s, "
                         r"elapsed \d\d:\d\d:\d\d, ETA \d\d:\d\d:\d\d, last progress \d+ s ago$")
    matches = [pattern.match(record.getMessage()) for record in caplog.records]
    return [(int(match[1]), int(match[2])) for match in matches if match and match[1] != "0"]


def test_preparing_a_split_logs_each_sources_pairs_read_of_its_total(tmp_path, monkeypatch,
                                                                     caplog):
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "0")
    source = Source(name="europarl", url="file:x/europarl.tgz", format="text",
                    source_member="training/europarl-v7.de-en.en",
                    target_member="training/europarl-v7.de-en.de")
    write_tgz(tmp_path / "downloads" / file_name(source), wmt_like_members())
    with caplog.at_level(logging.INFO, logger="reproduce.data.prepare"):
        prepare_split([source], "train", tmp_path / "downloads", tmp_path / "data",
                      Cleaning(max_tokens=250, max_length_ratio=1.5))
    counts = _progress_counts(caplog, "prepare train/europarl")
    assert sorted(set(counts)) == [(done, 5) for done in range(1, 6)] and counts == sorted(counts)


def test_encoding_a_split_logs_the_pairs_encoded_of_its_lines(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "0")
    monkeypatch.setattr(bpe, "ENCODE_CHUNK_LINES", 40)  # chunks of 40 pairs: 40, 80, 100
    pairs = generate_corpus(100, 0, 0, seed=4)["train"]
    (tmp_path / "train.src").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "train.tgt").write_text("".join(t + "\n" for _, t in pairs))
    model = bpe.train_sentencepiece(tmp_path / "train.src", tmp_path / "train.tgt",
                                    BpeConfig(vocab_size=100), tmp_path / "spm")
    with caplog.at_level(logging.INFO, logger="reproduce.data.bpe"):
        bpe.encode_split(model, tmp_path / "train.src", tmp_path / "train.tgt", tmp_path / "enc")
    counts = _progress_counts(caplog, f"encode {tmp_path / 'train.src'}")
    assert sorted(set(counts)) == [(40, 100), (80, 100), (100, 100)] and counts == sorted(counts)


@pytest.mark.parametrize(("content", "lines"), [
    (b"", 0), (b"\n", 1), (b"a\nb\n", 2), (b"a\nb", 2), (b"a\r\nb\x0bc\n", 2),
])
def test_lines_are_counted_as_they_are_read(tmp_path, content, lines):
    path = tmp_path / "text"
    path.write_bytes(content)
    assert count_lines(path) == lines == len(read_lines(path))


def test_perplexity_logs_the_sentences_scored_of_the_split(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "0")
    dev = random_corpus(tmp_path / "dev", 30, seed=9)
    torch.manual_seed(0)
    config = ModelConfig(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8, dropout=0.0)
    save_checkpoint({"model": Transformer(config, VOCAB).state_dict(),
                     "model_config": config.model_dump(), "vocab_size": VOCAB, "step": 1},
                    tmp_path / "model.pt")
    with caplog.at_level(logging.INFO, logger="reproduce.scoring.perplexity"):
        checkpoint_perplexity(tmp_path / "model.pt", dev, max_tokens=50)
    pattern = re.compile(rf"perplexity on {re.escape(str(dev))}: (\d+)/30 sentences \(\d+\.\d%\), "
                         r"\S+ sentences/s, elapsed \d\d:\d\d:\d\d, ETA \d\d:\d\d:\d\d, ")
    done = [int(match[1]) for record in caplog.records
            if (match := pattern.match(record.getMessage())) and match[1] != "0"]
    assert len(set(done)) > 1 and done == sorted(done) and done[-1] == 30


def test_the_eta_is_the_items_left_at_the_rate_so_far():
    """4 of 10 items in 2 s is 2 items/s: the 6 left take 3 s more (not 10 / 2 = 5 s)."""
    progress = StageProgress("stage", 10, "items", log)
    progress._start = progress._last_item = 100.0
    progress.done = 4
    assert progress.line(102.0) == ("stage: 4/10 items (40.0%), 2 items/s, elapsed 00:00:02, "
                                    "ETA 00:00:03, last progress 2 s ago")


class _Clock:
    """A monotonic clock that moves only when told: the progress lines' times, exactly."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_the_interval_is_30_seconds_when_the_variable_is_unset_or_empty(monkeypatch):
    """The documented default: a line at least every 30 s unless told otherwise."""
    monkeypatch.delenv("REPRODUCE_PROGRESS_SECONDS", raising=False)
    assert interval_seconds() == 30.0
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "")
    assert interval_seconds() == 30.0
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "2.5")
    assert interval_seconds() == 2.5


def test_items_log_a_line_once_per_interval_not_after_every_item(monkeypatch, caplog):
    """With a 10 s interval, 25 items one second apart give the lines at 10 s and 20 s only:
    each line restarts the interval."""
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "10")
    clock = _Clock()
    monkeypatch.setattr(stage_progress, "time", clock)
    progress = StageProgress("stage", 25, "items", log)  # not entered: no timer thread
    with caplog.at_level(logging.INFO, logger="tests.stage"):
        for _ in range(25):
            clock.now += 1.0
            progress.update()
    assert [record.getMessage().split(",")[0] for record in caplog.records] == [
        "stage: 10/25 items (40.0%)", "stage: 20/25 items (80.0%)"]


def test_last_progress_counts_from_the_last_item_not_from_the_start(monkeypatch):
    """``last progress`` tells a slow item from a stuck stage: it is the time since the last
    item ended, so it restarts at every update."""
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "1000")
    clock = _Clock()
    monkeypatch.setattr(stage_progress, "time", clock)
    progress = StageProgress("stage", 10, "items", log)
    clock.now = 5.0
    progress.update(5)
    assert progress.line(7.0) == ("stage: 5/10 items (50.0%), 0.714 items/s, elapsed 00:00:07, "
                                  "ETA 00:00:07, last progress 2 s ago")


def test_a_stage_that_fails_does_not_log_that_it_is_done(monkeypatch, caplog):
    """The totals line ``done, N items`` is for a clean exit only: a stage that raised is not
    reported done in the log a person reads."""
    monkeypatch.setenv("REPRODUCE_PROGRESS_SECONDS", "1000")
    with caplog.at_level(logging.INFO, logger="tests.stage"):
        with pytest.raises(RuntimeError), StageProgress("failing", 3, "items", log) as progress:
            progress.update()
            raise RuntimeError("broken input")
        with StageProgress("fine", 1, "items", log) as progress:
            progress.update()
    messages = [record.getMessage() for record in caplog.records]
    assert not [message for message in messages if message.startswith("failing: done")]
    assert [message for message in messages if message.startswith("fine: done, 1 items in ")]


def test_a_stage_of_no_items_reports_without_a_share_or_an_error():
    """An empty source sets a total of 0: its line says 0/0 with no percentage (never a
    division by zero in the timer's thread)."""
    progress = StageProgress("empty", 0, "pairs", log)
    progress._start = progress._last_item = 100.0
    assert progress.line(101.0) == ("empty: 0/0 pairs, 0 pairs/s, elapsed 00:00:01, ETA ?, "
                                    "last progress 1 s ago")
