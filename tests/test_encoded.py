"""Encoded splits read back (:mod:`reproduce.data.encoded`): sentence i is the tokens between
offsets i and i + 1, and offsets that cannot mean that are refused by name."""

import shutil

import numpy as np
import pytest

from reproduce.data import encoded
from reproduce.data.encoded import EncodedCorpus
from reproduce.errors import DataError
from tests.training_fixtures import write_encoded

PAIRS = [([5, 6, 7], [8]), ([9], [10, 11]), ([12, 13], [14, 15, 16])]


def test_each_sentence_reads_back_the_ids_written_for_it(tmp_path):
    """Three pairs written, three read back, each side its own ids in order."""
    write_encoded(tmp_path / "encoded", vocab_size=20, pairs=PAIRS)
    corpus = EncodedCorpus.open(tmp_path / "encoded")
    assert len(corpus) == 3
    assert [corpus.source(i).tolist() for i in range(3)] == [[5, 6, 7], [9], [12, 13]]
    assert [corpus.target(i).tolist() for i in range(3)] == [[8], [10, 11], [14, 15, 16]]
    tokens, lengths = corpus.concatenated("target", np.array([2, 0]))
    assert tokens.tolist() == [14, 15, 16, 8] and lengths.tolist() == [3, 1]


def test_offsets_that_go_back_are_refused_naming_the_file(tmp_path):
    """Offsets 0, 3, 2, 6 end at the right token count but would give sentence 1 no tokens and
    sentence 2 tokens of sentence 0: the split is refused, not read as other sentences."""
    write_encoded(tmp_path / "encoded", vocab_size=20, pairs=PAIRS)
    path = tmp_path / "encoded/source_offsets.npy"
    np.save(path, np.array([0, 3, 2, 6], dtype=np.int64))
    with pytest.raises(DataError, match=r"source_offsets\.npy: not the 3 \+ 1 rising offsets"):
        EncodedCorpus.open(tmp_path / "encoded")


def test_a_token_file_cut_short_is_refused_naming_it_and_both_sizes(tmp_path):
    """The offsets end at 6 source tokens, 12 bytes of uint16; a ``source.bin`` of 10 bytes (a
    copy cut short) is one error naming it, before numpy maps the file."""
    write_encoded(tmp_path / "encoded", vocab_size=20, pairs=PAIRS)
    path = tmp_path / "encoded/source.bin"
    path.write_bytes(path.read_bytes()[:10])
    with pytest.raises(
        DataError,
        match=r"source\.bin: 10 bytes, but its offsets end at 6 tokens "
        r"of uint16, 12 bytes",
    ):
        EncodedCorpus.open(tmp_path / "encoded")


def test_encoding_again_into_the_same_folder_replaces_the_split_whole(tmp_path):
    """A split encoded again (other settings, a rerun) replaces the old folder, nothing of the old
    split left beside the new one."""
    write_encoded(tmp_path / "encoded", vocab_size=20, pairs=PAIRS)
    write_encoded(tmp_path / "encoded", vocab_size=20, pairs=[([1], [2, 3])])
    corpus = EncodedCorpus.open(tmp_path / "encoded")
    assert len(corpus) == 1
    assert (corpus.source(0).tolist(), corpus.target(0).tolist()) == ([1], [2, 3])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["encoded"]


def test_killed_while_the_old_split_is_deleted_the_folder_holds_a_whole_split(tmp_path,
                                                                              monkeypatch):
    """A kill in the middle of deleting the split encoded before (a big one takes a while)
    leaves the new split whole at the folder's name, not the old one in part."""
    write_encoded(tmp_path / "encoded", vocab_size=20, pairs=PAIRS)
    rmtree = shutil.rmtree

    def killed_while_deleting(path, ignore_errors=False):
        files = sorted(path.rglob("*.bin")) if path.exists() else []
        if files:
            files[0].unlink()
            raise KeyboardInterrupt
        rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(encoded.shutil, "rmtree", killed_while_deleting)
    with pytest.raises(KeyboardInterrupt):
        write_encoded(tmp_path / "encoded", vocab_size=20, pairs=[([1], [2, 3])])
    corpus = EncodedCorpus.open(tmp_path / "encoded")
    assert (len(corpus), corpus.source(0).tolist(), corpus.target(0).tolist()) == (1, [1], [2, 3])


def test_a_meta_json_of_another_dtype_is_refused_naming_it(tmp_path):
    """Tokens are uint16 or int32; a record naming float32 would read the token bytes as other
    numbers, so it is refused by name."""
    write_encoded(tmp_path / "encoded", vocab_size=20, pairs=PAIRS)
    meta = tmp_path / "encoded/meta.json"
    meta.write_text(meta.read_text().replace('"uint16"', '"float16"'))
    with pytest.raises(DataError, match=r"meta\.json: not the record of an encoded split"):
        EncodedCorpus.open(tmp_path / "encoded")
