"""Files, read strictly and written whole: the one module of the package that reads text and JSON,
writes a file, appends a record and calls ``fsync``.

*Reading text.* Corpus text is UTF-8 only, one sentence per ``\\n``-terminated line. Undecodable
bytes stop the read with the file and line named (never a silent U+FFFD), and only ``\\n`` ends
a line: form feed, vertical tab, ``\\r``, U+0085, U+2028 or U+2029 inside a sentence stay inside
it (:meth:`str.splitlines` would break there and shift every following line). A UTF-8 byte order
mark opening a file (as Windows editors write) is dropped, as the ``utf-8-sig`` codec would: it
marks the encoding and is no part of the first sentence, whose first token it would otherwise
change. JSON files the commands are handed (scores, an encoded corpus's ``meta.json``) are read
here too, so that one that is not JSON is an error naming the file and the position, not json's
bare ``Expecting value: line 1 column 1``.

*Writing whole.* The bytes go to ``<name>.tmp``, which is fsynced, renamed over the final name,
and the folder fsynced (:func:`replaced_whole`; several files together:
:func:`replaced_together`): a kill or a power loss at any moment leaves the
old file or the new one, never half of one, under the final name (what the Snakemake rules and
every later stage read). A write that fails (a full disk, a read-only folder) removes the
``.tmp`` and is one line naming the final path (:func:`written_whole`).

*Records* (``train/metrics.jsonl``): append-only JSON lines, one object per line. A record is
appended with one ``write`` (:func:`append_record`); a process killed during it, a node losing
power before the file's last blocks reach the disk, or a full disk leaves its *last* line torn:
cut short, or NUL bytes where the file system had allocated blocks but not yet written them. That
is the only damage appending can do, so :func:`read_records` leaves a torn last line out, with a
warning naming the file, and the writer rewrites the file without it (:func:`write_records`)
before appending again: a record appended after a torn line would otherwise be glued to it. A bad
line anywhere before the last is not the trace of an interrupted append but of another writer or
an edit, and is refused (:class:`DataError`, file and line named). Readers (the tables,
MLflow's replay) never rewrite: a training may be appending to the file as they read it, and its
half-written line is not damage.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

from reproduce.errors import DataError, ReproduceError, UnwritableOutputError

log = logging.getLogger(__name__)


class UndecodableTextError(DataError):
    """A text file holds bytes that are not UTF-8."""


# -- reading text ----------------------------------------------------------------------------------
def iter_lines(path: Path, label: str | None = None) -> Iterator[str]:
    """The lines of ``path`` without their ``\\n``, streamed; ``label`` names the file in errors
    (e.g. an archive member) when ``path`` is a scratch copy."""
    with path.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            yield _decode_line(raw.removesuffix(b"\n"), label or str(path), number)


def count_lines(path: Path) -> int:
    """How many lines :func:`iter_lines` yields from ``path``, counted without decoding (a few
    seconds for millions of lines): the total that a stage's progress measures against."""
    count, last = 0, b"\n"
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def read_lines(path: Path) -> list[str]:
    return list(iter_lines(path))


def read_text(path: Path, label: str | None = None) -> str:
    """The whole of ``path`` as text, with undecodable bytes reported by line."""
    data = path.read_bytes().removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise _undecodable(label or str(path), line, data[error.start : error.end]) from None


def read_json(path: Path) -> Any:
    """The JSON value in ``path``; errors name the file and the line and column."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise DataError(f"{path} line {error.lineno} column {error.colno}: not JSON "
                        f"({error.msg})") from None


def _decode_line(raw: bytes, label: str, number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _undecodable(label, number, raw[error.start : error.end]) from None


def _undecodable(label: str, line: int, bad: bytes) -> UndecodableTextError:
    return UndecodableTextError(
        f"{label} line {line}: not UTF-8 (bytes {bad.hex(' ')}); convert the file to UTF-8"
    )


# -- writing whole ---------------------------------------------------------------------------------
def temporary_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def fsync_directory(directory: Path) -> None:
    """Put ``directory``'s entries on disk: a rename (or a move) into it survives a power loss."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def is_failed_write(error: BaseException) -> bool:
    """An OSError that names no file, as a write on an open stream raises (``ENOSPC``,
    ``EFBIG``): the caller knows which file it was writing. An OSError naming its file, or one of
    the package's own errors (a missing input is a FileNotFoundError too), is not one."""
    return (isinstance(error, OSError) and not isinstance(error, ReproduceError)
            and error.filename is None)


@contextmanager
def replaced_together(paths: Sequence[Path], mode: str = "w",
                      **open_options) -> Iterator[list[IO]]:
    """Streams into each path's ``<path>.tmp``, which replace ``paths`` when the block ends
    without error: every one flushed and fsynced before the first is renamed (a full disk
    replaces none of them), then renamed in order, then their folders fsynced. Whatever fails,
    the ``.tmp`` files are removed and the error goes on as raised: for a caller that words its
    own (a checkpoint, a split's two sides); :func:`written_whole` words it for the rest."""
    temporaries = [temporary_path(path) for path in paths]
    try:
        with ExitStack() as open_streams:
            streams = [open_streams.enter_context(temporary.open(mode, **open_options))
                       for temporary in temporaries]
            yield streams
            for stream in streams:
                stream.flush()
                os.fsync(stream.fileno())
        for temporary, path in zip(temporaries, paths, strict=True):
            temporary.replace(path)
        for folder in dict.fromkeys(path.parent for path in paths):
            fsync_directory(folder)
    except BaseException:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)
        raise


@contextmanager
def replaced_whole(path: Path, mode: str = "w", **open_options) -> Iterator[IO]:
    """A stream into ``<path>.tmp`` that replaces ``path`` when the block ends without error:
    flushed, fsynced, renamed over ``path``, and the folder fsynced (:func:`replaced_together`,
    of one file: errors go on as raised)."""
    with replaced_together([path], mode, **open_options) as (stream,):
        yield stream


@contextmanager
def written_whole(path: Path, mode: str = "w", **open_options) -> Iterator[IO]:
    """A stream into ``<path>.tmp``, renamed over ``path`` when the block ends without error
    (:func:`replaced_whole`; ``path``'s folder made first).

    An OSError that names no file (a write on the stream: ``ENOSPC``, ``EFBIG``) becomes
    :class:`UnwritableOutputError` naming ``path``; one naming its file (an input the block reads,
    a folder that cannot be created) keeps its own name."""
    temporary = temporary_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replaced_whole(path, mode, **open_options) as stream:
            yield stream
    except OSError as error:
        if not (is_failed_write(error) or error.filename == str(temporary)):
            raise
        raise UnwritableOutputError(path, error) from None


def write_text_whole(path: Path, text: str) -> None:
    with written_whole(path, "w", encoding="utf-8", newline="\n") as stream:
        stream.write(text)


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` to ``path`` (folders made), through a temporary file renamed over it, so
    that a reader never sees half a file."""
    write_text_whole(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


# -- records: append-only JSON lines ---------------------------------------------------------------
class _NotARecord(Exception):
    """Why a line holds no record; :func:`read_records` decides whether that is an error."""


def _parse(line: bytes) -> dict:
    """The record on ``line``; :class:`_NotARecord` with the reason where it holds none."""
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise _NotARecord("not UTF-8") from None
    except json.JSONDecodeError as error:
        raise _NotARecord(f"{error.msg} at column {error.colno}") from None
    if not isinstance(record, dict):
        raise _NotARecord(f"a JSON {type(record).__name__}, not an object")
    return record


def read_records(path: Path) -> list[dict]:
    """The records of ``path`` in order (none when it does not exist); blank lines are skipped,
    a torn last line is left out with a warning, a bad line before it raises
    :class:`DataError`."""
    if not path.exists():
        return []
    lines = [(number, line) for number, line in enumerate(path.read_bytes().split(b"\n"), start=1)
             if line.strip()]
    records = []
    for number, line in lines:
        try:
            records.append(_parse(line))
        except _NotARecord as reason:
            if number != lines[-1][0]:
                raise DataError(
                    f"{path}:{number}: not a JSON line ({reason}); only the last line can be torn "
                    f"by an interrupted append: remove or repair this one") from None
            log.warning("%s: its last line (%d) is a torn record (%s), an append cut short; "
                        "left out", path, number, reason)
    return records


def write_records(path: Path, records: list[dict]) -> None:
    """Replace ``path`` by ``records``, one line each, written whole: a crash leaves the old file
    or the new one, never a mix."""
    write_text_whole(path, "".join(json.dumps(record) + "\n" for record in records))


def append_record(path: Path, record: dict) -> None:
    """Append ``record`` to ``path`` as one JSON line, in one ``write`` (not fsynced: a line torn
    by a crash is left out by :func:`read_records`)."""
    with path.open("a") as stream:
        stream.write(json.dumps(record) + "\n")
