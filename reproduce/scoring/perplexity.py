"""Perplexity per target word-piece (Table 3's PPL column), teacher-forced on an encoded split.

PPL = exp(total negative log-likelihood / number of predicted tokens), where every target
word-piece and the closing EOS is predicted, padding is not, and no label smoothing is applied.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from reproduce.data.encoded import EncodedCorpus
from reproduce.decoding.translate import VocabularyMismatchError, load_model
from reproduce.training.evaluation import corpus_negative_log_likelihood


def checkpoint_perplexity(checkpoint: Path, encoded: Path, max_tokens: int = 4096) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_model(checkpoint, device)
    corpus = EncodedCorpus.open(encoded)
    if corpus.vocab_size != model.vocab_size:
        raise VocabularyMismatchError(
            f"{encoded}: encoded with a vocabulary of {corpus.vocab_size}, but {checkpoint} was "
            f"trained with one of {model.vocab_size}; use the encoded split of its dataset"
        )
    total, tokens = corpus_negative_log_likelihood(model, corpus, max_tokens, device)
    loss = total / tokens
    return {"loss_per_token": loss, "perplexity": math.exp(loss), "target_tokens": tokens}
