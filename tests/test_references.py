"""The official references are read as sacreBLEU reads them: raw, not normalised like the
training data, and the counts are checked against the prepared source side."""

import pytest
from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

from reproduce.config import Source
from reproduce.data.references import reference_lines, write_references
from reproduce.data.download import file_name
from reproduce.errors import DataError
from tests.corpus_archives import sgm, write_tgz

# NFKC would turn "ﬁ" into "fi" and the no-break space into a space; the references keep both.
RAW_SEGMENTS = ["  Der  ﬁnale\u00a0Preis: 5\u00a0€ ", "F&amp;E &quot;rockt&quot; „gut“", "Ende."]


def test_sgm_references_equal_sacrebleus_own_reader(tmp_path):
    (tmp_path / "ref.sgm").write_text(sgm("refset", RAW_SEGMENTS), encoding="utf-8")
    # sacreBLEU's converter for WMT's fake SGML (what `sacrebleu -t wmt14/full` runs).
    FakeSGMLDataset._convert_format(FakeSGMLDataset, str(tmp_path / "ref.sgm"),
                                    str(tmp_path / "sacrebleu.txt"))
    expected = (tmp_path / "sacrebleu.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert reference_lines(tmp_path / "ref.sgm", "sgm") == expected
    # Spelled out: whitespace collapsed and stripped (sacreBLEU's _clean), nothing else.
    assert expected == ["Der ﬁnale Preis: 5 €", "F&amp;E &quot;rockt&quot; „gut“", "Ende."]


def test_text_and_tsv_references_keep_everything_but_trailing_whitespace(tmp_path):
    (tmp_path / "ref.txt").write_text("ﬁne  Café \t\nzwei\u2028drei\n", encoding="utf-8")
    assert reference_lines(tmp_path / "ref.txt", "text") == ["ﬁne  Café", "zwei\u2028drei"]
    (tmp_path / "ref.tsv").write_text("one\tﬁne  Café\ntwo\tzwei\n", encoding="utf-8")
    assert reference_lines(tmp_path / "ref.tsv", "tsv") == ["ﬁne  Café", "zwei"]


def test_a_tsv_reference_line_without_a_tab_is_refused_by_file_and_line(tmp_path):
    (tmp_path / "ref.tsv").write_text("one\teins\ntwo zwei\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"ref\.tsv:2: a tsv reference line holds no tab"):
        reference_lines(tmp_path / "ref.tsv", "tsv")


def _test_source():
    return Source(name="newstest", url="file:x/dev.tgz", format="sgm",
                  source_member="dev/src.sgm", target_member="dev/ref.sgm")


def test_write_references_from_the_archive(tmp_path):
    write_tgz(tmp_path / "dl" / file_name(_test_source()), {
        "dev/src.sgm": sgm("srcset", ["a", "b", "c"]), "dev/ref.sgm": sgm("refset", RAW_SEGMENTS),
    })
    count = write_references([_test_source()], tmp_path / "dl", tmp_path / "dev.ref",
                             expected_lines=3)
    assert count == 3
    assert (tmp_path / "dev.ref").read_text(encoding="utf-8") == \
        "Der ﬁnale Preis: 5 €\nF&amp;E &quot;rockt&quot; „gut“\nEnde.\n"


def test_a_reference_count_unlike_the_source_count_is_an_error_naming_the_member(tmp_path):
    write_tgz(tmp_path / "dl" / file_name(_test_source()), {
        "dev/src.sgm": sgm("srcset", ["a", "b"]), "dev/ref.sgm": sgm("refset", ["x", "y"]),
    })
    with pytest.raises(ValueError, match=r"newstest:dev/ref\.sgm.*gives 2 references.*read 3"):
        write_references([_test_source()], tmp_path / "dl", tmp_path / "dev.ref", expected_lines=3)
    assert not (tmp_path / "dev.ref").exists()


def test_ptb_references_are_the_cleaned_gold_trees_one_per_line(tmp_path):
    source = Source(name="wsj23", url="file:x/treebank.tgz", format="ptb",
                    source_member="wsj/23/*.mrg")
    write_tgz(tmp_path / "dl" / file_name(source), {
        "wsj/23/wsj_2301.mrg": "( (S (NP-SBJ (PRP It) ) \n    (VP (VBZ runs) ) (. .) ))\n",
        "wsj/23/wsj_2300.mrg": "( (S (NP-SBJ-1 (DT The) (NN dog) )\n  (VP (VBD was) (VP (VBN fed) "
                               "(NP (-NONE- *-1) ))) (. .) ))\n",
    })
    assert write_references([source], tmp_path / "dl", tmp_path / "test.ref", expected_lines=2) == 2
    assert (tmp_path / "test.ref").read_text() == (
        "(S (NP (DT The) (NN dog)) (VP (VBD was) (VP (VBN fed))) (. .))\n"
        "(S (NP (PRP It)) (VP (VBZ runs)) (. .))\n"
    )
    with pytest.raises(ValueError,
                       match=r"wsj23:wsj/23/\*\.mrg: read as gold trees, it gives 2 "
                             r"references.*read 3"):
        write_references([source], tmp_path / "dl", tmp_path / "other.ref", expected_lines=3)
    assert not (tmp_path / "other.ref").exists()


def test_the_references_of_several_sources_follow_each_other_in_source_order(tmp_path):
    """A split made of several test sets (newstest2012 + newstest2013) is scored against all
    their references, in the order preparation read the sources: reference i stays paired with
    source sentence i."""
    sources = [Source(name=name, url=f"file:x/{name}.tgz", format="sgm",
                      source_member="dev/src.sgm", target_member="dev/ref.sgm")
               for name in ("first", "second")]
    for source, references in zip(sources, (["one", "two"], ["three"]), strict=True):
        write_tgz(tmp_path / "dl" / file_name(source), {
            "dev/src.sgm": sgm("srcset", ["s"] * len(references)),
            "dev/ref.sgm": sgm("refset", references),
        })
    assert write_references(sources, tmp_path / "dl", tmp_path / "dev.ref", expected_lines=3) == 3
    assert (tmp_path / "dev.ref").read_text(encoding="utf-8") == "one\ntwo\nthree\n"


def test_a_blank_tsv_line_of_a_test_set_is_an_empty_reference_in_its_place(tmp_path):
    """Preparation reads a blank tsv line (WMT's TSV corpora separate documents with them) as an
    empty pair and keeps it in a dev or test split; its reference is empty, in its place, so
    that every reference stays paired with its source sentence."""
    from reproduce.config import Cleaning
    from reproduce.data.prepare import prepare_split

    source = Source(name="news", url="file:x/news.tgz", format="tsv", source_member="news.tsv")
    write_tgz(tmp_path / "dl" / file_name(source),
              {"news.tsv": "one\teins\n\n  \ntwo\tzwei\n"})
    report = prepare_split([source], "test", tmp_path / "dl", tmp_path / "data", Cleaning())
    assert report["kept"] == 4
    assert write_references([source], tmp_path / "dl", tmp_path / "test.ref",
                            expected_lines=report["kept"]) == 4
    assert (tmp_path / "test.ref").read_text(encoding="utf-8") == "eins\n\n\nzwei\n"


def test_a_tsv_reference_line_without_a_tab_names_the_member_not_a_scratch_copy(tmp_path):
    source = Source(name="news", url="file:x/news.tgz", format="tsv", source_member="news.tsv")
    archive = tmp_path / "dl" / file_name(source)
    write_tgz(archive, {"news.tsv": "one\teins\ntwo zwei\n"})
    with pytest.raises(DataError, match=rf"^{archive} member news.tsv:2: a tsv reference line "
                                        "holds no tab"):
        write_references([source], tmp_path / "dl", tmp_path / "test.ref", expected_lines=2)
