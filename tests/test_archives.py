"""Reading members out of archives: a glob (a treebank's files) matches within one folder, and a
``.gz`` member is decompressed on the way out."""

import gzip

from reproduce.data.archives import extract_member, matching_members
from tests.corpus_archives import write_tgz, write_tgz_bytes


def test_a_glob_matches_within_one_folder_only(tmp_path):
    """``wsj/*.mrg`` names the files of ``wsj/``, not those of its subfolders: a section's glob
    must not pull in another section's trees (nor fail on them)."""
    archive = write_tgz(
        tmp_path / "treebank.tgz",
        {
            "wsj/b.mrg": "(S (NN b))\n",
            "wsj/a.mrg": "(S (NN a))\n",
            "wsj/23/c.mrg": "(S (NN c))\n",
        },
    )
    assert matching_members(archive, "wsj/*.mrg") == ["wsj/a.mrg", "wsj/b.mrg"]
    assert matching_members(archive, "wsj/*/*.mrg") == ["wsj/23/c.mrg"]


def test_a_gz_member_is_decompressed_on_the_way_out(tmp_path):
    """A member named ``*.gz`` inside a tar (giga-fren inside training-giga-fren.tar) is read as
    the text it compresses, not as gzip bytes."""
    text = "Bonjour .\nAu revoir .\n"
    archive = write_tgz_bytes(
        tmp_path / "giga.tar", {"giga/giga-fren.release2.fixed.fr.gz": gzip.compress(text.encode())}
    )
    out = extract_member(archive, "giga/giga-fren.release2.fixed.fr.gz", tmp_path / "giga.fr")
    assert out.read_text(encoding="utf-8") == text
