"""The longest lines of test sets in words, characters and sentencepiece pieces: what
``decoding.max_source_pieces`` must leave room for (docs/configuration.md, RELIABILITY.md).

Each file is WMT's SGM (its ``<seg>`` text, read as ``prepare`` reads it) or plain text, one
sentence a line. Pieces come from a BPE trained on the measured files themselves, with the
project's settings (:func:`reproduce.data.bpe.train_sentencepiece`), at each ``--vocab`` size: a
vocabulary learned from a few thousand sentences cuts words into more pieces than the paper's 37k
learned from millions do, so its counts are upper estimates of a trained model's. Pieces count
the end of sentence, as the bound does.

    .venv/bin/python benchmarks/line_lengths.py newstest2014-deen-src.en.sgm newstest2013.en \\
        --vocab 2000 8000
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from reproduce.config import BpeConfig
from reproduce.data.bpe import load_sentencepiece, train_sentencepiece
from reproduce.data.sgm import read_sgm
from reproduce.files import read_lines


def sentences(path: Path) -> list[str]:
    return read_sgm(path) if path.suffix == ".sgm" else read_lines(path)


def longest(lengths: list[int]) -> str:
    """``most (line N)`` of per-line lengths: the first line that long."""
    top = max(range(len(lengths)), key=lengths.__getitem__)
    return f"{lengths[top]} (line {top + 1})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="SGM (.sgm) or plain text files")
    parser.add_argument("--vocab", nargs="+", type=int, default=[2000, 8000],
                        help="sizes of the BPE vocabularies trained on the files")
    args = parser.parse_args()
    texts = {path: sentences(path) for path in args.files}
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "all.txt"
        corpus.write_text("".join(line + "\n" for lines in texts.values() for line in lines),
                          encoding="utf-8")
        processors = {
            size: load_sentencepiece(train_sentencepiece(
                corpus, corpus, BpeConfig(vocab_size=size), Path(folder) / f"bpe{size}"))
            for size in args.vocab
        }
        for path, lines in texts.items():
            print(f"{path.name}: {len(lines)} lines")
            print(f"  words      {longest([len(line.split()) for line in lines])}")
            print(f"  characters {longest([len(line) for line in lines])}")
            for processor in processors.values():
                pieces = [len(ids) + 1 for ids in processor.encode(lines)]  # and its EOS
                print(f"  pieces, BPE of {processor.vocab_size():>5}: {longest(pieces)}")


if __name__ == "__main__":
    main()
