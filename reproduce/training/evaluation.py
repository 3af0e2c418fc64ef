"""Teacher-forced negative log-likelihood of a corpus: dev loss during training, and Table 3's
perplexity per target word-piece. Shared across ranks when torch.distributed is initialised."""

from __future__ import annotations

import torch

from reproduce.data.encoded import EncodedCorpus
from reproduce.model.encoder_decoder import TranslationModel
from reproduce.stage_progress import StageProgress
from reproduce.training import distributed
from reproduce.training.batching import collate, evaluation_batches
from reproduce.training.loss import negative_log_likelihood


@torch.no_grad()
def corpus_negative_log_likelihood(
    model: TranslationModel, corpus: EncodedCorpus, max_tokens: int, device: torch.device,
    progress: StageProgress | None = None,
) -> tuple[float, int]:
    """Summed NLL and number of predicted tokens (every word-piece and EOS, never padding); the
    sentences are counted on ``progress`` as they are scored (minutes on a CPU for a big model)."""
    was_training = model.training
    model.eval()
    rank, world = distributed.rank(), distributed.world_size()
    total = torch.zeros(2, dtype=torch.float64, device=device)
    for indices in evaluation_batches(corpus, max_tokens)[rank::world]:
        batch = collate(corpus, indices).to(device)
        loss, tokens = negative_log_likelihood(model(batch.source, batch.target_input),
                                               batch.target_output)
        total += torch.tensor([loss.item(), tokens], dtype=torch.float64, device=device)
        if progress is not None:
            progress.update(len(indices))
    distributed.all_reduce_sum(total)
    model.train(was_training)
    return float(total[0]), int(total[1])
