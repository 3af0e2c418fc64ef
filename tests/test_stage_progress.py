"""The progress lines of a long stage: items done, rate and ETA at every interval, and lines
from the timer while one item is slow, so that a log tells a slow item from a stuck stage."""

import logging
import re
import time

import pytest

from reproduce.errors import ConfigError
from reproduce.stage_progress import StageProgress

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
