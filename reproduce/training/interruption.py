"""Stopping a training cleanly: a signal or the death of the job that started it asks the trainer to
stop; the trainer finishes the current step, saves a checkpoint and returns (section 5.2's
checkpoints make the stop lossless).

A signal handler only records the request (:meth:`Interruption.request`): saving from inside the
handler could catch the model halfway through an optimizer step. The trainer polls
:meth:`Interruption.pending` after every step.

*Dying with the job* (:meth:`Interruption.watching`): a process killed with -9 tells no one, and
what sits between it and the trainer may outlive it: the train rule's ``script:`` wrapper waiting
on the trainer, a shell, submitit's local executor and its ranks. So the trainer watches the
process that started the job itself, named by the wrapper in ``$REPRODUCE_STOP_WITH`` (pid and
start time, so that a later process given the same pid does not pass for it); see
:func:`stop_with_environment`. A rank of the local launcher watches the launcher too, whose
executor's controller outlives it. Started by hand, the trainer watches its parent: when the parent
dies, Linux sends it SIGTERM (``prctl(PR_SET_PDEATHSIG)``); when the parent is a shell whose own
parent dies (a ``bash -c`` left waiting), the shell is reparented, which :meth:`pending` notices.

*Stopping with the job* (:func:`relay_stop_signals`): Snakemake told to stop (SIGTERM, SIGINT)
stays alive, waiting for its running jobs, and signals none of them, so neither its death nor a
signal reaches the trainer. Inside Snakemake (the workflow's ``onstart``), the relay turns those
signals into a *stop request*: a file named in ``$REPRODUCE_STOP_REQUEST``, which every process
Snakemake starts inherits, created before Snakemake's own handling of the signal goes on. A
trainer that sees the file stops as on a signal (:meth:`Interruption.pending`, one ``stat`` a
step); the job then fails, and Snakemake exits.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import signal
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)

# What stops a trainer run in the foreground: kill's default and the parent-death signal
# (SIGTERM), Ctrl-C (SIGINT), and the terminal or ssh session it was started from closing
# (SIGHUP, whose default action would kill it without a checkpoint).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_SHELLS = {"sh", "bash", "dash", "zsh"}
STOP_WITH = "REPRODUCE_STOP_WITH"
STOP_REQUEST = "REPRODUCE_STOP_REQUEST"
# What Snakemake answers by waiting for its running jobs: SIGTERM (kill's default, a supervisor,
# Slurm ending the job Snakemake runs in) and SIGINT (Ctrl-C, kill -INT).
RELAYED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True)
class WatchedProcess:
    """A process told apart from any later one given the same pid by its start time (clock
    ticks after boot, from ``/proc/<pid>/stat``)."""

    pid: int
    started: int

    @classmethod
    def of(cls, pid: int) -> "WatchedProcess | None":
        fields = _stat_fields(pid)
        return None if fields is None else cls(pid, int(fields[_STARTED]))

    def ended(self) -> bool:
        """Gone, a zombie (killed, not yet reaped), or its pid reused."""
        fields = _stat_fields(self.pid)
        return fields is None or fields[0] in "ZX" or int(fields[_STARTED]) != self.started


def stop_with_environment() -> dict[str, str]:
    """The variable that makes a trainer started below this process stop when the job's owner
    ends: the nearest ancestor that is not a shell (Snakemake, for the train rule's script).
    Empty where ``/proc`` cannot tell."""
    pid = os.getppid()
    while _command_name(pid) in _SHELLS:
        pid = _parent_of(pid) or 0
    owner = WatchedProcess.of(pid) if pid > 1 else None
    return {} if owner is None else {STOP_WITH: f"{owner.pid} {owner.started}"}


def process_to_stop_with() -> WatchedProcess | None:
    """The process named by ``$REPRODUCE_STOP_WITH``, if any; a malformed value is one warning."""
    value = os.environ.get(STOP_WITH)
    if value is None:
        return None
    try:
        pid, started = (int(field) for field in value.split())
    except ValueError:
        log.warning("%s=%r is not '<pid> <start time>': this trainer will not stop with the job "
                    "that started it", STOP_WITH, value)
        return None
    return WatchedProcess(pid, started)


def relay_stop_signals(folder: Path) -> Path:
    """Make :data:`RELAYED_SIGNALS` to this process (Snakemake) ask the trainings it started to
    stop: each creates the stop request ``folder/<pid>`` (named in ``$REPRODUCE_STOP_REQUEST``
    for the jobs started from now on), then calls the handler it had (Snakemake's: wait for the
    running jobs, or cancel them). The request is removed when this process exits."""
    request = (folder / str(os.getpid())).resolve()
    request.unlink(missing_ok=True)  # left by an earlier process given the same pid
    os.environ[STOP_REQUEST] = str(request)
    atexit.register(request.unlink, missing_ok=True)
    for signum in RELAYED_SIGNALS:
        signal.signal(signum, partial(_relay, request, signal.getsignal(signum)))
    return request


def _relay(request: Path, previous, signum: int, frame) -> None:
    request.parent.mkdir(parents=True, exist_ok=True)
    request.touch()
    if callable(previous):
        previous(signum, frame)
    else:  # the default action (or none): as if the relay had never been installed
        signal.signal(signum, previous)
        os.kill(os.getpid(), signum)


def stop_request_path() -> Path | None:
    """The stop request named by ``$REPRODUCE_STOP_REQUEST``, if any."""
    value = os.environ.get(STOP_REQUEST)
    return Path(value) if value else None


class Interruption:
    """Why training should stop at the end of the current step (``None`` while it should not)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.signal: int | None = None
        self._parent: int | None = None
        self._grandparent: int | None = None
        self._owners: tuple[WatchedProcess, ...] = ()
        self._request: Path | None = None
        self._previous: dict[int, object] = {}

    def request(self, reason: str, signum: int | None = None) -> None:
        if self.reason is None:
            self.reason, self.signal = reason, signum

    @contextmanager
    def watching(self, signums: tuple[int, ...], parents: bool,
                 owners: tuple[WatchedProcess, ...] = (),
                 request: Path | None = None) -> Iterator["Interruption"]:
        """While inside: ``signums`` become stop requests, and so do the end of any of ``owners``,
        the creation of the file ``request`` (:func:`relay_stop_signals`) and, with ``parents``,
        the death of the parent (or of a parent shell's parent). Handlers and the parent-death
        signal are restored on the way out."""
        self._previous = previous = {signum: signal.signal(signum, self._handle)
                                     for signum in signums}
        self._owners, self._request = owners, request
        watched = parents and sys.platform.startswith("linux")
        if watched:
            self._watch_parents()
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._owners, self._request = (), None
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
        for owner in self._owners:
            if self.reason is None and owner.ended():
                self.request(f"process {owner.pid}, which started this training, exited")
        if self.reason is None and self._request is not None and self._request.exists():
            self.request("the workflow that started this training is stopping")
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


# /proc/<pid>/stat after the command name: state, parent, ..., start time (the 22nd field).
_STARTED = 19


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def _parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[1])
