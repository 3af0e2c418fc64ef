"""English constituency parsing (paper section 6.3, Table 4): Penn Treebank trees, their
linearisation as Vinyals & Kaiser et al. (2014) translate them, and EVALB's bracket scores."""
