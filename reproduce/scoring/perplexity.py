"""Perplexity per target word-piece (Table 3's PPL column), teacher-forced on an encoded split.

PPL = exp(total negative log-likelihood / number of predicted tokens), where every target
word-piece and the closing EOS is predicted, padding is not, and no label smoothing is applied.
The sentences scored, rate and ETA are logged as it goes: minutes on a CPU for the big model.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch

from reproduce.data.encoded import EncodedCorpus
from reproduce.decoding.translate import decoding_device, load_model
from reproduce.model.architectures import Seq2Seq
from reproduce.provenance import Pieces
from reproduce.stage_progress import StageProgress
from reproduce.training.evaluation import corpus_negative_log_likelihood

log = logging.getLogger(__name__)


def checkpoint_perplexity(checkpoint: Path, encoded: Path, max_tokens: int = 4096,
                          expected_settings: dict | None = None) -> dict:
    """Perplexity of ``checkpoint`` on the split ``encoded``; refused, as decoding is, for a
    checkpoint trained with other settings or on another sentencepiece model's pieces."""
    device = decoding_device()
    corpus = EncodedCorpus.open(encoded)
    model = load_model(checkpoint, device, expected_settings, (Pieces.of_corpus(corpus),))
    return model_perplexity(model, corpus, device, max_tokens)


def model_perplexity(model: Seq2Seq, corpus: EncodedCorpus, device: torch.device,
                     max_tokens: int = 4096) -> dict:
    """Perplexity of ``model`` (on ``device``, checked against the corpus's pieces) on
    ``corpus``."""
    with StageProgress(f"perplexity on {corpus.directory}", len(corpus), "sentences",
                       log) as progress:
        total, tokens = corpus_negative_log_likelihood(model, corpus, max_tokens, device, progress)
    loss = total / tokens
    return {"loss_per_token": loss, "perplexity": math.exp(loss), "target_tokens": tokens}
