"""Result files written whole or not at all: the bytes go to ``<name>.tmp``, which is renamed over
the final name only once complete and on disk (fsynced), so that a kill or a power loss at any
moment leaves the old file or the new one, never half of one, under the final name (what the
Snakemake rules and every later stage read). A write that fails (a full disk, a read-only
folder) removes the ``.tmp`` and is one line naming the final path.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from reproduce.errors import UnwritableOutputError


def temporary_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def is_failed_write(error: BaseException) -> bool:
    """An OSError that names no file, as a write on an open stream raises (``ENOSPC``,
    ``EFBIG``): the caller knows which file it was writing. An OSError naming its file, or one of
    the package's own errors (a missing input is a FileNotFoundError too), is not one."""
    from reproduce.errors import ReproduceError

    return (isinstance(error, OSError) and not isinstance(error, ReproduceError)
            and error.filename is None)


@contextmanager
def written_whole(path: Path, mode: str = "w", **open_options) -> Iterator[IO]:
    """A stream into ``<path>.tmp``, renamed over ``path`` when the block ends without error.

    An OSError that names no file (a write on the stream: ``ENOSPC``, ``EFBIG``) becomes
    :class:`UnwritableOutputError` naming ``path``; one naming its file (an input the block reads,
    a folder that cannot be created) keeps its own name."""
    temporary = temporary_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with temporary.open(mode, **open_options) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        temporary.replace(path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        if not (is_failed_write(error) or error.filename == str(temporary)):
            raise
        raise UnwritableOutputError(path, error) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text_whole(path: Path, text: str) -> None:
    with written_whole(path, "w", encoding="utf-8", newline="\n") as stream:
        stream.write(text)


def write_bytes_whole(path: Path, data: bytes) -> None:
    with written_whole(path, "wb") as stream:
        stream.write(data)
