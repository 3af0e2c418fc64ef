"""Reproduction of "Attention Is All You Need" (Vaswani et al., 2017) as a PyTorch package.

The Snakemake workflow calls this package through its command line (``python -m reproduce``);
the package itself never imports Snakemake.
"""
