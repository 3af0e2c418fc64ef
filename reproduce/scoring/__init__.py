"""Scoring: BLEU (sacreBLEU and the paper's tokenized BLEU) and perplexity."""
