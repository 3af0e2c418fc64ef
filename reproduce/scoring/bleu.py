"""BLEU two ways (section 6.1 reports BLEU on newstest2014, Table 2; newstest2013, Table 3).

* **sacreBLEU** on detokenized output with its default ``13a`` tokenization, reported with its
  signature: the number comparable across papers.
* **The paper's tokenized BLEU**, as tensor2tensor's ``get_ende_bleu.sh`` computed it:

  1. ``tokenizer.perl -l <lang>`` on the hypotheses (here sacremoses, Moses' own port, with the
     script's defaults: HTML-escaping on, no aggressive hyphen splitting);
  2. compound splitting ``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'``, so that a
     hyphenated compound ``a-b`` scores as the three tokens ``a ##AT##-##AT## b``;
  3. ``multi-bleu.perl``: corpus BLEU on whitespace tokens, no smoothing, which is sacreBLEU with
     ``tokenize='none'`` and ``smooth_method='none'`` (identical to the digit).

  tensor2tensor scored against Stanford's pre-tokenized ``newstest2014.tok.de``; we tokenize the
  plain reference with the same tokenizer. Escaping is a one-to-one rewrite of single
  characters applied to both sides, so it does not change the score.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from sacrebleu.metrics import BLEU
from sacremoses import MosesTokenizer

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


def paper_tokenize(sentence: str, language: str) -> str:
    """``tokenizer.perl -l <language>`` then ``get_ende_bleu.sh``'s compound split."""
    tokens = _moses_tokenizer(language).tokenize(
        sentence, return_str=True, escape=True, aggressive_dash_splits=False
    )
    return _HYPHENATED_COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokens)


def tokenized_bleu(hypotheses: list[str], references: list[str], language: str) -> float:
    """The paper's BLEU: Moses-tokenized, compound-split, scored like ``multi-bleu.perl``."""
    multi_bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    return multi_bleu.corpus_score(
        [paper_tokenize(line, language) for line in hypotheses],
        [[paper_tokenize(line, language) for line in references]],
    ).score


def _read_lines(path: Path) -> list[str]:
    """One sentence per ``\\n``-terminated line (unlike str.splitlines, which would also break
    on characters such as U+2028 or form feed that may occur inside a sentence)."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def score_translations(hypothesis_file: Path, reference_file: Path, language: str) -> dict:
    """Both BLEUs of a file of detokenized hypotheses against a file of references."""
    hypotheses, references = _read_lines(Path(hypothesis_file)), _read_lines(Path(reference_file))
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{hypothesis_file} has {len(hypotheses)} lines but {reference_file} has "
            f"{len(references)}; expected one hypothesis per reference line"
        )
    if not references:
        raise ValueError(f"{hypothesis_file} and {reference_file} are empty: nothing to score")
    sacre, signature = sacrebleu_score(hypotheses, references)
    return {
        "sacrebleu": sacre,
        "sacrebleu_signature": signature,
        "tokenized_bleu": tokenized_bleu(hypotheses, references, language),
        "sentences": len(hypotheses),
    }
