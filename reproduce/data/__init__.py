"""Data: download, extraction and cleaning, sentencepiece BPE, binarized token ids (section 5.1)."""
