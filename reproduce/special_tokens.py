"""Ids of the special tokens, fixed when the sentencepiece model is trained.

A source sentence is encoded as ``x_1 .. x_n EOS``; the decoder reads ``BOS y_1 .. y_m`` and is
trained to predict ``y_1 .. y_m EOS``. Batches are right-padded with ``PAD``.
"""

PAD = 0
UNK = 1
BOS = 2
EOS = 3
