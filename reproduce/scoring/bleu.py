"""BLEU two ways (section 6.1 reports BLEU on newstest2014, Table 2; newstest2013, Table 3).

Both score against the official references as released (:mod:`reproduce.data.references`), never
against the normalised copy the model is trained and evaluated on.

* **sacreBLEU** on detokenized output with its default ``13a`` tokenization, reported with its
  signature: the number comparable across papers.
* **The paper's tokenized BLEU**, as tensor2tensor's ``get_ende_bleu.sh`` computed it:

  1. ``replace-unicode-punctuation.perl`` (sacremoses'
     ``MosesPunctNormalizer.replace_unicode_punct``, the same table of full-width and typographic
     punctuation: ``“ ” → "``, ``’ → '``,
     ``… → ...``, ``， → ,`` ...; German ``„`` is not in it and stays);
  2. ``tokenizer.perl -l <lang>`` (here sacremoses, Moses' own port, with the script's defaults:
     HTML-escaping on, no aggressive hyphen splitting);
  3. compound splitting ``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'``, so that a
     hyphenated compound ``a-b`` scores as the three tokens ``a ##AT##-##AT## b``. The paper
     does not say how EN-FR was scored, and get_ende_bleu.sh is EN-DE's script, its split taken
     from Stanford's EN-DE data. Our choice (``scoring.compound_split`` in the experiment file):
     on for EN-DE, off for EN-FR, which is scored with steps 1, 2 (``-l fr``) and 4 only;
  4. ``multi-bleu.perl``: corpus BLEU on whitespace tokens, no smoothing, which is sacreBLEU with
     ``tokenize='none'`` and ``smooth_method='none'`` (identical to the digit).

  tensor2tensor normalised and tokenized its hypotheses and scored them against Stanford's
  pre-tokenized ``newstest2014.tok.de``; we put the official plain reference through the same
  steps 1-3 as the hypotheses, so that both sides are tokenized alike.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from sacrebleu.metrics import BLEU
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from reproduce.errors import DataError
from reproduce.files import read_text

# Perl's s{...}{...}g scans left to right without overlaps, exactly like re.sub: "a-b-c"
# becomes "a ##AT##-##AT## b-c" in both.
_HYPHENATED_COMPOUND = re.compile(r"(\S)-(\S)")


def sacrebleu_score(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    """Corpus sacreBLEU of detokenized lines, and its signature (``nrefs:1|case:mixed|...``)."""
    metric = BLEU()
    score = metric.corpus_score(hypotheses, [references])
    return score.score, str(metric.get_signature())


@lru_cache(maxsize=None)
def _moses_tokenizer(language: str) -> MosesTokenizer:
    return MosesTokenizer(lang=language)


@lru_cache(maxsize=None)
def _punctuation_normalizer() -> MosesPunctNormalizer:
    return MosesPunctNormalizer()


def replace_unicode_punctuation(sentence: str) -> str:
    """Moses' ``replace-unicode-punctuation.perl`` (language independent)."""
    return _punctuation_normalizer().replace_unicode_punct(sentence)


def paper_tokenize(sentence: str, language: str, compound_split: bool = True) -> str:
    """``get_ende_bleu.sh``'s steps before multi-bleu: replace-unicode-punctuation,
    ``tokenizer.perl -l <language>``, then (when ``compound_split``) the ##AT## split."""
    tokens = _moses_tokenizer(language).tokenize(
        replace_unicode_punctuation(sentence), return_str=True, escape=True,
        aggressive_dash_splits=False,
    )
    if not compound_split:
        return tokens
    return _HYPHENATED_COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokens)


def tokenized_bleu(hypotheses: list[str], references: list[str], language: str,
                   compound_split: bool = True) -> float:
    """The paper's BLEU: punctuation-normalised, Moses-tokenized, optionally compound-split,
    scored like ``multi-bleu.perl``."""
    multi_bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    return multi_bleu.corpus_score(
        [paper_tokenize(line, language, compound_split) for line in hypotheses],
        [[paper_tokenize(line, language, compound_split) for line in references]],
    ).score


def _read_lines(path: Path) -> list[str]:
    """One sentence per ``\\n``-terminated line (unlike str.splitlines, which would also break
    on characters such as U+2028 or form feed that may occur inside a sentence)."""
    text = read_text(path)  # UTF-8 or an error naming the line
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def score_translations(hypothesis_file: Path, reference_file: Path, language: str,
                       compound_split: bool = True) -> dict:
    """Both BLEUs of a file of detokenized hypotheses against a file of official references."""
    hypotheses, references = _read_lines(Path(hypothesis_file)), _read_lines(Path(reference_file))
    if len(hypotheses) != len(references):
        raise DataError(
            f"{hypothesis_file} has {len(hypotheses)} lines but {reference_file} has "
            f"{len(references)}; expected one hypothesis per reference line"
        )
    if not references:
        raise DataError(f"{hypothesis_file} and {reference_file} are empty: nothing to score")
    sacre, signature = sacrebleu_score(hypotheses, references)
    return {
        "sacrebleu": sacre,
        "sacrebleu_signature": signature,
        "tokenized_bleu": tokenized_bleu(hypotheses, references, language, compound_split),
        "tokenized_bleu_compound_split": compound_split,
        "sentences": len(hypotheses),
    }
