"""The embedded tiny corpus: reproducible byte for byte, with structure to learn and the
difficulties of real translation (ambiguity, long-distance agreement, rare words, noise)."""

import hashlib
from collections import Counter
from pathlib import Path

from reproduce.data import tiny_corpus
from reproduce.experiment_file import load_experiment
from reproduce.data.tiny_corpus import (
    _TARGET_DETERMINERS, AMBIGUOUS_NOUNS, _english_plural, NATURE_CUES, TOWN_CUES, build_lexicon,
    generate_corpus, write_tiny_corpus_archive,
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


def test_the_verb_moves_to_the_end_and_agrees_with_the_subject_across_embedded_clauses():
    lexicon = build_lexicon(2017)
    verb_forms = {stem + ending for stem in [*lexicon.verbs.values(),
                                             *lexicon.clause_verbs.values()]
                  for ending in ("at", "ant", "avat", "avant")}
    determiners = set(_TARGET_DETERMINERS.values())
    embedded = 0
    for source, target in generate_corpus(0, 300, 0, seed=2017)["dev"]:  # clean pairs
        words = target.split()
        assert words[-2] in verb_forms  # the main verb last, before the full stop
        assert words[0] in determiners
        plural_subject = source.split()[0] == "some" or words[-2].endswith(("ant", "avant"))
        singular_determiner = words[0] in {"lo", "la", "lu", "un", "una", "unu"}
        assert plural_subject != singular_determiner
        embedded += " that " in source
    assert embedded > 100  # relative and complement clauses between subject and main verb


def test_an_ambiguous_noun_is_translated_by_the_sense_its_context_cue_gives():
    lexicon = build_lexicon(2017)
    senses = {stem: (noun, town) for noun, pair in lexicon.ambiguous.items()
              for town, (stem, _) in enumerate(pair)}
    seen = set()
    for source, target in generate_corpus(0, 1000, 0, seed=2017)["dev"]:
        words = source.split()
        nature, town = ({cue for cue in cues if cue in words or _english_plural(cue) in words}
                        for cues in (NATURE_CUES, TOWN_CUES))
        for word in target.split():
            stem = word[:-1] if word[:-1] in senses else word
            if stem in senses:
                noun, sense_is_town = senses[stem]
                assert noun in words or noun + "s" in words
                assert len(nature | town) == 1 and bool(town) == bool(sense_is_town), source
                seen.add((noun, sense_is_town))
    assert seen == {(noun, town) for noun in AMBIGUOUS_NOUNS for town in (0, 1)}


def test_a_long_tail_of_rare_words_is_seen_only_a_few_times_in_training():
    lexicon = build_lexicon(2017)
    counts = Counter(word for source, _ in generate_corpus(20_000, 0, 0, seed=2017)["train"]
                     for word in source.split())
    seen = [counts[noun] + counts[noun + "s"] for noun in lexicon.rare_nouns]
    assert sum(1 <= count <= 5 for count in seen) > len(seen) / 2
    assert seen[0] > 100 and 0 in seen  # the head of the tail is common, its end unseen


def test_only_a_few_percent_of_training_pairs_are_noisy_and_dev_and_test_are_clean():
    noisy, clean = (generate_corpus(3000, 200, 200, seed=3, noise=noise) for noise in (True, False))
    assert noisy["dev"] == clean["dev"] and noisy["test"] == clean["test"]
    changed = [(a, b) for a, b in zip(noisy["train"], clean["train"], strict=True) if a != b]
    assert all(a[0] == b[0] for a, b in changed)  # the source side is kept, the target spoiled
    assert 0.02 * 3000 <= len(changed) <= 0.06 * 3000


def test_a_sentence_drawn_again_is_skipped_so_every_source_is_distinct(monkeypatch):
    """Redrawing a sentence is rare with the real grammar, so it is forced here: with only 12
    possible sentences, 6 train, 3 dev and 3 test pairs must be the 12, each once (no dev or
    test sentence in train, none twice in a split)."""
    def few_sentences(rng, lexicon):
        number = rng.randrange(12)
        return f"s{number} .", f"t{number} ."

    monkeypatch.setattr(tiny_corpus, "generate_pair", few_sentences)
    splits = generate_corpus(6, 3, 3, seed=1, noise=False)
    sources = [source for split in ("train", "dev", "test") for source, _ in splits[split]]
    assert sorted(sources) == sorted(f"s{number} ." for number in range(12))
    assert [len(splits[split]) for split in ("train", "dev", "test")] == [6, 3, 3]
