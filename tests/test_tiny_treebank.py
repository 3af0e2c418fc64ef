"""The embedded tiny treebank: reproducible byte for byte, in Treebank-3's layout, and holding
what the WSJ preprocessing and EVALB have to deal with."""

import tarfile
from collections import Counter
from pathlib import Path

from reproduce.config import Cleaning, Source
from reproduce.data.download import file_name
from reproduce.data.prepare import prepare_split
from reproduce.data.tiny_treebank import (SECTIONS, archive_members, generate_treebank,
                                          write_tiny_treebank_archive)
from reproduce.parsing.trees import clean_tree, format_tree, leaves, read_trees

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "configs/data/tiny_treebank.tgz"


def test_the_shipped_archive_is_regenerated_byte_for_byte(tmp_path):
    rebuilt = write_tiny_treebank_archive(tmp_path / "tiny_treebank.tgz")
    assert rebuilt.read_bytes() == SHIPPED.read_bytes()


def test_dev_and_test_sentences_never_occur_in_training():
    splits = generate_treebank(1000, 100, 100, seed=3)
    sentences = {split: {" ".join(leaves(clean_tree(tree))) for tree in trees}
                 for split, trees in splits.items()}
    assert len(sentences["train"]) == 1000  # distinct within a split too
    assert not sentences["train"] & sentences["dev"]
    assert not sentences["train"] & sentences["test"]


def test_sections_02_to_21_train_22_dev_23_test():
    with tarfile.open(SHIPPED) as archive:
        files = [name for name in archive.getnames() if name.endswith(".mrg")]
        counts = Counter()
        for name in files:
            text = archive.extractfile(name).read().decode("utf-8")
            counts[name.split("/")[-2]] += len(read_trees(text, name))
    assert sorted(counts) == [f"{section:02d}" for section in range(2, 24)]
    assert sum(counts[f"{section:02d}"] for section in range(2, 22)) == 3000
    assert (counts["22"], counts["23"]) == (300, 300)


def test_trees_exercise_the_preprocessing_and_the_labels_of_the_wsj():
    raw = generate_treebank(3000, 0, 0, seed=2017)["train"]
    raw_text = "\n".join(format_tree(tree) for tree in raw)
    for needle in ("( (S", "(-NONE- *T*-", "(-NONE- 0)", "(NP-SBJ ", "(WHNP-", "(, ,)", "(. .)"):
        assert needle in raw_text, needle
    cleaned = [clean_tree(tree) for tree in raw]
    lengths = [len(leaves(tree)) for tree in cleaned]
    assert min(lengths) >= 5 and max(lengths) <= 25
    labels = Counter(label for tree in cleaned for label in _phrase_labels(tree))
    assert {"S", "SBAR", "NP", "VP", "PP", "ADJP", "ADVP", "PRT", "WHNP"} <= set(labels)
    assert not [label for label in labels if "-" in label or "=" in label]
    # Unary chains left by empty elements: a null complementizer's SBAR -> S, and a relative
    # clause's S -> VP once its subject trace is gone.
    assert any("(SBAR (S " in format_tree(tree) for tree in cleaned)
    assert any("(SBAR (WHNP (WDT that)) (S (VP " in format_tree(tree) for tree in cleaned)


def _phrase_labels(tree):
    if tree.is_preterminal:
        return []
    return [tree.label, *(label for child in tree.children for label in _phrase_labels(child))]


def test_the_archive_prepares_through_ptb_sources(tmp_path):
    """The tiny archive read as an experiment reads it: section globs, cleaned pairs."""
    test = Source(name="wsj23", url="file:configs/data/tiny_treebank.tgz", format="ptb",
                  source_member="tiny_treebank/parsed/mrg/wsj/23/*.mrg")
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / file_name(test)).write_bytes(SHIPPED.read_bytes())
    report = prepare_split([test], "test", tmp_path / "dl", tmp_path / "data", Cleaning())
    assert report["kept"] == 300
    sources = (tmp_path / "data/test.src").read_text().splitlines()
    targets = (tmp_path / "data/test.tgt").read_text().splitlines()
    expected = [clean_tree(tree) for tree in generate_treebank(3000, 300, 300, seed=2017)["test"]]
    assert sources == [" ".join(leaves(tree)) for tree in expected]
    assert all(target.startswith("(S ") and target.endswith(" )S") for target in targets)


def test_every_tree_lands_in_its_splits_sections_whatever_the_counts():
    """Counts that do not divide evenly over the sections (45 train trees over 20 sections, 51
    dev trees, more than a file's 50, and a single test tree) still put every tree, in order,
    into a file of its split's sections, none of more than 50 trees."""
    splits = generate_treebank(45, 51, 1, seed=5)
    members = archive_members(splits)
    by_split = {split: [] for split in SECTIONS}
    for name in sorted(members):
        section = name.split("/")[-2]
        split = next(split for split, sections in SECTIONS.items() if section in sections)
        trees = read_trees(members[name], name)
        assert 1 <= len(trees) <= 50, name
        by_split[split] += [format_tree(tree) for tree in trees]
    assert by_split == {split: [format_tree(tree) for tree in trees]
                        for split, trees in splits.items()}
