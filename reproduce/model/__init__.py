"""The Transformer of section 3, one module per concept of the paper."""
