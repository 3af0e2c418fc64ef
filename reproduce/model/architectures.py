"""The model a configuration names (``model.architecture``): the Transformer of section 3, or the
recurrent baseline of Table 2. Both offer the same interface to training, beam search,
perplexity and translation (:class:`reproduce.model.encoder_decoder.TranslationModel`); code that
only uses a model names that, and only the code that builds one imports this module."""

from __future__ import annotations

from reproduce.config import ModelConfig
from reproduce.model.recurrent import RecurrentSeq2Seq
from reproduce.model.transformer import Transformer

Seq2Seq = Transformer | RecurrentSeq2Seq


def build_model(config: ModelConfig, vocab_size: int) -> Seq2Seq:
    """A freshly initialised model of ``config.architecture``."""
    if config.architecture == "rnn":
        return RecurrentSeq2Seq(config, vocab_size)
    return Transformer(config, vocab_size)
