"""Stopping a training cleanly: a signal or the death of the job that started it asks the trainer to
stop; the trainer finishes the current step, saves a checkpoint and returns (section 5.2's
checkpoints make the stop lossless).

A signal handler only records the request (:meth:`Interruption.request`): saving from inside the
handler could catch the model halfway through an optimizer step. The trainer polls
:meth:`Interruption.pending` after every step.

*Dying with the job* (:meth:`Interruption.watching` with ``parents``): an inline trainer runs under
``snakemake -> bash -c '...' -> python``. When its parent dies, Linux sends it SIGTERM
(``prctl(PR_SET_PDEATHSIG)``); when the parent is a shell whose own parent dies (snakemake
killed with -9 leaves bash waiting), the shell is reparented, which :meth:`pending` notices.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)

# What stops a trainer run in the foreground: kill's default and the parent-death signal
# (SIGTERM), Ctrl-C (SIGINT), and the terminal or ssh session it was started from closing
# (SIGHUP, whose default action would kill it without a checkpoint).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_SHELLS = {"sh", "bash", "dash", "zsh"}


class Interruption:
    """Why training should stop at the end of the current step (``None`` while it should not)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.signal: int | None = None
        self._parent: int | None = None
        self._grandparent: int | None = None
        self._previous: dict[int, object] = {}

    def request(self, reason: str, signum: int | None = None) -> None:
        if self.reason is None:
            self.reason, self.signal = reason, signum

    @contextmanager
    def watching(self, signums: tuple[int, ...], parents: bool) -> Iterator["Interruption"]:
        """While inside: ``signums`` become stop requests, and with ``parents`` the death of the
        parent (or of a parent shell's parent) too. Handlers and the parent-death signal are
        restored on the way out."""
        self._previous = previous = {signum: signal.signal(signum, self._handle)
                                     for signum in signums}
        watched = parents and sys.platform.startswith("linux")
        if watched:
            self._watch_parents()
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if watched:
                _set_parent_death_signal(0)
                self._parent = self._grandparent = None

    def pass_on(self) -> None:
        """Call the handler the stop signal had before ours (submitit's requeue, for instance)."""
        handler = self._previous.get(self.signal)
        if callable(handler):
            handler(self.signal, None)

    def _handle(self, signum: int, frame) -> None:
        self.request(f"received {signal.Signals(signum).name}", signum)

    def _watch_parents(self) -> None:
        self._parent = os.getppid()
        _set_parent_death_signal(signal.SIGTERM)
        if _command_name(self._parent) in _SHELLS:
            self._grandparent = _parent_of(self._parent)

    def pending(self) -> str | None:
        if self.reason is None and self._parent is not None:
            if os.getppid() != self._parent:
                self.request(f"parent process {self._parent} exited")
            elif self._grandparent is not None and _parent_of(self._parent) != self._grandparent:
                self.request(f"process {self._grandparent}, which started the shell "
                             f"{self._parent}, exited")
        return self.reason


def _set_parent_death_signal(signum: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed (errno %d): a killed parent may leave this "
                    "trainer running", ctypes.get_errno())


def _command_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])
