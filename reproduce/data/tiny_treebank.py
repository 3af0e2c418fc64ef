"""The embedded tiny treebank: Penn-Treebank-style trees of a small English-like grammar, so that
the parsing experiment (paper section 6.3, Table 4) runs end to end in minutes on a CPU.

The trees are drawn from a seeded probabilistic grammar with the WSJ's phrase labels (S, SBAR,
NP, VP, PP, ADJP, ADVP, PRT, WHNP), commas after fronted adverbs and between coordinated
clauses, a final period, and what the standard preprocessing removes: function tags
(``NP-SBJ``, ``PP-LOC``, ``ADJP-PRD``...), co-indexed traces of relative clauses
(``(WHNP-1 (WDT that)) (S (NP-SBJ (-NONE- *T*-1)) ...)``) and null complementizers
(``(SBAR (-NONE- 0) (S ...))``). Once cleaned, the last two leave unary chains (``SBAR -> S``,
``S -> VP``) as the real treebank does. The structure is a function of the words (prepositions
of location attach to the verb, *of* to the noun, modifiers to the innermost clause), so a
parser can reach 100 F1.

Sentences have 5 to 25 words. Like the WSJ in Treebank-3, the trees are written as multi-line
``.mrg`` files inside ``tiny_treebank/parsed/mrg/wsj/<section>/``: sections 02-21 train, 22 dev,
23 test (the standard split), and no dev or test sentence occurs in training. The archive ships
as ``configs/data/tiny_treebank.tgz`` and is rebuilt byte for byte by
``python -m reproduce make-tiny-treebank --out OUT``.
"""

from __future__ import annotations

import random
from pathlib import Path

from reproduce.data.archives import write_reproducible_tgz
from reproduce.parsing.trees import Tree, clean_tree, leaves

ROOT_FOLDER = "tiny_treebank/parsed/mrg/wsj"
SECTIONS = {"train": [f"{section:02d}" for section in range(2, 22)], "dev": ["22"], "test": ["23"]}
TREES_PER_FILE = 50
MIN_WORDS, MAX_WORDS = 5, 25

SINGULAR_NOUNS = (
    "dog cat bird horse farmer teacher child doctor king queen river city village house garden "
    "tree book letter song story ship market window door table friend student painter baker sailor"
).split()
PROPER_NOUNS = "Alice Bob Carol David Emma Frank Paris London Rome".split()
SUBJECT_PRONOUNS = {"he": False, "she": False, "it": False, "they": True, "we": True}
OBJECT_PRONOUNS = {"him": False, "her": False, "it": False, "them": True, "us": True}
ADJECTIVES = "big small old young red green happy quiet tall bright brave clever".split()
DEGREE_ADVERBS = "very quite rather".split()
MANNER_ADVERBS = "quickly slowly carefully happily".split()
TIME_ADVERBS = "yesterday today again".split()
TRANSITIVE_VERBS = {"saw": "see", "liked": "like", "found": "find", "helped": "help",
                    "followed": "follow", "called": "call", "visited": "visit",
                    "watched": "watch", "painted": "paint", "built": "build", "opened": "open"}
INTRANSITIVE_VERBS = "slept laughed arrived waited smiled walked".split()
PHRASAL_VERBS = {"picked": "up", "put": "down", "turned": "off", "gave": "away", "threw": "out"}
SAYING_VERBS = "said thought knew believed".split()
MODALS = "will could should might".split()
LOCATIVE_PREPOSITIONS = "near behind under beside with".split()
DIRECTIONAL_PREPOSITIONS = "into toward".split()


class _Generator:
    """One tree's generator: the random source and the co-index counter of its traces."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.indices = 0

    def chance(self, probability: float) -> bool:
        return self.rng.random() < probability

    def pick(self, options) -> str:
        return self.rng.choice(list(options))

    # Clauses ----------------------------------------------------------------------------
    def sentence(self) -> Tree:
        if self.chance(0.08):
            body = [self.clause(0), _leaf(",", ","), _leaf("CC", "and"), self.clause(0)]
        else:
            body = list(self.clause(0).children)
        return Tree("", (Tree("S", (*body, _leaf(".", "."))),))

    def clause(self, depth: int) -> Tree:
        children = []
        if depth == 0 and self.chance(0.12):
            children += [Tree("ADVP-TMP", (_leaf("RB", self.pick(TIME_ADVERBS)),)), _leaf(",", ",")]
        subject, plural = self.noun_phrase(relative=depth == 0, subject=True)
        children += [_retag(subject, "NP-SBJ"), self.verb_phrase(plural, depth)]
        return Tree("S", tuple(children))

    def verb_phrase(self, plural: bool, depth: int) -> Tree:
        kind = self.pick(["transitive"] * 4 + ["intransitive"] * 2 + ["phrasal", "copula", "modal"]
                         + ["saying"] * (2 if depth < 2 else 0))
        if kind == "saying":  # the complement clause is last: nothing follows it in this VP
            complementizer = _leaf("-NONE-", "0") if self.chance(0.4) else _leaf("IN", "that")
            return Tree("VP", (_leaf("VBD", self.pick(SAYING_VERBS)),
                               Tree("SBAR", (complementizer, self.clause(depth + 1)))))
        if kind == "copula":
            adjective = _leaf("JJ", self.pick(ADJECTIVES))
            phrase = ((_leaf("RB", self.pick(DEGREE_ADVERBS)), adjective) if self.chance(0.4)
                      else (adjective,))
            return Tree("VP", (_leaf("VBD", "were" if plural else "was"), Tree("ADJP-PRD", phrase)))
        if kind == "modal":
            verb = self.pick(TRANSITIVE_VERBS.values())
            inner = (_leaf("VB", verb), self.noun_phrase()[0], *self.modifiers())
            return Tree("VP", (_leaf("MD", self.pick(MODALS)), Tree("VP", inner)))
        if kind == "phrasal":
            verb = self.pick(PHRASAL_VERBS)
            head = (_leaf("VBD", verb), Tree("PRT", (_leaf("RP", PHRASAL_VERBS[verb]),)),
                    self.noun_phrase()[0])
        elif kind == "transitive":
            head = (_leaf("VBD", self.pick(TRANSITIVE_VERBS)), self.noun_phrase()[0])
        else:
            head = (_leaf("VBD", self.pick(INTRANSITIVE_VERBS)),)
        return Tree("VP", (*head, *self.modifiers()))

    def modifiers(self) -> list[Tree]:
        """Optional trailing modifiers of a verb phrase: a PP, a manner and a time adverb."""
        found = []
        if self.chance(0.35):
            if self.chance(0.75):
                found.append(self.prepositional_phrase("PP-LOC", LOCATIVE_PREPOSITIONS))
            else:
                found.append(self.prepositional_phrase("PP-DIR", DIRECTIONAL_PREPOSITIONS))
        if self.chance(0.15):
            found.append(Tree("ADVP-MNR", (_leaf("RB", self.pick(MANNER_ADVERBS)),)))
        if self.chance(0.1):
            found.append(Tree("ADVP-TMP", (_leaf("RB", self.pick(TIME_ADVERBS)),)))
        return found

    def prepositional_phrase(self, label: str, prepositions) -> Tree:
        return Tree(label, (_leaf("IN", self.pick(prepositions)), self.noun_phrase()[0]))

    # Noun phrases -----------------------------------------------------------------------
    def noun_phrase(self, relative: bool = False, subject: bool = False) -> tuple[Tree, bool]:
        """A noun phrase and whether it is plural; ``relative`` allows a relative clause."""
        if self.chance(0.06):
            left, _ = self.simple_noun_phrase(subject)
            right, _ = self.simple_noun_phrase(subject)
            return Tree("NP", (left, _leaf("CC", "and"), right)), True
        phrase, plural = self.simple_noun_phrase(subject)
        if self.chance(0.12):
            phrase = Tree("NP",
                          (phrase, Tree("PP", (_leaf("IN", "of"), self.simple_noun_phrase()[0]))))
        elif relative and self.chance(0.2):
            phrase = Tree("NP", (phrase, self.relative_clause()))
        return phrase, plural

    def relative_clause(self) -> Tree:
        self.indices += 1
        index = self.indices
        verb = _leaf("VBD", self.pick(TRANSITIVE_VERBS))
        return Tree("SBAR", (
            Tree(f"WHNP-{index}", (_leaf("WDT", self.pick(["that", "which"])),)),
            Tree("S", (Tree("NP-SBJ", (_leaf("-NONE-", f"*T*-{index}"),)),
                       Tree("VP", (verb, self.simple_noun_phrase()[0])))),
        ))

    def simple_noun_phrase(self, subject: bool = False) -> tuple[Tree, bool]:
        draw = self.rng.random()
        if draw < 0.12:
            pronouns = SUBJECT_PRONOUNS if subject else OBJECT_PRONOUNS
            pronoun = self.pick(pronouns)
            return Tree("NP", (_leaf("PRP", pronoun),)), pronouns[pronoun]
        if draw < 0.24:
            return Tree("NP", (_leaf("NNP", self.pick(PROPER_NOUNS)),)), False
        plural = self.chance(0.35)
        noun = self.pick(SINGULAR_NOUNS)
        determiner = self.pick(["the", "some", "these"] if plural
                               else ["the", "a", "this", "every"])
        premodifiers = []
        if self.chance(0.15):
            premodifiers.append(Tree("ADJP", (_leaf("RB", self.pick(DEGREE_ADVERBS)),
                                              _leaf("JJ", self.pick(ADJECTIVES)))))
        else:
            premodifiers += [_leaf("JJ", adjective)
                             for adjective in self.rng.sample(ADJECTIVES,
                                                              self.pick([0, 0, 0, 1, 1, 2]))]
        head = _leaf("NNS", _plural(noun)) if plural else _leaf("NN", noun)
        if determiner == "a" and leaves(Tree("NP", (*premodifiers, head)))[0][0] in "aeiou":
            determiner = "an"
        return Tree("NP", (_leaf("DT", determiner), *premodifiers, head)), plural


def _leaf(tag: str, word: str) -> Tree:
    return Tree(tag, (word,))


def _retag(tree: Tree, label: str) -> Tree:
    return Tree(label, tree.children)


def _plural(noun: str) -> str:
    if noun == "child":
        return "children"
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def generate_tree(rng: random.Random) -> Tree:
    """One raw treebank tree (wrapper, function tags, traces) of 5 to 25 words."""
    while True:
        tree = _Generator(rng).sentence()
        if MIN_WORDS <= len(leaves(clean_tree(tree))) <= MAX_WORDS:
            return tree


def generate_treebank(train_trees: int, dev_trees: int, test_trees: int,
                      seed: int) -> dict[str, list[Tree]]:
    """Distinct sentences for train, dev and test (no dev or test sentence occurs in train)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[Tree]] = {}
    for split, count in (("dev", dev_trees), ("test", test_trees), ("train", train_trees)):
        trees = []
        while len(trees) < count:
            tree = generate_tree(rng)
            sentence = " ".join(leaves(clean_tree(tree)))
            if sentence not in seen:
                seen.add(sentence)
                trees.append(tree)
        splits[split] = trees
    return splits


# --------------------------------------------------------------------------------------------
# The archive
# --------------------------------------------------------------------------------------------
def mrg_text(trees: list[Tree]) -> str:
    """Trees as a Treebank-3 ``.mrg`` file: each over several indented lines, blank lines
    between."""
    return "".join(_mrg_lines(tree, 0) + "\n\n" for tree in trees)


def _mrg_lines(tree: Tree, indent: int) -> str:
    if tree.is_preterminal:
        return f"({tree.label} {tree.children[0]})"
    if all(child.is_preterminal for child in tree.children):
        return f"({tree.label} {' '.join(_mrg_lines(child, 0) for child in tree.children)} )"
    inner = ("\n" + " " * (indent + 2)).join(_mrg_lines(child, indent + 2)
                                             for child in tree.children)
    return f"({tree.label} {inner} )"


def archive_members(splits: dict[str, list[Tree]]) -> dict[str, str]:
    """Member path -> text: each split's trees spread evenly over its sections, 50 per file."""
    members = {}
    for split, sections in SECTIONS.items():
        trees = splits[split]
        per_section = -(-len(trees) // len(sections))
        for index, section in enumerate(sections):
            share = trees[index * per_section : (index + 1) * per_section]
            for file_number, start in enumerate(range(0, len(share), TREES_PER_FILE)):
                name = f"{ROOT_FOLDER}/{section}/wsj_{section}{file_number:02d}.mrg"
                members[name] = mrg_text(share[start : start + TREES_PER_FILE])
    return members


def write_tiny_treebank_archive(path: Path) -> Path:
    """A byte-reproducible .tgz (:func:`reproduce.data.archives.write_reproducible_tgz`)."""
    treebank = generate_treebank(train_trees=3000, dev_trees=300, test_trees=300, seed=2017)
    return write_reproducible_tgz(path, archive_members(treebank))
