"""Reading corpus text strictly: UTF-8 only, one sentence per ``\\n``-terminated line.

Undecodable bytes stop the read with the file and line named (never a silent U+FFFD), and only
``\\n`` ends a line: form feed, vertical tab, ``\\r``, U+0085, U+2028 or U+2029 inside a sentence
stay inside it (:meth:`str.splitlines` would break there and shift every following line).

A UTF-8 byte order mark opening a file (as Windows editors write) is dropped, as the
``utf-8-sig`` codec would: it marks the encoding and is no part of the first sentence, whose
first token it would otherwise change.

JSON files the commands are handed (scores, an encoded corpus's ``meta.json``) are read here too,
so that one that is not JSON is an error naming the file and the position, not json's bare
``Expecting value: line 1 column 1``.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any, Iterator

from reproduce.errors import DataError


class UndecodableTextError(DataError):
    """A text file holds bytes that are not UTF-8."""


class NotJsonError(DataError):
    """A file expected to hold JSON does not."""


def iter_lines(path: Path, label: str | None = None) -> Iterator[str]:
    """The lines of ``path`` without their ``\\n``, streamed; ``label`` names the file in errors
    (e.g. an archive member) when ``path`` is a scratch copy."""
    with path.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            yield decode_line(raw.removesuffix(b"\n"), label or str(path), number)


def count_lines(path: Path) -> int:
    """How many lines :func:`iter_lines` yields from ``path``, counted without decoding (a few
    seconds for millions of lines): the total that a stage's progress measures against."""
    count, last = 0, b"\n"
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def read_lines(path: Path, label: str | None = None) -> list[str]:
    return list(iter_lines(path, label))


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
        raise NotJsonError(f"{path} line {error.lineno} column {error.colno}: not JSON "
                           f"({error.msg})") from None


def decode_line(raw: bytes, label: str, number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _undecodable(label, number, raw[error.start : error.end]) from None


def _undecodable(label: str, line: int, bad: bytes) -> UndecodableTextError:
    return UndecodableTextError(
        f"{label} line {line}: not UTF-8 (bytes {bad.hex(' ')}); convert the file to UTF-8"
    )


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` to ``path`` (folders made), through a temporary file renamed over it, so
    that a reader never sees half a file."""
    from reproduce.output_files import write_text_whole

    write_text_whole(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")
