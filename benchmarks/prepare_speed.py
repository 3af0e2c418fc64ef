"""Data preparation speed: cleaning, sentencepiece training and encoding, per million pairs.

Generates WMT-like text (Zipf-distributed words, sentence lengths around 25 words), packs it as
a statmt-style .tgz, and times the pipeline's own functions on it. Prints a markdown table.

    .venv/bin/python benchmarks/prepare_speed.py --pairs 200000 --vocab-size 37000
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import sentencepiece

from reproduce.config import BpeConfig, Cleaning, Source
from reproduce.data.bpe import encode_split, train_sentencepiece
from reproduce.data.download import file_name
from reproduce.data.prepare import prepare_split


def synthetic_side(rng: np.random.Generator, words: np.ndarray, lengths: np.ndarray) -> list[str]:
    ranks = (rng.zipf(1.1, lengths.sum()) - 1) % len(words)
    flat, lines, start = words[ranks], [], 0
    for length in lengths:
        lines.append(" ".join(flat[start : start + length]) + " .")
        start += length
    return lines


def make_archive(folder: Path, pairs: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzäöüé"))
    words = np.array(["".join(rng.choice(letters, rng.integers(2, 11))) for _ in range(60_000)])
    source_lengths = np.clip(rng.lognormal(np.log(22), 0.5, pairs), 1, 120).astype(int)
    target_lengths = np.clip(source_lengths * rng.normal(1.05, 0.12, pairs), 1, 120).astype(int)
    for side, lengths in (("en", source_lengths), ("de", target_lengths)):
        lines = synthetic_side(rng, words, lengths)
        (folder / f"corpus.{side}").write_text("\n".join(lines) + "\n")
    archive = folder / "corpus.tgz"
    with tarfile.open(archive, "w:gz") as bundle:
        for side in ("en", "de"):
            bundle.add(folder / f"corpus.{side}", arcname=f"training/corpus.de-en.{side}")
    return archive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--vocab-size", type=int, default=37_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        make_archive(folder, args.pairs, args.seed)
        source = Source(name="synthetic", url="file:corpus.tgz",
                        source_member="training/corpus.de-en.en",
                        target_member="training/corpus.de-en.de")
        (folder / "corpus.tgz").replace(folder / file_name(source))  # where `download` puts it
        timings = {}
        started = time.perf_counter()
        report = prepare_split([source], "train", folder, folder / "data", Cleaning())
        timings["extract + normalise + clean"] = time.perf_counter() - started
        started = time.perf_counter()
        model = train_sentencepiece(folder / "data/train.src", folder / "data/train.tgt",
                                    BpeConfig(vocab_size=args.vocab_size), folder / "bpe/spm")
        pieces = sentencepiece.SentencePieceProcessor(model_file=str(model)).vocab_size()
        timings[f"sentencepiece BPE training ({pieces} pieces)"] = time.perf_counter() - started
        started = time.perf_counter()
        encode_split(model, folder / "data/train.src", folder / "data/train.tgt",
                     folder / "encoded")
        timings["encoding (all cores)"] = time.perf_counter() - started
    peak_mib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    print(f"{args.pairs} synthetic pairs ({report['kept']} kept after cleaning), "
          f"{platform.processor() or platform.machine()}, cores: {len(os.sched_getaffinity(0))}\n")
    print("| stage | seconds | seconds per million pairs |")
    print("|---|---|---|")
    for stage, seconds in timings.items():
        print(f"| {stage} | {seconds:.1f} | {seconds / args.pairs * 1e6:.0f} |")
    print(f"| peak resident memory | {peak_mib:.0f} MiB | |")


if __name__ == "__main__":
    main()
