"""The ground floor for files (:mod:`reproduce.files`): a file is written whole or not at all,
several together are all replaced or none, and a failed write is one error naming the final
path."""

import errno
import json

import pytest

from reproduce.errors import UnwritableOutputError
from reproduce.files import (append_record, read_records, replaced_together, write_records,
                             write_text_whole, written_whole)


def test_a_file_written_whole_replaces_the_old_one_and_leaves_no_tmp(tmp_path):
    path = tmp_path / "made" / "out.txt"
    write_text_whole(path, "old\n")
    write_text_whole(path, "new\n")
    assert path.read_text() == "new\n"
    assert sorted(entry.name for entry in path.parent.iterdir()) == ["out.txt"]


def test_a_failed_write_keeps_the_old_file_and_names_the_final_path(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(UnwritableOutputError, match=rf"^{path}: cannot write \(No space left"):
        with written_whole(path) as stream:
            stream.write("half")
            raise OSError(errno.ENOSPC, "No space left on device")  # a write names no file
    assert path.read_text() == "old\n"
    assert [entry.name for entry in tmp_path.iterdir()] == ["out.txt"]


def test_files_replaced_together_are_all_replaced_or_none(tmp_path):
    paths = [tmp_path / "train.src", tmp_path / "train.tgt"]
    for path in paths:
        path.write_text("old\n")
    with pytest.raises(ValueError):
        with replaced_together(paths) as (source, target):
            source.write("new\n")
            target.write("new\n")
            raise ValueError("too few pairs")
    assert [path.read_text() for path in paths] == ["old\n", "old\n"]
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["train.src", "train.tgt"]
    with replaced_together(paths) as (source, target):
        source.write("new source\n")
        target.write("new target\n")
    assert [path.read_text() for path in paths] == ["new source\n", "new target\n"]


def test_records_appended_and_rewritten_read_back_in_order(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for step in (1, 2, 3):
        append_record(path, {"step": step, "loss": 1.0 / step})
    assert [record["step"] for record in read_records(path)] == [1, 2, 3]
    write_records(path, read_records(path)[:2])
    assert path.read_text() == "".join(json.dumps({"step": step, "loss": 1.0 / step}) + "\n"
                                       for step in (1, 2))


def test_a_temporary_that_cannot_be_created_names_the_final_path(tmp_path):
    """Where ``<name>.tmp`` cannot be created (a read-only folder; here a folder holds the name),
    the error names the file the caller asked for, as a full disk does, not the temporary."""
    path = tmp_path / "out.txt"
    (tmp_path / "out.txt.tmp").mkdir()
    with pytest.raises(UnwritableOutputError, match=rf"^{path}: cannot write \(Is a directory\)"):
        write_text_whole(path, "new\n")
    assert not path.exists()
