"""Progress of a long stage (cleaning, encoding, decoding, scoring) as a person reads it.

A Slurm log is a file, not a terminal: without a word from a stage until it ends, a slow job and
a stuck one look the same. So a stage that may run for minutes reports, as training does
(:mod:`reproduce.training.progress`), a tqdm bar where stderr is a terminal and otherwise log
lines, at least once per interval, saying how far it is, how fast it goes and when it should end:

    decode newstest2014.en: 1200/3003 sentences (40.0%), 3.52 sentences/s, elapsed 00:05:41,
    ETA 00:08:32, last progress 2 s ago

A line comes when an item ends and the interval has passed since the last line, and also from a
timer while one item takes longer than the interval (a very long sentence in beam search): then
the count stays put and ``last progress`` grows, which tells a slow item from a stuck stage.

The interval is ``REPRODUCE_PROGRESS_SECONDS`` (default 30 s, so a line at least every minute
whatever the timer's jitter); 0 logs a line after every item.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from types import TracebackType

from tqdm import tqdm

from reproduce.errors import ConfigError

INTERVAL_VARIABLE = "REPRODUCE_PROGRESS_SECONDS"
DEFAULT_INTERVAL_SECONDS = 30.0
BAR_REFRESH_SECONDS = 1.0  # the bar's elapsed time moves on during a long item


def interval_seconds() -> float:
    """The interval between log lines: ``REPRODUCE_PROGRESS_SECONDS`` or the default."""
    value = os.environ.get(INTERVAL_VARIABLE, "")
    if not value:
        return DEFAULT_INTERVAL_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0 or not math.isfinite(seconds):
        raise ConfigError(f"{INTERVAL_VARIABLE}={value!r}: expected a number of seconds, 0 or more")
    return seconds


class StageProgress:
    """Count a stage's items (``update``) and report them; use it as a context manager, which
    starts the timer and, on a clean exit, logs the stage's totals."""

    def __init__(self, what: str, total: int | None, unit: str, logger: logging.Logger):
        self.what, self.total, self.unit, self.log = what, total, unit, logger
        self.done = 0
        self.interval = interval_seconds()
        self.bar: tqdm | None = None
        self._start = self._last_item = self._last_line = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._tick, name=f"progress {what}", daemon=True)

    def __enter__(self) -> StageProgress:
        if sys.stderr.isatty():
            self.bar = tqdm(total=self.total, unit=self.unit, desc=self.what)
        self._start = self._last_item = self._last_line = time.monotonic()
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._timer.join()
        if self.bar is not None:
            self.bar.close()
        elif kind is None:
            elapsed = time.monotonic() - self._start
            self.log.info("%s: done, %d %s in %s (%s)", self.what, self.done, self.unit,
                          format_duration(elapsed), self._rate(elapsed))

    def set_total(self, total: int | None) -> None:
        """The number of items, once it is known (after counting a file's lines)."""
        self.total = total
        if self.bar is not None:
            self.bar.total = total
            self.bar.refresh()

    def update(self, items: int = 1) -> None:
        """``items`` more are done; log a line if the interval has passed since the last."""
        self.done += items
        now = time.monotonic()
        self._last_item = now
        if self.bar is not None:
            self.bar.update(items)
        elif now - self._last_line >= self.interval:
            self._log_line(now)

    def line(self, now: float) -> str:
        """The stage's state at ``now``: items done (of how many), rate, elapsed, ETA."""
        elapsed = now - self._start
        count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        share = f" ({100 * self.done / self.total:.1f}%)" if self.total else ""
        per_second = self.done / elapsed if elapsed > 0 else 0.0
        left = ((self.total - self.done) / per_second if self.total is not None and per_second > 0
                else math.inf)
        return (f"{self.what}: {count} {self.unit}{share}, {self._rate(elapsed)}, elapsed "
                f"{format_duration(elapsed)}, ETA {format_duration(left)}, last progress "
                f"{now - self._last_item:.0f} s ago")

    def _rate(self, elapsed: float) -> str:
        return f"{self.done / elapsed if elapsed > 0 else 0.0:.3g} {self.unit}/s"

    def _log_line(self, now: float) -> None:
        with self._lock:
            self._last_line = now
            self.log.info("%s", self.line(now))

    def _tick(self) -> None:
        """Between items: refresh the bar, or log a line once an interval has passed silently."""
        period = BAR_REFRESH_SECONDS if self.bar is not None else max(self.interval, 0.01)
        while not self._stop.wait(period):
            if self.bar is not None:
                self.bar.refresh()
                continue
            now = time.monotonic()
            if now - self._last_line >= self.interval:
                self._log_line(now)


def format_duration(seconds: float) -> str:
    """``05:07`` as ``00:05:07``, a day and more as ``1d 02:13:05``; ``?`` when not finite."""
    if not math.isfinite(seconds):
        return "?"
    minutes, whole_seconds = divmod(round(max(seconds, 0.0)), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    clock = f"{hours:02d}:{minutes:02d}:{whole_seconds:02d}"
    return f"{days}d {clock}" if days else clock
