"""The embedded tiny corpus: a generated parallel corpus with structure worth attending to.

The source language is English-like (subject - verb - object, adjectives before nouns). The target
language moves the verb to the end and the adverb after the subject, puts adjectives after their
noun, and makes determiners, adjectives and verbs agree with the noun's gender and number. Some
nouns are hyphenated compounds, so that the paper's compound-split BLEU has something to split.
Target words are pseudo-words derived from the source lexicon by a seeded generator.

The corpus ships as ``configs/data/tiny_corpus.tgz`` in WMT's layout (training text, SGM dev and
test sets) and is rebuilt byte for byte by ``python -m reproduce make-tiny-corpus --out OUT``.
"""

from __future__ import annotations

import html
import random
from dataclasses import dataclass
from pathlib import Path

from reproduce.data.archives import write_reproducible_tgz

NOUNS = (
    "dog cat bird horse farmer teacher child doctor king queen river mountain city village house "
    "garden tree flower book letter song story ship train road bridge market window door table "
    "chair apple bread cheese friend neighbour student painter singer baker soldier sailor "
    "tea-cup sun-hat rail-road fire-truck"
).split()
ADJECTIVES = (
    "big small old young red green blue happy sad quiet loud fast slow tall short bright dark "
    "kind brave clever"
).split()
VERBS = (
    "see like find help follow call visit watch paint carry build open love push pull want"
).split()
PREPOSITIONS = "near behind under above beside with without".split()
ADVERBS = "today often slowly quickly again never always".split()

_TARGET_DETERMINERS = {  # (definite, gender, plural) -> target word
    (True, "m", False): "lo", (True, "f", False): "la", (True, "n", False): "lu",
    (True, "m", True): "li", (True, "f", True): "le", (True, "n", True): "lia",
    (False, "m", False): "un", (False, "f", False): "una", (False, "n", False): "unu",
    (False, "m", True): "alcuni", (False, "f", True): "alcune", (False, "n", True): "alcunia",
}
_ADJECTIVE_ENDINGS = {("m", False): "o", ("f", False): "a", ("n", False): "u",
                      ("m", True): "i", ("f", True): "e", ("n", True): "ia"}
_VERB_ENDINGS = {(False, False): "at", (False, True): "ant", (True, False): "avat", (True, True): "avant"}
_SYLLABLES = "ba be bi bo bu ka ke ki ko ku da de di do du ma me mi mo mu na ne ni no nu " \
             "ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo vu za ze zi zo zu".split()


@dataclass(frozen=True)
class Lexicon:
    nouns: dict[str, tuple[str, str]]  # source noun -> (target stem, gender)
    adjectives: dict[str, str]
    verbs: dict[str, str]
    prepositions: dict[str, str]
    adverbs: dict[str, str]


def _pseudo_word(rng: random.Random, used: set[str], syllables: int) -> str:
    while True:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(syllables))
        if word not in used:
            used.add(word)
            return word


def build_lexicon(seed: int) -> Lexicon:
    rng = random.Random(seed)
    used: set[str] = set()

    def translate(word: str, syllables: int) -> str:
        return "-".join(_pseudo_word(rng, used, syllables) for _ in word.split("-"))

    return Lexicon(
        nouns={noun: (translate(noun, 2), rng.choice("mfn")) for noun in NOUNS},
        adjectives={adjective: translate(adjective, 2) for adjective in ADJECTIVES},
        verbs={verb: translate(verb, 2) for verb in VERBS},
        prepositions={word: translate(word, 1) + "r" for word in PREPOSITIONS},
        adverbs={word: translate(word, 3) for word in ADVERBS},
    )


def _english_plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    if noun == "child":
        return "children"
    return noun + "s"


_IRREGULAR_PAST = {"see": "saw", "find": "found", "build": "built", "carry": "carried"}


def _english_verb(verb: str, past: bool, plural: bool) -> str:
    if past:
        return _IRREGULAR_PAST.get(verb) or verb + ("d" if verb.endswith("e") else "ed")
    if plural:
        return verb
    return verb + ("es" if verb.endswith(("sh", "ch", "x", "s")) else "s")


def _noun_phrase(rng: random.Random, lexicon: Lexicon) -> tuple[list[str], list[str], bool]:
    noun = rng.choice(NOUNS)
    plural = rng.random() < 0.4
    definite = rng.random() < 0.6
    adjectives = rng.sample(ADJECTIVES, rng.choice((0, 0, 1, 1, 2)))
    stem, gender = lexicon.nouns[noun]
    source = ["the" if definite else ("some" if plural else "a"), *adjectives,
              _english_plural(noun) if plural else noun]
    ending = _ADJECTIVE_ENDINGS[(gender, plural)]
    target = [_TARGET_DETERMINERS[(definite, gender, plural)],
              stem + ("s" if plural else ""),
              *(lexicon.adjectives[adjective] + ending for adjective in adjectives)]
    return source, target, plural


def generate_pair(rng: random.Random, lexicon: Lexicon) -> tuple[str, str]:
    subject_src, subject_tgt, subject_plural = _noun_phrase(rng, lexicon)
    object_src, object_tgt, _ = _noun_phrase(rng, lexicon)
    verb = rng.choice(VERBS)
    past = rng.random() < 0.5
    source = [*subject_src, _english_verb(verb, past, subject_plural), *object_src]
    verb_tgt = lexicon.verbs[verb] + _VERB_ENDINGS[(past, subject_plural)]
    adverb_tgt, phrase_tgt = [], []
    if rng.random() < 0.5:
        preposition = rng.choice(PREPOSITIONS)
        phrase_src, phrase_np_tgt, _ = _noun_phrase(rng, lexicon)
        source += [preposition, *phrase_src]
        phrase_tgt = [lexicon.prepositions[preposition], *phrase_np_tgt]
    if rng.random() < 0.4:
        adverb = rng.choice(ADVERBS)
        source.append(adverb)
        adverb_tgt = [lexicon.adverbs[adverb]]
    # Target order: subject, adverb, object, prepositional phrase, verb last.
    target = [*subject_tgt, *adverb_tgt, *object_tgt, *phrase_tgt, verb_tgt]
    return " ".join(source) + " .", " ".join(target) + " ."


def generate_corpus(
    train_pairs: int, dev_pairs: int, test_pairs: int, seed: int
) -> dict[str, list[tuple[str, str]]]:
    """Distinct pairs for train, dev and test (no dev or test source sentence occurs in train)."""
    lexicon = build_lexicon(seed)
    rng = random.Random(seed + 1)
    seen: set[str] = set()
    splits: dict[str, list[tuple[str, str]]] = {}
    for split, count in (("dev", dev_pairs), ("test", test_pairs), ("train", train_pairs)):
        pairs = []
        while len(pairs) < count:
            pair = generate_pair(rng, lexicon)
            if pair[0] not in seen:
                seen.add(pair[0])
                pairs.append(pair)
        splits[split] = pairs
    return splits


def _sgm(pairs: list[tuple[str, str]], side: int, kind: str, language: str, set_id: str) -> str:
    lines = [f'<{kind} setid="{set_id}" srclang="src" trglang="tgt">']
    for document_start in range(0, len(pairs), 50):
        lines.append(f'<doc sysid="ref" docid="doc{document_start // 50 + 1}" genre="news" origlang="{language}">')
        for number, pair in enumerate(pairs[document_start : document_start + 50], start=1):
            lines.append(f'<seg id="{number}">{html.escape(pair[side])}</seg>')
        lines.append("</doc>")
    lines.append(f"</{kind}>")
    return "\n".join(lines) + "\n"


def archive_members(splits: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    """Member path -> text, in the statmt layout the tiny experiment file declares."""
    train = splits["train"]
    return {
        "training/tiny.src-tgt.src": "".join(source + "\n" for source, _ in train),
        "training/tiny.src-tgt.tgt": "".join(target + "\n" for _, target in train),
        "dev/newstest-tiny-src.src.sgm": _sgm(splits["dev"], 0, "srcset", "src", "newstest-tiny"),
        "dev/newstest-tiny-ref.tgt.sgm": _sgm(splits["dev"], 1, "refset", "src", "newstest-tiny"),
        "test/newstest-tiny-src.src.sgm": _sgm(splits["test"], 0, "srcset", "src", "newstest-tiny-test"),
        "test/newstest-tiny-ref.tgt.sgm": _sgm(splits["test"], 1, "refset", "src", "newstest-tiny-test"),
    }


def write_tiny_corpus_archive(
    path: Path, train_pairs: int = 20_000, dev_pairs: int = 300, test_pairs: int = 300, seed: int = 2017
) -> Path:
    """A byte-reproducible .tgz (:func:`reproduce.data.archives.write_reproducible_tgz`)."""
    return write_reproducible_tgz(path, archive_members(generate_corpus(train_pairs, dev_pairs, test_pairs, seed)))
