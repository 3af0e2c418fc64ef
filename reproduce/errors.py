"""Expected errors: bad input or a refused operation, which the command line reports as one line
``reproduce <command>: error: ...`` (a traceback only with ``--verbose``).

Every error class of the package that describes such a case derives from :class:`ReproduceError`;
anything else that escapes a command is a bug and keeps its traceback. ``tests/test_errors.py``
reads every ``raise`` of the package and holds it to this.

The hierarchy: a few kinds, by what the user has to fix; a module defines a narrower class under
one only where something tells it apart: a caller's ``except``, a test that checks what the kind
cannot, or a distinct exit status. Otherwise it raises the kind, and the message says the rest::

    ReproduceError
    ├── ConfigError          an experiment file, a Slurm request or a setting (ValueError)
    │   └── StaleTrainingError (reproduce.provenance)
    ├── UsageError           command-line options that do not fit together or the files (ValueError)
    ├── DataError            an input file's content: corpus, text, JSON, trees, scores (ValueError)
    │   └── TreeError, BracketScoreError, UndecodableTextError
    ├── MissingInputError    an input an earlier stage should have written (FileNotFoundError)
    ├── CheckpointError      a checkpoint unreadable, refused, or not fitting the run (ValueError)
    ├── UnwritableOutputError  an output that cannot be written: a full disk, a read-only folder
    └── DownloadError, VariantLockedError, LossScaleError, NonFiniteLossError, PeerLostError,
        TrainingJobRefused

The kinds that also derive from ``ValueError`` (or ``FileNotFoundError``) do so because that is
what they are, and code that handles bad input by the built-in class sees them as such: pydantic
turns a ``ValueError`` raised in a validator into its validation error (the config schema raises
:class:`ConfigError` there), and tests hold bad input to ``pytest.raises(ValueError)`` or
``FileNotFoundError``. The command line does not: it catches :class:`ReproduceError` alone, so
that a ``ValueError`` from a bug keeps its traceback.
"""


class ReproduceError(Exception):
    """A failure the user can act on; its message names the file or field and what was expected."""


class ConfigError(ReproduceError, ValueError):
    """A configuration file is missing, unreadable or does not match the schema, or a setting in
    it cannot work (with the data, the ranks, the model); the message names the file or key."""


class UsageError(ReproduceError, ValueError):
    """Command-line options that do not fit together or do not fit the files they name."""


class DataError(ReproduceError, ValueError):
    """An input file's content is not what the stage reading it expects (the file is named)."""


class MissingInputError(ReproduceError, FileNotFoundError):
    """An input that a download or an earlier stage should have written is absent."""


class CheckpointError(ReproduceError, ValueError):
    """A checkpoint is unreadable, unverified, refused, cannot be written, or does not fit the
    model, run or data it is used with; one line, path named."""


class UnwritableOutputError(ReproduceError):
    """An output cannot be written (a full disk, a read-only folder); the path is named and no
    partial file is left under it."""

    def __init__(self, path, reason: OSError | str):
        if isinstance(reason, OSError):
            reason = reason.strerror or str(reason)
        super().__init__(f"{path}: cannot write ({reason}); check that its folder is writable "
                         "and has room")
