"""Stop requests (:mod:`reproduce.training.interruption`) on this process and its children:
signals while watching, the handlers put back after, and the end of a watched process."""

import os
import signal
import subprocess
from pathlib import Path

from reproduce.training.interruption import Interruption, WatchedProcess


def test_a_signal_while_watching_is_a_stop_request_and_the_old_handler_comes_back():
    """Inside :meth:`Interruption.watching` a stop signal only records the request; on the way
    out the handler it had before (submitit's, the test runner's) is put back, so that the same
    signal after training is not silently swallowed."""
    calls = []

    def before(signum, frame):
        calls.append(signum)

    previous = signal.signal(signal.SIGUSR1, before)
    try:
        interruption = Interruption()
        with interruption.watching((signal.SIGUSR1,), parents=False):
            os.kill(os.getpid(), signal.SIGUSR1)
            assert interruption.pending() == "received SIGUSR1"
        assert calls == []
        assert signal.getsignal(signal.SIGUSR1) is before
        os.kill(os.getpid(), signal.SIGUSR1)
        assert calls == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _start_time(pid):
    """Field 22 of ``/proc/<pid>/stat`` (proc(5)): the start time, in clock ticks after boot.
    Fields 1 and 2 are the pid and the command name in parentheses (which may hold spaces)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 1 :].split()[22 - 3])


def test_a_watched_process_that_died_unreaped_has_ended():
    """A job owner killed but not yet reaped by its parent is a zombie: its pid and start time are
    still there, yet it has ended, and the trainer must stop with it."""
    child = subprocess.Popen(["sleep", "0"])
    try:
        watched = WatchedProcess(child.pid, _start_time(child.pid))
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped
        assert Path(f"/proc/{child.pid}/stat").exists()
        assert watched.ended()
    finally:
        child.wait()


def test_a_live_process_has_not_ended_and_another_start_time_is_another_process():
    """The start time read is proc(5)'s field 22: the running test process has not ended, and
    the same pid with any other start time (a pid reused) has."""
    started = _start_time(os.getpid())
    assert WatchedProcess.of(os.getpid()) == WatchedProcess(os.getpid(), started)
    assert not WatchedProcess(os.getpid(), started).ended()
    assert WatchedProcess(os.getpid(), started + 1).ended()


def test_the_first_reason_to_stop_is_kept_with_its_signal():
    """A stop signal followed by the parent's death (Slurm's pre-timeout signal, then the job
    ending) keeps the first request: its signal is the one whose earlier handler is passed on
    (submitit's requeue), which a later reason without a signal would lose."""
    interruption = Interruption()
    interruption.request("received SIGUSR2", signal.SIGUSR2)
    interruption.request("parent process 1 exited")
    assert (interruption.pending(), interruption.signal) == ("received SIGUSR2", signal.SIGUSR2)


def test_the_end_of_any_owner_is_a_stop_request_naming_it():
    """A local rank dies with the job's owner and with the launcher: either one ending stops it,
    and the reason names the one that ended."""
    started = _start_time(os.getpid())
    alive, gone = WatchedProcess(os.getpid(), started), WatchedProcess(os.getpid(), started + 1)
    with Interruption().watching((), parents=False, owners=(alive,)) as interruption:
        assert interruption.pending() is None
    with Interruption().watching((), parents=False, owners=(alive, gone)) as interruption:
        assert interruption.pending() == (f"process {os.getpid()}, which started this training, "
                                          "exited")
