"""Preparation of splits: SGM parsing, normalisation, cleaning counts, errors naming sources."""

import json

import pytest

from reproduce.config import Cleaning, ConfigError, Source
from reproduce.experiment_file import load_experiment
from reproduce.data.download import file_name
from reproduce.data.prepare import prepare_split
from reproduce.data.sgm import parse_sgm_text, read_sgm
from reproduce.data.treebank import read_source_trees
from reproduce.errors import DataError
from reproduce.files import UndecodableTextError
from reproduce.parsing.trees import TreeError, leaves
from tests.corpus_archives import sgm, wmt_like_members, write_tgz, write_tgz_bytes


def test_sgm_segments_entities_and_odd_markup():
    text = """<refset setid="x" srclang='en'>
<doc docid="a" genre=news>
<p>
<seg id="1">Tom &amp; Jerry</seg>
<seg id=2 >  spaced   out  </seg>
<SEG id="3">&quot;quoted&quot; &lt;b&gt; &#39;apostrophe&#39;</SEG>
<seg id="4">across
lines</seg >
</p>
</doc>
</refset>"""
    assert parse_sgm_text(text) == [
        "Tom & Jerry", "spaced out", "\"quoted\" <b> 'apostrophe'", "across lines",
    ]


def _source(fmt="text", **members):
    defaults = {"source_member": "training/europarl-v7.de-en.en",
                "target_member": "training/europarl-v7.de-en.de"}
    return Source(name="europarl", url="file:x/europarl.tgz", format=fmt, **(defaults | members))


def _downloaded(folder, members, source=None):
    """Write ``members`` as the download of ``source`` in ``folder`` (named as `download` names
    it)."""
    write_tgz(folder / file_name(source or _source()), members)
    return folder


@pytest.fixture
def downloads(tmp_path):
    return _downloaded(tmp_path / "downloads", wmt_like_members())


def test_training_pairs_are_cleaned_with_exact_counts(downloads, tmp_path):
    report = prepare_split([_source()], "train", downloads, tmp_path / "data",
                           Cleaning(max_tokens=250, max_length_ratio=1.5))
    # 5 pairs: kept "A small house", "The cat sleeps"; dropped: empty side, 300 tokens, ratio 3/12.
    assert report["sources"]["europarl"] == {
        "read": 5, "kept": 2, "dropped_empty": 1, "dropped_too_long": 1, "dropped_length_ratio": 1,
    }
    assert (tmp_path / "data/train.src").read_text() == "A small house .\nThe cat sleeps .\n"
    assert (tmp_path / "data/train.tgt").read_text() == "Ein kleines Haus .\nDie Katze schläft .\n"
    assert json.loads((tmp_path / "data/train.report.json").read_text())["kept"] == 2


def test_max_tokens_is_inclusive_and_binds_either_side_and_an_empty_target_is_dropped(tmp_path):
    """The cleaning's limits, side by side: a pair of exactly ``max_tokens`` tokens stays, one
    token more on the target side alone drops it, and an empty target is as empty as an empty
    source (never a division by its zero length)."""
    _downloaded(tmp_path / "dl", {
        "training/europarl-v7.de-en.en": "a b c\na b\nk\na b c d\n",
        "training/europarl-v7.de-en.de": "x y z\nw x y z\n\nx y\n",
    })
    report = prepare_split([_source()], "train", tmp_path / "dl", tmp_path / "out",
                           Cleaning(max_tokens=3, max_length_ratio=10.0))
    counts = report["sources"]["europarl"]
    assert (counts["read"], counts["kept"]) == (4, 1)
    assert (counts["dropped_empty"], counts["dropped_too_long"]) == (1, 2)
    assert counts.get("dropped_length_ratio", 0) == 0
    assert (tmp_path / "out/train.src").read_text() == "a b c\n"
    assert (tmp_path / "out/train.tgt").read_text() == "x y z\n"


def test_dev_sets_are_read_from_sgm_and_never_filtered(downloads, tmp_path):
    source = _source("sgm", source_member="dev/newstest2013-src.en.sgm",
                     target_member="dev/newstest2013-ref.de.sgm")
    prepare_split([source], "dev", downloads, tmp_path / "data", Cleaning(max_length_ratio=1.0))
    assert (tmp_path / "data/dev.src").read_text() == "Good morning .\nR&D <rocks>\n"
    assert (tmp_path / "data/dev.tgt").read_text() == 'Guten Morgen .\nF&E "rockt"\n'


def test_unicode_is_normalised(tmp_path):
    _downloaded(tmp_path / "dl", {
        "training/europarl-v7.de-en.en": "ﬁne caf\u0065\u0301\n",
        "training/europarl-v7.de-en.de": "gut\u00a0so Café\n",
    })
    prepare_split([_source()], "train", tmp_path / "dl", tmp_path / "data", Cleaning())
    assert (tmp_path / "data/train.src").read_text() == "fine café\n"
    assert (tmp_path / "data/train.tgt").read_text() == "gut so Café\n"


def test_sides_of_different_length_are_an_error_naming_the_source(tmp_path):
    _downloaded(tmp_path / "dl", {
        "training/europarl-v7.de-en.en": "a\nb\nc\n", "training/europarl-v7.de-en.de": "x\ny\n",
    })
    with pytest.raises(DataError, match=r"'europarl'.*has 3 sentences.*has 2"):
        prepare_split([_source()], "train", tmp_path / "dl", tmp_path / "out", Cleaning())
    assert not (tmp_path / "out/train.src").exists()  # nothing half-written left as finished


def test_tsv_sources(tmp_path):
    source = Source(name="europarl", url="file:x/europarl.tgz", format="tsv",
                    source_member="corpus.tsv")
    _downloaded(tmp_path / "dl", {"corpus.tsv": "one two\teins zwei\nthree\tdrei\n"}, source)
    prepare_split([source], "test", tmp_path / "dl", tmp_path / "data", Cleaning())
    assert (tmp_path / "data/test.tgt").read_text() == "eins zwei\ndrei\n"


def test_a_tsv_line_without_a_tab_is_an_error_naming_the_member_and_line(tmp_path):
    """A TSV line holding one column cannot be paired: the error names the member, the line
    and the source (not an IndexError from deep inside)."""
    source = Source(name="europarl", url="file:x/europarl.tgz", format="tsv",
                    source_member="corpus.tsv")
    _downloaded(tmp_path / "dl", {"corpus.tsv": "one\teins\nno tab here\n"}, source)
    with pytest.raises(DataError, match=r"member corpus\.tsv line 2 \(source 'europarl'\): "
                                        r"expected a tab between source and target"):
        prepare_split([source], "train", tmp_path / "dl", tmp_path / "out", Cleaning())


def test_a_blank_tsv_line_is_an_empty_pair_that_cleaning_drops_and_counts(tmp_path):
    """WMT's TSV corpora (news-commentary's, for one) mark where a document ends with a blank
    line: it is no pair to train on, nor a reason to refuse the corpus."""
    source = Source(name="news", url="file:x/news.tgz", format="tsv", source_member="corpus.tsv")
    _downloaded(tmp_path / "dl", {"corpus.tsv": "one\teins\n\n \t \nzwei\ttwo\n"}, source)
    report = prepare_split([source], "train", tmp_path / "dl", tmp_path / "out", Cleaning())
    assert report["sources"]["news"] == {"read": 4, "dropped_empty": 2, "kept": 2}
    assert (tmp_path / "out/train.tgt").read_text() == "eins\ntwo\n"


def test_an_unknown_format_is_rejected_before_any_download(tmp_path):
    config = tmp_path / "experiment.yaml"
    config.write_text("""
name: broken
source_lang: en
target_lang: de
data:
  train: [{name: a, url: "http://127.0.0.1:9/a.tgz", format: xml}]
  dev: [{name: b, url: "http://127.0.0.1:9/b.tgz"}]
  test: [{name: c, url: "http://127.0.0.1:9/c.tgz"}]
bpe: {vocab_size: 100}
training: {steps: 1}
variants: {base: {}}
""")
    with pytest.raises(ConfigError,
                       match=r"experiment\.yaml: data\.train\.0\.format: Input should be 'text', "
                             r"'sgm', 'tsv' or 'ptb'"):
        load_experiment(config)


def test_an_empty_split_fails_naming_the_split_and_its_sources(tmp_path):
    _downloaded(tmp_path / "dl",
                {"training/europarl-v7.de-en.en": "", "training/europarl-v7.de-en.de": ""})
    with pytest.raises(DataError,
                       match=r"split train: 0 sentence pairs kept of 0 read from sources europarl"):
        prepare_split([_source()], "train", tmp_path / "dl", tmp_path / "out", Cleaning())
    assert not list((tmp_path / "out").iterdir())  # no outputs, no .tmp, no report


def test_a_split_below_the_minimum_fails_after_cleaning(downloads, tmp_path):
    # wmt_like_members keeps 2 of 5 training pairs (see the exact counts above).
    with pytest.raises(DataError,
                       match=r"2 sentence pairs kept of 5 read.*data\.min_pairs = 3"):
        prepare_split([_source()], "train", downloads, tmp_path / "out",
                      Cleaning(max_length_ratio=1.5), min_pairs=3)
    report = prepare_split([_source()], "train", downloads, tmp_path / "out",
                           Cleaning(max_length_ratio=1.5), min_pairs=2)
    assert report["kept"] == 2


def test_undecodable_bytes_name_the_member_and_the_line(tmp_path):
    folder = tmp_path / "dl"
    folder.mkdir()
    write_tgz_bytes(folder / file_name(_source()), {
        "training/europarl-v7.de-en.en": b"one\ntwo\n",
        "training/europarl-v7.de-en.de": b"eins\nzw\xe4i\n",  # Latin-1, not UTF-8
    })
    with pytest.raises(UndecodableTextError,
                       match=r"member training/europarl-v7\.de-en\.de line 2: not UTF-8 \(bytes "
                             r"e4\)"):
        prepare_split([_source()], "train", folder, tmp_path / "out", Cleaning())


def test_undecodable_bytes_in_sgm_name_the_line(tmp_path):
    source = _source("sgm", source_member="a.sgm", target_member="b.sgm")
    folder = tmp_path / "dl"
    folder.mkdir()
    write_tgz_bytes(folder / file_name(source), {
        "a.sgm": b'<doc>\n<seg id="1">ok</seg>\n</doc>\n',
        "b.sgm": b'<doc>\n<seg id="1">\xff</seg>\n</doc>\n',
    })
    with pytest.raises(UndecodableTextError, match=r"member b\.sgm line 2: not UTF-8"):
        prepare_split([source], "dev", folder, tmp_path / "out", Cleaning())


def test_only_newline_ends_a_sentence(tmp_path):
    # \r, form feed and U+2028 inside a sentence neither split it nor shift the pairs.
    _downloaded(tmp_path / "dl", {
        "training/europarl-v7.de-en.en": "a\rb\nc\fd\ne\u2028f\n",
        "training/europarl-v7.de-en.de": "x y\nz w\nu v\n",
    })
    report = prepare_split([_source()], "train", tmp_path / "dl", tmp_path / "out", Cleaning())
    assert report["sources"]["europarl"]["read"] == 3
    assert (tmp_path / "out/train.src").read_text() == "a b\nc d\ne f\n"


def test_the_length_ratio_is_longer_over_shorter_either_way_and_inclusive_at_the_limit(tmp_path):
    """``max_length_ratio`` compares the longer side with the shorter, whichever side that is:
    2 against 3 tokens is exactly 1.5 and stays, 5 against 8 (1.6) goes, source longer or
    target longer alike; a whitespace-only side is an empty side."""
    _downloaded(tmp_path / "dl", {
        "training/europarl-v7.de-en.en": "a b\na b c\na b c d e\na b c d e f g h\n \t \n",
        "training/europarl-v7.de-en.de": "x y z\nx y\nt u v w x y z q\nt u v w x\nx\n",
    })
    report = prepare_split([_source()], "train", tmp_path / "dl", tmp_path / "out",
                           Cleaning(max_tokens=250, max_length_ratio=1.5))
    assert report["sources"]["europarl"] == {
        "read": 5, "kept": 2, "dropped_length_ratio": 2, "dropped_empty": 1}
    assert (tmp_path / "out/train.src").read_text() == "a b\na b c\n"
    assert (tmp_path / "out/train.tgt").read_text() == "x y z\nx y\n"


def test_dev_and_test_keep_every_pair_that_cleaning_would_drop(tmp_path):
    """Dev and test are never filtered: an empty side, a side over ``max_tokens`` and a
    length ratio over the limit are all kept, in order, as (normalised) lines; a dropped
    reference would score a system on fewer sentences than the paper's test sets hold."""
    _downloaded(tmp_path / "dl", {
        "training/europarl-v7.de-en.en": "a b\n\na b c d e f\nk\n",
        "training/europarl-v7.de-en.de": "x y\nw\n  \nu v w\n",
    })
    for split in ("dev", "test"):
        report = prepare_split([_source()], split, tmp_path / "dl", tmp_path / split,
                               Cleaning(max_tokens=3, max_length_ratio=1.0))
        assert report["sources"]["europarl"] == {"read": 4, "kept": 4}, split
        assert (tmp_path / split / f"{split}.src").read_text() == "a b\n\na b c d e f\nk\n"
        assert (tmp_path / split / f"{split}.tgt").read_text() == "x y\nw\n\nu v w\n"


def test_empty_sgm_segments_of_a_test_set_are_kept_in_place(tmp_path):
    """An empty ``<seg>`` on either side of a newstest set is a pair like any other: kept, so
    that the source and reference lines stay aligned and the set keeps its size."""
    source = _source("sgm", source_member="test/src.sgm", target_member="test/ref.sgm")
    _downloaded(tmp_path / "dl", {"test/src.sgm": sgm("srcset", ["a b", "", "c"]),
                                  "test/ref.sgm": sgm("refset", ["x", "y z", " "])}, source)
    report = prepare_split([source], "test", tmp_path / "dl", tmp_path / "out", Cleaning())
    assert report["sources"]["europarl"] == {"read": 3, "kept": 3}
    assert (tmp_path / "out/test.src").read_text() == "a b\n\nc\n"
    assert (tmp_path / "out/test.tgt").read_text() == "x\ny z\n\n"


@pytest.mark.parametrize(("form", "expected"), [
    ("NFKC", "fine café 2 a b \u0308\n"),
    ("NFC", "ﬁne café ² a b \u00a8\n"),
    ("none", "ﬁne cafe\u0301 ² a b \u00a8\n"),
])
def test_each_unicode_form_is_applied_to_every_split_and_whitespace_is_collapsed_always(
        tmp_path, form, expected):
    """``unicode_normalization`` is the form each side is brought to: NFKC folds the ligature
    and the superscript, NFC only composes e + combining acute, ``none`` keeps the text's own;
    whitespace (a no-break space, U+2028, tabs, and the space NFKC makes of a diaeresis) is
    collapsed whatever the form, after normalising, and dev is normalised as train is."""
    line = "ﬁne caf\u0065\u0301 \u00b2\u00a0a\u2028\tb \u00a8\n"
    _downloaded(tmp_path / "dl", {"training/europarl-v7.de-en.en": line,
                                  "training/europarl-v7.de-en.de": line})
    for split in ("train", "dev"):
        prepare_split([_source()], split, tmp_path / "dl", tmp_path / "out",
                      Cleaning(unicode_normalization=form))
        assert (tmp_path / f"out/{split}.src").read_text() == expected
        assert (tmp_path / f"out/{split}.tgt").read_text() == expected


def test_sources_are_concatenated_in_order_and_counted_each_on_its_own(tmp_path):
    """A split of several sources holds their pairs in the declared order; the report counts
    each source apart (a source whose pairs were all dropped included) and ``kept`` is their
    sum."""
    first = _source()
    second = Source(name="commoncrawl", url="file:x/commoncrawl.tgz", format="text",
                    source_member="cc.en", target_member="cc.de")
    _downloaded(tmp_path / "dl", {"training/europarl-v7.de-en.en": "a b\nc\n",
                                  "training/europarl-v7.de-en.de": "x y\n\n"})
    _downloaded(tmp_path / "dl", {"cc.en": "d e\nf\ng h i\n", "cc.de": "u v\nw\nz\n"}, second)
    empty = Source(name="empty", url="file:x/empty.tgz", format="text",
                   source_member="e.en", target_member="e.de")
    _downloaded(tmp_path / "dl", {"e.en": "\n", "e.de": "n\n"}, empty)
    report = prepare_split([first, second, empty], "train", tmp_path / "dl", tmp_path / "out",
                           Cleaning(max_length_ratio=2.0))
    assert report["sources"] == {
        "europarl": {"read": 2, "kept": 1, "dropped_empty": 1},
        "commoncrawl": {"read": 3, "kept": 2, "dropped_length_ratio": 1},
        "empty": {"read": 1, "dropped_empty": 1},
    }
    assert report["kept"] == 3
    assert json.loads((tmp_path / "out/train.report.json").read_text()) == report
    assert (tmp_path / "out/train.src").read_text() == "a b\nd e\nf\n"
    assert (tmp_path / "out/train.tgt").read_text() == "x y\nu v\nw\n"


# --------------------------------------------------------------------------------------------
# Penn Treebank sources (format: ptb, section 6.3)
# --------------------------------------------------------------------------------------------
MRG_22_01 = """( (S 
    (NP-SBJ (DT The) (NN cat) )
    (VP (VBD sat) 
      (PP-LOC (IN on) 
        (NP (DT the) (NN mat) )))
    (. .) ))

( (S (NP-SBJ-1 (PRP It) ) (VP (VBD was) (VP (VBN seen) (NP (-NONE- *-1) ))) (. .) ))
"""  # noqa: W291 (the .mrg files' trailing spaces)
MRG_22_00 = "( (S (NP-SBJ (NNP Alice) ) (VP (VBD left) ) (. .) ))\n"


def _treebank_source(member="treebank_3/parsed/mrg/wsj/22/*.mrg"):
    return Source(name="wsj22", url="file:x/treebank.tgz", format="ptb", source_member=member)


def _treebank_download(tmp_path, members, source=None):
    return _downloaded(tmp_path / "dl", members, source or _treebank_source())


def test_ptb_sources_give_words_and_linearised_trees_file_by_file_in_sorted_order(tmp_path):
    downloads = _treebank_download(tmp_path, {  # written out of order; a subfolder not matched
        "treebank_3/parsed/mrg/wsj/22/wsj_2201.mrg": MRG_22_01,
        "treebank_3/parsed/mrg/wsj/22/wsj_2200.mrg": MRG_22_00,
        "treebank_3/parsed/mrg/wsj/22/old/wsj_2299.mrg": "( (S (NP (NN x)) (VP (VB y))) )\n",
        "treebank_3/parsed/mrg/wsj/23/wsj_2300.mrg": "( (S (NP (NN z)) (VP (VB w))) )\n",
    })
    report = prepare_split([_treebank_source()], "dev", downloads, tmp_path / "data", Cleaning())
    assert report["sources"]["wsj22"] == {"read": 3, "kept": 3}
    assert (tmp_path / "data/dev.src").read_text() == \
        "Alice left .\nThe cat sat on the mat .\nIt was seen .\n"
    assert (tmp_path / "data/dev.tgt").read_text() == (
        "(S (NP XX )NP (VP XX )VP XX )S\n"
        "(S (NP XX XX )NP (VP XX (PP XX (NP XX XX )NP )PP )VP XX )S\n"
        "(S (NP XX )NP (VP XX (VP XX )VP )VP XX )S\n"
    )


def test_ptb_sources_may_name_one_member_or_a_plain_tree_file(tmp_path):
    one = _treebank_source("wsj/wsj_2200.mrg")
    _treebank_download(tmp_path, {"wsj/wsj_2200.mrg": MRG_22_00}, one)
    prepare_split([one], "test", tmp_path / "dl", tmp_path / "one", Cleaning())
    assert (tmp_path / "one/test.src").read_text() == "Alice left .\n"
    plain = Source(name="lines", url="file:x/gold.txt", format="ptb")
    (tmp_path / "dl" / file_name(plain)).write_text(
        "(TOP (S (NP (PRP We)) (VP (VBD won)) (. !)))\n(S (NP (NNS Cats)) (VP (VBP purr)))\n")
    prepare_split([plain], "test", tmp_path / "dl", tmp_path / "plain", Cleaning())
    assert (tmp_path / "plain/test.src").read_text() == "We won !\nCats purr\n"


def test_a_ptb_glob_matching_no_member_is_an_error_naming_it(tmp_path):
    downloads = _treebank_download(tmp_path,
                                   {"treebank_3/parsed/mrg/wsj/23/wsj_2300.mrg": MRG_22_00})
    with pytest.raises(FileNotFoundError,
                       match=r"no member matches "
                             r"'treebank_3/parsed/mrg/wsj/22/\*\.mrg'.*wsj_2300\.mrg"):
        prepare_split([_treebank_source()], "dev", downloads, tmp_path / "out", Cleaning())


def test_a_malformed_tree_names_the_member_tree_and_line(tmp_path):
    broken = MRG_22_01.replace("(NN mat) )))", "(NN mat) ))")  # the first tree never closes
    downloads = _treebank_download(tmp_path, {"treebank_3/parsed/mrg/wsj/22/wsj_2201.mrg": broken})
    with pytest.raises(TreeError,
                       match=r"member treebank_3/parsed/mrg/wsj/22/wsj_2201\.mrg tree 1 \(from "
                             r"line 1\): unbalanced"):
        prepare_split([_treebank_source()], "dev", downloads, tmp_path / "out", Cleaning())


def test_a_tree_without_words_names_the_member_and_its_tree_number_from_1(tmp_path):
    """A tree that cleaning empties (only empty elements) is named by its member and its number
    in the file, counted from 1 as the parse errors above count them."""
    empty = "( (S (NP-SBJ (-NONE- *) ) (VP (-NONE- *T*-1) ) ))\n"
    downloads = _treebank_download(tmp_path, {
        "treebank_3/parsed/mrg/wsj/22/wsj_2200.mrg": MRG_22_00 + empty})
    with pytest.raises(TreeError, match=r"member treebank_3/parsed/mrg/wsj/22/wsj_2200\.mrg "
                                        r"tree 2: tree .* holds no words"):
        prepare_split([_treebank_source()], "dev", downloads, tmp_path / "out", Cleaning())


def test_each_tree_file_is_removed_from_scratch_once_read(tmp_path):
    """A section is read one extracted member at a time: WSJ's thousands of files never sit in
    the scratch folder all at once."""
    downloads = _treebank_download(tmp_path, {
        "treebank_3/parsed/mrg/wsj/22/wsj_2200.mrg": MRG_22_00,
        "treebank_3/parsed/mrg/wsj/22/wsj_2201.mrg": MRG_22_01})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    trees = read_source_trees(_treebank_source(), downloads / file_name(_treebank_source()),
                              scratch)
    assert [leaves(tree) for tree in trees] == [
        ["Alice", "left", "."], ["The", "cat", "sat", "on", "the", "mat", "."],
        ["It", "was", "seen", "."]]
    assert list(scratch.iterdir()) == []


def test_a_ptb_source_takes_no_target_member():
    with pytest.raises(ValueError,
                       match="a ptb source holds both sides in source_member; drop target_member"):
        Source(name="wsj", url="file:x.tgz", format="ptb", source_member="a.mrg", target_member="b")


def test_sgm_sides_of_different_length_are_an_error_naming_the_source(tmp_path):
    """Two SGM files of different segment counts cannot be paired: the error names the source
    and both counts, before anything is written (not zip's bare 'argument 2 is shorter')."""
    source = _source("sgm", source_member="dev/src.sgm", target_member="dev/ref.sgm")
    _downloaded(tmp_path / "dl", {"dev/src.sgm": sgm("srcset", ["a", "b", "c"]),
                                  "dev/ref.sgm": sgm("refset", ["x", "y"])}, source)
    with pytest.raises(DataError, match=r"'europarl': dev/src\.sgm has 3 sentences but "
                                        r"dev/ref\.sgm has 2"):
        prepare_split([source], "dev", tmp_path / "dl", tmp_path / "out", Cleaning())
    assert not (tmp_path / "out/dev.src").exists()


def test_a_file_without_segments_is_not_an_sgm_file(tmp_path):
    """A plain text file declared as ``sgm`` would give an empty split; it is refused naming
    the file instead."""
    (tmp_path / "dev.sgm").write_text("Just a sentence .\nAnother one .\n")
    with pytest.raises(DataError, match=r"dev\.sgm: no <seg> elements found; is it an SGM file"):
        read_sgm(tmp_path / "dev.sgm")
