"""The embedded tiny corpus: reproducible byte for byte, and with structure to learn."""

import hashlib
from pathlib import Path

from reproduce.config import load_experiment
from reproduce.data.tiny_corpus import (
    _TARGET_DETERMINERS, build_lexicon, generate_corpus, write_tiny_corpus_archive,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_archive_is_regenerated_byte_for_byte(tmp_path):
    rebuilt = write_tiny_corpus_archive(tmp_path / "tiny_corpus.tgz")
    digest = hashlib.sha256(rebuilt.read_bytes()).hexdigest()
    assert rebuilt.read_bytes() == (ROOT / "configs/data/tiny_corpus.tgz").read_bytes()
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    assert {source.sha256 for source in experiment.data.train + experiment.data.dev} == {digest}


def test_dev_and_test_sentences_never_occur_in_training():
    splits = generate_corpus(3000, 200, 200, seed=3)
    train = {source for source, _ in splits["train"]}
    assert not train & {source for source, _ in splits["dev"]}
    assert not train & {source for source, _ in splits["test"]}


def test_the_verb_moves_to_the_end_and_determiners_agree_with_the_noun():
    lexicon = build_lexicon(2017)
    verb_forms = {stem + ending for stem in lexicon.verbs.values()
                  for ending in ("at", "ant", "avat", "avant")}
    determiners = set(_TARGET_DETERMINERS.values())
    for source, target in generate_corpus(300, 0, 0, seed=2017)["train"]:
        words = target.split()
        assert words[-2] in verb_forms  # verb last, before the full stop
        assert words[0] in determiners
        plural_subject = source.split()[0] == "some" or words[-2].endswith(("ant", "avant"))
        singular_determiner = words[0] in {"lo", "la", "lu", "un", "una", "unu"}
        assert plural_subject != singular_determiner
