"""Figures beside the tables: the attention heads of Figures 3-5."""
