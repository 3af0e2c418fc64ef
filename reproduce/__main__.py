"""The ``reproduce`` command: ``python -m reproduce`` and the console script enter here.

Ctrl-C (SIGINT) ends a command at once, by the signal's default action, as SIGTERM and SIGHUP do
(the shell sees 130). Not through Python's KeyboardInterrupt: most of a command's first second is
imports (the CLI's own, then torch, numpy, MLflow inside the command), and an exception raised in
the middle of an import leaves a C extension half initialised, which libraries importing while
catching errors (torch imports numpy so) turn into an unrelated error, a RecursionError, or
nothing, so that the command fails with a traceback or carries on as if never stopped; and a
Python handler would wait for a long C call (sentencepiece training) to return. Ending at once
loses nothing: every output is written under ``<name>.tmp`` and renamed once whole
(:mod:`reproduce.files`), and the command run again redoes the work. A training replaces this for
its run (:mod:`reproduce.training.interruption`): it stops after the current step, with a
checkpoint.
"""

import signal


def main() -> None:
    """Let Ctrl-C end the process before the CLI's first import, then run the command."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # started in the background: kept
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    from reproduce.cli import main as run_command

    run_command()


if __name__ == "__main__":
    main()
