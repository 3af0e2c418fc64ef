"""Inference: beam search (section 6.1) and translation of text files."""
