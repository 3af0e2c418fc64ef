"""BLEU two ways.

* **sacreBLEU** on detokenized output (its default 13a tokenization), reported with its
  signature: comparable across papers.
* **The paper's tokenized BLEU**, as tensor2tensor's ``get_ende_bleu.sh`` computed it: Moses
  tokenization of hypothesis and reference (``tokenizer.perl -l <lang>``, here sacremoses),
  compound splitting of hyphenated words (``a-b`` -> ``a ##AT##-##AT## b``), then BLEU on the
  tokens with no further tokenization (``multi-bleu.perl``; sacreBLEU's ``tokenize='none'``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from sacrebleu.metrics import BLEU
from sacremoses import MosesTokenizer

_COMPOUND = re.compile(r"(\S)-(\S)")


def sacrebleu_score(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    metric = BLEU()
    score = metric.corpus_score(hypotheses, [references])
    return score.score, str(metric.get_signature())


@lru_cache(maxsize=None)
def _moses(language: str) -> MosesTokenizer:
    return MosesTokenizer(lang=language)


def paper_tokenize(sentence: str, language: str) -> str:
    """Moses tokenization then the compound split of ``get_ende_bleu.sh``."""
    tokenized = _moses(language).tokenize(sentence, return_str=True, escape=True)
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokenized)


def tokenized_bleu(hypotheses: list[str], references: list[str], language: str) -> float:
    metric = BLEU(tokenize="none", smooth_method="none", force=True)  # multi-bleu.perl
    hypotheses = [paper_tokenize(line, language) for line in hypotheses]
    references = [paper_tokenize(line, language) for line in references]
    return metric.corpus_score(hypotheses, [references]).score


def score_translations(hypothesis_file: Path, reference_file: Path, language: str) -> dict:
    hypotheses = hypothesis_file.read_text(encoding="utf-8").splitlines()
    references = reference_file.read_text(encoding="utf-8").splitlines()
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{hypothesis_file} has {len(hypotheses)} lines but {reference_file} has {len(references)}"
        )
    sacre, signature = sacrebleu_score(hypotheses, references)
    return {
        "sacrebleu": sacre,
        "sacrebleu_signature": signature,
        "tokenized_bleu": tokenized_bleu(hypotheses, references, language),
        "sentences": len(hypotheses),
    }
