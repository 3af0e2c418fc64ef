"""Perplexity per target word-piece equals exp of the mean per-token loss computed by hand."""

import math

import pytest
import torch

from reproduce.config import ModelConfig
from reproduce.data.encoded import EncodedCorpus
from reproduce.model.transformer import Transformer
from reproduce.scoring.perplexity import checkpoint_perplexity
from reproduce.special_tokens import BOS, EOS
from reproduce.training import distributed
from reproduce.training.checkpoints import save_checkpoint
from reproduce.training.evaluation import corpus_negative_log_likelihood
from tests.training_fixtures import VOCAB, random_corpus


def test_perplexity_is_exp_of_the_mean_token_loss(tmp_path):
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "dev", 30, seed=9))
    torch.manual_seed(0)
    config = ModelConfig(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8, dropout=0.3)
    model = Transformer(config, VOCAB)
    save_checkpoint({"model": model.state_dict(), "model_config": config.model_dump(),
                     "vocab_size": VOCAB, "step": 1}, tmp_path / "model.pt")
    model.eval()
    total, tokens = 0.0, 0
    for i in range(len(corpus)):  # one sentence at a time: no padding anywhere
        source = torch.tensor([corpus.source(i).tolist() + [EOS]])
        target = corpus.target(i).tolist()
        with torch.no_grad():
            log_probs = torch.log_softmax(model(source, torch.tensor([[BOS] + target])), dim=-1)[0]
        for position, token in enumerate(target + [EOS]):
            total -= log_probs[position, token].item()
            tokens += 1
    result = checkpoint_perplexity(tmp_path / "model.pt", tmp_path / "dev", max_tokens=50)
    assert result["target_tokens"] == tokens
    assert result["perplexity"] == __import__("pytest").approx(math.exp(total / tokens), rel=1e-5)


def test_the_dev_loss_of_a_training_model_is_computed_without_dropout(tmp_path):
    """The trainer's dev loss is taken from a model in training mode: it is scored as in eval
    mode (dropout 0.3 off), to the same sum, and the model is handed back training."""
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "dev", 20, seed=9))
    torch.manual_seed(0)
    config = ModelConfig(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8, dropout=0.3)
    model = Transformer(config, VOCAB).train()
    while_training = corpus_negative_log_likelihood(model, corpus, 50, torch.device("cpu"))
    assert model.training
    expected = corpus_negative_log_likelihood(model.eval(), corpus, 50, torch.device("cpu"))
    assert while_training == expected


def test_ranks_share_the_corpus_so_their_summed_losses_are_the_whole_corpus(tmp_path,
                                                                             monkeypatch):
    """Across ranks each batch is scored by exactly one rank: the two ranks' sums (before the
    all-reduce that adds them) are the one-rank loss and token count, never a half scored twice
    nor the whole scored by each."""
    corpus = EncodedCorpus.open(random_corpus(tmp_path / "dev", 30, seed=9))
    torch.manual_seed(0)
    model = Transformer(ModelConfig(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8,
                                    dropout=0.0), VOCAB)
    cpu = torch.device("cpu")
    whole = corpus_negative_log_likelihood(model, corpus, 40, cpu)
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    shares = []
    for rank in (0, 1):
        monkeypatch.setattr(distributed, "rank", lambda rank=rank: rank)
        shares.append(corpus_negative_log_likelihood(model, corpus, 40, cpu))
    assert all(tokens > 0 for _, tokens in shares)
    assert sum(tokens for _, tokens in shares) == whole[1]
    assert sum(total for total, _ in shares) == pytest.approx(whole[0], rel=1e-6)
