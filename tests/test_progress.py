"""Progress in the training log: durations a person reads, elapsed time over a run's segments,
and an ETA from the last window's rate."""

import logging
import math
import re
from types import SimpleNamespace

import pytest

from reproduce.training.checkpoints import latest_good_checkpoint, save_checkpoint
from reproduce.stage_progress import format_duration
import reproduce.training.progress as progress_module
from reproduce.training.progress import ThroughputWindow, progress_line
from reproduce.training.assembly import build_trainer
from tests.training_fixtures import TINY, random_corpus, small_variant

LINE = re.compile(r"step (\d+)/(\d+) loss \d+\.\d{4} lr \S+ target tokens/s \d+ steps/s \S+ "
                  r"elapsed ((?:\d+d )?\d\d:\d\d:\d\d) ETA ((?:\d+d )?\d\d:\d\d:\d\d) "
                  r"passes/step (\S+)$")


@pytest.mark.parametrize(("seconds", "expected"), [
    (0, "00:00:00"),
    (59.4, "00:00:59"),
    (59.5, "00:01:00"),
    (3661, "01:01:01"),
    (86399.4, "23:59:59"),
    (86399.6, "1d 00:00:00"),
    (93185, "1d 01:53:05"),
    (11 * 86400 + 7, "11d 00:00:07"),
    (math.inf, "?"),
    (math.nan, "?"),
])
def test_durations_read_as_days_and_a_clock(seconds, expected):
    assert format_duration(seconds) == expected


def test_the_eta_follows_the_windows_rate_not_the_elapsed_time():
    rates = {"target_tokens_per_second": 1234.4, "steps_per_second": 2.0}
    line = progress_line(step=100, total_steps=400, loss=3.21456, lr=7e-4, rates=rates,
                         elapsed_seconds=93185)
    assert line == ("step 100/400 loss 3.2146 lr 0.0007 target tokens/s 1234 steps/s 2 "
                    "elapsed 1d 01:53:05 ETA 00:02:30")
    assert progress_line(400, 400, 3.0, 1e-4, rates, 10).endswith("ETA 00:00:00")
    stalled = rates | {"steps_per_second": 0.0}
    assert progress_line(1, 400, 3.0, 1e-4, stalled, 10).endswith("ETA ?")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 200, seed=5), random_corpus(folder / "dev", 20, seed=6)


def _progress_lines(caplog) -> list[re.Match]:
    messages = [record.getMessage() for record in caplog.records]
    return [match for message in messages if (match := LINE.match(message))]


def test_the_training_log_says_elapsed_steps_per_second_and_eta(corpora, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="reproduce.training.trainer")
    variant = small_variant(steps=4, dropout=0.0)  # logs every 2 steps
    build_trainer(variant, TINY, *corpora, tmp_path).run()
    assert [(match[1], match[2]) for match in _progress_lines(caplog)] == [("2", "4"), ("4", "4")]
    assert _progress_lines(caplog)[-1][4] == "00:00:00"  # nothing left at the last step
    assert float(_progress_lines(caplog)[-1][5]) >= 1  # the passes a rank made per step


def test_elapsed_counts_the_segments_before_a_resume(corpora, tmp_path, caplog):
    """A run interrupted after 30 days of training (its checkpoint says so) goes on counting
    from there; the ETA comes from this segment's rate alone (the run's mean rate would give
    15 days for the 2 steps left after step 4)."""
    variant = small_variant(steps=6, dropout=0.0)
    build_trainer(variant, TINY, *corpora, tmp_path).run(stop_after_steps=3)
    path, state = latest_good_checkpoint(tmp_path / "checkpoints")
    state["totals"]["wall_seconds"] = 30 * 86400.0
    save_checkpoint(state, path)
    caplog.set_level(logging.INFO, logger="reproduce.training.trainer")
    build_trainer(variant, TINY, *corpora, tmp_path).run()
    (first, *_) = _progress_lines(caplog)
    assert first[1] == "4" and first[3].startswith("30d 00:")
    assert "d" not in first[4]


def test_the_windows_rates_are_its_totals_over_its_seconds(monkeypatch):
    """Tokens per second count both sides, target tokens per second the target side alone;
    MFU is the window's FLOP/s over the peak: 2 steps in 4 seconds, by hand."""
    window = ThroughputWindow(start=100.0)
    window.add(source_tokens=30, target_tokens=50, flops=6 * 10**12)
    window.add(source_tokens=10, target_tokens=30, flops=2 * 10**12)
    monkeypatch.setattr(progress_module, "time", SimpleNamespace(monotonic=lambda: 104.0))
    assert window.rates(peak_flops=4e12) == {
        "target_tokens_per_second": 20.0, "tokens_per_second": 30.0, "steps_per_second": 0.5,
        "model_tflops_per_second": 2.0, "mfu": 0.5}
    assert "mfu" not in window.rates(peak_flops=None)
