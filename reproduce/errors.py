"""Expected errors: bad input or a refused operation, which the command line reports as one line
``reproduce <command>: error: ...`` (a traceback only with ``--verbose``).

Every error class of the package that describes such a case derives from :class:`ReproduceError`;
anything else that escapes a command is a bug and keeps its traceback.
"""


class ReproduceError(Exception):
    """A failure the user can act on; its message names the file or field and what was expected."""
