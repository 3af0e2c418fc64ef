"""The Transformer of section 3, one module per concept of the paper, and the recurrent baseline
of Table 2 (recurrent.py), built by architectures.build_model."""
