"""Append-only JSON-lines files (``train/metrics.jsonl``): one JSON object per line.

A record is appended with one ``write``; a process killed during it, a node losing power before
the file's last blocks reach the disk, or a full disk leaves its *last* line torn: cut short, or
NUL bytes where the file system had allocated blocks but not yet written them. That is the
only damage appending can do, so :func:`read_records` leaves a torn last line out, with a
warning naming the file, and the writer rewrites the file without it (:func:`write_records`)
before appending again: a record appended after a torn line would otherwise be glued to it.
A bad line anywhere before the last is not the trace of an interrupted append but of another
writer or an edit, and is refused (:class:`DamagedRecordsError`, file and line named).

Readers (the tables, MLflow's replay) never rewrite: a training may be appending to the file
as they read it, and its half-written line is not damage.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from reproduce.errors import DataError

log = logging.getLogger(__name__)


class DamagedRecordsError(DataError):
    """A line before the last of an append-only file is not a JSON record."""


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
    :class:`DamagedRecordsError`."""
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
                raise DamagedRecordsError(
                    f"{path}:{number}: not a JSON line ({reason}); only the last line can be torn "
                    f"by an interrupted append: remove or repair this one") from None
            log.warning("%s: its last line (%d) is a torn record (%s), an append cut short; "
                        "left out", path, number, reason)
    return records


def write_records(path: Path, records: list[dict]) -> None:
    """Replace ``path`` by ``records``, one line each, durably (a temporary file, fsynced, then
    renamed over it): a crash leaves the old file or the new one, never a mix."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w") as stream:
        stream.write("".join(json.dumps(record) + "\n" for record in records))
        stream.flush()
        os.fsync(stream.fileno())
    temporary.replace(path)


def dev_curve(records: list[dict]) -> list[dict]:
    """The dev rows (``step``, ``dev_loss``, ``dev_perplexity``) of a metrics log by step; a step
    logged twice (training resumed from an earlier checkpoint) keeps its last."""
    latest = {record["step"]: record for record in records if "dev_perplexity" in record}
    return [{key: latest[step][key] for key in ("step", "dev_loss", "dev_perplexity")
             if key in latest[step]} for step in sorted(latest)]
