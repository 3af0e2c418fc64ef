"""The embedded tiny corpus: a generated parallel corpus, hard in the ways translation is hard.

A corpus a tiny model translates perfectly ranks nothing: every variant scores ~100 BLEU and
Table 3's differences are noise. The difficulty here comes from what the sentences contain, not
from how many there are.

The source language is English-like (subject - verb - object, adjectives before nouns). The
target language

* moves every verb to the end of its clause, and the sentence adverb after the main subject;
* puts adjectives after their noun and makes determiners, adjectives and verbs agree with the
  noun's gender and number;
* resolves **ambiguous words by context**: a few source nouns (``bank``, ``bat``, ``crane`` ...)
  have two translations, of different genders, one for a nature sense and one for a town sense.
  Which one is meant is given only by another noun of the sentence, a cue from the nature
  (``river``, ``forest`` ...) or town (``market``, ``school`` ...) domain, anywhere in the
  sentence, often several words and a clause away;
* makes **agreement and reordering span long distances**: a subject may carry a relative clause
  (``the dogs that the farmer saw ...``), whose verb goes to the end of the relative clause and
  whose pronoun marks the head's gender and whether the head is the clause's subject or object,
  while the main verb, at the very end, agrees with the head noun and not with the nearer noun
  of the relative clause; a sentence may embed a complement clause (``the king says that ...``),
  whose verb-final clause sits between the main subject and the main verb;
* has a **long tail of rare words**: besides the common lexicon, a thousand rare nouns and three
  hundred rare adjectives (``-y``, ``-ish``, ``-ful``, ``-ous``, ``-ic``) drawn with Zipfian
  frequency, so that most are seen only a few times in training and some never, and their
  pseudo-word translations must be learned from those few pairs;
* has **noisy training pairs**: a few percent of the training pairs are misaligned (another
  sentence's target) or partial (the target cut short), as crawled parallel data is; the dev
  and test sets stay clean.

Some nouns are hyphenated compounds, so that the paper's compound-split BLEU has something to
split. Target words are pseudo-words derived from the source lexicon by a seeded generator.

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
    "forest lake meadow island school office station factory "
    "tea-cup sun-hat rail-road fire-truck"
).split()
# Context cues for the ambiguous nouns: a sentence holding an ambiguous noun holds exactly one
# of these, which decides the sense.
NATURE_CUES = "river mountain tree flower forest lake meadow island".split()
TOWN_CUES = "market city school office station factory king teacher".split()
# Source nouns with two translations: (nature sense, town sense).
AMBIGUOUS_NOUNS = "bank bat crane seal club plant spring trunk".split()
ADJECTIVES = (
    "big small old young red green blue happy sad quiet loud fast slow tall short bright dark "
    "kind brave clever"
).split()
VERBS = (
    "see like find help follow call visit watch paint carry build open love push pull want"
).split()
# Verbs that take a complement clause (``... says that ...``).
CLAUSE_VERBS = "say think know hear believe".split()
PREPOSITIONS = "near behind under above beside with without".split()
ADVERBS = "today often slowly quickly again never always".split()
RARE_NOUNS = 1000
RARE_ADJECTIVES = 300

_TARGET_DETERMINERS = {  # (definite, gender, plural) -> target word
    (True, "m", False): "lo", (True, "f", False): "la", (True, "n", False): "lu",
    (True, "m", True): "li", (True, "f", True): "le", (True, "n", True): "lia",
    (False, "m", False): "un", (False, "f", False): "una", (False, "n", False): "unu",
    (False, "m", True): "alcuni", (False, "f", True): "alcune", (False, "n", True): "alcunia",
}
_ADJECTIVE_ENDINGS = {("m", False): "o", ("f", False): "a", ("n", False): "u",
                      ("m", True): "i", ("f", True): "e", ("n", True): "ia"}
_VERB_ENDINGS = {(False, False): "at", (False, True): "ant", (True, False): "avat",
                 (True, True): "avant"}
# Relative pronouns by (the head is the clause's subject, the head's gender).
_RELATIVE_PRONOUNS = {(True, "m"): "ko", (True, "f"): "ka", (True, "n"): "ku",
                      (False, "m"): "kon", (False, "f"): "kan", (False, "n"): "kun"}
_COMPLEMENTIZER = "di"
_SYLLABLES = "ba be bi bo bu ka ke ki ko ku da de di do du ma me mi mo mu na ne ni no nu " \
             "ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo vu za ze zi zo zu".split()
# English-looking syllables for the rare nouns' source side.
_ONSETS = ("b bl br c cl cr d dr f fl fr g gl gr h j l m n p pl pr s sc sh sl sn sp st t th tr v "
           "w").split()
_NUCLEI = "a e i o u ea oo ai".split()
_CODAS = ["", "n", "m", "t", "d", "ck", "ll", "ng", "sk", "rt", "mp", "nd"]

# How often each structure occurs (per sentence, or per noun slot).
_P_COMPLEMENT = 0.3
_P_RELATIVE = 0.35
_P_PREPOSITIONAL = 0.5
_P_ADVERB = 0.4
_P_AMBIGUOUS = 0.35
_P_RARE_NOUN = 0.25
_P_RARE_ADJECTIVE = 0.2
_NOISY_FRACTION = 0.04


@dataclass(frozen=True)
class Lexicon:
    nouns: dict[str, tuple[str, str]]  # source noun -> (target stem, gender)
    adjectives: dict[str, str]
    verbs: dict[str, str]
    clause_verbs: dict[str, str]
    prepositions: dict[str, str]
    adverbs: dict[str, str]
    ambiguous: dict[str, tuple[tuple[str, str], tuple[str, str]]]  # -> (nature, town) senses
    rare_nouns: tuple[str, ...]  # most frequent first (Zipfian ranks), all in ``nouns``
    rare_adjectives: tuple[str, ...]  # likewise, all in ``adjectives``


def _pseudo_word(rng: random.Random, used: set[str], syllables: int) -> str:
    while True:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(syllables))
        if word not in used:
            used.add(word)
            return word


def _english_like_word(rng: random.Random, used: set[str]) -> str:
    while True:
        word = "".join(rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
                       for _ in range(2))
        if word not in used and not word.endswith("s"):  # no plural look-alikes
            used.add(word)
            return word


def build_lexicon(seed: int) -> Lexicon:
    rng = random.Random(seed)
    used: set[str] = set()

    def translate(word: str, syllables: int) -> str:
        return "-".join(_pseudo_word(rng, used, syllables) for _ in word.split("-"))

    nouns = {noun: (translate(noun, 2), rng.choice("mfn")) for noun in NOUNS}
    adjectives = {adjective: translate(adjective, 2) for adjective in ADJECTIVES}
    verbs = {verb: translate(verb, 2) for verb in VERBS}
    prepositions = {word: translate(word, 1) + "r" for word in PREPOSITIONS}
    adverbs = {word: translate(word, 3) for word in ADVERBS}
    clause_verbs = {verb: translate(verb, 3) for verb in CLAUSE_VERBS}
    ambiguous = {noun: ((translate(noun, 2), "m"), (translate(noun, 2), "f"))
                 for noun in AMBIGUOUS_NOUNS}
    source_words = set(NOUNS) | set(AMBIGUOUS_NOUNS) | set(ADJECTIVES) | set(VERBS) \
        | set(CLAUSE_VERBS) | set(PREPOSITIONS) | set(ADVERBS)
    rare = []
    for _ in range(RARE_NOUNS):
        word = _english_like_word(rng, source_words)
        rare.append(word)
        nouns[word] = (_pseudo_word(rng, used, rng.choice((2, 3))), rng.choice("mfn"))
    rare_adjectives = []
    for _ in range(RARE_ADJECTIVES):
        word = (_english_like_word(rng, source_words)[:-1]
                + rng.choice(("y", "ish", "ful", "ous", "ic")))
        if word in source_words:
            continue
        source_words.add(word)
        rare_adjectives.append(word)
        adjectives[word] = _pseudo_word(rng, used, rng.choice((2, 3)))
    return Lexicon(nouns=nouns, adjectives=adjectives, verbs=verbs, clause_verbs=clause_verbs,
                   prepositions=prepositions, adverbs=adverbs, ambiguous=ambiguous,
                   rare_nouns=tuple(rare), rare_adjectives=tuple(rare_adjectives))


def _english_plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    if noun == "child":
        return "children"
    return noun + "s"


_IRREGULAR_PAST = {"see": "saw", "find": "found", "build": "built", "carry": "carried",
                   "say": "said", "think": "thought", "know": "knew", "hear": "heard"}


def _english_verb(verb: str, past: bool, plural: bool) -> str:
    if past:
        return _IRREGULAR_PAST.get(verb) or verb + ("d" if verb.endswith("e") else "ed")
    if plural:
        return verb
    return verb + ("es" if verb.endswith(("sh", "ch", "x", "s")) else "s")


def _zipfian(rng: random.Random, words: tuple[str, ...]) -> str:
    """A word of rank r (1 = the first) with probability about 1 / r, as a word's frequency
    falls with its rank in natural text."""
    return words[int(len(words) ** rng.random()) - 1]


def _adjectives(rng: random.Random, lexicon: Lexicon) -> list[str]:
    """Zero to two distinct adjectives, each a rare one with probability ``_P_RARE_ADJECTIVE``."""
    chosen: list[str] = []
    for _ in range(rng.choice((0, 0, 1, 1, 2))):
        while True:
            adjective = (_zipfian(rng, lexicon.rare_adjectives) if rng.random() < _P_RARE_ADJECTIVE
                         else rng.choice(ADJECTIVES))
            if adjective not in chosen:
                chosen.append(adjective)
                break
    return chosen


@dataclass(frozen=True)
class _Noun:
    source: str
    stem: str
    gender: str


class _NounSlots:
    """Chooses the nouns of one sentence's ``count`` noun slots.

    With probability ``_P_AMBIGUOUS`` one slot holds an ambiguous noun and another, chosen at
    random, the one domain cue of the sentence, which picks the sense; the other slots then hold
    no cue, so that the sense is always decidable from the sentence and never contradicted.
    """

    def __init__(self, rng: random.Random, lexicon: Lexicon, count: int):
        cues = set(NATURE_CUES) | set(TOWN_CUES)
        self._nouns: list[_Noun] = []
        ambiguous_slot = cue_slot = None
        if count >= 2 and rng.random() < _P_AMBIGUOUS:
            ambiguous_slot, cue_slot = rng.sample(range(count), 2)
        town = rng.random() < 0.5
        for slot in range(count):
            if slot == ambiguous_slot:
                noun = rng.choice(AMBIGUOUS_NOUNS)
                stem, gender = lexicon.ambiguous[noun][town]
                self._nouns.append(_Noun(noun, stem, gender))
                continue
            if slot == cue_slot:
                noun = rng.choice(TOWN_CUES if town else NATURE_CUES)
            else:
                noun = self._common_or_rare(rng, lexicon,
                                            cues if ambiguous_slot is not None else set())
            self._nouns.append(_Noun(noun, *lexicon.nouns[noun]))
        self._next = iter(self._nouns)

    @staticmethod
    def _common_or_rare(rng: random.Random, lexicon: Lexicon, excluded: set[str]) -> str:
        if rng.random() < _P_RARE_NOUN:
            return _zipfian(rng, lexicon.rare_nouns)
        return rng.choice([noun for noun in NOUNS if noun not in excluded])

    def take(self) -> _Noun:
        return next(self._next)


def _noun_phrase(rng: random.Random, lexicon: Lexicon,
                 noun: _Noun) -> tuple[list[str], list[str], bool]:
    plural = rng.random() < 0.4
    definite = rng.random() < 0.6
    adjectives = _adjectives(rng, lexicon)
    source = ["the" if definite else ("some" if plural else "a"), *adjectives,
              _english_plural(noun.source) if plural else noun.source]
    ending = _ADJECTIVE_ENDINGS[(noun.gender, plural)]
    target = [_TARGET_DETERMINERS[(definite, noun.gender, plural)],
              noun.stem + ("s" if plural else ""),
              *(lexicon.adjectives[adjective] + ending for adjective in adjectives)]
    return source, target, plural


def _subject(rng: random.Random, lexicon: Lexicon, slots: _NounSlots,
             relative: bool) -> tuple[list[str], list[str], bool]:
    """A subject noun phrase, optionally with a relative clause whose verb goes last in the
    target and whose pronoun marks the head's gender and role."""
    head = slots.take()
    source, target, plural = _noun_phrase(rng, lexicon, head)
    if not relative:
        return source, target, plural
    inner_src, inner_tgt, inner_plural = _noun_phrase(rng, lexicon, slots.take())
    verb, past = rng.choice(VERBS), rng.random() < 0.5
    head_is_subject = rng.random() < 0.5
    agreeing = plural if head_is_subject else inner_plural
    verb_src = _english_verb(verb, past, agreeing)
    verb_tgt = lexicon.verbs[verb] + _VERB_ENDINGS[(past, agreeing)]
    if head_is_subject:  # the dogs that see the cat
        source += ["that", verb_src, *inner_src]
    else:  # the dogs that the cat sees
        source += ["that", *inner_src, verb_src]
    target += [_RELATIVE_PRONOUNS[(head_is_subject, head.gender)], *inner_tgt, verb_tgt]
    return source, target, plural


def _clause(rng: random.Random, lexicon: Lexicon, slots: _NounSlots, relative: bool,
            prepositional: bool) -> tuple[list[str], list[str], list[str]]:
    """Subject - verb - object [- prepositional phrase]: the source, and the target's subject
    and the rest (object, prepositional phrase, verb last) apart, for the adverb to go between."""
    subject_src, subject_tgt, subject_plural = _subject(rng, lexicon, slots, relative)
    object_src, object_tgt, _ = _noun_phrase(rng, lexicon, slots.take())
    verb, past = rng.choice(VERBS), rng.random() < 0.5
    source = [*subject_src, _english_verb(verb, past, subject_plural), *object_src]
    rest = object_tgt
    if prepositional:
        preposition = rng.choice(PREPOSITIONS)
        phrase_src, phrase_tgt, _ = _noun_phrase(rng, lexicon, slots.take())
        source += [preposition, *phrase_src]
        rest += [lexicon.prepositions[preposition], *phrase_tgt]
    return source, subject_tgt, [*rest, lexicon.verbs[verb] + _VERB_ENDINGS[(past, subject_plural)]]


def generate_pair(rng: random.Random, lexicon: Lexicon) -> tuple[str, str]:
    """One clean sentence pair."""
    complement = rng.random() < _P_COMPLEMENT
    relative = rng.random() < _P_RELATIVE
    prepositional = rng.random() < _P_PREPOSITIONAL
    slots = _NounSlots(rng, lexicon, complement + 2 + relative + prepositional)
    adverb_src, adverb_tgt = [], []
    if rng.random() < _P_ADVERB:
        adverb = rng.choice(ADVERBS)
        adverb_src, adverb_tgt = [adverb], [lexicon.adverbs[adverb]]
    if complement:
        # The king says that <clause> <adverb>: lo king <adverb> di <clause, verb last> <say>.
        speaker_src, speaker_tgt, speaker_plural = _noun_phrase(rng, lexicon, slots.take())
        verb, past = rng.choice(CLAUSE_VERBS), rng.random() < 0.5
        inner_src, subject_tgt, rest_tgt = _clause(rng, lexicon, slots, relative, prepositional)
        source = [*speaker_src, _english_verb(verb, past, speaker_plural), "that", *inner_src]
        target = [*speaker_tgt, *adverb_tgt, _COMPLEMENTIZER, *subject_tgt, *rest_tgt,
                  lexicon.clause_verbs[verb] + _VERB_ENDINGS[(past, speaker_plural)]]
    else:
        # Subject, adverb, object, prepositional phrase, verb last.
        source, subject_tgt, rest_tgt = _clause(rng, lexicon, slots, relative, prepositional)
        target = [*subject_tgt, *adverb_tgt, *rest_tgt]
    return " ".join([*source, *adverb_src]) + " .", " ".join(target) + " ."


def _add_noise(rng: random.Random, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Training pairs with ``_NOISY_FRACTION`` of them spoiled as crawled data is: half given
    another pair's target (misaligned), half with the target cut to 30-70 % of its words
    (partial)."""
    noisy = list(pairs)
    for index in rng.sample(range(len(pairs)), round(_NOISY_FRACTION * len(pairs))):
        source, target = pairs[index]
        if rng.random() < 0.5:
            target = pairs[rng.randrange(len(pairs))][1]
        else:
            words = target.split()
            target = " ".join(words[: max(1, round(len(words) * rng.uniform(0.3, 0.7)))])
        noisy[index] = (source, target)
    return noisy


def generate_corpus(
    train_pairs: int, dev_pairs: int, test_pairs: int, seed: int, noise: bool = True
) -> dict[str, list[tuple[str, str]]]:
    """Distinct pairs for train, dev and test (no dev or test source sentence occurs in train);
    only the training pairs are noisy (unless ``noise`` is False)."""
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
    if noise:
        splits["train"] = _add_noise(rng, splits["train"])
    return splits


def _sgm(pairs: list[tuple[str, str]], side: int, kind: str, set_id: str) -> str:
    lines = [f'<{kind} setid="{set_id}" srclang="src" trglang="tgt">']
    for document_start in range(0, len(pairs), 50):
        lines.append(f'<doc sysid="ref" docid="doc{document_start // 50 + 1}" genre="news" '
                     'origlang="src">')
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
        "dev/newstest-tiny-src.src.sgm": _sgm(splits["dev"], 0, "srcset", "newstest-tiny"),
        "dev/newstest-tiny-ref.tgt.sgm": _sgm(splits["dev"], 1, "refset", "newstest-tiny"),
        "test/newstest-tiny-src.src.sgm": _sgm(splits["test"], 0, "srcset", "newstest-tiny-test"),
        "test/newstest-tiny-ref.tgt.sgm": _sgm(splits["test"], 1, "refset", "newstest-tiny-test"),
    }


def write_tiny_corpus_archive(
    path: Path, train_pairs: int = 20_000, dev_pairs: int = 300, test_pairs: int = 300
) -> Path:
    """A byte-reproducible .tgz (:func:`reproduce.data.archives.write_reproducible_tgz`)."""
    corpus = generate_corpus(train_pairs, dev_pairs, test_pairs, seed=2017)
    return write_reproducible_tgz(path, archive_members(corpus))
